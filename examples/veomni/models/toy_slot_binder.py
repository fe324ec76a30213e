"""Binds the OpSlots of a modeling module from the ops config (the demo's binder)."""

from veomni.utils.device import is_torch_npu_available


def bind_toy_slots(modeling_module, ops_config) -> None:
    for name in dir(modeling_module):
        slot = getattr(modeling_module, name)
        if not hasattr(slot, "bind"):
            continue
        if is_torch_npu_available():
            # NPU222: on Ascend every slot is forced to eager, whatever the ops config selects
            impl_name = "eager"
        else:
            impl_name = getattr(ops_config, f"{slot.op_name}_implementation", "eager")
        slot.bind(impl_name)
