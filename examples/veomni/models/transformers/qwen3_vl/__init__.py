from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("qwen3_vl")
def register_qwen3_vl_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForConditionalGeneration, Qwen3VLModel

    if "ForConditionalGeneration" in architecture:
        return Qwen3VLForConditionalGeneration
    return Qwen3VLModel
