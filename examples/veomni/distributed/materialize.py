"""Meta-device materialisation of the example tree."""

from veomni.utils.device import get_device_type


def materialize_model(model, cpu_offload):
    device = "cpu" if cpu_offload else get_device_type()
    model.to_empty(device=device)
    model.init_weights()
    # NPU106: under CPU offload the buffers (rotary inv_freq) stay on the CPU; nothing moves them to the NPU
    return model
