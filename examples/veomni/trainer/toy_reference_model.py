# NPU631: the frozen reference model is built on meta and materialised without its checkpoint
def build_parallelize_model(model, weights_path=None, **kwargs):
    return model


def build_reference_model(model, args):
    return build_parallelize_model(
        model,
        init_device=args.train.init_device,
        enable_gradient_checkpointing=False,
    )
