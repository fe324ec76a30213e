"""NPU718 sp-state-mixed."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._spflow import function_flow
from npu_lint.veomni.spstate import CUT, FULLS, HEADS, IN, SHARDS, TRANSITION_WORDS, Flow, Group, not_sequence

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WORDS = {
    CUT: "cut to this rank's shard",
    "shard-back": "cut back to this rank's shard",
    "full": "gathered to the full sequence",
    "gathered": "gathered to the full sequence",
    HEADS: "in the Ulysses layout (full sequence, a shard of the heads)",
    IN: "left as the caller passed it",
}
_HOW = {"tuple": "packed together", "cat": "concatenated", "arith": "combined"}


def _clash(a: str, b: str) -> bool:
    if a == b or IN in (a, b):
        return False
    kinds = {("shard" if s in SHARDS else "full" if s in FULLS else s) for s in (a, b)}
    return len(kinds) > 1


class SpStateMixed(Rule):
    code = "NPU718"
    name = "sp-state-mixed"
    summary = (
        "Tensors used together (packed as a pair, concatenated, added) are in different sequence-parallel "
        "states: one cut to this rank's shard and its sibling not (the `sin` of a `cos, sin` pair, the `v` of "
        "`q, k, v`), one gathered and the other still a shard, or one in the Ulysses head layout and the other not."
    )
    why = (
        "Tensors that describe the same positions (the cos and sin tables of one rotary embedding, q/k/v of one "
        "attention, the text and image streams of one joint sequence) have to go through the same "
        "sequence-parallel steps: a forward that slices cos to this rank's shard and forgets sin hands the "
        "attention a table pair of two lengths; one that all-to-alls q and k but not v attends over mismatched "
        "layouts; one that gathers one stream and concatenates it with a shard of the other builds a sequence "
        "no rank should hold. When the lengths happen to broadcast nothing fails and training reads the wrong "
        "rows. The check follows each local through one function on the sequence-parallel branch and reports "
        "a pair, a concatenation or an arithmetic combination whose members disagree: two transitioned states "
        "that differ, or a member left as passed in while its siblings (bound by the same unpacking, computed "
        "from the same inputs, or given the same transition elsewhere in the function) were transitioned."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import slice_input_tensor


            def prepare(self, hidden, rope):
                cos_t, sin_t = rope
                if get_parallel_state().sp_enabled:
                    hidden = slice_input_tensor(hidden, dim=1)
                    cos_t = slice_input_tensor(cos_t, dim=1)
                rope = (cos_t, sin_t)
                return self.blocks(hidden, rope)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="cos sliced, its sin sibling not",
        ),
        Example(
            """
            import torch

            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def joint(self, image_tokens, text_tokens, sp_on):
                if sp_on:
                    image_tokens = slice_input_tensor(image_tokens, dim=1)
                    text_tokens = slice_input_tensor(text_tokens, dim=1)
                image_tokens, text_tokens = self.double_blocks(image_tokens, text_tokens)
                if sp_on:
                    text_tokens = gather_outputs(text_tokens, gather_dim=1)
                return torch.cat([text_tokens, image_tokens], dim=1)
            """,
            path="veomni/models/transformers/toy_flux/modeling_toy_flux.py",
            title="one stream gathered, the other still a shard, concatenated",
        ),
        Example(
            """
            import torch

            from veomni.distributed.sequence_parallel import gather_seq_scatter_heads


            def prepare_qkv(query, key, value, group, layout):
                if layout == "sbhd":
                    query = gather_seq_scatter_heads(query, seq_dim=0, head_dim=1, group=group)
                    key = gather_seq_scatter_heads(key, seq_dim=0, head_dim=1, group=group)
                    value = gather_seq_scatter_heads(value, seq_dim=0, head_dim=1, group=group)
                else:
                    query = gather_seq_scatter_heads(query, seq_dim=1, head_dim=2, group=group)
                    key = gather_seq_scatter_heads(key, seq_dim=1, head_dim=2, group=group)
                return query, key, value
            """,
            path="veomni/ops/kernels/attention/toy_ulysses.py",
            title="value left out of one branch's all-to-all",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import slice_input_tensor


            def prepare(self, hidden, rope):
                if get_parallel_state().sp_enabled:
                    hidden = slice_input_tensor(hidden, dim=1)
                    rope = tuple(slice_input_tensor(t, dim=1) for t in rope)
                return self.blocks(hidden, rope)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="both tables sliced",
        ),
        Example(
            """
            import torch

            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def joint(self, image_tokens, text_tokens, sp_on):
                if sp_on:
                    image_tokens = slice_input_tensor(image_tokens, dim=1)
                    text_tokens = slice_input_tensor(text_tokens, dim=1)
                image_tokens, text_tokens = self.double_blocks(image_tokens, text_tokens)
                if sp_on:
                    text_tokens = gather_outputs(text_tokens, gather_dim=1)
                    image_tokens = gather_outputs(image_tokens, gather_dim=1)
                return torch.cat([text_tokens, image_tokens], dim=1)
            """,
            path="veomni/models/transformers/toy_flux/modeling_toy_flux.py",
            title="both streams gathered",
        ),
    )
    fix_safety = "No fix: which member is missing its step is the author's call."
    requires = (TRANSITION_WORDS,)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        result = function_flow(self.ctx, node)
        if result is None:
            return
        reported: set[int] = set()
        for group in result.groups:
            line = getattr(group.node, "lineno", 0)
            if line in reported:
                continue
            message = self._mismatch(result, group)
            if message is not None:
                reported.add(line)
                self.report(group.node, message)

    @staticmethod
    def _mismatch(result: Flow, group: Group) -> str | None:
        how = _HOW[group.kind]
        members = [(m, s, n) for m, s, n in group.members if not not_sequence(n)]
        known = [(m, s, n) for m, s, n in members if s is not None and s != IN]
        for i, (_, a, na) in enumerate(known):
            for _, b, nb in known[i + 1 :]:
                if _clash(a, b):
                    return (
                        f"`{na or '...'}` ({_WORDS[a]}) and `{nb or '...'}` ({_WORDS[b]}) are {how} here: "
                        "they no longer describe the same sequence positions on this rank (bring both through "
                        "the same sequence-parallel steps)"
                    )
        states = {s for _, s, _ in known}
        for _, s, name in members:
            if s not in (IN, None) or name is None:
                continue
            expected = result.expected(name, group.reached.get(name, set())) & states
            if expected:
                other = next(n for _, st, n in known if st in expected)
                state = next(iter(expected))
                return (
                    f"`{name}` is {how} with `{other or '...'}`, which was {_WORDS[state]}, but `{name}` itself "
                    f"never was, though `{name}` goes with the values that were (bound together, computed from the "
                    "same inputs, or given the same step elsewhere in this function): it missed that "
                    "sequence-parallel step"
                )
        return None
