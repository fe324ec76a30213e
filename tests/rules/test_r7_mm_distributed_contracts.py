"""Multimodal and distributed contracts generalised from round 6's misses (2026-12-02 morning), each written the
way another engineer would: other names and files, moved into a helper, keyword vs positional, the condition
inverted; with the line it must be reported at, and a correct variant that must stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# -- NPU615: a binary element-wise op given a variable number of tensors -------------------------------------


def test_binary_max_over_parallel_groups_variants() -> None:
    code = """
    import torch
    from torch import minimum


    def inf_norm(local, per_group):
        return torch.maximum(local, *per_group)


    def smallest(a, b, c):
        return minimum(a, b, c)


    def via_max(first, rest):
        return torch.max(first, *rest)


    def fine(first, rest):
        out = first
        for t in rest:
            out = torch.maximum(out, t)
        return out, torch.max(first, dim=0), torch.stack([first, *rest]).amax(0)
    """
    assert _lines(code, "NPU615", "veomni/distributed/fsdp2/toy_norm.py") == [6, 10, 14]


# -- NPU616: the PREMUL_SUM patch under a narrower switch than the divide factor -----------------------------


def test_premul_patch_guard_variants() -> None:
    narrower = """
    from veomni.ops.platform.npu import apply_hccl_premul_sum_patch
    from veomni.utils.device import IS_NPU_AVAILABLE


    def shard(model, ps, mods):
        if not IS_NPU_AVAILABLE or not ps.emb_enabled:
            pass
        else:
            apply_hccl_premul_sum_patch()
        for name in ps.extra_parallel_names:
            if ps.extra_parallel_enabled(name):
                for m in mods[name]:
                    m.set_gradient_divide_factor(ps.extra_parallel_gradient_divide_factor(name))
    """
    assert _lines(narrower, "NPU616", "veomni/distributed/toy_shard.py") == [9]
    same = narrower.replace("not ps.emb_enabled", "not ps.any_extra_parallel_enabled")
    assert _lines(same, "NPU616", "veomni/distributed/toy_shard.py") == []
    unguarded = narrower.replace("if not IS_NPU_AVAILABLE or not ps.emb_enabled:", "if not IS_NPU_AVAILABLE:")
    assert _lines(unguarded, "NPU616", "veomni/distributed/toy_shard.py") == []


# -- NPU617: collective buckets keyed without the dtype -----------------------------------------------------


def test_bucket_key_without_dtype_through_a_helper_and_a_subscript() -> None:
    code = """
    import torch.distributed as dist


    def _key(g):
        return g.device_mesh, g.shape[-1]


    def _send(chunk, group):
        dist.all_gather_into_tensor(chunk[0], chunk[1], group=group)


    def _flush(chunk, group):
        _send(chunk, group)


    def step(grads, group):
        pending = {}
        for g in grads:
            k = _key(g)
            bucket = pending.setdefault(k, [])
            bucket.append(g)
        for chunk in pending.values():
            _flush(chunk, group)
    """
    assert _lines(code, "NPU617", "veomni/optim/toy_opt.py") == [20]
    fixed = code.replace("return g.device_mesh, g.shape[-1]", "return g.device_mesh, g.to_local().dtype")
    assert _lines(fixed, "NPU617", "veomni/optim/toy_opt.py") == []


def test_bucket_without_a_collective_is_quiet() -> None:
    code = """
    def group(params):
        by_shape = {}
        for p in params:
            by_shape.setdefault(p.shape, []).append(p)
        return by_shape
    """
    assert _lines(code, "NPU617", "veomni/optim/toy_opt.py") == []


# -- NPU618: a collective in the checkpoint's dtype --------------------------------------------------------


def test_checkpoint_dtype_collective_variants() -> None:
    code = """
    import torch
    import torch.distributed as dist


    def receive_all(header_list, device, group):
        out = {}
        for header in header_list:
            wanted = header.dtype
            shard = torch.empty(header.shape, dtype=wanted, device=device)
            dist.all_gather_into_tensor(shard, shard, group=group)
            out[header.name] = shard
        return out


    def receive_dict(spec, device):
        buf = torch.zeros(spec["shape"], dtype=spec["dtype"], device=device)
        dist.broadcast(buf, src=0)
        return buf
    """
    assert _lines(code, "NPU618", "veomni/checkpoint/toy_recv.py") == [10, 17]
    handled = code.replace("out = {}", "out = {}  # float8 goes through uint8 views upstream of here")
    assert _lines(handled, "NPU618", "veomni/checkpoint/toy_recv.py") == [17]
    # adapter weights are trained parameters (bf16/fp32), never FP8: veomni-main's LoRA loader, reviewed a false positive
    adapter = code.replace(
        "def receive_dict(spec, device):", "def receive_adapter(spec, device):  # LoRA weights"
    )
    assert _lines(adapter, "NPU618", "veomni/lora/toy_recv.py") == [10]


# -- NPU701: one medium's slot read under another medium's key ----------------------------------------------


def test_keyed_media_crossing_variants() -> None:
    code = """
    def to_rope_kwargs(grids, **kw):
        return dict(image_grid_thw=grids.get("image"), video_grid_thw=grids["image"])


    def in_a_literal(grids):
        return {"video_grid_thw": grids.get("video"), "audio_seqlens": grids["video"]}


    def in_a_local(grids):
        image_grid_thw = grids["video"]
        return image_grid_thw
    """
    path = "veomni/models/seed_omni/foundation/toy_foundation/modeling_toy_foundation.py"
    assert _lines(code, "NPU701", path) == [2, 6, 10]


# -- NPU711: the position-id function without the media layout ---------------------------------------------


def test_position_ids_without_media_variants() -> None:
    code = """
    def build(sample, tok, rope_index_fn, model):
        media_cfg = tok.layouts(sample)
        ids, mask = tok(sample, **media_cfg)
        pos = model.get_rope_index(input_ids=ids, attention_mask=mask)
        return pos, media_cfg


    def build_positional(ids, mask, video_grid_thw, position_id_func):
        return position_id_func(ids, mask), video_grid_thw


    def fine(ids, mask, video_grid_thw, position_id_func):
        return position_id_func(ids, mask, video_grid_thw=video_grid_thw)
    """
    assert _lines(code, "NPU711", "veomni/data/multimodal/toy_preprocess.py") == [4, 9]


# -- NPU712: media rows scattered into a caller's gathered sequence ----------------------------------------


def test_fill_from_caller_variants() -> None:
    code = """
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    class Encoder:
        def add_sound(self, seq, where, clips):
            rows = self.sound(clips)
            seq[where] = rows
            return seq

        def add_frames(self, seq, where, frames):
            rows = gather_outputs(self.frames(frames), gather_dim=0)
            return seq.masked_scatter(where, rows)

        def forward(self, ids, sound_where, clips, frame_where, frames, sp):
            seq = self.embed(ids)
            if sp:
                seq = gather_outputs(seq, gather_dim=1)
            seq = self.add_frames(seq, frame_where, frames)
            seq = self.add_sound(seq=seq, where=sound_where, clips=clips)
            seq = slice_input_tensor(seq, dim=1)
            return self.add_sound(seq, sound_where, clips)
    """
    assert _lines(code, "NPU712", "veomni/models/seed_omni/toy/modeling_toy.py") == [7]


# -- NPU713: full-sequence labels next to local hidden states ----------------------------------------------


def test_full_labels_local_hidden_variants() -> None:
    code = """
    import torch
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs


    def image_head_loss(head, hidden_states, codes, sp_group):
        if get_parallel_state().sp_enabled:
            code_targets = gather_outputs(codes, gather_dim=1, group=sp_group)
        else:
            code_targets = codes
        logits = head(hidden_states)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), code_targets.flatten())


    def aligned(head, hidden_states, codes, sp_group):
        if get_parallel_state().sp_enabled:
            code_targets = gather_outputs(codes, gather_dim=1, group=sp_group)
            code_targets = code_targets[:, : hidden_states.shape[1]]
        logits = head(hidden_states)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), code_targets.flatten())
    """
    assert _lines(code, "NPU713", "veomni/models/transformers/toy/modeling_toy_head.py") == [12]


# -- NPU714: rotary tables in another SP state than their sequence -----------------------------------------


def test_rotary_table_left_full_while_the_sequence_is_sliced_by_rank_range() -> None:
    code = """
    from veomni.distributed.parallel_state import get_parallel_state


    def run(blocks, x, grid, rope):
        freqs_cos, freqs_sin = rope(grid)
        ps = get_parallel_state()
        if ps.ulysses_enabled:
            chunk = x.shape[1] // ps.ulysses_size
            x = x[:, ps.ulysses_rank * chunk : (ps.ulysses_rank + 1) * chunk]
        for block in blocks:
            x = block(x, (freqs_cos, freqs_sin))
        return x
    """
    assert _lines(code, "NPU714", "veomni/models/diffusers/toy/modeling_toy.py") == [9]
    fixed = code.replace(
        "        for block in blocks:",
        "            freqs_cos = freqs_cos[:, ps.ulysses_rank * chunk : (ps.ulysses_rank + 1) * chunk]\n"
        "            freqs_sin = freqs_sin[:, ps.ulysses_rank * chunk : (ps.ulysses_rank + 1) * chunk]\n"
        "        for block in blocks:",
    )
    assert _lines(fixed, "NPU714", "veomni/models/diffusers/toy/modeling_toy.py") == []


def test_rotary_from_position_ids_sliced_again_in_a_comprehension() -> None:
    code = """
    from veomni.distributed.sequence_parallel import slice_input_tensor


    class TextModel:
        def forward(self, inputs_embeds, position_ids=None, sp=False):
            if position_ids is None:
                position_ids = self.default_ids(inputs_embeds)
            pos_emb = self.rotary_emb(inputs_embeds, position_ids)
            if sp:
                pos_emb = tuple(slice_input_tensor(t, dim=1) for t in pos_emb)
            return self.layers(inputs_embeds, pos_emb)
    """
    assert _lines(code, "NPU714", "veomni/models/transformers/toy/modeling_toy.py") == [10]


def test_full_table_design_is_quiet() -> None:
    # the file's attention gathers q/k to the full sequence before RoPE: its tables stay full by design
    code = """
    from veomni.distributed.sequence_parallel import gather_seq_scatter_heads_qkv, slice_input_tensor


    def attention(q, k, v, image_rotary_emb):
        q, k, v = gather_seq_scatter_heads_qkv(q, k, v, seq_dim=2, head_dim=1)
        q, k = apply_rope(q, k, image_rotary_emb)
        return q, k, v


    def forward(blocks, hidden_states, ids, embedder):
        image_rotary_emb = embedder(ids)
        hidden_states = slice_input_tensor(hidden_states, dim=1)
        for block in blocks:
            hidden_states = block(hidden_states, image_rotary_emb)
        return hidden_states
    """
    assert _lines(code, "NPU714", "veomni/models/transformers/toy/modeling_toy.py") == []


# -- NPU715: a dummy pass that skips a submodule of the real path ------------------------------------------


def test_dummy_skips_submodule_variants() -> None:
    code = """
    class Omni:
        def __init__(self, cfg):
            self.audio_tower = make(cfg)
            self.audio_proj = make(cfg)
            self.norm = make(cfg)

        def forward(self, embeds, feats=None):
            if feats is None and self.training:
                embeds = embeds + self.norm(self.audio_tower.dummy_forward()).sum() * 0
                return embeds
            hidden = self.audio_tower.encode(feats)
            hidden = self.norm(hidden)
            return embeds + self.audio_proj(hidden)
    """
    assert _lines(code, "NPU715", "veomni/models/transformers/toy/modeling_toy.py") == [9]
    fixed = code.replace(
        "self.norm(self.audio_tower.dummy_forward())",
        "self.audio_proj(self.norm(self.audio_tower.dummy_forward()))",
    )
    assert _lines(fixed, "NPU715", "veomni/models/transformers/toy/modeling_toy.py") == []


# -- NPU716: rows counted for one mask, scattered at another -----------------------------------------------


def test_scatter_mask_mismatch_variants() -> None:
    code = """
    def merge(embeds, video_pos, image_pos, video_rows, image_rows):
        video_rows = video_rows[: video_pos.count_nonzero()].to(embeds.dtype)
        m = image_pos[..., None]
        sel = m.expand_as(embeds)
        embeds.masked_scatter_(sel, video_rows)
        image_rows = image_rows[: image_pos.sum()]
        embeds.masked_scatter_(image_pos[..., None].expand_as(embeds), image_rows)
        return embeds
    """
    assert _lines(code, "NPU716", "veomni/models/transformers/toy/modeling_toy_merge.py") == [5]
    fixed = code.replace("m = image_pos[..., None]", "m = video_pos[..., None]")
    assert _lines(fixed, "NPU716", "veomni/models/transformers/toy/modeling_toy_merge.py") == []


def test_bucket_key_without_dtype_on_a_defaultdict() -> None:
    code = """
    from collections import defaultdict

    import torch.distributed as dist


    class Opt:
        def _reduce(self, tensors, group):
            for t in tensors:
                dist.all_reduce(t, group=group)

        def step(self, grads, group):
            by_device = defaultdict(list)
            for g in grads:
                by_device[(g.device, g.numel() > 1024)].append(g)
            for tensors in by_device.values():
                self._reduce(tensors, group)
    """
    assert _lines(code, "NPU617", "veomni/optim/toy_opt.py") == [14]
    fixed = code.replace("(g.device, g.numel() > 1024)", "(g.device, g.dtype)")
    assert _lines(fixed, "NPU617", "veomni/optim/toy_opt.py") == []


def test_fill_from_caller_module_helper_in_place() -> None:
    code = """
    import torch.distributed as dist


    def _put_audio(hidden, where, encoder, clips):
        rows = encoder(clips).flatten(0, 1)
        hidden.masked_scatter_(where, rows)


    def encode(hidden, where, encoder, clips, group):
        full = dist.nn.functional.all_gather(hidden, group=group)
        _put_audio(full, where, encoder, clips)
        return full
    """
    assert _lines(code, "NPU712", "veomni/models/transformers/toy/modeling_toy_audio.py") == [6]


def test_dummy_skips_submodule_through_locals_and_other_names() -> None:
    code = """
    class Tri:
        def __init__(self, cfg):
            self.vit = make(cfg)
            self.merger = make(cfg)

        def forward(self, embeds, patches=None):
            if patches is not None:
                raw = self.vit(patches)
                merged = self.merger(raw)
                return embeds + merged.sum()
            zero = self.vit.dummy_forward()
            zero = zero.float().mean() * 0.0
            return embeds + zero
    """
    assert _lines(code, "NPU715", "veomni/models/transformers/toy/modeling_toy.py") == [11]
