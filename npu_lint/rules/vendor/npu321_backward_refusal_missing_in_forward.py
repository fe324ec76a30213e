"""NPU321 backward-refusal-missing-in-forward."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule


def _refusals(body: list[ast.stmt]) -> list[tuple[ast.If, str]]:
    """The leading ``if <test>: raise ...`` statements of a function body (before its first other statement,
    docstring aside), each with its test's text."""
    out: list[tuple[ast.If, str]] = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if (
            isinstance(stmt, ast.If)
            and not stmt.orelse
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Raise)
        ):
            out.append((stmt, ast.unparse(stmt.test)))
            continue
        break
    return out


# a tensor's device, read off the tensor: `x.is_cuda`, `x.device.type != "cuda"`, `x.is_npu`, `x.device`
_DEVICE_ATTRS = frozenset({"is_cuda", "is_npu", "device", "device_type", "is_xpu"})


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _probes(test: ast.expr, params: set[str]) -> tuple[set[str], bool]:
    """What a refusal tests that a forward could test too: the names of the module-level probes it reads
    (``is_arch35``, ``IS_NPU_AVAILABLE``, ``torch``), and whether it tests a tensor's device (``dy.is_cuda``).
    What it reads off the backward's own arguments otherwise (``ctx.needs_input_grad``, the grad's dtype or
    sparsity, state the forward stored on ``ctx``) only a backward can refuse, and is no probe."""
    names: set[str] = set()
    device = False
    own = params | {"ctx", "self", "cls"}
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and _root(node) in own:
            if node.attr not in _DEVICE_ATTRS and not (
                isinstance(node.value, ast.Attribute) and node.value.attr in _DEVICE_ATTRS
            ):
                return set(), False  # conditioned on what only the backward holds
            device = True
        elif (
            isinstance(node, ast.Name)
            and node.id not in params
            and node.id not in ("ctx", "self", "cls", "None")
        ):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and _root(node) not in params | {"ctx", "self", "cls"}:
            names.add(node.attr)
    return names, device


def _reads(func: ast.AST, helpers: dict[str, ast.AST], depth: int = 3) -> tuple[set[str], bool]:
    """The names a function reads (and whether it tests a tensor's device), through the module's functions and
    the class's methods it calls (``_check_supported()``, ``self._validate(x)``), a bounded number of levels."""
    names: set[str] = set()
    device = False
    seen: set[int] = set()
    todo = [(func, depth)]
    while todo:
        fn, left = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for node in ast.walk(fn):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
                if node.attr in _DEVICE_ATTRS:
                    device = True
            if left and isinstance(node, ast.Call):
                callee = node.func
                name = (
                    callee.id
                    if isinstance(callee, ast.Name)
                    else callee.attr
                    if isinstance(callee, ast.Attribute)
                    and isinstance(callee.value, ast.Name)
                    and callee.value.id in ("self", "cls", "ctx")
                    else None
                )
                if name in helpers:
                    todo.append((helpers[name], left - 1))
    return names, device


_PAIRS = (("forward", "backward"), ("fwd", "bwd"))


def _top(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
    """Where the forward's refusal belongs: its first statement after the docstring (the def when it has none)."""
    for stmt in func.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            return stmt
    return func


class BackwardRefusalMissingInForward(Rule):
    code = "NPU321"
    name = "backward-refusal-missing-in-forward"
    summary = (
        "A backward starts by refusing a device, architecture or configuration (`if is_arch35(): raise ...`) "
        "that its forward does not test: the forward launches the unsupported kernel before anything fails."
    )
    why = (
        "Ascend and GPU kernel ports refuse what they do not support at the top of both passes: the "
        "triton-ascend causal convolution raises `NotImplementedError` on arch35 parts in its forward and its "
        "backward, and a CUDA kernel's backward refuses a non-CUDA tensor just like its forward. The forward's "
        "refusal is the one that matters: it runs first, and without it the unsupported kernel is launched "
        "(a crash deep in the compiler or silently wrong output) and training only stops, if at all, at the "
        "first backward. A refusal the backward keeps (a leading `if <test>: raise`) whose probe the forward "
        "never reads is what remains when an edit dropped the forward's copy. Pairs are the `forward` / "
        "`backward` methods of one class (an `autograd.Function`) and module functions `<x>_fwd` / `<x>_bwd` "
        "or `<x>_forward` / `<x>_backward`. The finding sits on the forward's first statement, where the refusal "
        "belongs."
    )
    bad = (
        Example(
            """
            import torch

            from .utils import is_arch35


            class ShortConvFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight):
                    ctx.save_for_backward(x, weight)
                    return short_conv_fwd(x, weight)

                @staticmethod
                def backward(ctx, dy):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    x, weight = ctx.saved_tensors
                    return short_conv_bwd(dy, x, weight)
            """,
            path="veomni/ops/kernels/short_conv/_ascend/short_conv.py",
        ),
    )
    good = (
        Example(
            """
            import torch

            from .utils import is_arch35


            class ShortConvFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    ctx.save_for_backward(x, weight)
                    return short_conv_fwd(x, weight)

                @staticmethod
                def backward(ctx, dy):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    x, weight = ctx.saved_tensors
                    return short_conv_bwd(dy, x, weight)
            """,
            path="veomni/ops/kernels/short_conv/_ascend/short_conv.py",
        ),
    )
    fix_safety = "No fix: copy the backward's refusal to the top of the forward."
    node_types = (ast.ClassDef, ast.Module)
    requires = ("raise",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.ClassDef, ast.Module))
        functions = {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        helpers: dict[str, ast.AST] = {
            f.name: f for f in self.ctx.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        helpers.update(functions)
        for name, forward in functions.items():
            for fwd, bwd in _PAIRS:
                if isinstance(node, ast.ClassDef):
                    if name != fwd or fwd != "forward":
                        continue
                    partner = bwd
                else:
                    if not name.endswith("_" + fwd):
                        continue
                    partner = name[: -len(fwd)] + bwd
                backward = functions.get(partner)
                if backward is None:
                    continue
                read, tests_device = _reads(forward, {k: v for k, v in helpers.items() if v is not backward})
                params = {
                    a.arg
                    for a in (
                        *backward.args.posonlyargs,
                        *backward.args.args,
                        *backward.args.kwonlyargs,
                        *(x for x in (backward.args.vararg, backward.args.kwarg) if x is not None),
                    )
                }
                for stmt, text in _refusals(backward.body):
                    probes, device = _probes(stmt.test, params)
                    if not probes and not device:
                        continue  # a refusal only a backward can make (the grad's dtype, `ctx.needs_input_grad`)
                    if probes & read or (device and tests_device):
                        continue
                    self.report(
                        _top(forward),
                        f"`{backward.name}` refuses `{text}` (line {stmt.lineno}) but `{forward.name}` never tests "
                        "it: the forward launches the kernel on what the backward says is unsupported, and the run "
                        "fails (or computes garbage) before that refusal; refuse it at the top of the forward too",
                    )
                    break
