"""NPU233 npu-module-choice-narrowed."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registration import device_module, device_probe, static_false


def _device_modules(stmts: list[ast.stmt]) -> set[str]:
    """The device suffixes (``npu`` / ``gpu``) of the modules a branch imports: ``from .generated.x_npu import``
    and ``from .generated import x_gpu as gen``."""
    found: set[str] = set()
    for stmt in stmts:
        for sub in walk(stmt):
            if isinstance(sub, ast.ImportFrom):
                device = device_module(sub)
                if device is not None:
                    found.add(device)
    return found


def _narrowed(test: ast.expr) -> tuple[str, bool, ast.expr] | None:
    """A test joining a device probe with an operand that is not one (nor ``TYPE_CHECKING``): (``and``/``or``,
    on which host the probe holds (True: Ascend), the operand), or None."""
    if not isinstance(test, ast.BoolOp):
        return None
    probes = [p for p in (device_probe(v) for v in test.values) if p is not None]
    other = [v for v in test.values if device_probe(v) is None and not static_false(v)]
    if len(probes) != 1 or len(other) != 1:
        return None
    return ("and" if isinstance(test.op, ast.And) else "or"), probes[0], other[0]


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
        narrowed = _narrowed(node.test)  # the test first: most ifs are not a device choice
        if narrowed is None:
            return
        body, orelse = _device_modules(node.body), _device_modules(node.orelse)
        if not ({"npu"} == body and "gpu" in orelse) and not ({"gpu"} == body and "npu" in orelse):
            return
        op, on_ascend, operand = narrowed
        # the host where the probe does not decide the test (``and``: where it holds; ``or``: where it fails):
        # there the operand alone chooses the module
        ascend = on_ascend if op == "and" else not on_ascend
        right = "npu" if ascend else "gpu"
        chosen = next(iter(body))
        other = {"npu": "gpu", "gpu": "npu"}
        decided = chosen if op == "or" else other[chosen]  # what the host the probe decides imports
        if decided != other[right]:
            return  # the probe sends its own host to the other device's module: another mistake
        holds = chosen != right  # the operand holding sends the host to the body's (wrong) module
        wrong = "GPU" if right == "npu" else "NPU"
        self.report(
            node.test,
            f"the model's NPU/GPU module is chosen by `{ast.unparse(node.test)}`: "
            f"{'Ascend' if ascend else 'GPU'} runs where `{ast.unparse(operand)}` "
            f"{'holds' if holds else 'does not hold'} import the {wrong} module (its kernels and ops-config names "
            "belong to the other device); choose the module by the device probe alone and decide the rest after "
            "the import",
        )
