# NPU466: the cross-attention query modulation lost the `1 +` its sibling modulations keep.
def cross_attention_adaln(x, context, q_shift, q_scale, shift_kv, scale_kv, norm_eps=1e-6):
    attn_input = rms_norm(x, eps=norm_eps) * q_scale + q_shift
    encoder_hidden_states = context * (1 + scale_kv) + shift_kv
    return attn_input, encoder_hidden_states
