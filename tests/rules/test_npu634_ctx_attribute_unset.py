"""NPU634: a backward reads a ctx attribute its forward no longer sets. The bad cases are statement-drop
mutants of real VeOmni autograd Functions; the quiet ones are the functions as written and a class that hands
ctx to a helper."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU634"], Settings()) if d.code == "NPU634")


OUT_PROJ = """
    import torch


    class AsyncUlyssesOutputProjection(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden_states, seq_dimension, head_dimension, unpadded_dim_size, group):
            ctx.num_heads = hidden_states.shape[head_dimension]
            {head_dim}
            ctx.sp_group = group
            {unpadded}
            ctx.save_for_backward(hidden_states)
            return hidden_states

        @staticmethod
        def backward(ctx, grad_output):
            (hidden_states,) = ctx.saved_tensors
            grad = grad_output.view(-1, ctx.num_heads, ctx.head_dim)
            grad = unpad(grad, ctx.unpadded_dim_size, ctx.sp_group)
            return grad, None, None, None, None
"""

SEQ_ALL_TO_ALL = """
    import torch


    class SeqAllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, group, local_input, scatter_dim, gather_dim):
            ctx.group = group
            {scatter}
            ctx.gather_dim = gather_dim
            return all_to_all(local_input, scatter_dim, gather_dim, group)

        @staticmethod
        def backward(ctx, *grad_output):
            return (None, all_to_all(grad_output[0], ctx.gather_dim, ctx.scatter_dim, ctx.group), None, None)
"""

MOE = """
    import torch


    class _AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, group, input, output_split_sizes, input_split_sizes):
            ctx.group = group
            ctx.{out} = output_split_sizes
            ctx.input_split_sizes = input_split_sizes
            return input

        @staticmethod
        def backward(ctx, *grad_output):
            return (None, _AllToAll.apply(ctx.group, *grad_output, ctx.input_split_sizes, ctx.output_split_sizes), None, None)
"""

ASYNC = "veomni/distributed/sequence_parallel/async_ulysses.py"


def test_head_dim_dropped_from_async_ulysses_forward() -> None:
    text = OUT_PROJ.format(head_dim="pass", unpadded="ctx.unpadded_dim_size = unpadded_dim_size")
    assert _lines(text, ASYNC) == [17]


def test_unpadded_size_dropped() -> None:
    text = OUT_PROJ.format(head_dim="ctx.head_dim = hidden_states.shape[-1]", unpadded="pass")
    assert _lines(text, ASYNC) == [18]


def test_scatter_dim_dropped_from_ulysses_all_to_all() -> None:
    text = SEQ_ALL_TO_ALL.format(scatter="pass")
    assert _lines(text, "veomni/distributed/sequence_parallel/ulysses.py") == [14]


def test_moe_split_sizes_set_under_another_name() -> None:
    assert _lines(MOE.format(out="output_splits"), "veomni/distributed/moe/comm.py") == [14]


def test_quiet_on_the_real_functions_and_helpers() -> None:
    full = OUT_PROJ.format(
        head_dim="ctx.head_dim = hidden_states.shape[-1]",
        unpadded="ctx.unpadded_dim_size = unpadded_dim_size",
    )
    assert _lines(full, ASYNC) == []
    assert _lines(SEQ_ALL_TO_ALL.format(scatter="ctx.scatter_dim = scatter_dim"), ASYNC) == []
    assert _lines(MOE.format(out="output_split_sizes"), "veomni/distributed/moe/comm.py") == []
    helper = """
        import torch


        def _remember(ctx, dim):
            ctx.dim = dim


        class Gather(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, dim):
                _remember(ctx, dim)
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad.narrow(ctx.dim, 0, 1), None, ctx.needs_input_grad
    """
    assert _lines(helper, ASYNC) == []
