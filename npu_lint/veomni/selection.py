"""How a file chooses by device: the device probes (``IS_NPU_AVAILABLE``, ``is_torch_npu_available()``,
``get_device_type() == "npu"``, their CUDA twins), the local names and helpers that hold one (an alias
``use_npu = IS_NPU_AVAILABLE``, ``not`` forms, ``def _on_npu(): return IS_NPU_AVAILABLE``, an import alias), and
which device-module imports each host runs. One resolver for every rule that reads an import-time device choice
(NPU502, NPU233, NPU236/NPU237 through the probes): a condition written another way is the same condition."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from npu_lint.core.astutil import dotted_name, nodes_of, scoped_memo, str_value, walk

FLAG = "IS_NPU_AVAILABLE"

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
    compared = _compared_to_bool(test)
    if compared is not None:  # `use_npu is True`, `_on_gpu() == False`
        inner = host_holds(compared[0], host, names, depth)
        return None if inner is None else inner == compared[1]
    if _truth_call(test):  # `bool(IS_NPU_AVAILABLE)`
        return host_holds(test.args[0], host, names, depth)  # type: ignore[attr-defined]
    if isinstance(test, ast.Call) and npu_helper(test):
        return host == "npu"  # `is_npu()`, `on_npu()`: a helper of the tree, by its name
    return None


def _truth_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "bool"
        and len(node.args) == 1
        and not node.keywords
    )


_NPU_HELPER = re.compile(
    r"(?i)^(is_|use_|on_|run_on_|running_on_)?(torch_)?npu(_is)?(_available|_device|_host)?$"
)


def npu_helper(node: ast.expr) -> bool:
    """A device helper by its name alone: ``is_npu()``, ``IS_NPU``, ``utils.on_npu``, ``npu_is_available()``."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    name = dotted_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return name is not None and bool(_NPU_HELPER.match(name.rsplit(".", 1)[-1]))


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


# the only node types a probe (``device_probe``, ``cuda_probe``) or a helper by name (``npu_helper``) can be
_PROBE_KINDS = (ast.UnaryOp, ast.Name, ast.Attribute, ast.Call, ast.Compare)


def mentions_device(test: ast.expr, names: dict[str, ast.expr] | None = None, depth: int = 0) -> bool:
    """Whether a device probe is part of ``test`` (directly or through a name of ``names``)."""
    for node in walk(test):
        if isinstance(node, _PROBE_KINDS) and (
            device_probe(node) is not None or cuda_probe(node) is not None or npu_helper(node)
        ):
            return True
        if isinstance(node, ast.Name) and names and node.id in names and depth < 4:
            if mentions_device(names[node.id], names, depth + 1):
                return True
        if _helper_call(node, names) and depth < 4:
            if mentions_device(names[f"{node.func.id}()"], names, depth + 1):  # type: ignore[index,union-attr]
                return True
    return False


def probe_names(
    scopes: list[list[ast.stmt]], outer: dict[str, ast.expr] | None = None
) -> dict[str, ast.expr]:
    """The names assigned exactly once, in the statement lists of ``scopes`` (a module's, a function's own), from
    an expression that tests the device: ``_USE_NPU_MODULE = IS_NPU_AVAILABLE and not flag``; a helper without
    parameters returning one (``def _on_npu(): return IS_NPU_AVAILABLE``, a ``lambda``), keyed ``"_on_npu()"``;
    a device flag imported under another name (``IS_NPU_AVAILABLE as ON_ASCEND``). ``outer``: the names of the
    enclosing scope, which these may be assigned from."""
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
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.Lambda)
                and not any((*value.args.posonlyargs, *value.args.args, *value.args.kwonlyargs))
            ):
                target, value = (
                    ast.Name(id=f"{target.id}()"),
                    value.body,
                )  # `_on_npu = lambda: IS_NPU_AVAILABLE`
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    flag = ast.Name(id=alias.name)
                    if (
                        alias.asname
                        and alias.asname != alias.name
                        and (device_probe(flag) is not None or cuda_probe(flag) is not None)
                    ):
                        # `from veomni.utils.device import IS_NPU_AVAILABLE as ON_ASCEND`
                        counts[alias.asname] = counts.get(alias.asname, 0) + 1
                        found[alias.asname] = ast.Name(id=alias.name)
                continue
            if isinstance(target, ast.Name) and value is not None:
                counts[target.id] = counts.get(target.id, 0) + 1
                found[target.id] = value
    out = {k: v for k, v in found.items() if counts[k] == 1}
    seen = {**(outer or {}), **out}
    return {k: v for k, v in out.items() if mentions_device(v, seen)}


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


class DeviceChoice:
    """The device selection resolver of one file: what each local name and helper stands for (module scope, and a
    function's own names over it), so that ``use_npu = IS_NPU_AVAILABLE; if use_npu:``, ``if not _on_gpu():`` and
    ``if IS_NPU_AVAILABLE:`` are the same choice to every rule."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.module_names = probe_names([tree.body])
        self._scoped: dict[int, dict[str, ast.expr]] = {}

    @classmethod
    def of(cls, tree: ast.Module) -> DeviceChoice:
        """The file's one resolver: shared by every rule that asks within the file's scope
        (``core.astutil.scoped_memo``; NPU236, NPU508, NPU233 and the registration readers ask about the same
        functions), a fresh one outside a scope."""
        memo = scoped_memo("selection.choice")
        hit = memo.get(id(tree))
        if hit is not None and hit.tree is tree:
            return hit  # type: ignore[no-any-return]
        choice = memo[id(tree)] = cls(tree)
        return choice

    def names(self, func: ast.FunctionDef | ast.AsyncFunctionDef | None = None) -> dict[str, ast.expr]:
        """The probe names visible in ``func`` (its own over the module's), or the module's."""
        if func is None:
            return self.module_names
        key = id(func)
        if key not in self._scoped:
            self._scoped[key] = {**self.module_names, **probe_names([func.body], self.module_names)}
        return self._scoped[key]

    def holds(
        self, test: ast.expr, host: str, func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    ) -> bool | None:
        """:func:`host_holds` of ``test`` with the names of ``func``."""
        return host_holds(test, host, self.names(func))

    def decides(self, test: ast.expr, func: ast.FunctionDef | ast.AsyncFunctionDef | None = None) -> bool:
        """Whether the device is part of ``test`` (:func:`mentions_device` with the names of ``func``)."""
        return mentions_device(test, self.names(func))

    def scopes(self) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, list[ast.stmt]]]:
        """The module body and every function body (nested ones and methods too), each once."""
        out: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, list[ast.stmt]]] = [
            (None, self.tree.body)
        ]
        for func in nodes_of(self.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
            out.append((func, func.body))
        return out

    def reach(
        self, host: str, stmts: list[ast.stmt], func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    ) -> list[Reached]:
        """:func:`device_reach` of one scope with its names."""
        return device_reach(stmts, host, self.names(func))

    def expand(
        self, test: ast.expr, func: ast.FunctionDef | ast.AsyncFunctionDef | None = None, depth: int = 0
    ) -> ast.expr:
        """``test`` with each alias and helper call of the scope replaced by what it stands for (a copy; ``test``
        itself when nothing is replaced): ``not on_cuda`` after ``on_cuda = torch.cuda.is_available()`` is
        ``not torch.cuda.is_available()``, for the readers that take one probe expression (NPU236)."""
        names = self.names(func)
        if depth > 4 or not names:
            return test
        if isinstance(test, ast.Name) and test.id in names:
            return self.expand(names[test.id], func, depth + 1)
        if _helper_call(test, names):
            return self.expand(names[f"{test.func.id}()"], func, depth + 1)  # type: ignore[union-attr]
        if isinstance(test, ast.UnaryOp):
            inner = self.expand(test.operand, func, depth)
            return test if inner is test.operand else ast.UnaryOp(op=test.op, operand=inner)
        if isinstance(test, ast.BoolOp):
            values = [self.expand(v, func, depth) for v in test.values]
            changed = any(a is not b for a, b in zip(values, test.values))
            return ast.BoolOp(op=test.op, values=values) if changed else test
        return test
