"""Model registration in a package's ``__init__.py``: registered model types, static imports of generated
modules, and whether the NPU switch flag (``IS_NPU_AVAILABLE``) is bound."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from npu_lint.core.astutil import dotted_name, last_name, walk
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.veomni import patchgen
from npu_lint.veomni.selection import FLAG, DeviceChoice, device_module_ref

DEVICE_MODULE = "veomni.utils.device"


_GPU_MODULE = re.compile(r"^patched_modeling_\w+_gpu$")


_FLAG_IMPORT = re.compile(r"^from\s+(?P<module>[.\w]+)\s+import\s+[^\n]*\bIS_NPU_AVAILABLE\b", re.MULTILINE)


@dataclass
class StaticImport:
    node: ast.ImportFrom
    gpu_module: str  # e.g. "patched_modeling_gemma3_gpu"
    function: str | None  # the enclosing function (a registered one, usually)
    model_types: tuple[str, ...]  # what the enclosing function registers

    @property
    def npu_module(self) -> str:
        return self.gpu_module[: -len("_gpu")] + "_npu"


def generated_module(node: ast.ImportFrom) -> str | None:
    """``patched_modeling_<m>_gpu`` when the statement imports (from) that generated module."""
    module = node.module or ""
    last = module.rsplit(".", 1)[-1]
    parts = module.split(".")
    if _GPU_MODULE.match(last) and len(parts) >= 2 and parts[-2] == "generated":
        return last
    if last == "generated" or (node.level and module == "generated"):
        for alias in node.names:
            if _GPU_MODULE.match(alias.name):
                return alias.name
    return None


def _registry_call(node: ast.AST, registry: str = "MODELING_REGISTRY") -> bool:
    """``MODELING_REGISTRY.register`` (the attribute, possibly qualified: ``loader.MODELING_REGISTRY.register``);
    ``registry`` names another registry (``MODEL_CONFIG_REGISTRY``)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "register"
        and isinstance(node.value, (ast.Name, ast.Attribute))
        and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) == registry
    )


def _keys(node: ast.AST, loops: dict[str, list[str]]) -> list[str]:
    """The model types a registration key spells: a string, or the loop variable over a literal tuple of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in loops:
        return loops[node.id]
    return []


def _register_key(call: ast.Call) -> ast.AST | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "key"), None)


def explicit_registrations(
    tree: ast.Module, registry: str = "MODELING_REGISTRY"
) -> dict[str, list[tuple[str, int]]]:
    """Registrations written as statements at module level, by function name -> [(model type, line)]:
    ``MODELING_REGISTRY.register("t")(fn)``, ``MODELING_REGISTRY.register("t", fn)``, ``MODELING_REGISTRY["t"] =
    fn``, also inside a ``for t in ("a", "b"):`` loop over literal types (``registry``: another registry's name)."""
    out: dict[str, list[tuple[str, int]]] = {}

    def add(keys: list[str], fn: ast.AST | None, line: int) -> None:
        if isinstance(fn, ast.Call) and last_name(fn.func) == "partial" and fn.args:
            fn = fn.args[0]  # `functools.partial(load, text=True)` registers `load`
        if isinstance(fn, ast.Name):
            for key in keys:
                out.setdefault(fn.id, []).append((key, line))

    def visit(body: list[ast.stmt], loops: dict[str, list[str]]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
                values = stmt.iter.elts if isinstance(stmt.iter, (ast.Tuple, ast.List, ast.Set)) else []
                keys = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                if keys and len(keys) == len(values):
                    visit(stmt.body, {**loops, stmt.target.id: keys})
                continue
            if isinstance(stmt, ast.If):
                visit(stmt.body, loops)
                visit(stmt.orelse, loops)
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, (ast.Name, ast.Attribute))
                    and (target.value.id if isinstance(target.value, ast.Name) else target.value.attr)
                    == registry
                ):
                    add(_keys(target.slice, loops), stmt.value, stmt.lineno)
                continue
            if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
                continue
            call = stmt.value
            if isinstance(call.func, ast.Call) and _registry_call(call.func.func, registry) and call.args:
                key = _register_key(call.func)
                add(_keys(key, loops) if key is not None else [], call.args[0], stmt.lineno)
            elif _registry_call(call.func, registry) and len(call.args) >= 2:
                add(_keys(call.args[0], loops), call.args[1], stmt.lineno)
            elif _registry_call(call.func, registry):
                fn = next((k.value for k in call.keywords if k.arg == "cls_or_func"), None)
                key = _register_key(call)
                add(_keys(key, loops) if key is not None else [], fn, stmt.lineno)

    visit(tree.body, {})
    return out


def registered_types(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    explicit: dict[str, list[tuple[str, int]]] | None = None,
    registry: str = "MODELING_REGISTRY",
) -> tuple[str, ...]:
    """Model types ``func`` is registered under: by ``@MODELING_REGISTRY.register(...)`` decorators (``registry``:
    another registry's name), and by the module-level statements ``explicit`` holds (:func:`explicit_registrations`
    of the same registry)."""
    out = []
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and _registry_call(deco.func, registry):
            key = _register_key(deco)
            if key is not None:
                out.extend(_keys(key, {}))
    for key, _line in (explicit or {}).get(func.name, []):
        if key not in out:
            out.append(key)
    return tuple(out)


def find_static_imports(tree: ast.Module, choice: DeviceChoice | None = None) -> list[StaticImport]:
    """Imports of a generated GPU module that an Ascend host runs with no device test on the way: not chosen by
    ``if IS_NPU_AVAILABLE`` (in either branch) or by any equivalent of it the selection resolver reads (an alias
    ``use_npu = IS_NPU_AVAILABLE``, ``not`` forms, a helper returning the flag, an early ``return`` on the NPU
    branch)."""
    choice = choice or DeviceChoice.of(tree)
    explicit = explicit_registrations(tree)
    out: list[StaticImport] = []
    for func, body in choice.scopes():
        for reached in choice.reach("npu", body, func):
            gpu = generated_module(reached.node)
            if gpu is None or reached.switched:
                continue
            name = func.name if func is not None else None
            types = registered_types(func, explicit) if func is not None else ()
            out.append(StaticImport(reached.node, gpu, name, types))
    return sorted(out, key=lambda s: (s.node.lineno, s.node.col_offset))


def find_partial_switches(
    tree: ast.Module, choice: DeviceChoice | None = None
) -> list[tuple[ast.If, ast.FunctionDef | ast.AsyncFunctionDef | None]]:
    """Device switches over a model's generated modules with no branch for every other host: ``if
    IS_CUDA_AVAILABLE: <gpu> elif IS_NPU_AVAILABLE: <npu>`` and no ``else``. Every test is a device probe, so a
    host where none holds (CPU-only, or a probe that misreports) imports no module and the classes are unbound."""
    choice = choice or DeviceChoice.of(tree)
    out: list[tuple[ast.If, ast.FunctionDef | ast.AsyncFunctionDef | None]] = []
    for func, body in choice.scopes():
        for stmt in body:
            if not isinstance(stmt, ast.If):
                continue
            chain, node = [stmt], stmt
            while len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
                chain.append(node)
            if node.orelse or not all(
                choice.holds(n.test, h, func) is not None for n in chain for h in ("npu", "gpu")
            ):
                continue
            imports = [
                i
                for n in chain
                for b in n.body
                for i in walk(b)
                if isinstance(i, ast.ImportFrom) and device_module_ref(i) and "generated" in (i.module or "")
            ]
            if imports:
                out.append((stmt, func))
    return out


def flag_bound(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == FLAG for a in stmt.names):
            return True
    return False


def device_module_for(path: str, tree: ast.Module, device_module: str = DEVICE_MODULE) -> str:
    """How a module imports VeOmni's device helpers (``device_module``, the profile's), in its own style:
    relative (``....utils.device``) when it is inside the ``veomni`` package and imports its other veomni
    modules relatively, else absolute."""
    absolute = relative = False
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                relative = True
            elif (stmt.module or "").split(".")[0] == "veomni":
                absolute = True
        elif isinstance(stmt, ast.Import) and any(a.name.split(".")[0] == "veomni" for a in stmt.names):
            absolute = True
    module = patchgen.module_of(path)
    if relative and not absolute and module is not None and module.startswith("veomni."):
        parts = module.split(".")
        is_init = os.path.basename(path) == "__init__.py"
        depth = len(parts) if is_init else len(parts) - 1  # level 1 is the module's own package
        return "." * depth + device_module[len("veomni.") :]
    return device_module


def flag_import_module(init_path: str, tree: ast.Module) -> str:
    """Where to import ``IS_NPU_AVAILABLE`` from, following the tree's own style."""
    package_dir = os.path.dirname(os.path.abspath(init_path))
    parent = os.path.dirname(package_dir)
    try:
        siblings = sorted(os.listdir(parent))
    except OSError:
        siblings = []
    for name in siblings:
        other = os.path.join(parent, name, "__init__.py")
        if os.path.join(parent, name) == package_dir or not os.path.isfile(other):
            continue
        try:
            match = _FLAG_IMPORT.search(read_text(other, limit=MAX_SMALL_BYTES)[:8192])
        except (OSError, UnicodeDecodeError):
            continue
        if match:
            return match.group("module")
    relative = any(isinstance(s, ast.ImportFrom) and s.level for s in tree.body)
    module = patchgen.module_of(init_path)
    if relative and module is not None and module.startswith("veomni."):
        depth = len(module.split("."))  # a package's __init__: level 1 is the package itself
        return "." * depth + DEVICE_MODULE[len("veomni.") :]
    return DEVICE_MODULE


def device_module(node: ast.ImportFrom) -> str | None:
    """``"npu"`` / ``"gpu"`` when the statement imports a device module of a model (``from .generated.x_npu
    import ...``, ``from .generated import x_gpu``), else None."""
    for name in [node.module or "", *(a.name for a in node.names)]:
        last = name.rsplit(".", 1)[-1]
        if last.endswith("_npu"):
            return "npu"
        if last.endswith(("_gpu", "_cuda")):
            return "gpu"
    return None


# -- the device a branch selects by what it imports (NPU236, NPU508) ---------------------------------------------
_KIND_WORD = re.compile(r"[A-Za-z0-9]+")
_NPU_KIND_WORDS = frozenset({"npu", "ascend", "hccl"})


def name_device_kinds(name: str, gpu_words: frozenset[str], camel: bool = False) -> set[str]:
    """The device kinds (``npu``, ``gpu``) a name's words declare (``camel``: ``NpuEncoder`` is two words);
    ``gpu_words`` are the words that mean the GPU side for the caller."""
    if camel:
        name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    words = {w.lower() for w in _KIND_WORD.findall(name.replace("_", " "))}
    out = set()
    if words & _NPU_KIND_WORDS:
        out.add("npu")
    if words & gpu_words:
        out.add("gpu")
    return out


def branch_device_kinds(
    part: list[ast.stmt] | ast.expr,
    gpu_words: frozenset[str],
    *,
    camel: bool = False,
    literal: re.Pattern[str],
    literals_in_statements: bool = False,
) -> tuple[set[str], str | None]:
    """The device kinds a branch selects by what it imports (modules, names imported from them, the module names
    it passes to ``import_module``; for a conditional expression, the names it evaluates; string literals
    matching ``literal``, in statements too when ``literals_in_statements``), with the first name that decided."""
    kinds: set[str] = set()
    first: str | None = None
    nodes = [part] if isinstance(part, ast.expr) else part
    for top in nodes:
        for node in walk(top):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Call) and (dotted_name(node.func) or "").endswith("import_module"):
                if (
                    node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    names = [node.args[0].value]
            elif isinstance(top, ast.expr) and isinstance(node, (ast.Name, ast.Attribute)):
                names = [dotted_name(node) or ""]
            elif (
                (literals_in_statements or isinstance(top, ast.expr))
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and literal.match(node.value)
            ):
                names = [node.value]  # a module path (or a device/backend name), not prose
            for name in names:
                found = name_device_kinds(name.rsplit(".", 1)[-1], gpu_words, camel) or name_device_kinds(
                    name, gpu_words, camel
                )
                if found and first is None:
                    first = name
                kinds |= found
    return kinds, first
