"""Compare npu-lint's NPU101/NPU102 with VeOmni's substring gate on a tree.

VeOmni's CI gate fails any file whose text contains `.cuda`, `"cuda"` or `"nccl"`. This script finds every
such occurrence in real code (it skips comments, docstrings and type annotations, using `tokenize` and
`ast`), and prints the occurrences that no NPU101/NPU102 diagnostic covers (same line). Each printed line
must be a legitimate use, explained in bench/accuracy/device.md.

    python bench/substring_gate.py /root/.cache/npu-lint-corpus/veomni-0.1.12/veomni/models
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

CODES = ["NPU101", "NPU102"]


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _annotation_spans(tree: ast.AST) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            anns.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            anns.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            spans.append(
                ((ann.lineno, ann.col_offset), (ann.end_lineno or ann.lineno, ann.end_col_offset or 0))
            )
    return spans


def occurrences(text: str) -> list[tuple[int, int, str]]:
    """(line, byte col, matched token) of each gate hit outside comments, docstrings and annotations."""
    tree = ast.parse(text)
    doc = _docstring_lines(tree)
    spans = _annotation_spans(tree)
    hits: list[tuple[int, int, str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, tok in enumerate(tokens):
        line, col = tok.start
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.OP and tok.string == "." and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt.type == tokenize.NAME and nxt.string.startswith("cuda") and nxt.start == tok.end:
                hits.append((line, col, "." + nxt.string))
        elif tok.type == tokenize.STRING and line not in doc:
            body = tok.string
            for needle in ('"cuda"', "'cuda'", '"nccl"', "'nccl'", ".cuda"):
                if needle in body:
                    hits.append((line, col, body if len(body) < 40 else body[:37] + "..."))
                    break
    out = []
    for line, col, what in hits:
        inside = any(s <= (line, col) < e for s, e in spans)
        if not inside:
            out.append((line, col, what))
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(".")
    total = covered = 0
    uncovered: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        hits = occurrences(text)
        if not hits:
            continue
        src = SourceFile.from_text(str(path), text)
        diags = lint_source(src, CODES, Settings())
        lines = {ln for d in diags for ln in range(d.line, d.end_line + 1)}
        for line, col, what in hits:
            total += 1
            if line in lines:
                covered += 1
            else:
                uncovered.append(f"{path}:{line}:{col + 1}: {what}: {src.line_text(line).strip()}")
    for row in uncovered:
        print(row)
    print(
        f"gate occurrences in code: {total}, reported by NPU101/NPU102: {covered}, uncovered: {len(uncovered)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
