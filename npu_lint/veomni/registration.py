"""Model registration in a package's ``__init__.py``: registered model types, static imports of generated
modules, and whether the NPU switch flag (``IS_NPU_AVAILABLE``) is bound."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from npu_lint.core.astutil import dotted_name, last_name, str_value, walk
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.veomni import patchgen

DEVICE_MODULE = "veomni.utils.device"


FLAG = "IS_NPU_AVAILABLE"


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


def _mentions_flag(test: ast.expr) -> bool:
    """Whether ``test`` chooses by device: the ``IS_NPU_AVAILABLE`` flag, or any equivalent probe
    (``get_device_type() == "npu"``, ``is_torch_npu_available()``, an ``is_npu()`` helper) anywhere in it."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id == FLAG:
            return True
        if isinstance(node, ast.Attribute) and node.attr == FLAG:
            return True
        if isinstance(node, ast.expr) and (device_probe(node) is not None or _npu_helper(node)):
            return True
    return False


_NPU_HELPER = re.compile(
    r"(?i)^(is_|use_|on_|run_on_|running_on_)?(torch_)?npu(_is)?(_available|_device|_host)?$"
)


def _npu_helper(node: ast.expr) -> bool:
    """A device helper by its name alone: ``is_npu()``, ``IS_NPU``, ``utils.on_npu``, ``npu_is_available()``."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    name = dotted_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return name is not None and bool(_NPU_HELPER.match(name.rsplit(".", 1)[-1]))


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


def find_static_imports(tree: ast.Module) -> list[StaticImport]:
    """Imports of a generated GPU module not chosen by an ``if IS_NPU_AVAILABLE`` (in either branch)."""
    out: list[StaticImport] = []
    explicit = explicit_registrations(tree)

    def visit(body: list[ast.stmt], func: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom):
                gpu = generated_module(stmt)
                if gpu is not None:
                    name = func.name if func is not None else None
                    types = registered_types(func, explicit) if func is not None else ()
                    out.append(StaticImport(stmt, gpu, name, types))
            elif isinstance(stmt, ast.If):
                if _mentions_flag(stmt.test):
                    continue  # already chosen by device
                visit(stmt.body, func)
                visit(stmt.orelse, func)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(stmt.body, stmt)
            elif isinstance(stmt, (ast.Try, ast.With, ast.For, ast.While)):
                for attr in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, attr, []), func)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body, func)

    visit(tree.body, None)
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


# -- choosing a model's NPU or GPU module (NPU233) --------------------------------------------------------------
_DEVICE_FLAGS = {FLAG: True, "IS_CUDA_AVAILABLE": False, "IS_GPU_AVAILABLE": False}
_DEVICE_CALLS = {
    "is_torch_npu_available": True,
    "is_npu_available": True,
    "torch.npu.is_available": True,
    "torch.cuda.is_available": False,
    "is_torch_cuda_available": False,
}
_DEVICE_NAMES = {"npu": True, "cuda": False, "gpu": False}
_STATIC_FALSE = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}  # false when the code runs


def _compared_to_bool(node: ast.expr) -> tuple[ast.expr, bool] | None:
    """``probe is True`` / ``probe == False`` / ``probe is not True``: the probe, and whether the test holds when
    the probe does; None for any other expression."""
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
        and isinstance(node.comparators[0], ast.Constant)
        and isinstance(node.comparators[0].value, bool)
    ):
        return node.left, isinstance(node.ops[0], (ast.Is, ast.Eq)) == node.comparators[0].value
    return None


def device_probe(node: ast.expr) -> bool | None:
    """Whether ``node`` tests the device, and on which host it holds: True on Ascend hosts (``IS_NPU_AVAILABLE``,
    ``is_torch_npu_available()``, ``torch.npu.is_available()``, ``device_type == "npu"``), False on GPU hosts
    (``IS_CUDA_AVAILABLE``, ``not IS_NPU_AVAILABLE``), None when it is no device probe (a setting that merely
    mentions NPU in its name is none)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = device_probe(node.operand)
        return None if inner is None else not inner
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return _DEVICE_FLAGS.get(name)
    if isinstance(node, ast.Call) and not node.args:
        func = dotted_name(node.func) or ""
        for known, polarity in _DEVICE_CALLS.items():
            if func == known or func.endswith("." + known):
                return polarity
        return None
    compared = _compared_to_bool(node)
    if compared is not None:  # `IS_NPU_AVAILABLE is True`, `is_torch_npu_available() == False`
        inner = device_probe(compared[0])
        return None if inner is None else inner == compared[1]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        left, right = node.left, node.comparators[0]
        for value, other in ((str_value(right), left), (str_value(left), right)):
            text = ast.unparse(other)
            if value in _DEVICE_NAMES and ("device" in text or text.endswith(".type")):
                return _DEVICE_NAMES[value] == isinstance(node.ops[0], ast.Eq)
        return None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Call):
        func = dotted_name(node.left.func) or ""
        if func in ("torch.npu.device_count", "torch.cuda.device_count"):
            return func.startswith("torch.npu") == isinstance(node.ops[0], (ast.Gt, ast.GtE, ast.NotEq))
    return None


def static_false(node: ast.expr) -> bool:
    """``TYPE_CHECKING``: false whenever the code runs (an ``or`` with it is the other operand alone)."""
    return (dotted_name(node) or "") in _STATIC_FALSE


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


# -- "not CUDA" standing for "NPU" (NPU236) --------------------------------------------------------------------
_CUDA_FLAGS = {"IS_CUDA_AVAILABLE", "IS_GPU_AVAILABLE", "IS_CUDA", "USE_CUDA"}
_CUDA_CALLS = ("torch.cuda.is_available", "is_torch_cuda_available", "is_cuda_available")


def cuda_probe(node: ast.expr) -> bool | None:
    """Whether ``node`` probes for CUDA alone: True when it holds exactly on CUDA hosts (``IS_CUDA_AVAILABLE``,
    ``torch.cuda.is_available()``, ``get_device_type() == "cuda"``), False when it holds on every host that is
    not CUDA (its negation: Ascend, CPU, MLU alike), None when it is no CUDA probe."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = cuda_probe(node.operand)
        return None if inner is None else not inner
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return True if name in _CUDA_FLAGS else None
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        func = dotted_name(node.func) or ""
        return True if any(func == c or func.endswith("." + c) for c in _CUDA_CALLS) else None
    compared = _compared_to_bool(node)
    if compared is not None:  # `IS_CUDA_AVAILABLE is True`, `torch.cuda.is_available() == False`
        inner = cuda_probe(compared[0])
        return None if inner is None else inner == compared[1]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        left, right = node.left, node.comparators[0]
        for value, other in ((str_value(right), left), (str_value(left), right)):
            text = ast.unparse(other)
            if value in ("cuda", "gpu") and ("device" in text or text.endswith(".type")):
                return isinstance(node.ops[0], ast.Eq)
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


# -- which device module each host imports (NPU233) -------------------------------------------------------------
HOSTS = ("npu", "gpu")  # an Ascend host, a CUDA host


def host_holds(
    test: ast.expr, host: str, names: dict[str, ast.expr] | None = None, depth: int = 0
) -> bool | None:
    """Whether ``test`` holds on ``host`` (``"npu"``: Ascend, ``"gpu"``: CUDA) as far as the device decides it:
    True / False, or None when another condition (an architecture, a setting, an environment variable) decides.
    ``names`` maps local names to the single expression they were assigned (``_ON_NPU = IS_NPU_AVAILABLE and
    x``), followed a few levels deep."""
    probe = device_probe(test)
    if probe is not None:
        return probe if host == "npu" else not probe
    cuda = cuda_probe(test)
    if cuda is not None:
        return cuda if host == "gpu" else not cuda
    if static_false(test) or _other_device_probe(test):
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = host_holds(test.operand, host, names, depth)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        results = [host_holds(v, host, names, depth) for v in test.values]
        short = isinstance(
            test.op, ast.Or
        )  # the value that decides the whole: True for `or`, False for `and`
        if short in results:
            return short
        return None if None in results else not short
    if isinstance(test, ast.Name) and names and test.id in names and depth < 4:
        return host_holds(names[test.id], host, names, depth + 1)
    if _helper_call(test, names) and depth < 4:
        return host_holds(names[f"{test.func.id}()"], host, names, depth + 1)  # type: ignore[index,union-attr]
    return None


def _helper_call(test: ast.expr, names: dict[str, ast.expr] | None) -> bool:
    """``_use_npu_module()``: a call without arguments of a function of ``names`` (its returned expression)."""
    return (
        isinstance(test, ast.Call)
        and not test.args
        and not test.keywords
        and isinstance(test.func, ast.Name)
        and bool(names)
        and f"{test.func.id}()" in names  # type: ignore[operator]
    )


_OTHER_DEVICE = re.compile(r"(?i)(^|_)(mlu|xpu|musa|hpu|mps)(_|$)")


def _other_device_probe(node: ast.expr) -> bool:
    """A probe for a third kind of host (``IS_MLU_AVAILABLE``, ``is_torch_xpu_available()``,
    ``get_device_type() == "mlu"``): false on Ascend and CUDA hosts alike."""
    if isinstance(node, ast.Call) and not node.args:
        node = node.func
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return bool(_OTHER_DEVICE.search(name)) and ("available" in name.lower() or name.isupper())
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        for value, other in (
            (str_value(node.comparators[0]), node.left),
            (str_value(node.left), node.comparators[0]),
        ):
            text = ast.unparse(other)
            if value in ("mlu", "xpu", "musa", "hpu", "mps", "cpu") and (
                "device" in text or text.endswith(".type")
            ):
                return True
    return False


def mentions_device(test: ast.expr, names: dict[str, ast.expr] | None = None, depth: int = 0) -> bool:
    """Whether a device probe is part of ``test`` (directly or through a name of ``names``)."""
    for node in ast.walk(test):
        if isinstance(node, ast.expr) and (device_probe(node) is not None or cuda_probe(node) is not None):
            return True
        if isinstance(node, ast.Name) and names and node.id in names and depth < 4:
            if mentions_device(names[node.id], names, depth + 1):
                return True
        if _helper_call(node, names) and depth < 4:
            if mentions_device(names[f"{node.func.id}()"], names, depth + 1):  # type: ignore[index,union-attr]
                return True
    return False


def probe_names(scopes: list[list[ast.stmt]]) -> dict[str, ast.expr]:
    """The names assigned exactly once, in the statement lists of ``scopes`` (a module's, a function's own), from
    an expression that tests the device: ``_USE_NPU_MODULE = IS_NPU_AVAILABLE and not flag``."""
    found: dict[str, ast.expr] = {}
    counts: dict[str, int] = {}
    for stmts in scopes:
        for stmt in stmts:
            target: ast.expr | None = None
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            body = [
                b
                for b in getattr(stmt, "body", [])
                if not isinstance(getattr(b, "value", None), ast.Constant)
            ]
            if (
                isinstance(stmt, ast.FunctionDef)
                and not any((*stmt.args.posonlyargs, *stmt.args.args, *stmt.args.kwonlyargs))
                and len(body) == 1
                and isinstance(body[0], ast.Return)
                and body[0].value is not None
            ):
                # `def _use_npu_module(): return IS_NPU_AVAILABLE`, called as `_use_npu_module()`
                target, value = ast.Name(id=f"{stmt.name}()"), body[0].value
            if isinstance(target, ast.Name) and value is not None:
                counts[target.id] = counts.get(target.id, 0) + 1
                found[target.id] = value
    out = {k: v for k, v in found.items() if counts[k] == 1}
    return {k: v for k, v in out.items() if mentions_device(v, out)}


def device_module_ref(node: ast.ImportFrom) -> tuple[str, str] | None:
    """(``"npu"``/``"gpu"``, the module's stem without its device suffix) of a model's device module import:
    ``from .generated.patched_modeling_x_npu import A`` -> ("npu", "generated.patched_modeling_x")."""
    module = node.module or ""
    for name in [module, *(f"{module}.{a.name}" if module else a.name for a in node.names)]:
        last = name.rsplit(".", 1)[-1]
        for suffix, kind in (("_npu", "npu"), ("_gpu", "gpu"), ("_cuda", "gpu")):
            if last.endswith(suffix) and len(last) > len(suffix):
                return kind, name[: -len(suffix)]
    return None


@dataclass(frozen=True)
class Reached:
    """A device module import one host runs: its kind and stem (``device_module_ref``), the statement, whether a
    device test is on its path, and the first test on its path that the device does not decide (with the branch
    taken: True the body, False the else branch), or the first statement of a ``try`` whose failure runs it (branch
    None), or None when the host always runs it."""

    kind: str
    stem: str
    node: ast.ImportFrom
    switched: bool
    narrowed_by: ast.AST | None = None
    branch: bool | None = None


def device_reach(stmts: list[ast.stmt], host: str, names: dict[str, ast.expr] | None = None) -> list[Reached]:
    """The device module imports ``host`` runs in ``stmts`` (nested function and class bodies excluded), each
    with the conditions on its path (``Reached``)."""
    out: list[Reached] = []
    _reach(stmts, host, names or {}, False, None, None, out)
    return out


def _reach(
    stmts: list[ast.stmt],
    host: str,
    names: dict[str, ast.expr],
    switched: bool,
    narrowed: ast.AST | None,
    branch: bool | None,
    out: list[Reached],
) -> bool:
    """Appends what ``host`` imports in ``stmts`` to ``out``; True when the block always ends the function (a
    ``return`` or ``raise`` on every path the device decides)."""
    for stmt in stmts:
        if isinstance(stmt, ast.ImportFrom):
            ref = device_module_ref(stmt)
            if ref is not None:
                out.append(Reached(ref[0], ref[1], stmt, switched, narrowed, branch))
        elif isinstance(stmt, (ast.Return, ast.Raise)):
            return True
        elif isinstance(stmt, ast.If):
            holds = host_holds(stmt.test, host, names)
            device = switched or mentions_device(stmt.test, names)
            if holds is not None:
                if _reach(stmt.body if holds else stmt.orelse, host, names, device, narrowed, branch, out):
                    return True
                continue
            first = narrowed is None
            ends_body = _reach(
                stmt.body,
                host,
                names,
                device,
                stmt.test if first else narrowed,
                True if first else branch,
                out,
            )
            ends_else = _reach(
                stmt.orelse,
                host,
                names,
                device,
                stmt.test if first else narrowed,
                False if first else branch,
                out,
            )
            if ends_body and ends_else:
                return True
            if (ends_body or ends_else) and first:
                # what follows runs only where the test took the other branch
                narrowed, branch, switched = stmt.test, not ends_body, device
        elif isinstance(stmt, ast.Try):
            ends = _reach(stmt.body, host, names, switched, narrowed, branch, out)
            for handler in stmt.handlers:
                # the handler runs where the ``try`` body failed: narrowed by that body (its first statement)
                _reach(
                    handler.body,
                    host,
                    names,
                    switched,
                    narrowed or stmt.body[0],
                    branch if narrowed else None,
                    out,
                )
            _reach(stmt.orelse, host, names, switched, narrowed, branch, out)
            if _reach(stmt.finalbody, host, names, switched, narrowed, branch, out) or (
                ends and not stmt.handlers
            ):
                return True
        elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            if _reach(stmt.body, host, names, switched, narrowed, branch, out) and isinstance(
                stmt, (ast.With, ast.AsyncWith)
            ):
                return True
            if not isinstance(stmt, (ast.With, ast.AsyncWith)):
                _reach(stmt.orelse, host, names, switched, narrowed, branch, out)
    return False
