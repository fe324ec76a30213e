"""NPU231 model-variant-bypassed."""

from __future__ import annotations

import ast
from pathlib import PurePath

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._handles import INSTANCE_HANDLES, ROW_RESOLVERS, call_name, op_variant
from npu_lint.rules.base import Example, Rule

_CHECKED = INSTANCE_HANDLES | ROW_RESOLVERS | {"OpSlot"}


def _model_name(path: str) -> str:
    """The model package's name: the directory holding the file (above ``generated/``)."""
    parts = PurePath(path).parts[:-1]
    if parts and parts[-1] == "generated":
        parts = parts[:-1]
    return parts[-1].lower() if parts else ""


class ModelVariantBypassed(Rule):
    code = "NPU231"
    name = "model-variant-bypassed"
    summary = (
        "A model package binds a generic variant of an op for which the tree registers a variant named after "
        'that very model (`VeomniOp("moe_experts", "standard", ...)` in `gpt_oss/` while `moe_experts/gpt_oss` '
        "rows exist)."
    )
    why = (
        "The registry keeps a model-specific variant when the model's math differs from the generic one: "
        "GPT-OSS experts interleave gate/up with biases and a clamped, alpha-gated activation; a model's RMSNorm "
        "or RoPE may offset or lay out differently. The model's own code is the one place that variant is meant "
        "for. Binding the generic variant there still resolves (the rows exist), so nothing fails: the eager "
        "row, the fused GPU kernel and the NPU kernel all compute the generic op, and the model trains with "
        "another function than its checkpoint was made with. The rule reads the tree's registry rows and reports "
        "a handle whose variant is not the one named after the package it lives in."
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyNorm:
                def __init__(self, config):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "eager")
            """,
            path="veomni/models/transformers/deepseek_v4/modeling_toy_norm.py",
            title="DeepSeek-V4's norm bound to the standard RMSNorm",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyNorm:
                def __init__(self, config):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "deepseek_v4", "eager")
                    self.veomni_moe = VeomniOp("moe_experts", "standard", "eager")
            """,
            path="veomni/models/transformers/deepseek_v4/modeling_toy_norm.py",
        ),
    )
    fix_safety = "No fix: the model's variant is named in the message; whether it applies is checked by hand."
    requires = ((*sorted(_CHECKED),),)
    node_types = (ast.Call,)

    def _bound(self) -> set[tuple[str, str]]:
        """Every (op, variant) the file's handles bind: a file that binds the model's variant too uses the generic
        one on purpose (another norm of the model, say)."""
        found = self.ctx.memo.get("npu231.bound")
        if found is None:
            found = set()
            for call in nodes_of(self.ctx.tree, ast.Call):
                assert isinstance(call, ast.Call)
                kind = call_name(call, self.ctx)
                if kind in _CHECKED:
                    op, variant = op_variant(call, kind)
                    if op is not None and variant is not None:
                        found.add((op, variant))
            self.ctx.memo["npu231.bound"] = found
        return found  # type: ignore[return-value]

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        kind = call_name(node, self.ctx)
        if kind not in _CHECKED:
            return
        op, variant = op_variant(node, kind)
        if op is None or variant is None:
            return
        model = _model_name(self.ctx.source.path)
        if not model or variant.lower() == model:
            return
        project = self.ctx.project
        # a tree's own rows (its registrations, the live registry); the built-in catalog only outside any tree
        rows = (
            project.rows
            if not project.root
            else (*(project.live_rows or ()), *project.registered, *project.slot_rows)
        )
        variants = {r.variant for r in rows if r.op == op}
        if model not in variants or variant not in variants or (op, model) in self._bound():
            return
        self.report(
            node,
            f"`{model}` binds the `{variant}` variant of `{op}`, but the tree registers a `{op}/{model}` variant "
            f"for this model: every implementation of `{variant}` computes the generic op, not {model}'s; bind "
            f'`"{model}"`',
        )
