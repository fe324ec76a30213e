"""Device, dispatch and distributed contracts generalised from the round-4 dev misses, on shapes of our own:
a device built on ``cuda:`` or passed positionally as ``"cuda"`` (NPU102), a collective's output buffers on the
CPU when the gathered name is rebound afterwards (NPU103), an OpSlot called where it may have no kernel and a
handle's existence tested with an eager fallback (NPU203), an implementation read from the environment (NPU204),
and an autograd function whose backward is not the adjoint of its forward's collective (NPU606)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import OP_SLOT, VEOMNI_OP, Project

MODEL = "veomni/models/transformers/toy/modeling_toy.py"
SPEC = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"


def _lint(code: str, codes: list[str], path: str = MODEL, project: Project | None = None) -> list:
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip())
    return lint_source(src, codes, Settings(), project=project)


# -- NPU102 -------------------------------------------------------------------------------------------


def test_npu102_device_names_built_on_cuda_in_every_device_position() -> None:
    code = """
    import torch


    def place(model, rank, world):
        local = torch.device(f"cuda:{rank % world}")
        model.to("cuda:%d" % rank)
        buf = torch.zeros(4, device="cuda:{}".format(rank))
        return local, buf
    """
    diags = _lint(code, ["NPU102"])
    assert [d.line for d in diags] == [5, 6, 7]
    assert all("builds a CUDA device name" in d.message for d in diags)


def test_npu102_device_name_concatenated_from_cuda_and_its_fix() -> None:
    code = """
    def place(model, rank):
        model.to("cuda" + ":" + str(rank))
    """
    diags = _lint(code, ["NPU102"])
    assert [d.line for d in diags] == [2]
    fix = diags[0].fix
    assert fix is not None and any(e.content == "get_device_type()" for e in fix.edits)


def test_npu102_cuda_passed_positionally_to_a_helper_through_a_spec() -> None:
    code = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_toy.py")


    @config.override_method("ToyRotaryEmbedding.__init__")
    def toy_rotary_init_patched(self, config, device=None):
        self.rope_init_fn = self.compute_default_rope_parameters
        inv_freq, self.attention_scaling = self.rope_init_fn(config, "cuda:0")
        self.register_buffer("inv_freq", inv_freq, persistent=False)
    """
    diags = _lint(code, ["NPU102"], path=SPEC)
    assert [d.line for d in diags] == [9]
    assert "argument 2 of `self.rope_init_fn(...)`" in diags[0].message


def test_npu102_quiet_for_cuda_strings_that_are_not_devices() -> None:
    code = """
    import warnings

    import torch


    def check(name, table):
        warnings.warn("cuda")
        if hasattr(torch, "cuda") and name.endswith("cuda"):
            return table.pop("cuda", None), "".join(["cuda", name])
        return getattr(torch, "cuda"), f"{name}-cuda"
    """
    assert _lint(code, ["NPU102"]) == []


# -- NPU103 -------------------------------------------------------------------------------------------


def test_npu103_all_gather_buffers_on_cpu_before_the_gathered_name_is_rebound() -> None:
    code = """
    import torch
    import torch.distributed as dist
    from torch import nn


    class ToyTextModel(nn.Module):
        def forward(self, input_ids, sp_group):
            world = dist.get_world_size(sp_group)
            pieces = []
            for _ in range(world):
                pieces.append(torch.zeros(input_ids.shape, dtype=input_ids.dtype))
            dist.all_gather(pieces, input_ids, group=sp_group)
            input_ids = torch.cat(pieces, dim=1)
            return self.embed(input_ids)
    """
    diags = _lint(code, ["NPU103"])
    assert [d.line for d in diags] == [11]


# -- NPU203 -------------------------------------------------------------------------------------------

_SLOT_TREE = Project(root="/x", generation=OP_SLOT)
_OP_TREE = Project(root="/x", generation=VEOMNI_OP)


def test_npu203_opslot_called_under_is_bound_or_not_use_eager_impl() -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    toy_lb_loss = OpSlot("load_balancing_loss", "standard")
    toy_experts = OpSlot("moe_experts", "standard")


    def toy_aux_loss(router_logits, num_experts):
        if toy_lb_loss.is_bound:
            return toy_lb_loss(router_logits, num_experts)
        return router_logits.softmax(-1).mean()


    def toy_experts_forward(self, hidden_states, idx, weights):
        return toy_experts(self, hidden_states, idx, weights) if not toy_experts.use_eager_impl else self.eager(hidden_states)


    def toy_fine(self, hidden_states):
        if toy_experts.use_non_eager_impl:
            return toy_experts(self, hidden_states, None, None)
        if toy_experts.is_bound:
            self.log("bound")
        return self.eager(hidden_states)
    """
    diags = _lint(code, ["NPU203"], project=_SLOT_TREE)
    assert [d.line for d in diags] == [8, 14]
    assert "bound to eager" in diags[0].message and "never bound" in diags[1].message
    assert diags[0].fix is not None  # `toy_lb_loss.use_non_eager_impl`


def test_npu203_handle_existence_tested_with_an_eager_fallback() -> None:
    code = """
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyMLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.veomni_mlp = VeomniOp("swiglu_mlp", "standard", config.ops_config.swiglu_mlp_implementation)

        def forward(self, x):
            if not hasattr(self, "veomni_mlp"):
                return self.down(self.act(self.gate(x)) * self.up(x))
            return self.veomni_mlp(x, self.gate.weight, None, self.up.weight, None, self.down.weight, None)


    class ToyNorm(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.veomni_norm = VeomniOp("rms_norm", "standard", config.ops_config.rms_norm_implementation)

        def forward(self, x):
            norm = getattr(self, "veomni_norm", None)
            if self.veomni_norm is not None:
                return self.veomni_norm(x, self.weight, 1e-6)
            return x * self.weight


    class ToyPlain(nn.Module):
        def forward(self, x):
            if getattr(self, "proj", None) is None:
                return x
            return self.proj(x)
    """
    diags = _lint(code, ["NPU203"], project=_OP_TREE)
    assert [d.line for d in diags] == [11, 23]
    assert "whether the handle exists" in diags[0].message


# -- NPU204 -------------------------------------------------------------------------------------------


def test_npu204_implementation_from_the_environment_directly_through_a_local_and_a_constant() -> None:
    code = """
    import os
    from os import getenv

    from torch import nn
    from veomni.ops import VeomniOp

    ROPE_IMPL = os.environ["TOY_ROPE"]


    class ToyBlock(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.veomni_norm = VeomniOp("rms_norm", "standard", getenv("TOY_NORM", "liger_kernel").lower())
            impl = os.environ.get("TOY_MOE", "eager")
            self.veomni_moe = VeomniOp("moe_experts", "standard", impl)
            self.veomni_rope = VeomniOp("rope", "full", ROPE_IMPL)
    """
    diags = _lint(code, ["NPU204"], project=_OP_TREE)
    assert [d.line for d in diags] == [13, 14, 16]
    assert 'its default "liger_kernel" is bound on every device' in diags[0].message
    assert "`TOY_MOE`" in diags[1].message and "default" not in diags[1].message
    assert "`TOY_ROPE`" in diags[2].message


# -- NPU606 -------------------------------------------------------------------------------------------

DIST = "veomni/distributed/toy_parallel.py"


def test_npu606_imported_gather_helper_and_reduce_scatter_forward() -> None:
    code = """
    import torch
    import torch.distributed as dist
    from veomni.distributed.comm import seq_all_gather


    class _GatherHidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return seq_all_gather(x, group)

        @staticmethod
        def backward(ctx, grad):
            idx = dist.get_rank(ctx.group)
            return grad.chunk(dist.get_world_size(ctx.group))[idx], None


    class _ReduceScatterHidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            out = x.new_empty(x.shape[0] // dist.get_world_size(group), *x.shape[1:])
            dist.reduce_scatter_tensor(out, x, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad.repeat(2, 1), None


    class _Exchange(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            out = torch.empty_like(x)
            dist.all_to_all_single(out, x, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad, None
    """
    diags = _lint(code, ["NPU606"], path=DIST)
    assert [d.line for d in diags] == [15, 27, 40]
    assert "`_GatherHidden` all-gathers" in diags[0].message
    assert "reduce-scatters" in diags[1].message and "all-to-all" in diags[2].message


def test_npu606_quiet_when_the_adjoint_is_applied_or_nothing_is_communicated() -> None:
    code = """
    import torch
    import torch.distributed as dist
    from veomni.distributed.comm import reduce_from_sp_region


    def _sum_over(x, group):
        dist.all_reduce(x, group=group)
        return x


    class _GatherHidden(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, x, group=group)
            return torch.cat(parts)

        @staticmethod
        def backward(ctx, grad):
            grad = _sum_over(grad.contiguous(), ctx.group)
            return grad.chunk(dist.get_world_size(ctx.group))[dist.get_rank(ctx.group)], None


    class _GatherViaImported(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            out = torch.empty(x.numel() * 2, dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(out, x, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            return reduce_from_sp_region(grad), None


    class _Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None


    class _TokenGather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, index):
            ctx.save_for_backward(index)
            return toy_moe_gather(x, index)

        @staticmethod
        def backward(ctx, grad):
            return grad, None
    """
    assert _lint(code, ["NPU606"], path=DIST) == []


# -- NPU607 -------------------------------------------------------------------------------------------


def test_npu607_rank_slice_along_the_sequence_returned_with_contiguous() -> None:
    code = """
    import torch.distributed as dist


    class ToySequenceSharder:
        def __init__(self, group):
            self.group = group

        def local_part(self, hidden_states):
            rank = dist.get_rank(self.group)
            return hidden_states.split(hidden_states.size(1) // dist.get_world_size(self.group), dim=1)[rank].contiguous()

        def local_rows(self, table):
            rank = dist.get_rank(self.group)
            return table.split(8)[rank].contiguous()

        def local_copy(self, hidden_states):
            rank = dist.get_rank(self.group)
            return hidden_states.split(8, dim=1)[rank].clone()
    """
    diags = _lint(code, ["NPU607"], path=DIST)
    assert [d.line for d in diags] == [10]  # not the rows (dimension 0) nor the clone


def test_npu607_split_along_the_sequence_and_a_local() -> None:
    code = """
    import torch.distributed as dist


    def local_part(hidden_states, group):
        my_rank = dist.get_rank(group)
        part = hidden_states.split(8, dim=1)[my_rank].contiguous()
        return part


    def local_rows(table, group):
        return table.split(8)[dist.get_rank(group)].contiguous()
    """
    diags = _lint(code, ["NPU607"], path=DIST)
    assert [d.line for d in diags] == [6]
    assert diags[0].fix is not None and diags[0].fix.edits[0].content == ".clone()"


# -- NPU608 -------------------------------------------------------------------------------------------


def test_npu608_root_gets_the_layers_keywords_through_update_or_setdefault() -> None:
    code = """
    from torch.distributed.fsdp import fully_shard


    def shard_vlm(vlm, mesh, free_after_forward):
        common = {"mesh": mesh}
        common.update(reshard_after_forward=free_after_forward)
        fully_shard(vlm.visual, **common)
        for block in vlm.language_model.layers:
            fully_shard(block, **common)
        fully_shard(vlm, **common)


    def shard_lm(lm, mesh):
        opts = {"mesh": mesh}
        opts.setdefault("reshard_after_forward", True)
        fully_shard(lm)  # a root alone: nothing sharded before it
        for block in lm.layers:
            fully_shard(block, **opts)
        fully_shard(lm, reshard_after_forward=False, **{k: v for k, v in opts.items() if k != "mesh"})


    def shard_plain(model, mesh):
        for block in model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh)
    """
    diags = _lint(code, ["NPU608"], path="veomni/distributed/toy_fsdp.py")
    assert [d.line for d in diags] == [10]
    assert "through `**common`" in diags[0].message


# -- NPU106 -------------------------------------------------------------------------------------------


def test_npu106_cpu_materialisation_through_a_helper_without_a_buffer_move() -> None:
    code = """
    from veomni.utils.device import get_device_type


    def _empty_on(module, device):
        module.to_empty(device=device)


    def build(model, args):
        where = get_device_type() if not args.offload else "cpu"
        _empty_on(model, where)
        load_weights(model, args.path, where)
        return model


    def build_moved(model, args):
        where = get_device_type() if not args.offload else "cpu"
        _empty_on(model, where)
        model.to(get_device_type())
        return model


    def build_on_accelerator(model):
        model.to_empty(device=get_device_type())
        return model
    """
    diags = _lint(code, ["NPU106"], path="veomni/distributed/toy_build.py")
    assert [d.line for d in diags] == [11]  # the statement after the materialisation
    assert "`model` is materialised on `where`" in diags[0].message


# -- NPU211 -------------------------------------------------------------------------------------------


def test_npu211_required_table_checked_against_the_trees_kernelspec_rows() -> None:
    from npu_lint.veomni.catalog import ANY, GPU, NPU, OpRow

    slot_rows = (
        OpRow("rotary_pos_emb", "full", "npu", NPU),
        OpRow("rotary_pos_emb", "full", "liger_kernel", GPU),
        OpRow("cross_entropy_loss", "causal", "chunk_loss", ANY),
        OpRow("cross_entropy_loss", "causal", "npu", NPU),
    )
    project = Project(root="/x", generation=OP_SLOT, slot_rows=slot_rows)
    code = """
    from typing import Dict

    ASCEND_FALLBACKS: Dict[str, str] = {
        "rotary_pos_emb_implementation": "npu",
        "cross_entropy_loss_implementation": "chunk_loss",
    }
    ASCEND_OK = {"cross_entropy_loss_implementation": ("chunk_loss", "npu")}
    NPU_ONLY_REQUIRED: Dict[str, frozenset] = {
        "cross_entropy_loss_implementation": frozenset({"npu"}),
    }
    """
    diags = _lint(code, ["NPU211"], path="veomni/arguments/toy_args.py", project=project)
    assert diags == []  # the tables' names do not say NPU: ASCEND_* are not read
    code = code.replace("ASCEND_FALLBACKS", "NPU_FALLBACKS").replace("ASCEND_OK", "NPU_OK")
    diags = _lint(code, ["NPU211"], path="veomni/arguments/toy_args.py", project=project)
    assert [d.line for d in diags] == [8]
    assert '`rotary_pos_emb_implementation`: "npu" (selected by `NPU_FALLBACKS`)' in diags[0].message
    assert "chunk_loss" not in diags[0].message  # registered for any device: not NPU-only
    assert "the tree's KernelSpec rows" in diags[0].message


def test_npu204_opslot_bound_from_the_environment_or_a_literal_in_model_code() -> None:
    code = """
    import os

    from veomni.ops.dispatch import OpSlot

    toy_norm = OpSlot("rms_norm", "standard")
    toy_moe = OpSlot("moe_experts", "standard")


    def toy_model_init(self, config):
        toy_norm.bind("liger_kernel")
        choice = os.getenv("TOY_MOE_IMPL", "triton")
        toy_moe.bind(choice)
        toy_norm.bind("eager")
        self.other.bind("liger_kernel")
    """
    diags = _lint(code, ["NPU204"], project=_SLOT_TREE)
    assert [d.line for d in diags] == [10, 12]
    assert 'hard-coded implementation "liger_kernel" bound to the OpSlot `toy_norm`' in diags[0].message
    assert "`TOY_MOE_IMPL`" in diags[1].message


def test_npu203_handle_truthiness_and_a_local_getattr() -> None:
    code = """
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyRope(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.veomni_rope = VeomniOp("rope", "full", config.ops_config.rotary_pos_emb_implementation)

        def forward(self, q, k, cos, sin):
            if not self.veomni_rope:
                return toy_rotate(q, cos, sin), toy_rotate(k, cos, sin)
            return self.veomni_rope(q, k, cos, sin)

        def apply(self, q, k, cos, sin):
            rope = getattr(self, "veomni_rope", None)
            if rope is None:
                return q, k
            return rope(q, k, cos, sin)

        def other(self, x):
            if self.training:
                return x
            return x * 2
    """
    diags = _lint(code, ["NPU203"], project=_OP_TREE)
    assert [d.line for d in diags] == [11, 17]


def test_npu102_device_in_a_mapping_entry_and_returned_by_a_device_function() -> None:
    code = """
    def _infer_device(rank):
        return f"cuda:{rank}"


    def build(model, rank):
        loader_kwargs = {"device_map": "cuda", "dtype": "bfloat16", "name": "cuda"}
        return model.load(**loader_kwargs)


    def describe():
        return "cuda"
    """
    diags = _lint(code, ["NPU102"])
    assert [d.line for d in diags] == [2, 6]
    assert "returned by `_infer_device()`" in diags[0].message and '`"device_map"` entry' in diags[1].message


# -- NPU609 -------------------------------------------------------------------------------------------


def test_npu609_views_handed_to_collectives_directly_and_through_locals() -> None:
    code = """
    import torch
    from torch import distributed as tdist


    class HeadExchange:
        def scatter_heads(self, hidden, out):
            send = hidden.permute(2, 0, 1, 3)
            tdist.all_to_all_single(out, send, group=self.group)
            return out

        def reduce_window(self, grad, out, start, end):
            tdist.reduce_scatter_tensor(out, grad[:, start:end], group=self.group)
            return out

        def exchange_list(self, x, outs):
            tdist.all_to_all(outs, [*x.chunk(4, dim=-1)], group=self.group)
            tdist.all_to_all(outs, [p.contiguous() for p in x.chunk(4, dim=-1)], group=self.group)
            tdist.all_to_all(outs, list(x.chunk(4)), group=self.group)
            return outs

        def receive_into(self, buf):
            tdist.recv(buf.T, src=0)
            tdist.all_reduce(buf.narrow(0, 0, 2))
            return buf
    """
    diags = _lint(code, ["NPU609"], path="veomni/distributed/toy_heads.py")
    assert [d.line for d in diags] == [8, 12, 16, 22]
    fixes = [d.fix is not None for d in diags]
    assert fixes == [True, True, False, False]  # a list of pieces and a written buffer get no fix
    assert "`.permute(...)`" in diags[0].message and "a slice of an inner dimension" in diags[1].message


def test_npu204_configured_implementation_with_a_literal_fallback() -> None:
    code = """
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyBlock(nn.Module):
        def __init__(self, config):
            super().__init__()
            ops = config.ops_config
            self.veomni_moe = VeomniOp("moe_experts", "standard", getattr(ops, "moe_implementation", "fused_triton"))
            self.veomni_norm = VeomniOp("rms_norm", "standard", ops.rms_norm_implementation or "liger_kernel")
            self.veomni_mlp = VeomniOp("swiglu_mlp", "standard", getattr(ops, "swiglu_mlp_implementation", "eager"))
    """
    diags = _lint(code, ["NPU204"], project=_OP_TREE)
    assert [d.line for d in diags] == [9, 10]
    assert 'falls back to the hard-coded implementation "fused_triton"' in diags[0].message
