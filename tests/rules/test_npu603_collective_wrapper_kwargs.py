"""NPU603: a collective's wrapper (an HCCL reduce-op workaround) reading an optional argument from **kwargs
without checking it is there. Own shapes: other names, a class-based patch, guards that make the read safe."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source


def _lint(code: str) -> list:
    return lint_source(
        SourceFile.from_text("hccl_patch.py", textwrap.dedent(code).lstrip()), ["NPU603"], Settings()
    )


def test_reported_on_a_method_wrapper_with_other_names() -> None:
    code = """
    import torch.distributed as dist


    class HcclReduceShim:
        def __init__(self, original):
            self.original = original

        def __call__(self, *positional, **options):
            if options["async_op"]:
                raise NotImplementedError("async reduce_scatter is not patched")
            return self.original(*positional, **options)


    dist.reduce_scatter_tensor = HcclReduceShim(dist.reduce_scatter_tensor)
    """
    diags = _lint(code)
    assert [(d.line, d.code) for d in diags] == [(9, "NPU603")]
    assert '`options["async_op"]`' in diags[0].message and "`self.original(...)`" in diags[0].message


def test_only_the_first_read_of_a_key_is_reported_and_guards_are_honoured() -> None:
    code = """
    from torch.distributed import ReduceOp


    def premul_to_sum(fn):
        def call(*a, **kw):
            factor = kw["op"].__getstate__()[1] if kw["op"] == ReduceOp.PREMUL_SUM else None
            return fn(*a, **kw), factor

        return call


    def guarded(fn):
        def call(*a, **kw):
            try:
                op = kw["op"]
            except KeyError:
                op = ReduceOp.SUM
            group = kw["group"] if "group" in kw else None
            if "dst" not in kw:
                return fn(*a, **kw)
            return fn(*a, **kw), kw["dst"], op, group

        return call


    def not_forwarding(**kw):
        return kw["op"]  # no *args/**kwargs forwarded: not a collective's wrapper
    """
    diags = _lint(code)
    assert [d.line for d in diags] == [6]  # the first read (the test of the conditional expression is later)


def test_fix_reads_with_get_in_an_equality() -> None:
    code = textwrap.dedent(
        """
        import torch.distributed as dist


        def patch(collective):
            def wrapper(*args, **kwargs):
                if kwargs["op"] == dist.ReduceOp.PREMUL_SUM:
                    kwargs["op"] = dist.ReduceOp.SUM
                return collective(*args, **kwargs)

            return wrapper
        """
    ).lstrip()
    fixed = fix_source(SourceFile.from_text("hccl_patch.py", code), ["NPU603"], Settings())
    text = fixed.text
    assert 'if kwargs.get("op") == dist.ReduceOp.PREMUL_SUM:' in text
    assert _lint(text) == []


def test_runs_on_the_trees_platform_code() -> None:
    code = """
    import torch


    def wrap(fn):
        def inner(*args, **kwargs):
            return fn(*args, **kwargs) if kwargs["group"] is None else None

        return inner


    torch.distributed.all_reduce = wrap(torch.distributed.all_reduce)
    """
    src = SourceFile.from_text("veomni/ops/platform/npu/reduce_patch.py", textwrap.dedent(code).lstrip())
    assert src.kind.kernel  # not model code, still checked
    assert [d.line for d in lint_source(src, ["NPU603"], Settings())] == [6]
