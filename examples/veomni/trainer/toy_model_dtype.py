# NPU626: the master-weight dtype read from a precision flag the argument dataclasses no longer define
def build_model(args, build_foundation_model):
    return build_foundation_model(
        config_path=args.model.config_path,
        torch_dtype="float32" if args.train.enable_mixed_precision else "bfloat16",
        init_device=args.train.init_device,
    )
