"""NPU727 twin-left-unread."""

from __future__ import annotations

import ast

from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.twins import unread_twins


class TwinLeftUnread(Rule):
    code = "NPU727"
    name = "twin-left-unread"
    summary = (
        "A function binds both of two twin names (`q_bias`/`k_bias`, `image_mask`/`video_mask`, "
        "`input_splits`/`output_splits`, `height`/`width`) and never reads one of them, while it reads its twin "
        "and other names of the same side: one twin was written in the other's place."
    )
    why = (
        "VeOmni's sequence-parallel and multimodal code handles twins the same way: the query and the key "
        "projection of an async Ulysses step, the image and the video tower, both directions of an all-to-all's "
        "split sizes. A copy-paste slip (`norm_q_weight` where `norm_k_weight` was meant) runs without error: "
        "the key is normalised with the query's weights, the video mask is built from the image's, the "
        "backward all-to-all sends with the forward's sizes. What the slip leaves behind is the twin it "
        "displaced: bound (a parameter, an assignment) and never read, although the function reads other "
        "names of that side. A function that ignores a whole side (a processor without video support) and "
        "names unpacked from a tuple (which often discard fields) are not judged, nor an optional parameter twin "
        "that no statement of its side displaced (`k_bias=None` accepted for a uniform signature)."
    )
    bad = (
        Example(
            """
            import torch.nn.functional as F


            def qk_projection(hidden_states, q_weight, k_weight, q_bias, k_bias):
                q = F.linear(hidden_states, q_weight, q_bias)
                k = F.linear(hidden_states, k_weight, q_bias)
                return q, k
            """,
            path="veomni/distributed/sequence_parallel/async_qk.py",
            title="the key projection takes the query's bias",
        ),
        Example(
            """
            def media_masks(input_ids, image_token_id, video_token_id):
                image_mask = input_ids == image_token_id
                video_mask = input_ids == video_token_id
                return image_mask, image_mask.sum()
            """,
            path="veomni/models/seed_omni/masks.py",
            title="the video mask built and never used",
        ),
    )
    good = (
        Example(
            """
            import torch.nn.functional as F


            def qk_projection(hidden_states, q_weight, k_weight, q_bias, k_bias):
                q = F.linear(hidden_states, q_weight, q_bias)
                k = F.linear(hidden_states, k_weight, k_bias)
                return q, k
            """,
            path="veomni/distributed/sequence_parallel/async_qk.py",
        ),
        Example(
            """
            def num_media_tokens(image_sizes=None, video_sizes=None):
                # no video support: the whole video side is ignored
                return [h * w // 196 for h, w in image_sizes or []]
            """,
            path="veomni/models/seed_omni/processing.py",
        ),
    )
    fix_safety = "No fix: read the twin the line meant."
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        # a function of the function's subtree alone: shared with its verbatim copies (core.memo.by_content)
        for at, name, twin in by_content(unread_twins, node, self.ctx.source.lines):
            self.report(
                at,
                f"`{name}` is bound in `{node.name}` and never read, while its twin `{twin}` and other names of "
                f"its side are: a `{twin}` was probably written where `{name}` was meant",
            )
