"""NPU713 sp-full-labels-local-hidden."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._modality import root_name
from npu_lint.rules.multimodal._shared import BACK_WORDS, gathers

_META_CALLS = frozenset(
    {"to", "type_as", "view_as", "expand_as", "reshape_as", "new_zeros", "new_full", "new_ones"}
)
_SP_WORDS = ("sp_enabled", "sp_group", "sp_size", "sp_rank", "ulysses", "sequence_parallel", "cp_group")
_TARGET_WORDS = ("label", "target")
_LOCAL_WORDS = ("hidden", "logits")


def _cuts(value: ast.AST) -> bool:
    """Whether ``value`` cuts a tensor back to a shard: a slice/narrow/chunk/split helper, or an index whose
    bounds are computed from the rank."""
    for node in _walk(value):
        if isinstance(node, ast.Call) and any(w in call_name(node).lower() for w in BACK_WORDS):
            return True
        if isinstance(node, ast.Subscript) and any(
            isinstance(n, (ast.Name, ast.Attribute))
            and "rank" in (getattr(n, "id", "") or getattr(n, "attr", ""))
            for n in _walk(node.slice)
        ):
            return True
    return False


def _targetish(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in _TARGET_WORDS)


class SpFullLabelsLocalHidden(Rule):
    code = "NPU713"
    name = "sp-full-labels-local-hidden"
    summary = (
        "Under sequence parallelism, labels (targets) rebuilt on the all-gathered full sequence reach a head or "
        "loss together with this rank's hidden states (or logits) without being cut back to the rank's shard."
    )
    why = (
        "A decoder head on a sequence-parallel model sees only this rank's shard of the hidden states. Labels "
        "that live somewhere else (media labels produced by an encoder, targets packed per sample) are often "
        "all-gathered over the SP group, scattered into a full-length label tensor at the right positions and "
        "then cut back to the rank's chunk (`labels.narrow(seq_dim, rank * chunk, chunk)`, `slice_input_tensor`). "
        "Without the last step the head pairs local hidden states with full-length labels: a shape error under "
        "Ulysses SP, or, when a loss flattens both, a loss computed against another rank's positions. The check "
        "follows, in one function, the locals derived from an all-gather (through indexing, `torch.cat`, "
        "`masked_scatter` and indexed writes into a label tensor) until they are cut back, and reports a label "
        "or target argument still holding the full sequence in a call that also gets this rank's "
        "hidden states or logits (a name with `hidden` or `logits` in it that no gather reached)."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed.nn.functional as distF
            from veomni.distributed.parallel_state import get_parallel_state


            class ToyPatchDecoder:
                def decode(self, hidden_states, patch_targets, patch_mask):
                    ps = get_parallel_state()
                    if ps.sp_enabled:
                        every = torch.cat(distF.all_gather(patch_targets, group=ps.sp_group), dim=0)
                        targets = torch.full(patch_mask.shape, -100, dtype=torch.long, device=patch_mask.device)
                        targets[patch_mask] = every[: patch_mask.sum()]
                        return self.head(hidden_states, target_ids=targets)
                    return self.head(hidden_states[patch_mask], target_ids=patch_targets)
            """,
            path="veomni/models/seed_omni/decoder/toy_patch/modeling_toy_patch.py",
            title="targets rebuilt on the full sequence, handed to the head with the local hidden states",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            def media_loss(logits, media_labels, loss_fn):
                if get_parallel_state().sp_enabled:
                    media_labels = gather_outputs(media_labels, gather_dim=1, group=get_parallel_state().sp_group)
                return loss_fn(logits, media_labels)
            """,
            path="veomni/models/transformers/toy/modeling_toy_media_loss.py",
            title="gathered labels against local logits, positionally",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed.nn.functional as distF
            from veomni.distributed.parallel_state import get_parallel_state


            class ToyPatchDecoder:
                def decode(self, hidden_states, patch_targets, patch_mask):
                    ps = get_parallel_state()
                    if ps.sp_enabled:
                        chunk = patch_mask.size(1) // ps.sp_size
                        every = torch.cat(distF.all_gather(patch_targets, group=ps.sp_group), dim=0)
                        targets = torch.full(patch_mask.shape, -100, dtype=torch.long, device=patch_mask.device)
                        targets[patch_mask] = every[: patch_mask.sum()]
                        targets = targets[:, ps.sp_rank * chunk : (ps.sp_rank + 1) * chunk]
                        return self.head(hidden_states, target_ids=targets)
                    return self.head(hidden_states[patch_mask], target_ids=patch_targets)
            """,
            path="veomni/models/seed_omni/decoder/toy_patch/modeling_toy_patch.py",
            title="cut back to the rank's chunk before the head",
        ),
    )
    fix_safety = "No fix: the shard bounds depend on how the sequence was split."
    requires = ("gather", ("label", "target"), _SP_WORDS)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            self._check(func)

    def _check(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not any("gather" in call_name(n).lower() for n in nodes_of(func, ast.Call)):
            return
        nodes = _walk(func)
        local = {
            n.id
            for n in nodes_of(func, ast.Name)
            if isinstance(n, ast.Name) and any(w in n.id.lower() for w in _LOCAL_WORDS)
        }
        if not local:
            return
        # a name bound on both arms of an `if`: the arm written second does not undo the first (may-analysis)
        other_arm: set[int] = set()
        for n in nodes:
            if isinstance(n, ast.If) and n.orelse:
                arms = [
                    {id(a): a for s in arm for a in _walk(s) if isinstance(a, ast.Assign)}
                    for arm in (n.body, n.orelse)
                ]
                names = [
                    {
                        t.id
                        for a in arm.values()
                        for tg in a.targets
                        for t in _walk(tg)
                        if isinstance(t, ast.Name)
                    }
                    for arm in arms
                ]
                both = names[0] & names[1]
                for key, a in arms[1].items():
                    if any(isinstance(t, ast.Name) and t.id in both for tg in a.targets for t in _walk(tg)):
                        other_arm.add(key)
        events: list[tuple[tuple[int, int], str, str, ast.AST]] = []  # (pos, kind, name, node)
        for n in nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        kind = "merge" if id(n) in other_arm else "bind"
                        events.append(((n.end_lineno or n.lineno, n.col_offset), kind, t.id, n.value))
                    elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        events.append(
                            ((n.end_lineno or n.lineno, n.col_offset), "write", t.value.id, n.value)
                        )
            elif (
                isinstance(n, ast.Expr)
                and isinstance(n.value, ast.Call)
                and n.value.args
                and gathers(n.value)
            ):
                first = n.value.args[0]
                if isinstance(first, ast.Name):
                    events.append(((n.lineno, n.col_offset), "bind", first.id, n.value))
            elif isinstance(n, ast.Call) and n is not None:
                events.append(((n.lineno, n.col_offset), "call", "", n))
        events.sort(key=lambda e: (e[0], e[1] != "call"))
        full: dict[str, int] = {}
        for (line, _), kind, name, node in events:
            if kind == "call":
                self._use(node, full, local)  # type: ignore[arg-type]
                continue
            value = node
            if kind == "write":
                if _derived(value, full) and name not in local:
                    full[name] = full.get(name, line)
                continue
            if gathers(value):
                full[name] = line
            elif kind == "merge":
                if _derived(value, full):
                    full[name] = line
            elif _cuts(value) or _sized_by(value, local):
                full.pop(name, None)
            elif _derived(value, full):
                full[name] = line
            else:
                full.pop(name, None)

    def _use(self, call: ast.Call, full: dict[str, int], local: set[str]) -> None:
        if not full or call_name(call) in _META_CALLS:
            return
        labels = None
        for kw in call.keywords:
            r = root_name(kw.value)
            if kw.arg and _targetish(kw.arg) and r is not None and r.id in full:
                labels = r.id
        for a in call.args:
            r = root_name(a)
            if r is not None and r.id in full and _targetish(r.id):
                labels = r.id
        if labels is None:
            return
        values = [*call.args, *(k.value for k in call.keywords)]
        hidden = next(
            (r.id for v in values if (r := root_name(v)) is not None and r.id in local and r.id not in full),
            None,
        )
        if hidden is None:
            return
        self.report(
            call,
            f"`{labels}` holds the sequence-parallel all-gathered full sequence (line {full[labels]}) but reaches "
            f"`{ast.unparse(call.func)}` next to `{hidden}`, this rank's shard: cut it back to the rank's chunk "
            "(`narrow`, `slice_input_tensor`) before the head, or the shapes (or the positions) disagree",
        )


def _sized_by(value: ast.AST, local: set[str]) -> bool:
    """`labels[:, : logits.shape[0]]`: cut to the length of a hidden-state/logits tensor (aligned with it)."""
    if not isinstance(value, ast.Subscript):
        return False
    for n in _walk(value.slice):
        if isinstance(n, ast.Attribute) and n.attr in ("shape", "size"):
            r = root_name(n.value)
            if r is not None and r.id in local:
                return True
    return False


def _derived(value: ast.AST, full: dict[str, int]) -> bool:
    """Whether ``value`` carries a full-sequence tensor (by its root, a `torch.cat`/`masked_scatter` argument)."""
    root = root_name(value)
    if root is not None and root.id in full:
        return True
    for n in _walk(value):
        if isinstance(n, ast.Call) and call_name(n) not in _META_CALLS:
            for a in [*n.args, *(k.value for k in n.keywords)]:
                r = root_name(a)
                if r is not None and r.id in full:
                    return True
    return False
