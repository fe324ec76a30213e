"""Rule metadata shared by the registration rules (NPU503 and NPU732, which was split off it): the correct
registrations of a vision-language package both rules show, and their fix-safety note. Metadata only: each rule
runs these examples as its own test cases."""

from __future__ import annotations

from npu_lint.rules.base import Example

# the wrapper's and the text backbone's model types, each registered by its own loader
TWO_LOADERS = Example(
    """
    from ...loader import MODELING_REGISTRY


    @MODELING_REGISTRY.register("toy")
    def register_toy_modeling(architecture: str):
        from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

        return ToyForConditionalGeneration


    @MODELING_REGISTRY.register("toy_text")
    def register_toy_text_modeling(architecture: str):
        from .generated.patched_modeling_toy_gpu import ToyForCausalLM

        return ToyForCausalLM
    """,
    path="veomni/models/transformers/toy/__init__.py",
)

# one loader registered for both model types at import time, in a loop over literal types
LITERAL_TYPE_LOOP = Example(
    """
    from ...loader import MODELING_REGISTRY


    def load_any_toy(architecture: str):
        from .generated import patched_modeling_toy_gpu as generated

        return getattr(generated, architecture)


    for model_type in ("toy", "toy_text"):
        MODELING_REGISTRY.register(model_type)(load_any_toy)
    """,
    path="veomni/models/transformers/toy/__init__.py",
    title="one loader registered for both types in a loop over literal model types",
)

REGISTRATION_FIX_SAFETY = (
    "No fix: which classes a new model type should return (and whether the package means to be text-only) "
    "is a decision for the author."
)
