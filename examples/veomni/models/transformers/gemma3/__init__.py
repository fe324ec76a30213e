from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("gemma3_text")
def register_gemma3_text_modeling(architecture: str):
    from .generated.patched_modeling_gemma3_gpu import Gemma3ForCausalLM

    return Gemma3ForCausalLM
