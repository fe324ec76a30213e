"""NPU714 rotary-sp-shard."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, last_name, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule

_SLICE = re.compile(r"slice_input|sp_pad_and_slice|split_for_sp|sp_slice|slice_sp")
_GATHER = re.compile(r"gather")
_TO_FULL = {
    "async_ulysses_qkv_projection": "full_async",
    "gather_seq_scatter_heads": "full_heads",
    "gather_seq_scatter_heads_qkv": "full_heads",
}
_TO_SEQ = frozenset({"gather_heads_scatter_seq", "async_ulysses_output_projection"})
_NOT_TABLE = frozenset(
    {"delta", "deltas", "index", "indices", "ids", "theta", "scaling", "type", "dim", "base"}
)
_TABLE_TOKENS = frozenset({"cos", "sin", "freq", "freqs", "rotary", "rope", "cis"})
_META = frozenset({"device", "dtype", "shape", "ndim", "size", "dim", "numel"})


def _table(name: str) -> bool:
    low = name.lower()
    tokens = low.split("_")
    if any(t in _NOT_TABLE for t in tokens):
        return False
    if "pos_emb" in low or "position_embedding" in low:
        return True
    return any(t in _TABLE_TOKENS for t in tokens)


def _reads(value: ast.AST) -> set[str]:
    """Names ``value`` reads as data (not only for their device, dtype or shape)."""
    meta: set[int] = set()
    for n in _walk(value):
        if isinstance(n, ast.Attribute) and n.attr in _META:
            meta.add(id(n.value))
        elif (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "type_as")
        ):
            meta.update(id(a) for a in n.args)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            meta.add(id(n.func))  # the function called, not data
    return {n.id for n in _walk(value) if isinstance(n, ast.Name) and id(n) not in meta}


def _targets(target: ast.AST) -> list[str]:
    """Plain names a target binds (`a`, `a, (b, c)`, `*rest`), not the objects of attribute/item stores."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _targets(e)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    return []


def _rank_range(value: ast.AST) -> bool:
    """`t[:, rank * chunk : (rank + 1) * chunk]`: a rank's range of a tensor."""
    return isinstance(value, ast.Subscript) and any(
        "rank" in (last_name(n) or "") for n in _walk(value.slice)
    )


def _kind(value: ast.AST) -> str | None:
    if _rank_range(value):
        return "slice"
    for n in _walk(value):
        if isinstance(n, ast.Call):
            name = call_name(n)
            if name in _TO_FULL:
                return _TO_FULL[name]
            if name in _TO_SEQ:
                return "back"
            if _SLICE.search(name):
                return "slice"
            if _GATHER.search(name) and "scatter" not in name:
                return "gather"
    return None


class RotarySpShard(Rule):
    code = "NPU714"
    name = "rotary-sp-shard"
    summary = (
        "Rotary tables (cos/sin, freqs, position embeddings) and the sequence they rotate are in different "
        "sequence-parallel states: the sequence is sliced to this rank's shard and the table is not, the "
        "table is computed from the collator's already-sliced `position_ids` and sliced again, or q/k are "
        "brought to the full sequence and the table stays rank-local."
    )
    why = (
        "RoPE pairs every token with its own position. Under sequence parallelism (Ulysses) a rank holds a shard "
        "of the sequence, and the rotary table has to follow the tensor it rotates exactly: when a forward "
        "slices its hidden sequence (`slice_input_tensor(x, dim=1)`) the table it built from the full input "
        "must be sliced the same way; a table computed from `position_ids` is already rank-local (VeOmni's "
        "sequence-parallel collator cuts `position_ids` with the inputs), so slicing it again keeps 1/sp of the "
        "rank's positions; and after the async Ulysses projection gives q/k the full sequence "
        "(`async_ulysses_qkv_projection`) a table received from the caller must be all-gathered first. (A file "
        "whose attention gathers q/k with `gather_seq_scatter_heads` before RoPE keeps its tables full by "
        "design: the first check is off there.) Each mistake either fails on a length mismatch or, when the lengths happen to "
        "broadcast, applies the first shard's positions on every rank and trains silently on wrong positions. "
        "The tables are recognised by name (cos, sin, freqs, rotary, rope, position embeddings) and followed "
        "through assignments in each function."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import slice_input_tensor_scale_grad


            class ToyVideoDiT:
                def forward(self, latents, context):
                    tokens, grid = self.patchify(latents)
                    rope_freqs = self.rope_table(grid).to(tokens.device)
                    if get_parallel_state().ulysses_enabled:
                        tokens = slice_input_tensor_scale_grad(tokens, dim=1)
                    for block in self.blocks:
                        tokens = block(tokens, context, rope_freqs)
                    return tokens
            """,
            path="veomni/models/transformers/toy_dit/modeling_toy_dit.py",
            title="the tokens are sliced, the table built from the full grid is not",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import slice_input_tensor


            class ToyTextModel:
                def forward(self, inputs_embeds, position_ids):
                    cos, sin = self.rotary(inputs_embeds, position_ids)
                    if get_parallel_state().sp_enabled:
                        cos = slice_input_tensor(cos, dim=1)
                        sin = slice_input_tensor(sin, dim=1)
                    for layer in self.layers:
                        inputs_embeds = layer(inputs_embeds, (cos, sin))
                    return inputs_embeds
            """,
            path="veomni/models/transformers/toy/modeling_toy_text.py",
            title="a table from the already-sliced position ids sliced a second time",
        ),
        Example(
            """
            from veomni.distributed.sequence_parallel import async_ulysses_output_projection, async_ulysses_qkv_projection


            def toy_async_attention(self, hidden_states, rope, attention_mask):
                q, k, v = async_ulysses_qkv_projection(hidden_states=hidden_states, seq_dimension=1, head_dimension=2)
                cos_t, sin_t = rope
                q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos_t, sin_t)
                out = self.attend(q, k, v.transpose(1, 2), attention_mask)
                return async_ulysses_output_projection(hidden_states=out, seq_dimension=1, head_dimension=2)
            """,
            path="veomni/models/transformers/toy/modeling_toy_async.py",
            title="full-sequence q/k rotated with the rank-local table",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import (
                async_ulysses_qkv_projection,
                gather_outputs,
                slice_input_tensor_scale_grad,
            )


            class ToyVideoDiT:
                def forward(self, latents, context):
                    tokens, grid = self.patchify(latents)
                    rope_freqs = self.rope_table(grid).to(tokens.device)
                    if get_parallel_state().ulysses_enabled:
                        tokens = slice_input_tensor_scale_grad(tokens, dim=1)
                        rope_freqs = slice_input_tensor_scale_grad(rope_freqs, dim=0)
                    cos = rope_freqs.real
                    for block in self.blocks:
                        tokens = block(tokens, context, rope_freqs, cos)
                    return tokens


            class ToyTextModel:
                def forward(self, inputs_embeds, position_ids):
                    cos, sin = self.rotary(inputs_embeds, position_ids)
                    for layer in self.layers:
                        inputs_embeds = layer(inputs_embeds, (cos, sin))
                    return inputs_embeds


            def toy_async_attention(self, hidden_states, rope, attention_mask):
                q, k, v = async_ulysses_qkv_projection(hidden_states=hidden_states, seq_dimension=1, head_dimension=2)
                cos_t, sin_t = rope
                cos_t = gather_outputs(cos_t, gather_dim=1)
                sin_t = gather_outputs(sin_t, gather_dim=1)
                return apply_rotary_pos_emb(q, k, cos_t, sin_t)
            """,
            path="veomni/models/transformers/toy_dit/modeling_toy_dit.py",
            title="the table sliced with its tokens; a table of local positions; tables gathered for full q/k",
        ),
    )
    fix_safety = "No fix: where the table is cut (or gathered) depends on its layout."
    requires = (("slice", "gather_seq_scatter_heads", "async_ulysses_qkv_projection", "_rank"),)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._pending: list[tuple[ast.AST, str]] = []

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        self._slice_at: dict[str, ast.AST] = {}  # where each sequence is first sliced in this function
        sp = False  # a slice, an all-to-all to the full sequence, or a rank's range: else nothing to check
        for n in nodes_of(node, ast.Assign, ast.Call):
            if isinstance(n, ast.Assign):
                sp = _rank_range(n.value)
            elif isinstance(n, ast.Call):
                name = call_name(n)
                sp = name in _TO_FULL or _SLICE.search(name) is not None
            if sp:
                break
        if not sp:
            return
        binds: list[tuple[int, list[str], ast.AST, ast.AST]] = [
            (n.end_lineno or n.lineno, [t for tg in n.targets for t in _targets(tg)], n.value, n)
            for n in nodes_of(node, ast.Assign)
        ]
        if not binds:
            return
        binds.sort(key=lambda b: b[0])
        args = node.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        # the state of each name along the function: "sliced", "full" (q/k after an all-to-all to the whole
        # sequence), "gathered", "table_full" (a table built here from unsliced inputs), "table_pos" (a table
        # from the collator's position_ids), "table_param" (a table handed in by the caller)
        state: dict[str, str] = {
            p: ("table_param" if _table(p) else "pos_param" if p.endswith("position_ids") else "")
            for p in params
        }
        origin: dict[str, int] = {}
        calls = sorted(nodes_of(node, ast.Call), key=lambda c: (c.lineno, c.col_offset))
        # names bound in both arms of an `if` (q/k from the all-to-all on one arm, a local projection on the
        # other) are not followed as full-sequence tensors
        branchy: set[str] = set()
        for n in nodes_of(node, ast.If):
            if n.orelse:  # type: ignore[attr-defined]
                body = {
                    t
                    for s in n.body  # type: ignore[attr-defined]
                    for a in nodes_of(s, ast.Assign)
                    for tg in a.targets  # type: ignore[attr-defined]
                    for t in _targets(tg)
                }
                other = {
                    t
                    for s in n.orelse  # type: ignore[attr-defined]
                    for a in nodes_of(s, ast.Assign)
                    for tg in a.targets  # type: ignore[attr-defined]
                    for t in _targets(tg)
                }
                branchy |= body & other
        ci = 0
        for line, names, value, stmt in binds:
            while ci < len(calls) and calls[ci].lineno <= line and calls[ci].lineno < stmt.lineno:
                self._use(node, calls[ci], state, origin)
                ci += 1
            kind = _kind(value)
            reads = _reads(value)
            for name in names:
                if kind == "slice":
                    self._slice_at.setdefault(name, stmt)
                    sliced_from = {state.get(r, "") for r in reads}
                    if "table_pos" in sliced_from and "pos_param" not in sliced_from:
                        self._double(stmt, name, origin)
                    state[name] = "sliced"
                elif kind == "back":
                    state[name] = ""
                elif kind is not None:
                    state[name] = "gathered" if kind == "gather" else "" if name in branchy else kind
                elif (f := next((state[r] for r in reads if state.get(r, "").startswith("full")), None)) and (
                    name not in branchy
                ):
                    state[name] = f
                elif any(state.get(r) == "sliced" for r in reads):
                    state[name] = "sliced"
                elif any(state.get(r) == "gathered" for r in reads):
                    state[name] = "gathered"
                elif state.get(name) == "pos_param":
                    pass  # `position_ids = position_ids[1:]` (or its default): still this rank's positions
                elif _table(name) or any(state.get(r, "").startswith("table") for r in reads):
                    if any(state.get(r) in ("pos_param", "table_pos") for r in reads):
                        state[name] = "table_pos"
                    elif any(state.get(r) == "table_param" for r in reads):
                        state[name] = "table_param"
                    else:
                        state[name] = "table_full"
                    origin[name] = stmt.lineno
                else:
                    state[name] = ""
                origin.setdefault(name, stmt.lineno)
        for call in calls[ci:]:
            self._use(node, call, state, origin)

    def _use(self, func: ast.AST, call: ast.Call, state: dict[str, str], origin: dict[str, int]) -> None:
        values = [*call.args, *(k.value for k in call.keywords)]
        names = [n.id for v in values for n in _walk(v) if isinstance(n, ast.Name)]
        states = {n: state.get(n, "") for n in names}
        callee = call_name(call).lower()
        if "rotary" in callee or "rope" in callee:
            local = [n for n, s in states.items() if s == "table_param" and _table(n)]
            if local and any(s == "full_heads" for s in states.values()):
                self.ctx.memo["npu714_full_tables"] = True  # this file rotates gathered q/k: full tables
            full = [n for n, s in states.items() if s == "full_async"]
            if full and local:
                self._once(
                    call,
                    f"`{', '.join(full)}` cover the full sequence after the Ulysses all-to-all but are rotated with "
                    f"`{', '.join(local)}`, the rank-local table `{getattr(func, 'name', '?')}` received: all-gather "
                    "the table over the SP group on its sequence dim first",
                )
        sliced = [n for n, s in states.items() if s == "sliced" and not _table(n)]
        unsliced = [n for n, s in states.items() if s == "table_full"]
        if sliced and unsliced:
            at = self._slice_at.get(sliced[0], call)
            self._pending.append(
                (
                    at,
                    f"`{sliced[0]}` is sliced to this rank's sequence shard here but `{unsliced[0]}` (built at line "
                    f"{origin.get(unsliced[0], call.lineno)} from the full input) is passed with it to "
                    f"`{ast.unparse(call.func)}` at line {call.lineno} unsliced: every rank applies the first shard's "
                    "positions (slice the table the same way)",
                )
            )

    def finish(self) -> None:
        # a file whose attention rotates q/k after gathering them to the full sequence keeps its tables full
        if not self.ctx.memo.get("npu714_full_tables"):
            for at, message in self._pending:
                self._once(at, message)

    def _double(self, stmt: ast.AST, name: str, origin: dict[str, int]) -> None:
        self._once(
            stmt,
            f"`{name}` is sliced to a sequence-parallel shard, but the rotary table it comes from is computed "
            "from `position_ids`, which the sequence-parallel collator has already cut to this rank's shard: "
            "this keeps 1/sp of the rank's own positions (drop the slice)",
        )

    def _once(self, node: ast.AST, message: str) -> None:
        done = self.ctx.memo.setdefault("npu714_done", set())
        key = getattr(node, "lineno", 0)
        if key in done:
            return
        done.add(key)
        self.report(node, message)
