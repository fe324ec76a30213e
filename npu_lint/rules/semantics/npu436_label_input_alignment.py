"""NPU436 label-input-alignment."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_INPUTS = ("input_ids", "attention_mask", "position_ids")


def _is_labels(name: str) -> bool:
    return name == "labels" or name.endswith("_labels")


def _is_inputs(name: str) -> bool:
    """The token ids (or their mask) of a sample: `input_ids`, `ids`, `token_ids`, `attention_mask`."""
    return name in _INPUTS or name == "ids" or name.endswith(("_ids", "input_ids"))


def _self_cut(stmt: ast.stmt) -> tuple[str, ast.AST] | None:
    """`name = name[<slice>]`: the name and the slice (a sequence cut to a length)."""
    if not (
        isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    ):
        return None
    value = stmt.value
    if (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Name)
        and value.value.id == stmt.targets[0].id
        and isinstance(value.slice, ast.Slice)
    ):
        return stmt.targets[0].id, value.slice
    return None


def _mentions_ignore(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "IGNORE" in sub.id.upper():
            return True
        if isinstance(sub, ast.Attribute) and "ignore" in sub.attr.lower():
            return True
        if (
            isinstance(sub, ast.UnaryOp)
            and isinstance(sub.op, ast.USub)
            and isinstance(sub.operand, ast.Constant)
            and sub.operand.value == 100
        ):
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    """The names ``node`` reads as data (not the functions and modules it calls: `torch.cat`, `list`)."""
    called: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            while isinstance(func, ast.Attribute):
                func = func.value
            called.add(id(func))
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in called}


def _records(func: ast.AST) -> list[tuple[ast.Dict, ast.AST, ast.AST]]:
    """Dict displays holding both the token ids and the labels of one sample: (dict, ids value, labels value)."""
    out = []
    for node in nodes_of(func, ast.Dict):
        keys = {
            k.value: v
            for k, v in zip(node.keys, node.values)  # type: ignore[attr-defined]
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
        if "input_ids" in keys and "labels" in keys:
            out.append((node, keys["input_ids"], keys["labels"]))
    return out


class LabelInputAlignment(Rule):
    code = "NPU436"
    name = "label-input-alignment"
    summary = (
        "A sample's labels are built or cut differently from its token ids: truncated from the other end, or "
        "left unmasked in one record where its sibling record (the other answer of a preference pair) masks them."
    )
    why = (
        "Position t of the labels is the target of position t of the token ids: the collators pack, pad and shift "
        "the two side by side, and the loss reads them position by position. Truncating the ids to their last "
        "`max_len` tokens and the labels to their first (or the reverse) leaves every label of a long sample "
        "paired with another token; nothing raises as long as both have the same length. And the records a "
        "transform builds together (the chosen and the rejected sequence of a DPO pair) must mask the same "
        "positions: when one masks its prompt with the ignore index and the other takes its labels straight from "
        "its token ids, one log-prob sums the prompt and the other does not, which biases every preference "
        "margin. Checked per function: `ids = ids[cut]` next to `labels = labels[other cut]`, and dict "
        "displays holding `input_ids` and `labels` of which some mask with the ignore index and another uses "
        "its own ids unmasked."
    )
    bad = (
        Example(
            """
            def encode(tokenizer, turns, max_len):
                ids, targets_labels = [], []
                for turn in turns:
                    piece = tokenizer.encode(turn["text"])
                    ids += piece
                    targets_labels += piece if turn["train"] else [-100] * len(piece)
                ids = ids[-max_len:]
                targets_labels = targets_labels[:max_len]
                return {"input_ids": ids, "labels": targets_labels}
            """,
            path="veomni/data/toy_template.py",
            title="ids keep the tail, labels keep the head",
        ),
        Example(
            """
            from veomni.utils.constants import IGNORE_INDEX


            def build_pair(tok, prompt, good, bad):
                p = len(tok.encode(prompt))
                good_ids = tok.encode(prompt + good)
                bad_ids = tok.encode(prompt + bad)
                winner = {"input_ids": good_ids, "labels": [IGNORE_INDEX] * p + good_ids[p:]}
                loser = {"input_ids": bad_ids, "labels": bad_ids}
                return winner, loser
            """,
            path="veomni/data/toy_preference.py",
            title="the rejected record's prompt is supervised, the chosen one's is not",
        ),
    )
    good = (
        Example(
            """
            def encode(tokenizer, turns, max_len):
                ids, targets_labels = [], []
                for turn in turns:
                    piece = tokenizer.encode(turn["text"])
                    ids += piece
                    targets_labels += piece if turn["train"] else [-100] * len(piece)
                ids = ids[-max_len:]
                targets_labels = targets_labels[-max_len:]
                return {"input_ids": ids, "labels": targets_labels}
            """,
            path="veomni/data/toy_template.py",
        ),
        Example(
            """
            from veomni.utils.constants import IGNORE_INDEX


            def build_pair(tok, prompt, good, bad):
                p = len(tok.encode(prompt))
                good_ids = tok.encode(prompt + good)
                bad_ids = tok.encode(prompt + bad)
                winner = {"input_ids": good_ids, "labels": [IGNORE_INDEX] * p + good_ids[p:]}
                loser = {"input_ids": bad_ids, "labels": [IGNORE_INDEX] * p + bad_ids[p:]}
                return winner, loser


            def plain(tok, text):
                ids = tok.encode(text)
                return {"input_ids": ids, "labels": ids}
            """,
            path="veomni/data/toy_preference.py",
        ),
    )
    fix_safety = "No fix: which end to keep, or which positions to mask, is the author's call."
    requires = ("labels", "input_ids", ("[:", "[-", "IGNORE", "ignore", "-100"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        self._cuts(node)
        self._siblings(node)

    def _cuts(self, func: ast.AST) -> None:
        cuts: dict[str, list[tuple[ast.Assign, ast.AST]]] = {"ids": [], "labels": []}
        for stmt in nodes_of(func, ast.Assign):
            found = _self_cut(stmt)  # type: ignore[arg-type]
            if found is None:
                continue
            name, cut = found
            if _is_labels(name):
                cuts["labels"].append((stmt, cut))  # type: ignore[arg-type]
            elif _is_inputs(name):
                cuts["ids"].append((stmt, cut))  # type: ignore[arg-type]
        if not cuts["ids"] or not cuts["labels"]:
            return
        ids_cuts = {ast.unparse(cut) for _, cut in cuts["ids"]}
        ids_names = set().union(*(_names(cut) for _, cut in cuts["ids"]))
        for stmt, cut in cuts["labels"]:
            text = ast.unparse(cut)
            if text in ids_cuts or not (_names(cut) & ids_names):
                continue  # the same cut, or one by an unrelated length
            ids_stmt = cuts["ids"][0][0]
            self.report(
                stmt.value,
                f"the labels are cut as `[{text}]` but the token ids as `[{ast.unparse(cuts['ids'][0][1])}]` "
                f"(line {ids_stmt.lineno}): on a sample longer than the limit the two keep different ends, so every "
                "label is paired with another token; cut both the same way",
            )

    def _siblings(self, func: ast.AST) -> None:
        records = _records(func)
        if len(records) < 2:
            return
        masked = [r for r in records if _mentions_ignore(r[2])]
        if not masked:
            return
        for _record, ids, labels in records:
            if _mentions_ignore(labels):
                continue
            own = _names(ids)
            if own and own & _names(labels):
                self.report(
                    labels,
                    f"this record's labels (`{ast.unparse(labels)}`) are its own token ids, unmasked, while the "
                    f"record next to it (line {masked[0][0].lineno}) masks its labels with the ignore index: the two "
                    "sequences are scored over different positions (one includes the prompt), which biases the "
                    "comparison between them; mask both alike",
                )
