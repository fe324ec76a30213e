"""NPU466 modulation-scale-offset."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import norms


class ModulationScaleOffset(Rule):
    code = "NPU466"
    name = "modulation-scale-offset"
    summary = (
        "An AdaLN modulation `norm(x) * scale + shift` where the module's other modulations read "
        "`* (1 + scale) + shift`: the zero-centred scale lost its `1 +`."
    )
    why = (
        "Diffusion and video transformers modulate a normalised input with a scale and a shift read from a "
        "scale-shift table plus the timestep embedding; the table is trained zero-centred, so the modulation is "
        "`norm(x) * (1 + scale) + shift` and a zero scale leaves the input unchanged. A module writes that "
        "form once per branch (self-attention, cross-attention, the prompt's keys and values), and its other "
        "modulations are the reference for each one: a modulation that multiplies by the bare `scale` wipes "
        "out the normalised input wherever the timestep's scale is near zero, and the checkpoint's blocks no "
        "longer see what they were trained on."
    )
    bad = (
        Example(
            """
            def cross_attention_adaln(x, context, q_shift, q_scale, shift_kv, scale_kv, norm_eps=1e-6):
                attn_input = rms_norm(x, eps=norm_eps) * q_scale + q_shift
                encoder_hidden_states = context * (1 + scale_kv) + shift_kv
                return attn_input, encoder_hidden_states
            """,
            path="veomni/models/diffusers/toy_dit/transformer.py",
        ),
    )
    good = (
        Example(
            """
            def cross_attention_adaln(x, context, q_shift, q_scale, shift_kv, scale_kv, norm_eps=1e-6):
                attn_input = rms_norm(x, eps=norm_eps) * (1 + q_scale) + q_shift
                encoder_hidden_states = context * (1 + scale_kv) + shift_kv
                return attn_input, encoder_hidden_states
            """,
            path="veomni/models/diffusers/toy_dit/transformer.py",
        ),
    )
    fix_safety = "No fix: write `(1 + scale)` as the module's other modulations do."
    requires = ("scale", "shift")
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for scale, example in norms.modulation_offset_faults(node):
            self.report(
                scale,
                f"`{ast.unparse(scale)}` multiplies the normalised input as is, where this module's other "
                f"modulations add 1 to their zero-centred scale (`{example}`)",
            )
