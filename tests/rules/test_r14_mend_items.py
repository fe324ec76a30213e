"""Review items on the rules merged from r14disp: NPU314 survives an editor's dangling lock symlink beside the
adapter; a cached run re-reports when a file outside the model packages that a rule reads changes (a sibling
kernel backend, an implementation resolver)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from tests.rules.snippets import WAN_ADAPTER, WAN_EAGER, lint_snippet

_ADAPTER = """import torch_npu
from einops import rearrange


def rope_apply_npu(x, cos, sin, head_dim):
    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = torch_npu.npu_rotary_mul(x, cos, sin)
    return x_out.to(x.dtype)
"""


def _check(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    from npu_lint.cli import main

    monkeypatch.chdir(tree)
    capsys.readouterr()
    code = main(["check", "--jobs", "1", "--output-format", "concise", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_npu314_dangling_lock_symlink_beside_the_adapter(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    package = tmp_path / "veomni" / "models" / "transformers" / "toy"
    package.mkdir(parents=True)
    adapter = package / "npu_patch.py"
    adapter.write_text(_ADAPTER)
    os.symlink("user@host.1234", package / ".#npu_patch.py")  # an Emacs lock file
    (package / "dir.py").mkdir()
    code, out = _check(tmp_path, monkeypatch, capsys, "--no-cache", "--select", "NPU314", ".")
    assert code == 1 and "internal error" not in out and "NPU314" in out, out
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(_ADAPTER.encode())))
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        "--no-cache",
        "--select",
        "NPU314",
        "--stdin-filename",
        str(adapter),
        "-",
    )
    assert code == 1 and "internal error" not in out and "NPU314" in out, out


QUIET = 0.3


def test_cached_run_rereads_a_changed_sibling_backend(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    from npu_lint.engine import cache

    monkeypatch.setattr(cache, "RACY_NS", 10**8)
    op = tmp_path / "veomni" / "ops" / "kernels" / "toy_loss"
    op.mkdir(parents=True)
    for d in (tmp_path / "veomni", tmp_path / "veomni" / "ops", tmp_path / "veomni" / "ops" / "kernels", op):
        (d / "__init__.py").write_text("")
    eager, npu = op / "eager.py", op / "npu.py"
    eager.write_text("def eager_toy_loss(logits, labels, ignore_index=-100):\n    return logits\n")
    npu.write_text("def npu_toy_loss(labels, logits, ignore_index=-100):\n    return logits\n")
    time.sleep(QUIET)
    code, out = _check(
        tmp_path, monkeypatch, capsys, "--select", "NPU316", "veomni/ops/kernels/toy_loss/npu.py"
    )
    assert code == 1 and "npu.py" in out, out
    # the eager sibling takes the NPU order now: npu.py is unchanged, its cached finding is stale
    eager.write_text("def eager_toy_loss(labels, logits, ignore_index=-100):\n    return logits\n")
    time.sleep(QUIET)
    code, out = _check(
        tmp_path, monkeypatch, capsys, "--select", "NPU316", "veomni/ops/kernels/toy_loss/npu.py"
    )
    assert code == 0 and "NPU316" not in out, out


def test_cached_run_rereads_a_changed_eager_counterpart(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """NPU314 reads the eager function beside an adapter wherever the adapter is: outside the model packages and
    `veomni/ops/kernels`, the module beside a `torch_npu` importer is in the project fingerprint."""
    from npu_lint.engine import cache

    monkeypatch.setattr(cache, "RACY_NS", 10**8)
    wan = tmp_path / "veomni" / "models" / "diffusers" / "wan"  # no spec, no generated/: no model package
    wan.mkdir(parents=True)
    (tmp_path / "veomni" / "ops").mkdir()  # a VeOmni tree
    eager, adapter = wan / "modeling_wan.py", wan / "npu_patch.py"
    eager.write_text(WAN_EAGER.format(merge=".flatten(2)"))
    adapter.write_text(WAN_ADAPTER)
    time.sleep(QUIET)
    target = "veomni/models/diffusers/wan/npu_patch.py"
    code, out = _check(tmp_path, monkeypatch, capsys, "--select", "NPU314", target)
    assert code == 1 and "rope_apply" in out, out
    # the eager function keeps the per-head layout now: the adapter is unchanged, its cached finding is stale
    eager.write_text(WAN_EAGER.format(merge=""))
    time.sleep(QUIET)
    code, out = _check(tmp_path, monkeypatch, capsys, "--select", "NPU314", target)
    assert code == 0 and "NPU314" not in out, out


_RESOLVER = """from veomni.ops.config import get_ops_config


def resolve_op_impl(field: str) -> str:
    cfg = get_ops_config()
    return "eager" if cfg is None else getattr(cfg, field, "eager")


def resolve_moe_impl() -> str:
    return resolve_op_impl("{field}")
"""


def test_npu204_rereads_a_changed_resolver(tmp_path: Path) -> None:
    """The resolver's field is memoised by the resolver file's state, not by its name."""
    from npu_lint.veomni.imports import ModuleIndex
    from npu_lint.veomni.resolvers import wrapped_field

    utils = tmp_path / "veomni" / "models_kernel" / "utils"
    utils.mkdir(parents=True)
    for d in (tmp_path / "veomni", tmp_path / "veomni" / "models_kernel", utils):
        (d / "__init__.py").write_text("")
    module = utils / "op_utils.py"
    module.write_text(_RESOLVER.format(field="rotary_pos_emb_implementation"))
    index = ModuleIndex(tmp_path)
    origin = "veomni.models_kernel.utils.op_utils"
    assert wrapped_field(index, origin, "resolve_moe_impl") == "rotary_pos_emb_implementation"
    module.write_text(_RESOLVER.format(field="moe_implementation"))
    os.utime(module, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert wrapped_field(index, origin, "resolve_moe_impl") == "moe_implementation"


def test_fingerprint_covers_kernel_backends_and_resolvers(tmp_path: Path) -> None:
    from npu_lint.veomni.layout import shared_module_files

    for rel in (
        "veomni/ops/kernels/toy/npu.py",
        "veomni/models_kernel/utils/op_utils.py",
        "veomni/utils/x.py",
        "veomni/models/diffusers/wan/npu_patch.py",
        "veomni/models/diffusers/wan/modeling_wan.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    got = {os.path.relpath(f, tmp_path) for f in shared_module_files(tmp_path)}
    assert {
        "veomni/ops/kernels/toy/npu.py",
        "veomni/models_kernel/utils/op_utils.py",
        "veomni/utils/x.py",
    } <= got
    assert "veomni/models/diffusers/wan/modeling_wan.py" not in got
    adapters = ["veomni/models/diffusers/wan/npu_patch.py", "veomni/ops/kernels/toy/npu.py"]
    with_adapters = [os.path.relpath(f, tmp_path) for f in shared_module_files(tmp_path, adapters)]
    assert set(with_adapters) == got | {"veomni/models/diffusers/wan/modeling_wan.py"}
    assert len(with_adapters) == len(set(with_adapters))  # each file once


def _codes(code: str, text: str, path: str = "veomni/ops/kernels/rope/npu.py") -> list[int]:
    return [d.line for d in lint_snippet(path, text, [code])]


def _messages(code: str, text: str, path: str) -> list[str]:
    return [d.message for d in lint_snippet(path, text, [code])]


def test_npu315_calls_on_exclusive_branches_are_not_twins() -> None:
    text = """
    import torch
    import torch_npu


    def apply_rotary_npu(q, k, cos, sin, interleaved: bool = False):
        if interleaved:
            q_embed = torch_npu.npu_rotary_mul(q, cos, sin, rotary_mode="interleave")
            k_embed = torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="interleave")
        else:
            q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
            k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
        return q_embed, k_embed


    class NpuRope(torch.nn.Module):
        def forward(self, x, cos, sin):
            if self.interleaved:
                return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
            return torch_npu.npu_rotary_mul(x, cos, sin)


    def rope_one(x, cos, sin, mode="half"):
        if_ = torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave") if mode == "i" else torch_npu.npu_rotary_mul(x, cos, sin)
        return if_


    def rope_match(x, cos, sin, mode):
        match mode:
            case "interleave":
                return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
            case _:
                return torch_npu.npu_rotary_mul(x, cos, sin)


    def disagree(q, k, cos, sin):
        return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="interleave")
    """
    assert _codes("NPU315", text) == [36]  # only the last function's pair


def test_npu315_twins_read_the_same_binding_and_nested_classes_report_once() -> None:
    text = """
    import torch
    import torch_npu


    class NpuGmm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, group_list):
            return torch_npu.npu_grouped_matmul([x], [weight], group_list=group_list, group_list_type=1)[0]

        @staticmethod
        def backward(ctx, grad, x, weight, group_list):
            group_list = torch.cumsum(group_list, dim=0)
            return torch_npu.npu_grouped_matmul([x], [grad], group_list=group_list, group_list_type=0)[0]


    def make():
        class Rope(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, cos, sin):
                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin, "interleave")

        return Rope
    """
    assert _codes("NPU315", text) == [20]  # the nested class's pair, once


def test_npu315_a_gradient_transposed_back_is_right() -> None:
    text = """
    import torch
    import torch_npu


    class LinearFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x @ weight

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            return grad_output @ weight.T, (grad_output.T @ x).T


    class BmmFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return torch.bmm(x, w)

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            dw_t = torch.bmm(dy.transpose(1, 2), x)
            return torch.bmm(dy, w.transpose(1, 2)), dw_t.transpose(1, 2)


    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            return dy @ w.T, dy.T @ x
    """
    assert _codes("NPU315", text) == [39]


def test_npu228_not_in_guard_of_another_value_and_warning_under_a_true_condition() -> None:
    text = """
    import logging

    logger = logging.getLogger(__name__)
    _KERNELS = {}
    _PATCHABLE = {"Qwen3MoeSparseMoeBlock"}


    def get_kernel(module_name, impl_name):
        if impl_name == "eager":
            return None
        if module_name not in _PATCHABLE:
            return None
        return _KERNELS[impl_name]


    def pick(impl_name, bucket):
        if impl_name == "eager":
            return None
        if impl_name not in bucket:
            if impl_name != "eager":
                logger.warning("%s unavailable; using eager", impl_name)
            return None
        return bucket[impl_name]


    def silent(impl_name, bucket):
        if impl_name == "eager":
            return None
        if impl_name not in bucket:
            return None
        return bucket[impl_name]
    """
    assert _codes("NPU228", text, "veomni/ops/toy_lookup.py") == [30]


def test_npu233_device_probes_and_message_polarity() -> None:
    text = """
    import os
    from typing import TYPE_CHECKING

    import torch

    from ....utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


    def register_a(architecture: str):
        if IS_NPU_AVAILABLE and torch.npu.is_available():
            from .generated.patched_modeling_toy_npu import ToyModel
        else:
            from .generated.patched_modeling_toy_gpu import ToyModel
        return ToyModel


    def register_b(architecture: str):
        if TYPE_CHECKING or not IS_NPU_AVAILABLE:
            from .generated.patched_modeling_toy_gpu import ToyModel
        else:
            from .generated.patched_modeling_toy_npu import ToyModel
        return ToyModel


    def register_c(architecture: str):
        if IS_NPU_AVAILABLE and not IS_CUDA_AVAILABLE:
            from .generated.patched_modeling_toy_npu import ToyModel
        else:
            from .generated.patched_modeling_toy_gpu import ToyModel
        return ToyModel


    def register_d(architecture: str):
        if not IS_NPU_AVAILABLE and "ForCausalLM" in architecture:
            from .generated.patched_modeling_toy_gpu import ToyModel
        else:
            from .generated.patched_modeling_toy_npu import ToyModel
        return ToyModel


    def register_e(architecture: str):
        if torch.accelerator.current_accelerator().type == "npu" and torch.npu.device_count() > 0:
            from .generated.patched_modeling_toy_npu import ToyModel
        else:
            from .generated.patched_modeling_toy_gpu import ToyModel
        return ToyModel
    """
    lines = _codes("NPU233", text, "veomni/models/transformers/toy/__init__.py")
    assert lines == [34]
    found = _messages("NPU233", text, "veomni/models/transformers/toy/__init__.py")
    assert "GPU runs where" in found[0] and "import the NPU module" in found[0]


def test_npu315_reads_an_aliased_kernel_import() -> None:
    text = """
    from torch_npu import npu_rotary_mul as rot


    def apply(q, k, cos, sin):
        return rot(q, cos, sin), rot(k, cos, sin, rotary_mode="interleave")
    """
    assert _codes("NPU315", text) == [5]


def test_npu309_permute_count_scaled_expanded_or_top1() -> None:
    text = """
    import torch_npu


    def permute_top1(hidden_states, expert_index):
        flat = expert_index.view(-1)
        return torch_npu.npu_moe_token_permute(hidden_states, flat, num_out_tokens=hidden_states.shape[0])


    def permute_topk(hidden_states, topk_ids, top_k):
        num_out = hidden_states.shape[0]
        num_out *= top_k
        return torch_npu.npu_moe_token_permute(hidden_states, topk_ids, num_out_tokens=num_out)


    def permute_expanded(tokens, topk_ids, top_k):
        tokens = tokens.repeat_interleave(top_k, dim=0)
        return torch_npu.npu_moe_token_permute(tokens, topk_ids.view(-1, 1), num_out_tokens=tokens.shape[0])


    def permute_capped(hidden_states, topk_ids):
        return torch_npu.npu_moe_token_permute(hidden_states, topk_ids, num_out_tokens=hidden_states.shape[0])
    """
    assert _codes("NPU309", text, "veomni/ops/kernels/moe/npu.py") == [21]
