"""Round-9 attacks (bench/accuracy/adversary-round9.md): each test fails without the fix it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.cli import main

KERNEL = "def forward(x):\n    return x\n\n\ndef backward(g):\n    return g\n"


# -- A9-14: a name imported differently by the branches of an `if` ---------------------------------------------


def test_a9_14_an_import_chosen_at_run_time_is_not_read_as_the_gpu_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`if not is_torch_npu_available(): from .triton import forward as fwd` / `else: from .npu import ...`:
    on Ascend the row binds the NPU kernel. NPU220 read only the `if` branch and said an Ascend host gets the
    Triton kernel (untrue); a name the branches bind differently is now left unresolved."""
    import corpus

    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    pkg = root / "veomni" / "ops" / "kernels" / "advx"
    (pkg / "standard").mkdir(parents=True)
    (pkg / "standard" / "__init__.py").write_text("", encoding="utf-8")
    for name in ("npu", "triton"):
        (pkg / "standard" / f"{name}.py").write_text(KERNEL, encoding="utf-8")
    (pkg / "__init__.py").write_text(
        "from veomni.utils.import_utils import is_torch_npu_available\n\n"
        "from ...registry import register_op\n"
        "from ...requirement import NpuKernelRequirement\n\n"
        "if not is_torch_npu_available():\n"
        "    from .standard.triton import forward as fwd\n"
        "else:\n"
        "    from .standard.npu import forward as fwd\n\n"
        'register_op("rms_norm", "advx", "npu", fwd, None, requirement=NpuKernelRequirement())\n',
        encoding="utf-8",
    )
    main(["check", "--no-cache", "--select", "NPU220", str(pkg)])
    assert "NPU220" not in capsys.readouterr().out
    # the same row bound to the Triton kernel in both branches is still said
    text = (pkg / "__init__.py").read_text(encoding="utf-8")
    (pkg / "__init__.py").write_text(text.replace(".standard.npu import", ".standard.triton import"), "utf-8")
    main(["check", "--no-cache", "--select", "NPU220", str(pkg)])
    assert "NPU220" in capsys.readouterr().out
