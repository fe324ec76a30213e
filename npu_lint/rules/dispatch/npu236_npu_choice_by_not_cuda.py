"""NPU236 npu-choice-by-not-cuda."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import following_statements, walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registration import branch_device_kinds
from npu_lint.veomni.selection import DeviceChoice, cuda_probe, device_probe

_MODULE_PATH = re.compile(r"^\.*[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$|^\w+_\w+$")
_GPU_WORDS = frozenset({"gpu", "cuda", "triton", "liger", "nccl"})


def _selected(part: list[ast.stmt] | ast.expr) -> tuple[set[str], str | None]:
    """The device kinds a branch selects (``registration.branch_device_kinds``; Triton and Liger count as GPU,
    ``NpuEncoder`` is two words; string literals only in a conditional expression, module paths only)."""
    return branch_device_kinds(part, _GPU_WORDS, camel=True, literal=_MODULE_PATH)


def _probes_npu(part: list[ast.stmt] | ast.expr) -> bool:
    """Whether the branch tests for Ascend itself (an ``elif IS_NPU_AVAILABLE:`` chain, a nested check)."""
    nodes = [part] if isinstance(part, ast.expr) else part
    for top in nodes:
        for node in walk(top):
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                for sub in ast.walk(node.test):
                    if isinstance(sub, ast.expr) and device_probe(sub) is True and cuda_probe(sub) is None:
                        return True
    return False


class NpuChoiceByNotCuda(Rule):
    code = "NPU236"
    name = "npu-choice-by-not-cuda"
    summary = (
        "The branch that selects an NPU module (a model's `_npu` generated module, an Ascend kernel module, "
        "`torch_npu`) is reached by a test for *not CUDA* (`not IS_CUDA_AVAILABLE`, the `else` of "
        "`torch.cuda.is_available()`) instead of a test for NPU."
    )
    why = (
        "VeOmni chooses device modules by asking whether the host is an Ascend one (`IS_NPU_AVAILABLE`, "
        '`get_device_type() == "npu"`). "Not CUDA" is a different set of hosts: CPU-only runs (unit tests, '
        "checkpoint conversion, patchgen) and MLU hosts fall into it too. There the NPU module is imported: "
        "`torch_npu` and its fused kernels are missing, so the import fails, or the NPU bindings are resolved "
        "against a device that has none. Test for the NPU itself and keep the GPU/eager module for every other "
        "host, as the other packages of the tree do."
    )
    bad = (
        Example(
            """
            from ....utils.device import IS_CUDA_AVAILABLE


            def register_toy_moe_modeling(architecture: str):
                if not IS_CUDA_AVAILABLE:
                    from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
                else:
                    from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
                return ToyMoeForCausalLM
            """,
            path="veomni/models/transformers/toy_moe/__init__.py",
            title="`not CUDA` chooses the NPU generated module",
        ),
        Example(
            """
            import torch


            def load_rope_kernels():
                if torch.cuda.is_available():
                    from .rope_triton import apply_rope
                else:
                    from .rope_ascend import apply_rope
                return apply_rope
            """,
            path="veomni/ops/kernels/rope/loader.py",
            title="the `else` of a CUDA test imports the Ascend kernel",
        ),
        Example(
            """
            import importlib

            from veomni.utils.device import get_device_type


            def kernels():
                name = "veomni.ops.npu_kernels" if get_device_type() != "cuda" else "veomni.ops.cuda_kernels"
                return importlib.import_module(name)
            """,
            title="a device-type test against `cuda`",
        ),
    )
    good = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE


            def register_toy_moe_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
                else:
                    from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
                return ToyMoeForCausalLM
            """,
            path="veomni/models/transformers/toy_moe/__init__.py",
        ),
        Example(
            """
            import torch

            from veomni.utils.device import IS_NPU_AVAILABLE


            def load_rope_kernels():
                if torch.cuda.is_available():
                    from .rope_triton import apply_rope
                elif IS_NPU_AVAILABLE:
                    from .rope_ascend import apply_rope
                else:
                    from .rope_eager import apply_rope
                return apply_rope
            """,
            title="the Ascend module behind its own test",
        ),
    )
    fix_safety = "No fix: test for the NPU (`IS_NPU_AVAILABLE`) and give other hosts the GPU/eager module."
    node_types = (ast.If, ast.IfExp)
    requires = (
        ("npu", "NPU", "Npu", "ascend", "Ascend", "hccl"),
        ("cuda", "CUDA", "Cuda", "gpu", "GPU", "Gpu"),
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.If, ast.IfExp))
        on_cuda = cuda_probe(node.test)
        if on_cuda is None and any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(node.test)):
            choice = getattr(self, "_choice", None)
            if choice is None or choice.tree is not self.ctx.tree:
                choice = self._choice = DeviceChoice.of(self.ctx.tree)
            on_cuda = cuda_probe(choice.expand(node.test, self.ctx.function))  # an alias of the probe
        if on_cuda is None:
            return
        body: list[ast.stmt] | ast.expr = node.body
        orelse: list[ast.stmt] | ast.expr = node.orelse
        if (
            isinstance(node, ast.If)
            and not node.orelse
            and isinstance(node.body[-1], (ast.Return, ast.Raise))
        ):
            orelse = following_statements(self.ctx.parent, node)
        cuda_part, other_part = (body, orelse) if on_cuda else (orelse, body)
        if _probes_npu(other_part):
            return
        other_kinds, other_first = _selected(other_part)
        cuda_kinds, cuda_first = _selected(cuda_part)
        if other_kinds != {"npu"} or "gpu" not in cuda_kinds or "npu" in cuda_kinds:
            return
        self.report(
            node.test,
            f"`{ast.unparse(node.test)}` sends every host that is not CUDA (CPU-only runs, MLU) to `{other_first}`, "
            f"the NPU module, and CUDA hosts to `{cuda_first}`: choose the NPU module by an NPU test "
            "(`IS_NPU_AVAILABLE`) and give the other hosts the GPU/eager module",
        )
