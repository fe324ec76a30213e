"""Round 14 vendor checks, tested on injected variants in other files of the same region than their dev cases:
twin kernel calls of one adapter (NPU315), the backward's weight gradient (NPU315), auxiliary kernel outputs
taken as the result and the MoE permute's output row count (NPU309)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.snippets import lint_snippet


def _lines(code: str, text: str, path: str) -> list[int]:
    return sorted(d.line for d in lint_snippet(path, text, [code]))


# -- NPU315: twin calls read the shared data in one layout ---------------------------------------------------


def test_rotary_wrapper_partial_rotation_query_interleaved() -> None:
    # veomni-main ops/kernels/rotary/npu.py shape: the partial-rotary wrapper, the query changed this time
    assert _lines(
        "NPU315",
        """
        import torch
        import torch_npu


        def apply_rotary_pos_emb_partial(q, k, cos, sin, rotary_dim):
            q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
            k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
            q_embed = torch_npu.npu_rotary_mul(q_rot, cos, sin, "interleave")
            k_embed = torch_npu.npu_rotary_mul(k_rot, cos, sin)
            return torch.cat([q_embed, q_pass], -1), torch.cat([k_embed, k_pass], -1)
        """,
        "veomni/ops/kernels/rotary/npu.py",
    ) == [8]


def test_generated_vision_rope_explicit_modes_disagree() -> None:
    # a generated NPU file's vision rotary (qwen3_omni_moe shape), both modes spelled out
    assert _lines(
        "NPU315",
        """
        from torch_npu import npu_rotary_mul


        def apply_rotary_pos_emb_vision(q, k, cos, sin):
            q_embed = npu_rotary_mul(q.float(), cos, sin, rotary_mode="half").to(q.dtype)
            k_embed = npu_rotary_mul(k.float(), cos, sin, rotary_mode="interleave").to(k.dtype)
            return q_embed, k_embed
        """,
        "veomni/models/transformers/qwen3_vl_moe/generated/patched_modeling_qwen3_vl_moe_npu.py",
    ) == [6]


def test_grouped_matmul_backward_input_gradient_reads_cumulative() -> None:
    # a LoRA expert adapter's own autograd Function: the backward's input gradient reads the list as ends
    assert _lines(
        "NPU315",
        """
        import torch
        import torch_npu


        class LoraGmm(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, lora_a, counts):
                ctx.save_for_backward(x, lora_a)
                ctx.counts = counts
                return torch_npu.npu_grouped_matmul([x], [lora_a], group_list=counts, split_item=2, group_list_type=1)[0]

            @staticmethod
            def backward(ctx, dy):
                x, lora_a = ctx.saved_tensors
                counts = ctx.counts
                dx = torch_npu.npu_grouped_matmul(
                    [dy], [lora_a.transpose(1, 2)], group_list=counts, split_item=2, group_list_type=0
                )[0]
                da = torch_npu.npu_grouped_matmul(
                    [x.T], [dy], group_list=counts, split_item=3, group_type=2, group_list_type=1
                )[0]
                return dx, da, None
        """,
        "veomni/lora/ops/npu_lora_gmm.py",
    ) == [16]


def test_grouped_matmul_twins_in_one_function_majority() -> None:
    # an expert forward with gate/up and down projections on one group list; the down one omits the type (0)
    assert _lines(
        "NPU315",
        """
        import torch_npu


        def experts_forward(x, w1, w2, w3, tokens_per_expert):
            gate = torch_npu.npu_grouped_matmul([x], [w1], group_list=tokens_per_expert, group_list_type=1)[0]
            up = torch_npu.npu_grouped_matmul([x], [w3], group_list=tokens_per_expert, group_list_type=1)[0]
            h = gate * up
            return torch_npu.npu_grouped_matmul([h], [w2], group_list=tokens_per_expert)[0]
        """,
        "veomni/ops/kernels/moe_experts/npu.py",
    ) == [8]


def test_twins_quiet_when_they_agree_or_share_nothing() -> None:
    assert (
        _lines(
            "NPU315",
            """
            import torch_npu


            def rope(q, k, cos, sin):
                return (
                    torch_npu.npu_rotary_mul(q, cos, sin, rotary_mode="half"),
                    torch_npu.npu_rotary_mul(k, cos, sin),
                )


            def wan_rope(x, cos, sin, cos_2d, sin_2d):
                a = torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
                b = torch_npu.npu_rotary_mul(x, cos_2d, sin_2d)
                return a, b


            def gmm(x, w, group_list, mode):
                a = torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_list_type=mode)[0]
                b = torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_list_type=1)[0]
                return a + b
            """,
            "veomni/ops/kernels/rotary/npu.py",
        )
        == []
    )


# -- NPU315: the backward's weight gradient ---------------------------------------------------------------------


def test_matmul_autograd_weight_gradient_swapped() -> None:
    # a dense adapter with torch.matmul products (not a grouped matmul)
    assert _lines(
        "NPU315",
        """
        import torch


        class Project(torch.autograd.Function):
            @staticmethod
            def forward(ctx, inp, w):
                ctx.save_for_backward(inp, w)
                return torch.matmul(inp, w)

            @staticmethod
            def backward(ctx, grad_out):
                inp, w = ctx.saved_tensors
                grad_in = torch.matmul(grad_out, w.t())
                grad_w = torch.matmul(grad_out.t(), inp)
                return grad_in, grad_w
        """,
        "veomni/ops/kernels/toy_proj/npu.py",
    ) == [14]


def test_at_operator_weight_gradient_swapped_saved_in_other_order() -> None:
    assert _lines(
        "NPU315",
        """
        import torch


        class ExpertMatmul(torch.autograd.Function):
            @staticmethod
            def forward(ctx, tokens, expert_w):
                ctx.save_for_backward(expert_w, tokens)
                return tokens @ expert_w

            @staticmethod
            def backward(ctx, g):
                expert_w, tokens = ctx.saved_tensors
                return g @ expert_w.transpose(-1, -2), torch.transpose(g, -1, -2) @ tokens
        """,
        "veomni/ops/kernels/moe/_kernels/kernel/toy_expert.py",
    ) == [13]


def test_weight_gradient_quiet_for_linear_convention_and_right_order() -> None:
    assert (
        _lines(
            "NPU315",
            """
            import torch
            import torch.nn.functional as F


            class Linear(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight):
                    ctx.save_for_backward(x, weight)
                    return F.linear(x, weight)

                @staticmethod
                def backward(ctx, grad):
                    x, weight = ctx.saved_tensors
                    return grad @ weight, grad.T @ x


            class Right(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, w):
                    ctx.save_for_backward(x, w)
                    return x @ w

                @staticmethod
                def backward(ctx, grad):
                    x, w = ctx.saved_tensors
                    return grad @ w.T, x.T @ grad
            """,
            "veomni/ops/kernels/toy_proj/npu.py",
        )
        == []
    )


# -- NPU309: auxiliary outputs taken as the result ---------------------------------------------------------------


def test_rms_norm_wrapper_returns_rstd() -> None:
    # veomni-main ops/kernels/rms_norm/npu.py shape: the functional wrapper
    assert _lines(
        "NPU309",
        """
        import torch_npu


        def rms_norm_npu(hidden_states, weight, eps):
            return torch_npu.npu_rms_norm(hidden_states, weight, eps)[1]
        """,
        "veomni/ops/kernels/rms_norm/npu.py",
    ) == [5]


def test_generated_thinker_norm_takes_rstd_through_cast() -> None:
    assert _lines(
        "NPU309",
        """
        from torch_npu import npu_rms_norm


        class ThinkerTextRMSNorm:
            def forward(self, hidden_states):
                input_dtype = hidden_states.dtype
                out_fp32 = npu_rms_norm(hidden_states.float(), self.weight.float(), epsilon=self.eps)[1].to(
                    input_dtype
                )
                return out_fp32
        """,
        "veomni/models/transformers/qwen3_omni_moe/generated/patched_modeling_qwen3_omni_moe_npu.py",
    ) == [7]


def test_async_ulysses_norm_unpacked_swapped() -> None:
    assert _lines(
        "NPU309",
        """
        import torch_npu


        def qk_norm(q, k, norm_q_weight, norm_k_weight, eps):
            output_q, invvar_q = torch_npu.npu_rms_norm(q, norm_q_weight, eps)
            invvar_k, output_k = torch_npu.npu_rms_norm(k, norm_k_weight, eps)
            return output_q, output_k, invvar_q, invvar_k
        """,
        "veomni/distributed/sequence_parallel/async_ulysses.py",
    ) == [6]


def test_aux_outputs_quiet_when_named_or_wanted() -> None:
    assert (
        _lines(
            "NPU309",
            """
            import torch_npu


            def rstd_of(x, w, eps):
                return torch_npu.npu_rms_norm(x, w, eps)[1]


            def forward(x, w, eps):
                rstd = torch_npu.npu_rms_norm(x, w, eps)[1]
                y, _rstd = torch_npu.npu_rms_norm(x, w, epsilon=eps)
                return y * rstd
            """,
            "veomni/ops/kernels/rms_norm/npu.py",
        )
        == []
    )


# -- NPU309: the MoE permute's output row count -----------------------------------------------------------------


def test_lora_permute_caps_output_through_local() -> None:
    assert _lines(
        "NPU309",
        """
        import torch
        import torch_npu


        def lora_moe(hidden_states, selected_experts):
            hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
            n_tokens = hidden_states.size(0)
            permuted, row_ids_map = torch_npu.npu_moe_token_permute(hidden_states, selected_experts, n_tokens)
            return permuted, row_ids_map
        """,
        "veomni/lora/ops/npu_moe_group_gemm.py",
    ) == [8]


def test_ep_dispatch_permute_caps_with_len() -> None:
    assert _lines(
        "NPU309",
        """
        import torch
        import torch_npu


        def alltoall_dispatch(tokens, routing_map):
            out, idx = torch_npu.npu_moe_token_permute(
                tokens, routing_map.to(torch.int32), num_out_tokens=len(tokens)
            )
            return out, idx
        """,
        "veomni/distributed/moe/npu_dispatch.py",
    ) == [7]


def test_permute_quiet_with_copies_counted() -> None:
    assert (
        _lines(
            "NPU309",
            """
            import torch
            import torch_npu


            def permute(hidden_states, selected_experts, top_k):
                a = torch_npu.npu_moe_token_permute(hidden_states, selected_experts.to(torch.int32))
                b = torch_npu.npu_moe_token_permute(
                    hidden_states, selected_experts, num_out_tokens=selected_experts.numel()
                )
                c = torch_npu.npu_moe_token_permute(
                    hidden_states, selected_experts, num_out_tokens=hidden_states.shape[0] * top_k
                )
                return a, b, c
            """,
            "veomni/ops/kernels/moe/npu_group_gemm.py",
        )
        == []
    )


# -- NPU316: a backend's entry signature against its sibling backends of the same op ------------------------------


def _backends(tmp_path: Path, op: str, files: dict[str, str]) -> dict[str, list[int]]:
    directory = tmp_path / "veomni" / "ops" / "kernels" / op
    directory.mkdir(parents=True)
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text).lstrip("\n"))
    out: dict[str, list[int]] = {}
    for name in files:
        path = directory / name
        found = lint_source(SourceFile.from_text(str(path), path.read_text()), ["NPU316"], Settings())
        out[name] = [d.line for d in found if d.code == "NPU316"]
    return out


_MOE = """
def {name}(num_experts, {a}, {b}, hidden_states, fc1_1_weight, fc1_2_weight, fc2_weight, swiglu_limit=None):
    return hidden_states
"""


def test_npu_moe_entry_swaps_routing_inputs(tmp_path: Path) -> None:
    found = _backends(
        tmp_path,
        "moe",
        {
            "group_gemm.py": _MOE.format(
                name="group_gemm_fused_moe_forward", a="routing_weights", b="selected_experts"
            ),
            "quack_gemm.py": _MOE.format(
                name="quack_gemm_fused_moe_forward", a="routing_weights", b="selected_experts"
            ),
            "npu_group_gemm.py": _MOE.format(
                name="npu_fused_moe_forward", a="selected_experts", b="routing_weights"
            ),
        },
    )
    assert found == {"group_gemm.py": [], "quack_gemm.py": [], "npu_group_gemm.py": [1]}


def test_triton_load_balancing_loss_against_the_eager_reference(tmp_path: Path) -> None:
    found = _backends(
        tmp_path,
        "load_balancing_loss",
        {
            "eager.py": "def load_balancing_loss_pytorch(gate_logits, num_experts=None, top_k=2, attention_mask=None):\n    return 0\n",
            "triton.py": "def load_balancing_loss_triton(gate_logits, top_k=2, num_experts=None, attention_mask=None):\n    return 0\n",
        },
    )
    assert found == {"eager.py": [], "triton.py": [1]}


def test_cross_entropy_backend_drops_a_parameter(tmp_path: Path) -> None:
    signature = "logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100, shift_labels=None"
    found = _backends(
        tmp_path,
        "cross_entropy",
        {
            "eager.py": f"def eager_cross_entropy({signature}):\n    return logits\n",
            "liger.py": f"def fused_liger_kernel_cross_entropy({signature}):\n    return logits\n",
            "npu.py": "def npu_cross_entropy(logits, labels, vocab_size, ignore_index=-100, shift_labels=None):\n"
            "    return logits\n",
        },
    )
    assert found == {"eager.py": [], "liger.py": [], "npu.py": [1]}


def test_backend_signatures_quiet_for_other_variants_extras_and_kernels(tmp_path: Path) -> None:
    found = _backends(
        tmp_path,
        "moe",
        {
            "group_gemm.py": _MOE.format(
                name="group_gemm_fused_moe_forward", a="routing_weights", b="selected_experts"
            ),
            # another variant's entry (gpt-oss): its own parameters
            "quack_gpt_oss.py": "def quack_gemm_gpt_oss_fused_moe_forward(num_experts, routing_weights, selected_experts,"
            " hidden_states, gate_up_proj, down_proj, alpha, limit):\n    return hidden_states\n",
            # an EP entry (paired with group_gemm's by name) with one extra parameter
            "npu_ep.py": "def npu_fused_moe_forward(num_experts, routing_weights, selected_experts, hidden_states,"
            " fc1_1_weight, fc1_2_weight, fc2_weight, ep_group=None, swiglu_limit=None):\n    return hidden_states\n",
            # a jitted kernel is no backend entry, even named as one with the routing inputs the other way round
            "triton_kernels.py": "import triton\n\n\n@triton.jit\ndef group_gemm_fused_moe_forward_kernel(num_experts,"
            " selected_experts, routing_weights, hidden_states, fc1_1_weight, fc1_2_weight, fc2_weight):\n    pass\n",
        },
    )
    assert all(lines == [] for lines in found.values()), found


def test_a_keyword_only_parameter_is_not_missing(tmp_path: Path) -> None:
    signature = "logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100, shift_labels=None"
    found = _backends(
        tmp_path,
        "cross_entropy",
        {
            "eager.py": f"def eager_cross_entropy({signature}):\n    return logits\n",
            "npu.py": "def npu_cross_entropy(logits, labels, vocab_size, num_items_in_batch=None, shift_labels=None,"
            " *, ignore_index=-100):\n    return logits\n",
        },
    )
    assert found == {"eager.py": [], "npu.py": []}
