"""NPU309, round 22: `npu_rotary_mul`'s `rotary_mode` against the rotary convention of the module's own code when
the function is handed its cos/sin (a parameter): rotate-half tables and rotation (`torch.cat((f, f), dim=-1)`,
`cat((-x2, x1))` over `// 2` halves) want "half"; interleaved ones (`repeat_interleave(2, dim=-1)`, stride-2
slices stacked on a new axis, `view_as_complex`) want "interleave". Read from the body, not the helper's name
(DeepSeek-V4's interleaved `rotate_half`); from upstream for a spec; from the package's eager fallback for a kernel
adapter. Own names, several regions (model code, generated files, kernels, diffusers-style modules, specs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from npu_lint.veomni.ropelayout import HALF, INTERLEAVE, module_layouts
from tests.rules.snippets import write_file as _write


def _lint(root: Path, path: Path) -> list:
    project = load_project([str(root)])
    return [
        d
        for d in lint_source(
            SourceFile.from_text(str(path), path.read_text()), ["NPU309"], Settings(), project=project
        )
        if "rotary_mode" in d.message
    ]


_HALF_MODULE = """
import torch
from torch_npu import npu_rotary_mul


def turn_halves(t):
    a, b = t.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class SpinTable(torch.nn.Module):
    def forward(self, pos):
        angles = pos[:, None] * self.inv[None, :]
        table = torch.cat((angles, angles), dim=-1)
        return table.cos(), table.sin()


def fused_spin(q, k, c, s):
    c = c.unsqueeze(-2).float()
    s = s.unsqueeze(-2).float()
    return npu_rotary_mul(q, c, s{mode}), npu_rotary_mul(k, c, s{mode})
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("", 0), (', rotary_mode="half"', 0), (', rotary_mode="interleave"', 2), (', "interleave"', 2)],
)
def test_model_module_in_rotate_half(tmp_path: Path, mode: str, expected: int) -> None:
    path = _write(
        tmp_path,
        "veomni/models/seed_omni/encoder/spinner/modeling_spinner.py",
        _HALF_MODULE.format(mode=mode),
    )
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


_COMPLEX_MODULE = """
import torch
import torch_npu


def spin_complex(x, freqs_cis):
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs_cis).flatten(-2)


def spin_on_ascend(x, cos_t, sin_t):
    return torch_npu.npu_rotary_mul(x, cos_t, sin_t{mode})
"""


@pytest.mark.parametrize(("mode", "expected"), [("", 1), (', rotary_mode="interleave"', 0)])
def test_diffusers_module_of_complex_pairs(tmp_path: Path, mode: str, expected: int) -> None:
    path = _write(
        tmp_path, "veomni/models/diffusers/swirl/modeling_swirl.py", _COMPLEX_MODULE.format(mode=mode)
    )
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]
    if expected:
        assert '"interleave"' in diags[0].message and "default" in diags[0].message


_EAGER = """
import torch


def _swap(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(q, k, cos, sin):
    return q * cos + _swap(q) * sin, k * cos + _swap(k) * sin
"""

_ADAPTER = """
from . import eager as _eager


def forward(q, k, cos, sin, *, unsqueeze_dim=1):
    if q.numel() == 0:
        return _eager.forward(q, k, cos, sin)
    import torch_npu

    cos_u, sin_u = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return torch_npu.npu_rotary_mul(q, cos_u, sin_u, rotary_mode={mode}), torch_npu.npu_rotary_mul(
        k, cos_u, sin_u, rotary_mode={mode}
    )
"""


@pytest.mark.parametrize(("mode", "expected"), [('"half"', 0), ('"interleave"', 2)])
@pytest.mark.parametrize("base", ["veomni/kernels/_kernels/twirl/plain", "veomni/ops/kernels/twirl/plain"])
def test_kernel_adapter_against_its_eager_fallback(
    tmp_path: Path, base: str, mode: str, expected: int
) -> None:
    """The adapter's own cos_u is an unsqueeze (no layout): the eager module it falls back to is the reference."""
    _write(tmp_path, f"{base}/eager.py", _EAGER)
    path = _write(tmp_path, f"{base}/torch_npu.py", _ADAPTER.format(mode=mode))
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


_MISNAMED = """
import torch
import torch_npu


def rotate_half(x):
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_trailing_rope(x, cos, sin):
    return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode={mode})
"""


@pytest.mark.parametrize(("mode", "expected"), [('"interleave"', 0), ('"half"', 1)])
def test_the_body_decides_not_the_helper_name(tmp_path: Path, mode: str, expected: int) -> None:
    """A `rotate_half` that pairs adjacent channels (DeepSeek-V4's) is the interleaved convention."""
    rel = "veomni/models/transformers/glider/generated/patched_modeling_glider_npu.py"
    path = _write(tmp_path, rel, _MISNAMED.format(mode=mode))
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


def test_mixed_or_unrelated_code_stays_quiet(tmp_path: Path) -> None:
    text = """
    import torch
    import torch_npu


    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)


    def video_freqs(f):
        return f.cos().repeat_interleave(2, dim=-1)


    def both(x, cos, sin):
        return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    """
    path = _write(tmp_path, "veomni/models/diffusers/duo/modeling_duo.py", text)
    assert _lint(tmp_path, path) == []
    unrelated = """
    import torch
    import torch_npu


    def gate_up(x):
        doubled = torch.cat((x, x), dim=-1)
        return doubled


    def spin(x, cos, sin):
        return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    """
    path = _write(tmp_path, "veomni/ops/kernels/spin/npu.py", unrelated)
    assert _lint(tmp_path, path) == []


def test_spec_reads_the_upstream_module(tmp_path: Path) -> None:
    """A spec's replacement holds no tables of its own: the upstream module it patches (Llama: rotate_half)."""
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


    @config.replace_function("apply_rotary_pos_emb")
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        import torch_npu

        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        return (
            torch_npu.npu_rotary_mul(q, cos, sin, rotary_mode="{mode}"),
            torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="{mode}"),
        )
    """
    rel = "veomni/models/transformers/llama/llama_npu_patch_gen_config.py"
    bad = _write(tmp_path, rel, text.replace("{mode}", "interleave"))
    assert len(_lint(tmp_path, bad)) == 2
    good = _write(tmp_path, rel, text.replace("{mode}", "half"))
    assert _lint(tmp_path, good) == []


def test_layout_reader() -> None:
    import ast

    half = module_layouts(ast.parse(textwrap.dedent(_HALF_MODULE.format(mode=""))))
    assert set(half) == {HALF}
    inter = module_layouts(ast.parse(textwrap.dedent(_MISNAMED.format(mode='"half"'))))
    assert set(inter) == {INTERLEAVE}


def test_mode_from_a_module_constant_or_a_parameter(tmp_path: Path) -> None:
    """A module constant is read; a mode handed in by the caller is the caller's to choose: nothing to judge."""
    text = """
    import torch
    import torch_npu

    PAIR_MODE = "interleave"


    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)


    def by_constant(x, cos, sin):
        return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode=PAIR_MODE)


    def by_parameter(x, cos, sin, mode="interleave"):
        return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode=mode)
    """
    path = _write(tmp_path, "veomni/models/seed_omni/foundation/pairs/modeling_pairs.py", text)
    diags = _lint(tmp_path, path)
    assert len(diags) == 1 and 'rotary_mode "interleave"' in diags[0].message, [d.message for d in diags]


def test_table_reassigned_without_a_layout(tmp_path: Path) -> None:
    """`c = c.unsqueeze(1)` then `c = c.float()`: two bindings, neither lays the table out; the module decides."""
    text = """
    import torch
    import torch_npu


    class WarpRotary(torch.nn.Module):
        def forward(self, t):
            freqs = torch.outer(t, self.inv_freq)
            return freqs.repeat_interleave(2, dim=-1).cos(), freqs.repeat_interleave(2, dim=-1).sin()


    def warp(x, c, s):
        c = c.unsqueeze(1)
        c = c.float()
        s = s.unsqueeze(1).float()
        return torch_npu.npu_rotary_mul(x, c, s, rotary_mode="{mode}")
    """
    rel = "veomni/models/transformers/warp/warp_npu_patch.py"
    assert len(_lint(tmp_path, _write(tmp_path, rel, text.replace("{mode}", "half")))) == 1
    assert _lint(tmp_path, _write(tmp_path, rel, text.replace("{mode}", "interleave"))) == []


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND", rotary_mode="interleave")', 1),
        ('torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="BSND", rotary_mode="half")', 0),
        ('npu_mrope(pos, q, k, cache, 128, mrope_section=[16, 24, 24], rotary_mode="interleave")', 1),
        ('npu_mrope(pos, q, k, cache, 128, mrope_section=[16, 24, 24], rotary_mode="quarter")', 0),
        ('other_lib.apply(q, k, cos, sin, rotary_mode="interleave")', 0),
    ],
)
def test_other_ascend_rotary_kernels(tmp_path: Path, call: str, expected: int) -> None:
    """Every torch_npu rotary kernel told its convention by `rotary_mode`, not only `npu_rotary_mul`."""
    text = f"""
    import torch
    import torch_npu
    from torch_npu import npu_mrope

    import other_lib


    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)


    def fused(q, k, cos, sin, pos=None, cache=None):
        return {call}
    """
    path = _write(tmp_path, "veomni/models/transformers/mesa/mesa_npu_kernels.py", text)
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]
