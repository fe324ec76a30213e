"""Scale slots of the toy model, declared at module scope (OpSlot era)."""

from veomni.ops.dispatch import OpSlot

# NPU227: the slot named for the dense scale binds the `gated` variant
veomni_toy_scale_dense = OpSlot("toy_scale", "gated")
