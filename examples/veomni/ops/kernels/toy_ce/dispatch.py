# NPU463: a loss kernel called otherwise than its sibling call: the popped temperature never reaches it.
def causal_lm_loss(hidden_states, weights, labels, shift_labels=None, **kwargs):
    temperature = kwargs.pop("temperature", 1.0)
    return chunk_logprobs_function(
        hidden_states, weights, labels, shift_labels=shift_labels, temperature=temperature
    )


def chunk_loss_dispatch(hidden_states, weights, labels, **kwargs):
    temperature = kwargs.pop("temperature", 1.0)
    return chunk_logprobs_function(hidden_states, weights, labels, shift_labels=kwargs.get("shift_labels"))
