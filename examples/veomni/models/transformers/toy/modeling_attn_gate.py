"""Attention and loss paths of the toy model chosen by the attention implementation's name."""


def eager_attention_forward(module, hidden_states, attention_mask, **kwargs):
    return hidden_states


def toy_gated_attention_forward(self, hidden_states, attention_mask, **kwargs):
    # NPU229: only transformers' FA2 name reaches the attention handle; VeOmni's own names run eager
    if self.config._attn_implementation == "flash_attention_2":
        attention_interface = self.veomni_attn
    else:
        attention_interface = eager_attention_forward
    return attention_interface(self, hidden_states, attention_mask, **kwargs)
