"""NPU237 device-branch-patch-asymmetry."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name, walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registration import cuda_probe, device_module, device_probe


def _imports(stmts: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """(the device kinds of the model modules a branch imports, the names those imports bind)."""
    kinds: set[str] = set()
    bound: set[str] = set()
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, ast.ImportFrom):
                kind = device_module(node)
                if kind is not None:
                    kinds.add(kind)
                    bound.update((a.asname or a.name) for a in node.names)
    return kinds, bound


def _treatments(stmts: list[ast.stmt], bound: set[str]) -> dict[str, ast.AST]:
    """What a branch does to the names its device import bound: the functions it calls with one of them
    (``apply_device_patch(gen)``), the attributes it sets on one (``Cls._hook = ...``), the methods it calls on
    one (``gen.install()``). Key -> the first node."""
    out: dict[str, ast.AST] = {}
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, ast.Call):
                func = dotted_name(node.func) or ""
                args = [*node.args, *(k.value for k in node.keywords)]
                uses = any(isinstance(n, ast.Name) and n.id in bound for a in args for n in ast.walk(a))
                if uses and func:
                    out.setdefault(f"call `{func}(...)`", node)
                elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                    if node.func.value.id in bound:
                        out.setdefault(f"call `.{node.func.attr}(...)`", node)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id in bound
                    ):
                        out.setdefault(f"set `.{target.attr}`", node)
    return out


def _exprs(test: ast.expr) -> list[ast.expr]:
    return [n for n in ast.walk(test) if isinstance(n, ast.expr)]


def _device_test(test: ast.expr) -> bool:
    return any(
        isinstance(n, ast.expr) and (device_probe(n) is not None or cuda_probe(n) is not None)
        for n in ast.walk(test)
    )


class DeviceBranchPatchAsymmetry(Rule):
    code = "NPU237"
    name = "device-branch-patch-asymmetry"
    summary = (
        "A device switch imports a model's NPU module in one branch and its GPU module in the other, and only "
        "one branch applies a patch, hook or install call to what it imported (or a branch takes some of its "
        "classes from the other device's module)."
    )
    why = (
        "A package's `__init__.py` picks `patched_modeling_<model>_npu` or `_gpu` by the device and then treats "
        "the chosen module alike: the per-model ops patch (`apply_per_model_patches`, a `device_patch` install), "
        "the checkpoint converters and LoRA hooks attached to its classes. Written after the `if`/`else`, they "
        "reach both modules; moved into one branch (an indentation slip, a copy of the GPU branch), the other "
        "device's module loads unpatched: on Ascend the ops config's rotary/RMSNorm/MoE choices are never "
        "applied, or the NPU classes lack the converter. The rule compares what each branch does to the names "
        "its import bound and reports a call or attribute set present in one branch only."
    )
    bad = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from .device_patch import apply_toy_device_patch


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated import patched_modeling_toy_npu as gen
                else:
                    from .generated import patched_modeling_toy_gpu as gen

                    apply_toy_device_patch(gen)
                return gen.ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the per-model patch reaches the GPU module only",
        ),
        Example(
            """
            from veomni.utils.device import get_device_type


            def build_vlm():
                if get_device_type() == "npu":
                    from .generated.patched_modeling_vlm_npu import VlmModel

                    VlmModel._create_checkpoint_tensor_converter = staticmethod(make_converter)
                else:
                    from .generated.patched_modeling_vlm_gpu import VlmModel
                return VlmModel
            """,
            path="veomni/models/seed_omni/vlm/__init__.py",
            title="a converter attached on Ascend only",
        ),
    )
    good = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from .device_patch import apply_toy_device_patch


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated import patched_modeling_toy_npu as gen
                else:
                    from .generated import patched_modeling_toy_gpu as gen

                apply_toy_device_patch(gen)
                return gen.ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated import patched_modeling_toy_npu as gen

                    gen.install_npu_kernels()
                else:
                    from .generated import patched_modeling_toy_gpu as gen

                    gen.install_cuda_kernels()
                return gen.ToyForCausalLM
            """,
            title="a device-specific install on each side",
        ),
    )
    fix_safety = "No fix: move the call after the `if`/`else` (or repeat it in the other branch)."
    node_types = (ast.If,)
    requires = ("_npu", "_gpu")

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def _mixed(self, node: ast.If) -> None:
        """A device branch importing some of its model classes from the other device's module (the NPU branch
        takes `Qwen3ForSequenceClassification` from `_gpu` and the rest from `_npu`)."""
        on_npu = next((p for p in map(device_probe, _exprs(node.test)) if p is not None), None)
        if on_npu is None:
            cuda = next((p for p in map(cuda_probe, _exprs(node.test)) if p is not None), None)
            on_npu = None if cuda is None else not cuda
        if on_npu is None:
            return
        for branch, npu in ((node.body, on_npu), (node.orelse, not on_npu)):
            imports = [
                (stmt, device_module(stmt))
                for stmt in branch
                if isinstance(stmt, ast.ImportFrom) and device_module(stmt) is not None
            ]
            want = "npu" if npu else "gpu"
            if not any(kind == want for _, kind in imports):
                continue  # an inverted switch is NPU508's
            for stmt, kind in imports:
                if kind != want:
                    names = ", ".join(f"`{a.asname or a.name}`" for a in stmt.names)
                    self.report(
                        stmt,
                        f"the {'NPU' if npu else 'non-NPU'} branch of `if {ast.unparse(node.test)}:` imports "
                        f"{names} from the {kind.upper()} module and its other classes from the {want.upper()} "
                        "one: every class a device branch binds comes from the module that branch chose",
                    )

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.If)
        if not _device_test(node.test):
            return
        if not node.orelse:
            self._mixed(node)
            return
        self._mixed(node)
        body_kinds, body_bound = _imports(node.body)
        else_kinds, else_bound = _imports(node.orelse)
        if len(body_kinds) != 1 or len(else_kinds) != 1 or body_kinds == else_kinds:
            return
        shared = body_bound & else_bound
        if not shared:
            return
        body_done = _treatments(node.body, shared)
        else_done = _treatments(node.orelse, shared)
        # a device-specific counterpart on each side (install_npu_* / install_cuda_*) is a pairing, not a slip
        if body_done and else_done and set(body_done) != set(else_done):
            if len(set(body_done) - set(else_done)) == len(set(else_done) - set(body_done)):
                return
        for done, missing_kind, other in (
            (body_done, next(iter(else_kinds)), else_done),
            (else_done, next(iter(body_kinds)), body_done),
        ):
            for key, at in done.items():
                if key in other:
                    continue
                device = "NPU" if missing_kind == "npu" else "GPU"
                self.report(
                    at,
                    f"only one branch of `if {ast.unparse(node.test)}:` does this ({key} on the imported model "
                    f"module or classes): the {device} module the other branch imports loads without it; move it "
                    "after the `if`/`else` so both device modules get it",
                )
