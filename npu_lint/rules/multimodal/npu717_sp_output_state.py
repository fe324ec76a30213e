"""NPU717 sp-output-state."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._spflow import function_flow
from npu_lint.veomni.spstate import CUT, GATHERED, HEADS, TRANSITION_WORDS, helper_name, not_sequence

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class SpOutputState(Rule):
    code = "NPU717"
    name = "sp-output-state"
    summary = (
        "A function hands back a sequence in another sequence-parallel state than it received it: a Ulysses "
        "head-sharded output never brought back to the sequence layout, a sequence the function cut to this "
        "rank's shard returned without the gather that restores it, or the caller's shard gathered and returned "
        "full."
    )
    why = (
        "A sequence-parallel forward is a round trip: what it cuts to this rank's shard (`slice_input_tensor`, "
        "`sp_pad_and_slice`, a `rank * chunk` range) it gathers back before the output head, and what its "
        "attention brings to the full sequence with a shard of the heads (`gather_seq_scatter_heads`, the async "
        "Ulysses projection) it brings back (`gather_heads_scatter_seq`) before the output projection. When one "
        "half is missing the function returns a tensor of another length or head count than its caller expects "
        "(and a tower that gathers the caller's shard to run on the whole sequence has to cut it back): "
        "the loss sees 1/sp of the prediction, or a reshape silently mixes heads and positions. The check follows "
        "each local through one function (assignments, unpacking, calls on it) on the sequence-parallel branch, "
        "and reports a returned value still head-sharded, cut here and never gathered, or gathered here from the "
        "caller's shard and never cut back (indices, masks and lengths gathered for every rank excepted). "
        "Helpers named for a "
        "transition (`gather_seq_scatter_heads_qkv`, `_sp_slice`) return a transitioned value by design and are "
        "skipped."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            class ToyDiT:
                def forward(self, latents, text):
                    tokens = self.patch_embed(latents)
                    if get_parallel_state().sp_enabled:
                        tokens = slice_input_tensor(tokens, dim=1)
                    for block in self.blocks:
                        tokens = block(tokens, text)
                    tokens = self.norm_out(tokens)
                    return self.unpatchify(tokens)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="the shard cut before the blocks is never gathered",
        ),
        Example(
            """
            from veomni.distributed.sequence_parallel import gather_heads_scatter_seq, gather_seq_scatter_heads


            def joint_attention(self, img, txt, use_sp):
                q = self.to_q(img)
                k = self.to_k(img)
                v = self.to_v(img)
                if use_sp:
                    q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                    k = gather_seq_scatter_heads(k, seq_dim=1, head_dim=2)
                    v = gather_seq_scatter_heads(v, seq_dim=1, head_dim=2)
                out = self.attn(q, k, v)
                return self.proj(out.flatten(2))
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="the attention output is left head-sharded (the inverse all-to-all is missing)",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            class ToyAudioTower:
                def forward(self, features, lengths):
                    if get_parallel_state().sp_enabled:
                        features = gather_outputs(features, gather_dim=0)
                    hidden = self.conv(features)
                    for layer in self.layers:
                        hidden = layer(hidden, lengths)
                    return hidden
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
            title="the caller's shard gathered for the convolutions and never cut back",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            class ToyDiT:
                def forward(self, latents, text):
                    tokens = self.patch_embed(latents)
                    sp = get_parallel_state().sp_enabled
                    if sp:
                        tokens = slice_input_tensor(tokens, dim=1)
                    for block in self.blocks:
                        tokens = block(tokens, text)
                    if sp:
                        tokens = gather_outputs(tokens, gather_dim=1)
                    return self.unpatchify(self.norm_out(tokens))
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="cut and gathered in the same forward",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def encode(self, input_ids, pixel_values):
                embeds = self.embed_tokens(input_ids)
                if get_parallel_state().sp_enabled:
                    embeds = gather_outputs(embeds, gather_dim=1)
                embeds = self.fill_media(embeds, pixel_values)
                if get_parallel_state().sp_enabled:
                    embeds = slice_input_tensor(embeds, dim=1)
                return embeds
            """,
            path="veomni/models/transformers/toy_vlm/modeling_toy_vlm.py",
            title="the caller's shard gathered, filled and cut back: returned as received",
        ),
        Example(
            """
            from veomni.distributed.sequence_parallel import gather_seq_scatter_heads


            def gather_seq_scatter_heads_qkv(q, k, v, seq_dim, head_dim):
                q = gather_seq_scatter_heads(q, seq_dim, head_dim)
                k = gather_seq_scatter_heads(k, seq_dim, head_dim)
                return q, k, gather_seq_scatter_heads(v, seq_dim, head_dim)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="a helper named for its transition",
        ),
    )
    fix_safety = "No fix: where the gather (or the inverse all-to-all) belongs is the author's call."
    requires = (TRANSITION_WORDS,)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        if helper_name(node.name):
            return
        result = function_flow(self.ctx, node)
        if result is None:
            return
        seen: set[int] = set()
        for stmt, value, name, state in result.returns:
            if state not in (HEADS, CUT, GATHERED) or stmt.lineno in seen or not_sequence(name):
                continue
            if state == GATHERED and any(
                w in (name or "").lower() for w in ("ind", "ids", "mask", "len", "count")
            ):
                continue  # top-k indices, a mask, lengths gathered for every rank to read: not the sequence
            names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if state == CUT and not any(result.roots.get(n) for n in names):
                continue  # a value the function built itself (a dummy batch) cut to a rank's part
            seen.add(stmt.lineno)
            what = f"`{name}`" if name else "the returned value"
            if state == HEADS:
                self.report(
                    value,
                    f"{what} is returned from `{node.name}` still in the Ulysses layout (full sequence, a shard "
                    "of the heads): the inverse all-to-all (`gather_heads_scatter_seq`) never brings it back, so "
                    "the caller gets another sequence length and head count than it passed in",
                )
            elif state == GATHERED:
                self.report(
                    value,
                    f"{what} is gathered from this rank's shard to the full sequence in `{node.name}` and returned "
                    "without being cut back: the caller, which passed a shard, gets sp_size times the rows it "
                    "expects (slice it back, e.g. `slice_input_tensor(..., dim=...)`, before returning)",
                )
            else:
                self.report(
                    value,
                    f"{what} is cut to this rank's sequence shard in `{node.name}` and returned without being "
                    "gathered back: the caller (the output head, the loss) receives 1/sp of the sequence it "
                    "passed in (gather it, e.g. `gather_outputs(..., gather_dim=...)`, before returning)",
                )
