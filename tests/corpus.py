"""The real corpora used by integration tests and benchmarks: the shared VeOmni trees beside the project
(``../shared/corpora/``: VeOmni's public ``main`` with its real patchgen, and the VeomniOp-era tree at 5d90dd16;
CI has them read-only), the veomni==0.1.12 wheel from PyPI (downloaded once with ``pip download --no-deps``,
cached outside the repository) and the installed transformers source.

Shared trees: ``shared_tree(name)`` (read-only path; a missing corpus fails the test, never skips it) and
``shared_tree_copy(name, dest)`` (a writable copy).

Tests call ``veomni_wheel_root()``, which fails the test with the reason when the package index is unreachable
(CI reaches PyPI: a test never skips for lack of a corpus); benchmarks call ``fetch_veomni()``, which raises
``CorpusUnavailable``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VEOMNI_VERSION = "0.1.12"
CACHE = Path(os.environ.get("NPU_LINT_CORPUS_CACHE", Path.home() / ".cache" / "npu-lint-corpus"))


class CorpusUnavailable(Exception):
    pass


def fetch_veomni() -> Path:
    """Directory holding the extracted wheel (``<root>/veomni/models``...), downloading it once."""
    root = CACHE / f"veomni-{VEOMNI_VERSION}"
    if (root / "veomni" / "models").is_dir():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
            "-d", tmp, f"veomni=={VEOMNI_VERSION}",
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CorpusUnavailable(f"cannot download veomni=={VEOMNI_VERSION}: {exc}") from None
        wheels = list(Path(tmp).glob("veomni-*.whl"))
        if proc.returncode != 0 or not wheels:
            detail = (proc.stderr.strip().splitlines() or [f"pip exited {proc.returncode}"])[-1]
            raise CorpusUnavailable(
                f"package index unreachable, veomni=={VEOMNI_VERSION} not downloaded: {detail}"
            )
        staging = Path(tmp) / "x"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(staging)
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
    return root


def veomni_wheel_root() -> Path:
    """``fetch_veomni()`` for tests: fails the test with the reason when the corpus cannot be had."""
    try:
        return fetch_veomni()
    except CorpusUnavailable as exc:
        import pytest

        pytest.fail(str(exc))


def veomni_models_copy(dest: Path) -> Path:
    """A writable copy of the wheel's tree (``dest/veomni``). Returns ``dest``."""
    shutil.copytree(veomni_wheel_root() / "veomni", dest / "veomni")
    return dest


SHARED_CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
VEOMNI_MAIN = "veomni-main"  # OpSlot generation, veomni/models/, with patchgen-pkg/, Makefile, tests/models/
VEOMNI_OP = "veomni-op-5d90dd16"  # VeomniOp generation, veomni/models_kernel/ (partial, see MANIFEST.txt)


def shared_tree(name: str) -> Path:
    """A shared corpus tree (read-only). Raises when it is missing: CI always has ``../shared/corpora``."""
    root = SHARED_CORPORA / name
    if not (root / "veomni").is_dir():
        raise CorpusUnavailable(
            f"no shared corpus {name!r} at {root} (expected ../shared/corpora beside the project)"
        )
    return root


def shared_tree_copy(name: str, dest: Path) -> Path:
    """A writable copy of a shared corpus tree at ``dest`` (created), as a user's working tree is (the corpora
    are read-only, and ``--fix`` refuses a read-only file). Returns ``dest``."""
    shutil.copytree(shared_tree(name), dest, symlinks=True, dirs_exist_ok=True, copy_function=copy_writable)
    return dest


def copy_writable(src: str, dst: str) -> str:
    """``npu_lint.engine.write.copy_writable`` (the one implementation), imported when first used: the benchmarks
    import this module to fetch the corpus before choosing which npu-lint they run."""
    from npu_lint.engine.write import copy_writable as copy

    return copy(src, dst)


def mixed_seed_oss(tmp_path: Path) -> Path:
    """Round 7's mixed tree: veomni-main's OpSlot seed_oss package inside the VeomniOp tree (its NPU spec's
    NPU504 reuses appear only once the GPU spec's patches are device-neutral: a two-pass fix)."""
    root = shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    src = shared_tree("veomni-main") / "veomni" / "models" / "transformers" / "seed_oss"
    dest = root / "veomni" / "models_kernel" / "transformers" / "seed_oss"
    shutil.copytree(src, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    (dest / "generated" / "patched_modeling_seed_oss_npu.py").unlink(missing_ok=True)
    for spec in dest.glob("*_patch_gen_config.py"):
        text = spec.read_text(encoding="utf-8").replace(
            "veomni.models.transformers", "veomni.models_kernel.transformers"
        )
        spec.write_text(
            text.replace("veomni/models/transformers", "veomni/models_kernel/transformers"), "utf-8"
        )
    return dest
