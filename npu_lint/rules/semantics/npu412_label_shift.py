"""NPU412 label-shift."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from npu_lint.core.astutil import call_name, nodes_of, own_nodes
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import (
    LossRule,
    PatchedMethod,
    direct_ce_calls,
    functions_of,
    loss_calls,
    path_before,
)
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import last_name

# losses that shift `labels` themselves unless `shift_labels=` is given (transformers' and VeOmni's)
_SHIFTING = ("loss_function", "ForCausalLMLoss", "causal_lm_loss")


def _is_shift(node: ast.AST) -> bool:
    """`labels[..., 1:]`, `labels[:, 1:]`, `input_labels[1:]`: a label tensor sliced from position 1;
    `torch.roll(labels, -1, ...)` / `labels.roll(-1, ...)`."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr
        in (
            "contiguous",
            "to",
            "view",
            "reshape",
            "long",
        )
    ):
        node = node.func.value
    if isinstance(node, ast.Call) and call_name(node) == "roll":
        text = ast.unparse(node)
        return "label" in text and ("-1" in text)
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    if isinstance(base, ast.Call) and call_name(base) == "pad" and base.args:
        base = base.args[
            0
        ]  # `F.pad(labels, (0, 1), value=-100)[..., 1:]`: the labels padded back, then shifted
    name = last_name(base) or ""
    if "label" not in name:
        return False
    index = node.slice
    last = index.elts[-1] if isinstance(index, ast.Tuple) and index.elts else index
    return (
        isinstance(last, ast.Slice)
        and isinstance(last.lower, ast.Constant)
        and last.lower.value == 1
        and last.upper is None
    )


def _short_shift(node: ast.AST) -> bool:
    """A label tensor sliced from position 1 and not padded back: one position shorter than the logits."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("contiguous", "to", "long")
    ):
        node = node.func.value
    return (
        isinstance(node, ast.Subscript)
        and not (
            isinstance(node.value, ast.Call) and call_name(node.value) == "pad"
        )  # padded back: full length
        and _is_shift(node)
    )


def _short_names(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in _walk(func):
        if isinstance(node, ast.Assign) and _short_shift(node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _trimmed(node: ast.AST | None) -> bool:
    """`logits[:, :-1, :]`: the logits cut to the shifted length."""
    return node is not None and any(
        isinstance(n, ast.Slice) and n.upper is not None for n in _walk(node) if isinstance(n, ast.Slice)
    )


def _starts_at_one(node: ast.AST) -> bool:
    """`1:` or `slice(1, ...)`: a cut that drops the first position."""
    if isinstance(node, ast.Slice):
        return isinstance(node.lower, ast.Constant) and node.lower.value == 1
    return (
        isinstance(node, ast.Call)
        and call_name(node) == "slice"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == 1
    )


def _logits_cut(func: ast.AST, logits: ast.AST | None) -> bool:
    """The logits handed to the loss are themselves cut (`logits[:, :-1]`), or computed in this function from
    hidden states cut at position 1 (`hidden[:, 1:]`, or a slice variable that may be `slice(1, None)`, as
    models that drop a prefix position do): then they are not full-length and a short `shift_labels` fits."""
    if logits is None:
        return False
    if _trimmed(logits):
        return True
    if not isinstance(logits, ast.Name):
        return False
    cut_slices = {
        t.id
        for n in _walk(func)
        if isinstance(n, ast.Assign) and any(_starts_at_one(v) for v in _walk(n.value))
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for n in _walk(func):
        if not (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == logits.id for t in n.targets)
        ):
            continue
        for sub in _walk(n.value):
            if isinstance(sub, ast.Subscript):
                parts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
                if any(_starts_at_one(p) or (isinstance(p, ast.Name) and p.id in cut_slices) for p in parts):
                    return True
    return False


def _shifted_names(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(_is_shift(n) for n in _walk(node.value)):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _shifted_before(func: ast.AST, node: ast.AST, name: str) -> bool:
    """The local ``name`` is assigned a shifted label tensor on the way to ``node`` (not in another branch)."""
    for stmt in path_before(func, node):
        for n in _walk(stmt):
            if (
                isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
                and any(_is_shift(m) for m in _walk(n.value))
            ):
                return True
    return False


def _on_path(stmt: ast.AST) -> list[ast.AST]:
    """What of an earlier statement can run before later code: an `if` whose body always leaves the function
    (ends in `return` / `raise`) contributes its test and its `else` only."""
    if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):
        return [stmt.test, *stmt.orelse]
    return [stmt]


def _tried_before(func: ast.AST, node: ast.AST) -> list[ast.AST]:
    """The `try` bodies that run before ``node`` when it sits in one of their handlers, `else` or `finally`."""
    return [
        stmt
        for t in _walk(func)
        if isinstance(t, ast.Try)
        and any(n is node for h in (*t.handlers, *t.orelse, *t.finalbody) for n in _walk(h))
        for stmt in t.body
    ]


def _given_shift_ignored(func: ast.AST) -> list[ast.AST]:
    """Label shifts that replace a caller's pre-shifted labels: the function takes them as a parameter
    (`shift_labels=None`, `shifted_labels`) and, on some path, shifts `labels` itself without reading that
    parameter first (an assignment to it, or a shift in a function that never reads it at all), so labels
    the caller shifted (the sequence-parallel collator's, a packed batch's) are shifted again or dropped."""
    args = func.args  # type: ignore[attr-defined]
    given = {
        a.arg
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if "shift" in a.arg and "label" in a.arg
    }
    if not given:
        return []
    out: list[ast.AST] = []
    body = own_nodes(func)
    read = {  # a closure's read counts: the parameter is handed on there (a per-chunk loss)
        n.id for n in _walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in given
    }
    if given - read:  # never read: every shift of the labels in the function ignores it
        out.extend(
            n
            for n in body
            if isinstance(n, ast.Subscript) and _is_shift(n) and "shift" not in ast.unparse(n.value)
        )
    for node in body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id in given for t in node.targets)
            and any(_is_shift(m) for m in _walk(node.value))
        ):
            continue
        names = {t.id for t in node.targets if isinstance(t, ast.Name) and t.id in given}
        if any(
            isinstance(m, ast.Name) and m.id in names and isinstance(m.ctx, ast.Load)
            for stmt in [*path_before(func, node), *_tried_before(func, node)]
            for part in _on_path(stmt)
            for m in _walk(part)
        ):
            continue
        if any(isinstance(m, ast.Name) and m.id in names for m in _walk(node.value)):
            continue
        out.append(node.value)
    return out


def _minus_one(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    )


def _base_name(node: ast.AST) -> str:
    return last_name(node) or ""


def _backward_cuts(func: ast.AST) -> list[tuple[ast.Subscript, str]]:
    """In a function that computes a cross-entropy: labels cut at the end (`labels[..., :-1]`) or logits cut at
    the start (`logits[..., 1:, :]`), the reverse of the causal pairing (logits `[..., :-1, :]`, labels
    `[..., 1:]`): each position is scored against its own token or the one before."""
    out: list[tuple[ast.Subscript, str]] = []
    for node in _walk(func):
        if not isinstance(node, ast.Subscript):
            continue
        name = _base_name(node.value)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if "label" in name and "shift" not in name and elts:
            last = elts[-1]
            if (
                isinstance(last, ast.Slice)
                and last.lower is None
                and _minus_one(last.upper)
                and last.step is None
            ):
                out.append((node, "labels"))
        elif "logits" in name and "shift" not in name and len(elts) >= 2:
            seq = elts[-2]
            if (
                isinstance(seq, ast.Slice)
                and isinstance(seq.lower, ast.Constant)
                and seq.lower.value == 1
                and seq.upper is None
            ):
                out.append((node, "logits"))
    return out


def _cut_side(node: ast.AST, what: str) -> str | None:
    """ "start" / "end" for a tensor cut on its sequence axis: labels `[..., 1:]` / `[..., :-1]` (the last axis);
    hidden states or logits `[..., 1:, :]`, `[:, :-1]` (the axis after the batch)."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("contiguous", "float", "to")
    ):
        node = node.func.value
    if not isinstance(node, ast.Subscript):
        return None
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if what == "labels":
        seq = elts[-1] if elts else None
    elif elts and isinstance(elts[0], ast.Constant) and elts[0].value is Ellipsis:
        seq = elts[-2] if len(elts) >= 3 else None
    else:
        seq = elts[1] if len(elts) >= 2 else None
    if not isinstance(seq, ast.Slice) or seq.step is not None:
        return None
    if _starts_at_one(seq) and seq.upper is None:
        return "start"
    if seq.lower is None and _minus_one(seq.upper):
        return "end"
    return None


def _paired_cuts(func: ast.AST) -> list[tuple[ast.AST, str, str, str]]:
    """Labels and the hidden states (or logits) they are scored against, cut in the same block, where the
    causal pairing is not the one of `labels[..., 1:]` with `states[..., :-1, :]`: (node, states, label side,
    states side)."""
    out: list[tuple[ast.AST, str, str, str]] = []
    for holder in _walk(func):
        for field in ("body", "orelse"):
            stmts = getattr(holder, field, None)
            if not isinstance(stmts, list):
                continue
            labels: list[str] = []
            states: list[tuple[ast.AST, str, str]] = []
            for stmt in stmts:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                name = _base_name(stmt.targets[0])
                source = stmt.value
                while isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute):
                    source = source.func.value
                base = _base_name(source.value) if isinstance(source, ast.Subscript) else ""
                if "label" in name and "label" in base:
                    side = _cut_side(stmt.value, "labels")
                    if side:
                        labels.append(side)
                elif any(w in name for w in ("hidden", "logit")) and any(
                    w in base for w in ("hidden", "logit")
                ):
                    side = _cut_side(stmt.value, "states")
                    if side:
                        states.append((stmt.value, base, side))
            if len(labels) != 1:
                continue
            for node, base, side in states:
                if (labels[0], side) != ("start", "end"):
                    out.append((node, base, labels[0], side))
    return out


_COLLATOR_MODULES = ("veomni/data/data_collator.py", "veomni/data/collator.py")


@functools.lru_cache(maxsize=16)
def _pad_amounts(call: ast.Call) -> tuple[int, int] | None:
    """`F.pad(x, (a, b), ...)` on the last axis: (a, b) when literal."""
    pad = (
        call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "pad"), None)
    )
    if isinstance(pad, (ast.Tuple, ast.List)) and len(pad.elts) == 2:
        vals = [e.value if isinstance(e, ast.Constant) and type(e.value) is int else None for e in pad.elts]
        if vals[0] is not None and vals[1] is not None:
            return vals[0], vals[1]
    return None


def _pad_shifts(func: ast.AST) -> list[tuple[ast.AST, str]]:
    """Labels padded on one side of the last axis and then sliced from that same side (`pad(l, (1, 0))` then
    `[..., 1:]`; `pad(l, (0, 1))` then `[..., :-1]`): the pad is removed again, nothing is shifted."""
    padded: dict[str, tuple[ast.Call, str]] = {}
    out: list[tuple[ast.AST, str]] = []
    for node in sorted(
        (n for n in _walk(func) if isinstance(n, ast.Assign) and len(n.targets) == 1), key=lambda n: n.lineno
    ):
        target = node.targets[0]
        value = node.value
        if isinstance(value, ast.Call) and last_name(value.func) == "pad" and value.args:
            source = _base_name(value.args[0])
            amounts = _pad_amounts(value)
            fill = next((k.value for k in value.keywords if k.arg == "value"), None)
            ignored = fill is not None and (
                "ignore" in ast.unparse(fill).lower() or ast.unparse(fill).replace(" ", "") == "-100"
            )
            labelled = "label" in source or "target" in source or ignored
            if labelled and amounts in ((1, 0), (0, 1)) and isinstance(target, ast.Name):
                padded[target.id] = (value, "front" if amounts == (1, 0) else "end")
            continue
        for sub in _walk(value):
            if not (
                isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in padded
            ):
                continue
            call, side = padded[sub.value.id]
            last = sub.slice.elts[-1] if isinstance(sub.slice, ast.Tuple) else sub.slice
            if not isinstance(last, ast.Slice):
                continue
            if side == "front" and _starts_at_one(last):
                out.append((call, side))
            elif side == "end" and last.lower is None and _minus_one(last.upper):
                out.append((call, side))
    return out


def _reads_sp(func: ast.AST) -> bool:
    """The function reads the sequence-parallel switch (`sp_enabled`, `ps.sp_enabled`), in a test or not."""
    return any(
        (isinstance(n, ast.Name) and n.id == "sp_enabled")
        or (isinstance(n, ast.Attribute) and n.attr == "sp_enabled")
        for n in _walk(func)
    )


def _sp_flag_helpers(tree: ast.Module) -> dict[str, tuple[int, str]]:
    """The module's functions that take a sequence-parallel switch as a parameter and branch on it, with that
    parameter's position and name."""
    out: dict[str, tuple[int, str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for index, arg in enumerate(node.args.args):
            if arg.arg in ("sp_enabled", "sp", "use_sp", "sequence_parallel"):
                if any(
                    isinstance(n, (ast.If, ast.IfExp))
                    and any(isinstance(x, ast.Name) and x.id == arg.arg for x in _walk(n.test))
                    for n in _walk(node)
                ):
                    out[node.name] = (index, arg.arg)
                break
    return out


def _constant_sp_flags(func: ast.AST, helpers: dict[str, tuple[int, str]]) -> list[tuple[ast.AST, str, str]]:
    """Calls of such a helper with a literal `True`/`False` for its switch."""
    out: list[tuple[ast.AST, str, str]] = []
    for node in _walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers):
            continue
        index, param = helpers[node.func.id]
        arg = (
            node.args[index]
            if len(node.args) > index
            else next((k.value for k in node.keywords if k.arg == param), None)
        )
        if isinstance(arg, ast.Constant) and isinstance(arg.value, bool):
            out.append((arg, node.func.id, param))
    return out


def _label_outputs(stmts: list[ast.stmt]) -> list[ast.AST]:
    """Statements of a branch that hand labels on: an assignment to a label-named target, or an append to a
    label-named list (`labels_list.append(seg)`)."""
    out: list[ast.AST] = []
    for stmt in stmts:
        for node in _walk(stmt):
            if isinstance(node, ast.Assign) and any(
                "label" in _base_name(t.value if isinstance(t, ast.Subscript) else t) for t in node.targets
            ):
                out.append(node)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend")
                and "label" in _base_name(node.func.value)
            ):
                out.append(node)
    return out


def _unshifted_off_branches(func: ast.AST) -> list[tuple[ast.AST, str]]:
    """`if sp_enabled: <labels as the collator left them> else: <labels handed on unshifted>`: the branch
    without sequence parallelism produces labels like the SP branch but shifts nothing, while only the SP
    collator shifts (the two settings disagree by one position)."""
    out: list[tuple[ast.AST, str]] = []
    returns_labels = any(
        isinstance(n, ast.Return)
        and n.value is not None
        and any(isinstance(x, ast.Name) and "label" in x.id for x in _walk(n.value))
        for n in _walk(func)
    )
    if not returns_labels:
        return out  # only a helper that builds the labels it returns (a caller may shift what others hand on)
    for node in _walk(func):
        if not isinstance(node, ast.If) or not node.orelse:
            continue
        polarity = _sp_polarity(node.test)
        if polarity is None:
            continue
        on, off = (node.body, node.orelse) if polarity else (node.orelse, node.body)
        on_out, off_out = _label_outputs(on), _label_outputs(off)
        if not on_out or not off_out:
            continue
        if any(_is_shift(n) for stmt in on + off for n in _walk(stmt)):
            continue  # a shift on either side: the branches are told apart already
        if any(isinstance(n, ast.Call) and call_name(n) in _LOSS_CALLS for stmt in off for n in _walk(stmt)):
            continue  # the non-SP labels go to a loss that shifts them itself
        out.append((off_out[0], ast.unparse(node.test)))
    return out


_LOSS_CALLS = frozenset({"loss_function", "ForCausalLMLoss", "causal_lm_loss", "cross_entropy", "loss_fct"})


def _right_shifts(func: ast.AST, undone: set[int]) -> list[ast.Call]:
    """Labels padded with one slot at the front (`F.pad(labels, (1, 0), value=-100)`) that no slice takes off
    again: every label moves one position later, so each position is scored against the token before it (the
    causal shift pads at the end and drops the first label)."""
    out: list[ast.Call] = []
    sliced_front = {
        id(n.value)
        for n in _walk(func)
        if isinstance(n, ast.Subscript)
        and isinstance(n.value, ast.Call)
        and isinstance(n.slice, (ast.Tuple, ast.Slice))
        and _starts_at_one(n.slice.elts[-1] if isinstance(n.slice, ast.Tuple) else n.slice)
    }
    for node in _walk(func):
        if not (isinstance(node, ast.Call) and last_name(node.func) == "pad" and node.args):
            continue
        if id(node) in undone or id(node) in sliced_front or _pad_amounts(node) != (1, 0):
            continue
        source = _base_name(node.args[0])
        fill = next((k.value for k in node.keywords if k.arg == "value"), None)
        if fill is None and len(node.args) > 3:
            fill = node.args[3]
        fill_text = ast.unparse(fill).lower().replace(" ", "") if fill is not None else ""
        if "label" in source or "ignore" in fill_text or fill_text == "-100":
            out.append(node)
    return out


def _uncut_partners(func: ast.AST) -> list[ast.AST]:
    """Labels cut at the start (`labels[..., 1:]`, not padded first) in a function that never cuts the hidden
    states or logits they are paired with at the end (`[..., :-1, :]`): positions and targets no longer line up."""
    nodes = _walk(func)
    if any(
        isinstance(c, ast.Call)
        and (any(w in call_name(c) for w in _SHIFTING) or any(k.arg == "shift_labels" for k in c.keywords))
        for c in nodes
    ):
        return []  # labels handed to a loss that shifts them (or as `shift_labels=`): the checks above own it
    padded = {
        t.id
        for n in nodes
        if isinstance(n, ast.Assign)
        and any(
            isinstance(c, ast.Call) and call_name(c) in ("pad", "cat", "concat", "concatenate")
            for c in _walk(n.value)
        )
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    slice_vars = {
        t.id
        for n in nodes
        if isinstance(n, ast.Assign)
        and any(isinstance(c, ast.Call) and call_name(c) == "slice" for c in _walk(n.value))
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    shifts: list[ast.AST] = []
    partners = False
    for n in nodes:
        if isinstance(n, ast.Name) and ("hidden" in n.id or "logit" in n.id):
            partners = True
        if not isinstance(n, ast.Subscript):
            continue
        base = _base_name(n.value)
        parts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
        if "label" not in base and any(
            (isinstance(p, ast.Slice) and _minus_one(p.upper))
            or _starts_at_one(p)
            or (isinstance(p, ast.Name) and p.id in slice_vars)
            for p in parts
        ):
            return []  # something else is cut (at the end, at the start, by a slice variable): the function's own pairing
        if "label" in base and base not in padded and parts and _starts_at_one(parts[-1]):
            if not any(isinstance(c, ast.Call) and call_name(c) == "pad" for c in _walk(n.value)):
                shifts.append(n)
    return shifts if partners else []


def _sp_collator_at(path: str, mtime: float, size: int) -> str | None:
    parsed = load_file(path)  # the run's one tree of the file (shared with the file pass)
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and "SequenceParallel" in node.name and "Collat" in node.name:
            for sub in _walk(node):
                if isinstance(sub, ast.Subscript) and "label" in ast.unparse(sub.value):
                    elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
                    if elts and _starts_at_one(elts[-1]):
                        return node.name
    return None


def sp_collator_shifting(root: str | None) -> str | None:
    """The tree's sequence-parallel collator class when it shifts the labels itself (None: not found)."""
    if root is None:
        return None
    for rel in _COLLATOR_MODULES:
        path = Path(root, rel)
        if path.is_file():
            stat = path.stat()
            found = _sp_collator_at(str(path), stat.st_mtime, stat.st_size)
            if found:
                return found
    return None


def _sp_polarity(test: ast.AST) -> bool | None:
    """True: the test holds when sequence parallelism is on (`if sp_enabled`, `if ps.sp_enabled`); False: when
    it is off (`if not sp_enabled`); None: another test."""
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if isinstance(test, (ast.Name, ast.Attribute)) and _base_name(test) == "sp_enabled":
        return not negated
    return None


def _sp_branch_shifts(func: ast.AST) -> list[ast.AST]:
    """Label shifts on the branch that runs when sequence parallelism is on."""
    out = []
    for node in _walk(func):
        if not isinstance(node, ast.If):
            continue
        polarity = _sp_polarity(node.test)
        if polarity is None:
            continue
        branch = node.body if polarity else node.orelse
        out.extend(n for stmt in branch for n in _walk(stmt) if _is_shift(n))
    return out


def _shifted_mask(node: ast.AST) -> str | None:
    """`mask[..., 1:]` / `mask[:, 1:]` (a position mask cut from position 1 on its last axis): the mask's name."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and "mask" in node.value.id):
        return None
    last = node.slice.elts[-1] if isinstance(node.slice, ast.Tuple) and node.slice.elts else node.slice
    if isinstance(node.slice, ast.Tuple) and len(node.slice.elts) < 2:
        return None
    return node.value.id if _starts_at_one(last) and isinstance(node.slice, ast.Tuple) else None


def _unshifted_selections(func: ast.AST) -> list[tuple[ast.Subscript, str]]:
    """`hidden_states[mask]` where the same function shifts `mask` by one position elsewhere (`mask[..., 1:]`,
    or `F.pad(mask[..., 1:], (0, 1))`): the mask marks target tokens, so the states that predict them are the
    ones before (`hidden_states[..., :-1, :][mask[..., 1:]]`); selecting with the bare mask, with no shifted
    rebinding of it on the path, trains each position to predict the token it already sees."""
    shifted = {name for n in _walk(func) for name in [_shifted_mask(n)] if name}
    if not shifted:
        return []
    out = []
    for node in _walk(func):
        if not (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Name)
            and node.slice.id in shifted
            and isinstance(node.ctx, ast.Load)
            and any(
                "hidden" in n.id or n.id.endswith("_hs") for n in _walk(node.value) if isinstance(n, ast.Name)
            )
        ):
            continue
        name = node.slice.id
        rebound = any(
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
            and any(_shifted_mask(n) == name for n in _walk(stmt.value))
            for stmt in path_before(func, node)
        )
        if not rebound:
            out.append((node, name))
    return out


def _sp_test(test: ast.AST) -> bool:
    """A test on the sequence-parallel switch, alone or as one operand of an `and`/`or`."""
    if isinstance(test, ast.BoolOp):
        return any(_sp_test(v) for v in test.values)
    return _sp_polarity(test) is not None


def _unguarded_shifts(func: ast.AST) -> list[ast.AST]:
    """Label shifts of a function that reads the sequence-parallel switch but shifts outside any branch on it
    (nested functions are their own): they run under sequence parallelism too."""
    out: list[ast.AST] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(stmt, ast.If) and _sp_test(stmt.test):
                continue  # one branch per setting: the SP-branch check judges it
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                if isinstance(stmt, ast.If):
                    out.extend(n for n in _walk(stmt.test) if _is_shift(n))
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, field, []) or [])
                for handler in getattr(stmt, "handlers", []) or []:
                    visit(handler.body)
                continue
            out.extend(n for n in _walk(stmt) if _is_shift(n))

    visit(func.body)  # type: ignore[attr-defined]
    return out


class LabelShift(LossRule):
    code = "NPU412"
    name = "label-shift"
    summary = "A patched causal-LM loss shifts the labels twice, or not at all (a head's hidden states selected at the target positions themselves included)."
    why = (
        "Causal-LM losses predict token n+1 from position n. transformers' `loss_function` (`ForCausalLMLoss`) "
        "and VeOmni's loss helpers shift the labels themselves unless `shift_labels=` is given. A patch that "
        "slices `labels[..., 1:]` and then hands the result to such a loss as `labels` shifts twice (every "
        "target is one token late); one that calls `cross_entropy` directly on unshifted labels, where the "
        "upstream forward used `loss_function`, does not shift at all."
        " In any function (model code and VeOmni's loss kernels under veomni/ops), unshifted labels passed as `shift_labels=` (the loss then skips its shift) and an already shifted tensor (`shift_labels[..., 1:]`) sliced again are reported too. The labels are followed through locals (a name rebound to its shift, `F.pad(labels, (0, 1), value=-100)[..., 1:]` included, counts only on the path to the loss call) and into the forwarded kwargs (`kwargs['shift_labels'] = labels`, a dict display). Hidden states selected with a bare token mask (`hidden_states[mask]`) in a function that shifts that mask by one position elsewhere (`mask[..., 1:]`, another branch such as the sequence-parallel one) are reported unless a shifted rebinding of the mask runs before: the states at the target positions predict the tokens they already see. In a function that computes a cross-entropy, labels cut at the end (`labels[..., :-1]`) or logits cut at the start (`logits[..., 1:, :]`) are reported: the reverse of the causal pairing. When the tree's sequence-parallel collator shifts the labels itself (read from its data collator module), a label shift on the branch that runs with sequence parallelism on (`if sp_enabled:`, or the `else` of `if not sp_enabled:`) is reported: it shifts twice. Wherever labels and the hidden states or logits they are scored against are cut in the same block (a kernel's eager fallback, a chunked loss), any pairing other than labels without their first position with states without their last (`labels[..., 1:]` with `hidden_states[..., :-1, :]`) is reported on the states' cut. Labels padded at the front (`F.pad(labels, (1, 0), value=-100)`) with no slice taking the slot off again move every target one position later (the reverse shift). A module helper that takes the sequence-parallel switch as a parameter and branches on it (`def split(labels, lens, sp_enabled)`), called with a literal `True`/`False` from a function that reads the SP state, runs the wrong setting's label handling (a second shift under SP, or none without). The unguarded-shift check also covers a function that reads `sp_enabled` without branching on it (`sp_enabled = ps.sp_enabled`, then an unconditional shift). And where the SP collator shifts, in a helper that returns the labels it builds, an `if sp_enabled:` whose two branches both hand labels on (assigned to a label name, appended to a label list) with no shift on either side and no loss call on the non-SP side is reported on the non-SP side: there nothing shifts them."
        " A chunked loss that cuts the labels into chunks along another axis than the hidden states or logits they are scored against (same chunk size, literal axes) pairs chunk i of one with chunk i of the other only by accident; both cuts are read in one function, and one that transposes either tensor or a chunk of it (a sequence-first layout) is left alone."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    shifted = labels[..., 1:].contiguous()
                    loss = self.loss_function(logits=logits, labels=shifted, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="shifted by hand, then again by the loss",
        ),
        Example(
            """
            def causal_loss(self, logits, labels, **kwargs):
                return self.loss_function(logits=logits, labels=labels, shift_labels=labels, **kwargs)
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="unshifted labels handed over as `shift_labels`",
        ),
        Example(
            """
            def causal_loss(self, logits, labels, **kwargs):
                shifted = labels[..., 1:]
                return self.loss_function(logits=logits, labels=shifted, shift_labels=shifted, **kwargs)
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="labels sliced from position 1 (one shorter than the logits) handed over as `shift_labels`",
        ),
        Example(
            """
            import torch.nn.functional as F


            def causal_loss(self, logits, labels, **kwargs):
                labels = F.pad(labels, (0, 1), value=-100)[..., 1:]
                return self.loss_function(logits, labels, self.vocab_size, **kwargs)
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
            title="the labels rebound to their padded shift, then shifted again by the loss",
        ),
        Example(
            """
            def causal_loss(self, logits, labels, **kwargs):
                kwargs["shift_labels"] = labels
                return self.loss_function(logits=logits, labels=None, vocab_size=self.vocab_size, **kwargs)
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
            title="unshifted labels placed in the forwarded kwargs as `shift_labels`",
        ),
        Example(
            """
            import torch.nn.functional as F


            def speech_head_loss(self, hidden_states, codec_mask, codec_ids, sp_enabled):
                if sp_enabled:
                    codec_mask = F.pad(codec_mask[:, 1:], (0, 1), value=0)
                    selected = hidden_states[codec_mask]
                else:
                    selected = hidden_states[codec_mask]
                return F.cross_entropy(self.codec_head(selected), codec_ids)
            """,
            path="veomni/models/transformers/toy_tts/modeling_toy_tts.py",
            title="a head's states selected with the bare target mask on one branch",
        ),
        Example(
            """
            from torch import nn


            def caption_loss(self, logits, labels):
                pred = logits[:, :-1, :].contiguous()
                gold = labels[:, :-1].contiguous()
                loss_fct = nn.CrossEntropyLoss()
                return loss_fct(pred.view(-1, pred.size(-1)), gold.view(-1))
            """,
            path="veomni/models/transformers/toy_caption/modeling_toy_caption.py",
            title="the labels cut at the end instead of the start",
        ),
        Example(
            """
            import torch.nn.functional as F


            def next_token_loss(logits, target_ids, ignore_index=-100, cross_entropy_fn=None):
                padded = F.pad(target_ids, (1, 0), value=ignore_index)
                targets = padded[..., 1:].reshape(-1)
                return cross_entropy_fn(logits.float().reshape(-1, logits.size(-1)), targets, ignore_index)
            """,
            path="veomni/ops/kernels/cross_entropy/next_token.py",
            title="a loss kernel pads the labels at the front and drops the front again",
        ),
        Example(
            """
            def blockwise_fused_ce(hidden, head_weight, labels, block=2048):
                labels = labels[..., 1:].contiguous()
                total = 0.0
                for h, y in zip(hidden.split(block, dim=1), labels.split(block, dim=1)):
                    total = total + fused_linear_ce(h, head_weight, y)
                return total
            """,
            path="veomni/ops/kernels/cross_entropy/blockwise.py",
            title="a fused kernel shifts the labels but not the hidden states they are paired with",
        ),
        Example(
            """
            def blockwise_ce(hidden, head_weight, labels, ce):
                if labels is not None:
                    labels = labels[..., 1:]
                    hidden = hidden[..., 1:, :]
                return ce(hidden @ head_weight.T, labels)
            """,
            path="veomni/ops/kernels/cross_entropy/blockwise.py",
            title="the hidden states cut on the same side as the labels (each position scored on its own token)",
        ),
    )
    bad = bad + (
        Example(
            """
            import torch.nn.functional as F


            def shift_for_sp(batch, ignore_index=-100):
                targets = batch["labels"][..., :-1]
                batch["labels"] = F.pad(targets, (1, 0), value=ignore_index)
                return batch
            """,
            path="veomni/data/toy_sp_collator.py",
            title="labels padded at the front: shifted the wrong way",
        ),
        Example(
            """
            import torch.nn.functional as F


            def split_targets(labels, lens, sp_enabled):
                out, start = [], 0
                for n in lens:
                    seg = labels[start : start + n]
                    out.append(seg if sp_enabled else F.pad(seg[1:], (0, 1), value=-100))
                    start += n
                return out


            def pair_logps(model, batch, parallel_state):
                sp_enabled = parallel_state.sp_enabled
                logps = model(**batch).log_probs
                targets = split_targets(batch["labels"], batch["lens"], False)
                return logps, targets, sp_enabled
            """,
            path="veomni/trainer/toy_pair_trainer.py",
            title="the helper's SP switch handed a constant",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    shifted = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
                    loss = self.loss_function(
                        logits=logits, labels=labels, shift_labels=shifted, vocab_size=self.config.vocab_size, **kwargs
                    )
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch.nn.functional as F


            def causal_loss(self, logits, labels, use_fused, **kwargs):
                if use_fused:
                    return self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
                labels = labels[..., 1:]
                return F.cross_entropy(logits[..., :-1, :].flatten(0, 1), labels.flatten(), ignore_index=-100)
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch.nn.functional as F


            def speech_head_loss(self, hidden_states, codec_mask, codec_ids, sp_enabled):
                if sp_enabled:
                    codec_mask = F.pad(codec_mask[:, 1:], (0, 1), value=0)
                    selected = hidden_states[codec_mask]
                else:
                    selected = hidden_states[:, :-1][codec_mask[:, 1:]]
                return F.cross_entropy(self.codec_head(selected), codec_ids)
            """,
            path="veomni/models/transformers/toy_tts/modeling_toy_tts.py",
            title="both branches pair each state with the next target",
        ),
        Example(
            """
            from torch import nn


            def caption_loss(self, logits, labels, input_ids):
                decoder_inputs = input_ids[:, :-1]
                pred = logits[:, :-1, :].contiguous()
                gold = labels[:, 1:].contiguous()
                loss_fct = nn.CrossEntropyLoss()
                return loss_fct(pred.view(-1, pred.size(-1)), gold.view(-1)), decoder_inputs
            """,
            path="veomni/models/transformers/toy_caption/modeling_toy_caption.py",
            title="the causal pairing (and an input cut, which is not a label)",
        ),
        Example(
            """
            import torch


            def stop_token_loss(self, stop_logits, frame_mask):
                stop_labels = torch.cat([~frame_mask * 1.0, torch.ones_like(frame_mask[:, :1])], dim=1)
                stop_labels = stop_labels[:, 1:].masked_select(frame_mask)
                return self.bce(stop_logits.masked_select(frame_mask), stop_labels)
            """,
            path="veomni/models/transformers/toy_tts/modeling_toy_tts.py",
            title="labels extended by one position (a concatenation) and cut back: nothing to pair",
        ),
    )
    fix_safety = "No fix: whether to drop the slice or pass it as `shift_labels=` is the author's choice."

    @classmethod
    def applies_to(cls, ctx: object) -> bool:  # model code and VeOmni's loss kernels (veomni/ops)
        return not ctx.source.kind.test  # type: ignore[attr-defined]

    def finish(self) -> None:
        self._reported: set[tuple[int, int]] = set()
        if self.ctx.source.kind.model_code:
            super().finish()
        text = self.ctx.source.text
        if "hidden" in text and "mask" in text:
            seen: set[int] = set()  # a nested function is walked with its enclosing one too
            for func in functions_of(self.ctx.tree, text, "1:]"):
                for node, name in _unshifted_selections(func):
                    if id(node) in seen:
                        continue
                    seen.add(id(node))
                    self.report(
                        node,
                        f"`{ast.unparse(node)}` selects the hidden states at the `{name}` positions themselves, "
                        f"where this function shifts `{name}` by one position elsewhere (`{name}[..., 1:]`): each "
                        "selected state is trained to predict the token it already sees, not the next one",
                    )
        if "pad" in text:
            for func in functions_of(self.ctx.tree, text, "pad("):
                undone = {id(call) for call, _ in _pad_shifts(func)}
                for call in _right_shifts(func, undone):
                    if self._once(call):
                        self.report(
                            call,
                            f"`{ast.unparse(call)}` pads the labels at the front: every label moves one position "
                            "later, so each position is scored against the token before it; the causal shift pads "
                            "at the end and drops the first label (`F.pad(labels, (0, 1), value=ignore)[..., 1:]`)",
                        )
                for node, side in _pad_shifts(func):
                    if self._once(node):
                        self.report(
                            node,
                            f"the labels are padded at the {side} and then sliced back to their length from the same "
                            "side: the slice removes the pad again, so the labels are not shifted and every "
                            "position is trained to predict its own token; pad at the end (`(0, 1)`) and drop the "
                            "first position (`[..., 1:]`)",
                        )
        if "label" not in text:
            return
        if "split(" in text:
            for node, labels_dim, other, other_dim in _chunk_axes(self.ctx.tree):
                if self._once(node):
                    self.report(
                        node,
                        f"the labels are cut into chunks along dim {labels_dim}, but `{other}` (the states they "
                        f"are scored against) along dim {other_dim} with the same chunk size: chunk i of the labels "
                        "no longer belongs to chunk i of the states",
                    )
        if "sp_enabled" in text:
            collator = sp_collator_shifting(self.ctx.project.root if self.ctx.project else None)
            if collator is not None:
                for func in functions_of(self.ctx.tree, text, "sp_enabled"):
                    for node in _sp_branch_shifts(func):
                        if self._once(node):
                            self.report(
                                node,
                                f"the labels are shifted on the sequence-parallel branch, but the tree's `{collator}` "
                                "already shifts them when it splits the sequence: every target is one token late",
                            )
                    if "Collat" in getattr(func, "name", ""):
                        continue
                    for node, test in _unshifted_off_branches(func):
                        if self._once(node):
                            self.report(
                                node,
                                f"`{ast.unparse(node)}` hands the labels on unshifted on the branch without sequence "
                                f"parallelism (`if {test}:`), where the other branch relies on the tree's "
                                f"`{collator}` having shifted them: without SP every target is the position's own "
                                "token; shift here (`F.pad(labels[1:], (0, 1), value=ignore)`)",
                            )
                    if not _reads_sp(func):
                        continue
                    for node in _unguarded_shifts(func):
                        if self._once(node):
                            self.report(
                                node,
                                f"`{func.name}` branches on `sp_enabled` but shifts the labels on both settings: under "
                                f"sequence parallelism the tree's `{collator}` has already shifted them, so every "
                                "target is one token late (and each shard drops a position); shift only when "
                                "sequence parallelism is off",
                            )
        if "sp_enabled" in text and "label" in text:
            helpers = _sp_flag_helpers(self.ctx.tree)
            if helpers:
                for func in functions_of(self.ctx.tree, text, "sp_enabled"):
                    for arg, callee, param in _constant_sp_flags(func, helpers):
                        if self._once(arg):
                            self.report(
                                arg,
                                f"`{callee}` is handed the constant `{ast.unparse(arg)}` for its `{param}` switch in "
                                "a function that reads the sequence-parallel state: the helper's label handling for "
                                f"the other setting never runs, so under {'sequence parallelism' if ast.unparse(arg) == 'False' else 'no sequence parallelism'} "
                                "the labels are shifted twice (or not at all); pass the state itself",
                            )
        for func in functions_of(self.ctx.tree, text, "CrossEntropyLoss", "cross_entropy", "loss_fct"):
            if not direct_ce_calls(func) and "loss_fct" not in {
                n.id for n in _walk(func) if isinstance(n, ast.Name)
            }:
                continue
            for node, what in _backward_cuts(func):
                if not self._once(node):
                    continue
                self.report(
                    node,
                    f"`{ast.unparse(node)}` cuts the {what} at the {'end' if what == 'labels' else 'start'}: a "
                    "causal-LM loss pairs the logits without their last position with the labels without their "
                    "first (`logits[..., :-1, :]`, `labels[..., 1:]`); this pairing scores each position against "
                    "its own token or the one before",
                )
        if "1:" in text or ":-1" in text:
            for func in functions_of(self.ctx.tree, text, "1:", ":-1"):
                for node, base, label_side, side in _paired_cuts(func):
                    if not self._once(node):
                        continue
                    self.report(
                        node,
                        f"`{ast.unparse(node)}` cuts `{base}` at the {side} where the labels next to it are cut at "
                        f"the {label_side}: a causal-LM loss pairs the states without their last position with the "
                        "labels without their first (`[..., :-1, :]` with `labels[..., 1:]`); this pairing scores "
                        "each position against its own token or the one before",
                    )
        for func in functions_of(
            self.ctx.tree,
            text,
            "shift_labels",
            "shifted",
            "loss_function",
            "ForCausalLMLoss",
            "causal_lm_loss",
        ):
            self._generic(func)
        if "1:]" in text:  # last: a line another check of this rule reported is not reported twice
            lines = {d.line for d in self.ctx.diagnostics if d.code == self.code}
            for func in functions_of(self.ctx.tree, text, "1:]"):
                for node in _uncut_partners(func):
                    if node.lineno not in lines and self._once(node):  # type: ignore[attr-defined]
                        lines.add(node.lineno)  # type: ignore[attr-defined]
                        self.report(
                            node,
                            f"`{ast.unparse(node)}` drops the first label, but nothing in this function drops the last "
                            "position of the hidden states or logits it is paired with (`[..., :-1, :]`): each "
                            "position is scored against a label one step off, or the lengths no longer match",
                        )

    def _generic(self, func: ast.AST) -> None:
        """Any function: shifted labels handed as `labels=` to a loss that shifts them; unshifted labels
        handed as `shift_labels=` (the loss then skips its own shift)."""
        for node in _given_shift_ignored(func):
            if self._once(node):
                self.report(
                    node,
                    "the labels are shifted here without looking at the caller's `shift_labels`: labels a caller "
                    "already shifted (the sequence-parallel collator, a packed batch) are thrown away and the "
                    "targets move one token; shift only when `shift_labels is None`",
                )
        shifted = _shifted_names(func)
        short = _short_names(func)
        raw = {
            a.arg
            for a in [*func.args.args, *func.args.kwonlyargs]
            if "label" in a.arg and "shift" not in a.arg
        }  # type: ignore[attr-defined]
        for node in _walk(func):
            if isinstance(node, ast.Subscript) and _is_shift(node):
                base = ast.unparse(node.value)
                if "shift" in base and self._once(node):
                    self.report(
                        node,
                        f"`{base}` is already shifted; slicing it from position 1 shifts it twice: every target "
                        "is one token late",
                    )
            given: list[
                tuple[str | None, ast.AST]
            ] = []  # (key, value) of what becomes the loss's shift_labels
            if isinstance(node, ast.Assign):  # kwargs["shift_labels"] = labels
                given = [
                    ("shift_labels", node.value)
                    for t in node.targets
                    if isinstance(t, ast.Subscript)
                    and isinstance(t.slice, ast.Constant)
                    and t.slice.value == "shift_labels"
                ]
            elif isinstance(node, ast.Dict):  # {**kwargs, "shift_labels": labels}
                given = [
                    ("shift_labels", v)
                    for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value == "shift_labels"
                ]
            elif isinstance(node, ast.Call):
                given = [(kw.arg, kw.value) for kw in node.keywords]
            else:
                continue
            for key, value in given:
                if (
                    key == "shift_labels"
                    and isinstance(value, ast.Name)
                    and value.id in raw
                    and value.id not in shifted
                ):
                    if self._once(value):
                        self.report(
                            value,
                            f"`{value.id}` (the unshifted labels) is passed as `shift_labels=`: the loss takes them "
                            "as already shifted and every position learns to predict itself",
                        )
            if not isinstance(node, ast.Call):
                continue
            if call_name(node) in _SHIFTING:
                for kw in node.keywords:
                    value = kw.value
                    if (
                        kw.arg == "shift_labels"
                        and ((isinstance(value, ast.Name) and value.id in short) or _short_shift(value))
                        and not _logits_cut(func, call_arg(node, 0, "logits"))
                        and self._once(value)
                    ):
                        self.report(
                            value,
                            f"`{ast.unparse(value)}` is sliced from position 1 and not padded back: as "
                            "`shift_labels=` it is one position shorter than the full-length logits, so targets and "
                            "logits no longer line up (pad it: `F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]`)",
                        )
            if call_name(node) not in _SHIFTING or any(kw.arg == "shift_labels" for kw in node.keywords):
                continue
            arg = call_arg(node, 1, "labels")
            if arg is not None and (
                (isinstance(arg, ast.Name) and arg.id in shifted and _shifted_before(func, node, arg.id))
                or _is_shift(arg)
            ):
                if self._once(arg):
                    self.report(
                        arg,
                        "labels already shifted by hand are passed as `labels=` to a loss that shifts them again: "
                        "every target is one token late; pass them as `shift_labels=` or pass the raw labels",
                    )

    def _once(self, node: ast.AST) -> bool:
        key = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        shifted = _shifted_names(func)
        for call in loss_calls(func):
            if any(kw.arg == "shift_labels" for kw in call.keywords):
                continue
            arg = call_arg(call, 1, "labels")
            if arg is None:
                continue
            if (
                (isinstance(arg, ast.Name) and arg.id in shifted and _shifted_before(func, call, arg.id))
                or _is_shift(arg)
            ) and self._once(arg):
                self.report(
                    arg,
                    "labels already shifted by hand are passed as `labels=` to a loss that shifts them again: "
                    "every target is one token late; pass them as `shift_labels=` or pass the raw labels",
                )
        if shifted or any(_is_shift(n) for n in _walk(func)):
            return
        if not loss_calls(patched.upstream) or any("shift" in n.id for n in nodes_of(func, ast.Name)):  # type: ignore[attr-defined]
            return
        for call in direct_ce_calls(func):
            self.report(
                call,
                f"`{patched.cls}.forward` computes cross-entropy directly on unshifted labels, where the upstream "
                "forward's `loss_function` shifts them: the model learns to copy its input",
            )


def _split_call(node: ast.AST) -> tuple[str, str, int] | None:
    """`torch.split(x, size, dim=d)` / `x.split(size, d)`: (x, size text, d) with a literal non-negative d
    (0 when absent)."""
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split"
    ):
        return None
    args = list(node.args)
    owner = node.func.value
    if isinstance(owner, ast.Name) and owner.id == "torch":
        if not args:
            return None
        owner, args = args[0], args[1:]
    if not args or not isinstance(owner, ast.Name):
        return None
    dim_node = next((k.value for k in node.keywords if k.arg == "dim"), args[1] if len(args) > 1 else None)
    if dim_node is None:
        dim = 0
    elif (
        isinstance(dim_node, ast.Constant)
        and isinstance(dim_node.value, int)
        and not isinstance(dim_node.value, bool)
    ):
        dim = dim_node.value
    else:
        return None
    if dim < 0:
        return None
    return owner.id, ast.unparse(args[0]), dim


_AXIS_SWAPS = frozenset({"t", "transpose", "permute", "movedim", "swapaxes", "swapdims"})


def _chunk_axes(tree: ast.Module) -> list[tuple[ast.Call, int, str, int]]:
    """Labels and hidden states / logits cut into chunks of one size along different (literal, non-negative)
    axes in one function (a chunked loss: the forward of its autograd Function). A function that transposes
    either tensor or a chunk of it (sequence-first states `(T, B, H)` cut on dim 0 with `(B, T)` labels cut on
    dim 1, then `l.t()`) lays them out differently on purpose."""
    out: list[tuple[ast.Call, int, str, int]] = []
    for scope in [tree, *nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef)]:
        if not any(a.attr == "split" for a in nodes_of(scope, ast.Attribute)):  # type: ignore[attr-defined]
            continue  # no `.split(...)` in the scope (its nested functions included): no pair
        nodes = own_nodes(scope)
        labels: list[tuple[ast.Call, str, int]] = []
        states: list[tuple[str, str, int]] = []
        for node in nodes:
            found = _split_call(node)
            if found is None:
                continue
            name, size, dim = found
            low = name.lower()
            if "label" in low:
                labels.append((node, size, dim))  # type: ignore[arg-type]
            elif "hidden" in low or "logit" in low:
                states.append((name, size, dim))
        pairs = []
        for node, size, dim in labels:
            others = [(n, d) for n, s, d in states if s == size]
            if others and all(d != dim for _, d in others):
                pairs.append((node, dim, others[0][0], others[0][1]))
        if pairs and not _swaps_chunked_axes(nodes):
            out.extend(pairs)
    return out


def _swaps_chunked_axes(nodes: list[ast.AST]) -> bool:
    """A transpose (`.t()`, `.transpose`, `.permute`, `.T`) of a split tensor, of a name bound to its split, or
    of a loop variable taken from one."""
    names: set[str] = set()
    for node in nodes:
        found = _split_call(node)
        if found is not None:
            names.add(found[0])
    for _ in range(2):  # splits -> bound lists -> loop variables
        for node in nodes:
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif isinstance(node, (ast.For, ast.comprehension)):
                value, targets = node.iter, [node.target]
            else:
                continue
            read = {n.id for n in _walk(value) if isinstance(n, ast.Name)}
            if read & names or any(_split_call(n) is not None for n in _walk(value)):
                names |= {n.id for t in targets for n in _walk(t) if isinstance(n, ast.Name)}
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            if node.attr in _AXIS_SWAPS or node.attr in ("T", "mT"):
                return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _AXIS_SWAPS
        ):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in names:
                return True  # `torch.transpose(h, 0, 1)`
    return False
