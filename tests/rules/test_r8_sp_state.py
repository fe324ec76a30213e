"""The sequence-parallel state model (npu_lint/veomni/spstate.py) and the two rules that ask it (NPU717, NPU718),
each defect written the way different engineers would: other names and files, moved into a helper, through
`**kwargs` or a dataclass, keyword vs positional, under a local flag or a negated guard; with the line it must be
reported at and a correct variant that must stay quiet."""

from __future__ import annotations

import ast
import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.spstate import CUT, GATHERED, HEADS, IN, flow

DIT = "veomni/models/diffusers/toy_dit/modeling_toy_dit.py"


def _lines(text: str, code: str, path: str = DIT) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def _flow(text: str):  # type: ignore[no-untyped-def]
    func = ast.parse(textwrap.dedent(text)).body[-1]
    assert isinstance(func, ast.FunctionDef)
    return flow(func)


# -- the model ---------------------------------------------------------------------------------------------


def test_model_states_through_guards_unpacking_and_appends() -> None:
    result = _flow(
        """
        def forward(self, feats, ids, rope):
            use_sp = get_parallel_state().sp_enabled
            a, b = rope
            if use_sp:
                feats = gather_outputs(feats, gather_dim=1)
                a = sp_pad_and_slice(a, dim=0)
            chunks = []
            for piece in feats.split(4):
                chunks.append(self.conv(piece))
            merged = torch.cat(chunks, dim=0)
            q = gather_seq_scatter_heads(self.q(merged), seq_dim=1, head_dim=2)
            n = merged.sum().item()
            return merged, q, n
        """
    )
    assert result.states["feats"] == GATHERED
    assert result.states["merged"] == GATHERED  # through the list of chunks
    assert result.states["a"] == CUT
    assert result.states["b"] == IN
    assert result.states["q"] == HEADS
    assert "n" not in result.states  # a host count is not a sequence
    assert "a" in result.siblings("b")


def test_model_negated_guard_and_path_split() -> None:
    result = _flow(
        """
        def prep(q, k, v, layout):
            if not sp_enabled():
                return q, k, v
            if layout == "bshd":
                q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                k = gather_seq_scatter_heads(k, seq_dim=1, head_dim=2)
                v = gather_seq_scatter_heads(v, seq_dim=1, head_dim=2)
            else:
                q = gather_seq_scatter_heads(q, seq_dim=0, head_dim=1)
                k = gather_seq_scatter_heads(k, seq_dim=0, head_dim=1)
            return q, k, v
        """
    )
    # the early return is the path without SP: not walked; each if/else path is walked on its own
    assert {(r[2], r[3]) for r in result.returns} == {("q", HEADS), ("k", HEADS), ("v", HEADS), ("v", IN)}
    assert result.peers["gather_seq_scatter_heads"] == {"q", "k", "v"}


# -- NPU717 ------------------------------------------------------------------------------------------------


def test_output_state_variants() -> None:
    code = """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor_scale_grad
    from veomni.distributed.sequence_parallel import gather_heads_scatter_seq, gather_seq_scatter_heads


    def video_forward(self, x, context, **kwargs):
        ps = get_parallel_state()
        if ps.ulysses_enabled:
            x = slice_input_tensor_scale_grad(x, dim=1)
        for blk in self.blocks:
            x = blk(x, context=context, **kwargs)
        return {"sample": self.head(x)}


    def cross_attention(self, hidden, enc):
        q = self.q(hidden)
        kv = self.kv(enc)
        if get_parallel_state().sp_enabled:
            q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
        o = self.sdpa(q, kv)
        o = o.reshape(o.shape[0], o.shape[1], -1)
        return self.out(o)


    def encode_speech(self, mel):
        if get_parallel_state().sp_enabled:
            mel = gather_outputs(mel, gather_dim=1)
        h = self.subsample(mel)
        return self.layers(h)


    def fine(self, x, enc):
        if get_parallel_state().sp_enabled:
            x = slice_input_tensor_scale_grad(x, dim=1)
        x = self.blocks(x, enc)
        if get_parallel_state().sp_enabled:
            x = gather_outputs(x, gather_dim=1)
        q = gather_seq_scatter_heads(self.q(x), seq_dim=1, head_dim=2)
        q = gather_heads_scatter_seq(self.sdpa(q), seq_dim=1, head_dim=2)
        return x, q
    """
    assert _lines(code, "NPU717") == [12, 22, 29]


def test_output_state_quiet_on_round_trips_and_helpers() -> None:
    code = """
    from dataclasses import replace

    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def fill_media(self, embeds, pixels):
        if get_parallel_state().sp_enabled:
            embeds = gather_outputs(embeds, gather_dim=1)
        embeds = embeds.masked_scatter(self.mask(embeds), self.tower(pixels))
        if get_parallel_state().sp_enabled:
            embeds = slice_input_tensor(embeds, dim=1)
        return embeds


    def split_for_ranks(x):
        return slice_input_tensor(x, dim=1)


    def dual(self, video, audio):
        if get_parallel_state().sp_enabled:
            video = replace(video, x=slice_input_tensor(video.x, dim=1))
        video = self.blocks(video)
        if get_parallel_state().sp_enabled:
            video = replace(video, x=gather_outputs(video.x, gather_dim=1))
        return video


    def indexer(self, q, kv):
        top_indices = self.score(q, kv).topk(8).indices
        if get_parallel_state().sp_enabled:
            top_indices = gather_outputs(top_indices, gather_dim=1)
        return top_indices


    def sp_only_branch(self, x):
        if get_parallel_state().sp_enabled:
            return gather_outputs(self.blocks(slice_input_tensor(x, dim=1)), gather_dim=1)
        return self.blocks(x)
    """
    assert _lines(code, "NPU717") == []


# -- NPU718 ------------------------------------------------------------------------------------------------


def test_mixed_state_variants() -> None:
    code = """
    import torch

    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, gather_seq_scatter_heads, slice_input_tensor


    def rope_tables(self, x, freqs):
        fc, fs = freqs.cos(), freqs.sin()
        if get_parallel_state().sp_enabled:
            x = slice_input_tensor(x, dim=1)
            fs = slice_input_tensor(fs, dim=1)
        return self.blocks(x, rotary=[fc, fs])


    def merge_streams(self, img, txt):
        if get_parallel_state().sp_enabled:
            img = slice_input_tensor(img, dim=1)
            txt = slice_input_tensor(txt, dim=1)
        img, txt = self.double(img, txt)
        if get_parallel_state().sp_enabled:
            img = gather_outputs(img, gather_dim=1)
        joint = torch.concat((txt, img), dim=1)
        return joint


    def qkv(self, hs, sp):
        query, key, value = self.to_q(hs), self.to_k(hs), self.to_v(hs)
        if sp:
            query = gather_seq_scatter_heads(query, seq_dim=1, head_dim=2)
            key = gather_seq_scatter_heads(key, seq_dim=1, head_dim=2)
        both = torch.cat([query, value], dim=-1)
        return self.attn(both, key)
    """
    assert _lines(code, "NPU718") == [12, 22, 31]


def test_mixed_state_quiet_variants() -> None:
    code = """
    import torch

    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_seq_scatter_heads, slice_input_tensor


    def tables(self, x, rope):
        cos, sin = rope
        if get_parallel_state().sp_enabled:
            x = slice_input_tensor(x, dim=1)
            cos, sin = slice_input_tensor(cos, dim=1), slice_input_tensor(sin, dim=1)
        return self.blocks(x, (cos, sin))


    def full_tables_after_all_to_all(self, q, k, freqs):
        if get_parallel_state().sp_enabled:
            q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
            k = gather_seq_scatter_heads(k, seq_dim=1, head_dim=2)
        q = q * freqs.cos() + self.rotate(q) * freqs.sin()
        return q, k


    def vit(self, patches, grid):
        pos = self.pos_embed(grid)
        if get_parallel_state().sp_enabled:
            pos = slice_input_tensor(pos, dim=0)
        patches = patches + pos
        return self.blocks(patches, (pos, pos))
    """
    assert _lines(code, "NPU718") == []
