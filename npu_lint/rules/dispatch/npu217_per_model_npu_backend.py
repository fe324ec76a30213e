"""NPU217 per-model-npu-backend."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import NPU
from npu_lint.veomni.imports import ModuleIndex

_BACKEND_WORDS = ("BackendSpec", "extra_backends", "backends")


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _names_npu(name: str | None) -> bool:
    """``npu``, ``fused_npu``, ``npu-fast``: "npu" as a word of the name (not ``inputs``)."""
    return name is not None and "npu" in re.split(r"[^a-z0-9]+", name.lower())


def _is_backend(node: ast.expr | None) -> bool:
    """A ``BackendSpec(...)``-style call: it names an ``entry=``."""
    return isinstance(node, ast.Call) and _keyword(node, "entry") is not None


class PerModelNpuBackend(Rule):
    code = "NPU217"
    name = "per-model-npu-backend"
    summary = (
        "A per-model ops table disables the NPU backend of an op the tree has NPU kernels for "
        '(`"npu": None`), or binds a backend whose entry is a `forward(self, ...)` function without '
        "`replace_forward=True` (the module's class is replaced by a function)."
    )
    why = (
        "A model's device patch (`apply_per_model_patches(..., extra_backends={op: {name: BackendSpec(...)}})`) "
        "chooses, per op, what the ops config's implementation name binds in that model's modeling module. On "
        "Ascend the ops config resolves the NPU-capable ops to their NPU name, so a table entry that disables "
        "that name (`None` means 'explicitly disabled') makes every NPU build of the model raise, although the "
        "tree registers NPU kernels for the op. And a backend binds its entry onto the module attribute "
        "(the class named in `targets`) unless `replace_forward=True` asks for the class's `forward`: an entry "
        "that is a method body (`def f(self, hidden_states)`) bound without it replaces the class itself, so "
        "the model's constructors call the forward function with their constructor arguments and the model "
        "cannot be built on the device that selects it. The entry is read from the tree (`module:function`), "
        "the NPU rows from the tree's registry."
    )
    bad = (
        Example(
            """
            from veomni.ops.config.registry import BackendSpec, apply_per_model_patches


            def apply_toy_device_patch(gen_module):
                apply_per_model_patches(
                    hf_module=gen_module,
                    model_name="Toy",
                    targets={"layer_norm": "ToyLayerNorm"},
                    extra_backends={
                        "layer_norm": {
                            "npu": BackendSpec(entry="veomni.models.toy.device_patch:npu_norm_forward", requires=("torch_npu",)),
                        },
                    },
                )


            def npu_norm_forward(self, hidden_states):
                return hidden_states * self.weight
            """,
            path="veomni/models/toy/device_patch.py",
            title="a forward function bound without `replace_forward=True` (it replaces the class)",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.config.registry import BackendSpec, apply_per_model_patches


            def apply_toy_device_patch(gen_module):
                apply_per_model_patches(
                    hf_module=gen_module,
                    model_name="Toy",
                    targets={"layer_norm": "ToyLayerNorm", "rope": "apply_rope"},
                    extra_backends={
                        "layer_norm": {
                            "npu": BackendSpec(
                                entry="veomni.models.toy.device_patch:npu_norm_forward",
                                requires=("torch_npu",),
                                replace_forward=True,
                            ),
                        },
                        "rope": {"liger_kernel": None, "npu": BackendSpec(entry="veomni.models.toy.device_patch:npu_rope")},
                    },
                )


            def npu_norm_forward(self, hidden_states):
                return hidden_states * self.weight


            def npu_rope(q, k, cos, sin):
                return q, k
            """,
            path="veomni/models/toy/device_patch.py",
        ),
    )
    fix_safety = (
        "No fix: whether the backend replaces the class or its `forward`, and whether the model really lacks an "
        "NPU kernel, is decided by hand."
    )
    requires = (_BACKEND_WORDS,)
    node_types = (ast.Dict,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._index: ModuleIndex | None = None

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=False):
            op = str_value(key) if key is not None else None
            entries = self._entries(value) if op is not None else None
            if op is None or entries is None:
                continue
            if not any(_is_backend(v) for _n, v in entries) and not any(
                isinstance(v, ast.Constant) and v.value is None for _n, v in entries
            ):
                continue
            disabled = [v for _n, v in entries if isinstance(v, ast.Constant) and v.value is None]
            if len(disabled) > 1 and len(disabled) < len(entries):
                # several registry backends disabled while the model binds its own: a curated list for a variant
                # the generic kernels do not implement (deepseek_v4's interleaved partial rotary), not an oversight
                continue
            for name, backend in entries:
                if _names_npu(name) and isinstance(backend, ast.Constant) and backend.value is None:
                    self._disabled(op, name or "", backend)
        for value in node.values:
            if _is_backend(value):
                self._forward_entry(value)  # type: ignore[arg-type]

    def _entries(self, value: ast.expr) -> list[tuple[str | None, ast.expr]] | None:
        """(backend name, backend) of a per-op table: a dict literal, ``dict(name=...)``, or a module-level
        name bound to either."""
        if isinstance(value, ast.Name):
            bound = [
                stmt.value
                for stmt in self.ctx.tree.body
                if isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == value.id for t in stmt.targets)
            ]
            if len(bound) != 1:
                return None
            value = bound[0]
        if isinstance(value, ast.Dict):
            return [
                (str_value(k), v) for k, v in zip(value.keys, value.values, strict=False) if k is not None
            ]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
            return [(kw.arg, kw.value) for kw in value.keywords if kw.arg is not None]
        return None

    def _disabled(self, op: str, name: str, at: ast.expr) -> None:
        rows = [
            r
            for r in (*self.ctx.project.registered, *self.ctx.project.slot_rows)
            if r.op == op and r.requirement == NPU
        ]
        if not rows:
            return
        variants = ", ".join(sorted({r.variant for r in rows}))
        self.report(
            at,
            f'`"{name}": None` disables the NPU backend of `{op}` in this model, but the tree registers NPU '
            f"kernels for `{op}` ({variants}) and the ops config resolves it to its NPU name on Ascend: every "
            "NPU build of the model raises 'explicitly disabled'; bind the NPU backend (or leave the registry "
            "default)",
        )

    def _forward_entry(self, call: ast.Call) -> None:
        if _true(_keyword(call, "replace_forward")) or _true(_keyword(call, "entry_is_factory")):
            return
        if _keyword(call, "replace_forward") is not None or _keyword(call, "entry_is_factory") is not None:
            return  # not a literal: decided at run time
        entry = str_value(_keyword(call, "entry"))
        if entry is None or ":" not in entry:
            return
        module, _, function = entry.partition(":")
        params = self._params(module, function)
        if not params or params[0] != "self":
            return
        self.report(
            call,
            f"the backend's entry `{function}` ({module}) is a method body (`{function}(self, ...)`) but the "
            "backend does not set `replace_forward=True`: it replaces the patched class itself with this "
            "function, so every constructor call of the class calls the forward instead; set "
            "`replace_forward=True`",
        )

    def _params(self, module: str, function: str) -> tuple[str, ...] | None:
        """The parameters of ``module.function`` as the tree defines it (this file, or the module on disk)."""
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == function:
                own = self.ctx.source.path.replace("\\", "/").removesuffix(".py").replace("/", ".")
                if own.endswith(module) or own.endswith(module + ".__init__"):
                    return tuple(a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args))
        root = self.ctx.project.root
        if not root:
            return None
        if self._index is None:
            api_index = self.ctx.project.api.index
            self._index = api_index if api_index is not None else ModuleIndex(root)
        info = self._index.info(module)
        if info is None:
            return None
        return info.functions.get(function)
