"""Round-17 contracts in the loss, multimodal and registration families, each checked at sites other than the
dev case (other files, regions and names), with the correct code beside it staying quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.corpus import VEOMNI_MAIN, VEOMNI_OP, shared_tree


def _found(rel: str, text: str, codes: list[str]) -> list[tuple[str, int]]:
    src = SourceFile.from_text(rel, textwrap.dedent(text).lstrip("\n"))
    return sorted((d.code, d.line) for d in lint_source(src, codes, Settings(), None))


def _line(text: str, needle: str) -> int:
    return next(i for i, s in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if needle in s)


# --- NPU412: a loss that takes the caller's pre-shifted labels must not shift `labels` over them -------------

_WRAPPER_GOOD = """
import torch.nn.functional as F


def {name}(logits, labels, ignore_index=-100, {param}=None, **kwargs):
    logits = logits.float()
    if {param} is None:
        labels = F.pad(labels, (0, 1), value=ignore_index)
        {param} = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), {param}.view(-1), ignore_index=ignore_index)
"""

_WRAPPER_BAD = """
import torch.nn.functional as F


def {name}(logits, labels, ignore_index=-100, {param}=None, **kwargs):
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    {param} = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), {param}.view(-1), ignore_index=ignore_index)
"""

# never reads the parameter: shifts inline
_INLINE_BAD = """
import torch.nn.functional as F


def {name}(logits, labels, {param}=None):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
"""

_SP_BRANCH_GOOD = """
import torch.nn.functional as F


def {name}(logits, labels, sp_enabled, {param}=None):
    if not sp_enabled:
        if {param} is None:
            {param} = F.pad(labels, (0, 1), value=-100)[..., 1:]
    else:
        if {param} is not None:
            print("already shifted")
        {param} = labels
    return F.cross_entropy(logits.flatten(0, 1), {param}.flatten())
"""

_SITES = [
    ("veomni/ops/kernels/cross_entropy/__init__.py", "causal_loss_wrapper", "shift_labels"),
    (
        "veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_gpu.py",
        "next_token_ce",
        "shift_labels",
    ),
    ("veomni/trainer/dpo_trainer.py", "token_nll", "shifted_labels"),
    ("veomni/models/seed_omni/decoder/lm_head_loss.py", "lm_head_loss", "shift_labels"),
]


def test_npu412_caller_shift_labels_overwritten_anywhere() -> None:
    for rel, name, param in _SITES:
        good = _WRAPPER_GOOD.format(name=name, param=param)
        assert _found(rel, good, ["NPU412"]) == [], rel
        assert _found(rel, _SP_BRANCH_GOOD.format(name=name, param=param), ["NPU412"]) == [], rel
        bad = _WRAPPER_BAD.format(name=name, param=param)
        assert _found(rel, bad, ["NPU412"]) == [("NPU412", _line(bad, "labels[..., 1:]"))], rel


def test_npu412_caller_shift_labels_never_read() -> None:
    for rel, name, param in _SITES:
        bad = _INLINE_BAD.format(name=name, param=param)
        assert ("NPU412", _line(bad, "labels[:, 1:]")) in _found(rel, bad, ["NPU412"]), rel
    # no such parameter: the function's own shift is the only one there is
    plain = _INLINE_BAD.format(name="f", param="reduction").replace("reduction=None", "reduction='mean'")
    assert _found("veomni/ops/kernels/cross_entropy/eager.py", plain, ["NPU412"]) == []


# --- NPU458 / NPU703: moving a name to another device computes nothing: the method is still upstream's ------

_MOVES = [
    # (tree, file, the statement the move goes before, the move)
    (
        VEOMNI_OP,
        "veomni/models_kernel/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py",
        "            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)\n",
        "            special_image_mask = special_image_mask.to(device=inputs_embeds.device)\n",
    ),
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py",
        "            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)\n",
        "            image_features = image_features.to(inputs_embeds.device)\n",
    ),
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/llama/generated/patched_modeling_llama_gpu.py",
        "        hidden_states = self.post_attention_layernorm(hidden_states)\n",
        "        hidden_states = hidden_states.to(self.post_attention_layernorm.weight.device)\n",
    ),
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py",
        "        normed_vision_outputs = self.mm_soft_emb_norm(pooled_vision_outputs)\n",
        "        pooled_vision_outputs = pooled_vision_outputs.to(target_device, non_blocking=True)\n",
    ),
]


def _tree_found(tree: str, rel: str, text: str, codes: list[str]) -> list[str]:
    src = SourceFile.from_text(rel, text)
    return sorted(d.code for d in lint_source(src, codes, Settings(), None))


def test_device_move_in_a_generated_copy_is_upstream_code() -> None:
    codes = ["NPU458", "NPU703", "NPU701", "NPU716"]
    for tree, rel, anchor, move in _MOVES:
        text = (shared_tree(tree) / rel).read_text(encoding="utf-8")
        assert text.count(anchor) == 1, rel
        before = _tree_found(tree, rel, text, codes)
        moved = text.replace(anchor, move + anchor)
        assert _tree_found(tree, rel, moved, codes) == before, rel
        # a cast changes what is computed: that edit of upstream code is still reported
        indent = move[: len(move) - len(move.lstrip())]
        name = move.strip().split(" = ")[0]
        cast = f"{indent}{name} = {name}.to(torch.float16)\n"
        assert "NPU458" in _tree_found(tree, rel, text.replace(anchor, cast + anchor), ["NPU458"]), rel


# --- NPU719: one medium's entry read off a container and handed on, the twin's left in the container ---------

_KEYED = {
    # a collator building the position ids of a packed batch
    "veomni/data/multimodal/omni_collator.py": """
def collate_positions(batch, rope_fn, vid_token):
    ids = batch["input_ids"]
    vid_mask = ids == vid_token
    batch["video_mask"] = vid_mask
    pos = rope_fn(
        ids,
        image_grid_thw=batch.get("image_grid_thw"),
        {twin}attention_mask=batch["attention_mask"],
    )
    return pos
""",
    # a generated model forward computing the rope index from its kwargs
    "veomni/models/transformers/qwen3_vl/generated/patched_modeling_qwen3_vl_npu.py": """
def compute_rope(self, input_ids, mm_inputs, attention_mask):
    video_mask = input_ids == self.config.video_token_id
    position_ids, deltas = self.get_rope_index(
        input_ids,
        image_grid_thw=mm_inputs["image_grid_thw"],
        {twin}attention_mask=attention_mask,
    )
    return position_ids, video_mask
""",
    # a trainer step preparing the multimodal inputs of a micro-batch
    "veomni/trainer/vlm_trainer.py": """
def prepare(self, micro_batch):
    has_video = "pixel_values_videos" in micro_batch
    return self.model.visual_inputs(
        position_ids=micro_batch["position_ids"],
        image_grid_thw=micro_batch.get("image_grid_thw"),
        {twin}with_video=has_video,
    )
""",
}


def test_npu719_twin_entry_left_in_the_container() -> None:
    for rel, text in _KEYED.items():
        good = text.replace("{twin}", "video_grid_thw=TWIN,\n        ")
        holder = "batch" if "batch" in text else ("mm_inputs" if "mm_inputs" in text else "micro_batch")
        good = good.replace("TWIN", f'{holder}.get("video_grid_thw")')
        assert _found(rel, good, ["NPU719"]) == [], rel
        bad = text.replace("{twin}", "")
        assert _found(rel, bad, ["NPU719"]) == [("NPU719", _line(bad, "image_grid_thw="))], rel
    # the other medium has no such entry anywhere in the file (audio carries lengths, not a grid): quiet
    audio = (
        _KEYED["veomni/data/multimodal/omni_collator.py"].replace("vid", "audio").replace("video", "audio")
    )
    assert _found("veomni/data/multimodal/omni_collator.py", audio.replace("{twin}", ""), ["NPU719"]) == []
    # the function handles one medium only: quiet
    image_only = "\n".join(
        s for s in _KEYED["veomni/data/multimodal/omni_collator.py"].splitlines() if "vid" not in s
    )
    assert (
        _found("veomni/data/multimodal/omni_collator.py", image_only.replace("{twin}", ""), ["NPU719"]) == []
    )


# --- NPU206: an Ascend row without its requirement is reported where the requirement goes ---------------------

_ROWS = """
from veomni.ops.registry import CudaKernelRequirement, GpuKernelRequirement, register_op

from . import {mod}


register_op(
    "{op}",
    "{variant}",
    "npu",
    {mod}.forward,
    {mod}.backward,{req}
)
"""


def test_npu206_reported_at_the_row_end_or_the_wrong_requirement() -> None:
    sites = [
        ("veomni/ops/kernels/swiglu/__init__.py", "swiglu", "standard", "swiglu_npu"),
        ("veomni/ops/kernels/rotary/__init__.py", "rotary_pos_emb", "partial", "rope_npu"),
        ("veomni/ops/kernels/layer_norm/__init__.py", "layer_norm", "standard", "ln_ascend"),
    ]
    for rel, op, variant, mod in sites:
        text = _ROWS.format(op=op, variant=variant, mod=mod, req="{req}")
        missing = text.replace("{req}", "")
        assert _found(rel, missing, ["NPU206"]) == [("NPU206", _line(missing, ".backward,"))], rel
        wrong = text.replace("{req}", "\n    requirement=CudaKernelRequirement(),")
        assert _found(rel, wrong, ["NPU206"]) == [("NPU206", _line(wrong, "requirement="))], rel
        good = text.replace("{req}", "\n    requirement=NpuKernelRequirement(),").replace(
            "CudaKernelRequirement,", "CudaKernelRequirement, NpuKernelRequirement,"
        )
        assert _found(rel, good, ["NPU206"]) == [], rel


# --- NPU220: an NPU KernelSpec whose factory builds the GPU row's kernel is reported at that factory's import --

_SPECS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _gpu_factory():
    from .{gpu_mod} import {gpu_fn}

    return _adapt({gpu_fn})


def _ascend_factory():
    from .{npu_mod} import {npu_fn}

    return _adapt({npu_fn})


KERNEL_REGISTRY.register(
    KernelSpec(
        name="triton",
        op_name="{op}",
        variant="standard",
        factory=_gpu_factory,
        hardware=HardwareRequirement(device_type="gpu"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="{op}",
        variant="standard",
        factory=_ascend_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)
"""


def test_npu220_reported_at_the_factory_import() -> None:
    sites = [
        ("veomni/ops/kernels/rotary/__init__.py", "rotary_pos_emb", "fused_rope", "apply_fused_rope"),
        ("veomni/ops/kernels/rms_norm/__init__.py", "rms_norm", "fused_norm", "fused_rms_norm"),
        ("veomni/ops/kernels/swiglu/__init__.py", "swiglu", "liger_swiglu", "swiglu_forward"),
    ]
    for rel, op, gpu_mod, gpu_fn in sites:
        good = _SPECS.format(op=op, gpu_mod=gpu_mod, gpu_fn=gpu_fn, npu_mod="npu_" + op, npu_fn=op + "_npu")
        assert _found(rel, good, ["NPU220"]) == [], rel
        bad = _SPECS.format(op=op, gpu_mod=gpu_mod, gpu_fn=gpu_fn, npu_mod=gpu_mod, npu_fn=gpu_fn)
        lines = textwrap.dedent(bad).lstrip("\n").splitlines()
        imports = [i for i, s in enumerate(lines, 1) if s.strip() == f"from .{gpu_mod} import {gpu_fn}"]
        assert _found(rel, bad, ["NPU220"]) == [("NPU220", imports[1])], rel


# --- NPU219: an NPU parameter never read is reported at the return that answers without it --------------------

_RESOLVERS = {
    "veomni/ops/dispatch.py": """
def pick_kernel(op, *, {npu}=None):
    name = CONFIG.get(op, "eager")
    {use}return name
""",
    "veomni/models/transformers/qwen3/qwen3_npu_patch_gen_config.py": """
def attention_impl(config, {npu}=None):
    impl = getattr(config, "_attn_implementation", "eager")
    {use}return impl
""",
    "veomni/distributed/moe/backend.py": """
def moe_backend(cfg, npu_backend=None):
    backend = cfg.moe_implementation
    {use}return backend
""",
}


def test_npu219_reported_at_the_return() -> None:
    for rel, text in _RESOLVERS.items():
        npu = "npu_backend" if "npu_backend" in text else "npu_as"
        target = text.strip().splitlines()[1].split(" = ")[0].strip()
        bad = text.replace("{npu}", npu).replace("{use}", "")
        assert _found(rel, bad, ["NPU219"]) == [("NPU219", _line(bad, "return "))], rel
        use = f"if {npu} is not None and {target} == 'npu':\n        return {npu}\n    "
        good = text.replace("{npu}", npu).replace("{use}", use)
        assert _found(rel, good, ["NPU219"]) == [], rel


# --- NPU701 / NPU703: an unpatched generated forward that lost the statement consuming a media input ----------

_GEMMA3_BLOCK = """            if token_type_ids is not None:
                mask_kwargs["block_sequence_ids"] = get_block_sequence_ids_for_mask(
                    token_type_ids, device=inputs_embeds.device
                )
"""


def test_npu701_reported_where_the_consuming_statement_was() -> None:
    rel = "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py"
    text = (shared_tree(VEOMNI_MAIN) / rel).read_text(encoding="utf-8")
    assert text.count(_GEMMA3_BLOCK) == 1
    codes = ["NPU701", "NPU703"]
    assert _tree_found(VEOMNI_MAIN, rel, text, codes) == []
    edited = text.replace(_GEMMA3_BLOCK, "")
    src = SourceFile.from_text(rel, edited)
    found = [(d.code, d.line) for d in lint_source(src, codes, Settings(), None)]
    cut = text.index(_GEMMA3_BLOCK)
    following = edited[: edited.index("sliding_mask_kwargs = mask_kwargs.copy()", cut)].count("\n") + 1
    # the input is reported where its consumer stood; no dummy-forward demand on an unpatched upstream method
    assert found == [("NPU701", following)]
    # another statement of the same method removed that reads no media input: NPU701 stays quiet
    other = text[:cut] + text[cut:].replace("            sliding_mask_kwargs = mask_kwargs.copy()\n", "", 1)
    assert [d.code for d in lint_source(SourceFile.from_text(rel, other), ["NPU701"], Settings(), None)] == []


def test_npu412_shift_labels_handed_on_in_a_closure_is_read() -> None:
    text = """
    import torch.nn.functional as F


    def chunked_ce(hidden, weight, labels, chunk=1024, shift_labels=None):
        labels = labels[..., 1:].contiguous()
        hidden = hidden[..., :-1, :].contiguous()

        def one(h, y):
            return ce(F.linear(h, weight), y, shift_labels)

        return sum(one(h, y) for h, y in zip(hidden.split(chunk, 1), labels.split(chunk, 1)))
    """
    assert _found("veomni/ops/kernels/cross_entropy/chunked.py", text, ["NPU412"]) == []


def test_npu412_read_on_a_branch_that_returns_does_not_guard_the_shift() -> None:
    for rel, name, param in _SITES:
        early = f"""
        import torch.nn.functional as F


        def {name}(logits, labels, {param}=None, return_log_probs=False):
            if return_log_probs:
                return per_token(logits, labels, {param}=({param}))
            labels = F.pad(labels, (0, 1), value=-100)
            {param} = labels[..., 1:].contiguous()
            return F.cross_entropy(logits.flatten(0, 1), {param}.flatten())
        """
        assert _found(rel, early, ["NPU412"]) == [("NPU412", _line(early, "labels[..., 1:]"))], rel
        guarded = early.replace(
            f"            {param} = labels[..., 1:]",
            f"            if {param} is None:\n                {param} = labels[..., 1:]",
        )
        assert _found(rel, guarded, ["NPU412"]) == [], rel
