"""A toy trainer step: gradient accumulation over micro-batches."""


def scale_micro_losses(loss_dict, args):
    # NPU423: each micro-batch's mean loss divided by the micro-batch size instead of the number of micro-batches
    return {name: value / args.train.micro_batch_size for name, value in loss_dict.items()}
