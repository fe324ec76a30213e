"""The vendor-kernel table: lookups, and the torch_npu names checked against the torch-npu wheel's sources.

torch_npu cannot be imported without Ascend drivers, so the wheel is read statically: it is downloaded once
(``pip download --no-deps --only-binary=:all:``, ~28 MB for 2.9.0 / CPython 3.11 / x86_64) into the corpus cache
outside the repository, opened with zipfile, and its Python sources are searched. A kernel counts as present when
``torch_npu/utils/custom_ops.py`` exposes it (``torch_npu.<name> = torch.ops.npu.<name>``) or
``torch_npu/_op_plugin_docs.py`` documents it (``_add_torch_npu_docstr("<name>", ...)``). The ``_C`` extension is
a binary without ``.pyi`` stubs in this wheel, so the Python sources are the static record of the public names.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from corpus import CACHE

from npu_lint.veomni import catalog, vendor_map

TORCH_NPU_VERSION = "2.9.0"


def torch_npu_wheel() -> Path:
    """The cached torch-npu wheel for this interpreter and platform (fails when the index is unreachable: CI reaches PyPI)."""
    target = CACHE / f"torch-npu-{TORCH_NPU_VERSION}"
    wheels = sorted(target.glob("torch_npu-*.whl"))
    if wheels:
        return wheels[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            tmp,
            f"torch-npu=={TORCH_NPU_VERSION}",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"cannot download torch-npu=={TORCH_NPU_VERSION} from the package index: {exc}")
        found = list(Path(tmp).glob("torch_npu-*.whl"))
        if proc.returncode != 0 or not found:
            last = proc.stderr.strip().splitlines()[-1:] or [str(proc.returncode)]
            pytest.fail(
                f"package index unreachable or no torch-npu=={TORCH_NPU_VERSION} wheel for this "
                f"Python/platform: {last[0]}"
            )
        target.mkdir(parents=True, exist_ok=True)
        dest = target / found[0].name
        found[0].rename(dest)
    return dest


@pytest.fixture(scope="module")
def exposed_names() -> set[str]:
    with zipfile.ZipFile(torch_npu_wheel()) as zf:
        names: set[str] = set()
        members = set(zf.namelist())
        custom = zf.read("torch_npu/utils/custom_ops.py").decode("utf-8", "replace")
        names |= set(re.findall(r"^torch_npu\.(\w+)\s*=", custom, re.MULTILINE))
        if "torch_npu/_op_plugin_docs.py" in members:
            docs = zf.read("torch_npu/_op_plugin_docs.py").decode("utf-8", "replace")
            names |= set(re.findall(r'_add_torch_npu_docstr\(\s*"(\w+)"', docs))
        for stub in (m for m in members if m.startswith("torch_npu/_C") and m.endswith(".pyi")):
            names |= set(re.findall(r"^def (\w+)", zf.read(stub).decode("utf-8", "replace"), re.MULTILINE))
    assert len(names) > 100, "the wheel layout changed: no exposed kernel names found"
    return names


def test_torch_npu_names_exist_in_the_wheel(exposed_names: set[str]) -> None:
    missing = [n for n in vendor_map.torch_npu_names() if n not in exposed_names]
    assert not missing, (
        f"torch_npu names in npu_lint/vendor_map.py not found in torch-npu {TORCH_NPU_VERSION}"
    )


def test_table_ops_exist_in_the_catalog() -> None:
    ops = {row.op for row in catalog.BUILTIN_ROWS} | set(catalog.CONFIG_FIELD_TO_OP.values())
    for entry in vendor_map.TABLE:
        if entry.op is not None:
            assert entry.op in ops, entry
            if entry.variant is not None and entry.op in {r.op for r in catalog.BUILTIN_ROWS}:
                assert catalog.rows_for(entry.op, entry.variant), entry


@pytest.mark.parametrize(
    "name,expected",
    [
        ("torch_npu.npu_rms_norm", "rms_norm/standard"),
        ("torch_npu.npu_rotary_mul", "rope/full"),
        ("liger_kernel.transformers.rms_norm.LigerRMSNorm", "rms_norm/standard"),
        ("liger_kernel.transformers.swiglu.LigerSwiGLUMLP", "swiglu_mlp/standard"),
        ("liger_kernel.transformers.rope.liger_rotary_pos_emb", "rope/full"),
        (
            "liger_kernel.transformers.fused_linear_cross_entropy.LigerFusedLinearCrossEntropyLoss",
            "cross_entropy_loss/standard",
        ),
        ("flash_attn.flash_attn_func", "attention/standard"),
        ("flash_attn_interface.flash_attn_varlen_func", "attention/standard"),
        ("veomni.ops.kernels.rms_norm.npu.rms_norm_forward_npu", "rms_norm/standard"),
        ("torch_npu", ""),
        ("triton.language", ""),
    ],
)
def test_lookup(name: str, expected: str) -> None:
    entry = vendor_map.lookup(name)
    assert entry is not None
    assert entry.replacement() == expected


def test_not_vendor() -> None:
    for name in (
        "torch.nn.functional",
        "veomni.ops",
        "veomni.ops.kernels.cross_entropy.ForCausalLMLoss",
        "transformers.integrations.flash_attention",
        "triton_utils",
    ):
        assert vendor_map.lookup(name) is None, name
