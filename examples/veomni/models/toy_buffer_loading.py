# NPU630: a DTensor buffer replaced by the whole unsharded tensor when weights are loaded
def toy_dispatch_buffer(module, name, buffer, dtensor_factory):
    orig = module._buffers[name]
    if hasattr(orig, "device_mesh"):
        device_mesh = orig.device_mesh
        placements = orig.placements
        module._buffers[name] = buffer.to(orig)
    else:
        module._buffers[name].copy_(buffer.to(device=orig.device, dtype=orig.dtype))
