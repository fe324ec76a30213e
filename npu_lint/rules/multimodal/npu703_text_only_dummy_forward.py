"""NPU703 text-only-dummy-forward."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example
from npu_lint.rules.multimodal._shared import (
    MEDIA,
    PatchedMethod,
    WrapperRule,
    def_span,
    params_of,
    upstream_towers,
)


def _dummy_calls(func: ast.AST) -> list[ast.Call]:
    return [
        n
        for n in _walk(func)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "dummy_forward"
    ]


def _tower_of(call: ast.Call) -> str | None:
    value = call.func.value  # type: ignore[attr-defined]
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        return value.attr
    return None


def _zero_products(func: ast.AST) -> list[ast.BinOp]:
    out = []
    for node in _walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if any(isinstance(side, ast.Constant) and side.value == 0 for side in (node.left, node.right)):
                out.append(node)
    return out


def _zeroed(func: ast.FunctionDef, call: ast.Call) -> bool:
    """Whether the dummy forward's output reaches a multiplication by zero: directly
    (`tower.dummy_forward().x.mean() * 0.0`) or through locals it is assigned to (three steps at most)."""
    products = [set(_walk(p)) for p in _zero_products(func)]
    if any(call in nodes for nodes in products):
        return True
    product_names = {n.id for nodes in products for n in nodes if isinstance(n, ast.Name)}
    assigns = []
    for stmt in _walk(func):
        if isinstance(stmt, ast.Assign):
            inside = set(_walk(stmt.value))
            names = {n.id for n in inside if isinstance(n, ast.Name)}
            targets = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            assigns.append((call in inside, names, targets))
    derived: set[str] = set()
    for _ in range(3):
        before = len(derived)
        for has_call, names, targets in assigns:
            if has_call or names & derived:
                derived |= targets
        if len(derived) == before:
            break
    return bool(derived & product_names)


class TextOnlyDummyForward(WrapperRule):
    code = "NPU703"
    name = "text-only-dummy-forward"
    summary = "A patched multimodal `Model.forward` lets text-only micro-batches skip a modality tower."
    why = (
        "Under FSDP every rank must run the same collectives. When one rank's micro-batch has no image, its "
        "vision tower does not run, its parameters' all-gathers and gradient reduce-scatters are skipped, and "
        "the ranks that did see images wait forever (or the tower's gradients are wrong). VeOmni's wrappers "
        "run `self.<tower>.dummy_forward()` in the text-only branch and add `fake.mean() * 0.0` to the text "
        "embeddings, a zero-valued dependency that keeps the tower in the autograd graph. This rule checks a "
        "patched `Model.forward` that handles media for each tower the upstream class builds (`visual`, "
        "`vision_tower`, `audio_tower`): a `dummy_forward()` call, and a multiplication by zero."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.sum() * 0 + image_embeds.mean()
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="no dummy forward for text-only ranks",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    inputs_embeds = inputs_embeds + fake.pooler_output.mean() * 0.0
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: the dummy input's shape is the tower's business."

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        if not any(MEDIA.match(p) and p.startswith("pixel_values") for p in params_of(func)):
            return  # the patch does not handle media itself
        towers = upstream_towers(patched)
        if not towers:
            return
        calls = _dummy_calls(func)
        covered = {_tower_of(c) for c in calls}
        missing = [t for t in towers if t not in covered]
        if missing:
            self.report(
                def_span(self.ctx, func),
                f"`{patched.cls}.forward` never runs `self.{missing[0]}.dummy_forward()` for a text-only micro-batch: "
                "under FSDP the ranks without media skip the tower's collectives",
            )
            return
        for call in calls:
            if not _zeroed(func, call):
                self.report(
                    call,
                    "the dummy forward's output is not added with a zero-valued dependency (`fake.mean() * 0.0`): "
                    "the tower drops out of the autograd graph",
                )
