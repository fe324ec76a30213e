"""Independent precision review (rev16) of the rules added or widened on 2026-12-03: each snippet is correct
code a VeOmni or transformers engineer would write, on which the rule reported (a false positive now fixed)."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet

QUIET = {
    # a module-level walrus in an `if` test binds the name the function reads
    "NPU516-module-walrus": (
        "veomni/utils/npu_env.py",
        """
        import os


        if (_NPU_VISIBLE := os.environ.get("ASCEND_RT_VISIBLE_DEVICES")) is not None:
            pass


        def visible_devices():
            return _NPU_VISIBLE
        """,
    ),
    # a module-level `match` capture binds the name
    "NPU516-module-match": (
        "veomni/utils/platform_name.py",
        """
        import sys

        match sys.platform:
            case "linux":
                _SHM = "/dev/shm"
            case other:
                _SHM = other


        def shm_dir():
            return _SHM, other
        """,
    ),
    # the forward sets the attributes through `ctx.__dict__`
    "NPU634-ctx-dict-update": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class Gather(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, group, dim):
                ctx.__dict__.update(group=group, dim=dim)
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group, ctx.dim
        """,
    ),
    # a mixin base's forward sets the attribute
    "NPU634-mixin-forward": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class _CommMixin:
            @staticmethod
            def forward(ctx, x, group):
                ctx.group = group
                return x


        class AllReduce(_CommMixin, torch.autograd.Function):
            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
    # a classmethod forward: ctx is its second parameter
    "NPU634-classmethod-forward": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class AllReduce(torch.autograd.Function):
            @classmethod
            def forward(cls, ctx, x, group):
                ctx.group = group
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
    # ctx aliased in the forward
    "NPU634-ctx-alias": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class AllReduce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, group):
                state = ctx
                state.group = group
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
}


@pytest.mark.parametrize("case", sorted(QUIET))
def test_quiet(case):
    path, text = QUIET[case]
    code = case.split("-", 1)[0]
    assert lint_snippet(path, text, [code]) == []
