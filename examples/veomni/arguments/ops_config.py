"""The ops-implementation config of the example tree."""

from dataclasses import dataclass, field

_NPU_DEFAULTS = {"rms_norm_implementation": "npu", "swiglu_mlp_implementation": "eager"}
_NPU_ALLOWED = {"moe_implementation": frozenset({"fused_npu"}), "swiglu_mlp_implementation": frozenset()}
# NPU211: "fused_npu" MoE is registered for Ascend only, yet a GPU config choosing it passes validation
_NPU_REQUIRED = {"swiglu_mlp_implementation": frozenset()}


@dataclass
class OpsImplementationConfig:
    rms_norm_implementation: str = field(default="liger_kernel")
    swiglu_mlp_implementation: str = "liger_kernel"

    def __post_init__(self):
        self._validate()

    # NPU210: the NPU fallback exists but `__post_init__` never calls it
    def _apply_npu_defaults(self):
        for name, value in _NPU_DEFAULTS.items():
            setattr(self, name, value)

    def _validate(self):
        for name in ("rms_norm_implementation", "swiglu_mlp_implementation"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(name)
