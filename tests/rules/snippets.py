"""A test's source snippet linted with chosen rules, as the file it names (shared by the rules' tests)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project

# an RMSNorm autograd Function up to its backward's normalised input (`{cls}`, weight `{w}`); tests append the rest
NORM_FUNCTION_HEAD = """
class {cls}(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, {w}, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, {w}, rstd)
        return (x.float() * rstd * {w}.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, {w}, rstd = ctx.saved_tensors
        x_hat = x.float() * rstd
"""
# an Ascend adapter that splits the fused head axis for the kernel and returns its output unmerged (NPU314) ...
WAN_ADAPTER = """import torch_npu
from einops import rearrange


def rope_apply_fused(x, cos, sin, head_dim):
    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = torch_npu.npu_rotary_mul(x.float(), cos, sin)
    return x_out.to(x.dtype)
"""
# ... and the eager function it replaces (`rope_apply_fused` -> `rope_apply`), merging back with `merge`
WAN_EAGER = """from einops import rearrange


def rope_apply(x, freqs, head_dim):
    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = x * freqs{merge}
    return x_out.to(x.dtype)
"""


def lint_snippet(path: str, text: str, codes: Sequence[str]) -> list[Diagnostic]:
    """The findings of ``codes`` on ``text`` (dedented, its leading blank lines dropped) linted as ``path``,
    in the engine's order."""
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return [d for d in lint_source(src, list(codes), Settings()) if d.code in codes]


def ops_tree(root: Path, files: dict[str, str], pyproject: str = "[project]\nname = 'veomni'\n") -> Path:
    """A VeOmni tree under ``root``: a pyproject, the `veomni.ops.kernels` packages and ``files`` (relative path ->
    text, dedented) written into it; returns ``root``."""
    base = {
        "pyproject.toml": pyproject,
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/__init__.py": "",
    }
    for rel, text in {**base, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def write_file(root: Path, rel: str, text: str) -> Path:
    """Write ``text`` (dedented) to ``root / rel``, creating its directories; the path written."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def lint_in_tree(root: Path, rel: str, codes: Sequence[str]) -> list[Diagnostic]:
    """The findings of ``codes`` on the file ``rel`` of the tree at ``root``, linted with the tree's project."""
    path = root / rel
    project = load_project([str(path)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), list(codes), Settings(), project)


# The head of a video-language spec's forward with a dummy pass on text-only ranks (GLM-4V shape): the tests of
# NPU703 append the side output's hand-off, each their own way.
GLM4V_VIDEO_HEAD = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.glm4v.modeling_glm4v", target_file="x.py")


@config.override_method("Glm4vModel.forward")
def glm4v_model_forward(self, input_ids=None, pixel_values_videos=None, video_grid_thw=None, **kwargs):
    embeds = self.get_input_embeddings()(input_ids)
    placeholder_feats = None
    if pixel_values_videos is not None:
        clip = self.visual(pixel_values_videos, grid_thw=video_grid_thw)
        embeds = embeds.masked_scatter(input_ids == self.config.video_token_id, clip.pooler_output)
        stack_feats = clip.multiscale_features
    elif get_parallel_state().fsdp_enabled:
        ghost = self.visual.dummy_forward()
        embeds = embeds + ghost.pooler_output.mean() * 0.0
"""
