"""Semantics rules on the shapes of real VeOmni fixes, written with other names and in other places: the loss
helper's return unpacked over the projected logits (NPU416), a text-model field read with a default from the
outer config of any model (NPU415)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _codes(rel: str, text: str, codes: list[str], tmp_path: Path) -> list[tuple[int, str]]:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    return sorted((d.line, d.code) for d in lint_source(src, codes, Settings(), None))


VLM_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


@config.override_method("Qwen2VLForConditionalGeneration.forward")
def qwen2_vl_forward_patched(self, input_ids=None, labels=None, pixel_values=None, logits_to_keep=0, **kwargs):
    out = self.model(input_ids=input_ids, pixel_values=pixel_values, **kwargs)
    hs = out.last_hidden_state
    lm_logits = None
    loss = None
    with torch.autocast("cuda", enabled=False):
        if labels is None:
            lm_logits = self.lm_head(hs)
        elif head_loss.use_non_eager_impl:
            loss, lm_logits, aux = head_loss(hidden_states=hs, weights=self.lm_head.weight, labels=labels)
        else:
            lm_logits = self.lm_head(hs) / 1.0
            {unpack} = self.loss_function(lm_logits, labels, self.config.text_config.vocab_size, **kwargs)
    return loss, {returned}
"""


def test_loss_return_unpacked_over_the_projection_in_a_nested_eager_branch(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py"
    bad = VLM_SPEC.replace("{unpack}", "loss, lm_logits, aux").replace("{returned}", "lm_logits")
    assert _codes(rel, bad, ["NPU416"], tmp_path) == [(19, "NPU416")]
    # the helper's logits slot discarded: the projection is returned, as upstream does
    kept = VLM_SPEC.replace("{unpack}", "loss, _, aux").replace("{returned}", "lm_logits")
    assert _codes(rel, kept, ["NPU416"], tmp_path) == []
    # overwritten but never read again: nothing is returned from it
    unused = VLM_SPEC.replace("{unpack}", "loss, lm_logits, aux").replace("{returned}", "None")
    assert _codes(rel, unused, ["NPU416"], tmp_path) == []


LOADER = """
class Builder:
    def build(self, spec):
        built = self.factory.from_config(spec)
        {extra}
        if getattr(built.config, "{field}", True):
            built.get_output_embeddings().weight = built.get_input_embeddings().weight
        return built

    def tie_own(self):
        if getattr(self.decoder.config, "tie_word_embeddings", True):
            self.tie_weights()
"""


def test_defaulted_text_field_read_from_the_outer_config_of_a_built_model(tmp_path: Path) -> None:
    rel = "veomni/models/builders.py"
    bad = LOADER.replace("{extra}", "pass").replace("{field}", "tie_word_embeddings")
    assert _codes(rel, bad, ["NPU415"], tmp_path) == [(5, "NPU415")]
    # the text sub-config consulted in the same function: quiet
    fixed = LOADER.replace("{extra}", "inner = built.config.get_text_config(decoder=True)").replace(
        "{field}", "tie_word_embeddings"
    )
    assert _codes(rel, fixed, ["NPU415"], tmp_path) == []
    # a field every config carries (the base config defines it): quiet
    base = LOADER.replace("{extra}", "pass").replace("{field}", "model_type")
    assert _codes(rel, base, ["NPU415"], tmp_path) == []


def test_defaulted_text_field_read_through_a_helper_given_the_outer_config(tmp_path: Path) -> None:
    rel = "veomni/models/head_utils.py"
    text = """
    def _wants_shared_head(cfg):
        return bool(getattr(cfg, "tie_word_embeddings", True))


    def finalize(net):
        if _wants_shared_head(net.config):
            net.tie_weights()
    """
    assert _codes(rel, text, ["NPU415"], tmp_path) == [(2, "NPU415")]
    # the same helper given the text sub-config by its caller: quiet
    given_text = text.replace(
        "_wants_shared_head(net.config)", "_wants_shared_head(net.config.get_text_config())"
    )
    assert _codes(rel, given_text, ["NPU415"], tmp_path) == []


def test_composite_self_config_followed_into_a_module_helper(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"
    spec = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


    def _flat_logits(logits, cfg):
        return logits.reshape(-1, cfg.vocab_size)


    @config.override_method("Qwen3VLForConditionalGeneration.forward")
    def qwen3_vl_forward_patched(self, input_ids=None, labels=None, **kwargs):
        hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
        logits = self.lm_head(hidden_states)
        return _flat_logits(logits, {given})
    """
    assert _codes(rel, spec.replace("{given}", "self.config"), ["NPU415"], tmp_path) == [(7, "NPU415")]
    assert _codes(rel, spec.replace("{given}", "self.config.text_config"), ["NPU415"], tmp_path) == []


ROUTER_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.mixtral.modeling_mixtral", target_file="x.py")


@config.override_method("MixtralTopKRouter.forward")
def mixtral_router_forward_patched(self, hidden_states):
    flat = hidden_states.view(-1, hidden_states.shape[-1])
    router_logits = torch.matmul(flat, self.weight.T)
    {line}
    weights, chosen = torch.topk({picked}, self.top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return router_logits, weights, chosen
"""


def test_router_returning_probabilities_in_place_of_its_logits(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/mixtral/mixtral_gpu_patch_gen_config.py"
    bad = ROUTER_SPEC.replace(
        "{line}", "router_logits = torch.nn.functional.softmax(router_logits.float(), dim=-1)"
    )
    assert _codes(rel, bad.replace("{picked}", "router_logits"), ["NPU417"], tmp_path) == [(11, "NPU417")]
    good = ROUTER_SPEC.replace(
        "{line}", "scores = torch.nn.functional.softmax(router_logits.float(), dim=-1)"
    )
    assert _codes(rel, good.replace("{picked}", "scores"), ["NPU417"], tmp_path) == []
