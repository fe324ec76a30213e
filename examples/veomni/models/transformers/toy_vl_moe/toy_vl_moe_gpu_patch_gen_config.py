from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
    target_file="patched_modeling_toy_vl_moe_gpu.py",
)


@config.override_method("Qwen3VLMoeForConditionalGeneration.get_parallel_plan")
def get_parallel_plan_patched(self):
    from ..parallel_plan import get_parallel_plan

    return get_parallel_plan()
