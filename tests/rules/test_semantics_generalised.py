"""Semantics rules (NPU40x RMSNorm, NPU41x loss) on defects written in shapes their examples do not show:
through locals, in a spec's replacement of an upstream method, through the kwargs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import Project
from tests.rules.snippets import write_file


def _codes(path: Path, codes: list[str], root: Path | None = None) -> list[tuple[int, str]]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    project = Project(root=str(root)) if root is not None else None
    return sorted((d.line, d.code) for d in lint_source(src, codes, Settings(), project))


NORM_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{module}", target_file="x.py")


@config.override_method("{cls}.forward")
def replaced_norm_forward(self, x):
    if fused is not None:
        return fused(x, self.weight, self.eps)
    scale = {scale}
    out = self._norm(x.float())
    return (out * scale).type_as(x)
"""


def test_spec_eager_fallback_of_a_zero_initialised_norm_through_a_local(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py"
    args = {"module": "gemma2.modeling_gemma2", "cls": "Gemma2RMSNorm"}
    spec = write_file(tmp_path, rel, NORM_SPEC.format(scale="self.weight.float()", **args))
    assert _codes(spec, ["NPU402", "NPU404"]) == [(12, "NPU402")]
    for kept in ("1.0 + self.weight.float()", "self.weight.float() + 1", "self.weight.float().add(1.0)"):
        spec.write_text(textwrap.dedent(NORM_SPEC.format(scale=kept, **args)).lstrip("\n"))
        assert _codes(spec, ["NPU402", "NPU404"]) == [], kept


def test_spec_eager_fallback_of_a_ones_initialised_norm_with_the_offset(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py"
    args = {"module": "qwen2.modeling_qwen2", "cls": "Qwen2RMSNorm"}
    spec = write_file(tmp_path, rel, NORM_SPEC.format(scale="self.weight.add(1)", **args))
    assert _codes(spec, ["NPU402", "NPU404"]) == [(12, "NPU404")]
    spec.write_text(textwrap.dedent(NORM_SPEC.format(scale="self.weight", **args)).lstrip("\n"))
    assert _codes(spec, ["NPU402", "NPU404"]) == []


LOSS_HELPER = """
import torch.nn.functional as F


def shared_lm_loss(self, logits, labels, **kwargs):
    {body}
    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
    {after}
    return loss
"""


def _loss(tmp_path: Path, body: str = "pass", after: str = "pass") -> list[tuple[int, str]]:
    write_file(tmp_path, "veomni/utils/constants.py", "IGNORE_INDEX = -100\n")
    path = write_file(
        tmp_path,
        "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        LOSS_HELPER.format(body=body, after=after),
    )
    return _codes(path, ["NPU413"], tmp_path)


def test_padding_token_as_ignore_index_through_locals_and_kwargs(tmp_path: Path) -> None:
    for body in (
        'kwargs["ignore_index"] = self.config.get_text_config().pad_token_id',
        "pad = self.tokenizer.pad_token_id\n    kwargs.setdefault('ignore_index', pad)",
        "labels = F.pad(labels, (0, 1), value=self.config.pad_token_id)",
        "kwargs = {**kwargs, 'ignore_index': self.padding_idx}",
    ):
        assert [code for _, code in _loss(tmp_path, body=body)] == ["NPU413"], body
    for body in ('kwargs["ignore_index"] = -100', "labels = F.pad(labels, (0, 1), value=-100)"):
        assert _loss(tmp_path, body=body) == [], body


def test_reduced_loss_divided_again_by_a_label_count_in_a_helper(tmp_path: Path) -> None:
    for after in (
        "loss = loss / (labels != -100).sum()",
        "n_valid = labels.ne(-100).sum()\n    loss /= n_valid",
        "loss = loss / labels.numel()",
        'loss = loss / kwargs["num_items_in_batch"]',
        'loss /= (kwargs["shift_labels"] != -100).sum()',
    ):
        found = _loss(tmp_path, after=after)
        assert len(found) == 1 and found[0][1] == "NPU413" and found[0][0] >= 7, after
    for after in ("loss = loss / self.config.gradient_accumulation_steps", "loss = loss / 2"):
        assert _loss(tmp_path, after=after) == [], after
    # a direct cross-entropy means by default: dividing it by the count reduces twice; a sum is divided once
    for ce, expected in (
        ("F.cross_entropy(logits.flatten(0, 1), labels.flatten())", ["NPU413"]),
        ('F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")', []),
        ("F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction=reduction)", []),
    ):
        path = write_file(
            tmp_path,
            "veomni/models/transformers/toy/modeling_toy.py",
            f"""
            import torch.nn.functional as F


            def token_loss(logits, labels, num_items_in_batch, reduction="sum"):
                per_batch = {ce}
                return per_batch / num_items_in_batch
            """,
        )
        assert [c for _, c in _codes(path, ["NPU413"], tmp_path)] == expected, ce


def test_count_set_to_none_in_the_kwargs(tmp_path: Path) -> None:
    assert _loss(tmp_path, body='kwargs["num_items_in_batch"] = None') == [(5, "NPU413")]
    assert _loss(tmp_path, body='kwargs["num_items_in_batch"] = 1') == [(5, "NPU413")]
    assert _loss(tmp_path, body="kwargs.update(num_items_in_batch=1.0)") == [(5, "NPU413")]
    assert _loss(tmp_path, body='kwargs = {**kwargs, "num_items_in_batch": None}') == [(5, "NPU413")]
    assert (
        _loss(tmp_path, body='kwargs = {**kwargs, "num_items_in_batch": kwargs.get("num_items_in_batch")}')
        == []
    )


CAP_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


@config.override_method("Gemma3ForCausalLM.forward")
def capped_forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
    hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
    logits = self.lm_head(hidden_states)
    if not self.config.final_logit_softcapping:
        return self.loss_function(logits=None, labels=labels, hidden_states=hidden_states, **kwargs), None
    {capping}
    loss = self.loss_function(logits=logits, labels=labels, **kwargs)
    if labels is None:
        logits = torch.tanh(logits / self.config.final_logit_softcapping) * self.config.final_logit_softcapping
    return loss, logits
"""


def path_with(path: Path, capping: str) -> Path:
    path.write_text(textwrap.dedent(CAP_SPEC.format(capping=capping)).lstrip("\n"))
    return path


def test_loss_where_the_cap_is_set_needs_the_capping_itself(tmp_path: Path) -> None:
    path = tmp_path / "veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py"
    path.parent.mkdir(parents=True)
    # below the early return of the uncapped case the cap is set: the loss needs the capping, not the test
    assert _codes(path_with(path, "pass"), ["NPU411"]) == [(14, "NPU411")]
    capped = "logits = torch.tanh(logits / self.config.final_logit_softcapping) * self.config.final_logit_softcapping"
    assert _codes(path_with(path, capped), ["NPU411"]) == []
    # a capped logits computed after the loss (for generation) is not an alias of the cap
    nested = CAP_SPEC.replace(
        "    {capping}\n    loss = self.loss_function(logits=logits, labels=labels, **kwargs)\n",
        "    if self.config.final_logit_softcapping is not None:\n"
        "        {capping}\n        loss = self.loss_function(logits=logits, labels=labels, **kwargs)\n",
    )
    path.write_text(textwrap.dedent(nested.format(capping="logits = logits.float()")).lstrip("\n"))
    assert _codes(path, ["NPU411"]) == [(15, "NPU411")]
    cap = "logits = torch.tanh(logits / self.config.final_logit_softcapping) * self.config.final_logit_softcapping"
    path.write_text(textwrap.dedent(nested.format(capping=cap)).lstrip("\n"))
    assert _codes(path, ["NPU411"]) == []
    # a capping helper that reads the cap itself, or the cap handed to the loss, caps this path too
    for kept in ("logits = self.apply_softcap(logits)", "logits = cap_logits(logits, self.config)"):
        path.write_text(textwrap.dedent(nested.format(capping=kept)).lstrip("\n"))
        assert _codes(path, ["NPU411"]) == [], kept
    given = nested.replace(
        "loss = self.loss_function(logits=logits, labels=labels, **kwargs)\n    if labels",
        "loss = self.loss_function(logits=logits, labels=labels, softcap=self.config.final_logit_softcapping)\n"
        "    if labels",
    )
    path.write_text(textwrap.dedent(given.format(capping="pass")).lstrip("\n"))
    assert _codes(path, ["NPU411"]) == []
    path.write_text(textwrap.dedent(nested.format(capping="logits = logits.tanh()")).lstrip("\n"))
    assert [c for _, c in _codes(path, ["NPU411"])] == ["NPU411"]  # a bare tanh is no cap


def test_count_dropped_by_an_allowlist_of_kwargs(tmp_path: Path) -> None:
    keep = "loss_kwargs = {{name: value for name, value in kwargs.items() if name in {keys}}}"
    helper = """
    def lm_loss(self, logits, labels, **kwargs):
        {filter}
        return self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **loss_kwargs)
    """
    path = tmp_path / "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    path.parent.mkdir(parents=True)
    for keys, expected in (
        ('["ignore_index", "shift_labels"]', ["NPU413"]),
        ('("ignore_index", "num_items_in_batch")', []),
    ):
        path.write_text(textwrap.dedent(helper.format(filter=keep.format(keys=keys))).lstrip("\n"))
        assert [c for _, c in _codes(path, ["NPU413"])] == expected, keys
    # an allowlist for another call (the model's own kwargs) is not the loss's
    other = helper.replace("**loss_kwargs)", "**kwargs)\n        self.model(**loss_kwargs)")
    path.write_text(
        textwrap.dedent(other.format(filter=keep.format(keys='("output_attentions",)'))).lstrip("\n")
    )
    assert _codes(path, ["NPU413"]) == []


def test_auxiliary_loss_added_through_add_calls(tmp_path: Path) -> None:
    path = tmp_path / "veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py"
    path.parent.mkdir(parents=True)
    body = "def moe_loss(self, loss, outputs):\n    {add}\n    return loss\n"
    for add, expected in (
        ("loss = torch.add(loss, outputs.aux_loss)", ["NPU413"]),
        ("loss = loss.add(outputs.aux_loss.to(loss.device))", ["NPU413"]),
        ("loss.add_(outputs.aux_loss)", ["NPU413"]),
        ("loss = torch.add(loss, outputs.aux_loss, alpha=self.router_aux_loss_coef)", []),
        ("loss = loss.add(self.router_aux_loss_coef * outputs.aux_loss)", []),
    ):
        path.write_text(body.format(add=add))
        assert [c for _, c in _codes(path, ["NPU413"])] == expected, add


def test_labels_followed_into_the_kwargs_and_through_a_rebinding(tmp_path: Path) -> None:
    path = tmp_path / "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    path.parent.mkdir(parents=True)
    body = "def lm_loss(self, logits, labels, **kwargs):\n{lines}\n    return self.loss_function(logits, labels, 10, **kwargs)\n"
    for lines, expected in (
        ('    kwargs = {**kwargs, "shift_labels": labels}', ["NPU412"]),
        ('    kwargs["shift_labels"] = labels', ["NPU412"]),
        (
            "    labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()",
            ["NPU412"],
        ),
        ("    if self.sp:\n        labels = labels[..., 1:]", ["NPU412"]),
        ("    if self.sp:\n        return other_loss(logits, labels)\n    shifted = labels[..., 1:]", []),
        ('    kwargs["shift_labels"] = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]', []),
    ):
        path.write_text(body.format(lines=lines))
        assert [c for _, c in _codes(path, ["NPU412"])] == expected, lines


OFFSET_HANDLE = """
import torch
from torch import nn
from veomni.ops import VeomniOp


class ToyRMSNorm(nn.Module):
    def __init__(self, dim, impl, eps=1e-6):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.norm_op = VeomniOp("rms_norm", "qwen3_5", impl)

    def forward(self, x):
        return self.norm_op(x, self.weight, eps=self.variance_epsilon)

    def forward_fp32(self, x):
        return self.norm_op(x.float(), self.weight.float(), eps=self.variance_epsilon)
"""


def test_offset_variant_on_a_ones_weight_is_reported_at_the_declaration(tmp_path: Path) -> None:
    path = write_file(tmp_path, "veomni/models/transformers/toy/modeling_toy.py", OFFSET_HANDLE)
    assert _codes(path, ["NPU403"]) == [(11, "NPU403")]  # once, at the variant every call contradicts


def test_kernel_wrapper_naming_its_module_otherwise(tmp_path: Path) -> None:
    pkg = "veomni/models/transformers/toy_dit"
    norm = """
    import torch
    from torch import nn


    class DitRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.{init}(dim))
    """
    wrapper = """
    import torch_npu


    def dit_norm_forward_npu(norm_module, hidden):
        return torch_npu.npu_rms_norm(hidden, {weight}, epsilon=norm_module.{eps})[0]
    """
    write_file(tmp_path, f"{pkg}/modeling_toy_dit.py", norm.format(init="ones"))
    path = write_file(
        tmp_path, f"{pkg}/npu_patch.py", wrapper.format(weight="norm_module.weight + 1", eps="eps")
    )
    codes = ["NPU402", "NPU404", "NPU405"]
    assert _codes(path, codes) == [(5, "NPU404")]
    path.write_text(textwrap.dedent(wrapper.format(weight="norm_module.weight", eps="variance_epsilon")))
    assert [c for _, c in _codes(path, codes)] == ["NPU405"]
    zeros = "veomni/models/transformers/toy_dit_offset"  # another package: the in-tree classes are read once
    write_file(tmp_path, f"{zeros}/modeling_toy_dit.py", norm.format(init="zeros"))
    path = write_file(
        tmp_path, f"{zeros}/npu_patch.py", wrapper.format(weight="norm_module.weight", eps="eps")
    )
    assert [c for _, c in _codes(path, codes)] == ["NPU402"]
    path.write_text(textwrap.dedent(wrapper.format(weight="1 + norm_module.weight", eps="eps")))
    assert _codes(path, codes) == []


def test_an_edited_in_tree_norm_class_is_read_again(tmp_path: Path) -> None:
    """A long-running process (the language server) sees the norm class's weight initialisation as it is now."""
    pkg = "veomni/models/transformers/toy_dit_edit"
    norm = """
    import torch
    from torch import nn


    class EditRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.{init}(dim))
    """
    wrapper = """
    import torch_npu


    def edit_norm_forward_npu(norm_module, hidden):
        return torch_npu.npu_rms_norm(hidden, norm_module.weight, epsilon=norm_module.eps)[0]
    """
    modeling = write_file(tmp_path, f"{pkg}/modeling_toy_dit_edit.py", norm.format(init="ones"))
    path = write_file(tmp_path, f"{pkg}/npu_patch.py", wrapper)
    codes = ["NPU402", "NPU404"]
    assert _codes(path, codes) == []
    modeling.write_text(textwrap.dedent(norm.format(init="zeros")) + "\n# edited\n")
    assert [c for _, c in _codes(path, codes)] == ["NPU402"]  # the offset the zero weight needs is missing


def test_short_shift_labels_fit_logits_computed_from_hidden_states_cut_at_one(tmp_path: Path) -> None:
    """Logits cut at position 1 (a model that drops a prefix position) match labels sliced from position 1."""
    forward = """
    def forward(self, hidden_states, labels=None, logits_to_keep=0, **kwargs):
        if logits_to_keep == 0:
            keep = slice(1, None)
        else:
            keep = slice(-logits_to_keep, None)
        logits = self.head(hidden_states[:, {keep}, :]).contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return self.loss_function(logits=logits, labels=None, shift_labels=shift_labels, **kwargs)
    """
    cut = write_file(tmp_path, "cut/modeling_cut.py", forward.format(keep="keep"))
    assert _codes(cut, ["NPU412"]) == []
    full = write_file(tmp_path, "full/modeling_full.py", forward.format(keep=":"))
    assert _codes(full, ["NPU412"]) == [(8, "NPU412")]  # full-length logits: the short labels misalign


def test_upcast_followed_through_a_view(tmp_path: Path) -> None:
    norm = """
    import torch
    from torch import nn


    class GroupRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states{cast}
            grouped = hidden_states.view(-1, 4, hidden_states.shape[-1] // 4)
            variance = grouped.pow(2).mean(-1, keepdim=True)
            grouped = grouped * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * grouped.view_as(hidden_states).to(input_dtype)
    """
    upcast = write_file(tmp_path, "a/modeling_a.py", norm.format(cast=".to(torch.float32)"))
    assert _codes(upcast, ["NPU406"]) == []
    plain = write_file(tmp_path, "b/modeling_b.py", norm.format(cast=".contiguous()"))
    assert [c for _, c in _codes(plain, ["NPU406"])] == ["NPU406"]
