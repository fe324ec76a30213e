"""LayerNorm backends of this demo tree (an ops table of per-name backends)."""

from dataclasses import dataclass


@dataclass
class BackendSpec:
    entry: str
    requires: tuple = ()
    replace_forward: bool = False


LAYER_NORM_BACKENDS = {
    "liger_kernel": BackendSpec(entry="liger_kernel.transformers:LigerLayerNorm", requires=("liger_kernel",)),
    # NPU215: the NPU backend requires the GPU sibling's package (copied from the entry above)
    "npu": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:layer_norm_npu", requires=("liger_kernel",)),
}
