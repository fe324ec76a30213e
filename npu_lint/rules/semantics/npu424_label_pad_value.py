"""NPU424 label-pad-value."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name, int_value, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.upstream import last_name

_DEFAULT_IGNORE = -100  # torch's `cross_entropy(ignore_index=-100)`, transformers' and VeOmni's IGNORE_INDEX
_PAD_FUNCS = ("F.pad", "functional.pad")
_FILLS = {"full": 1, "full_like": 1, "new_full": 1}  # the fill value's position (`torch.full(shape, v)`)
_ZEROS = frozenset({"zeros", "zeros_like", "new_zeros"})  # a fill of 0 by construction
_APPENDS = frozenset({"extend", "append", "insert"})


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


_VALUE_CALLS = frozenset(
    {
        "long",
        "int",
        "to",
        "view",
        "reshape",
        "flatten",
        "contiguous",
        "squeeze",
        "unsqueeze",
        "clone",
        "detach",
    }
)


def _reduced(node: ast.AST) -> bool:
    """A size, count or reduction read off the labels (`labels.dim()`, `labels.shape[0]`, `len(labels)`), not
    the label values."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            return node.func.attr not in _VALUE_CALLS or _reduced(node.func.value)
        return True
    if isinstance(node, ast.Attribute):
        return node.attr in ("shape", "dtype", "device", "ndim")
    return False


def _label_word(name: str) -> bool:
    """`labels`, `target_labels`, `label_ids`: a loss target by name (not `label_map`, `label_mask`)."""
    lowered = name.lower()
    if lowered.startswith(("num_", "n_")):  # a count of classes, not a tensor
        return False
    return lowered.endswith(("labels", "label")) or lowered in ("label_ids", "labels_ids")


def _module_ignore(tree: ast.Module) -> tuple[str | None, int]:
    """The ignore-index constant this file knows by name (`IGNORE_INDEX` imported or defined) and its value."""
    for node in nodes_of(tree, ast.ImportFrom, ast.Assign):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if "ignore" in alias.name.lower() and "index" in alias.name.lower():
                    return alias.asname or alias.name, _DEFAULT_IGNORE
        elif (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
            if name.isupper() and "IGNORE" in name:
                value = int_value(node.value)
                return name, _DEFAULT_IGNORE if value is None else value
    return None, _DEFAULT_IGNORE


def _wrong_fill(node: ast.AST | None, ignore: int) -> str | None:
    """The fill's spelling when it is not the ignore index: another integer literal, or a pad/token id by
    name (`pad_token_id`, `tokenizer.pad_token_id`); None when it is (or may be) the ignore index."""
    if node is None:
        return None
    value = int_value(node)
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
        "`full_like` / `new_full` stored into labels. In a file that names the tree's ignore-index "
        "constant (`IGNORE_INDEX` imported or defined), also: a list stretch built into labels with a token "
        '(`[pad_token_id] * n` in `labels = ...`, `labels += ...`, `labels.extend(...)`, a `"labels"` dict '
        "entry); labels started as zeros (`torch.zeros_like(input_ids)`) of which only some positions are written "
        "afterwards (the rest keep the real token 0); and a supervised-position mask or count taken against a "
        "token (`labels != 0`, `labels.ne(pad_token_id)`, `obj[key] != 0` where `key` is picked by "
        '`key.endswith("_labels")`), which counts the ignored positions as supervised.'
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
    bad = bad + (
        Example(
            """
            from veomni.utils.constants import IGNORE_INDEX


            def pair_labels(tok, prompt_ids, answer_ids):
                labels = [tok.pad_token_id] * len(prompt_ids) + answer_ids
                return {"input_ids": prompt_ids + answer_ids, "labels": labels}
            """,
            path="veomni/data/toy_pair_transform.py",
            title="the prompt stretch labelled with the pad token",
        ),
        Example(
            """
            import torch

            from veomni.utils.constants import IGNORE_INDEX


            def answer_labels(ids, spans):
                target_labels = torch.zeros_like(ids)
                for start, end in spans:
                    target_labels[start:end] = ids[start:end]
                return target_labels
            """,
            path="veomni/data/toy_span_transform.py",
            title="labels start as zeros: unwritten positions are token 0",
        ),
        Example(
            """
            import torch

            from veomni.utils.constants import IGNORE_INDEX


            def count_targets(batch):
                counts = {}
                for name in batch:
                    if name.endswith("_labels"):
                        counts[name] = torch.sum(batch[name] != 0)
                return counts
            """,
            path="veomni/utils/toy_counts.py",
            title="supervised labels counted against token 0",
        ),
    )
    good = (
        Example(
            """
            import torch

            from veomni.utils.constants import IGNORE_INDEX


            def answer_labels(ids, spans, tok):
                target_labels = torch.full_like(ids, IGNORE_INDEX)
                for start, end in spans:
                    target_labels[start:end] = ids[start:end]
                target_labels[target_labels == tok.pad_token_id] = IGNORE_INDEX
                keep = target_labels != IGNORE_INDEX
                return target_labels, keep, [IGNORE_INDEX] * 2 + [1] * 3
            """,
            path="veomni/data/toy_span_transform.py",
        ),
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
    requires = (
        "label",
        ("pad", "full", "zeros", "] *", "!=", "==", ".ne(", ".eq("),
        ("IGNORE", "ignore_index", "-100"),
    )
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        self._seen: set[tuple[int, int]] = set()
        self._label_keys: set[str] | None = None
        ignore_name, ignore = _module_ignore(tree)
        expected = f"`{ignore_name}` ({ignore})" if ignore_name else f"the loss's ignore index ({ignore})"
        fields: dict[str, list[str]] | None = None
        # the node kinds the checks below read, in walk order (the file index's slices)
        for node in nodes_of(tree, ast.Dict, ast.Assign, ast.Call, ast.AugAssign, ast.Compare):
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
                if ignore_name is not None:
                    self._appended(node, ignore, expected)
                func = node.func
                if (
                    ignore_name is not None
                    and isinstance(func, ast.Attribute)
                    and func.attr == "ne"
                    and len(node.args) == 1
                ):
                    self._compared(node, func.value, node.args[0], tree, ignore, expected)
            if ignore_name is None:
                continue  # the stretch, background and mask checks: files that name the tree's ignore index
            if isinstance(node, (ast.Assign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if _labelled(target):
                        self._repeated(ast.unparse(target), node.value, ignore, expected)
                        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                            self._zeros(target, node.value, tree, expected)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if (
                        isinstance(key, ast.Constant)
                        and isinstance(key.value, str)
                        and _label_word(key.value)
                    ):
                        self._repeated(f'"{key.value}"', value, ignore, expected)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.NotEq):
                self._compared(node, node.left, node.comparators[0], tree, ignore, expected)

    def _repeated(self, target: str, value: ast.AST, ignore: int, expected: str) -> None:
        """`[pad_token_id] * n` (or `n * [0]`) built into labels: a list label stretch filled with a token."""
        for sub in _walk(value):
            if not (isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult)):
                continue
            for side in (sub.left, sub.right):
                if isinstance(side, ast.List) and len(side.elts) == 1:
                    wrong = _wrong_fill(side.elts[0], ignore)
                    if wrong is not None and self._once(side):
                        self.report(
                            side,
                            f"a stretch of `{target}` is filled with `{wrong}` (`{ast.unparse(sub)}`), not with "
                            f"{expected}: those positions become real targets the loss trains towards that token, "
                            "and the token counts that normalise the loss count them",
                        )

    def _appended(self, call: ast.Call, ignore: int, expected: str) -> None:
        """`labels.extend(ids if keep else [pad_token_id] * len(ids))`: the same fill, through a list method."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _APPENDS and _labelled(func.value):
            for arg in call.args:
                self._repeated(ast.unparse(func.value), arg, ignore, expected)

    def _zeros(self, target: ast.AST, call: ast.Call, tree: ast.Module, expected: str) -> None:
        """`labels = torch.zeros_like(input_ids)` then `labels[a:b] = ...`: a zero background under the targets
        written into it (every position not written is trained towards token 0)."""
        name = last_name(call.func)
        if name not in _ZEROS:
            return
        spelled = ast.unparse(target)
        written = any(
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == spelled for t in n.targets)
            for n in nodes_of(tree, ast.Assign)
        )
        if written and self._once(call):
            self.report(
                call,
                f"`{spelled}` starts as `{ast.unparse(call)}` and only some positions are written afterwards: every "
                f"other position keeps the label 0, a real token the loss trains towards, not {expected}; start "
                "from the ignore index (`full_like(..., ignore)`)",
            )

    def _compared(
        self, node: ast.AST, left: ast.AST, right: ast.AST, tree: ast.Module, ignore: int, expected: str
    ) -> None:
        """`labels != 0` / `torch.sum(obj[key] != pad_token_id)`: a mask or count of supervised labels tested
        against a token instead of the ignore index."""
        for labels, other in ((left, right), (right, left)):
            if _reduced(labels):
                continue
            spelled = _labelled(labels) or self._label_keyed(labels, tree)
            if spelled is None:
                continue
            wrong = _wrong_fill(other, ignore)
            if wrong is not None and self._once(node):
                self.report(
                    node,
                    f"`{ast.unparse(node)}` tells supervised labels from ignored ones by `{wrong}`, but the "
                    f"ignored positions hold {expected}: the mask (or count) takes the ignored positions as "
                    "supervised and drops real targets equal to that token",
                )
            return

    def _label_keyed(self, node: ast.AST, tree: ast.Module) -> str | None:
        """`obj[key]` where the file picks `key` as a label key (`key.endswith("_labels")`)."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name)):
            return None
        if self._label_keys is None:
            self._label_keys = {
                n.func.value.id
                for n in nodes_of(tree, ast.Call)
                if isinstance(n.func, ast.Attribute)
                and n.func.attr in ("endswith", "startswith")
                and isinstance(n.func.value, ast.Name)
                and any(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and "label" in a.value
                    for a in n.args
                )
            }
        return ast.unparse(node) if node.slice.id in self._label_keys else None

    def _once(self, node: ast.AST) -> bool:
        key = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

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
