# NPU633: the audio tower's gather runs without the SP gate its siblings run under
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs


def toy_text_head(x):
    if get_parallel_state().sp_enabled:
        x = gather_outputs(x, gather_dim=1)
    return x


def toy_vision_head(x):
    if not get_parallel_state().sp_enabled:
        return x
    return gather_outputs(x, gather_dim=0)


def toy_audio_head(x):
    return gather_outputs(x, gather_dim=0)
