"""The rules' one name resolver (``Context.qualname`` / ``local_qualname``): import aliases, dynamic imports
with literal names, ``getattr`` with a literal, function-local imports (nested functions too), parenthesised
imports behind the cheap pre-check."""

from __future__ import annotations

import ast
import textwrap

from npu_lint.core.source import SourceFile
from npu_lint.rules.base import Context

CODE = textwrap.dedent(
    """
    import importlib
    from importlib import import_module
    from veomni.ops.dispatch import OpSlot as _Slot
    from torch_npu import (
        npu_rms_norm,
        npu_rotary_mul as rope,
    )
    import torch_npu as tnpu

    npu = importlib.import_module("torch_npu")
    top = __import__("torch_npu.contrib")

    def outer():
        from liger_kernel.ops import swiglu as sw

        def inner():
            import flash_attn as fa
            return sw.apply, fa.flash_attn_func

        return inner
    """
)


def _ctx() -> tuple[Context, ast.Module]:
    tree = ast.parse(CODE)
    return Context(SourceFile.from_text("m.py", CODE), tree), tree


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_module_level_names() -> None:
    ctx, _ = _ctx()
    assert ctx.qualname(_expr("_Slot")) == "veomni.ops.dispatch.OpSlot"
    assert ctx.qualname(_expr("rope")) == "torch_npu.npu_rotary_mul"
    assert ctx.qualname(_expr("tnpu.npu_swiglu")) == "torch_npu.npu_swiglu"
    assert ctx.qualname(_expr("npu.npu_rms_norm")) == "torch_npu.npu_rms_norm"
    assert ctx.qualname(_expr("top.contrib")) == "torch_npu.contrib"  # __import__ returns the top package


def test_dynamic_roots_and_getattr() -> None:
    ctx, _ = _ctx()
    assert (
        ctx.qualname(_expr('importlib.import_module("torch_npu").npu_rms_norm')) == "torch_npu.npu_rms_norm"
    )
    assert ctx.qualname(_expr('import_module("liger_kernel.ops").x')) == "liger_kernel.ops.x"
    assert ctx.qualname(_expr('getattr(tnpu, "npu_rms_norm")')) == "torch_npu.npu_rms_norm"
    assert ctx.qualname(_expr("getattr(tnpu, name)")) is None
    assert ctx.qualname(_expr("f(x).y")) is None


def test_parenthesised_import_passes_the_precheck() -> None:
    ctx, _ = _ctx()
    assert ctx.may_be_imported("npu_rms_norm")
    assert ctx.local_qualname(_expr("npu_rms_norm")) == "torch_npu.npu_rms_norm"
    assert not ctx.may_be_imported("hidden_states")


def test_function_local_imports_nested() -> None:
    ctx, tree = _ctx()
    outer = next(s for s in tree.body if isinstance(s, ast.FunctionDef))
    inner = next(s for s in outer.body if isinstance(s, ast.FunctionDef))
    ctx.parents = [tree, outer, inner]
    assert ctx.local_qualname(_expr("sw.apply")) == "liger_kernel.ops.swiglu.apply"
    assert ctx.local_qualname(_expr("fa.flash_attn_func")) == "flash_attn.flash_attn_func"
    ctx.parents = [tree]
    assert ctx.local_qualname(_expr("fa.flash_attn_func")) == "fa.flash_attn_func"
