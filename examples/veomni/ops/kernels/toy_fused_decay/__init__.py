"""The toy fused decay op: its AscendC backend needs the `decay_npu` extension, which registers the
`torch.ops.npu.npu_fused_decay` operator when imported."""


def _npu_fused_decay_factory():
    try:
        from ._ascend.fused_decay import fused_decay
    except ModuleNotFoundError as e:
        if e.name == "decay_npu":  # NPU323: nothing this import loads imports decay_npu any more
            raise RuntimeError("the npu fused decay backend needs the decay_npu package") from e
        raise
    return fused_decay
