"""NPU726 on M-RoPE ids cut to one row in shapes past the direct `get_rope_index(...)[0]`: a callable parameter
`functools.partial` binds to the position-id function (VeOmni's `get_position_id(main_func, self, **kw)`), the
ids taken out of its dict result (`position_id_func(...)["position_ids"]`), a cut after row-keeping calls
(`.squeeze(1)[0]`, `.clone()[0]`), `.select(0, k)`, `.narrow(0, k, 1)` and a one-row slice (`[:1]`), in a spec,
a data transform and a seed_omni foundation; the batch axis squeezed, `[:, 0]`, and the rows after the text row
stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU726"], Settings()) if d.code == "NPU726")


SPEC = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
DATA = "veomni/data/multimodal/toy_transform.py"
SEED = "veomni/models/seed_omni/foundation/toy_foundation/modeling_toy_foundation.py"

PARTIAL = """
from functools import partial


def get_positions(rope_fn, model, **kwargs):
    ids, deltas = rope_fn(model, **kwargs)
    return {{"position_ids": {cut}, "rope_deltas": deltas.squeeze(0)}}


def get_position_id_func(self):
    return partial(get_positions, Glm4vModel.get_rope_index, self)
"""


def test_partial_bound_position_function_cut_after_squeeze() -> None:
    for cut in ("ids.squeeze(1)[0]", "ids.select(0, 0)", "ids.squeeze(1).clone()[:1]", "ids.narrow(0, 0, 1)"):
        assert _lines(PARTIAL.format(cut=cut), SPEC) == [6], cut
    for keep in ("ids.squeeze(1)", "ids[:, 0]", "ids.clone()"):
        assert _lines(PARTIAL.format(cut=keep), SPEC) == [], keep


def test_partial_bound_inside_the_enclosing_function() -> None:
    text = """
    from functools import partial


    def get_position_id_func(self):
        def per_sample(main_func, fake_self, **kwargs):
            position_ids, rope_deltas = main_func(fake_self, **kwargs)
            return {"position_ids": position_ids.squeeze(1)[2]}

        return partial(per_sample, Toy3VLModel.get_rope_index, self)
    """
    assert _lines(text, SPEC) == [7]
    # a callable parameter the file never binds to a position-id function is not judged
    other = text.replace("Toy3VLModel.get_rope_index", "Toy3VLModel.get_placeholder_mask")
    assert _lines(other, SPEC) == []


def test_ids_taken_out_of_the_dict_result() -> None:
    text = """
    def process_sample(sample, processor, position_id_func, **kwargs):
        inputs = processor(text=sample["text"], images=sample["images"], return_tensors="pt")
        position_ids = position_id_func(input_ids=inputs["input_ids"].unsqueeze(0), **kwargs)["position_ids"]
        inputs["position_ids"] = {cut}
        return [inputs]
    """
    assert _lines(text.format(cut="position_ids.squeeze(1)[0]"), DATA) == [4]
    assert _lines(text.format(cut="position_ids.select(0, 0).clone()"), DATA) == [4]
    assert _lines(text.format(cut="position_ids.squeeze(1)"), DATA) == []


def test_seed_omni_generation_ids_keep_their_rows() -> None:
    text = """
    def get_generation_position_id(self, fake_input_ids, grid, attention_mask):
        position_ids, rope_deltas = self.get_rope_index(fake_input_ids, grid, attention_mask)
        position_ids = {cut}
        return position_ids
    """
    assert _lines(text.format(cut="position_ids[:, :, 1:] - 1"), SEED) == []
    assert _lines(text.format(cut="position_ids.contiguous()[0, :, 1:] - 1"), SEED) == [3]


ROTARY_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{module}", target_file="x.py")


@config.override_method("{cls}.forward")
def text_model_forward(self, inputs_embeds, position_ids=None, attention_mask=None):
    if position_ids.ndim == 3 and position_ids.shape[0] == 4:
        text_position_ids = position_ids[0]
        {rows}
    hidden_states = inputs_embeds
    position_embeddings = self.rotary_emb(hidden_states, position_ids)
    return hidden_states, position_embeddings, text_position_ids
"""


def test_rotary_of_an_mrope_model_handed_one_row() -> None:
    qwen = {"module": "qwen2_vl.modeling_qwen2_vl", "cls": "Qwen2VLTextModel"}
    glm = {"module": "glm4v.modeling_glm4v", "cls": "Glm4vTextModel"}
    llama = {"module": "llama.modeling_llama", "cls": "LlamaModel"}
    path = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    for args in (qwen, glm):
        assert _lines(ROTARY_SPEC.format(rows="position_ids = position_ids[1]", **args), path) == [10]
        assert _lines(ROTARY_SPEC.format(rows="position_ids = position_ids.select(0, 1)", **args), path) == [
            10
        ]
        assert _lines(ROTARY_SPEC.format(rows="position_ids = position_ids[1:]", **args), path) == []
    # a 1-D rotary (no M-RoPE upstream) may be handed one row
    assert _lines(ROTARY_SPEC.format(rows="position_ids = position_ids[1]", **llama), path) == []


def test_in_tree_mrope_rotary_and_rope_type_branches() -> None:
    text = """
    class ToyOmniTextModel:
        def __init__(self, config):
            self.mrope_section = config.rope_scaling["mrope_section"]

        def forward(self, hidden, position_ids):
            {body}
    """
    path = "veomni/models/seed_omni/foundation/toy_omni/modeling_toy_omni.py"
    cut = "return self.rotary_emb(hidden, position_ids.squeeze(1)[0])"
    assert _lines(text.format(body=cut), path) == [6]
    branch = (
        "if self.config.rope_type == '3d_rope':\n"
        "                return self.rotary_emb(hidden, position_ids)\n"
        "            return self.rotary_emb(hidden, position_ids[0])"
    )
    assert _lines(text.format(body=branch), path) == []
