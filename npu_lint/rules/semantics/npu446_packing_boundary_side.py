"""NPU446 packing-boundary-side."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath
from npu_lint.veomni.packing import packs_labels, unmasked_packs

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class PackingBoundarySide(Rule):
    code = "NPU446"
    name = "packing-boundary-side"
    summary = (
        "A loop over packed samples masks the boundary label at the wrong end: it skips the first sample but "
        "masks each sample's last label (or skips the last and masks each first); or a packing collator "
        "concatenates the samples' labels without masking any boundary."
    )
    why = (
        "When samples are packed into one row, the label that would train the last token of sample i-1 to predict "
        "the first token of sample i must be `IGNORE_INDEX`. With unshifted labels that is sample i's first "
        "label, for every sample but the first (`for i in range(1, n): labels[i][0] = IGNORE_INDEX`); with labels "
        "shifted per sample it is the last label of every sample but the last. A loop that starts at the second "
        "sample and masks `[-1]` leaves the cross-sample target live and drops a real one at each sample's end; "
        "training still runs. The check reads the loop's range and the index it masks. A packing collator (a function or "
        "class named for packing or collation, in a file that handles a `labels` key) that concatenates per-sample "
        "lists it gathered from the features (`torch.cat(batch[key], dim=...)`) while reading no ignore index at "
        "all masks no boundary: every sample's last token is trained on the next sample's first."
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
        Example(
            """
            import torch


            class ToyPackingCollator:
                def __call__(self, features):
                    batch = {"input_ids": [], "labels": []}
                    for feature in features:
                        for key in batch:
                            batch[key].append(feature[key])
                    for key in batch:
                        batch[key] = torch.cat(batch[key], dim=-1)
                    return batch
            """,
            path="veomni/data/toy_collator.py",
            title="samples packed with every boundary label live",
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
    requires = (("range(", "cat("), ("IGNORE", "ignore", "-100", "labels"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _class_of(self, func: ast.AST) -> ast.ClassDef | None:
        owners = self.ctx.memo.get((self.code, "owners"))
        if owners is None:
            owners = {
                id(item): cls
                for cls in nodes_of(self.ctx.tree, ast.ClassDef)
                for item in cls.body
                if isinstance(item, _FUNCS)
            }
            self.ctx.memo[(self.code, "owners")] = owners
        assert isinstance(owners, dict)
        return owners.get(id(func))

    def visit(self, node: ast.AST) -> None:
        if packs_labels(node, self._class_of(node), self.ctx.source.text):
            for call in unmasked_packs(node):
                if first_report(self, call):
                    self.report(
                        call,
                        f"`{ast.unparse(call)}` packs the per-sample sequences into one row without masking "
                        "any sample boundary (no ignore index in this function): after the causal shift the "
                        "last token of each sample is trained to predict the first token of the next one; set "
                        "each later sample's first label to the ignore index before concatenating.",
                    )
        for where, why in losspath.boundary_side_faults(node):
            if not first_report(self, where):
                continue
            self.report(where, f"`{ast.unparse(where)}` masks the wrong end of a packed sample: {why}")
