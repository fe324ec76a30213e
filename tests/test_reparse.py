"""``core.reparse.DocumentParse``: a buffer parsed again around an edit gives the tree ``ast.parse`` of the whole
text gives, positions included, or falls back to the whole parse (and the language server's findings do not
change)."""

from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

import pytest

from npu_lint.core.astutil import FileIndex
from npu_lint.core.reparse import DocumentParse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

PIECES = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "'",
    '"',
    '"""',
    "#",
    ":",
    " ",
    "    ",
    "\t",
    "\\",
    "x",
    "1",
    ",",
    "=",
    "@",
]


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=True)


def _same_index(doc: DocumentParse, tree: ast.Module) -> None:
    """The document's file index (spliced after a partial parse) is the one ``FileIndex`` builds for the tree."""
    fresh = FileIndex(tree)
    assert doc.index is not None and doc.index.root is tree
    assert [id(n) for n in doc.index.nodes] == [id(n) for n in fresh.nodes]
    assert doc.index.depth == fresh.depth
    assert doc.index.by_type == fresh.by_type


def _sources() -> list[str]:
    from lsp_latency import generated_text

    files = sorted((REPO / "examples" / "veomni").rglob("*.py"))
    picked = [p for p in files if p.stat().st_size > 3000][:4]
    return [generated_text(600), *(p.read_text(encoding="utf-8") for p in picked)]


def _edit(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    line = lines[i]
    kind = rng.randrange(5)
    at = rng.randrange(len(line) + 1)
    if kind == 0:  # type a piece
        line = line[:at] + rng.choice(PIECES) + line[at:]
    elif kind == 1 and line:  # delete a few characters
        line = line[:at] + line[at + rng.randrange(1, 4) :]
    elif kind == 2:  # comment the line out, or back in
        line = line[1:] if line.startswith("#") else "#" + line
    elif kind == 3:  # a word retyped
        line = line.replace("self", "this", 1) if "self" in line else line + "  # note"
    else:  # another line's text
        line = lines[rng.randrange(len(lines))]
    lines[i] = line
    return "\n".join(lines)


@pytest.mark.parametrize("seed", [1, 2])
def test_partial_parse_is_the_whole_parse(seed: int) -> None:
    rng = random.Random(seed)
    partial = 0
    for source in _sources():
        doc = DocumentParse()
        doc.parse(source, "m.py")
        text = source
        for _ in range(50):
            new = _edit(rng, text)
            try:
                want = ast.parse(new)
            except (SyntaxError, ValueError):
                with pytest.raises((SyntaxError, ValueError)):
                    doc.parse(new, "m.py")
                if rng.random() < 0.5:
                    continue  # the buffer stays broken a while, or the edit is undone
                text = source if rng.random() < 0.3 else text
                continue
            before = doc.reparsed
            got = doc.parse(new, "m.py")
            partial += doc.reparsed - before
            assert _dump(got) == _dump(want)
            assert got is not want and isinstance(got, ast.Module)
            _same_index(doc, got)
            text = new
    assert partial > 40  # the partial path is the one exercised


def test_fallbacks() -> None:
    doc = DocumentParse()
    doc.parse("import os\n\n\nx = 1\ny = 2\n", "m.py")
    doc.parse("import os\n\n\nx = 1\n\ny = 2\n", "m.py")  # a line added: whole
    assert doc.reparsed == 0
    tree = doc.parse("import os\n\n\nx = 1\n\ny = 3\n", "m.py")
    assert doc.reparsed == 1
    _same_index(doc, tree)
    tree = doc.parse("import os\n\n\nx = 1\n# y\ny = 3\n", "m.py")  # between statements
    assert doc.reparsed == 2
    _same_index(doc, tree)
    tree = doc.parse("import os\n\n\nx = 1\nz = 0\ny = 3\n", "m.py")  # a statement typed there
    assert doc.reparsed == 3 and len(tree.body) == 4
    _same_index(doc, tree)
    tree = doc.parse("import os\n\n\nx = 1\n\ny = 3\n", "m.py")  # and removed
    assert doc.reparsed == 4 and len(tree.body) == 3
    _same_index(doc, tree)
    doc.parse("import os\n\n\nx = 1\n\ny = 3; z = 4\n", "m.py")
    doc.parse("import os\n\n\nx = 1\n\ny = 3; z = 5\n", "m.py")
    assert doc.reparsed == 6  # the statements sharing the line are parsed together
    doc.parse("import sys\n\n\nx = 1\n\ny = 3; z = 5\n", "m.py")  # the first two lines: whole
    assert doc.reparsed == 6
    with pytest.raises(SyntaxError):  # does not parse alone: parsed whole, which says why
        doc.parse("import sys\n\n\nx = (1\n\ny = 3; z = 5\n", "m.py")
    assert doc.reparsed == 6 and doc.text == "import sys\n\n\nx = 1\n\ny = 3; z = 5\n"  # the last parse kept
    doc.parse('import sys\n\n\nx = "a"\n\ny = 3; z = 5\n', "m.py")
    assert doc.reparsed == 7
    with pytest.warns(DeprecationWarning):  # warns at the file's own line: parsed whole
        doc.parse('import sys\n\n\nx = "\\w"\n\ny = 3; z = 5\n', "m.py")
    assert doc.reparsed == 7


def test_server_findings_unchanged_over_edits(tmp_path: Path) -> None:
    """The language server's path (``lint_source`` with the document's parse) and a whole parse give the same
    diagnostics over a run of edits of the LSP bench's generated file."""
    from lsp_latency import REL_PATH, generated_text

    from npu_lint.core.config import Settings, selected_codes
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source
    from npu_lint.rules.base import all_rules

    text = generated_text(900)
    path = tmp_path / REL_PATH
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text("[tool.npu-lint]\n", encoding="utf-8")
    settings = Settings(root=str(path.parent))
    codes = selected_codes(settings, {c: r.default_enabled for c, r in all_rules().items()})
    rng = random.Random(7)
    doc = DocumentParse()
    lines = text.split("\n")
    edits = [
        lambda s: s.replace("# [MODIFIED CLASS] ToyBlock3", "# [MODIFIED CLASS* ToyBlock3"),
        lambda s: s.replace("return block.cuda()", "return block.to(device)", 1),
        lambda s: s.replace("self.eps = eps", "self.eps = 1e-5", 2),
        lambda s: s.replace(".tril().cuda()", ".tril().npu()", 1),
        lambda s: s.replace("import math", "import math  # noqa", 1),
        lambda s: s.replace(
            "return self.o_proj(self.norm(out))", "return self.o_proj(self.norm(out)).cuda()"
        ),
    ]
    seen = 0
    for step in range(12):
        if step % 2 == 0:
            text = rng.choice(edits)(text)
        else:
            i = rng.randrange(20, len(lines))
            text_lines = text.split("\n")
            text_lines[i] = text_lines[i] + "  # edited"
            text = "\n".join(text_lines)
        src = SourceFile.from_text(str(path), text)
        fast = lint_source(src, codes, settings, reuse=doc)
        whole = lint_source(SourceFile.from_text(str(path), text), codes, settings)
        assert fast == whole
        seen += len(whole)
    assert doc.reparsed >= 8 and seen > 0
