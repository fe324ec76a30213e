"""Round 11 normalisers (npu_lint/veomni/losspath.py "Normalisers") and RMSNorm weight initialisation
(npu_lint/veomni/norms.py ``weight_init_faults``): the lines each contract is reported at, and correct variants
that stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


DIFFUSION = "veomni/models/diffusers/toy/modeling_toy.py"

FLOW_LOSS = """
import torch
import torch.nn.functional as F


def flow_loss(predictions, targets):
    per_sample_losses = []
    for prediction, target in zip(predictions, targets):
        per_sample_loss = F.mse_loss(prediction.float(), target.float(), reduction="none")
        per_sample_loss = per_sample_loss.view(per_sample_loss.shape[0], -1).sum(dim=1)
        per_sample_losses.append(per_sample_loss)
    loss = torch.stack(per_sample_losses).mean()
    return {"mse_loss": loss}
"""


def test_element_sum_of_a_regression_loss() -> None:
    assert _lines("NPU440", FLOW_LOSS, DIFFUSION) == [9]
    assert _lines("NPU440", FLOW_LOSS.replace(".sum(dim=1)", ".mean(dim=1)"), DIFFUSION) == []


def test_element_sum_divided_later_is_quiet() -> None:
    divided = FLOW_LOSS.replace(
        "    loss = torch.stack(per_sample_losses).mean()",
        "    loss = torch.stack(per_sample_losses).mean() / predictions[0][0].numel()",
    )
    assert _lines("NPU440", divided, DIFFUSION) == []
    # a sum handed back with its count: the caller divides
    handed = """
    def token_loss(err, mask):
        per_token_loss = (err * mask) ** 2
        loss_sum = per_token_loss.sum()
        return loss_sum, mask.sum()
    """
    assert _lines("NPU440", handed.replace("mask.sum()", "num_tokens"), DIFFUSION) == []


SQUARED = """
def latent_loss(pred, target):
    per_element_loss = (pred - target).pow(2)
    loss = per_element_loss.sum()
    return loss
"""


def test_squared_error_summed() -> None:
    assert _lines("NPU440", SQUARED, DIFFUSION) == [3]
    assert _lines("NPU440", SQUARED.replace(".sum()", ".mean()"), DIFFUSION) == []
    # a squared difference that is not a loss (a variance) is not read
    assert (
        _lines(
            "NPU440", SQUARED.replace("per_element_loss", "spread").replace("loss = ", "total = "), DIFFUSION
        )
        == []
    )


PAIRS = """
class Trainer:
    def preference_loss(self, chosen, rejected):
        return -(chosen - rejected), chosen, rejected

    def step(self, chosen, rejected, outputs):
        losses, chosen_rewards, rejected_rewards = self.preference_loss(chosen, rejected)
        loss = losses.sum()
        outputs.loss = loss
        return outputs
"""


def test_pair_losses_summed() -> None:
    path = "veomni/trainer/toy_preference_trainer.py"
    assert _lines("NPU440", PAIRS, path) == [7]
    assert _lines("NPU440", PAIRS.replace("losses.sum()", "losses.mean()"), path) == []


MASKED = """
def masked_latent_loss(prediction, target, loss_mask):
    per_element_loss = (prediction - target).pow(2)
    B, C, F, H, W = prediction.shape
    mask = loss_mask.view(B, 1, F, H, W).float()
    masked_loss = per_element_loss * mask
    valid_count = mask.reshape(B, -1).sum(dim=-1).clamp(min=1e-8)
    per_sample_loss = masked_loss.reshape(B, C, -1).sum(dim=-1).mean(dim=-1) / valid_count
    return per_sample_loss.mean()
"""


def test_masked_sum_over_every_position() -> None:
    bad = MASKED.replace("mask.reshape(B, -1).sum(dim=-1).clamp(min=1e-8)", "float(F * H * W)")
    assert _lines("NPU435", bad, DIFFUSION) == [7]
    assert _lines("NPU435", MASKED, DIFFUSION) == []
    # a product of dimensions that are not the tensor's (a configured constant) is not read as a size
    other = MASKED.replace("mask.reshape(B, -1).sum(dim=-1).clamp(min=1e-8)", "float(scale)")
    assert _lines("NPU435", other, DIFFUSION) == []


CHUNKED = """
import torch


def chunk_loss(hidden_states, weights, labels, chunk_size=1024, num_items_in_batch=None, ignore_index=-100):
    chunk_labels = torch.split(labels, chunk_size, dim=1)
    num_items_in_batch = (labels != ignore_index).sum()
    loss_kwargs_chunks = [
        {"labels": chunk_labels[i], "ignore_index": ignore_index, "num_items_in_batch": num_items_in_batch}
        for i in range(len(chunk_labels))
    ]
    return ChunkLoss.apply(hidden_states, weights, loss_kwargs_chunks, chunk_size)
"""


def test_chunk_normalised_by_its_own_count() -> None:
    path = "veomni/ops/kernels/cross_entropy/chunk_loss.py"
    own = CHUNKED.replace(
        '"num_items_in_batch": num_items_in_batch}',
        '"num_items_in_batch": (chunk_labels[i] != ignore_index).sum()}',
    )
    assert 8 in _lines("NPU413", own, path)
    dropped = CHUNKED.replace(
        "num_items_in_batch = (labels != ignore_index).sum()", "num_items_in_batch = None"
    )
    assert 8 in _lines("NPU413", dropped, path)
    assert _lines("NPU413", CHUNKED, path) == []


AUX = """
def moe_forward_patched(self, loss, aux_loss, labels):
    if labels is not None:
        aux = aux_loss.to(loss.device)
        loss = loss + aux
    return loss
"""


def test_aux_loss_through_a_short_local() -> None:
    path = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    assert _lines("NPU413", AUX, path) == [4]
    scaled = AUX.replace(
        "aux = aux_loss.to(loss.device)", "aux = self.router_aux_loss_coef * aux_loss.to(loss.device)"
    )
    assert _lines("NPU413", scaled, path) == []


GEMMA_NORM = """
import torch
import torch.nn as nn


class ToyRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class ToyPreTrainedModel(nn.Module):
    def _init_weights(self, module):
        if isinstance(module, ToyRMSNorm):
            nn.init.zeros_(module.weight)
"""


def test_offset_norm_initialised_at_ones() -> None:
    path = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    assert _lines("NPU404", GEMMA_NORM, path) == []
    init_ones = GEMMA_NORM.replace("nn.init.zeros_(module.weight)", "nn.init.ones_(module.weight)")
    assert _lines("NPU404", init_ones, path) == [19]


def test_generated_offset_norm_initialised_at_ones() -> None:
    # the generated copy of Gemma 3's RMSNorm (upstream: zeros, `1 + weight`) started at ones; the forward only
    # calls the kernel, so the upstream class says what the weight starts at
    code = """
    import torch
    import torch.nn as nn


    class Gemma3RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return self.veomni_rms_norm(x, self.weight, eps=self.eps)
    """
    banner = "# Source: transformers.models.gemma3.modeling_gemma3\n"
    path = "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_npu.py"
    src = SourceFile.from_text(path, banner + textwrap.dedent(code).lstrip("\n"))
    assert [d.line for d in lint_source(src, ["NPU404"], Settings()) if d.code == "NPU404"] == [10]
    src = SourceFile.from_text(path, banner + textwrap.dedent(code).lstrip("\n").replace("ones", "zeros"))
    assert not [d for d in lint_source(src, ["NPU404"], Settings()) if d.code == "NPU404"]


def test_upstream_norm_initialised_at_zeros() -> None:
    # the generated copy of Llama's RMSNorm (upstream: ones, `weight * x`) started at zeros
    code = """
    import torch
    import torch.nn as nn


    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
    """
    banner = "# Source: transformers.models.llama.modeling_llama\n"
    path = "veomni/models/transformers/llama/generated/patched_modeling_llama_npu.py"
    src = SourceFile.from_text(path, banner + textwrap.dedent(code).lstrip("\n"))
    found = sorted(d.line for d in lint_source(src, ["NPU402"], Settings()) if d.code == "NPU402")
    assert 9 in found
    src = SourceFile.from_text(path, banner + textwrap.dedent(code).lstrip("\n").replace("zeros", "ones"))
    assert not [d for d in lint_source(src, ["NPU402"], Settings()) if d.code == "NPU402"]


BRANCH_EPS = """
import torch.nn as nn


class ToyGatedDeltaNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer_norm_epsilon = config.rms_norm_eps
        if config.use_fused_norm:
            self.norm = veomni_rms_norm_gated(self.head_v_dim, eps=self.layer_norm_epsilon, activation="silu")
        else:
            self.norm = ToyRMSNormGated(self.head_v_dim, eps=self.layer_norm_epsilon)
"""


def test_norm_branch_without_eps() -> None:
    path = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    assert _lines("NPU431", BRANCH_EPS, path) == []
    dropped = BRANCH_EPS.replace(
        "self.head_v_dim, eps=self.layer_norm_epsilon, activation", "self.head_v_dim, activation"
    )
    assert _lines("NPU431", dropped, path) == [9]
    conditional = """
    import torch.nn as nn


    class ToyGatedDeltaNet(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.norm = (
                ToyRMSNormGated(self.head_v_dim, eps=config.rms_norm_eps)
                if FusedRMSNormGated is None
                else FusedRMSNormGated(self.head_v_dim, activation="silu")
            )
    """
    assert _lines("NPU431", conditional, path) == [10]


GATED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class ToyRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate=None):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight * hidden_states.to(input_dtype)
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
        return hidden_states.to(input_dtype)
"""


def test_norm_weight_never_read() -> None:
    path = "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py"
    assert _lines("NPU433", GATED, path) == []
    dropped = GATED.replace("self.weight * hidden_states.to(input_dtype)", "hidden_states.to(input_dtype)")
    assert _lines("NPU433", dropped, path) == [17]
    # a forward that hands the module to a kernel reads the weight through it
    kernel = dropped.replace(
        "        return hidden_states.to(input_dtype)", "        return fused_norm(self, hidden_states)"
    )
    assert _lines("NPU433", kernel, path) == []


def test_gated_norm_activation_with_cast_gate() -> None:
    path = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    assert _lines("NPU432", GATED, path) == []
    swapped = GATED.replace(
        "hidden_states * F.silu(gate.to(torch.float32))", "F.silu(hidden_states) * gate.to(torch.float32)"
    )
    assert _lines("NPU432", swapped, path) == [18]


IPO = """
def ipo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = ref_chosen_logps - ref_rejected_logps
    logits = pi_logratios - ref_logratios
    losses = (logits - 1 / (2 * beta)) ** 2
    return losses
"""


def test_ipo_target_temperature_in_divisor() -> None:
    path = "veomni/trainer/toy_preference_trainer.py"
    assert _lines("NPU438", IPO, path) == []
    assert _lines("NPU438", IPO.replace("1 / (2 * beta)", "1 / 2 * beta"), path) == [5]
    assert _lines("NPU438", IPO.replace("1 / (2 * beta)", "0.5 / beta"), path) == []
