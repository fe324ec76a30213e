"""NPU424 label-pad-value."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.upstream import last_name

_DEFAULT_IGNORE = -100  # torch's `cross_entropy(ignore_index=-100)`, transformers' and VeOmni's IGNORE_INDEX
_PAD_FUNCS = ("F.pad", "functional.pad")
_FILLS = {"full": 1, "full_like": 1, "new_full": 1}  # the fill value's position (`torch.full(shape, v)`)


def _int_value(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _labelled(node: ast.AST | None) -> str | None:
    """The label tensor's spelling when ``node`` names one: `labels`, `self.labels`, `batch["labels"]`,
    `[f["labels"] for f in features]`, `target_labels`."""
    if node is None:
        return None
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _labelled(node.elt)
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return ast.unparse(node) if _label_word(key.value) else None
        return _labelled(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # `labels.long()`, `labels.to(d)`
        return _labelled(node.func.value)
    name = last_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if name and _label_word(name):
        return ast.unparse(node)
    return None


def _label_word(name: str) -> bool:
    """`labels`, `target_labels`, `label_ids`: a loss target by name (not `label_map`, `label_mask`)."""
    lowered = name.lower()
    if lowered.startswith(("num_", "n_")):  # a count of classes, not a tensor
        return False
    return lowered.endswith(("labels", "label")) or lowered in ("label_ids", "labels_ids")


def _module_ignore(tree: ast.Module) -> tuple[str | None, int]:
    """The ignore-index constant this file knows by name (`IGNORE_INDEX` imported or defined) and its value."""
    for node in _walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if "ignore" in alias.name.lower() and "index" in alias.name.lower():
                    return alias.asname or alias.name, _DEFAULT_IGNORE
        elif (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
            if name.isupper() and "IGNORE" in name:
                value = _int_value(node.value)
                return name, _DEFAULT_IGNORE if value is None else value
    return None, _DEFAULT_IGNORE


def _wrong_fill(node: ast.AST | None, ignore: int) -> str | None:
    """The fill's spelling when it is not the ignore index: another integer literal, or a pad/token id by
    name (`pad_token_id`, `tokenizer.pad_token_id`); None when it is (or may be) the ignore index."""
    if node is None:
        return None
    value = _int_value(node)
    if value is not None:
        return None if value == ignore else ast.unparse(node)
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return None if node.value == ignore else ast.unparse(node)
    text = ast.unparse(node)
    lowered = text.lower()
    if "ignore" in lowered:
        return None
    name = (last_name(node) or "").lower() if isinstance(node, (ast.Name, ast.Attribute)) else ""
    if name and ("pad_token" in name or name in ("pad_id", "pad_token_id", "eos_token_id", "bos_token_id")):
        return text
    return None


def _dataclass_fields(tree: ast.Module) -> dict[str, list[str]]:
    """The positional parameters of the file's classes: a dataclass's annotated fields, or `__init__`'s."""
    out: dict[str, list[str]] = {}
    for stmt in nodes_of(tree, ast.ClassDef):
        init = next((f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is not None:
            out[stmt.name] = [a.arg for a in init.args.args[1:]]
        else:
            out[stmt.name] = [
                s.target.id
                for s in stmt.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return out


def _pad_field(call: ast.Call, fields: dict[str, list[str]]) -> tuple[str, ast.AST] | None:
    """The pad-value argument of a collate record (`DataCollateInfo(-1, True, IGNORE_INDEX, 1)`,
    `PadSpec(pad_value=...)`): by keyword, or positionally through the class's own field order."""
    for kw in call.keywords:
        if kw.arg and "pad" in kw.arg and ("value" in kw.arg or kw.arg.endswith("_id")):
            return kw.arg, kw.value
    names = fields.get(last_name(call.func) or "", [])
    for index, name in enumerate(names):
        if "pad" in name and "value" in name and index < len(call.args):
            return name, call.args[index]
    return None


class LabelPadValue(Rule):
    code = "NPU424"
    name = "label-pad-value"
    summary = (
        "Labels are padded (or filled) with a real token id (`0`, the pad token) instead of the loss's ignore "
        "index: a collator's per-key pad table, `F.pad(labels, ...)`, `pad_sequence(labels, ...)`, "
        "`torch.full(...)` into labels."
    )
    why = (
        "The cross-entropy of every loss path (eager, chunked, fused; VeOmni's wrappers and transformers') skips "
        "only the positions whose label is the ignore index (`IGNORE_INDEX`, -100), and the token-weighted "
        "reductions (the per-micro-batch token counts, the sequence-parallel denominator) count every other "
        "label as a real token. A label padded with 0 (torch's default for `F.pad` and `pad_sequence`) or with "
        "the pad token id is a real target: the padded tail (the sequence-parallel pad to a multiple of the SP "
        "size, a packed batch's tail, a bucketed batch) is trained towards that token and inflates the token "
        "count. Nothing raises. Checked wherever labels are padded or created: a collator's pad table (a record "
        "under a label key whose pad-value field, by keyword or by the record class's own field order, is not the "
        "ignore index), `F.pad` / `pad_sequence` on labels (a missing value is the 0 default), and `torch.full` / "
        "`full_like` / `new_full` stored into labels."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass

            from veomni.utils.constants import IGNORE_INDEX


            @dataclass
            class PadRule:
                dim: int
                split: bool
                pad_value: int
                scale: int


            PAD_RULES = {
                "input_ids": PadRule(-1, True, 0, 1),
                "target_labels": PadRule(-1, True, 0, 1),
            }
            """,
            path="veomni/data/toy_collator.py",
            title="a collator's pad table pads the labels with token 0",
        ),
        Example(
            """
            import torch.nn.functional as F

            from veomni.utils.constants import IGNORE_INDEX


            def pad_to_multiple(batch, multiple, pad_token_id):
                pad = (-batch["labels"].size(-1)) % multiple
                batch["input_ids"] = F.pad(batch["input_ids"], (0, pad), value=pad_token_id)
                batch["labels"] = F.pad(batch["labels"], (0, pad), value=pad_token_id)
                return batch
            """,
            path="veomni/data/toy_padding.py",
            title="labels padded with the pad token id",
        ),
        Example(
            """
            from torch.nn.utils.rnn import pad_sequence

            from veomni.utils.constants import IGNORE_INDEX


            def collate(features):
                ids = pad_sequence([f["input_ids"] for f in features], batch_first=True, padding_value=0)
                labels = pad_sequence([f["labels"] for f in features], batch_first=True)
                labels[:, 0] = IGNORE_INDEX  # the packed sequence's first token has no target
                return {"input_ids": ids, "labels": labels}
            """,
            path="veomni/data/toy_bucket_collator.py",
            title="`pad_sequence` on labels with its default 0",
        ),
    )
    good = (
        Example(
            """
            from dataclasses import dataclass

            from veomni.utils.constants import IGNORE_INDEX


            @dataclass
            class PadRule:
                dim: int
                split: bool
                pad_value: int
                scale: int


            PAD_RULES = {
                "input_ids": PadRule(-1, True, 0, 1),
                "target_labels": PadRule(-1, True, IGNORE_INDEX, 1),
                "attention_mask": PadRule(-1, False, 1, 1),
            }
            """,
            path="veomni/data/toy_collator.py",
        ),
        Example(
            """
            import torch
            import torch.nn.functional as F
            from torch.nn.utils.rnn import pad_sequence


            def collate(features, multiple):
                labels = pad_sequence([f["labels"] for f in features], batch_first=True, padding_value=-100)
                pad = (-labels.size(-1)) % multiple
                labels = F.pad(labels, (0, pad), value=-100)
                mask = F.pad(torch.ones_like(labels), (0, pad))
                return labels, mask
            """,
            path="veomni/data/toy_bucket_collator.py",
        ),
    )
    fix_safety = (
        "No fix: the ignore index the tree's loss uses has to be imported where the labels are padded."
    )
    # labels that are a loss's targets: the file knows the ignore index (point prompts, label maps are not)
    requires = ("label", ("pad", "full"), ("IGNORE", "ignore_index", "-100"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        ignore_name, ignore = _module_ignore(tree)
        expected = f"`{ignore_name}` ({ignore})" if ignore_name else f"the loss's ignore index ({ignore})"
        fields: dict[str, list[str]] | None = None
        for node in _walk(tree):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if (
                        isinstance(key, ast.Constant)
                        and isinstance(key.value, str)
                        and _label_word(key.value)
                        and isinstance(value, ast.Call)
                    ):
                        if fields is None:
                            fields = _dataclass_fields(tree)
                        self._record(key.value, value, fields, ignore, expected)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                call = node.value
                for target in node.targets:
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.slice, ast.Constant)
                        and isinstance(target.slice.value, str)
                        and _label_word(target.slice.value)
                        and last_name(call.func) not in _FILLS
                        and last_name(call.func) != "pad"
                    ):
                        if fields is None:
                            fields = _dataclass_fields(tree)
                        self._record(target.slice.value, call, fields, ignore, expected)
                    elif _labelled(target) and last_name(call.func) in _FILLS:
                        self._fill(ast.unparse(target), call, ignore, expected)
            elif isinstance(node, ast.Call):
                self._pad(node, ignore, expected)

    def _record(
        self, key: str, call: ast.Call, fields: dict[str, list[str]], ignore: int, expected: str
    ) -> None:
        found = _pad_field(call, fields)
        if found is None:
            return
        field, value = found
        wrong = _wrong_fill(value, ignore)
        if wrong is None:
            return
        self.report(
            value,
            f'the pad record of `"{key}"` pads the labels with `{wrong}` (its `{field}`), not with {expected}: '
            "every padded position becomes a real target that the loss trains towards that token and the "
            "token-weighted reduction counts",
        )

    def _fill(self, target: str, call: ast.Call, ignore: int, expected: str) -> None:
        position = _FILLS[last_name(call.func) or ""]
        value = next((k.value for k in call.keywords if k.arg == "fill_value"), None)
        if value is None and len(call.args) > position:
            value = call.args[position]
        wrong = _wrong_fill(value, ignore)
        if wrong is not None:
            self.report(
                value,  # type: ignore[arg-type]
                f"`{target}` is filled with `{wrong}`, not with {expected}: every position of it is a real target "
                "the loss trains towards that token",
            )

    def _pad(self, call: ast.Call, ignore: int, expected: str) -> None:
        name = last_name(call.func)
        if name == "pad":
            dotted = dotted_name(call.func) or ""
            if not (dotted.endswith(_PAD_FUNCS) or dotted == "pad"):
                return
            labels = _labelled(call.args[0] if call.args else None)
            if labels is None:
                return
            mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
            if mode is None and len(call.args) > 2:
                mode = call.args[2]
            if isinstance(mode, ast.Constant) and mode.value != "constant":
                return
            value = next((k.value for k in call.keywords if k.arg == "value"), None)
            if value is None and len(call.args) > 3:
                value = call.args[3]
            default = "`F.pad`'s default 0"
        elif name == "pad_sequence":
            labels = _labelled(call.args[0] if call.args else None)
            if labels is None:
                return
            value = next((k.value for k in call.keywords if k.arg == "padding_value"), None)
            if value is None and len(call.args) > 2:
                value = call.args[2]
            default = "`pad_sequence`'s default 0"
        else:
            return
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            self.report(
                call,
                f"`{labels}` is padded with {default}, not with {expected}: every padded position becomes a real "
                "target that the loss trains towards token 0 and the token-weighted reduction counts",
            )
            return
        wrong = _wrong_fill(value, ignore)
        if wrong is not None:
            self.report(
                value,
                f"`{labels}` is padded with `{wrong}`, not with {expected}: every padded position becomes a real "
                "target that the loss trains towards that token and the token-weighted reduction counts",
            )
