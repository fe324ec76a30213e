"""An edited buffer parsed again around the edit only (the language server's documents).

An editor's change usually stays inside one line: a top-level statement is retyped, a comment is edited. When
the new text has as many lines as the last parsed one, the lines that differ are found, and the top-level
statements whose lines (decorators included) they touch are parsed again from the new text, alone, with the
comment and blank lines of the same stretch; every other statement of the last tree is kept as it is (the trees
are never mutated: rules and memos read them only). The new module is a new ``ast.Module`` (memos kept per tree
start afresh) whose body is the old statements around the new ones.

The result is the tree ``ast.parse`` of the whole text gives (tests/test_reparse.py compares them, positions
included, over thousands of edits), because the stretch parsed alone starts where a top-level statement starts (a
line's first column, outside any bracket or string) and, parsed alone, ends the same way (else it does not parse:
an unclosed bracket or string, a trailing backslash); the tokenizer is then in the same state at both ends as in
the whole file, and line numbers are shifted by where the stretch starts. Anything else is parsed whole: lines
added or removed, a stretch that does not parse alone, statements sharing a line (``a = 1; b = 2``), a change on
the first two lines (an encoding declaration), a ``__future__`` import, a line holding a lone carriage return,
a stretch whose parse warns (an invalid escape sequence: the whole parse warns at the file's line numbers)."""

from __future__ import annotations

import ast
import warnings

from npu_lint.core.astutil import FileIndex, splice_index

__all__ = ["DocumentParse"]


class DocumentParse:
    """The last parse of one document: ``parse(text, path)`` is ``ast.parse(text, filename=path)``, built from
    the last tree where the edit allows (see the module docstring)."""

    __slots__ = ("text", "lines", "tree", "index", "_spans", "reparsed")

    def __init__(self) -> None:
        self.text: str | None = None
        self.lines: list[str] = []
        self.tree: ast.Module | None = None
        self.index: FileIndex | None = None  # the tree's file index (``astutil.FileIndex``), spliced likewise
        self._spans: list[tuple[int, int]] | None = None
        self.reparsed = 0  # how many parses were partial (tests, benches)

    def parse(self, text: str, path: str) -> ast.Module:
        lines = text.split("\n")
        found = self._partial(text, lines)
        if found is None:
            tree = ast.parse(text, filename=path)
            index = FileIndex(tree)
        else:
            tree, index = found
            self.reparsed += 1
        self.text, self.lines, self.tree, self.index, self._spans = text, lines, tree, index, None
        return tree

    def forget(self) -> None:
        self.text, self.lines, self.tree, self.index, self._spans = None, [], None, None, None

    def spans(self) -> list[tuple[int, int]]:
        """Per top-level statement of the last tree: its first line (decorators included) and its last."""
        if self._spans is None:
            out = []
            for stmt in self.tree.body if self.tree is not None else ():
                first = stmt.lineno
                for deco in getattr(stmt, "decorator_list", ()):
                    first = min(first, deco.lineno)
                out.append((first, stmt.end_lineno or stmt.lineno))
            self._spans = out
        return self._spans

    def _partial(self, text: str, lines: list[str]) -> tuple[ast.Module, FileIndex] | None:
        old, tree, index = self.lines, self.tree, self.index
        if tree is None or index is None or self.text is None or len(lines) != len(old):
            return None
        if "barry_as_FLUFL" in text:
            return None
        if text == self.text:
            same = ast.Module(body=list(tree.body), type_ignores=list(tree.type_ignores))
            return same, splice_index(index, same, 0, -1, [])
        n = len(lines)
        first = 0
        while first < n and lines[first] == old[first]:
            first += 1
        last = n - 1
        while last > first and lines[last] == old[last]:
            last -= 1
        lo, hi = first + 1, last + 1  # the changed lines, 1-based
        if lo <= 2:
            return None  # an encoding declaration may live there
        spans = self.spans()
        touched = [k for k, (a, b) in enumerate(spans) if a <= hi and b >= lo]
        if touched:
            k0, k1 = touched[0], touched[-1]
            start, end = min(lo, spans[k0][0]), max(hi, spans[k1][1])
        else:  # between statements: comments and blank lines (or new code)
            k0 = next((k for k, (a, _b) in enumerate(spans) if a > hi), len(spans))
            k1 = k0 - 1
            start, end = lo, hi
        if k0 > 0 and spans[k0 - 1][1] >= start:
            return None  # the previous statement ends on the stretch's first line
        if k1 + 1 < len(spans) and spans[k1 + 1][0] <= end:
            return None  # the next statement starts on its last line
        stretch = lines[start - 1 : end]
        for line in stretch:
            body = line[:-1] if line.endswith("\r") else line
            if "\r" in body:
                return None  # a lone carriage return ends a line for the tokenizer
        chunk = "\n".join(stretch)
        if "__future__" in chunk:
            return None
        if end < n:
            chunk += "\n"
        try:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                new = ast.parse(chunk)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if warned:
            return None  # an invalid escape: the whole parse warns, at the file's own line numbers
        for stmt in new.body:
            ast.increment_lineno(stmt, start - 1)
        body = [*tree.body[:k0], *new.body, *tree.body[k1 + 1 :]]
        module = ast.Module(body=body, type_ignores=[])
        return module, splice_index(index, module, k0, k1, new.body)
