"""NPU446 packing-boundary-side."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class PackingBoundarySide(Rule):
    code = "NPU446"
    name = "packing-boundary-side"
    summary = (
        "A loop over packed samples masks the boundary label at the wrong end: it skips the first sample but "
        "masks each sample's last label (or skips the last and masks each first)."
    )
    why = (
        "When samples are packed into one row, the label that would train the last token of sample i-1 to predict "
        "the first token of sample i must be `IGNORE_INDEX`. With unshifted labels that is sample i's first "
        "label, for every sample but the first (`for i in range(1, n): labels[i][0] = IGNORE_INDEX`); with labels "
        "shifted per sample it is the last label of every sample but the last. A loop that starts at the second "
        "sample and masks `[-1]` leaves the cross-sample target live and drops a real one at each sample's end; "
        "training still runs. The check reads the loop's range and the index it masks."
    )
    bad = (
        Example(
            """
            IGNORE_INDEX = -100


            def mask_boundaries(segments):
                for i in range(1, len(segments)):
                    segments[i][-1] = IGNORE_INDEX
                return segments
            """,
            path="veomni/data/toy_collator.py",
            title="skips the first sample, masks the last label",
        ),
    )
    good = (
        Example(
            """
            IGNORE_INDEX = -100


            def mask_boundaries(segments):
                for i in range(1, len(segments)):
                    segments[i][0] = IGNORE_INDEX
                return segments
            """,
            path="veomni/data/toy_collator.py",
            title="each later sample's first label",
        ),
    )
    fix_safety = "No fix."
    requires = ("range(", ("IGNORE", "ignore", "-100"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _first(self, where: ast.AST) -> bool:
        """Whether ``where`` is reported for the first time (a nested function is walked with its parent too)."""
        seen = self.ctx.memo.setdefault((self.code, "reported"), set())
        assert isinstance(seen, set)
        if id(where) in seen:
            return False
        seen.add(id(where))
        return True

    def visit(self, node: ast.AST) -> None:
        for where, why in losspath.boundary_side_faults(node):
            if not self._first(where):
                continue
            self.report(where, f"`{ast.unparse(where)}` masks the wrong end of a packed sample: {why}")
