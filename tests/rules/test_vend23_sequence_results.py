"""NPU309: the result of an Ascend kernel that returns a list or tuple of tensors (``npu_grouped_matmul``'s list,
a kernel the tree's own other calls always subscript or unpack) used as one tensor, in regions and shapes other
than the dev case (an autograd Function's forward in the MoE kernels returning the list); correct code stays
quiet."""

from __future__ import annotations

from tests.rules.snippets import lint_in_tree, lint_snippet, ops_tree


def _codes(path: str, text: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, ["NPU309"]) if d.code == "NPU309"]


def test_lora_autograd_forward_returns_the_grouped_matmul_list() -> None:
    text = """
    import torch
    import torch_npu


    class LoraExpertMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tokens, lora_a, counts):
            ctx.save_for_backward(tokens, lora_a)
            projected = torch_npu.npu_grouped_matmul([tokens], [lora_a], group_list=counts, split_item=3)
            return projected
    """
    assert _codes("veomni/lora/ops/lora_expert_matmul.py", text) == [9]


def test_backward_returns_the_list_among_its_gradients() -> None:
    text = """
    import torch
    from torch_npu import npu_grouped_matmul


    class ExpertMatmul(torch.autograd.Function):
        @staticmethod
        def backward(ctx, grad_out):
            x, w = ctx.saved_tensors
            grad_x = npu_grouped_matmul([grad_out], [w.transpose(1, 2)], group_list=ctx.counts, split_item=2)[0]
            return grad_x, npu_grouped_matmul([x.T], [grad_out], group_list=ctx.counts, split_item=3), None
    """
    assert _codes("veomni/distributed/moe/expert_matmul.py", text) == [10]


def test_tensor_method_on_the_list_in_a_plain_helper() -> None:
    text = """
    import torch_npu


    def expert_projection(hidden, weights, counts, shape):
        out = torch_npu.npu_grouped_matmul([hidden], [weights], group_list=counts, group_type=0)
        return out.view(shape)
    """
    assert _codes("veomni/models/transformers/toy_moe/toy_moe_npu_patch_gen_config.py", text) == [5]


def test_correct_grouped_matmul_consumers_stay_quiet() -> None:
    text = """
    import torch
    import torch_npu


    def raw_gmm(x, w, counts):
        return torch_npu.npu_grouped_matmul([x], [w], group_list=counts, split_item=2)


    def gmm_all(xs, ws, counts):
        outs = torch_npu.npu_grouped_matmul(xs, ws, group_list=counts)
        for part in outs:
            part.mul_(2)
        outs.append(None)
        return outs


    class Gmm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, counts):
            out = torch_npu.npu_grouped_matmul([x], [w], group_list=counts, split_item=2)
            return out[0]

        @staticmethod
        def backward(ctx, grad):
            (grad_x,) = torch_npu.npu_grouped_matmul([grad], [ctx.w], group_list=ctx.counts, split_item=2)
            return grad_x, None, None
    """
    assert _codes("veomni/ops/kernels/moe/_kernels/kernel/npu_gmm.py", text) == []


# a kernel outside the documented table whose tree calls always unpack it: learned from the tree
_ROUTING = """
import torch_npu


def route(hidden, topk_ids, k):
    permuted, row_map, counts = torch_npu.npu_moe_init_routing_v2(hidden, topk_ids, active_num=k)
    return permuted, row_map, counts


def route_eval(hidden, topk_ids, k):
    permuted = torch_npu.npu_moe_init_routing_v2(hidden, topk_ids, active_num=k, expert_num=8)[0]
    return permuted
"""


def _tree_lines(tmp_path, files: dict[str, str], target: str) -> list[int]:  # noqa: ANN001
    root = ops_tree(tmp_path, files)
    return sorted(d.line for d in lint_in_tree(root, target, ["NPU309"]) if d.code == "NPU309")


def test_kernel_the_tree_always_takes_apart_used_whole_in_another_region(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/kernels/moe/npu_routing.py": _ROUTING,
        "veomni/distributed/moe/npu_dispatch.py": """
        import torch_npu


        def dispatch(hidden, topk_ids, k, world):
            routed = torch_npu.npu_moe_init_routing_v2(hidden, topk_ids, active_num=k)
            return routed.chunk(world)
        """,
    }
    assert _tree_lines(tmp_path, files, "veomni/distributed/moe/npu_dispatch.py") == [5]
    assert _tree_lines(tmp_path, files, "veomni/ops/kernels/moe/npu_routing.py") == []


def test_one_sibling_or_a_sibling_using_it_whole_is_no_evidence(tmp_path) -> None:  # noqa: ANN001
    lone = """
    import torch_npu


    def route(hidden, topk_ids, k):
        permuted, row_map, counts = torch_npu.npu_moe_init_routing_v2(hidden, topk_ids, active_num=k)
        return permuted
    """
    use = """
    import torch_npu


    def quantize(x):
        scaled = torch_npu.npu_moe_init_routing_v2(x, x, active_num=2)
        return scaled.float()
    """
    assert (
        _tree_lines(tmp_path / "a", {"veomni/ops/a.py": lone, "veomni/data/b.py": use}, "veomni/data/b.py")
        == []
    )
    mixed = (
        _ROUTING
        + "\n\ndef route_whole(h, t, k):\n    return torch_npu.npu_moe_init_routing_v2(h, t, active_num=k).float()\n"
    )
    files = {"veomni/ops/kernels/moe/npu_routing.py": mixed, "veomni/trainer/npu_step.py": use}
    assert _tree_lines(tmp_path / "b", files, "veomni/trainer/npu_step.py") == []


def test_list_result_fed_to_a_tensor_function_or_a_tensor_kernel() -> None:
    text = """
    import torch
    import torch.nn.functional as F
    import torch_npu


    def experts_mlp(tokens, w_up, w_down, counts):
        gate_up = torch_npu.npu_grouped_matmul([tokens], [w_up], group_list=counts, split_item=2, group_type=0)
        act = torch_npu.npu_swiglu(gate_up, dim=-1)
        down = F.silu(torch_npu.npu_grouped_matmul([act], [w_down], group_list=counts, split_item=2, group_type=0))
        return down


    def experts_cat(tokens, w_up, counts):
        parts = torch_npu.npu_grouped_matmul([tokens], [w_up], group_list=counts)
        joined = torch.cat(torch_npu.npu_grouped_matmul([tokens], [w_up], group_list=counts), dim=0)
        return torch.stack(parts), joined
    """
    assert _codes("veomni/distributed/moe/npu_experts.py", text) == [7, 9]
