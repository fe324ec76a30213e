# NPU629: the EP-aware optimizer is skipped whenever the trainer passes parameter groups
from torch.optim import AdamW


def _is_ep_model(model):
    return getattr(model, "_extra_parallel_param_groups", None) is not None


def build_ep_fsdp2_optimizer(model, lr, param_groups=None):
    groups = param_groups if param_groups is not None else [{"params": list(model.parameters())}]
    return AdamW(groups, lr)


def build_toy_optimizer(model, lr, param_groups=None):
    if param_groups is None and _is_ep_model(model):
        return build_ep_fsdp2_optimizer(model, lr, param_groups)
    return AdamW(param_groups or model.parameters(), lr)
