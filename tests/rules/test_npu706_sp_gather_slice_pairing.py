"""NPU706: sequence-parallel gathers and slices in multimodal wrappers undone symmetrically (issue 20). Each
test is a defect in a shape of its own (other models than the dev cases, helpers, in-place fills), with the line
it must be reported at; the maintainers' unmodified files must stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.corpus import shared_tree as shared_corpus

CODE = "NPU706"
MODELS = "veomni/models/transformers"


def _lines(text: str, path: str = f"{MODELS}/toy_vl/toy_vl_gpu_patch_gen_config.py") -> list[int]:
    src = SourceFile.from_text(path, text)
    return sorted(d.line for d in lint_source(src, [CODE], Settings()) if d.code == CODE)


def _edited(rel: str, old: str, new: str) -> tuple[str, int]:
    """The corpus file ``rel`` of veomni-main with ``old`` (occurring once) replaced; the edit's first line."""
    text = (shared_corpus("veomni-main") / rel).read_text()
    assert text.count(old) == 1, rel
    return text.replace(old, new), text[: text.index(old)].count("\n") + 1


FILL = textwrap.dedent(
    """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def _shard(x, dim):
        return slice_input_tensor(x, dim, group=get_parallel_state().sp_group)


    class Wrapper:
        def embed(self, input_ids, speech):
            seq = self.embed_tokens(input_ids)
            if get_parallel_state().sp_size > 1:
                seq = gather_outputs(seq, gather_dim=1, group=get_parallel_state().sp_group)
            rows = self.speech_encoder(speech)
            if get_parallel_state().sp_size > 1:
                rows = gather_outputs(rows, gather_dim=0, group=get_parallel_state().sp_group)
            rows = rows.to(seq.device, seq.dtype)
            seq.masked_scatter_((input_ids == self.speech_id).unsqueeze(-1), rows)
            if get_parallel_state().sp_size > 1:
                seq = _shard(seq, 1)
            return self.decoder(seq)
    """
).lstrip("\n")


def test_fill_pairing_through_helper_and_in_place_scatter() -> None:
    assert _lines(FILL) == []
    # the slice back through the file's own helper dropped: reported at the SP-guarded block after the fill
    dropped = FILL.replace("            seq = _shard(seq, 1)\n", "            pass\n")
    assert _lines(dropped) == [19]
    # the media rows left rank-local: reported where they are produced
    local = FILL.replace(
        "            rows = gather_outputs(rows, gather_dim=0, group=get_parallel_state().sp_group)\n",
        "            pass\n",
    )
    assert _lines(local) == [14]
    # rows gathered along the hidden dimension
    wide = FILL.replace("gather_outputs(rows, gather_dim=0", "gather_outputs(rows, gather_dim=1")
    assert _lines(wide) == [16]
    # sliced back on another axis than the gathered one
    assert _lines(FILL.replace("seq = _shard(seq, 1)", "seq = _shard(seq, 0)")) == [20]


def test_index_assignment_fill_and_unrelated_rows() -> None:
    text = FILL.replace(
        "        seq.masked_scatter_((input_ids == self.speech_id).unsqueeze(-1), rows)\n",
        "        seq[input_ids == self.speech_id] = rows\n",
    )
    assert _lines(text) == []
    assert _lines(text.replace("            seq = _shard(seq, 1)\n", "            pass\n")) == [19]


def test_full_sequence_kernel_gather_without_fill_is_quiet() -> None:
    text = textwrap.dedent(
        """
        from veomni.distributed.parallel_state import get_parallel_state
        from veomni.distributed.sequence_parallel import gather_outputs


        def attn(self, q, k, cos, sin):
            cos = gather_outputs(cos, gather_dim=1, group=get_parallel_state().sp_group)
            sin = gather_outputs(sin, gather_dim=1, group=get_parallel_state().sp_group)
            out = self.kernel(q, k, cos, sin)
            return self.proj(out)
        """
    ).lstrip("\n")
    assert _lines(text) == []


def test_omni_thinker_final_slice_dropped() -> None:
    rel = f"{MODELS}/qwen3_omni_moe/qwen3_omni_moe_gpu_patch_gen_config.py"
    old = "        inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=get_parallel_state().sp_group)\n"
    text, line = _edited(rel, old, "        pass\n")
    assert _lines(text, rel) == [line - 1]  # its SP-guarded block


def test_omni_audio_gather_dropped_before_unpad() -> None:
    rel = f"{MODELS}/qwen3_omni_moe/qwen3_omni_moe_gpu_patch_gen_config.py"
    old = "        input_features = gather_outputs(input_features, gather_dim=1, group=get_parallel_state().sp_group)\n"
    text, line = _edited(rel, old, "")
    assert _lines(text, rel) == [line]  # `sp_input_padding = input_features.size(1) - ...`, the first SP read


def test_omni_audio_rows_gathered_on_the_hidden_dim() -> None:
    rel = f"{MODELS}/qwen3_omni_moe/qwen3_omni_moe_gpu_patch_gen_config.py"
    old = "audio_features = gather_outputs(audio_features, gather_dim=0,"
    text, line = _edited(rel, old, "audio_features = gather_outputs(audio_features, gather_dim=-1,")
    assert _lines(text, rel) == [line]


def test_omni_vit_rotary_padded_never_sliced() -> None:
    rel = f"{MODELS}/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py"
    old = "        rotary_pos_emb = slice_input_tensor(rotary_pos_emb, dim=0)\n"
    text, _ = _edited(rel, old, "")
    pad = "            rotary_pos_emb = pad_tensor(rotary_pos_emb, dim=0, padding_size=sp_padding_size)\n"
    assert _lines(text, rel) == [text[: text.index(pad)].count("\n") + 1]


def test_video_rows_left_local_in_a_generated_module() -> None:
    rel = f"{MODELS}/qwen3_vl/generated/patched_modeling_qwen3_vl_gpu.py"
    old = "            video_embeds = gather_outputs(video_embeds, gather_dim=0, group=get_parallel_state().sp_group)\n"
    text, _ = _edited(rel, old, "")
    assert len(_lines(text, rel)) == 1


def test_maintainers_files_are_quiet() -> None:
    for tree, base in (("veomni-main", "veomni/models"), ("veomni-op-5d90dd16", "veomni/models_kernel")):
        root = shared_corpus(tree)
        for path in sorted((root / base).rglob("*.py")):
            text = path.read_text()
            if "gather_outputs" not in text and "pad_tensor" not in text:
                continue
            assert _lines(text, str(path.relative_to(root))) == [], path


ULYSSES = textwrap.dedent(
    """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_heads_scatter_seq, gather_seq_scatter_heads


    def _to_heads(q, k):
        q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
        k = gather_seq_scatter_heads(k, seq_dim=1, head_dim=2)
        return q, k


    class MixerAttention:
        def forward(self, hidden):
            q, k = self.q_proj(hidden), self.k_proj(hidden)
            if get_parallel_state().ulysses_enabled:
                q, k = _to_heads(q, k)
                v = gather_seq_scatter_heads(self.v_proj(hidden), seq_dim=1, head_dim=2)
            out = self.kernel(q, k, v)
            if get_parallel_state().ulysses_enabled:
                out = gather_heads_scatter_seq(out, head_dim=2, seq_dim=1)
            return self.o_proj(out)
    """
).lstrip("\n")


def test_ulysses_output_moved_back() -> None:
    assert (
        _lines(ULYSSES) == []
    )  # the helper returns its head-sharded tensors to the caller, which moves back
    dropped = ULYSSES.replace("            out = gather_heads_scatter_seq(out, head_dim=2, seq_dim=1)\n", "")
    dropped = dropped.replace(
        "        if get_parallel_state().ulysses_enabled:\n        return", "        return"
    )
    assert dropped.count("gather_heads_scatter_seq") == 1  # the import only
    assert _lines(dropped) == [16]  # the first move to head shards in `forward` itself


MASKED = textwrap.dedent(
    """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def merge(self, embeds, feats, media_mask):
        ps = get_parallel_state()
        if ps.sp_enabled:
            embeds = gather_outputs(embeds, gather_dim=1, group=ps.sp_group)
            feats = gather_outputs(feats, gather_dim=0, group=ps.sp_group)
        expanded = media_mask.unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(expanded, feats)
        if ps.sp_enabled:
            per_rank = media_mask.shape[1] // ps.sp_size
            media_mask = media_mask[:, ps.sp_rank * per_rank : (ps.sp_rank + 1) * per_rank]
        if ps.sp_enabled:
            embeds = slice_input_tensor(embeds, dim=1, group=ps.sp_group)
        return self.decoder(inputs_embeds=embeds, visual_pos_masks=media_mask)
    """
).lstrip("\n")


def test_media_mask_read_after_the_slice_back_is_sliced_too() -> None:
    assert _lines(MASKED) == []
    dropped = MASKED.replace(
        "        media_mask = media_mask[:, ps.sp_rank * per_rank : (ps.sp_rank + 1) * per_rank]\n", ""
    )
    assert "media_mask = media_mask" not in dropped
    assert _lines(dropped) == [12]  # the SP-guarded block after the fill, where the mask's slice belongs
    # a read under the SP guard computes the rank's range: not a use of the full mask
    guarded = dropped.replace(
        "    return self.decoder(inputs_embeds=embeds, visual_pos_masks=media_mask)\n",
        "    if ps.sp_enabled:\n        offset = media_mask[:, :1].sum()\n    return self.decoder(embeds, offset)\n",
    )
    assert "offset = media_mask" in guarded
    assert _lines(guarded) == []


def test_async_ulysses_projection_pair() -> None:
    text = textwrap.dedent(
        """
        from veomni.distributed.sequence_parallel.async_ulysses import (
            async_ulysses_output_projection,
            async_ulysses_qkv_projection,
        )


        def attend(self, hidden):
            q, k, v = async_ulysses_qkv_projection(hidden_states=hidden, seq_dimension=1, head_dimension=2)
            out = self.core(q, k, v)
            return async_ulysses_output_projection(hidden_states=out, seq_dimension=1, head_dimension=2)
        """
    ).lstrip("\n")
    assert _lines(text) == []
    assert _lines(text.replace("return async_ulysses_output_projection(", "return self.out_proj(")) == [8]


def test_gather_and_slice_under_the_same_guard() -> None:
    text = FILL.replace(
        "if get_parallel_state().sp_size > 1:", "if self.training and get_parallel_state().sp_size > 1:"
    )
    assert _lines(text) == []  # all three under the same (training-only) guard
    # the slice back loses the training condition: in eval it slices a sequence that was never gathered
    back = text.replace(
        "        if self.training and get_parallel_state().sp_size > 1:\n            seq = _shard(seq, 1)",
        "        if get_parallel_state().sp_size > 1:\n            seq = _shard(seq, 1)",
    )
    assert _lines(back) == [20]
    # the media rows gathered under another condition than the sequence they fill
    rows = text.replace(
        "        if self.training and get_parallel_state().sp_size > 1:\n            rows = gather_outputs(",
        "        if get_parallel_state().sp_size > 1:\n            rows = gather_outputs(",
    )
    assert _lines(rows) == [16]


def test_gather_and_unpad_on_different_axes() -> None:
    rel = f"{MODELS}/qwen3_omni_moe/qwen3_omni_moe_gpu_patch_gen_config.py"
    old = "input_features = gather_outputs(input_features, gather_dim=1,"
    text, line = _edited(rel, old, "input_features = gather_outputs(input_features, gather_dim=0,")
    assert _lines(text, rel) == [line + 3]  # the unpad on dim 1, reported once


def test_output_gather_on_another_axis_than_the_input_slice() -> None:
    assert _lines(
        textwrap.dedent(
            """
        from veomni.distributed.parallel_state import get_parallel_state
        from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


        def dit_forward(self, latents, context):
            tokens = self.patchify(latents)
            if get_parallel_state().sp_enabled:
                tokens = slice_input_tensor(tokens, dim=1, group=get_parallel_state().sp_group)
            for block in self.blocks:
                tokens = block(tokens, context)
            if get_parallel_state().sp_enabled:
                tokens = gather_outputs(tokens, gather_dim=2)
                tokens = gather_outputs(tokens, gather_dim=0)
            return self.head(tokens)


        def relaid(self, latents):
            x = slice_input_tensor(latents, dim=1)
            x = slice_input_tensor(x, dim=1)
            x = x.transpose(1, 2)
            x = gather_outputs(x, gather_dim=2)
            return x
        """
        ).lstrip()
    ) == [12]
