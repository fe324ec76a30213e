"""NPU445 router-precision-dropped."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath
from npu_lint.veomni.upstream import patched_methods

_ROUTERS = ("Router", "TopkRouter", "TopKRouter", "Gate", "MoEGate", "MoeGate")


class RouterPrecisionDropped(Rule):
    code = "NPU445"
    name = "router-precision-dropped"
    summary = (
        "A patched router `forward` computes its logits in the parameters' dtype where the upstream forward it "
        "replaces casts the projection's inputs to float32."
    )
    why = (
        "Routers whose upstream forward projects in float32 (`F.linear(h.type(torch.float32), "
        "w.type(torch.float32))`) depend on it: the sigmoid / softmax scores, the group top-k and the "
        "load-balancing loss computed from them differ in bf16, and VeOmni's patched routers run with autocast "
        "disabled, so nothing upcasts them either. Expert choice then differs from the reference (and between "
        "rollout and training), which no error shows. The check pairs each patched router forward with the "
        "installed transformers one and reports a replacement with no float32 cast at all where upstream casts "
        "the projection."
    )
    bad = (
        Example(
            """
            import torch.nn.functional as F
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.deepseek_v3.modeling_deepseek_v3", target_file="patched_modeling_deepseek_v3_gpu.py")


            @config.override_method("DeepseekV3TopkRouter.forward")
            def deepseek_v3_topk_router_forward_patched(self, hidden_states):
                hidden_states = hidden_states.view(-1, self.config.hidden_size)
                router_logits = F.linear(hidden_states, self.weight)
                return router_logits
            """,
            path="veomni/models/transformers/deepseek_v3/deepseek_v3_gpu_patch_gen_config.py",
            title="the projection in bf16",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.nn.functional as F
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.deepseek_v3.modeling_deepseek_v3", target_file="patched_modeling_deepseek_v3_gpu.py")


            @config.override_method("DeepseekV3TopkRouter.forward")
            def deepseek_v3_topk_router_forward_patched(self, hidden_states):
                hidden_states = hidden_states.view(-1, self.config.hidden_size)
                with torch.autocast(device_type="cuda", enabled=False):
                    router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
                return router_logits
            """,
            path="veomni/models/transformers/deepseek_v3/deepseek_v3_gpu_patch_gen_config.py",
            title="float32 as upstream",
        ),
    )
    fix_safety = "No fix."
    requires = ("forward", ("Router", "Gate"))
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return (ctx.source.kind.spec or ctx.source.kind.generated) and not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        for pm in patched_methods(node, self.ctx.source.text, "forward", _ROUTERS, path=self.ctx.source.path):
            if not losspath.fp32_projections(pm.upstream) or losspath._fp32_cast(pm.func):
                continue
            where = next(
                (
                    n
                    for n in ast.walk(pm.func)
                    if isinstance(n, ast.Call)
                    and (getattr(n.func, "attr", None) or getattr(n.func, "id", None))
                    in losspath._PROJECTIONS
                ),
                pm.func,
            )
            self.report(
                where,
                f"`{pm.cls}.forward` upstream projects in float32 (the inputs cast to `torch.float32`); this "
                "replacement has no float32 cast: the router logits, the expert choice and the load-balancing "
                "loss are computed in the parameters' dtype",
            )
