from ....utils.device import IS_NPU_AVAILABLE  # noqa: F401  (not used yet: the package is GPU-only)
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy")
def register_toy_modeling(architecture: str):
    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForConditionalGeneration, ToyModel

    if "ForConditionalGeneration" in architecture:
        return ToyForConditionalGeneration
    # NPU503: the earlier test accepts every architecture this one does: this branch is never taken
    elif "ForSequenceClassificationForConditionalGeneration" in architecture:
        return ToyModel
    elif "ForCausalLM" in architecture:
        return ToyForCausalLM
    elif "Model" in architecture:
        return ToyModel
    else:
        return ToyForConditionalGeneration
