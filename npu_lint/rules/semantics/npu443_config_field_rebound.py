"""NPU443 config-field-rebound."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath
from npu_lint.veomni.upstream import patched_methods

# classes whose __init__ fields feed the loss path: the heads (aux-loss coefficients, expert counts, top-k, vocab)
# and the MoE routing blocks
_CLASSES = (
    "ForCausalLM",
    "ForConditionalGeneration",
    "ForSequenceClassification",
    "ForTokenClassification",
    "SparseMoeBlock",
    "MoeBlock",
    "MoE",
    "Moe",
    "Experts",
    "Router",
    "TopkRouter",
    "TopKRouter",
    "Gate",
)


class ConfigFieldRebound(Rule):
    code = "NPU443"
    name = "config-field-rebound"
    summary = (
        "A patched `__init__` of a head or MoE block binds an attribute to a different config field than the "
        "upstream `__init__` it replaces (`self.num_experts_per_tok = config.num_local_experts`)."
    )
    why = (
        "The loss path reads what the head's `__init__` stored: the load-balancing loss gets `top_k` from "
        "`self.num_experts_per_tok`, the number of experts from `self.num_experts`, the coefficient from "
        "`self.router_aux_loss_coef`, the vocabulary from `self.vocab_size`. Upstream transformers binds each to "
        "its own config field; a replacement that reads another field (both exist, so nothing fails) hands the "
        "loss the wrong count -- every expert counted as selected, or top-k experts counted as all of them -- and "
        "the auxiliary loss stops balancing the router. The check pairs the spec's (or generated file's) "
        "`__init__` with the installed transformers class's and compares `self.X = config.Y` bindings of the same "
        "attribute."
    )
    bad = (
        Example(
            """
            from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeModel
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="patched_modeling_qwen3_moe_gpu.py")


            @config.override_method("Qwen3MoeForCausalLM.__init__")
            def qwen3_moe_forcausallm_init_patched(self, config):
                super().__init__(config)
                self.model = Qwen3MoeModel(config)
                self.vocab_size = config.vocab_size
                self.router_aux_loss_coef = config.router_aux_loss_coef
                self.num_experts = config.num_experts
                self.num_experts_per_tok = config.num_experts
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
            title="top-k read from the expert count",
        ),
    )
    good = (
        Example(
            """
            from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeModel
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="patched_modeling_qwen3_moe_gpu.py")


            @config.override_method("Qwen3MoeForCausalLM.__init__")
            def qwen3_moe_forcausallm_init_patched(self, config):
                super().__init__(config)
                self.model = Qwen3MoeModel(config)
                self.vocab_size = config.vocab_size
                self.router_aux_loss_coef = config.router_aux_loss_coef
                self.num_experts = config.num_experts
                self.num_experts_per_tok = config.num_experts_per_tok
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
            title="the upstream bindings",
        ),
    )
    fix_safety = "No fix: the upstream field is named in the message."
    requires = ("__init__", "= config.")
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return (ctx.source.kind.spec or ctx.source.kind.generated) and not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        for pm in patched_methods(
            node, self.ctx.source.text, "__init__", _CLASSES, path=self.ctx.source.path
        ):
            upstream = losspath.config_bindings(pm.upstream)
            if not upstream:
                continue
            for attr, (field_name, value) in losspath.config_bindings(pm.func).items():
                want = upstream.get(attr)
                if want is None or want[0] == field_name:
                    continue
                self.report(
                    value,
                    f"`self.{attr}` is bound to `config.{field_name}`, but `{pm.cls}.__init__` upstream binds it to "
                    f"`config.{want[0]}`: the loss path reads `self.{attr}` as that field",
                )
