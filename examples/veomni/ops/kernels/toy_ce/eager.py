# NPU459: the token count and the ignore index swapped
def fixed_cross_entropy(source, target, num_items_in_batch=None, ignore_index=-100):
    ...


def eager_cross_entropy(logits, labels, num_items_in_batch=None, ignore_index=-100):
    return fixed_cross_entropy(logits, labels, ignore_index, num_items_in_batch)
