"""NPU410 rmsnorm-statistic."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._rms_math import normaliser_issues, rms_sites, self_scaled_by_root


class RmsNormStatistic(Rule):
    code = "NPU410"
    name = "rmsnorm-statistic"
    summary = (
        "An RMSNorm normalises by something other than `rsqrt(mean(x^2, -1, keepdim=True) + eps)`: a variance "
        "(mean subtracted), a sum, the mean over another dimension or without `keepdim`, or the root itself "
        "multiplied in instead of divided by."
    )
    why = (
        "RMSNorm scales each row by the reciprocal root of the mean of its squares over the hidden (last) "
        "dimension, kept for broadcasting; the fused kernels (`torch_npu.npu_rms_norm`, Liger) compute exactly "
        "that. `x.var(-1)` subtracts the mean (a LayerNorm statistic), `pow(2).sum(-1)` grows with the hidden "
        "size, a mean over dimension 0 or 1 mixes tokens, a mean without `keepdim` no longer broadcasts against "
        "`x` (a shape error, or a silent broadcast when two sizes coincide), and `x * sqrt(...)` (or `x / "
        "rsqrt(...)`) scales up where it should scale down. Each of them makes the eager path (taken on NPU "
        "whenever no fused kernel is bound) disagree with the checkpoint's reference and with the fused path. "
        "Every function the tree runs as an RMSNorm is read (a spec's or generated file's replacement of an "
        "RMSNorm class's method, reported only where the upstream method does not do the same; the methods of an "
        "RMSNorm class the tree defines; a kernel module's eager fallback), following the root through locals."
        " A fused kernel that returns `(output, reciprocal RMS)` (`torch_npu.npu_rms_norm`, apex's "
        "`rms_forward_affine`) is read too: a function returning its element 1 (directly or through a local) "
        "returns the statistic as the norm's output."
        " Beyond RMSNorm sites, every function of a file that scales a tensor by the root of its own mean (or sum) of squares the wrong way round (`x * sqrt(mean(x ** 2) + eps)`, `x / rsqrt(...)`) is reported whatever it is called: a PixelNorm, an L2 norm, a diffusion model's QK norm."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.olmo2.modeling_olmo2", target_file="x.py")


            @config.override_method("Olmo2RMSNorm.forward")
            def olmo2_norm_forward_patched(self, hidden_states):
                input_dtype = hidden_states.dtype
                hidden_states = hidden_states.to(torch.float32)
                variance = hidden_states.var(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return (self.weight * hidden_states).to(input_dtype)
            """,
            path="veomni/models/transformers/olmo2/olmo2_gpu_patch_gen_config.py",
            title="a variance (mean subtracted) instead of the mean of squares",
        ),
        Example(
            """
            import torch


            class PatchRMSNorm(torch.nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    h = x.float()
                    ms = h.pow(2).mean(-1)
                    return self.weight * (h * torch.rsqrt(ms + self.eps)).type_as(x)
            """,
            path="veomni/models/transformers/patchy/modeling_patchy.py",
            title="the mean without keepdim",
        ),
        Example(
            """
            def wide_norm_fallback(x, weight, eps):
                x32 = x.float()
                root = (x32.square().mean(-1, keepdim=True) + eps).sqrt()
                return weight * (x32 * root).to(x.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
            title="the root multiplied in instead of divided by",
        ),
        Example(
            """
            import torch_npu


            def toy_norm_forward_npu(self, x):
                normed = torch_npu.npu_rms_norm(x, self.weight, epsilon=self.variance_epsilon)[-1]
                return normed
            """,
            path="veomni/ops/kernels/toy_norm/npu.py",
            title="the fused kernel's reciprocal RMS returned as the output",
        ),
    )
    good = (
        Example(
            """
            import torch


            class PatchRMSNorm(torch.nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    h = x.float()
                    ms = h.pow(2).mean(-1)
                    return self.weight * (h * torch.rsqrt(ms + self.eps).unsqueeze(-1)).type_as(x)
            """,
            path="veomni/models/transformers/patchy/modeling_patchy.py",
        ),
        Example(
            """
            def wide_norm_fallback(x, weight, eps):
                x32 = x.float()
                root = (x32.square().mean(-1, keepdim=True) + eps).sqrt()
                return weight * (x32 / root).to(x.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
        ),
    )
    fix_safety = "No fix: the statistic is the model's numerics."

    requires = (("sqrt", "rsqrt", "rms_norm(", "rms_forward_affine"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # model code and the tree's kernels (veomni/ops)
        return not ctx.source.kind.test

    def _statistic_returned(self) -> None:
        """A fused RMSNorm kernel returns ``(output, reciprocal RMS)``; a function that returns the second
        element (directly, or through a local) returns the statistic as the norm's output."""
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            assigned: dict[str, ast.Subscript] = {}
            for node in nodes_of(func, ast.Assign):
                assert isinstance(node, ast.Assign)
                if (
                    len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and _statistic_of(node.value)
                ):
                    assigned[node.targets[0].id] = node.value  # type: ignore[assignment]
            for ret in nodes_of(func, ast.Return):
                assert isinstance(ret, ast.Return)
                value = ret.value
                node = assigned.get(value.id) if isinstance(value, ast.Name) else value
                kernel = _statistic_of(node)
                if kernel is None:
                    continue
                self.report(
                    node,
                    f"`{func.name}` returns element {ast.unparse(node.slice)} of `{kernel}`, the reciprocal RMS "  # type: ignore[union-attr]
                    "(one value per row), not the normalised output (element 0): every norm it serves outputs "
                    "its statistic, which broadcasts silently into the residual stream",
                )

    def _self_scaled(self, done: set[int]) -> None:
        """Every other function of the file (a PixelNorm, an L2 norm, a diffusion block's own norm, whatever it
        is called) that scales a tensor up by the root of its own mean of squares."""
        for func in nodes_of(self.ctx.tree, ast.FunctionDef):
            assert isinstance(func, ast.FunctionDef)
            if id(func) in done or not any(
                isinstance(c.func, ast.Attribute) and c.func.attr in ("sqrt", "rsqrt")  # type: ignore[union-attr]
                for c in nodes_of(func, ast.Call)
            ):
                continue
            # once per function text (a generated file's copies, a function the editor lints again)
            for node in by_content(self_scaled_by_root, func, self.ctx.source.lines):
                self.report(
                    node,
                    f"`{func.name}` {_MESSAGES['inverted']}: `{ast.unparse(node)}` grows with the tensor's own "
                    "magnitude where a norm divides by it",
                )

    def finish(self) -> None:
        text = self.ctx.source.text
        if "rms_norm(" in text or "rms_forward_affine" in text:
            self._statistic_returned()
        if "sqrt" not in text:
            return
        sites = rms_sites(self.ctx)
        self._self_scaled({id(site.func) for site in sites})
        for site in sites:
            found = normaliser_issues(site.func)
            if not found:
                continue
            if site.upstream is not None:
                theirs = {kind for kind, _ in normaliser_issues(site.upstream)}
                found = [(kind, node) for kind, node in found if kind not in theirs]
            done: set[str] = set()
            for kind, node in found:
                if kind in done:
                    continue
                done.add(kind)
                self.report(node, f"{site.label} {_MESSAGES[kind]}")


_FUSED_WITH_STATISTIC = ("npu_rms_norm", "rms_forward_affine")  # (output, reciprocal RMS)


def _statistic_of(node: ast.AST | None) -> str | None:
    """``npu_rms_norm(...)[1]`` (or ``[-1]``): the name of the fused kernel whose statistic is selected."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)):
        return None
    name = call_name(node.value)
    index = node.slice
    if (
        isinstance(index, ast.UnaryOp)
        and isinstance(index.op, ast.USub)
        and isinstance(index.operand, ast.Constant)
    ):
        value = -index.operand.value if isinstance(index.operand.value, int) else None
    else:
        value = index.value if isinstance(index, ast.Constant) else None
    return name if name in _FUSED_WITH_STATISTIC and value in (1, -1) else None


_MESSAGES = {
    "var": "normalises by a variance (`var`: the mean subtracted, a LayerNorm statistic); RMSNorm divides by "
    "the root of the mean of squares",
    "sum": "normalises by the root of a sum of squares; RMSNorm takes the mean (a sum grows with the hidden size)",
    "dim": "takes the mean of squares over a dimension other than the last (hidden) one",
    "keepdim": "takes the mean of squares without `keepdim=True` and never restores the dimension: it no longer "
    "broadcasts against the activations",
    "inverted": "multiplies by the root instead of dividing by it (scales rows up by their RMS)",
}
