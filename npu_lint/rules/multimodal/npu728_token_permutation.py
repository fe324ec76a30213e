"""NPU728 token-permutation-asymmetry."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.permutation import permutation_faults


class TokenPermutationAsymmetry(Rule):
    code = "NPU728"
    name = "token-permutation-asymmetry"
    summary = (
        "Tokens reordered by an index (`x = x[window_index]`) are not reordered alike: a tensor aligned with them "
        "token for token (reshaped with the same shape, e.g. the rotary table) is left in the old order, or the "
        "inverse permutation (`argsort(window_index)`) is applied on some paths to the output and not on another."
    )
    why = (
        "Window attention (Qwen2.5-VL / Qwen2.5-Omni vision towers), token sorting by expert and length balancing "
        "reorder the tokens of a sequence with an index tensor, run, and restore the order with the inverse "
        "permutation. Every tensor that describes the same tokens (the rotary table, position embeddings, masks, "
        "routing weights) must be gathered with the same index, or each token is rotated with another patch's "
        "height/width position; and the inverse must be applied on every path that hands the result on (with and "
        "without sequence parallelism, each early return), or the features reach the language model's "
        "placeholders in window order. Nothing fails: the model trains on scrambled positions. Within one "
        "function, names reshaped with the same shape expression are taken as aligned token for token; one of them "
        "indexed by an index tensor while its twin never is, is reported; and an inverse computed with `argsort` "
        "of an index the function permutes by must be applied (indexed with) on every path after it is computed."
    )
    bad = (
        Example(
            """
            def forward(self, hidden_states, rotary_pos_emb, window_index):
                seq_len, _ = hidden_states.size()
                hidden_states = hidden_states.reshape(seq_len // self.unit, self.unit, -1)
                hidden_states = hidden_states[window_index, :, :]
                hidden_states = hidden_states.reshape(seq_len, -1)
                rotary_pos_emb = rotary_pos_emb.reshape(seq_len, -1)
                return self.blocks(hidden_states, rotary_pos_emb)
            """,
            path="veomni/models/transformers/toy_vl/generated/patched_modeling_toy_vl_gpu.py",
            title="the rotary table left in raster order",
        ),
        Example(
            """
            def forward(self, hidden_states, window_index, sp_enabled):
                hidden_states = hidden_states[window_index, :]
                merged = self.merger(self.blocks(hidden_states))
                reverse_indices = torch.argsort(window_index)
                if sp_enabled:
                    merged = gather_outputs(merged, gather_dim=0)
                    merged = merged[reverse_indices, :]
                    merged = slice_input_tensor(merged, dim=0)
                return merged
            """,
            path="veomni/models/seed_omni/encoder/toy_vision/modeling_toy_vision.py",
            title="the order restored only under sequence parallelism",
        ),
    )
    good = (
        Example(
            """
            def forward(self, hidden_states, rotary_pos_emb, window_index, sp_enabled):
                seq_len, _ = hidden_states.size()
                hidden_states = hidden_states.reshape(seq_len // self.unit, self.unit, -1)
                hidden_states = hidden_states[window_index, :, :]
                hidden_states = hidden_states.reshape(seq_len, -1)
                rotary_pos_emb = rotary_pos_emb.reshape(seq_len // self.unit, self.unit, -1)
                rotary_pos_emb = rotary_pos_emb[window_index, :, :]
                rotary_pos_emb = rotary_pos_emb.reshape(seq_len, -1)
                merged = self.merger(self.blocks(hidden_states, rotary_pos_emb))
                reverse_indices = torch.argsort(window_index)
                if sp_enabled:
                    merged = gather_outputs(merged, gather_dim=0)
                    merged = merged[reverse_indices, :]
                    merged = slice_input_tensor(merged, dim=0)
                else:
                    merged = merged[reverse_indices, :]
                return merged
            """,
            path="veomni/models/transformers/toy_vl/generated/patched_modeling_toy_vl_gpu.py",
        ),
    )
    fix_safety = (
        "No fix: gather the twin with the same index, or apply the inverse on the path that lacks it."
    )
    requires = (("reshape", ".view(", "argsort"),)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if not any(call_name(c) in ("reshape", "view", "argsort") for c in nodes_of(node, ast.Call)):
            return
        for site, message in permutation_faults(node):
            self.report(site, message)
