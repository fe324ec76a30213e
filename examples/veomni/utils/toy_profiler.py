"""Profiler helpers (planted bug: NPU105 a CUDA-only host gate drops the device-neutral memory-history
profiler on Ascend)."""

from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


class ProfilerWithMem:
    """Records the allocator's history between start() and stop()."""

    def __init__(self, inner):
        self._p = inner

    def start(self):
        out = self._p.start()
        get_torch_device().memory._record_memory_history()
        return out

    def stop(self):
        out = self._p.stop()
        get_torch_device().memory._record_memory_history(enabled=None)
        return out


def wrap_profiler(base_profiler, profile_memory: bool):
    if IS_CUDA_AVAILABLE and profile_memory:  # NPU105
        return ProfilerWithMem(base_profiler)
    return base_profiler
