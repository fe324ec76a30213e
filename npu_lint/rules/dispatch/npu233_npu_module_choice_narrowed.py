"""NPU233 npu-module-choice-narrowed."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import str_value, walk
from npu_lint.rules.base import Context, Example, Rule

_DEVICE_WORD = re.compile(r"npu", re.IGNORECASE)


def _device_modules(stmts: list[ast.stmt]) -> set[str]:
    """The device suffixes (``npu`` / ``gpu``) of the modules a branch imports: ``from .generated.x_npu import``
    and ``from .generated import x_gpu as gen``."""
    found: set[str] = set()
    for stmt in stmts:
        for sub in walk(stmt):
            if not isinstance(sub, ast.ImportFrom):
                continue
            names = [sub.module or ""] + [a.name for a in sub.names]
            for name in names:
                last = name.rsplit(".", 1)[-1]
                if last.endswith("_npu"):
                    found.add("npu")
                elif last.endswith(("_gpu", "_cuda")):
                    found.add("gpu")
    return found


def _is_device(node: ast.expr) -> bool:
    """A device probe: ``IS_NPU_AVAILABLE``, ``is_torch_npu_available()``, ``device_type == "npu"`` (negated or
    not); a setting or environment read that merely mentions NPU in a string is not."""
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return bool(_DEVICE_WORD.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_DEVICE_WORD.search(node.attr))
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        sides = (node.left, node.comparators[0])
        return any(str_value(x) == "npu" for x in sides) and any("device" in ast.unparse(x) for x in sides)
    return False


def _extra_operand(test: ast.expr) -> tuple[str, ast.expr] | None:
    """A ``BoolOp`` in the test that joins the device probe with an operand that is not one: (``and``/``or``,
    the operand)."""
    for sub in walk(test):
        if not isinstance(sub, ast.BoolOp):
            continue
        device = [v for v in sub.values if _is_device(v)]
        other = [v for v in sub.values if not _is_device(v)]
        if device and other:
            return ("and" if isinstance(sub.op, ast.And) else "or"), other[0]
    return None


class NpuModuleChoiceNarrowed(Rule):
    code = "NPU233"
    name = "npu-module-choice-narrowed"
    summary = (
        "The branch that imports a model's NPU module (its generated `_npu` file) instead of the GPU one tests "
        "the device together with another condition: some Ascend runs get the GPU module (or some GPU runs the "
        "NPU one)."
    )
    why = (
        "A model package chooses between its two generated modules by the device alone: `if IS_NPU_AVAILABLE:` "
        "imports `patched_modeling_<model>_npu`, else `_gpu`, in every package of the tree. The GPU module "
        "reaches CUDA-only kernels (Liger, flash-attn, Triton) and the GPU ops-config names; the NPU module "
        'reaches the Ascend ones. A test such as `IS_NPU_AVAILABLE and "ForCausalLM" in architecture` sends '
        "every other architecture on an Ascend host to the GPU module, which fails at its first CUDA kernel or "
        "silently runs eager paths; `IS_NPU_AVAILABLE or flag` sends GPU hosts to the NPU module. Choose the "
        "module by the device probe alone and decide the rest after the import, as the other packages do."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE and "ForCausalLM" in architecture:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel
                return ToyForCausalLM if "ForCausalLM" in architecture else ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="only the causal LM gets the NPU module on Ascend",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if not IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                return ToyForCausalLM if "ForCausalLM" in architecture else ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = "No fix: test the device alone and move the other condition after the import."
    requires = ("_npu",)
    node_types = (ast.If,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.If)
        body, orelse = _device_modules(node.body), _device_modules(node.orelse)
        if not ({"npu"} == body and "gpu" in orelse) and not ({"gpu"} == body and "npu" in orelse):
            return
        extra = _extra_operand(node.test)
        if extra is None:
            return
        op, operand = extra
        who = "Ascend runs where" if op == "and" else "GPU runs where"
        gets = "the GPU" if op == "and" else "the NPU"
        self.report(
            node.test,
            f"the model's NPU/GPU module is chosen by `{ast.unparse(node.test)}`: {who} `{ast.unparse(operand)}` "
            f"{'does not hold' if op == 'and' else 'holds'} import {gets} module (its kernels and ops-config names "
            "belong to the other device); choose the module by the device probe alone and decide the rest after "
            "the import",
        )
