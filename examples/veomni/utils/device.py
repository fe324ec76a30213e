"""Device helpers of this demo tree (the names VeOmni's `veomni.utils.device` offers, in miniature)."""

import torch

IS_CUDA_AVAILABLE = torch.cuda.is_available()  # noqa: NPU102 - the one place that asks the CUDA runtime
IS_NPU_AVAILABLE = hasattr(torch, "npu") and torch.npu.is_available()


def get_device_type() -> str:
    """"cuda", "npu" or "cpu": what tensors should be allocated on."""
    if IS_NPU_AVAILABLE:
        return "npu"  # noqa: NPU102
    return "cuda" if IS_CUDA_AVAILABLE else "cpu"  # noqa: NPU102


def get_torch_device():
    """The torch device module (`torch.cuda`, `torch.npu` or `torch.cpu`)."""
    return getattr(torch, get_device_type())


def get_device_id() -> int:
    return get_torch_device().current_device() if get_device_type() != "cpu" else 0


def get_dist_comm_backend() -> str:
    return {"cuda": "nccl", "npu": "hccl"}.get(get_device_type(), "gloo")  # noqa: NPU102


def synchronize() -> None:
    if get_device_type() != "cpu":
        get_torch_device().synchronize()


def empty_cache() -> None:
    if get_device_type() != "cpu":
        get_torch_device().empty_cache()
