"""Round-10 attacks (bench/accuracy/adversary-round10.md): each test fails without the fix it names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from npu_lint.cli import main

GPU_CALL = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def _tiny_tree(root: Path) -> Path:
    """The smallest VeOmni tree a device fix applies in: `veomni/ops` (the tree marker), the device helper the
    fix imports, one model module with a `.cuda()`."""
    for package in ("veomni", "veomni/ops", "veomni/utils", "veomni/models", "veomni/models/m"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("", encoding="utf-8")
    (root / "veomni/utils/device.py").write_text(
        'def get_device_type():\n    return "cpu"\n', encoding="utf-8"
    )
    (root / "veomni/models/m/mod.py").write_text(GPU_CALL, encoding="utf-8")
    return root


# -- A10-03/A10-06: a FIFO or a socket inside the tree stopped `--diff` and `migrate` ---------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a10_03_a_fifo_in_the_tree_does_not_stop_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--diff` copies the tree to stage its further passes; `shutil.copytree` refuses a named pipe, and the
    run ended with `internal error: Error: [(...pipe...)]`, exit 2. Special files are now left out of staging
    copies (`--diff` and `migrate` alike) and the real one is untouched."""
    root = _tiny_tree(tmp_path / "tree")
    os.mkfifo(root / "veomni/models/pipe")
    monkeypatch.chdir(root)
    code = main(["check", "--diff", "--no-cache", "veomni/models/m"])
    out, err = capsys.readouterr()
    assert "internal error" not in err
    assert code == 1
    assert "+    return x.to(get_device_type())" in out
    assert (root / "veomni/models/m/mod.py").read_text(encoding="utf-8") == GPU_CALL
    assert (root / "veomni/models/pipe").is_fifo()


def test_a10_03_staging_ignores_special_files_only(tmp_path: Path) -> None:
    from npu_lint.engine.write import staging_ignore

    (tmp_path / "a.py").write_text("", encoding="utf-8")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("a.py")
    (tmp_path / "w.safetensors").write_text("", encoding="utf-8")
    names = ["a.py", "d", "l", "w.safetensors", "gone"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "p")
        names.append("p")
    expected = {"w.safetensors"} | ({"p"} if hasattr(os, "mkfifo") else set())
    assert staging_ignore(str(tmp_path), names) == expected
