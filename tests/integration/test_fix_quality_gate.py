"""Fixes pass the tree's own quality gate on VeOmni's public main (`make quality`: `ruff check` + `ruff format
--check` with the tree's `[tool.ruff]`): on a copy of ../shared/corpora/veomni-main, `npu-lint check --fix` and
then `--fix --unsafe-fixes` over veomni/models add no ruff finding to the files they change (compared with the
unmodified tree, per file and code), the safe run creates no file, every changed file parses, the output names
the tree's patchgen command for each edited spec, and a second run changes nothing."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import corpus
import pytest

RUFF = str(Path(sys.executable).parent / "ruff")  # the ruff npu-lint depends on, by absolute path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "veomni").rglob("*.py"))}


def _findings(root: Path, files: list[str]) -> Counter[tuple[str, str]]:
    if not files:
        return Counter()
    proc = subprocess.run(
        [RUFF, "check", "--no-cache", "--output-format", "json", "--exit-zero", *files],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    base = root.resolve()
    return Counter(
        (Path(d["filename"]).relative_to(base).as_posix(), d["code"]) for d in json.loads(proc.stdout)
    )


def _unformatted(root: Path, files: list[str]) -> set[str]:
    out = set()
    for name in files:
        proc = subprocess.run(
            [RUFF, "format", "--no-cache", "--check", name],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode:
            out.add(name)
    return out


def _fix(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--exit-zero", *flags, "veomni/models"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=1800,
    )


def _gate(clean: Path, root: Path, before: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """(changed files, created files) of ``root`` against ``before``; asserts the quality gate on them."""
    after = _snapshot(root)
    changed = sorted(p for p in after if before.get(p) != after[p])
    created = sorted(p for p in after if p not in before)
    existing = [p for p in changed if p in before]
    old, new = _findings(clean, existing), _findings(root, changed)
    added = {k: n - old[k] for k, n in new.items() if n > old[k]}
    assert added == {}, f"ruff findings the fixes added: {added}"
    assert _unformatted(root, changed) - _unformatted(clean, existing) == set()
    for path in changed:
        ast.parse(after[path], filename=path)
    return changed, created


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("gate")
    clean = corpus.shared_tree_copy(corpus.VEOMNI_MAIN, base / "clean")
    work = corpus.shared_tree_copy(corpus.VEOMNI_MAIN, base / "work")
    return clean, work


def test_safe_then_unsafe_fixes_keep_make_quality(trees: tuple[Path, Path]) -> None:
    clean, work = trees
    before = _snapshot(clean)
    assert (clean / "pyproject.toml").read_text().count("[tool.ruff]") == 1  # the tree's own configuration

    safe = _fix(work, "--fix")
    assert safe.returncode == 0, safe.stderr
    changed, created = _gate(clean, work, before)
    assert changed, safe.stdout[-2000:]
    assert created == [], "a safe --fix created files"
    for spec in [p for p in changed if p.endswith("_patch_gen_config.py")]:  # an edited spec names patchgen
        module = spec[: -len(".py")].replace("/", ".")
        assert f"Next: run `patchgen {module} --diff` from " in safe.stdout, safe.stdout[-3000:]

    unsafe = _fix(work, "--fix", "--unsafe-fixes")
    assert unsafe.returncode == 0, unsafe.stderr
    changed, created = _gate(clean, work, before)
    assert created and all(p.endswith("_npu_patch_gen_config.py") for p in created)
    for spec in created:  # every created spec names the tree's own patchgen command
        module = spec[: -len(".py")].replace("/", ".")
        assert f"Next: run `patchgen {module} --diff` from " in unsafe.stdout, unsafe.stdout[-3000:]
    assert "`make patchgen` regenerates every spec" in unsafe.stdout
    # no call went into a default argument: the device defaults are taken in the body
    auto = (work / "veomni/models/auto.py").read_text()
    assert "= get_device_type()," not in auto and "init_device = get_device_type()" in auto

    state = _snapshot(work)
    again = _fix(work, "--fix", "--unsafe-fixes")
    assert again.returncode == 0, again.stderr
    assert _snapshot(work) == state, "a second --fix changed files"
