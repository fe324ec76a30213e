"""NPU305 unguarded-backend-kernel."""

from __future__ import annotations

import ast
import re

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.vendor._shared import from_module, in_model_scope
from npu_lint.veomni import vendor_map

# backends whose kernels exist only on GPU hosts, as words of a module or function name
_GPU_BACKENDS = ("triton", "cuda", "cutlass", "tilelang", "cudnn")
_WORDS = re.compile(r"[A-Za-z0-9]+")


def _backend_of(*names: str) -> str | None:
    """The GPU-only backend a module path or function name is named for (``triton_bmm``, ``.cuda_rope``)."""
    for name in names:
        for word in _WORDS.findall(name.lower().replace("_", " ")):
            if word in _GPU_BACKENDS:
                return word
    return None


def _kernel_like(name: str) -> bool:
    """A function or class name that can be a kernel: not a flag or probe (``IS_CUDA_AVAILABLE``,
    ``is_triton_available``, ``get_cuda_device``)."""
    low = name.lower()
    if name.isupper() or low.startswith(("is_", "has_", "get_", "set_")):
        return False
    return not any(word in low for word in ("available", "device", "version"))


class UnguardedBackendKernel(Rule):
    code = "NPU305"
    name = "unguarded-backend-kernel"
    summary = (
        "Model code imports the tree's own GPU-only kernel (a module or function named for Triton, CUDA, "
        "TileLang, ...) outside the test that selects that backend."
    )
    why = (
        "Besides the registry, VeOmni model packages keep a few kernels of their own next to the model "
        "(DeepSeek-V3's Triton `bmm` for deterministic rotary frequencies), imported lazily and only under "
        '`if <impl> == "triton":` so that every other implementation, and every Ascend host, takes the plain '
        "torch path. The NPU specs reuse the GPU spec's forwards, so an import of such a kernel outside that "
        "test (hoisted above it, or the test dropped) runs the CUDA-only kernel on Ascend: the forward fails "
        "there. A kernel counts as GPU-only when its module or function name has a GPU backend's word "
        "(`triton`, `cuda`, `cutlass`, `tilelang`, `cudnn`); the import is guarded when an enclosing `if` "
        'tests that backend by name (`impl == "triton"`, `use_triton`, `is_triton_available()`). Imports of '
        "vendor packages themselves are NPU301's."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn


            class ToyRotaryEmbedding(nn.Module):
                def forward(self, x, position_ids):
                    from veomni.models.transformers.toy.cuda_outer import cuda_outer

                    freqs = cuda_outer(self.inv_freq.float(), position_ids.float())
                    return freqs.cos(), freqs.sin()
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="a CUDA kernel of the model package imported on every device",
        ),
        Example(
            """
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


            @config.override_method("ToyRouter.forward")
            def toy_router_forward_patched(self, hidden_states):
                from .kernels import triton_topk

                if self.impl == "triton":
                    return triton_topk(hidden_states, self.top_k)
                return hidden_states.topk(self.top_k, dim=-1)
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="the import hoisted above the backend test",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


            @config.override_method("ToyRouter.forward")
            def toy_router_forward_patched(self, hidden_states):
                impl = self.impl
                if impl == "triton":
                    from .kernels import triton_topk

                    return triton_topk(hidden_states, self.top_k)
                return hidden_states.topk(self.top_k, dim=-1)
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: move the import (and the call) under the backend test by hand."
    requires = (_GPU_BACKENDS,)
    node_types = (ast.ImportFrom,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and not ctx.source.kind.test and in_model_scope(ctx)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ImportFrom)
        module = from_module(self.ctx.source.path, node)
        local = node.level > 0 or module.split(".")[0] == "veomni"
        if not local or vendor_map.is_vendor(module):
            return  # vendor packages and the registry's kernel modules: NPU301
        for alias in node.names:
            backend = _backend_of(module.rpartition(".")[2])
            if backend is None and _kernel_like(alias.name):
                backend = _backend_of(alias.name)
            if backend is None or self._guarded(node, backend):
                continue
            func = self.ctx.function
            where = f"in `{func.name}`" if func is not None else "at module level"
            self.report(
                node,
                f"`{alias.name}` (`{module}`) is a {backend} kernel, imported {where} outside any test that "
                f"selects {backend}: on an Ascend host (and for every other implementation) this path runs a "
                f"GPU-only kernel and fails; import and call it only under the `{backend}` implementation test, "
                "with the plain torch path otherwise",
            )
            return

    def _guarded(self, node: ast.AST, backend: str) -> bool:
        """An enclosing ``if`` (the import in its body) whose test names the backend."""
        child: ast.AST = node
        for parent in reversed(self.ctx.parents):
            if (
                isinstance(parent, ast.If)
                and child in parent.body
                and backend in ast.unparse(parent.test).lower()
            ):
                return True
            child = parent
        return False
