# NPU632: a switch tuple defaulting to the sizes' (1,): EP placed outside FSDP unless a caller says otherwise
from typing import Tuple


def toy_init_parallel_state(
    dp_size: int = 1,
    extra_parallel_sizes: Tuple[int] = (1,),
    extra_parallel_placement_innermost: Tuple[bool] = (1,),
    extra_parallel_names: Tuple[str] = ("ep",),
):
    return dp_size, extra_parallel_sizes, extra_parallel_placement_innermost, extra_parallel_names
