"""GPU patch spec for Qwen3-MoE (the router and the causal-LM head are patched)."""

import torch
from torch import nn
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeModel, load_balancing_loss_func

from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen3_moe.modeling_qwen3_moe",
    target_file="patched_modeling_qwen3_moe_gpu.py",
)


@config.override_method("Qwen3MoeTopKRouter.forward", description="Routing scores in float32")
def qwen3_moe_router_forward_patched(self, hidden_states):
    flat = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = torch.nn.functional.linear(flat, self.weight)
    # NPU417: upstream returns the raw logits; the load-balancing loss applies its own softmax to them
    router_logits = torch.softmax(router_logits.float(), dim=-1)
    routing_weights, selected_experts = torch.topk(router_logits, self.top_k, dim=-1)
    if self.norm_topk_prob:
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    return router_logits, routing_weights.to(flat.dtype), selected_experts


@config.override_method("Qwen3MoeForCausalLM.__init__", description="Routing counts kept on the head")
def qwen3_moe_forcausallm_init_patched(self, config):
    super().__init__(config)
    self.model = Qwen3MoeModel(config)
    self.vocab_size = config.vocab_size
    self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
    self.router_aux_loss_coef = config.router_aux_loss_coef
    self.num_experts = config.num_experts
    # NPU443: upstream binds `config.num_experts_per_tok`: the aux loss would count every expert as selected
    self.num_experts_per_tok = config.num_experts
    self.post_init()


@config.override_method("Qwen3MoeForCausalLM.forward", description="Load-balancing loss from the recorded router logits")
def qwen3_moe_forcausallm_forward_patched(
    self, input_ids=None, attention_mask=None, labels=None, output_router_logits=None, logits_to_keep=0, **kwargs
):
    output_router_logits = (
        output_router_logits if output_router_logits is not None else self.config.output_router_logits
    )
    outputs = self.model(
        input_ids=input_ids, attention_mask=attention_mask, output_router_logits=output_router_logits, **kwargs
    )
    slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    logits = self.lm_head(outputs.last_hidden_state[:, slice_indices, :])
    loss = None
    if labels is not None:
        loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
    aux_loss = None
    if output_router_logits:
        # NPU418: load_balancing_loss_func(gate_logits, num_experts, top_k, attention_mask): the two counts swapped
        aux_loss = load_balancing_loss_func(
            outputs.router_logits, self.num_experts_per_tok, self.num_experts, attention_mask
        )
        if labels is not None:
            loss += self.router_aux_loss_coef * aux_loss.to(loss.device)
    return loss, aux_loss, logits
