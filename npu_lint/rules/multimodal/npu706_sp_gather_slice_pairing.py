"""NPU706 sp-gather-slice-pairing."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.dummylayout import FEATURE_AXIS, dummy_input_layouts, forward_owner, relaid

# Sequence-parallel helpers by what they do to the sequence axis. Names are matched on the called name's last
# component; module-level helpers of the linted file that return one of these on their first parameter count
# as that kind too (``def _gather(x): return gather_outputs(x, gather_dim=0, group=...)``).
_GATHER = frozenset({"gather_outputs"})
_SLICE = frozenset({"slice_input_tensor", "slice_input_tensor_scale_grad", "sp_pad_and_slice"})
_SLICE_OF_GATHERED = frozenset({"slice_input_tensor", "slice_input_tensor_scale_grad"})
_PAD = frozenset({"pad_tensor"})
_UNPAD = frozenset({"unpad_tensor"})
_DIM_KEYWORDS = ("gather_dim", "dim", "seq_dim")
# Ulysses all-to-all: sequence shards -> head shards before attention, and back after it.
_TO_HEADS = frozenset(
    {"gather_seq_scatter_heads", "gather_seq_scatter_heads_qkv", "async_ulysses_qkv_projection"}
)
_TO_SEQ = frozenset({"gather_heads_scatter_seq", "async_ulysses_output_projection"})
_BACK = {
    "gather_seq_scatter_heads": "gather_heads_scatter_seq",
    "gather_seq_scatter_heads_qkv": "gather_heads_scatter_seq",
    "async_ulysses_qkv_projection": "async_ulysses_output_projection",
}


def _called(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _dim(call: ast.Call) -> int | None:
    """The literal sequence dimension a gather/slice/pad call works on (keyword or second positional)."""
    for kw in call.keywords:
        if kw.arg in _DIM_KEYWORDS:
            value = kw.value
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
                inner = value.operand
                if isinstance(inner, ast.Constant) and type(inner.value) is int:
                    return -inner.value
                return None
            if isinstance(value, ast.Constant) and type(value.value) is int:
                return value.value
            return None
    if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and type(call.args[1].value) is int:
        return call.args[1].value
    return None


def _first_name(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Name):
        return call.args[0].id
    return None


_RELAYOUT = frozenset(
    {"transpose", "permute", "reshape", "view", "flatten", "unflatten", "movedim", "swapaxes", "rearrange", "einsum",
     "squeeze", "unsqueeze", "t"}
)  # fmt: skip


def _relaid(func: ast.AST, name: str, start: int, end: int) -> bool:
    """``name`` is re-laid out (transposed, reshaped...) between lines ``start`` and ``end``: its axes moved."""
    for n in _walk(func):
        if (
            isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            and start < n.lineno < end
            and any(
                isinstance(t, ast.Name) and t.id == name
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
            and n.value is not None
        ):
            for sub in _walk(n.value):
                if isinstance(sub, ast.Call):
                    attr = call_name(sub)
                    if attr in _RELAYOUT:
                        return True
    return False


def _dim_source(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in _DIM_KEYWORDS:
            return kw.value
    return call.args[1] if len(call.args) >= 2 else None


def _local_helpers(tree: ast.Module) -> dict[str, tuple[str, int | None, int | None]]:
    """Module-level functions that return a gather/slice/pad helper applied to their first parameter:
    name -> (kind, literal dim, or the position of the parameter that carries the dim)."""
    out: dict[str, tuple[str, int | None, int | None]] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.args.args:
            continue
        params = [a.arg for a in node.args.args]
        for ret in _walk(node):
            if not isinstance(ret, ast.Return) or not isinstance(ret.value, ast.Call):
                continue
            name = _called(ret.value)
            if _first_name(ret.value) != params[0] or name is None:
                continue
            source = _dim_source(ret.value)
            position = (
                params.index(source.id) if isinstance(source, ast.Name) and source.id in params else None
            )
            for kind, names in (("gather", _GATHER), ("slice", _SLICE_OF_GATHERED), ("pad_slice", _SLICE)):
                if name in names:
                    out[node.name] = (kind, _dim(ret.value), position)
                    break
            if node.name in out:
                break
    return out


def _sp_guard(test: ast.AST) -> bool:
    text = ast.unparse(test) if not isinstance(test, ast.Name) else test.id
    return "sp_enabled" in text or "sp_size" in text or "sequence_parallel" in text or "ulysses" in text


@dataclass
class _Flow:
    """The state of one function's walk: which names hold a full (gathered) sequence."""

    full: set[str] = field(default_factory=set)
    # name -> (gather call, its dim, the statement) of the last direct gather of that name
    gathered: dict[str, tuple[ast.Call, int | None, ast.stmt]] = field(default_factory=dict)
    produced: dict[str, ast.stmt] = field(default_factory=dict)  # name -> its last non-self-derived binding
    fills: set[str] = field(default_factory=set)  # gathered names that received media rows since their gather
    writes: dict[str, ast.stmt] = field(default_factory=dict)  # gathered name -> last statement writing it
    # (target, mask expression, statement, index) of each fill into a gathered target
    fill_masks: list[tuple[str, ast.expr, ast.stmt, int]] = field(default_factory=list)
    slice_backs: dict[str, list[int]] = field(default_factory=dict)  # gathered name -> indexes of its slices
    # (name, its gather statement, the statement slicing it back) and (target, its gather, the source's gather)
    round_trips: list[tuple[str, ast.stmt, ast.stmt]] = field(default_factory=list)
    fill_pairs: list[tuple[str, ast.stmt, str, ast.stmt]] = field(default_factory=list)
    axis_reported: set[int] = field(
        default_factory=set
    )  # gathers whose axis conflict is reported (once each)


class SpGatherSlicePairing(Rule):
    code = "NPU706"
    name = "sp-gather-slice-pairing"
    summary = (
        "A sequence-parallel gather or slice in a multimodal wrapper is not undone symmetrically: a gathered "
        "sequence (or a Ulysses head-sharded output) is never brought back, a tensor that was never gathered is "
        "unpadded and sliced as if it had been, a padded side "
        "tensor (rotary table, position embeddings) or a media mask read after the slice-back is never sliced, "
        "media embeddings filled into the gathered sequence stay rank-local, or a gather works on the wrong "
        "dimension (a tower's input gathered or sliced along the axis its own `dummy_forward` gives to a feature "
        "size)."
    )
    why = (
        "Under sequence parallelism (Ulysses) each rank holds a shard of the sequence. A wrapper that needs the "
        "whole sequence (to scatter image/video/audio embeddings at their global placeholder positions, or to "
        "reorder ViT patches by window) gathers it, works on it, and slices its own shard back before the next "
        "layer; every side tensor that shares the sequence axis (rotary tables, position embeddings) must be "
        "padded and sliced the same way. When one half of a pair is missing the shapes of the ranks disagree "
        "(the language model runs the whole sequence on every rank, a ViT block gets a full-length rotary table "
        "for its local patches, `masked_scatter` gets one rank's media rows for the full sequence's "
        "placeholders) or, worse, they agree by accident and the model trains on the wrong tokens. Media "
        "embeddings are flattened `(tokens, hidden)`: their shards are gathered on dim 0, a gather on dim 1 "
        "concatenates hidden sizes; a gathered tensor is unpadded, padded and sliced back on the axis it was "
        "gathered on. The pairing is followed through assignments in each function of the file "
        "(specs, generated modules, the tree's own modeling files) and through the file's own helpers that "
        "wrap a gather or a slice; the helper names (`gather_outputs`, `slice_input_tensor`, `sp_pad_and_slice`, "
        "`pad_tensor`) are VeOmni's sequence-parallel API. The Ulysses all-to-all pair is checked the same way: a "
        "function that moves its tensors from sequence shards to head shards (`gather_seq_scatter_heads`) must "
        "move the result back (`gather_heads_scatter_seq`; `async_ulysses_qkv_projection` pairs with "
        "`async_ulysses_output_projection`), unless it returns the moved tensors to its caller. "
        "A function that gathers the embedded sequence must build its media masks from gathered ids (before its "
        "slice-back), not from the `input_ids` shard it receives. "
        "A tensor built from the full media grid (learned position embeddings) and added to (or multiplied "
        "with) the rank-local sequence input of a function that slices its other side tensors must be sliced "
        "too. "
        "A mask of media positions built for the gathered sequence and read again (outside the SP guards) after "
        "the sequence is sliced back must be cut to the rank's range too (`mask[:, start:end]`). The two halves "
        "of a pair (and the gathers of a fill's sequence and of its media rows) run under the same condition "
        "beyond the SP switch: a gather under `if self.training and sp_enabled:` undone under `if sp_enabled:` "
        "slices a shard of a shard in evaluation. "
        "A tower's input arrives in the layout its `dummy_forward` builds (the layout the data has: Qwen3-Omni's "
        "audio encoder gets `(len, num_mel_bins)`); a `forward` that gathers, slices or pads that input along an "
        "axis the dummy gives to a feature size (`num_mel_bins`, channels, hidden size), following its "
        "permutes and transposes, treats the features as the sequence: the permute to the layout it reads was "
        "dropped."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def fill_media(self, input_ids, inputs_embeds, pixel_values):
                state = get_parallel_state()
                if state.sp_enabled:
                    inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=state.sp_group)
                if pixel_values is not None:
                    image_feats = self.vision_tower(pixel_values)
                    if state.sp_enabled:
                        image_feats = gather_outputs(image_feats, gather_dim=0, group=state.sp_group)
                    mask = (input_ids == self.config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
                    inputs_embeds = inputs_embeds.masked_scatter(mask, image_feats)
                return self.text_model(inputs_embeds=inputs_embeds)
            """,
            path="veomni/models/transformers/llava_next/modeling_llava_next.py",
            title="the gathered sequence reaches the text model unsliced",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def _sp_all(x):
                return gather_outputs(x, gather_dim=0, group=get_parallel_state().sp_group)


            def forward(self, input_ids, inputs_embeds, input_features):
                sp = get_parallel_state().sp_enabled
                if sp:
                    inputs_embeds = _sp_all(inputs_embeds.transpose(0, 1)).transpose(0, 1)
                audio_embeds = self.audio_tower(input_features)
                audio_embeds = audio_embeds.to(inputs_embeds.dtype)
                mask = input_ids == self.config.audio_token_id
                inputs_embeds[mask] = audio_embeds
                if sp:
                    inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=get_parallel_state().sp_group)
                return inputs_embeds
            """,
            path="veomni/models/transformers/qwen2_audio/modeling_qwen2_audio.py",
            title="audio rows stay rank-local while their placeholders span the gathered sequence (through a helper)",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, pad_tensor, sp_pad_and_slice


            def vit_forward(self, patches, grid_thw):
                pos = self.pos_table(grid_thw)
                if get_parallel_state().sp_enabled:
                    pad = patches.shape[0] * get_parallel_state().sp_size - pos.shape[0]
                    pos = pad_tensor(pos, dim=0, padding_size=pad)
                for block in self.blocks:
                    patches = block(patches, pos)
                out = self.merger(patches)
                if get_parallel_state().sp_enabled:
                    out = gather_outputs(out, gather_dim=0, group=get_parallel_state().sp_group)
                return out
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
            title="a side tensor padded to the full length and never sliced to this rank's patches",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor, unpad_tensor


            def tower_forward(self, hidden, total):
                pad = 0
                if get_parallel_state().sp_enabled:
                    pad = hidden.size(0) - total
                    hidden = unpad_tensor(hidden, dim=0, padding_size=pad)
                hidden = hidden[self.order]
                if get_parallel_state().sp_enabled:
                    hidden = slice_input_tensor(hidden, dim=0, group=get_parallel_state().sp_group)
                out = self.head(hidden)
                if get_parallel_state().sp_enabled:
                    out = gather_outputs(out, gather_dim=0, group=get_parallel_state().sp_group)
                return out
            """,
            path="veomni/models/transformers/kimi_vl/kimi_vl_gpu_patch_gen_config.py",
            title="a shard sliced out of a tensor that was never gathered",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def merge(self, embeds, video_feats, video_mask):
                ps = get_parallel_state()
                if ps.sp_enabled:
                    embeds = gather_outputs(embeds, gather_dim=1, group=ps.sp_group)
                    video_feats = gather_outputs(video_feats, gather_dim=-1, group=ps.sp_group)
                embeds = embeds.masked_scatter(video_mask, video_feats)
                if ps.sp_enabled:
                    embeds = slice_input_tensor(embeds, dim=1, group=ps.sp_group)
                return embeds
            """,
            path="veomni/models/transformers/video_llava/modeling_video_llava.py",
            title="media rows gathered along the hidden dimension",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import sp_pad_and_slice


            def tower_forward(self, patches, image_grid):
                patches = self.embed(patches)
                learned = self.interpolate_positions(image_grid)
                rope = self.rope_table(image_grid)
                if get_parallel_state().sp_enabled:
                    rope = sp_pad_and_slice(rope, dim=0, pad_value=0, pad_scale=4)
                patches = patches + learned
                for block in self.blocks:
                    patches = block(patches, rope)
                return patches
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
            title="learned position embeddings of the whole grid added to this rank's patches",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def fill_audio(self, input_ids, inputs_embeds, input_features):
                audio_mask = (input_ids == self.config.audio_token_id).unsqueeze(-1)
                sp = get_parallel_state()
                if sp.sp_enabled:
                    inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=sp.sp_group)
                feats = self.audio_tower(input_features)
                if sp.sp_enabled:
                    feats = gather_outputs(feats, gather_dim=0, group=sp.sp_group)
                inputs_embeds = inputs_embeds.masked_scatter(audio_mask, feats)
                if sp.sp_enabled:
                    inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=sp.sp_group)
                return inputs_embeds
            """,
            path="veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py",
            title="the audio mask comes from this rank's ids, the sequence it fills is gathered",
        ),
        Example(
            """
            import torch
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            class ToyAudioEncoder(torch.nn.Module):
                def forward(self, input_features, feature_lens):
                    if get_parallel_state().sp_enabled:
                        input_features = gather_outputs(input_features, gather_dim=1, group=get_parallel_state().sp_group)
                    return self.encode(input_features.T.split(feature_lens.tolist(), dim=0))

                def dummy_forward(self):
                    feats = torch.zeros((self.n_window * 2, self.num_mel_bins), device=self.device)
                    return self(input_features=feats, feature_lens=torch.tensor([self.n_window * 2]))
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
            title="a tower's (len, mel) input gathered on its mel axis (the permute dropped)",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def fill_media(self, input_ids, inputs_embeds, pixel_values):
                state = get_parallel_state()
                if state.sp_enabled:
                    input_ids = gather_outputs(input_ids, gather_dim=1, group=state.sp_group)
                    inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=state.sp_group)
                if pixel_values is not None:
                    image_feats = self.vision_tower(pixel_values)
                    if state.sp_enabled:
                        image_feats = gather_outputs(image_feats, gather_dim=0, group=state.sp_group)
                    mask = (input_ids == self.config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
                    inputs_embeds = inputs_embeds.masked_scatter(mask, image_feats)
                if state.sp_enabled:
                    inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=state.sp_group)
                return self.text_model(inputs_embeds=inputs_embeds)
            """,
            path="veomni/models/transformers/llava_next/modeling_llava_next.py",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, pad_tensor, sp_pad_and_slice


            def vit_forward(self, patches, grid_thw):
                pos = self.pos_table(grid_thw)
                if get_parallel_state().sp_enabled:
                    pad = patches.shape[0] * get_parallel_state().sp_size - pos.shape[0]
                    pos = pad_tensor(pos, dim=0, padding_size=pad)
                    pos = sp_pad_and_slice(pos, dim=0)
                for block in self.blocks:
                    patches = block(patches, pos)
                out = self.merger(patches)
                if get_parallel_state().sp_enabled:
                    out = gather_outputs(out, gather_dim=0, group=get_parallel_state().sp_group)
                return out
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            def attention(self, q, k, position_embeddings):
                cos, sin = position_embeddings
                cos = gather_outputs(cos, gather_dim=1, group=get_parallel_state().sp_group)
                sin = gather_outputs(sin, gather_dim=1, group=get_parallel_state().sp_group)
                return self.rotate(q, k, cos, sin)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a gather for a full-sequence kernel, never filled: nothing to slice back",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import sp_pad_and_slice


            def tower_forward(self, patches, image_grid):
                patches = self.embed(patches)
                learned = self.interpolate_positions(image_grid)
                rope = self.rope_table(image_grid)
                if get_parallel_state().sp_enabled:
                    learned = sp_pad_and_slice(learned, dim=0, pad_value=0, pad_scale=4)
                    rope = sp_pad_and_slice(rope, dim=0, pad_value=0, pad_scale=4)
                patches = patches + learned
                for block in self.blocks:
                    patches = block(patches, rope)
                return patches
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            def fill_audio(self, input_ids, inputs_embeds, input_features):
                sp = get_parallel_state()
                full_ids = input_ids
                if sp.sp_enabled:
                    parts = [torch.empty_like(input_ids) for _ in range(sp.sp_size)]
                    dist.all_gather(parts, input_ids, group=sp.sp_group)
                    full_ids = torch.cat(parts, dim=1)
                    inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=sp.sp_group)
                audio_mask = (full_ids == self.config.audio_token_id).unsqueeze(-1)
                feats = self.audio_tower(input_features)
                if sp.sp_enabled:
                    feats = gather_outputs(feats, gather_dim=0, group=sp.sp_group)
                inputs_embeds = inputs_embeds.masked_scatter(audio_mask, feats)
                if sp.sp_enabled:
                    inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=sp.sp_group)
                return inputs_embeds
            """,
            path="veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            class ToyAudioEncoder(torch.nn.Module):
                def forward(self, input_features, feature_lens):
                    input_features = input_features.permute(1, 0)  # (len, mel) -> (mel, len)
                    if get_parallel_state().sp_enabled:
                        input_features = gather_outputs(input_features, gather_dim=1, group=get_parallel_state().sp_group)
                    return self.encode(input_features.T.split(feature_lens.tolist(), dim=0))

                def dummy_forward(self):
                    feats = torch.zeros((self.n_window * 2, self.num_mel_bins), device=self.device)
                    return self(input_features=feats, feature_lens=torch.tensor([self.n_window * 2]))
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
        ),
    )
    fix_safety = "No fix: where the missing gather or slice belongs depends on the data flow."

    requires = (("gather", "slice_input", "pad_and_slice", "pad_tensor", "scatter_heads", "async_ulysses"),)
    node_types = ()

    # -- classification -------------------------------------------------------------------------------

    def _kind(self, call: ast.AST) -> tuple[str, int | None] | None:
        name = _called(call)
        if name is None or not isinstance(call, ast.Call):
            return None
        if name in _GATHER:
            return "gather", _dim(call)
        if name in _SLICE_OF_GATHERED:
            return "slice", _dim(call)
        if name in _SLICE:
            return "pad_slice", _dim(call)
        if name in _PAD:
            return "pad", _dim(call)
        if name in _UNPAD:
            return "unpad", _dim(call)
        if isinstance(call.func, ast.Name) and name in self._helpers:
            kind, dim, position = self._helpers[name]
            if position is not None and position < len(call.args):
                value = call.args[position]
                dim = value.value if isinstance(value, ast.Constant) and type(value.value) is int else None
            return kind, dim
        return None

    def _sp_calls(self, node: ast.AST) -> list[tuple[ast.Call, str, int | None]]:
        out = []
        for sub in nodes_of(node, ast.Call):
            if isinstance(sub, ast.Call):
                kind = self._kind(sub)
                if kind is not None:
                    out.append((sub, kind[0], kind[1]))
        return out

    # -- the walk -------------------------------------------------------------------------------------

    def finish(self) -> None:
        tree = self.ctx.tree
        self._helpers = _local_helpers(tree)
        for node in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
            if node.name not in self._helpers:
                self._check(node)

    def _ulysses(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A function that all-to-alls its tensors from sequence shards to head shards must bring the result
        back (``gather_heads_scatter_seq``) itself: the next layer expects this rank's sequence shard."""
        calls = nodes_of(func, ast.Call)
        to_heads = [n for n in calls if isinstance(n, ast.Call) and _called(n) in _TO_HEADS]
        if not to_heads or any(isinstance(n, ast.Call) and _called(n) in _TO_SEQ for n in calls):
            return
        moved = {
            name
            for n in nodes_of(func, ast.Assign)
            if isinstance(n, ast.Assign) and any(c in to_heads for c in _walk(n.value))
            for t in n.targets
            for name in _target_names(t)
        }
        for n in nodes_of(func, ast.Return):
            if isinstance(n, ast.Return) and n.value is not None:
                if any(c in to_heads for c in _walk(n.value)) or _names(n.value) & moved:
                    return  # a helper: its caller brings the result back
        first = min(to_heads, key=lambda n: (n.lineno, n.col_offset))
        self.report(
            first,
            f"`{func.name}` moves its tensors from sequence shards to head shards (`{_called(first)}`) but never "
            f"moves the result back (`{_BACK[_called(first) or '']}`): the layers after it get the full sequence "
            "with a fraction of the heads instead of this rank's sequence shard",
        )

    def _input_layout(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, sp_calls: list[tuple[ast.Call, str, int | None]]
    ) -> None:
        """A tower's ``forward`` gathering, slicing or padding its input along an axis that the tower's own
        ``dummy_forward`` (the layout the data has) gives to a feature size: ``input_features`` arrives as
        ``(len, num_mel_bins)`` and is gathered on dim 1 without being permuted first. The input's axes are
        followed through its rebindings (``x = x.permute(1, 0)``, ``x.T``, ``x.transpose(0, 1)``, ``x.contiguous()``)
        in line order; any other rebinding ends the reading, and an input the forward did permute is left to the
        axis checks of its gathers and slices. Reported at the forward's first read of the input, where it is
        taken in without the permutation."""
        if not isinstance(func, ast.FunctionDef):
            return
        cls = forward_owner(self.ctx.tree, func)
        layouts = dummy_input_layouts(self.ctx.tree, cls) if cls is not None else {}
        if not layouts:
            return
        positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)][1:]
        known = {*positional, *(a.arg for a in func.args.kwonlyargs)}
        for key, layout in layouts.items():
            name = positional[int(key[1:])] if key.startswith("#") and int(key[1:]) < len(positional) else key
            if name not in known or not any(label and FEATURE_AXIS.search(label) for label in layout):
                continue
            rebinds = sorted(
                (
                    n
                    for n in nodes_of(func, ast.Assign)
                    if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
                ),
                key=lambda n: n.lineno,
            )
            reads = sorted(
                (c for c in sp_calls if _first_name(c[0]) == name and c[2] is not None),
                key=lambda c: c[0].lineno,
            )
            for call, _kind, dim in reads:
                current: tuple[str | None, ...] | None = layout
                for stmt in rebinds:
                    if stmt.lineno >= call.lineno or current is None:
                        break
                    current = relaid(stmt.value, name, current) if len(stmt.targets) == 1 else None
                if current != layout or dim is None or not -len(current) <= dim < len(current):
                    continue  # unknown, or permuted by the forward: a wrong axis after that is the gather's own
                label = current[dim]
                if not (label and FEATURE_AXIS.search(label)):
                    continue
                entry = min(
                    (
                        n
                        for n in nodes_of(func, ast.Name)
                        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                    ),
                    key=lambda n: (n.lineno, n.col_offset),
                )
                shown = ", ".join(lab or "?" for lab in layout)
                self.report(
                    entry,
                    f"`{name}` enters `{cls}.forward` in the layout `{cls}.dummy_forward` builds it in, the "
                    f"layout of the data (`({shown})`), and is not permuted: `{_called(call)}` at line "
                    f"{call.lineno} takes its dim {dim}, `{label}` in that layout, as the sequence axis; "
                    "permute the input to the layout the forward reads first",
                )
                return

    def _output_gather_dims(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, sp_calls: list[tuple[ast.Call, str, int | None]]
    ) -> None:
        """``x = slice_input_tensor(x, dim=1)`` ... ``x = gather_outputs(x, gather_dim=2)``: a tensor cut to this
        rank's shard on one axis and gathered back (before the head) on another. The slice is the reference:
        the gather must undo it on the same axis (both axes counted from the same end)."""
        assigned: dict[int, str] = {}
        for n in nodes_of(func, ast.Assign):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                assigned[id(n.value)] = n.targets[0].id
        cut: dict[str, tuple[int, ast.Call]] = {}  # name -> (axis, slice call) of its last SP slice
        for call, kind, dim in sorted(sp_calls, key=lambda c: (c[0].lineno, c[0].col_offset)):
            first = _first_name(call)
            target = assigned.get(id(call))
            if first is None or target != first:
                if target is not None:
                    cut.pop(target, None)
                continue
            if kind in ("slice", "pad_slice"):
                if dim is None:
                    cut.pop(first, None)
                else:
                    cut[first] = (dim, call)
            elif kind == "gather" and first in cut:
                axis, sliced = cut.pop(first)
                if (
                    dim is not None
                    and (dim < 0) == (axis < 0)
                    and dim != axis
                    and not _relaid(func, first, sliced.lineno, call.lineno)
                ):
                    self.report(
                        call,
                        f"`{first}` is gathered on dim {dim}, but it was cut to this rank's shard on dim {axis} "
                        f"(line {sliced.lineno}): the gather concatenates the ranks along another axis, so the "
                        "output keeps a rank-local sequence with its other axis multiplied",
                    )
            else:
                cut.pop(first, None)

    def _check(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if "scatter_heads" in self.ctx.source.text or "async_ulysses" in self.ctx.source.text:
            self._ulysses(func)
        sp_calls = self._sp_calls(func)
        kinds = {kind for _, kind, _ in sp_calls}
        if kinds & {"slice", "pad_slice"}:
            self._unsliced_companions(func)
            if "gather" in kinds:
                self._output_gather_dims(func, sp_calls)
        if "gather" in kinds and "input_ids" in self.ctx.source.text:
            self._local_id_masks(func)
        if not kinds & {"gather", "slice", "pad", "unpad"}:
            return
        if "dummy_forward" in self.ctx.source.text:
            self._input_layout(func, sp_calls)
        self._func = func
        ordered: list[tuple[ast.stmt, bool]] = []
        _statements(func.body, False, ordered)
        flow = _Flow()
        pads: list[tuple[int, str, ast.Call]] = []  # (index, name, call) of each SP-guarded pad
        reads: list[tuple[int, bool, set[str]]] = []
        for index, (stmt, guard) in enumerate(ordered):
            self._index = index
            if isinstance(stmt, (ast.If, ast.While)):
                reads.append((index, guard, _all_names(stmt.test)))
                continue
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                reads.append((index, guard, _all_names(stmt.iter)))
                self._bind(flow, _target_names(stmt.target), stmt.iter, stmt)
                continue
            if isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try)):
                continue
            reads.append((index, guard, _all_names(stmt)))
            if isinstance(stmt, ast.Assign):
                value = stmt.value
                for target in stmt.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                        self._fill(flow, target.value.id, value, stmt, target.slice)
                names = [
                    n for t in stmt.targets if not isinstance(t, ast.Subscript) for n in _target_names(t)
                ]
                self._slice_checks(flow, value, stmt, index, ordered, reads, guard)
                self._bind(flow, names, value, stmt)
                kind = self._kind(value)
                if guard and kind is not None and kind[0] == "pad":
                    pads.extend((index, name, value) for name in names)  # type: ignore[misc]
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
                self._slice_checks(flow, stmt.value, stmt, index, ordered, reads, guard)
                self._bind(
                    flow, _target_names(stmt.target), stmt.value, stmt, keep=isinstance(stmt, ast.AugAssign)
                )
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                if (
                    isinstance(call.func, ast.Attribute)
                    and call.func.attr in ("append", "extend", "insert")
                    and isinstance(call.func.value, ast.Name)
                    and any(_names(arg) & flow.full for arg in call.args)
                ):
                    flow.full.add(call.func.value.id)  # a list collecting full-sequence pieces
                if (
                    isinstance(call.func, ast.Attribute)
                    and call.func.attr == "masked_scatter_"
                    and isinstance(call.func.value, ast.Name)
                    and len(call.args) == 2
                ):
                    self._fill(flow, call.func.value.id, call.args[1], stmt, call.args[0])
        self._unsliced(func, flow)
        self._unsliced_pads(pads, ordered)
        self._unsliced_masks(func, flow, ordered)
        self._guards_agree(func, flow)

    def _bind(
        self, flow: _Flow, names: list[str], value: ast.AST, stmt: ast.stmt, keep: bool = False
    ) -> None:
        kind = self._kind(value)
        gathers = [(c, d) for c, k, d in self._sp_calls(value) if k == "gather"]
        used = _names(value)
        # `x = x.masked_scatter(mask, src)`
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            func = value.func
            if func.attr == "masked_scatter" and isinstance(func.value, ast.Name) and len(value.args) == 2:
                self._fill(flow, func.value.id, value.args[1], stmt, value.args[0])
        for name in names:
            if name not in used and not keep:
                flow.produced[name] = stmt
            if kind is not None and kind[0] in ("slice", "pad_slice"):
                if name in flow.gathered:
                    flow.slice_backs.setdefault(name, []).append(self._index)
                    flow.round_trips.append((name, flow.gathered[name][2], stmt))
                flow.full.discard(name)
                flow.gathered.pop(name, None)
                flow.fills.discard(name)
            elif gathers:
                flow.full.add(name)
                flow.gathered[name] = (gathers[0][0], gathers[0][1], stmt)
                flow.fills.discard(name)
                flow.writes[name] = stmt
            elif used & flow.full:
                flow.full.add(name)
                if name in flow.gathered:
                    flow.writes[name] = stmt
            elif not keep:
                flow.full.discard(name)
                flow.gathered.pop(name, None)
                flow.fills.discard(name)

    def _fill(
        self, flow: _Flow, target: str, source: ast.AST, stmt: ast.stmt, mask: ast.expr | None = None
    ) -> None:
        """``target`` (a sequence) receives media rows ``source`` by ``mask``."""
        if target not in flow.gathered:
            return
        flow.fills.add(target)
        if mask is not None:
            flow.fill_masks.append((target, mask, stmt, self._index))
        flow.writes[target] = stmt
        if not isinstance(source, ast.Name):
            return
        src = source.id
        if src in flow.gathered:
            call, dim, src_stmt = flow.gathered[src]
            flow.fill_pairs.append((target, flow.gathered[target][2], src, src_stmt))
            if dim is not None and dim not in (0, -2):
                self.report(
                    call,
                    f"`{src}` holds flattened media rows `(tokens, hidden)` filled into `{target}` at line "
                    f"{stmt.lineno}, but its sequence-parallel shards are gathered on dim {dim}: the hidden "
                    "sizes are concatenated instead of the rows (gather them on dim 0)",
                )
            return
        if src in flow.full:
            return
        produced = flow.produced.get(src)
        at = produced if produced is not None else stmt
        self.report(
            (at.lineno, at.col_offset, at.lineno, at.col_offset + len(src)),
            f"`{src}` is filled into `{target}` at line {stmt.lineno}, which holds the gathered full sequence "
            f"(gathered at line {flow.gathered[target][2].lineno}), but `{src}` itself is never gathered: each "
            "sequence-parallel rank scatters only its own shard of media rows into the placeholders of the "
            "full sequence (gather it on dim 0 under the same guard)",
        )

    def _other_axis(self, flow: _Flow, call: ast.Call, name: str, dim: int | None, but: str) -> None:
        """A later sequence-parallel step on ``name`` (``call``, on ``dim``) works on another axis than its gather:
        reported once per gather, ``but`` saying what the step does."""
        _, gdim, gstmt = flow.gathered[name]
        if gdim is None or dim is None or gdim == dim or id(gstmt) in flow.axis_reported:
            return
        flow.axis_reported.add(id(gstmt))
        self.report(call, f"`{name}` is gathered on dim {gdim} (line {gstmt.lineno}) but {but}")

    def _slice_checks(
        self,
        flow: _Flow,
        value: ast.AST,
        stmt: ast.stmt,
        index: int,
        ordered: list[tuple[ast.stmt, bool]],
        reads: list[tuple[int, bool, set[str]]],
        guard: bool,
    ) -> None:
        calls = self._sp_calls(value)
        for call, kind, dim in calls:
            name = _first_name(call)
            if kind in ("pad", "unpad") and name in flow.gathered:
                done = "removed" if kind == "unpad" else "added"
                self._other_axis(
                    flow,
                    call,
                    name,
                    dim,
                    f"its sequence-parallel padding is {done} on dim {dim}: the gather and the padding work on "
                    "different axes, one of them is not the sequence",
                )
            elif kind == "slice" and name is not None and name in flow.gathered:
                self._other_axis(
                    flow,
                    call,
                    name,
                    dim,
                    f"sliced back on dim {dim}: the rank keeps a shard of another axis than the one it gathered",
                )
        for call, kind, _ in calls:
            name = _first_name(call)
            if kind != "unpad" or name is None or name in flow.full or not guard:
                continue
            # removing the sequence-parallel padding of a tensor no gather reached: it is still this rank's
            # shard (the padding sits on the last rank only). Point at the first SP-guarded statement that
            # reads it since it was bound (where its gather belongs).
            last_bind = flow.produced.get(name)
            start = next((i for i, (s, _) in enumerate(ordered) if s is last_bind), -1) if last_bind else -1
            at = stmt
            for i, in_guard, names in reads:
                if start < i <= index and in_guard and name in names:
                    at = ordered[i][0]
                    break
            self.report(
                (at.lineno, at.col_offset, at.lineno, at.col_offset + 2),
                f"`{name}` is unpadded as the gathered full sequence at line {stmt.lineno} (`{_called(call)}`) "
                f"but no gather reaches it in `{self._func.name}`: under sequence parallelism it still holds "
                "this rank's shard, so the full-sequence work after it (and the slice back) runs on a shard "
                "(gather it first)",
            )

    def _guards_agree(self, func: ast.AST, flow: _Flow) -> None:
        """The gather and the slice of one round trip, and the gathers of a fill's target and of its media rows,
        must run under the same condition (beyond the SP switch itself): a gather under
        `if self.training and sp_enabled:` undone under `if sp_enabled:` slices a shard of a shard in eval."""
        sigs = _guard_conditions(func)
        reported: set[int] = set()

        def check(first: ast.stmt, second: ast.stmt, name: str, what: str) -> None:
            a, b = sigs.get(id(first), frozenset()), sigs.get(id(second), frozenset())
            if a == b or id(second) in reported:
                return
            reported.add(id(second))

            def describe(conds: frozenset[str]) -> str:
                return (
                    "the SP switch alone"
                    if not conds
                    else f"the SP switch and `{' and '.join(sorted(conds))}`"
                )

            self.report(
                second,
                f"`{name}` is {what} at line {second.lineno} under {describe(b)}, but its counterpart at line "
                f"{first.lineno} runs under {describe(a)}: when those differ (eval vs training) one side runs "
                "without the other and the ranks' shapes disagree (guard both the same way)",
            )

        for name, gather, back in flow.round_trips:
            check(gather, back, name, "sliced back")
        for _target, target_gather, src, src_gather in flow.fill_pairs:
            check(target_gather, src_gather, src, "gathered")

    def _unsliced(self, func: ast.AST, flow: _Flow) -> None:
        """A gathered sequence that received media rows must be sliced back before the function ends."""
        parents = _parents(func)
        for name in sorted(flow.fills):
            if name not in flow.gathered:
                continue
            call, _, gstmt = flow.gathered[name]
            last = flow.writes.get(name, gstmt)
            at = _after(last, gstmt, parents)
            self.report(
                call if at is None else (at.lineno, at.col_offset, at.lineno, at.col_offset + 2),
                f"`{name}` is gathered to the full sequence at line {gstmt.lineno} and receives media rows, but "
                f"`{getattr(func, 'name', '?')}` never slices it back to this rank's shard: every "
                "sequence-parallel rank feeds the whole sequence to the layers after it (slice it on the dim it "
                "was gathered on)",
            )

    def _unsliced_masks(self, func: ast.AST, flow: _Flow, ordered: list[tuple[ast.stmt, bool]]) -> None:
        """A mask of media positions in the gathered sequence, read again after the sequence is sliced back to
        this rank's shard, must be sliced to the shard as well (``mask[:, start:end]`` or a slice helper)."""
        parents = _parents(func)
        done: set[str] = set()
        ranged = {
            name
            for stmt, _ in ordered
            if isinstance(stmt, ast.Assign) and _rank_range(stmt.value)
            for t in stmt.targets
            for name in _target_names(t)
        }
        for target, mask, fill, at in flow.fill_masks:
            backs = [k for k in flow.slice_backs.get(target, []) if k > at]
            if not backs:
                continue
            for name in sorted(self._mask_roots(mask, target, ordered[:at])):
                if name in done:
                    continue
                read = None
                for j in range(at + 1, len(ordered)):
                    stmt = ordered[j][0]
                    if _rebinds(stmt, name) and (
                        _shard_of(stmt, name, self)
                        or not _reads_in_value(stmt, name)
                        or bool(_stmt_reads(stmt) & ranged)
                    ):
                        break  # sliced to the shard (or to a rank's range of it), or rebuilt, before any read
                    if j > backs[0] and not ordered[j][1] and name in _stmt_reads(stmt):
                        # (a read under an SP guard is shard-aware code: it computes the rank's range; so is a
                        # read next to a rank's range of it, `rank_mask if rank_mask is not None else mask`)
                        if _stmt_reads(stmt) & ranged:
                            continue
                        read = stmt
                        break
                if read is None:
                    continue
                done.add(name)
                place = _after(fill, fill, parents)
                line = place.lineno if place is not None else (fill.end_lineno or fill.lineno)
                col = place.col_offset if place is not None else fill.col_offset
                self.report(
                    (line, col, line, col + 2),
                    f"`{name}` marks media positions in the gathered full sequence (the fill at line "
                    f"{fill.lineno}), `{target}` is sliced back to this rank's shard at line "
                    f"{ordered[backs[0]][0].lineno}, but `{name}` is read again at line {read.lineno} unsliced: "
                    "its positions are the full sequence's, not this rank's (slice it to the rank's range after "
                    "the fill)",
                )

    def _mask_roots(self, mask: ast.expr, target: str, before: list[tuple[ast.stmt, bool]]) -> set[str]:
        """Names of masks (``*mask*``) the fill's mask expression is built from, following local bindings."""
        names = _names(mask) - {target}
        seen: set[str] = set()
        for _ in range(3):
            more: set[str] = set()
            for name in names - seen:
                seen.add(name)
                for stmt, _guard in reversed(before):
                    if isinstance(stmt, ast.Assign) and any(name in _target_names(t) for t in stmt.targets):
                        more |= _names(stmt.value) - {target}
                        break
            names |= more
        return {n for n in names if "mask" in n.lower()}

    def _local_id_masks(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A function that gathers the embedded sequence (`gather_outputs(inputs_embeds, gather_dim=1)`) must
        build its media masks from the gathered ids too: the `input_ids` it receives are this rank's shard."""
        calls = self._sp_calls(func)
        gathers_sequence = any(
            kind == "gather" and dim == 1 and "embed" in (_first_name(call) or "")
            for call, kind, dim in calls
        )
        back = [
            call.lineno for call, kind, _ in calls if kind == "slice" and "embed" in (_first_name(call) or "")
        ]
        until = min(back) if back else None  # after the slice-back the local ids match the local sequence
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        ids = [p for p in params if p.endswith("input_ids")]
        if not gathers_sequence or not ids:
            return
        guarded: set[int] = set()
        for node in _walk(func):
            if isinstance(node, ast.If) and _sp_guard(node.test):
                guarded.update(id(n) for n in _walk(node))
        for name in ids:
            shared = False
            for node in _walk(func):
                if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                    shared = True  # re-bound (gathered under another form): not the raw shard
                elif (
                    isinstance(node, ast.Call)
                    and "gather" in (_called(node) or "")
                    and any(isinstance(n, ast.Name) and n.id == name for a in node.args for n in _walk(a))
                ):
                    shared = True
            if shared:
                continue
            for node in _walk(func):
                if id(node) in guarded or until is not None and getattr(node, "lineno", 0) > until:
                    continue
                hit = None
                if (
                    isinstance(node, ast.Call)
                    and "mask" in (_called(node) or "").lower()
                    and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == name
                ):
                    hit = node
                elif (
                    isinstance(node, ast.Compare)
                    and isinstance(node.left, ast.Name)
                    and node.left.id == name
                    and any(isinstance(op, ast.Eq) for op in node.ops)
                    and any("token" in ast.unparse(c) for c in node.comparators)
                ):
                    hit = node
                if hit is not None:
                    self.report(
                        hit,
                        f"the media mask is built from `{name}`, this rank's shard of the ids, while this "
                        "function gathers the embedded sequence to its full length: the mask covers 1/sp of "
                        f"the positions (all-gather `{name}` over the SP group first)",
                    )

    def _unsliced_companions(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """In a function that slices tensors to this rank's shard, a tensor built from the full media grid
        (`self.pos_interp(grid_thw)`) and combined element-wise with the rank-local sequence input must be
        sliced too, like the rotary tables built from the same grid."""
        args = [a.arg for a in [*func.args.posonlyargs, *func.args.args] if a.arg not in ("self", "cls")]
        if not args:
            return
        sequence = args[0]
        grid: dict[str, ast.Assign] = {}
        for node in _walk(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
                and self._kind(node.value) is None
                and any(
                    isinstance(n, ast.Name) and "grid" in n.id
                    for a in [*node.value.args, *(k.value for k in node.value.keywords)]
                    for n in _walk(a)
                )
            ):
                grid.setdefault(node.targets[0].id, node)
        if not grid:
            return
        sliced = {
            _first_name(call) for call, kind, _ in self._sp_calls(func) if kind in ("slice", "pad_slice")
        }
        for node in _walk(func):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult))):
                continue
            sides = (node.left, node.right)
            names = [side.id for side in sides if isinstance(side, ast.Name)]
            if len(names) != 2 or sequence not in names:
                continue
            other = names[1] if names[0] == sequence else names[0]
            if other in grid and other not in sliced and other != sequence:
                self.report(
                    node,
                    f"`{other}` is built from the full media grid (line {grid[other].lineno}) and combined with "
                    f"this rank's `{sequence}` without being sliced to the rank's shard, while this function "
                    "slices its other side tensors: the shapes differ (or the rows misalign) on every SP run",
                )

    def _unsliced_pads(
        self, pads: list[tuple[int, str, ast.Call]], ordered: list[tuple[ast.stmt, bool]]
    ) -> None:
        """A side tensor padded under the SP guard must reach a slice."""
        for index, name, call in pads:
            live = {name}
            paired = False
            for stmt, _ in ordered[index + 1 :]:
                if isinstance(stmt, (ast.If, ast.While, ast.With, ast.AsyncWith, ast.Try)):
                    continue
                value = (
                    stmt.iter if isinstance(stmt, (ast.For, ast.AsyncFor)) else getattr(stmt, "value", None)
                )
                if value is None:
                    continue
                if any(k != "pad" and _first_name(c) in live for c, k, _ in self._sp_calls(value)):
                    paired = True
                    break
                if isinstance(stmt, (ast.For, ast.AsyncFor)):
                    targets = _target_names(stmt.target)
                elif isinstance(stmt, ast.Assign):
                    targets = [
                        n for t in stmt.targets if not isinstance(t, ast.Subscript) for n in _target_names(t)
                    ]
                elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                    targets = _target_names(stmt.target)
                else:
                    continue
                derived = _carries(value, live)
                for target in targets:
                    if derived:
                        live.add(target)
                    elif not isinstance(stmt, ast.AugAssign):
                        live.discard(target)
                if not live:
                    break
            if not paired:
                self.report(
                    call,
                    f"`{name}` is padded to the sequence-parallel length under the SP guard but never sliced to "
                    "this rank's shard afterwards: the layers get a full-length tensor next to rank-local "
                    "patches (slice it like the hidden states, e.g. with `sp_pad_and_slice`)",
                )


def _all_names(node: ast.AST) -> set[str]:
    return {n.id for n in _walk(node) if isinstance(n, ast.Name)}


_META = frozenset({"device", "dtype", "shape", "ndim", "size", "dim", "numel", "is_cuda"})


def _names(node: ast.AST) -> set[str]:
    """Names whose data the expression reads: ``x.device``, ``x.dtype``, ``x.shape``, ``x.size(...)`` read only
    metadata (``y.to(x.device, x.dtype)`` does not make ``y`` hold ``x``'s rows)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        sub = stack.pop()
        if isinstance(sub, ast.Attribute) and sub.attr in _META and isinstance(sub.value, ast.Name):
            continue
        if isinstance(sub, ast.Name):
            out.add(sub.id)
            continue
        stack.extend(ast.iter_child_nodes(sub))
    return out


_SP_WORDS = ("sp_enabled", "sp_size", "sequence_parallel", "ulysses", "sp_group", "cp_enabled")


def _guard_conditions(func: ast.AST) -> dict[int, frozenset[str]]:
    """id(statement) -> the conditions, beyond the SP switch, of the SP guards around it (the other conjuncts of
    `if self.training and get_parallel_state().sp_enabled:`)."""
    out: dict[int, frozenset[str]] = {}

    def visit(body: list[ast.stmt], extra: frozenset[str]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            out[id(stmt)] = extra
            if isinstance(stmt, ast.If):
                inner = extra
                if _sp_guard(stmt.test):
                    parts = (
                        stmt.test.values
                        if isinstance(stmt.test, ast.BoolOp) and isinstance(stmt.test.op, ast.And)
                        else [stmt.test]
                    )
                    inner = extra | {
                        ast.unparse(p) for p in parts if not any(w in ast.unparse(p) for w in _SP_WORDS)
                    }
                visit(stmt.body, inner)
                visit(stmt.orelse, extra)
            else:
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, block, None) or [], extra)
                for handler in getattr(stmt, "handlers", None) or []:
                    visit(handler.body, extra)

    visit(getattr(func, "body", []), frozenset())
    return out


def _rebinds(stmt: ast.stmt, name: str) -> bool:
    targets = (
        stmt.targets
        if isinstance(stmt, ast.Assign)
        else [stmt.target]
        if isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor))
        else []
    )
    return any(name in _target_names(t) for t in targets)


def _reads_in_value(stmt: ast.stmt, name: str) -> bool:
    value = getattr(stmt, "value", None) if not isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt.iter
    return value is not None and name in _all_names(value)


def _stmt_reads(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.If, ast.While)):
        return _all_names(stmt.test)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return _all_names(stmt.iter)
    if isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try)):
        return set()
    if isinstance(stmt, ast.Assign):
        return _all_names(stmt.value) | {
            n.id
            for t in stmt.targets
            if isinstance(t, ast.Subscript)
            for n in _walk(t)
            if isinstance(n, ast.Name)
        }
    return _all_names(stmt)


def _rank_range(value: ast.AST) -> bool:
    """``x[:, start:end]`` whose bounds name the rank (``rank_start``, ``sp_rank * n``), or ``x.narrow(...)``."""
    if isinstance(value, ast.Subscript):
        return any(
            isinstance(n, ast.Slice) and any("rank" in m.lower() for m in _all_names(n))
            for n in _walk(value.slice)
        )
    return (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "narrow"
    )


def _shard_of(stmt: ast.stmt, name: str, rule: SpGatherSlicePairing) -> bool:
    """``name = name[..., a:b]`` (a range of the sequence), or ``name = <slice helper>(name, ...)``."""
    value = getattr(stmt, "value", None)
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == name:
        return any(isinstance(n, ast.Slice) for n in _walk(value.slice))
    if isinstance(value, ast.Call):
        kind = rule._kind(value)
        return kind is not None and kind[0] in ("slice", "pad_slice") and _first_name(value) == name
    return False


def _carries(value: ast.AST, live: set[str]) -> bool:
    """Whether ``value`` is (a view, a method result, an element or a sum of) one of the ``live`` tensors,
    not the output of a layer that only takes it as a side input (``blk(hidden, rotary_pos_emb=emb)``)."""
    if isinstance(value, ast.Name):
        return value.id in live
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_carries(elt, live) for elt in value.elts)
    if isinstance(value, ast.BinOp):
        return _carries(value.left, live) or _carries(value.right, live)
    if isinstance(value, ast.UnaryOp):
        return _carries(value.operand, live)
    if isinstance(value, (ast.Subscript, ast.Attribute, ast.Starred)):
        return _carries(value.value, live)
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and _carries(func.value, live):
            return True  # emb.cos(), x.reshape(...)
        return bool(value.args) and _carries(
            value.args[0], live
        )  # torch.cat((emb, emb)), pad_tensor(emb, ...)
    return False


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _statements(body: list[ast.stmt], guard: bool, out: list[tuple[ast.stmt, bool]]) -> None:
    """Statements in source order (compound statements before their blocks), each with whether an SP guard
    (`if ... sp_enabled ...:`, either branch) encloses it."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append((stmt, guard))
        if isinstance(stmt, ast.If):
            sp = _sp_guard(stmt.test)
            _statements(stmt.body, guard or sp, out)
            _statements(stmt.orelse, guard or (sp and bool(stmt.orelse)), out)  # the SP-off side: shard-aware
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
            for block in ("body", "orelse", "finalbody"):
                _statements(getattr(stmt, block, None) or [], guard, out)
            for handler in getattr(stmt, "handlers", None) or []:
                _statements(handler.body, guard, out)


def _parents(func: ast.AST) -> dict[int, tuple[ast.AST, list[ast.stmt]]]:
    """id(statement) -> (its parent node, the block list holding it)."""
    out: dict[int, tuple[ast.AST, list[ast.stmt]]] = {}
    for node in _walk(func):
        for block in ("body", "orelse", "finalbody"):
            stmts = getattr(node, block, None)
            if isinstance(stmts, list):
                for stmt in stmts:
                    if isinstance(stmt, ast.stmt):
                        out[id(stmt)] = (node, stmts)
        for handler in getattr(node, "handlers", None) or []:
            for stmt in handler.body:
                out[id(stmt)] = (handler, handler.body)
    return out


def _after(
    last: ast.stmt, anchor: ast.stmt, parents: dict[int, tuple[ast.AST, list[ast.stmt]]]
) -> ast.stmt | None:
    """Where a statement undoing ``anchor`` after ``last`` belongs: in the innermost block that also
    (transitively) holds ``anchor``, the first SP-guarded ``if`` after ``last``, else the statement after it."""
    anchor_chain: set[int] = set()
    node: ast.AST = anchor
    while id(node) in parents:
        anchor_chain.add(id(node))
        node = parents[id(node)][0]
    node = last
    while id(node) in parents:
        parent, block = parents[id(node)]
        if any(id(s) in anchor_chain for s in block):
            position = next(i for i, s in enumerate(block) if s is node)
            rest = block[position + 1 :]
            guarded = next((s for s in rest if isinstance(s, ast.If) and _sp_guard(s.test)), None)
            return guarded if guarded is not None else (rest[0] if rest else None)
        node = parent
    return None
