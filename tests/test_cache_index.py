"""The warm path: one signed index per run, stat first, hash only on a stat change, racily clean entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus import VEOMNI_MAIN, shared_tree_copy

BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"
GOOD = "import torch\n\n\ndef f(model):\n    return model.cpu_()\n"  # same size as BAD, no finding


def _check_json(tree: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--exit-zero", "--output-format", "json", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cold_and_warm_runs_give_identical_json(tmp_path: Path) -> None:
    tree = shared_tree_copy(VEOMNI_MAIN, tmp_path / "tree")
    cold = _check_json(tree, "--no-cache", "veomni/models")
    fill = _check_json(tree, "veomni/models")
    warm = _check_json(tree, "veomni/models")
    assert json.loads(cold)  # findings to compare
    assert cold == fill == warm
    (index,) = (tree / ".npu_lint_cache").rglob("index-*.json")
    assert len(list((tree / ".npu_lint_cache").rglob("*.json"))) == 1  # one cache file, read once


QUIET = 0.3  # seconds: files written this long before a run are outside the (shortened) racy window


def _lint(tree: Path, monkeypatch: pytest.MonkeyPatch, racy_ns: int = 10**8) -> tuple[int, list[str]]:
    """One ``check`` in this process: (exit code, the files read besides the cache index)."""
    from npu_lint.cli import main
    from npu_lint.engine import cache, lint, pool

    monkeypatch.setattr(cache, "RACY_NS", racy_ns)
    reads: list[str] = []

    def counting(real):  # noqa: ANN001, ANN202
        def read(path, *args, **kwargs):  # noqa: ANN001, ANN202
            reads.append(os.path.basename(path))
            return real(path, *args, **kwargs)

        return read

    monkeypatch.setattr(pool, "read_regular", counting(pool.read_regular))
    monkeypatch.setattr(lint, "read_regular", counting(lint.read_regular))
    monkeypatch.chdir(tree)
    code = main(["check", "--jobs", "1", "-q", "--select", "NPU101", "."])
    monkeypatch.undo()
    return code, reads


def test_unchanged_files_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text(BAD)
    time.sleep(QUIET)
    assert _lint(tmp_path, monkeypatch) == (1, ["m0.py", "m1.py", "m2.py"] * 2)
    assert _lint(tmp_path, monkeypatch) == (1, [])  # stat keys match: no file read, no hash
    os.utime(tmp_path / "m1.py")  # touched, same content: read and hashed, results reused
    time.sleep(QUIET)
    assert _lint(tmp_path, monkeypatch) == (1, ["m1.py"])
    (tmp_path / "m2.py").write_text(GOOD)  # changed: linted again
    time.sleep(QUIET)
    capsys.readouterr()
    assert _lint(tmp_path, monkeypatch) == (1, ["m2.py", "m2.py"])
    out = capsys.readouterr().out
    assert "m0.py" in out and "m1.py" in out and "m2.py" not in out


def test_racily_clean_file_is_linted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """A file written just before the index (within its mtime granularity), then edited keeping its size
    and mtime, is still linted again: its entry kept no stat key."""
    path = tmp_path / "m.py"
    path.write_text(BAD)
    st = path.stat()
    assert _lint(tmp_path, monkeypatch, racy_ns=60 * 10**9)[0] == 1  # written "within the granularity"
    (index,) = (tmp_path / ".npu_lint_cache").rglob("index-*.json")
    entry = json.loads(index.read_bytes().partition(b"\n")[2])["files"][str(path)]
    assert entry["st"] is None  # racily clean: not trusted on its stat
    path.write_text(GOOD)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    capsys.readouterr()
    assert _lint(tmp_path, monkeypatch, racy_ns=60 * 10**9) == (0, ["m.py", "m.py"])


def test_a_file_older_than_the_window_keeps_its_stat_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.py"
    path.write_text(BAD)
    time.sleep(QUIET)
    _lint(tmp_path, monkeypatch)
    (index,) = (tmp_path / ".npu_lint_cache").rglob("index-*.json")
    entry = json.loads(index.read_bytes().partition(b"\n")[2])["files"][str(path)]
    st = path.stat()
    assert entry["st"] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def test_a_serial_cold_run_parses_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # noqa: ANN001
    """The project rules (run after the file pass in one process) read the file pass's trees of specs,
    generated files and ``__init__`` files: each of them is parsed whole once, and the sections of a
    generated file are located in its tree by line range, not parsed again."""
    import ast

    from npu_lint.cli import main

    tree = shared_tree_copy(VEOMNI_MAIN, tmp_path / "tree")
    models = tree / "veomni" / "models"
    texts = {str(p.relative_to(tree)): p.read_text() for p in models.rglob("*.py")}
    whole: dict[str, int] = {}
    chunks = 0
    real = ast.parse

    def parse(source, filename="<unknown>", *args, **kwargs):  # noqa: ANN001, ANN202
        nonlocal chunks
        name = os.path.relpath(str(filename), tree) if os.path.isabs(str(filename)) else str(filename)
        if texts.get(os.path.normpath(name)) == source:
            whole[os.path.normpath(name)] = whole.get(os.path.normpath(name), 0) + 1
        elif filename == "<spec>" and source.startswith("class _:\n"):
            chunks += 1  # a patched method parsed on its own
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    monkeypatch.chdir(tree)
    main(["check", "--no-cache", "--jobs", "1", "--exit-zero", "-q", "-o", os.devnull, "veomni/models"])
    monkeypatch.undo()
    generated = [p for p in texts if "/generated/" in p]
    assert generated and all(whole.get(p) == 1 for p in generated), {p: whole.get(p) for p in generated}
    assert all(n == 1 for n in whole.values()), {p: n for p, n in whole.items() if n != 1}
    assert len(whole) >= 0.95 * len(texts)  # a few files decode to another text (line endings): not counted
    assert chunks <= len(generated)  # was hundreds: only files the file pass could not share


def test_the_project_scan_is_kept_in_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``profile.scan_definitions`` reads every veomni/*.py file; the index keeps its result keyed by the
    files' stat keys, so an unchanged tree is not read again, and a changed file is."""
    from npu_lint.engine import Cache
    from npu_lint.veomni import profile, scanstore
    from npu_lint.veomni.imports import ModuleIndex

    tree = shared_tree_copy(VEOMNI_MAIN, tmp_path / "tree")
    time.sleep(QUIET)
    monkeypatch.setattr(scanstore, "RACY_NS", 10**8)
    reads: list[Path] = []
    real = profile.read_regular  # the one reader, as the profile module calls it
    monkeypatch.setattr(
        profile, "read_regular", lambda path, *a, **k: (reads.append(path), real(path, *a, **k))[1]
    )

    def scan() -> dict[str, list[str]]:
        cache = Cache(str(tmp_path / "cache"), "fp")
        scanstore.use_store(cache)
        try:
            return profile.scan_definitions(tree, ModuleIndex(tree))
        finally:
            scanstore.use_store(None)
            cache.flush()

    first = scan()
    assert first and len(reads) > 100
    reads.clear()
    assert scan() == first and reads == []  # one index read, no source read
    spec = next((tree / "veomni").rglob("*.py"))
    spec.write_text(spec.read_text() + "\n\nclass HardwareRequirement:\n    pass\n")
    time.sleep(QUIET)
    changed = scan()
    assert len(reads) > 100 and changed != first and "HardwareRequirement" in changed


def test_deleted_files_leave_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(BAD)
    _lint(tmp_path, monkeypatch)
    (tmp_path / "b.py").unlink()
    (tmp_path / "a.py").write_text(GOOD)  # a change: the index is written again
    _lint(tmp_path, monkeypatch)
    (index,) = (tmp_path / ".npu_lint_cache").rglob("index-*.json")
    assert sorted(json.loads(index.read_bytes().partition(b"\n")[2])["files"]) == [str(tmp_path / "a.py")]


def test_the_registry_and_npu_selections_are_kept_under_their_files_stat_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry rows, the NPU handle selections and the NPU remaps of a tree are read once and kept in the index under
    their files' stat keys: a warm run reads no registration module and no NPU file; an edited ops module
    is read again and its new row is seen."""
    from npu_lint.engine import Cache
    from npu_lint.veomni import registry, scanstore
    from npu_lint.veomni.layout import find_model_packages

    tree = shared_tree_copy(VEOMNI_MAIN, tmp_path / "tree")
    time.sleep(QUIET)
    monkeypatch.setattr(scanstore, "RACY_NS", 10**8)
    reads: list[Path] = []
    real = registry.read_regular
    monkeypatch.setattr(
        registry, "read_regular", lambda path, *a, **k: (reads.append(Path(path)), real(path, *a, **k))[1]
    )
    packages = tuple(sorted(find_model_packages(tree / "veomni")))

    def load() -> tuple:
        cache = Cache(str(tmp_path / "cache"), "fp")
        scanstore.use_store(cache)
        try:
            return (
                registry.read_registry(tree),
                registry.read_npu_selections(packages, tree),
                registry.read_npu_remaps(packages, tree),
            )
        finally:
            scanstore.use_store(None)
            cache.flush()

    first = load()
    assert first[0][0] or first[0][1]  # rows were found
    assert first[1]  # and NPU selections
    assert any("ops" in p.parts for p in reads) and any(p.name.endswith("_npu.py") for p in reads)
    assert any(p.name.endswith("_gpu_patch_gen_config.py") for p in reads)  # the remaps' specs
    uncached = (
        registry.read_registry(tree),
        registry.read_npu_selections(packages, tree),
        registry.read_npu_remaps(packages, tree),
    )
    assert uncached == first  # the stored value is the computed one
    reads.clear()
    assert load() == first and reads == []  # one index read, no source read
    ops = next(
        p
        for p in sorted((tree / "veomni" / "ops").rglob("*.py"))
        if b"OpSlot(" in p.read_bytes() or b"KernelSpec(" in p.read_bytes()
    )
    ops.write_text(ops.read_text() + "\n")
    time.sleep(QUIET)
    again = load()
    assert ops in reads and again == first


def test_every_project_scan_slot_is_kept_by_the_index() -> None:
    """A slot the index does not list is dropped when the index is read back: its scan never hits the cache and the
    index is rewritten on every run (the import-site scan, `imports`, was missing; found by the round-12 review)."""
    import ast

    import npu_lint.veomni
    from npu_lint.engine.cache import SCAN_SLOTS

    used = set()
    for path in Path(npu_lint.veomni.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "stored"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                used.add(node.args[0].value)
    assert "imports" in used
    assert used <= set(SCAN_SLOTS)
