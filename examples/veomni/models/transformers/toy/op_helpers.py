"""Ops-config reader of the toy model."""


def read_toy_impl(cfg, field: str, *, npu_as: str | None = None) -> str:  # NPU219: `npu_as` is never read
    return "eager" if cfg is None else getattr(cfg, field, "eager")
