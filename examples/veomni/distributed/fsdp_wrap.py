"""FSDP2 wrapping of the example tree: decoder layers first, then the root."""

from torch.distributed.fsdp import fully_shard


def wrap_with_fsdp2(model, mesh, mp_policy, reshard_layers=True, extra_units=()):
    # NPU611: transformers 5 makes the built model's _no_split_modules a set, so `+` with a list raises
    units = (getattr(model, "_no_split_modules", None) or []) + list(extra_units)
    layer_kwargs = {"mesh": mesh, "mp_policy": mp_policy}
    layer_kwargs["reshard_after_forward"] = reshard_layers
    for layer in model.model.layers:
        if type(layer).__name__ in units:
            fully_shard(layer, **layer_kwargs)
    # NPU608: the root gets the layers' reshard_after_forward, so its lm_head is freed before the loss backward
    fully_shard(model, **layer_kwargs)
    return model
