"""NPU628-NPU632: checks built for regions of distributed / trainer / loading code, each tried on variants
written in other files and functions of its region than the VeOmni history case it came from."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# -- NPU628: a parallel flag accepted and not honoured ----------------------------------------------------


def test_628_sp_helper_gather_ignores_flag_the_scatter_honours() -> None:
    # a sequence-parallel helper (not an attention backend): the scatter tests the flag, the gather does not
    assert _lines(
        "NPU628",
        """
        from veomni.distributed.parallel_state import get_parallel_state

        def sp_block(hidden, skip_sp: bool = False):
            ps = get_parallel_state()
            if ps.sp_enabled and not skip_sp:
                hidden = slice_input_tensor(hidden, dim=1)
            hidden = block(hidden)
            if ps.sp_enabled:
                hidden = gather_outputs(hidden, gather_dim=1)
            return hidden
        """,
        "veomni/distributed/sequence_parallel/toy_block.py",
    ) == [8]


def test_628_ep_dispatch_drops_async_flag() -> None:
    # an MoE token dispatcher that accepts an async switch and never reads it
    assert _lines(
        "NPU628",
        """
        import torch.distributed as dist
        from veomni.distributed.parallel_state import get_parallel_state

        def dispatch_tokens(tokens, splits, async_op: bool = False):
            group = get_parallel_state().ep_group
            out = tokens.new_empty(tokens.shape)
            dist.all_to_all_single(out, tokens, splits, splits, group=group)
            return out
        """,
        "veomni/distributed/moe/toy_dispatch.py",
    ) == [4]


def test_628_vision_tower_cp_flag_in_method() -> None:
    # a method of a model class: the context-parallel gather ignores the flag at its first gate
    assert _lines(
        "NPU628",
        """
        from veomni.distributed.parallel_state import get_parallel_state

        class Tower:
            def forward(self, x, gather_output: bool = True):
                cp_enabled = get_parallel_state().cp_enabled
                x = self.blocks(x)
                return x
        """,
        "veomni/models/transformers/toy_vl/modeling_toy_vl.py",
    ) == [5]


def test_628_quiet_when_flag_folded_into_condition_or_not_parallel() -> None:
    assert (
        _lines(
            "NPU628",
            """
            from veomni.distributed.parallel_state import get_parallel_state

            def attn(q, skip_ulysses: bool = False, causal: bool = True):
                enabled = get_parallel_state().ulysses_enabled and not skip_ulysses
                if enabled:
                    q = gather_seq_scatter_heads(q)
                return q

            def plain(x, use_cache: bool = False):
                return get_parallel_state().sp_size * x

            def helper(x, gather: bool = False):  # an interface stub: the implementations read it
                '''Gather or not.'''
                ...
            """,
            "veomni/ops/kernels/attention/toy.py",
        )
        == []
    )


# -- NPU629: a None guard excluding the argument the guarded call receives ---------------------------------


def test_629_sharded_loader_skipped_with_plan() -> None:
    assert _lines(
        "NPU629",
        """
        def load_weights(model, path, parallel_plan=None):
            if parallel_plan is None and is_sharded(model):
                load_sharded(model, path, parallel_plan=parallel_plan)
            else:
                load_full(model, path)
        """,
        "veomni/models/toy_loader.py",
    ) == [2]


def test_629_checkpoint_save_with_group() -> None:
    assert _lines(
        "NPU629",
        """
        class Saver:
            def save(self, state, path, process_group=None):
                if self.async_enabled and process_group is None:
                    fut = async_save(state, path, process_group)
                    return fut
                return save(state, path)
        """,
        "veomni/checkpoint/toy_saver.py",
    ) == [3]


def test_629_parallel_wrapper_with_plan_assigned() -> None:
    assert _lines(
        "NPU629",
        """
        def wrap(model, mesh, plan=None):
            if plan is None and mesh.ndim > 1:
                model = parallelize_module(model, mesh, plan)
            return model
        """,
        "veomni/distributed/toy_wrap.py",
    ) == [2]


def test_629_quiet_when_rebound_or_only_stored_or_logged() -> None:
    assert (
        _lines(
            "NPU629",
            """
            def f(model, groups=None, log=None):
                if groups is None and model.ep:
                    groups = default_groups(model)
                    build(model, groups)
                if groups is None and model.debug:
                    setattr(model, "groups", groups)
                    logger.info("groups %s", groups)
                if groups is None:
                    build(model, groups)
            """,
            "veomni/optim/toy.py",
        )
        == []
    )


# -- NPU630: a DTensor branch storing a plain tensor -------------------------------------------------------


def test_630_checkpoint_restore_copies_full_tensor() -> None:
    assert _lines(
        "NPU630",
        """
        from torch.distributed.tensor import DTensor

        def restore(model, state):
            for name, param in model.named_parameters():
                full = state[name]
                if isinstance(param, DTensor):
                    param.data.copy_(full.to(param))
                else:
                    param.data.copy_(full)
        """,
        "veomni/checkpoint/toy_restore.py",
    ) == [7]


def test_630_ep_loader_reads_layout_and_drops_it() -> None:
    assert _lines(
        "NPU630",
        """
        def load_expert(module, name, tensor):
            param = module._parameters[name]
            if hasattr(param, "placements"):
                mesh = param.device_mesh
                placements = param.placements
                module._parameters[name].data.copy_(tensor.to(dtype=param.dtype))
        """,
        "veomni/distributed/moe/toy_load.py",
    ) == [4]


def test_630_broadcast_from_rank0_method() -> None:
    assert _lines(
        "NPU630",
        """
        class Broadcaster:
            def put(self, module, key, value):
                orig = module._buffers[key]
                if hasattr(orig, "device_mesh") and value is not None:
                    module._buffers[key] = value.cuda().to(orig)
        """,
        "veomni/utils/toy_broadcast.py",
    ) == [5]


def test_630_quiet_when_distributed() -> None:
    assert (
        _lines(
            "NPU630",
            """
            from torch.distributed.tensor import DTensor, distribute_tensor

            def put(module, key, value):
                orig = module._buffers[key]
                if isinstance(orig, DTensor):
                    mesh = orig.device_mesh
                    placements = orig.placements
                    module._buffers[key] = distribute_tensor(value.to(orig.dtype), mesh, placements)
                else:
                    module._buffers[key] = value.to(orig)
            """,
            "veomni/utils/toy_broadcast.py",
        )
        == []
    )


# -- NPU631: deferred init without the weights path --------------------------------------------------------


def test_631_task_script_call() -> None:
    assert _lines(
        "NPU631",
        """
        def build_parallelize_model(model, weights_path=None, **kwargs):
            ...

        def main(args, model):
            model = build_parallelize_model(model, init_device="meta", enable_gradient_checkpointing=True)
        """,
        "tasks/toy_train.py",
    ) == [5]


def test_631_local_kwargs_dict_without_path() -> None:
    assert _lines(
        "NPU631",
        """
        def parallelize_fsdp2(model, model_path=None, **kwargs):
            ...

        class OmniTrainer:
            def build(self, args):
                kwargs = {"basic_modules": []}
                if args.lora:
                    kwargs["adapter_path"] = args.lora_path
                self.model = parallelize_fsdp2(self.model, init_device=args.init_device, **kwargs)
        """,
        "veomni/trainer/toy_omni_trainer.py",
    ) == [9]


def test_631_positional_parameter() -> None:
    assert _lines(
        "NPU631",
        """
        def materialize(model, checkpoint_path=None, *, init_device="cpu"):
            ...

        def load_teacher(teacher):
            return materialize(teacher, init_device="meta")
        """,
        "veomni/models/toy_teacher.py",
    ) == [5]


def test_631_quiet_when_given_or_unknown() -> None:
    assert (
        _lines(
            "NPU631",
            """
            def build_parallelize_model(model, weights_path=None, **kwargs):
                ...

            def a(model, path, extra):
                build_parallelize_model(model, path, init_device="meta")
                build_parallelize_model(model, init_device="meta", weights_path=path)
                build_parallelize_model(model, init_device="meta", **extra)
                kwargs = {"weights_path": path}
                build_parallelize_model(model, init_device="meta", **kwargs)
                unknown_builder(model, init_device="meta")
            """,
            "veomni/trainer/toy.py",
        )
        == []
    )


# -- NPU632: a boolean slot with an integer default --------------------------------------------------------


def test_632_argument_dataclass_field() -> None:
    assert _lines(
        "NPU632",
        """
        from dataclasses import dataclass, field

        @dataclass
        class AcceleratorArguments:
            ep_size: int = field(default=1)
            ep_outside: bool = field(default=1)
        """,
        "veomni/arguments/toy_arguments.py",
    ) == [6]


def test_632_kwonly_list_and_optional() -> None:
    assert _lines(
        "NPU632",
        """
        from typing import List, Optional

        def build_mesh(sizes: List[int], *, outside: List[bool] = [0], reshard: Optional[bool] = 0):
            ...
        """,
        "veomni/distributed/toy_mesh.py",
    ) == [3, 3]


def test_632_trainer_method_default() -> None:
    assert _lines(
        "NPU632",
        """
        class Trainer:
            def save(self, step: int = 0, async_save: bool = 1):
                ...
        """,
        "veomni/trainer/toy_trainer.py",
    ) == [2]


def test_632_quiet_on_bools_and_ints() -> None:
    assert (
        _lines(
            "NPU632",
            """
            from typing import Tuple

            def f(sizes: Tuple[int] = (1,), flags: Tuple[bool] = (False,), n: int = 1, on: bool = True):
                ...
            """,
            "veomni/distributed/toy.py",
        )
        == []
    )


def test_628_wrapper_drops_flag_instead_of_forwarding() -> None:
    # a model-side wrapper with no parallel state of its own: it accepts the flag and never forwards it
    assert _lines(
        "NPU628",
        """
        class VisionAttention:
            def forward(self, hidden, cu_seqlens, skip_ulysses=True):
                q, k, v = self.qkv(hidden).chunk(3, dim=-1)
                return self.attn_fn(q, k, v, cu_seqlens=cu_seqlens)

            def interface(self, hidden, skip_ulysses=True):
                raise NotImplementedError
        """,
        "veomni/models/transformers/toy_vl/generated/patched_modeling_toy_vl_gpu.py",
    ) == [2]


# -- NPU633: one call of a collective outside the gate its siblings run under ------------------------------


def test_633_loss_gather_without_sp_gate() -> None:
    assert _lines(
        "NPU633",
        """
        from veomni.distributed.parallel_state import get_parallel_state

        def token_loss(logits, labels):
            ps = get_parallel_state()
            if ps.sp_enabled:
                labels = gather_outputs(labels, gather_dim=1, group=ps.sp_group)
            return ce(logits, labels)

        def token_acc(logits, labels):
            ps = get_parallel_state()
            if not ps.sp_enabled:
                return acc(logits, labels)
            return acc(logits, gather_outputs(labels, gather_dim=1, group=ps.sp_group))

        def token_count(labels):
            labels = gather_outputs(labels, gather_dim=1)
            return labels.ne(-100).sum()
        """,
        "veomni/utils/toy_loss_utils.py",
    ) == [16]


def test_633_moe_all_to_all_outside_ep_gate() -> None:
    assert _lines(
        "NPU633",
        """
        import torch.distributed as dist

        class Experts:
            def dispatch(self, x, splits):
                if self.ep_enabled:
                    dist.all_to_all_single(self.buf, x, splits, splits, group=self.ep_group)
                return self.buf

            def combine(self, y, splits):
                while self.ep_size > 1:
                    dist.all_to_all_single(self.out, y, splits, splits, group=self.ep_group)
                    break
                return self.out

            def grads(self, g, splits):
                dist.all_to_all_single(self.gbuf, g, splits, splits, group=self.ep_group)
                return self.gbuf
        """,
        "veomni/distributed/moe/toy_experts.py",
    ) == [16]


def test_633_foundation_slice_without_ulysses_gate() -> None:
    assert _lines(
        "NPU633",
        """
        from veomni.distributed.parallel_state import get_parallel_state

        class Foundation:
            def embed_text(self, ids):
                x = self.embed(ids)
                return slice_input_tensor(x, dim=1) if get_parallel_state().ulysses_enabled else x

            def embed_image(self, pixels):
                x = self.vit(pixels)
                if get_parallel_state().ulysses_enabled:
                    x = slice_input_tensor(x, dim=0)
                return x

            def embed_audio(self, feats):
                x = self.audio(feats)
                return slice_input_tensor(x, dim=0)
        """,
        "veomni/models/seed_omni/toy_foundation.py",
    ) == [16]


def test_633_quiet_when_all_gated_or_never_gated() -> None:
    assert (
        _lines(
            "NPU633",
            """
            from veomni.distributed.parallel_state import get_parallel_state

            def a(x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x)
                return x

            def b(x):
                assert get_parallel_state().sp_enabled
                return gather_outputs(x)

            def c(x, idx):  # an index gather, gated or not, is no collective
                ps = get_parallel_state()
                if ps.sp_enabled:
                    x = x.gather(1, idx)
                if ps.sp_enabled:
                    x = torch.gather(x, dim=1, index=idx)
                return torch.gather(x, -1, idx)

            def e(x):  # a query of the parallel state is no collective
                ps = get_parallel_state()
                if ps.sp_enabled:
                    group = get_parallel_state().sp_group
                    rank = get_parallel_state().sp_rank
                return x
            """,
            "veomni/utils/toy.py",
        )
        == []
    )


def test_633_quiet_on_or_gates_world_size_gates_and_gated_helpers() -> None:
    src = {
        "veomni/models/transformers/toy/modeling_toy.py": """
            from veomni.distributed.parallel_state import get_parallel_state

            def head(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=1)
                return x

            def vision(self, x):
                ps = get_parallel_state()
                if ps.sp_enabled or ps.cp_enabled:
                    x = gather_outputs(x, gather_dim=0)
                return x

            def audio(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=0)
                return x
            """,
        "veomni/models/transformers/toy/modeling_toy2.py": """
            from veomni.distributed.parallel_state import get_parallel_state

            def _gather_seq(x):  # private and not called here: its callers elsewhere gate it
                return gather_outputs(x, gather_dim=1)

            def _gather_twice(x):
                x = x + 1
                return gather_outputs(x, gather_dim=1)

            def head(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=1)
                    x = _gather_twice(x)
                return x

            def audio(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=0)
                return x
            """,
        "veomni/models/transformers/toy/modeling_toy3.py": """
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state

            def sync_a(x):
                if get_parallel_state().dp_enabled:
                    dist.all_reduce(x)
                return x

            def sync_b(x):
                if get_parallel_state().dp_enabled:
                    dist.all_reduce(x)
                return x

            def sync_c(x):
                if dist.is_initialized() and dist.get_world_size() > 1:
                    dist.all_reduce(x)
                return x
            """,
    }
    for path, code in src.items():
        assert _lines("NPU633", code, path) == [], path


def test_628_direction_flags_and_nested_flag_tests_pair_no_gates() -> None:
    assert (
        _lines(
            "NPU628",
            """
            import torch.nn.functional as F
            from veomni.distributed.parallel_state import get_parallel_state

            def column_parallel_forward(x, weight, gather_output: bool = True):
                ps = get_parallel_state()
                if ps.tp_enabled:
                    x = copy_to_tp_region(x)
                out = F.linear(x, weight)
                if ps.tp_enabled and gather_output:
                    out = gather_from_tp_region(out)
                return out

            def row_parallel_forward(x, weight, input_is_parallel: bool = False):
                ps = get_parallel_state()
                if ps.tp_enabled and not input_is_parallel:
                    x = scatter_to_tp_region(x)
                out = F.linear(x, weight)
                if ps.tp_enabled:
                    out = reduce_from_tp_region(out)
                return out

            def sp_attn(q, k, v, skip_ulysses=False):
                ps = get_parallel_state()
                if ps.ulysses_enabled and not skip_ulysses:
                    q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                out = kernel(q, k, v)
                if ps.ulysses_enabled:
                    if not skip_ulysses:
                        out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
                return out
            """,
            "veomni/distributed/tp_layers.py",
        )
        == []
    )


def test_628_quiet_on_del_flag_and_functions_with_no_parallel_path() -> None:
    assert (
        _lines(
            "NPU628",
            """
            import torch
            import torch.distributed as dist

            def all_reduce_mean(tensor, group=None, async_op: bool = False):
                del async_op  # kept for API compatibility
                dist.all_reduce(tensor, group=group)
                return tensor

            def save_state(model, path, distributed: bool = False):
                torch.save(model.state_dict(), path)

            class Hook:
                def __call__(self, module, args, kwargs, async_op=False):
                    return args, kwargs
            """,
            "veomni/distributed/helpers.py",
        )
        == []
    )


def test_630_quiet_when_branch_distributes_with_subject_layout() -> None:
    assert (
        _lines(
            "NPU630",
            """
            import torch
            from torch.distributed.tensor import DTensor, distribute_tensor

            def load_one(param, full):
                if isinstance(param, DTensor):
                    full = full.to(param)  # dtype and local device of the shard
                    param.data.copy_(distribute_tensor(full, param.device_mesh, param.placements))
                else:
                    param.data.copy_(full.to(param))

            def load_two(param, full):
                if hasattr(param, "device_mesh"):
                    mesh = param.device_mesh
                    placements = param.placements
                    shard = distribute_tensor(full.to(param.dtype), device_mesh=param.device_mesh, placements=param.placements)
                    param.data.copy_(shard)
            """,
            "veomni/models/loader.py",
        )
        == []
    )


def test_629_quiet_on_print_and_on_filling_the_none_in() -> None:
    assert (
        _lines(
            "NPU629",
            """
            def build(model, lr, param_groups=None, mesh=None):
                if param_groups is None and is_ep(model):
                    param_groups = default_groups(model, param_groups)
                if mesh is None and cfg.auto:
                    print_rank0(mesh)
                return AdamW(param_groups, lr)
            """,
            "veomni/trainer/t.py",
        )
        == []
    )


def test_632_message_words_the_default_by_its_value() -> None:
    text = """
        from dataclasses import dataclass

        @dataclass
        class Args:
            enable_sp: bool = 0
            verbose: bool = 1
        """
    src = SourceFile.from_text("veomni/models/m.py", textwrap.dedent(text).lstrip("\n"))
    messages = {d.line: d.message for d in lint_source(src, ["NPU632"], Settings()) if d.code == "NPU632"}
    assert "`0` is falsy" in messages[5] and "truthy" not in messages[5]
    assert "`1` is truthy" in messages[6]


def test_633_public_ungated_function_still_reported() -> None:
    assert _lines(
        "NPU633",
        """
        from veomni.distributed.parallel_state import get_parallel_state

        def text_head(x):
            if get_parallel_state().sp_enabled:
                x = gather_outputs(x, gather_dim=1)
            return x

        def vision_head(x):
            if get_parallel_state().sp_enabled:
                x = gather_outputs(x, gather_dim=0)
            return x

        def audio_head(x):
            return gather_outputs(x, gather_dim=0)

        def _helper(x):
            return gather_outputs(x, gather_dim=0)

        def video_head(x):
            if get_parallel_state().sp_enabled:
                x = _helper(x)
            return x
        """,
        "veomni/distributed/toy_sp_gates.py",
    ) == [14]
