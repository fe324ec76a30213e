"""NPU409 through ``veomni/norms.py``'s kernel reading: the offset a kernel adds to its weight, in the spellings
rev19 left open (an augmented ``+= 1`` on a cast of the weight, a module helper returning ``1 + w``) and a
kernel serving both rows through a flag its offset row binds (``functools.partial(kernel, flag=True)``, in a
``register_op`` row or returned by a ``KernelSpec`` factory); other names, flags and packages than rev19's
tests. A kernel whose flag the row leaves at a default that skips the offset, or binds to the wrong value, is
still reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rules.snippets import lint_in_tree, ops_tree

KERNEL_REL = "veomni/ops/kernels/{pkg}/npu_norm.py"
REG_REL = "veomni/ops/kernels/{pkg}/__init__.py"

REGISTER = """
import functools

from ...registry import register_op
from .npu_norm import {fn}

register_op("rms_norm", "standard", "npu", {standard}, None)
register_op("rms_norm", "qwen3_5", "npu", {offset}, None)
"""

FACTORY = """
import functools

from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


def _plain_factory():
    from .npu_norm import {fn}

    return {standard}


def _centred_factory():
    from .npu_norm import {fn}

    return {offset}


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant="standard", factory=_plain_factory))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant="qwen3_5", factory=_centred_factory))
"""

# a kernel with a flag: (name, flag, body): the flag gates `1 + weight`, in an expression or a statement
FLAGGED = {
    "ifexp": (
        "ascend_norm",
        "gemma_style",
        "def ascend_norm(x, scale, eps, gemma_style=False):\n"
        "    s = scale.float() + 1.0 if gemma_style else scale\n"
        "    return torch_npu.npu_rms_norm(x, s.to(x.dtype), eps)[0]\n",
    ),
    "statement": (
        "fused_norm_npu",
        "offset",
        "def fused_norm_npu(x, weight, eps=1e-6, offset=False):\n"
        "    if offset:\n"
        "        weight = weight.float().add(1).to(x.dtype)\n"
        "    return torch_npu.npu_rms_norm(x, weight, eps)[0]\n",
    ),
    "negated": (
        "rms_npu",
        "plain",
        "def rms_npu(x, gamma, eps, plain=True):\n"
        "    g = gamma if plain else 1 + gamma\n"
        "    return torch_npu.npu_rms_norm(x, g, eps)[0]\n",
    ),
}


def _files(pkg: str, template: str, body: str, fn: str, standard: str, offset: str) -> dict[str, str]:
    return {
        REG_REL.format(pkg=pkg): template.format(fn=fn, standard=standard, offset=offset),
        KERNEL_REL.format(pkg=pkg): "import torch\nimport torch_npu\n\n\n" + body,
    }


def _found(tmp_path: Path, files: dict[str, str], pkg: str) -> list[str]:
    root = ops_tree(tmp_path, files)
    out = []
    for rel in (REG_REL.format(pkg=pkg), KERNEL_REL.format(pkg=pkg)):
        out += [f"{rel.rsplit('/', 1)[1]}:{d.line}" for d in lint_in_tree(root, rel, ["NPU409"])]
    return out


def _bind(fn: str, flag: str, value: bool) -> str:
    return f"functools.partial({fn}, {flag}={value})"


@pytest.mark.parametrize("template", [REGISTER, FACTORY], ids=["register_op", "factory"])
@pytest.mark.parametrize("shape", sorted(FLAGGED))
def test_one_kernel_serving_both_rows_through_its_flag_is_quiet(
    tmp_path: Path, shape: str, template: str
) -> None:
    fn, flag, body = FLAGGED[shape]
    on = (
        shape != "negated"
    )  # the value of the flag that adds the offset (the defaults skip it in every shape)
    files = _files("rms_norm", template, body, fn, fn, _bind(fn, flag, on))
    assert _found(tmp_path, files, "rms_norm") == []


@pytest.mark.parametrize("template", [REGISTER, FACTORY], ids=["register_op", "factory"])
@pytest.mark.parametrize("shape", sorted(FLAGGED))
def test_offset_row_leaving_the_flag_off_is_reported(tmp_path: Path, shape: str, template: str) -> None:
    fn, flag, body = FLAGGED[shape]
    on = shape != "negated"
    # the offset row binds the kernel as it is (the default skips the offset), or binds the flag the wrong way
    for i, offset in enumerate((fn, _bind(fn, flag, not on))):
        # at the row, and in the kernel module at the weight it hands the kernel
        found = _found(tmp_path / str(i), _files("rms_norm", template, body, fn, fn, offset), "rms_norm")
        assert [f.split(":")[0] for f in found] == ["__init__.py", "npu_norm.py"], (offset, found)
        # a deeper package (whose registry the test tree lacks): the kernel module still reports
        found = _found(
            tmp_path / f"d{i}", _files("norms/rms_norm", template, body, fn, fn, offset), "norms/rms_norm"
        )
        assert found, (offset, found)


@pytest.mark.parametrize("template", [REGISTER, FACTORY], ids=["register_op", "factory"])
def test_standard_row_binding_the_offset_flag_is_reported(tmp_path: Path, template: str) -> None:
    fn, flag, body = FLAGGED["ifexp"]
    files = _files("rms_norm", template, body, fn, _bind(fn, flag, True), _bind(fn, flag, True))
    assert _found(tmp_path, files, "rms_norm")


# the offset spelled in a statement of its own or in a helper: (name, body) of a kernel on the offset row only
OFFSET_SPELLINGS = {
    "augmented-cast": "def centred_norm(x, norm_weight, eps):\n    w32 = norm_weight.to(torch.float32)\n"
    "    w32 += 1\n    return torch_npu.npu_rms_norm(x, w32.to(x.dtype), eps)[0]\n",
    "augmented-clone": "def centred_norm(x, weight, eps):\n    w = weight.clone()\n    w += 1.0\n"
    "    return torch_npu.npu_rms_norm(x, w, eps)[0]\n",
    "helper-sum": "def _with_offset(t):\n    return t.float() + 1\n\n\ndef centred_norm(x, scale, eps):\n"
    "    return torch_npu.npu_rms_norm(x, _with_offset(scale).type_as(x), eps)[0]\n",
    "helper-add": "def _shift(w, dtype):\n    return w.to(dtype).add(1.0)\n\n\ndef centred_norm(x, weight, eps):\n"
    "    return torch_npu.npu_rms_norm(x, _shift(weight.float(), torch.float32), eps)[0]\n",
}

OFFSET_ONLY = """
from ...registry import register_op
from .npu_norm import centred_norm

register_op("rms_norm", "qwen3_5", "npu", centred_norm, None)
"""


@pytest.mark.parametrize("shape", sorted(OFFSET_SPELLINGS))
def test_offset_spelled_in_a_statement_or_helper_is_read(tmp_path: Path, shape: str) -> None:
    files = _files("rms_norm", OFFSET_ONLY, OFFSET_SPELLINGS[shape], "centred_norm", "", "")
    assert _found(tmp_path, files, "rms_norm") == []


@pytest.mark.parametrize("shape", sorted(OFFSET_SPELLINGS))
def test_the_same_kernel_on_the_standard_row_is_reported(tmp_path: Path, shape: str) -> None:
    files = _files(
        "rms_norm",
        OFFSET_ONLY.replace('"qwen3_5"', '"standard"'),
        OFFSET_SPELLINGS[shape],
        "centred_norm",
        "",
        "",
    )
    assert _found(tmp_path, files, "rms_norm")


def test_helper_adding_one_to_something_else_keeps_the_kernel_standard(tmp_path: Path) -> None:
    body = (
        "def _eps_plus_one(eps):\n    return eps + 1\n\n\ndef centred_norm(x, weight, eps):\n"
        "    y = torch_npu.npu_rms_norm(x, weight, _eps_plus_one(eps))[0]\n    acc = weight.float()\n"
        "    n = 0\n    n += 1\n    return y\n"
    )
    files = _files("rms_norm", OFFSET_ONLY, body, "centred_norm", "", "")
    assert _found(tmp_path, files, "rms_norm")
