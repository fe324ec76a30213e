"""NPU432 gated-norm-activation."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.upstream import last_name

_ACTIVATIONS = frozenset({"silu", "sigmoid", "swish", "gelu", "act_fn", "act"})
_FUSED_GLU = frozenset({"npu_swiglu", "swiglu", "silu_and_mul"})  # act(first half) * second half


def _gate_name(name: str) -> bool:
    return "gate" in name.lower()


def _gated_norm_functions(tree: ast.Module, path: str) -> list[ast.FunctionDef]:
    """Functions of a gated norm (a class or function named for one, or in a gated-norm module) that take a
    gate parameter."""
    in_module = "gated" in path.lower() and "norm" in path.lower()
    out: list[ast.FunctionDef] = []

    def gated(name: str) -> bool:
        low = name.lower()
        return "gated" in low and "norm" in low

    for stmt in tree.body:
        scope = [stmt] if isinstance(stmt, ast.FunctionDef) else []
        owner = stmt.name if isinstance(stmt, (ast.ClassDef, ast.FunctionDef)) else ""
        if isinstance(stmt, ast.ClassDef):
            scope = [s for s in stmt.body if isinstance(s, ast.FunctionDef)]
        for func in scope:
            if not (in_module or gated(owner) or gated(func.name)):
                continue
            if any(_gate_name(a.arg) for a in func.args.args):
                out.append(func)
    return out


def _dim_of(call: ast.Call, position: int, default: int) -> int | None:
    """The literal `dim=` (or the positional at ``position``) of a call, ``default`` when absent, None when not a
    literal."""
    node = next((k.value for k in call.keywords if k.arg in ("dim", "axis")), None)
    if node is None and len(call.args) > position:
        node = call.args[position]
    if node is None:
        return default
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        return -value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


class GatedNormActivation(Rule):
    code = "NPU432"
    name = "gated-norm-activation"
    summary = (
        "A gated RMSNorm applies its activation to the normalised hidden states instead of the gate "
        "(`silu(norm(x)) * gate`, or a fused SwiGLU given `[x, gate]`)."
    )
    why = (
        "A gated RMSNorm (Qwen3.5/Qwen3-Next linear attention, Mamba2) returns `norm(x) * weight * silu(gate)`: "
        "the activation belongs to the gate. Fused GLU kernels apply it to the first half of their input "
        "(`torch_npu.npu_swiglu(t)` is `silu(t[..., :d]) * t[..., d:]`), so the gate must come first in the "
        "concatenation. Swapping the halves, or calling the activation on the normalised states, gives "
        "`silu(norm(x)) * gate` silently, on the one device whose kernel was changed. Read from the functions "
        "of a gated norm (a class or function named for one, or in a gated-norm module) that take a gate."
        " A gated norm's `forward` that takes the gate and never reads it, and a fused GLU fed halves concatenated along another axis than the one it splits, are reported too."
    )
    bad = (
        Example(
            """
            import torch
            import torch_npu


            class ToyRMSNormGated(torch.nn.Module):
                def forward(self, x, gate):
                    normed = torch_npu.npu_rms_norm(x, self.weight, self.eps)[0]
                    return torch_npu.npu_swiglu(torch.cat((normed, gate), dim=-1), dim=-1)
            """,
            path="veomni/ops/kernels/toy_mixer/ascend_norm.py",
            title="the fused SwiGLU's activated half is the normalised states",
        ),
        Example(
            """
            import torch.nn.functional as F


            def gated_rms_norm_eager(x, gate_states, weight, eps):
                var = x.float().pow(2).mean(-1, keepdim=True)
                y = (x.float() * (var + eps).rsqrt()).to(x.dtype) * weight
                return F.silu(y) * gate_states
            """,
            path="veomni/ops/kernels/toy_mixer/eager.py",
            title="eager: the activation on the normalised states",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu


            class ToyRMSNormGated(torch.nn.Module):
                def forward(self, x, gate):
                    normed = torch_npu.npu_rms_norm(x, self.weight, self.eps)[0]
                    return torch_npu.npu_swiglu(torch.cat((gate, normed), dim=-1), dim=-1)
            """,
            path="veomni/ops/kernels/toy_mixer/ascend_norm.py",
        ),
    )
    fix_safety = "No fix: reorder the halves (or move the activation) by hand."
    requires = (("gate", "Gate"), ("norm", "Norm"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in _gated_norm_functions(self.ctx.tree, self.ctx.source.path):
            gates = {a.arg for a in func.args.args if _gate_name(a.arg)}
            if func.name == "forward":
                self._gate_unread(func, gates)
            cats = self._cat_bindings(func)
            for node in walk(func):
                if isinstance(node, ast.Call) and last_name(node.func) in _FUSED_GLU and node.args:
                    self._fused(node, cats, gates)
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                    self._product(node, gates)

    @staticmethod
    def _cat_bindings(func: ast.FunctionDef) -> dict[str, ast.Call]:
        out: dict[str, ast.Call] = {}
        for node in walk(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                if isinstance(node.value, ast.Call) and last_name(node.value.func) in (
                    "cat",
                    "concat",
                    "concatenate",
                ):
                    out[node.targets[0].id] = node.value
        return out

    def _gate_unread(self, func: ast.FunctionDef, gates: set[str]) -> None:
        """A gated norm's forward that takes the gate and never reads it: the output is the plain norm (or the
        activation applied to the states alone), the gating of the linear-attention output is lost."""
        read = {n.id for n in walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for gate in sorted(gates - read):
            arg = next(a for a in func.args.args if a.arg == gate)
            self.report(
                arg,
                f"`{func.name}` takes the gate `{gate}` and never reads it: the gated norm returns its "
                f"normalised states without `* act({gate})`",
            )

    def _fused(self, call: ast.Call, cats: dict[str, ast.Call], gates: set[str]) -> None:
        arg = call.args[0]
        cat = cats.get(arg.id) if isinstance(arg, ast.Name) else arg
        if not (
            isinstance(cat, ast.Call) and last_name(cat.func) in ("cat", "concat", "concatenate") and cat.args
        ):
            return
        glu_dim = _dim_of(call, 1, default=-1)
        cat_dim = _dim_of(cat, 1, default=0)
        if (
            glu_dim is not None
            and cat_dim is not None
            and glu_dim != cat_dim
            and (
                min(glu_dim, cat_dim) < 0 and max(glu_dim, cat_dim) <= 0
            )  # -1 vs 0, -1 vs -2: never one axis
        ):
            self.report(
                cat,
                f"`{last_name(call.func)}` splits its input in halves along dim {glu_dim}, but the halves are "
                f"concatenated along dim {cat_dim}: the activation and the product mix the wrong elements",
            )
            return
        parts = cat.args[0]
        if not isinstance(parts, (ast.List, ast.Tuple)) or len(parts.elts) != 2:
            return
        first, second = parts.elts
        if not (isinstance(second, ast.Name) and second.id in gates):
            return
        if isinstance(first, ast.Name) and first.id in gates:
            return
        kernel = last_name(call.func)
        self.report(
            parts,
            f"`{kernel}` applies its activation to the first half of its input, but the gate `{second.id}` is "
            f"the second half here: the result is act(`{ast.unparse(first)}`) * `{second.id}` instead of the "
            f"gated norm's `{ast.unparse(first)}` * act(`{second.id}`); put the gate first",
        )

    def _product(self, node: ast.BinOp, gates: set[str]) -> None:
        for act_side, other in ((node.left, node.right), (node.right, node.left)):
            while (  # the gate cast first (`gate.to(torch.float32)`, `gate.float()`) is the raw gate still
                isinstance(other, ast.Call)
                and isinstance(other.func, ast.Attribute)
                and other.func.attr in ("to", "float", "type_as", "type", "contiguous")
            ):
                other = other.func.value
            if not (isinstance(other, ast.Name) and other.id in gates):
                continue
            if not (
                isinstance(act_side, ast.Call) and last_name(act_side.func) in _ACTIVATIONS and act_side.args
            ):
                continue
            inner = act_side.args[0]
            if any(isinstance(n, ast.Name) and n.id in gates for n in walk(inner)):
                continue
            self.report(
                act_side,
                f"the activation is applied to `{ast.unparse(inner)}` and the gate `{other.id}` multiplies it "
                f"raw: a gated norm returns its normalised states times act(`{other.id}`)",
            )
