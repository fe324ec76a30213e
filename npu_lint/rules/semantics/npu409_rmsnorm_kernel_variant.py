"""NPU409 rmsnorm-kernel-variant."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import call_arg, last_name, module_package, nodes_of, resolve_relative, str_value
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.norms import function_kernel, kernel_function, rms_variant_contract
from npu_lint.veomni.patchgen import load_file

_WHAT = {
    "offset": "adds 1 to the weight",
    "standard": "uses the weight as given",
    "unweighted": "takes no weight",
}


def _imports(tree: ast.AST, path: str) -> dict[str, str]:
    """name -> dotted of the imports directly in ``tree``'s body (a module, or a factory function)."""
    out: dict[str, str] = {}
    body = getattr(tree, "body", [])
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom):
            base = "." * stmt.level + (stmt.module or "")
            for alias in stmt.names:
                full = f"{base}.{alias.name}" if not base.endswith(".") else f"{base}{alias.name}"
                out[alias.asname or alias.name] = resolve_relative(path, full)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                out[alias.asname or alias.name.partition(".")[0]] = (
                    alias.name if alias.asname else alias.name.partition(".")[0]
                )
    return out


def _dotted(node: ast.AST, imports: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imports:
        return None
    return ".".join([imports[node.id], *reversed(parts)])


def _function_of(
    node: ast.AST, tree: ast.Module, imports: dict[str, str]
) -> tuple[str | None, ast.AST | None]:
    """The kernel function a row binds: (dotted name, the module-level def of the registering file when it is one)."""
    if isinstance(node, ast.Name):
        local = next(
            (s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == node.id),
            None,
        )
        if local is not None:
            return None, local
    return _dotted(node, imports), None


def _factory_result(
    factory: ast.FunctionDef, tree: ast.Module, path: str, module_imports: dict[str, str]
) -> tuple[str | None, ast.AST | None, dict[str, object]]:
    """What a KernelSpec factory returns: `from .npu import fn; return fn` -> the dotted name of `fn`; a function
    of the same module -> its def; `return functools.partial(fn, zero_centered=True)` -> `fn` and the keywords."""
    imports = {**module_imports, **_imports(factory, path)}
    nested = {s.name: s for s in factory.body if isinstance(s, ast.FunctionDef)}
    for node in _walk(factory):
        if isinstance(node, ast.Return) and node.value is not None:
            value, flags = _partial(node.value)
            if isinstance(value, ast.Name) and value.id in nested:
                return (
                    None,
                    nested[value.id],
                    flags,
                )  # a kernel the factory defines (a closure over Liger's function)
            if isinstance(value, ast.Name) and value.id not in imports:
                return (*_function_of(value, tree, imports), flags)
            return _dotted(value, imports), None, flags
    return None, None, {}


def _partial(node: ast.expr) -> tuple[ast.expr, dict[str, object]]:
    """A row's callable and the keywords its binding fixes: ``functools.partial(kernel, zero_centered=True)`` ->
    (``kernel``, ``{"zero_centered": True}``); a plain name -> (it, ``{}``: its defaults)."""
    if (
        isinstance(node, ast.Call)
        and last_name(node.func) == "partial"
        and node.args
        and len(node.args) == 1
        and all(k.arg is not None and isinstance(k.value, ast.Constant) for k in node.keywords)
    ):
        return node.args[0], {k.arg: k.value.value for k in node.keywords}  # type: ignore[union-attr, misc]
    return node, {}


Row = tuple[str, ast.expr, "str | None", "ast.AST | None", dict[str, object]]


def registered_rms_rows(tree: ast.Module, path: str) -> list[Row]:
    """The rms_norm rows of a registering module binding a variant to a function: (variant, the argument naming the
    function, its dotted name, or its def in the same file, the keywords a ``functools.partial`` binding fixes)."""
    out: list[Row] = []
    imports = _imports(tree, path)
    for call in nodes_of(tree, ast.Call):
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if name == "KernelSpec":
            if str_value(call_arg(call, 99, "op_name")) != "rms_norm":
                continue
            variant = str_value(call_arg(call, 99, "variant"))
            factory = call_arg(call, 99, "factory")
            if variant is None or not isinstance(factory, ast.Name):
                continue
            dotted, local = _function_of(factory, tree, imports)
            flags: dict[str, object] = {}
            if isinstance(local, ast.FunctionDef):
                dotted, local, flags = _factory_result(local, tree, path, imports)
            out.append((variant, factory, dotted, local, flags))
        elif name in ("register_op", "register_kernel"):
            if str_value(call_arg(call, 0, "op")) != "rms_norm":
                continue
            variant = str_value(call_arg(call, 1, "variant"))
            if variant is None:
                continue
            for index, keyword in ((3, "forward"), (4, "backward")):
                node = call_arg(call, index, keyword)
                if node is None:
                    continue
                target, flags = _partial(node)
                dotted, local = _function_of(target, tree, imports)
                out.append((variant, node, dotted, local, flags))
    return out


def _contract_of(
    dotted: str | None,
    local: ast.AST | None,
    anchor: str,
    variants: set[str],
    flags: dict[str, object],
    module: ast.Module | None = None,
) -> str | None:
    if isinstance(local, ast.FunctionDef):
        return function_kernel(local, module, flags).contract
    if dotted is None:
        return None
    found = kernel_function(dotted, anchor, flags)
    if found is not None and found.contract is not None:
        return found.contract
    # not on disk: the package the row imports it from names a variant (`rms_norm.standard.npu.forward`)
    parts = dotted.split(".")
    if "rms_norm" in parts:
        for part in parts[parts.index("rms_norm") + 1 : -1]:
            if part in variants:
                return rms_variant_contract(None, part)
    return None


def _module_of(path: str) -> str | None:
    package = module_package(path)
    if not package:
        return None
    stem = os.path.splitext(os.path.basename(path))[0]
    return ".".join(package) if stem == "__init__" else ".".join([*package, stem])


def _weight_node(func: ast.FunctionDef) -> ast.AST:
    """Where to report in a kernel function: the weight argument of its RMSNorm kernel call, else the def."""
    for node in _walk(func):
        if isinstance(node, ast.Call) and "rms" in (ast.unparse(node.func).lower()) and len(node.args) >= 2:
            return node.args[1]
    return func


def _forwards_weight(func: ast.AST | None) -> bool:
    """A kernel function whose weight parameter is only handed to another call as it is (a closure over Liger's
    functional RMSNorm): it serves an unweighted row as well as a standard one."""
    if not isinstance(func, ast.FunctionDef):
        return False
    params = [a.arg for a in func.args.args]
    weight = next((p for p in params if "weight" in p), None)
    if weight is None:
        return False
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == weight]
    passed = {
        id(a)
        for n in ast.walk(func)
        if isinstance(n, ast.Call)
        for a in [*n.args, *(k.value for k in n.keywords)]
    }
    return bool(uses) and all(id(u) in passed for u in uses)


def _offset_argument(func: ast.FunctionDef) -> ast.AST | None:
    """The offset argument of the Liger RMSNorm call in ``func`` (``LigerRMSNormFunction.apply(x, w, eps,
    offset, ...)``), where a wrong offset is written."""
    for node in _walk(func):
        if isinstance(node, ast.Call) and "liger" in ast.unparse(node.func).lower():
            value = next((k.value for k in node.keywords if k.arg == "offset"), None)
            if value is None and len(node.args) > 3:
                value = node.args[3]
            if value is not None:
                return value
    return None


class RmsNormKernelVariant(Rule):
    code = "NPU409"
    name = "rmsnorm-kernel-variant"
    summary = (
        "A kernel registration row binds an RMSNorm variant to a kernel function that applies the weight another "
        "way (an offset variant's row running a kernel that uses the weight as given, or the reverse)."
    )
    why = (
        "Each RMSNorm variant of the registry has a weight contract: `standard` multiplies by the weight, the "
        "offset variant (`qwen3_5`, Gemma-style zero-initialised weights) by `1 + weight`, `unweighted` by none. "
        'The row for a device (`register_op("rms_norm", variant, "npu", forward, backward)`, '
        '`KernelSpec(op_name="rms_norm", variant=..., factory=...)`) must run a kernel with the same contract: '
        "an offset variant bound to a plain kernel multiplies every norm of a Gemma/Qwen3.5 model by ~0 on that "
        "device while the other rows stay correct. The kernel function's contract is read from its source in the "
        "tree (`npu_rms_norm(x, 1.0 + weight, eps)` adds the offset) or, when the tree does not hold it, from the "
        "variant package it is imported from. Reported at the row in the registering module, and in the kernel's "
        "own module at its weight argument when a sibling or parent package registers it for another variant."
    )
    bad = (
        Example(
            """
            from ...registry import register_op
            from .gemma import triton as gemma_triton
            from .standard import triton as standard_triton

            register_op("rms_norm", "standard", "triton", standard_triton.forward, standard_triton.backward)
            register_op("rms_norm", "gemma", "triton", standard_triton.forward, gemma_triton.backward)
            """,
            path="veomni/ops/kernels/rms_norm/__init__.py",
            title="an offset variant's row bound to the standard variant's kernel",
        ),
        Example(
            """
            import torch_npu

            from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


            def centered_norm_npu(x, norm_weight, eps):
                return torch_npu.npu_rms_norm(x, norm_weight, eps)[0]


            def _centered_factory():
                return centered_norm_npu


            KERNEL_REGISTRY.register(
                KernelSpec(name="npu", op_name="rms_norm", variant="qwen3_5", factory=_centered_factory)
            )
            """,
            path="veomni/ops/kernels/rms_norm/centered.py",
            title="a kernel registered for the offset variant that drops the offset",
        ),
    )
    good = (
        Example(
            """
            import torch_npu

            from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


            def centered_norm_npu(x, norm_weight, eps):
                return torch_npu.npu_rms_norm(x, 1.0 + norm_weight, eps)[0]


            def _centered_factory():
                return centered_norm_npu


            KERNEL_REGISTRY.register(
                KernelSpec(name="npu", op_name="rms_norm", variant="qwen3_5", factory=_centered_factory)
            )
            """,
            path="veomni/ops/kernels/rms_norm/centered.py",
        ),
    )
    fix_safety = "No fix: which kernel the row should run is the registry's choice."

    requires = ("rms_norm", ("register_op", "register_kernel", "KernelSpec", "rms_norm"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.kernel and not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        path = ctx.source.path
        seen: set[int] = set()
        rows = registered_rms_rows(ctx.tree, path)
        variants = {v for v, *_ in rows}
        for variant, node, dotted, local, flags in rows:
            want = rms_variant_contract(None, variant)
            got = _contract_of(dotted, local, path, variants, flags, ctx.tree)
            if want is None or got is None or want == got or id(node) in seen:
                continue
            if want == "unweighted" and got == "standard" and _forwards_weight(local):
                continue  # hands its weight argument on untouched: `None` stays `None`
            seen.add(id(node))
            name = (
                ast.unparse(node)
                if isinstance(node, ast.Attribute) or dotted is None
                else dotted.split(".")[-1]
            )
            at, through = self._kernel_named_by_factory(node, variant)
            if isinstance(local, ast.FunctionDef) and local not in ctx.tree.body:
                at, through = _offset_argument(local) or at, ""  # a factory's own kernel: its kernel call
            self.report(
                at,
                f'the `rms_norm` variant "{variant}" (which {_WHAT[want]}) is bound to `{name}`, which {_WHAT[got]}'
                + through,
            )
        self._registered_elsewhere(variants)

    def _kernel_named_by_factory(self, node: ast.expr, variant: str) -> tuple[ast.AST, str]:
        """Where the mismatch is written: a factory of this file named for the row's variant
        (``_npu_standard_rms_norm_factory`` for "standard") was written for it, so the kernel it returns is the
        odd one (reported at that ``return``); otherwise the row's own argument."""
        if not isinstance(node, ast.Name) or variant.lower() not in node.id.lower():
            return node, ""
        factory = next(
            (s for s in self.ctx.tree.body if isinstance(s, ast.FunctionDef) and s.name == node.id), None
        )
        returns = (
            [r for r in ast.walk(factory) if isinstance(r, ast.Return) and r.value is not None]
            if factory
            else []
        )
        if not returns:
            return node, ""
        return returns[
            -1
        ].value, f" (returned by `{node.id}`, registered for that variant at line {node.lineno})"

    def _registered_elsewhere(self, here: set[str]) -> None:
        """This kernel module's functions as the package's registering modules bind them."""
        ctx = self.ctx
        path = os.path.abspath(ctx.source.path)
        module = _module_of(path)
        if module is None:
            return
        functions = {s.name: s for s in ctx.tree.body if isinstance(s, ast.FunctionDef)}
        if not functions:
            return
        directory = os.path.dirname(path)
        candidates = [
            os.path.join(directory, "__init__.py"),
            os.path.join(os.path.dirname(directory), "__init__.py"),
        ]
        for other in candidates:
            if other == path or not os.path.isfile(other):
                continue
            parsed = load_file(other)
            if parsed is None or parsed.tree is None or "rms_norm" not in parsed.text:
                continue
            for variant, _node, dotted, _local, flags in registered_rms_rows(parsed.tree, other):
                if dotted is None or dotted.rpartition(".")[0] != module:
                    continue
                func = functions.get(dotted.rpartition(".")[2])
                if func is None:
                    continue
                want = rms_variant_contract(None, variant)
                got = function_kernel(func, ctx.tree, flags).contract
                if want is None or got is None or want == got:
                    continue
                self.report(
                    _weight_node(func),
                    f"`{func.name}` {_WHAT[got]}, but `{os.path.relpath(other, directory)}` registers it for the "
                    f'`rms_norm` variant "{variant}", which {_WHAT[want]}',
                )
