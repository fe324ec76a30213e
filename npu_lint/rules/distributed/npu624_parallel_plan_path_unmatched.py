"""NPU624 parallel-plan-path-unmatched."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.planpaths import missing_segment, plan_roots


class ParallelPlanPathUnmatched(Rule):
    code = "NPU624"
    name = "parallel-plan-path-unmatched"
    summary = (
        "A model package's parallel plan names a module path the model it is applied to does not have "
        "(`model.layers.*` on a model whose decoder is `model.language_model.layers`): the pattern matches no "
        "parameter."
    )
    why = (
        "`ParallelPlan.apply` matches the plan's patterns (expert-parallel `Shard(0)` entries, FSDP no-shard "
        "modules) against the fully qualified names of the built model's parameters. The model is the class "
        "whose `get_parallel_plan` the package's patch spec binds to the plan (a VLM's "
        "`ForConditionalGeneration`, whose decoder sits under `model.language_model`; an omni model's "
        "`thinker`). A pattern whose module path is not in that model matches nothing and raises nothing: "
        "the experts are never sharded over the EP group, every rank holds and updates all experts while the "
        "EP dispatch expects local ones, and the run is slower, larger and wrong on every device. The check "
        "walks the upstream transformers classes (and the spec's own `__init__` overrides) from the bound "
        "class along the pattern's segments up to its first wildcard."
    )
    bad = (
        Example(
            """
            from torch.distributed._tensor import Shard

            from ....distributed.parallel_plan import ParallelPlan


            def get_parallel_plan():
                ep_plan = {
                    "model.layers.*.mlp.experts.gate_up_proj": Shard(0),
                    "model.layers.*.mlp.experts.down_proj": Shard(0),
                }
                return ParallelPlan(extra_parallel_plan={"ep": ep_plan})
            """,
            path="veomni/models/transformers/toy_vl_moe/parallel_plan.py",
            title="a text-model path in the plan of a VLM (the spec binds ForConditionalGeneration.get_parallel_plan)",
        ),
    )
    good = (
        Example(
            """
            from torch.distributed._tensor import Shard

            from ....distributed.parallel_plan import ParallelPlan


            def get_parallel_plan():
                ep_plan = {
                    "model.language_model.layers.*.mlp.experts.gate_up_proj": Shard(0),
                    "model.language_model.layers.*.mlp.experts.down_proj": Shard(0),
                }
                return ParallelPlan(extra_parallel_plan={"ep": ep_plan})
            """,
            path="veomni/models/transformers/toy_vl_moe/parallel_plan.py",
        ),
    )
    fix_safety = "No fix: the right prefix depends on the model class the plan serves."
    requires = ("ParallelPlan",)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        return kind.model_code and not kind.generated and not kind.spec

    def finish(self) -> None:
        keys = [
            key
            for node in nodes_of(self.ctx.tree, ast.Dict)
            for key in node.keys
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and "." in key.value
        ]
        if not keys:
            return
        roots = plan_roots(self.ctx.source.path)
        if not roots:
            return
        for key in keys:
            segments = key.value.split(".")
            misses = [(cls, missing_segment(module, cls, segments, inits)) for module, cls, inits in roots]
            if any(index is None for _, index in misses):
                continue  # the path exists in one of the bound models (or the walk cannot tell)
            cls, index = misses[0]
            assert index is not None
            prefix = ".".join(segments[: index + 1])
            self.report(
                key,
                f"`{key.value}`: `{cls}` (whose `get_parallel_plan` the package's spec binds to this plan) has no "
                f"module `{prefix}`, so the pattern matches no parameter and is silently ignored (experts or "
                "modules left unsharded).",
            )
