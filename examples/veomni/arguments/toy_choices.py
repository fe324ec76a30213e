# NPU212: planted example (see examples/README.md)
from dataclasses import dataclass, field

_NPU_OK = {
    "norm_implementation": frozenset({"npu"}),
    "experts_implementation": frozenset({"fused_npu"}),
}
_NPU_DEFAULTS = {
    "norm_implementation": "npu",
}


@dataclass
class KernelChoices:
    norm_implementation: str = "liger_kernel"
    experts_implementation: str = field(default="fused_triton")
