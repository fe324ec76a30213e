"""NPU defaults of the auxiliary-loss field (the table a config's NPU normalisation reads)."""

_NPU_AUX_DEFAULTS = {
    # NPU216: every `fused` row of aux_loss requires CUDA (ops/kernels/toy_aux), so the NPU default keeps it
    "aux_loss_implementation": "fused",
}
