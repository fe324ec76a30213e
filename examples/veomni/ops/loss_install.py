"""Installs the causal-LM loss the ops config selects (the demo's loss install point)."""

_LOSS_IMPL = {"impl": "eager"}


def install_loss_mapping(impl="eager"):
    """Route the models' ``loss_function`` to the cross-entropy kernel registered under ``impl``."""
    _LOSS_IMPL["impl"] = impl


def apply_loss_config(ops_config):
    # NPU225: a config without the field (the demo's OpsImplementationConfig has none) falls back to the Liger
    # kernel on every host, Ascend included: the NPU defaults never see it
    impl = getattr(ops_config, "cross_entropy_loss_implementation", "liger_kernel")
    install_loss_mapping(impl)
