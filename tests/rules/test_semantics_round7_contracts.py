"""Round-7 semantics contracts, each checked on variants another engineer would write (other names, helpers,
keyword vs positional, trainer vs model vs kernel): label padding is the ignore index (NPU424), a combined loss
is handed on (NPU425), per-micro-batch weights come from the micro-batch (NPU426), the two branches of a loss
dispatch get the same inputs (NPU427), a weighted RMSNorm's kernel branch keeps the weight (NPU433), and the
widened NPU412 / NPU414 / NPU420 / RMSNorm-site checks. Own code throughout."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(path: str, code: str, rule: str) -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(code).lstrip()), [rule], Settings())


# -- NPU424 label padding -------------------------------------------------------------------------------------

_TABLE = """
from dataclasses import dataclass

from veomni.utils.constants import IGNORE_INDEX


@dataclass
class SliceSpec:
    dim: int
    pad_value: int
    split: bool = True


SPECS = {{
    "input_ids": SliceSpec(-1, 0),
    "labels": SliceSpec(-1, {value}),
}}
"""


@pytest.mark.parametrize("value", ["0", "-1", "tokenizer.pad_token_id"])
def test_pad_table_with_a_token_id_for_labels(value: str) -> None:
    diags = _lint("veomni/data/packing.py", _TABLE.format(value=value), "NPU424")
    assert len(diags) == 1 and diags[0].line == 15 and "`IGNORE_INDEX` (-100)" in diags[0].message


@pytest.mark.parametrize("value", ["IGNORE_INDEX", "-100", "None"])
def test_pad_table_with_the_ignore_index_is_quiet(value: str) -> None:
    assert _lint("veomni/data/packing.py", _TABLE.format(value=value), "NPU424") == []


def test_pad_record_assigned_under_a_label_key_by_keyword() -> None:
    code = """
    IGNORE_INDEX = -100


    class Collator:
        def __init__(self, tokenizer):
            self.infos = {}
            self.infos["shift_labels"] = PadInfo(sp_pad_value=tokenizer.pad_token_id, sp_slice=True)
            self.infos["input_ids"] = PadInfo(sp_pad_value=tokenizer.pad_token_id, sp_slice=True)
    """
    diags = _lint("veomni/data/collate_sp.py", code, "NPU424")
    assert len(diags) == 1 and diags[0].line == 7


def test_pad_sequence_default_and_full_into_labels() -> None:
    code = """
    import torch
    from torch.nn.utils.rnn import pad_sequence

    from veomni.utils.constants import IGNORE_INDEX


    def bucket(features, width):
        target_labels = pad_sequence([f["labels"] for f in features], True)
        extra = {"labels": torch.full((len(features), width), 0)}
        labels = torch.full_like(target_labels, IGNORE_INDEX)
        return target_labels, extra, labels
    """
    diags = _lint("veomni/data/bucket.py", code, "NPU424")
    assert sorted(d.line for d in diags) == [8]  # the dict's full(...) is not a store into labels


def test_label_padding_in_a_file_without_an_ignore_index_is_quiet() -> None:
    code = """
    import torch.nn.functional as F


    def pad_points(labels, n):
        return F.pad(labels, (0, n), value=-1)  # prompt-point labels, no loss
    """
    assert _lint("veomni/models/transformers/toy/points.py", code, "NPU424") == []


# -- NPU425 a combined loss dropped -----------------------------------------------------------------------------


def test_z_loss_total_never_returned_in_a_forward() -> None:
    code = """
    def toy_forward(self, input_ids, labels=None):
        out = self.model(input_ids)
        lm_loss = self.loss_function(out.logits, labels)
        loss_total = lm_loss + self.z_coef * out.z_loss
        return {"loss": lm_loss, "z_loss": out.z_loss}
    """
    diags = _lint("veomni/models/transformers/toy/modeling_toy.py", code, "NPU425")
    assert len(diags) == 1 and diags[0].line == 4 and "`loss_total`" in diags[0].message


def test_torch_add_total_in_a_helper_and_augmented_total_in_a_trainer() -> None:
    code = """
    import torch


    def combine(loss, aux_loss, coef):
        merged = torch.add(loss, aux_loss, alpha=coef)
        return loss


    def train_step(model, batch):
        out = model(**batch)
        objective = out.loss.float()
        objective -= 0.1 * out.kl_loss
        out.loss.backward()
    """
    diags = _lint("veomni/trainer/toy.py", code, "NPU425")
    assert sorted(d.line for d in diags) == [5, 12]


def test_read_returned_or_underscored_sums_are_quiet() -> None:
    code = """
    def toy_forward(self, labels, aux_loss):
        loss = self.loss_function(labels)
        total = loss + self.coef * aux_loss
        _debug_loss = loss + 1
        self.log(total)
        running = 0.0
        running += loss.item()
        final_loss = loss
        final_loss += aux_loss  # in place on `loss` (transformers' moshi): the returned loss carries the sum
        return loss, [running]
    """
    assert _lint("veomni/models/transformers/toy/modeling_toy.py", code, "NPU425") == []


# -- NPU426 per-micro-batch weight -----------------------------------------------------------------------------


def test_attribute_weight_from_the_whole_list_by_keyword() -> None:
    code = """
    class Trainer:
        def step(self, mbs):
            for idx, mb in enumerate(self.mbs):
                self.mb_tokens = self.counter(batches=self.mbs)
                loss = self.model(**mb).loss
            return loss
    """
    diags = _lint("veomni/trainer/toy.py", code, "NPU426")
    assert len(diags) == 1 and diags[0].line == 4 and "`self.mbs`" in diags[0].message


def test_item_counted_or_whole_list_stored_under_its_own_name_is_quiet() -> None:
    code = """
    def step(model, micro_batches, count):
        for micro_batch in micro_batches:
            micro_batch_tokens = count(micro_batch)
            micro_batches_tokens = count(micro_batches)
            loss = model(**micro_batch).loss * micro_batch_tokens / micro_batches_tokens
        return loss
    """
    assert _lint("veomni/trainer/toy.py", code, "NPU426") == []


# -- NPU427 loss dispatch branches -------------------------------------------------------------------------------

_DISPATCH = """
def toy_forward(self, hidden_states, labels, **kwargs):
    if {test}:
        loss, logits, aux = self.kernel_loss(
            logits=None, labels=labels, hidden_states=hidden_states, weights=self.lm_head.weight, **kwargs
        )
    else:
        logits = self.lm_head(hidden_states)
        loss, _, aux = self.loss_function(logits=logits, labels=labels, {extra}**kwargs)
    return loss, logits, aux
"""


def test_eager_branch_missing_the_head_inputs() -> None:
    code = _DISPATCH.format(test="self.kernel_loss.use_non_eager_impl", extra="")
    diags = _lint("veomni/models/transformers/toy/toy_gpu_patch_gen_config.py", code, "NPU427")
    assert len(diags) == 1 and diags[0].line == 8 and "`hidden_states=`, `weights=`" in diags[0].message


def test_same_inputs_or_a_model_condition_is_quiet() -> None:
    same = _DISPATCH.format(
        test="self.kernel_loss.use_non_eager_impl",
        extra="hidden_states=hidden_states, weights=self.lm_head.weight, ",
    )
    softcap = _DISPATCH.format(test="self.config.final_logit_softcapping is None", extra="")
    path = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    assert _lint(path, same, "NPU427") == [] and _lint(path, softcap, "NPU427") == []


def test_early_return_dispatch_with_the_kernel_missing_shift_labels() -> None:
    code = """
    def causal_loss(logits, labels, shift_labels, fused_kernel=None):
        if fused_kernel is not None:
            return fused_kernel(logits=logits, labels=labels)
        return eager_causal_loss(logits=logits, labels=labels, shift_labels=shift_labels)
    """
    diags = _lint("veomni/ops/kernels/cross_entropy/toy.py", code, "NPU427")
    assert len(diags) == 1 and diags[0].line == 3 and "`shift_labels=`" in diags[0].message


# -- NPU433 RMSNorm kernel branch without the weight --------------------------------------------------------------


def test_spec_override_passes_none_by_keyword() -> None:
    code = """
    import torch
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


    @config.override_method("LlamaRMSNorm.forward")
    def llama_rmsnorm_forward_patched(self, hidden_states):
        if self.npu_rms_kernel is not None:
            return self.npu_rms_kernel(hidden_states, weight=None, eps=self.variance_epsilon)
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states.float() * torch.rsqrt(variance + self.variance_epsilon)).to(hidden_states.dtype)
    """
    diags = _lint("veomni/models/transformers/llama/llama_npu_patch_gen_config.py", code, "NPU433")
    assert len(diags) == 1 and diags[0].line == 10 and "`self.weight`" in diags[0].message


def test_wrapper_function_with_a_module_receiver() -> None:
    code = """
    import torch_npu


    def rms_norm_forward_npu(module, x):
        if x.dim() == 3:
            return torch_npu.npu_rms_norm(x, None, epsilon=module.eps)[0]
        return torch_npu.npu_rms_norm(x, module.weight, epsilon=module.eps)[0]
    """
    diags = _lint("veomni/ops/kernels/rms_norm/toy_npu.py", code, "NPU433")
    assert len(diags) == 1 and diags[0].line == 6 and "`module.weight`" in diags[0].message


def test_unweighted_norm_or_optional_weight_is_quiet() -> None:
    code = """
    class ToyPlainRMSNorm:
        def forward(self, x):
            if self.kernel is not None:
                return self.kernel_rms(x, None, self.eps)
            return x * (x.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()


    class ToyAffineRMSNorm:
        def forward(self, x):
            if not self.elementwise_affine:
                return fused_rms(x, None, self.eps)
            return fused_rms(x, self.weight, self.eps)
    """
    assert _lint("veomni/models/transformers/toy/modeling_toy.py", code, "NPU433") == []


# -- NPU412 predictions and labels cut on the same side -----------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "states", "bad"),
    [
        ("labels[:, 1:]", "logits[:, 1:, :]", True),
        ("labels[..., :-1]", "hidden[..., :-1, :]", True),
        ("labels[..., :-1]", "hidden[:, 1:]", True),
        ("labels[:, 1:]", "logits[:, :-1]", False),
    ],
)
def test_states_and_labels_cut_in_one_block(labels: str, states: str, bad: bool) -> None:
    target = "logits" if states.startswith("logits") else "hidden"
    code = f"""
    import torch.nn.functional as F


    def token_loss(hidden, logits, labels, head):
        if labels is not None:
            labels = {labels}.contiguous()
            {target} = {states}.contiguous()
        return F.cross_entropy(head(hidden).flatten(0, 1), labels.flatten())
    """
    diags = _lint("veomni/ops/kernels/cross_entropy/toy.py", code, "NPU412")
    assert bool(diags) == bad
    if bad:  # on the states' cut (a label cut at the end is also reported on its own line)
        assert any(d.line == 7 for d in diags)


# -- NPU420 the product of two token sums divided once -------------------------------------------------------------

_LB = """
import torch
import torch.nn.functional as F


def balance_loss(router_logits, n_experts, k):
    probs = torch.softmax(router_logits.float(), dim=-1)
    _, chosen = torch.topk(probs, k, dim=-1)
    counts = torch.zeros(n_experts)
    counts.index_add_(0, chosen.flatten(), torch.ones(chosen.numel()))
    prob_totals = probs.sum(dim=0)
    n_tokens = router_logits.shape[0]
    {denominator}
    return torch.sum(counts * prob_totals) * n_experts / denom
"""


@pytest.mark.parametrize(
    ("denominator", "bad"),
    [("denom = n_tokens", True), ("denom = n_tokens * n_tokens", False), ("denom = n_tokens**2", False)],
)
def test_product_of_sums_normalised_by_the_token_count(denominator: str, bad: bool) -> None:
    diags = _lint("veomni/ops/kernels/toy_balance.py", _LB.format(denominator=denominator), "NPU420")
    assert bool(diags) == bad
    if bad:
        assert "`n_tokens`" in diags[0].message and diags[0].line == 13


# -- NPU414 the logits_to_keep slice on a plain subscript -----------------------------------------------------------

_KEEP = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


@config.override_method("LlamaForCausalLM.forward")
def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
    hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
    keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    logits = self.lm_head(hidden_states[{index}])
    loss = None
    if labels is not None:
        loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
    return loss, logits
"""


@pytest.mark.parametrize(
    ("index", "bad"), [("keep", True), ("keep, :", True), ("..., keep, :", False), (":, keep", False)]
)
def test_keep_slice_axis(index: str, bad: bool) -> None:
    diags = _lint(
        "veomni/models/transformers/llama/llama_gpu_patch_gen_config.py", _KEEP.format(index=index), "NPU414"
    )
    assert bool(diags) == bad


# -- RMSNorm sites: a class defined inside a function ----------------------------------------------------------------


def test_nested_wrapper_rmsnorm_eps_after_root() -> None:
    code = """
    import torch


    def enable_low_memory(model):
        class LowMemRMSNorm(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                ms = x.float().pow(2).mean(-1, keepdim=True)
                return x / (ms.sqrt() + self.inner.eps) * self.inner.weight

        return LowMemRMSNorm
    """
    diags = _lint("veomni/models/transformers/toy/modeling_toy.py", code, "NPU408")
    assert len(diags) == 1 and diags[0].line == 12


def test_unweighted_handle_called_without_any_weight_in_a_weighted_norm() -> None:
    code = """
    import torch
    from veomni.ops import VeomniOp


    class ToyNorm(torch.nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(dim))
            self.eps = eps
            self.rms_kernel = VeomniOp("rms_norm", "unweighted", "npu")

        def forward(self, x):
            if self.rms_kernel.is_bound:
                return self.rms_kernel(x, eps=self.eps)
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
    """
    diags = _lint("veomni/models_kernel/transformers/toy/modeling_toy.py", code, "NPU433")
    assert len(diags) == 1 and diags[0].line == 14 and '"unweighted"' in diags[0].message


# -- NPU406: a generated copy scales the weight in another precision than its spec ----------------------------------

_SPEC_FP32 = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.llama.modeling_llama", target_file="patched_modeling_llama_npu.py"
)


@config.override_method("LlamaRMSNorm.forward")
def llama_rmsnorm_forward_fp32_patched(self, hidden_states):
    dtype = hidden_states.dtype
    h = hidden_states.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return (self.weight.float() * h).to(dtype)
"""

_GENERATED = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#  Source: transformers.models.llama.modeling_llama
#  Patches applied:
#    - method_override: LlamaRMSNorm.forward
import torch
from torch import nn


# ======================================================================
# [MODIFIED CLASS] LlamaRMSNorm
# Methods patched: forward
# ======================================================================


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return {result}
"""


@pytest.mark.parametrize(
    ("result", "bad"), [("self.weight * h.to(dtype)", True), ("(self.weight.float() * h).to(dtype)", False)]
)
def test_generated_copy_scales_like_its_spec(tmp_path, result: str, bad: bool) -> None:
    pkg = tmp_path / "veomni" / "models" / "transformers" / "llama"
    (pkg / "generated").mkdir(parents=True)
    (pkg / "llama_npu_patch_gen_config.py").write_text(_SPEC_FP32.lstrip())
    gen = pkg / "generated" / "patched_modeling_llama_npu.py"
    gen.write_text(_GENERATED.lstrip().format(result=result))
    diags = lint_source(SourceFile.from_text(str(gen), gen.read_text()), ["NPU406"], Settings())
    assert bool(diags) == bad
    if bad:
        assert diags[0].line == 27 and "`llama_rmsnorm_forward_fp32_patched`" in diags[0].message


def test_default_ignore_index_or_loss_modules_are_not_compared() -> None:
    code = """
    import torch


    def toy_loss(self, hidden_states, labels, logits):
        if self.use_fused_kernel:
            loss = self.fused_loss(hidden_states=hidden_states, weights=self.head.weight, labels=labels)
        else:
            loss = self.loss_function(hidden_states=hidden_states, weights=self.head.weight, labels=labels, ignore_index=-100)
        if self.use_fused_kernel:
            fn = FusedLinearCrossEntropyLoss(reduction="mean")
        else:
            fn = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")
        return loss, fn
    """
    assert _lint("veomni/models/seed_omni/toy/modeling_toy.py", code, "NPU427") == []
