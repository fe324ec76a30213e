"""The real corpora used by integration tests: the veomni==0.1.12 wheel from PyPI (downloaded once with
``pip download --no-deps``, cached outside the repository) and the installed transformers source.

Tests call ``veomni_wheel_root()``; when the package index is unreachable they are skipped with a reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

VEOMNI_VERSION = "0.1.12"
CACHE = Path(os.environ.get("NPU_LINT_CORPUS_CACHE", Path.home() / ".cache" / "npu-lint-corpus"))


def veomni_wheel_root() -> Path:
    """Directory holding the extracted wheel (``<root>/veomni/models``...). Skips the test if unavailable."""
    root = CACHE / f"veomni-{VEOMNI_VERSION}"
    if (root / "veomni" / "models").is_dir():
        return root
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
            f"veomni=={VEOMNI_VERSION}",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot download veomni=={VEOMNI_VERSION} from the package index: {exc}")
        wheels = list(Path(tmp).glob("veomni-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(
                f"package index unreachable, veomni=={VEOMNI_VERSION} not downloaded: "
                f"{proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
            )
        staging = Path(tmp) / "x"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(staging)
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
    return root


def veomni_models_copy(dest: Path) -> Path:
    """A writable copy of the wheel's tree (``dest/veomni``), for fix tests. Returns ``dest``."""
    src = veomni_wheel_root() / "veomni"
    shutil.copytree(src, dest / "veomni")
    return dest
