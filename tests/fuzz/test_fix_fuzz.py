"""Fixes on real VeOmni code with mutated text: every fixed file parses, a second run changes nothing, noqa is
honoured, nothing outside the tree is written; --add-noqa is idempotent."""

from __future__ import annotations

import ast
import functools
import os
import re
import tempfile
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, fix_tree, lint_paths
from npu_lint.engine.adopt import add_noqa
from npu_lint.rules.base import all_rules
from npu_lint.veomni.project import load_project

from .strategies import FUZZ, TREE, mutated_source, shared_tree

MODEL_DIR = "veomni/models/transformers/qwen2"


@functools.lru_cache(maxsize=1)
def _context():  # noqa: ANN202
    root = shared_tree(TREE)
    settings = Settings(root=str(root))
    codes = sorted(all_rules())  # --select ALL
    return root, settings, codes, load_project([str(root / MODEL_DIR)], settings)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


_BARE_NOQA = re.compile(r"#\s*noqa\s*$", re.IGNORECASE)


@FUZZ
@given(mutated_source())
def test_fixes_parse_are_idempotent_and_honour_noqa(text: str) -> None:
    root, settings, codes, project = _context()
    # a file of the tree (in memory: fix_source writes nothing), so the tree's names and profile apply
    src = SourceFile.from_text(str(root / MODEL_DIR / "fuzz_case.py"), text)
    first = fix_source(src, codes, settings, project, unsafe=True)
    event(f"fixed: {first.text != text}")
    if _parses(text):
        assert _parses(first.text), "a fix produced unparsable code"
    second = fix_source(SourceFile.from_text(src.path, first.text), codes, settings, project, unsafe=True)
    assert second.text == first.text, "a second fix run changed the text"
    # a line carrying a bare noqa comment is never rewritten
    for line in re.split(r"\r\n|\r|\n", text):
        if _BARE_NOQA.search(line) and "'" not in line and '"' not in line:
            assert line in re.split(r"\r\n|\r|\n", first.text), f"noqa line changed: {line!r}"
    # the newline style of a file with one style is kept
    if "\r\n" in text and not re.search(r"(?<!\r)\n", text):
        assert not re.search(r"(?<!\r)\n", first.text)


@settings(FUZZ, max_examples=max(8, FUZZ.max_examples // 3))
@given(mutated_source(), st.sampled_from(["\r\n", "\r"]))
def test_the_fix_does_not_depend_on_the_newline_style(text: str, newline: str) -> None:
    """LibCST's round-trip anchor, for fixes: the same file with CRLF or CR line endings gets the same fix."""
    root, settings_, codes, project = _context()
    path = str(root / MODEL_DIR / "fuzz_case.py")
    lf = text.replace("\r\n", "\n").replace("\r", "\n")
    other = lf.replace("\n", newline)
    fixed_lf = fix_source(SourceFile.from_text(path, lf), codes, settings_, project, unsafe=True).text
    fixed = fix_source(SourceFile.from_text(path, other), codes, settings_, project, unsafe=True).text
    assert fixed.replace(newline, "\n") == fixed_lf
    assert "\n" not in fixed.replace("\r\n", "")  # no LF line creeps in


@FUZZ
@given(mutated_source(), st.booleans())
def test_fix_tree_writes_nothing_outside_the_tree(text: str, unsafe: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        tree, outside = base / "tree", base / "outside"
        (tree / "pkg").mkdir(parents=True)
        outside.mkdir()
        (outside / "other.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
        (tree / "pkg" / "link.py").symlink_to(outside / "other.py")
        path = tree / "pkg" / "m.py"
        path.write_bytes(text.encode("utf-8"))
        before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
        settings = Settings(root=str(tree))
        codes = sorted(c for c, r in all_rules().items() if r.default_enabled)
        results = lint_paths([str(path)], codes, settings, None, jobs=1)
        done = fix_tree([d for r in results for d in r.diagnostics], codes, settings, None, unsafe=unsafe)
        assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
        event(f"written: {path.read_bytes() != text.encode('utf-8')}")
        assert sorted(os.listdir(base)) == ["outside", "tree"]
        for created in done.created:
            assert Path(created).resolve().is_relative_to(tree.resolve())
        if _parses(text):
            assert _parses(path.read_text(encoding="utf-8"))
        assert not done.errors, done.errors
        if path.read_bytes() != text.encode("utf-8"):
            assert str(path) in done.fixed_counts  # a count for every written file, and only for those


@FUZZ
@given(mutated_source())
def test_add_noqa_is_idempotent_and_silences_what_it_can(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        path = tree / "m.py"
        path.write_bytes(text.encode("utf-8"))
        settings = Settings(root=str(tree))
        codes = sorted(c for c, r in all_rules().items() if r.default_enabled and c != "NPU001")

        def lint() -> tuple[list, dict]:
            results = lint_paths([str(path)], codes, settings, None, jobs=1)
            return [d for r in results for d in r.diagnostics], {r.path: r.digest for r in results}

        diags, digests = lint()
        first = add_noqa(diags, digests, [str(tree)])
        event(f"noqa added: {first.added > 0}")
        assert not first.errors
        after = path.read_bytes().decode("utf-8")
        if _parses(text):
            assert _parses(after), "--add-noqa produced unparsable code"
        # line endings kept line by line: only comments were appended
        assert len(re.findall(r"\r\n|\r|\n", after)) == len(re.findall(r"\r\n|\r|\n", text))
        left, digests = lint()
        skipped_lines = {s.split(":")[1] for s in first.skipped if s.count(":") >= 2}
        assert all(str(d.line) in skipped_lines for d in left), [(d.code, d.line) for d in left]
        second = add_noqa(left, digests, [str(tree)])
        assert second.added == 0 and path.read_bytes().decode("utf-8") == after


def test_the_fuzz_corpus_is_real_veomni_code() -> None:
    from .strategies import chunks

    pool = chunks()
    assert len(pool) > 20
    assert any(".cuda" in body or "torch.cuda" in body for _, body in pool)
