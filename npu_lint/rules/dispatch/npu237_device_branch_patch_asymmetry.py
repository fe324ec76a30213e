"""NPU237 device-branch-patch-asymmetry."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import dotted_name, walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.backends import ANY, name_backend
from npu_lint.veomni.registration import device_module
from npu_lint.veomni.selection import cuda_probe, device_probe

# what wiring a model module for use does to it: a patch, an install, a hook, a checkpoint/LoRA converter, a
# registration. Logging, `hasattr` checks, plain flags (`_supports_flex_attn = False`) are not wiring.
_WIRING = re.compile(
    r"(^|_)(patch|patches|patched|install|hook|hooks|attach|register|converter|converters|convert|lora|apply|bind|"
    r"wrap|monkey|monkeypatch)($|_)"
)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _wiring(name: str) -> bool:
    return bool(_WIRING.search(_snake(name)))


def _device_specific(node: ast.AST) -> bool:
    """A name in the node declares one backend (`npu_fused_ops_enable`, `install_cuda_graphs`, `liger_rope`):
    device-specific enablement is legitimately one-sided."""
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name is not None and name_backend(name) != ANY:
            return True
    return False


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
    covered: set[int] = set()  # the calls inside a reported attribute set's value (`M.f = wrap(M.f)`)
    for stmt in stmts:
        for node in walk(stmt):
            if id(node) in covered:
                continue
            if isinstance(node, ast.Call):
                func = dotted_name(node.func) or ""
                args = [*node.args, *(k.value for k in node.keywords)]
                uses = any(isinstance(n, ast.Name) and n.id in bound for a in args for n in ast.walk(a))
                if _device_specific(node):
                    continue
                if uses and func:
                    if _wiring(func.rsplit(".", 1)[-1]):
                        out.setdefault(f"call `{func}(...)`", node)
                elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                    if node.func.value.id in bound and _wiring(node.func.attr):
                        out.setdefault(f"call `.{node.func.attr}(...)`", node)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and _root(target) in bound
                        and _wiring_value(target.attr, node.value)
                    ):
                        out.setdefault(f"set `.{target.attr}`", node)
                        covered.update(id(n) for n in ast.walk(node.value))
    return out


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (`gen.Model.forward` -> `gen`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _wiring_value(attr: str, value: ast.expr) -> bool:
    """An attribute set that attaches wiring: a callable (not a literal flag) named for a hook, converter or patch,
    naming no one backend."""
    if isinstance(value, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)):
        return False
    if _device_specific(value) or name_backend(attr) != ANY:
        return False
    names = [attr]
    for sub in ast.walk(value):
        if isinstance(sub, ast.Name):
            names.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.append(sub.attr)
    return any(_wiring(n) for n in names)


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
        "its import bound and reports a patch, install, hook, converter or registration (named so, and naming no one "
        "backend) present in one branch only: logging, `hasattr` checks, plain flags and device-specific enablement "
        "(`gen.npu_fused_ops_enable()`, a liger kernel bound on the GPU side) are legitimately one-sided."
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
                    f"only one branch of `if {ast.unparse(node.test)}:` wires the imported model module or classes "
                    f"({key}, a device-neutral patch/install/hook/converter): the {device} module the other branch "
                    "imports loads without it; apply it after the `if`/`else` so both device modules get it (a "
                    "device-specific enablement is named for its backend: `npu_*`, `*_cuda_*`)",
                )
