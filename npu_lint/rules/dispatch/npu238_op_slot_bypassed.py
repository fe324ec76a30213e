"""NPU238 op-slot-bypassed."""

from __future__ import annotations

import ast
import bisect
import functools
import re

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._handles import (
    HANDLE_CONSTRUCTORS,
    constructor_kind,
    module_handle_names,
    post_import_blocks,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule

# words a kernel's name adds to its operator's without naming another operator (`FusedRMSNormGated`,
# `causal_conv1d_fn`, `rms_norm_kernel`), vendor words included (`LigerRMSNorm`, `npu_rms_norm`); `torch` is not
# one: `torch_chunk_gated_delta_rule` is the eager fallback a slot's `bound_kernel() or ...` names
_FILLER = frozenset(
    {
        "fused",
        "fn",
        "func",
        "forward",
        "kernel",
        "impl",
        "op",
        "liger",
        "triton",
        "fla",
        "npu",
        "cuda",
        "tilelang",
        "quack",
    }
)
_UNSEEN = ("", "")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+\d*[a-z]*|[A-Z]+\d*[a-z]*|\d+[a-z]*")


@functools.lru_cache(maxsize=4096)
def op_key(name: str) -> str:
    """An identifier's words without filler, lower case and joined: ``FusedRMSNormGated`` and
    ``rms_norm_gated`` are both ``rmsnormgated``; ``causal_conv1d_fn`` and ``causal_conv1d`` ``causalconv1d``
    (a pure function of the text: remembered for the run's most recent 4,096 names)."""
    words: list[str] = []
    for part in name.split("_"):
        words.extend(w.lower() for w in _CAMEL.findall(part))
    return "".join(w for w in words if w not in _FILLER)


def _locals(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names ``func`` binds itself: parameters, assignments, imports, loop and ``with`` targets, nested defs."""
    args = func.args
    out = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    out.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    body = func.body if isinstance(func.body, list) else [func.body]
    declared_global: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                out.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_global.update(node.names)
    return out - declared_global


def _mentions(node: ast.AST, slot: str) -> bool:
    return any(isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n) == slot for n in ast.walk(node))


def _beside_slot(node: ast.Name, slot: str, parents: dict[int, ast.AST]) -> bool:
    """The name is the slot's own fallback or wrapper: in the statement that reads the slot (``slot.bound_kernel()
    or torch_x``, ``partial(x, op=slot)``), or under a test of it (the ``else`` of ``if slot.use_non_eager_impl``)."""
    current: ast.AST = node
    while id(current) in parents:
        parent = parents[id(current)]
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and _mentions(parent.test, slot):
            return True
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)) and _mentions(
            parent, slot
        ):
            return True  # a simple statement that reads the slot beside the name
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        current = parent
    return False


class OpSlotBypassed(Rule):
    code = "NPU238"
    name = "op-slot-bypassed"
    summary = (
        'A file that dispatches an operator through a slot or handle (`OpSlot("causal_conv1d", ...)`, '
        '`VeomniOp("rms_norm", ...)`) also reaches that operator\'s kernel directly, through the module-level '
        "name of the kernel (`causal_conv1d_fn`, `FusedRMSNormGated`, an import or its placeholder)."
    )
    why = (
        "Once an operator is dispatched by the ops config, its slot is the one place that knows which kernel the "
        "user chose for this device: `bind_veomni_ops` binds it from `OpsImplementationConfig` (`eager`, the "
        "GPU kernel, the Ascend one). The module-level kernel name the slot replaced is what importing a library "
        "left behind: a CUDA-only import (`from fla.modules import FusedRMSNormGated`), or the `None` placeholder "
        "kept so upstream code still resolves. Code that calls, stores or tests that name instead of the slot "
        "ignores the configured backend: on Ascend it binds a GPU kernel or `None` (the varlen path then raises), "
        "and the choice no longer follows the ops config. Read the kernel from the slot "
        "(`slot.bound_kernel()`, `if slot.use_non_eager_impl: slot(...)`) wherever the slot exists."
    )
    bad = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            causal_conv1d_fn = None  # placeholder: the kernel comes from the slot
            veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


            class ToyGatedDeltaNet(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.causal_conv1d_fn = causal_conv1d_fn
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="the NPU layer binds the placeholder, not the slot",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            causal_conv1d_fn = None  # placeholder: the kernel comes from the slot
            veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


            class ToyGatedDeltaNet(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.causal_conv1d_fn = veomni_causal_conv1d.bound_kernel()
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        ),
    )
    fix_safety = "No fix: read the kernel from the slot (`bound_kernel()`, `use_non_eager_impl`)."
    requires = (("OpSlot", "VeomniOp", "VeomniKernel", "resolve_op"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        slots: dict[str, tuple[str, str]] = {}  # op key -> (op name, the slot's name)
        bodies = [ctx.tree, *(b.tree for b in post_import_blocks(ctx))]
        for body in bodies:
            for assign in nodes_of(body, ast.Assign):
                assert isinstance(assign, ast.Assign)
                value = assign.value
                if not isinstance(value, ast.Call) or constructor_kind(value, ctx) not in HANDLE_CONSTRUCTORS:
                    continue
                op = str_value(value.args[0]) if value.args else None
                target = assign.targets[0]
                slot = ast.unparse(target) if len(assign.targets) == 1 else None
                if op and slot and op_key(op):
                    slots.setdefault(op_key(op), (op, slot))
        if not slots:
            return
        handles = module_handle_names(ctx)
        said: set[tuple[int, str]] = set()
        keys: dict[str, tuple[str, str] | None] = {}  # a loaded name -> the slot its op key names, if any
        lines: list[int] = []  # the lines of the file's loaded names that name a slot's operator
        for node in nodes_of(ctx.tree, ast.Name):
            assert isinstance(node, ast.Name)
            name = node.id
            found = keys.get(name, _UNSEEN)
            if found is _UNSEEN:
                found = keys[name] = slots.get(op_key(name))
            if found is not None and isinstance(node.ctx, ast.Load) and name not in handles:
                lines.append(node.lineno)
        if not lines:
            return
        lines.sort()
        for func in nodes_of(ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
            first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
            at = bisect.bisect_left(lines, first)
            if at == len(lines) or lines[at] > (func.end_lineno or func.lineno):
                continue  # no such name inside the function (its decorators included)
            bound: set[str] | None = None
            parents: dict[int, ast.AST] | None = None
            for node in nodes_of(func, ast.Name):
                assert isinstance(node, ast.Name)
                name = node.id
                if not isinstance(node.ctx, ast.Load) or name in handles:
                    continue
                found = keys.get(name)  # every name of the file was keyed above
                if found is None:
                    continue  # the common case: no slot's operator; the function's locals and parents are not needed
                if bound is None:
                    bound = _locals(func)
                if name in bound or (id(func), name) in said:
                    continue
                if parents is None:
                    parents = {id(c): p for p in ast.walk(func) for c in ast.iter_child_nodes(p)}
                if _beside_slot(node, found[1], parents):
                    continue
                said.add((id(func), name))
                op, slot = found
                self.report(
                    node,
                    f"`{name}` is the `{op}` kernel reached directly, while this file dispatches `{op}` through "
                    f"`{slot}`: the ops config's choice for this device (eager, the GPU or the Ascend kernel) never "
                    f"reaches it; read the kernel from `{slot}` (`bound_kernel()`, `use_non_eager_impl`)",
                )
