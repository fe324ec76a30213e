"""NPU430 rmsnorm-weight-variant."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._handles import HANDLES, Handle, HandleCalls, call_arg, foreign_attr, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import weight_argument

_UNWEIGHTED = "unweighted"


def _is_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _bound_to_none(weight: ast.expr, func: ast.AST | None, cls: ast.ClassDef | None) -> bool:
    """A name every assignment of the function binds to ``None`` (``weight = None``), or ``self.<attr>`` that the
    class only ever sets to ``None`` (``self.weight = None``, ``register_parameter("weight", None)``)."""
    values: list[ast.expr] = []
    if isinstance(weight, ast.Name) and func is not None:
        if weight.id in {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}:
            return False
        values = [
            n.value
            for n in ast.walk(func)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == weight.id for t in n.targets)
        ]
        values += [n.target for n in ast.walk(func) if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For))
                   if isinstance(n.target, ast.Name) and n.target.id == weight.id]  # fmt: skip
    elif (
        isinstance(weight, ast.Attribute)
        and isinstance(weight.value, ast.Name)
        and weight.value.id == "self"
        and cls is not None
    ):
        for n in ast.walk(cls):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(
                    isinstance(t, ast.Attribute)
                    and t.attr == weight.attr
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    for t in targets
                ):
                    values.append(n.value if n.value is not None else n.target)
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("register_parameter", "register_buffer")
                and len(n.args) == 2
                and str_value(n.args[0]) == weight.attr
            ):
                values.append(n.args[1])
    return bool(values) and all(_is_none(v) for v in values)


class RmsNormWeightVariant(Rule):
    code = "NPU430"
    name = "rmsnorm-weight-variant"
    summary = (
        "An RMSNorm dispatch handle of a weighted variant (`standard`, offset) is called without a weight "
        "(`None`), or the `unweighted` variant is given one."
    )
    why = (
        "The RMSNorm op has one registry row per weight contract: `standard` multiplies by the weight, the "
        "offset variants by `1 + weight`, and `unweighted` (DeepSeek-V4's `q_b_norm`/`input_norm`, norms built "
        "without a parameter) applies none. A weighted variant's NPU kernel (`torch_npu.npu_rms_norm`) needs a "
        "gamma tensor, so a handle declared with a weighted variant and called with `weight=None` fails on "
        "Ascend (or silently picks another path) while eager works; the reverse drops a trained weight. The "
        "handle's declaration (module-level slot, post-import block, `self.<attr>` handle, or a local) and "
        "its calls are read from the file itself; the finding sits on the declaration when this file holds it and every "
        "call contradicts it, and on each odd call when the handle's other calls agree with its variant (one "
        "`standard` slot shared by the weighted norms and a weight-less one that should use its own slot)."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_plain_norm = OpSlot("rms_norm", "standard")


            class ToyPlainNorm(torch.nn.Module):
                def __init__(self, eps=1e-6):
                    super().__init__()
                    self.eps = eps

                def forward(self, x):
                    if veomni_plain_norm.use_non_eager_impl:
                        return veomni_plain_norm(x, None, self.eps)
                    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="a parameter-free norm dispatched through the weighted `standard` row",
        ),
        Example(
            """
            import torch
            from veomni.ops import VeomniOp


            class ToyNorm(torch.nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.weight = torch.nn.Parameter(torch.ones(dim))
                    self.eps = eps
                    self.kernel = VeomniOp("rms_norm", "unweighted", impl)

                def forward(self, x):
                    return self.kernel(x, weight=self.weight, eps=self.eps)
            """,
            path="veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="a trained weight handed to the `unweighted` row",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_plain_norm = OpSlot("rms_norm", "unweighted")
            veomni_norm = OpSlot("rms_norm", "standard")


            class ToyPlainNorm(torch.nn.Module):
                def forward(self, x):
                    return veomni_plain_norm(x, None, 1e-6)


            class ToyNorm(torch.nn.Module):
                def forward(self, x):
                    return veomni_norm(x, self.weight, 1e-6)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        ),
    )
    fix_safety = "No fix: which of the variant and the call is wrong has to be decided by hand."
    requires = ("rms_norm", tuple(sorted(HANDLES)))
    node_types = (ast.Assign, ast.Call)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.calls = HandleCalls(ctx, frozenset({"rms_norm"}))

    def visit(self, node: ast.AST) -> None:
        self.calls.visit(node)

    def finish(self) -> None:
        # per handle: its calls that pass a weight argument, and those whose weight contradicts the variant
        calls: dict[int, list[tuple[ast.Call, ast.expr | None, bool]]] = {}
        handles: dict[int, Handle] = {}
        classes = {
            id(f): c
            for c in nodes_of(self.ctx.tree, ast.ClassDef)
            for f in c.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for call, handle, func, cls in self.calls.resolved_in_classes():
            if handle.raw_variant is None or foreign_attr(
                self.ctx.tree, self.calls.table, call.func, handle, cls
            ):
                continue
            weight = weight_argument(call)
            if weight is None and len(call.args) < 2:
                continue  # the weight is not passed positionally or by name here: nothing to compare
            unweighted = handle.raw_variant == _UNWEIGHTED
            none = weight is None or _is_none(weight) or _bound_to_none(weight, func, classes.get(id(func)))
            wrong = unweighted != none
            handles[id(handle.call)] = handle
            calls.setdefault(id(handle.call), []).append((call, weight, wrong))
        for key, found in calls.items():
            handle = handles[key]
            wrong = [(call, weight) for call, weight, bad in found if bad]
            if not wrong:
                continue
            if len(wrong) == len(found):
                # every call contradicts the declared variant: the declaration is the defect (reported there once)
                call, weight = wrong[0]
                self.report(self.calls.where(handle), self._message(handle, call, weight))
                continue
            for (
                call,
                weight,
            ) in wrong:  # the other calls agree with the declaration: these calls are the odd ones
                self.report(call, self._message(handle, call, weight, odd=True))

    def _message(self, handle: Handle, call: ast.Call, weight: ast.expr | None, odd: bool = False) -> str:
        variant = handle.raw_variant
        name = self.ctx.source.segment(call.func)
        op = str_value(call_arg(handle.call, 0, "op_name" if handle.kind == "OpSlot" else "op")) or "rms_norm"
        declared = f'`{handle.kind}("{op}", "{variant}")`'
        line = call.lineno
        if variant == _UNWEIGHTED:
            fix = (
                "call the weighted handle the file declares for this norm"
                if odd
                else "declare the weighted variant the norm's eager path uses"
            )
            return (
                f"`{name}` is declared as {declared}, the variant without a weight, but line {line} passes it "
                f"`{self.ctx.source.segment(weight) if weight is not None else ''}`: the kernel ignores the trained "
                f"weight; {fix}"
            )
        fix = (
            f'call a handle declared with the "{_UNWEIGHTED}" variant (the other calls of `{name}` pass a weight)'
            if odd
            else f'declare it as the "{_UNWEIGHTED}" variant'
        )
        return (
            f"`{name}` is declared as {declared}, which multiplies by a weight, but line {line} calls it with no "
            f"weight (`None`): the weighted NPU kernel needs a gamma tensor, so this norm fails on Ascend (or takes "
            f"another path than eager); {fix}"
        )
