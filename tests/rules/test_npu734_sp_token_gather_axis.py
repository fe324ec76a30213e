"""NPU734: SP shards of a batch-first token tensor joined on axis 0. Transfer variants: a trainer gathering a
batch key's labels with `gather_outputs`, a seed_omni encoder's all-gather joined by `torch.cat` with the
default axis, M-RoPE position ids in a distributed helper; the sequence axis, a non-SP group, a non-token tensor
and the data pipeline stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU734"], Settings()) if d.code == "NPU734")


def test_trainer_gathers_batch_labels() -> None:
    text = """
    from veomni.distributed.sequence_parallel import gather_outputs


    def compute_logps(self, micro_batch, sp_group):
        all_labels = gather_outputs(micro_batch["labels"], gather_dim={dim}, group=sp_group)
        return all_labels
    """
    path = "veomni/trainer/toy_pref_trainer.py"
    assert _lines(text.format(dim="0"), path) == [5]
    assert _lines(text.format(dim="-1"), path) == []


def test_seed_omni_all_gather_joined_on_the_default_axis() -> None:
    text = """
    import torch
    import torch.distributed as dist


    class ToyEncoder:
        def lm_encode(self, shifted_labels, ulysses_group, world):
            parts = [torch.empty_like(shifted_labels) for _ in range(world)]
            dist.all_gather(parts, shifted_labels, group=ulysses_group)
            full = torch.cat({join})
            return full
    """
    path = "veomni/models/seed_omni/encoder/toy/modeling_toy.py"
    assert _lines(text.format(join="parts"), path) == [9]
    assert _lines(text.format(join="parts, 0"), path) == [9]
    assert _lines(text.format(join="parts, dim=-1"), path) == []
    # another group than the SP one (a data-parallel gather of per-rank batches stacks rows on purpose)
    other = text.replace("ulysses_group", "dp_group")
    assert _lines(other.format(join="parts"), path) == []


def test_mrope_position_ids_and_non_token_tensors() -> None:
    text = """
    from veomni.distributed.sequence_parallel import gather_outputs


    def gather_positions(position_ids, image_embeds, group):
        image_embeds = gather_outputs(image_embeds, gather_dim=0, group=group)
        return gather_outputs(position_ids, {dim}, group=group)
    """
    path = "veomni/distributed/toy_positions.py"
    assert _lines(text.format(dim="0"), path) == [6]
    assert _lines(text.format(dim="-1"), path) == []
    # the data pipeline's per-sample ids are 1-D: axis 0 is their sequence
    assert _lines(text.format(dim="0"), "veomni/data/toy_packing.py") == []


def test_embeddings_and_slices_on_the_batch_axis() -> None:
    text = """
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def merge_media(self, inputs_embeds, input_ids, sp_group):
        inputs_embeds = gather_outputs(inputs_embeds, gather_dim={g}, group=sp_group)
        input_ids = slice_input_tensor(input_ids, dim={s}, group=sp_group)
        return inputs_embeds, input_ids
    """
    path = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
    assert _lines(text.format(g=0, s=1), path) == [5]
    assert _lines(text.format(g=1, s=0), path) == [6]
    assert _lines(text.format(g=1, s=-1), path) == []
    # a vision tower's unbatched patch embeddings are gathered on axis 0
    vision = text.replace("inputs_embeds", "image_embeds")
    assert _lines(vision.format(g=0, s=1), path) == []
