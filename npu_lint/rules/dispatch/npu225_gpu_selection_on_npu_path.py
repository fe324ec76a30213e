"""NPU225 gpu-selection-on-npu-path."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, nodes_of, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registry import ROW_DECLARATIONS
from npu_lint.veomni.resolution import NpuHost, gpu_marker, module_of, names_gpu
from npu_lint.veomni.vendor_map import GPU_IMPLEMENTATION_WORDS

# parameters that take an implementation name (`install_loss_mapping(impl)`, `bind(impl_name=...)`)
# (not a kernel's own ``backend=`` option: FLA's ``causal_conv1d(..., backend="triton")`` is an argument of the bound
# kernel, whichever it is)
_IMPL_PARAM = re.compile(r"(^|_)impl(_name)?$|implementation$")
# calls that declare a row (the registry's declarations) or a field default rather than select one
_NOT_SELECTIONS = ROW_DECLARATIONS | {"field", "Field"}


class GpuSelectionOnNpuPath(Rule):
    code = "NPU225"
    name = "gpu-selection-on-npu-path"
    summary = (
        "Code an NPU host runs selects a GPU-only implementation itself instead of taking the ops config's "
        "(NPU-normalised) value: a GPU implementation literal handed to an implementation parameter, used as the "
        "fallback of an implementation-field read or stored into one, or a registry's GPU default looked up in "
        "place of the configured value."
    )
    why = (
        "On Ascend, VeOmni maps the GPU defaults of the ops config to NPU implementations (`npu`, `fused_npu`, "
        "`eager`) before anything binds; every install or bind point must then consume that value. A binding "
        'point handed `"liger_kernel"` / `"fused_quack"` / `"tilelang"` directly, a `getattr(config, '
        'f"{op}_implementation", "liger_kernel")` fallback, a legacy alias resolved to a GPU kernel on every '
        "host, or `op.default` (the registry's GPU default) looked up instead of the config's value, all put GPU "
        "code on the NPU path: the NPU fallback is bypassed and the first bind or forward fails on Ascend. The "
        "rule evaluates conditions as an NPU host does (NPU availability true, CUDA false), so a GPU name on a "
        "branch Ascend never takes is left alone, as are registrations (which declare rows) and GPU kernel "
        "modules."
    )
    bad = (
        Example(
            """
            def apply_ops_config(ops_config):
                from .kernels.cross_entropy import install_loss_mapping

                install_loss_mapping(impl="liger_kernel")
            """,
            path="veomni/ops/__init__.py",
            title="a binding point handed a GPU implementation",
        ),
        Example(
            """
            def bind_slots(module, ops_config):
                for slot in module.slots:
                    impl_name = getattr(ops_config, f"{slot.op_name}_implementation", "liger_kernel")
                    slot.bind(impl_name)
            """,
            path="veomni/models/auto.py",
            title="a GPU fallback for a missing implementation field",
        ),
        Example(
            """
            class OpsConfig:
                def normalise(self):
                    if self.moe_implementation == "fused":
                        resolved = "fused_quack"
                        self.moe_implementation = resolved
            """,
            path="veomni/arguments/arguments_types.py",
            title="a legacy alias resolved to a GPU kernel on every host",
        ),
        Example(
            """
            def apply_global_ops(ops_config, ops):
                for op in ops:
                    value = op.default
                    backend = op.backends.get(value)
                    yield backend
            """,
            path="veomni/ops/config/registry.py",
            title="the registry's GPU default looked up instead of the configured value",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.import_utils import is_torch_npu_available


            class OpsConfig:
                def normalise(self):
                    if self.moe_implementation == "fused":
                        resolved = "fused_npu" if is_torch_npu_available() else "fused_quack"
                        self.moe_implementation = resolved


            def apply_ops_config(ops_config):
                from .kernels.cross_entropy import install_loss_mapping

                install_loss_mapping(ops_config.cross_entropy_loss_implementation)
            """,
            path="veomni/arguments/arguments_types.py",
        ),
    )
    fix_safety = "No fix: the value to consume is the ops config's field, which the author names."
    requires = (GPU_IMPLEMENTATION_WORDS,)
    node_types = (ast.Call, ast.Assign)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        if ctx.source.kind.test:
            return False
        return (
            gpu_marker(module_of(ctx.source.path)[0]) is None
        )  # a GPU kernel module selects GPU code by design

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            self._stored(node)
            return
        assert isinstance(node, ast.Call)
        name = call_name(node)
        if name in _NOT_SELECTIONS:
            return
        if name == "getattr" and len(node.args) == 3:
            self._fallback(node)
            return
        if (
            name == "get"
            and isinstance(node.func, ast.Attribute)
            and _is_backends(node.func.value)
            and node.args
        ):
            self._default_lookup(node, node.args[0])
            return
        for value, param in self._bound_parameters(node):
            literal = str_value(value)
            gpu = names_gpu(literal)
            if gpu is None or not _IMPL_PARAM.search(param) or not self._npu_reachable(node):
                continue
            self.report(
                value,
                f'`{name}` is handed the GPU implementation "{literal}" for its `{param}` (a {gpu} kernel) on a '
                "path Ascend runs: the NPU-normalised ops config is bypassed; pass the config's field",
            )

    # -- the four shapes ---------------------------------------------------------------------------------------

    def _fallback(self, node: ast.Call) -> None:
        key, default = node.args[1], node.args[2]
        field = str_value(key) or (
            ast.unparse(key) if isinstance(key, ast.JoinedStr) else None
        )  # f"{op}_implementation"
        literal = str_value(default)
        if field is None and isinstance(key, ast.Name):
            field = self._field_parameter(key.id)
        if field is None or not field.rstrip("'\"").endswith("_implementation") or names_gpu(literal) is None:
            return
        if not self._npu_reachable(node):
            return
        self.report(
            default,
            f'a missing implementation field falls back to the GPU implementation "{literal}": an NPU host whose '
            'config lacks the field binds a GPU kernel (the NPU fallback never saw it); fall back to "eager"',
        )

    def _stored(self, node: ast.Assign) -> None:
        targets = [
            t for t in node.targets if isinstance(t, ast.Attribute) and t.attr.endswith("_implementation")
        ]
        if not targets:
            return
        func = self.ctx.function
        host = NpuHost()
        env = _literal_env(func, host) if func is not None else {}
        got = host.value(node.value, env)
        if got.value is None or names_gpu(got.value) is None or not self._npu_reachable(node):
            return
        at: ast.AST = node.value
        if isinstance(node.value, ast.Name) and func is not None:
            bound = [
                a.value
                for a in nodes_of(func, ast.Assign)
                if any(isinstance(t, ast.Name) and t.id == node.value.id for t in a.targets)
            ]
            at = bound[0] if len(bound) == 1 else at  # where the GPU name is chosen
        self.report(
            at,
            f'`{ast.unparse(targets[0])}` is set to the GPU implementation "{got.value}" on a path an NPU host '
            "takes: the config's NPU value is replaced by a GPU kernel; choose the NPU implementation there",
        )

    def _default_lookup(self, node: ast.Call, value: ast.expr) -> None:
        func = self.ctx.function
        source = value
        if isinstance(value, ast.Name) and func is not None:
            bound = [
                a.value
                for a in nodes_of(func, ast.Assign)
                if any(isinstance(t, ast.Name) and t.id == value.id for t in a.targets)
            ]
            source = bound[0] if len(bound) == 1 else value
        if isinstance(source, ast.Attribute) and source.attr == "default":
            self.report(
                value,
                f"the backend is looked up with `{ast.unparse(source)}`, the registry's (GPU) default, instead of "
                "the value the ops config holds: on Ascend the NPU-normalised selection is ignored and the GPU "
                "default binds; read the config's field",
            )

    # -- helpers ---------------------------------------------------------------------------------------------

    def _field_parameter(self, name: str) -> str | None:
        """When ``name`` is a parameter of the enclosing function: an implementation field the file's own calls
        of that function pass for it (``resolve_op_impl("attn_implementation")`` for ``field``), else None."""
        func = self.ctx.function
        if func is None:
            return None
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
        if name not in params and name not in (a.arg for a in func.args.kwonlyargs):
            return None
        index = params.index(name) if name in params else None
        for call in nodes_of(self.ctx.tree, ast.Call):
            assert isinstance(call, ast.Call)
            if call_name(call) != func.name:
                continue
            passed = [k.value for k in call.keywords if k.arg == name]
            at = index
            if at is not None and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
                at -= 1  # a method called through its instance
            if at is not None and 0 <= at < len(call.args):
                passed.append(call.args[at])
            for value in passed:
                text = str_value(value)
                if text is not None and text.endswith("_implementation"):
                    return text
        return None

    def _bound_parameters(self, node: ast.Call) -> list[tuple[ast.expr, str]]:
        out = [(k.value, k.arg) for k in node.keywords if k.arg]
        positional = [a for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not positional:
            return out
        params = self._positional_params(node)
        for index, arg in enumerate(node.args):
            if index < len(params) and isinstance(arg, ast.Constant):
                out.append((arg, params[index]))
        return out

    def _positional_params(self, node: ast.Call) -> tuple[str, ...]:
        name = call_name(node)
        for func in nodes_of(self.ctx.tree, ast.FunctionDef):
            assert isinstance(func, ast.FunctionDef)
            if func.name == name:
                return tuple(a.arg for a in (*func.args.posonlyargs, *func.args.args))
        project = self.ctx.project
        if not project.root or not isinstance(node.func, ast.Name):
            return ()
        index = project.api.index
        origin = self._imported_from(name)
        if origin is None or index is None:
            return ()
        try:
            sig = index.signatures(origin).get(name)
        except Exception:  # noqa: BLE001 - an unreadable module: no answer
            return ()
        return sig.positional if sig is not None and not sig.opaque else ()

    def _imported_from(self, name: str) -> str | None:
        module, is_package = module_of(self.ctx.source.path)
        for imp in nodes_of(self.ctx.tree, ast.ImportFrom):
            assert isinstance(imp, ast.ImportFrom)
            if any((a.asname or a.name) == name and a.name == name for a in imp.names):
                from npu_lint.core.astutil import absolute_module

                return absolute_module(module, is_package, imp.level, imp.module)
        return None

    def _npu_reachable(self, node: ast.AST) -> bool:
        """Whether an NPU host can reach ``node``: no enclosing ``if`` it decides against."""
        host = NpuHost()
        parents = [*self.ctx.parents, node]
        for i, parent in enumerate(parents[:-1]):
            if not isinstance(parent, (ast.If, ast.IfExp)):
                continue
            child = parents[i + 1]
            decided, dep = host.test(parent.test, {})
            if not dep or decided is None:
                continue
            body = parent.body if isinstance(parent, ast.If) else [parent.body]
            in_body = any(child is s for s in body)
            if in_body and decided is False:
                return False
            if not in_body and child is not parent.test and decided is True:
                return False
        return True


def _is_backends(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("backends", "op_overrides")


def _literal_env(func: ast.AST, host: NpuHost) -> dict:  # noqa: ANN001
    """Locals bound once to something an NPU host evaluates to a string (a literal, an ``IfExp`` on NPU
    availability)."""
    from npu_lint.veomni.resolution import HostValue

    counts: dict[str, int] = {}
    values: dict[str, ast.expr] = {}
    for node in nodes_of(func, ast.Assign):
        assert isinstance(node, ast.Assign)
        for t in node.targets:
            if isinstance(t, ast.Name):
                counts[t.id] = counts.get(t.id, 0) + 1
                values[t.id] = node.value
    env: dict[str, HostValue] = {}
    for name, value in values.items():
        if counts[name] == 1 and isinstance(value, (ast.Constant, ast.IfExp)):
            got = host.value(value, env)
            if got.value is not None:
                env[name] = got
    return env
