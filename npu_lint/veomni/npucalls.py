"""How the tree itself calls each ``torch_npu`` kernel, read statically (NPU311).

A kernel call's contract is best learned from the tree's other calls of the same kernel: the data arguments they
all pass by keyword (``npu_moe_token_unpermute(..., probs=routing_weights)``), the order of their named
positional arguments (``npu_rms_norm_backward(dy, x, gamma, rstd)``) and the positions they all cast to int32
(``npu_moe_token_permute(x, indices.to(torch.int32))``). ``file_calls(tree)`` reads one module;
``tree_calls(project)`` reads every module of the tree that imports ``torch_npu`` (the project's import sites),
once per project and set of file stamps (kept in the project's bounded memo, gone with the project). Each call
also records how its result is consumed (``result``: indexed, unpacked), so the kernels the tree always takes
apart (a list or tuple result, NPU309) are learned from the tree too.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npu_lint.core.astutil import last_name, nodes_of, parse_snippet, walk
from npu_lint.veomni.patchgen import load_file

if TYPE_CHECKING:
    from npu_lint.veomni.project import Project

_TOKENS = re.compile(r"[_\d]+")


@dataclass(frozen=True)
class KernelCall:
    """One call of a ``torch_npu`` kernel: where, its positional arguments' name stems ('' when the argument is
    not a name or names a single letter such as ``q``), the keywords passed a non-literal (data) value, and the
    positions passed an int32 cast (directly or through a local bound to one)."""

    path: str
    line: int
    stems: tuple[str, ...]
    texts: tuple[str, ...]
    data_keywords: frozenset[str]
    int32: frozenset[int]
    result: str = ""  # how the result is consumed: INDEXED, UNPACKED, or "" (used whole, or not at all)


INDEXED = "indexed"
UNPACKED = "unpacked"


def _consumption(func: ast.AST) -> dict[int, str]:
    """id(call) -> INDEXED / UNPACKED for the calls of ``func`` whose result is taken apart: subscripted by a
    literal (``npu_x(...)[0]``), unpacked by an assignment or a loop target (``y, rstd = npu_x(...)``), or bound
    to a name that the function only subscripts by a literal or unpacks (``out = npu_x(...); y = out[0]``)."""
    out: dict[int, str] = {}
    bound: dict[str, int] = {}
    for node in nodes_of(func, ast.Subscript, ast.Assign, ast.For):
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Call) and isinstance(node.slice, ast.Constant):
                out[id(node.value)] = INDEXED
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, (ast.Tuple, ast.List)):
                out[id(node.value)] = UNPACKED
            elif isinstance(target, ast.Name):
                bound[target.id] = id(node.value)
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Call):
            if isinstance(node.target, (ast.Tuple, ast.List)):
                out[id(node.iter)] = UNPACKED
    if not bound:
        return out
    taken: dict[str, str] = {}
    for node in nodes_of(func, ast.Subscript, ast.Assign):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in bound:
            if isinstance(node.slice, ast.Constant):
                taken[node.value.id] = INDEXED
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and isinstance(node.targets[0], (ast.Tuple, ast.List))
        ):
            taken[node.value.id] = UNPACKED
    for name, how in taken.items():
        out.setdefault(bound[name], how)
    return out


def stem(node: ast.expr) -> str:
    """A name's role words: ``norm_k_weight`` -> ``norm_weight``, ``invvar_q`` -> ``invvar``, ``q`` -> ''."""
    name = last_name(node) or ""
    return "_".join(t for t in _TOKENS.split(name.lower()) if len(t) > 1)


def _int32_cast(node: ast.AST) -> bool:
    for sub in walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "int32":
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "int":
            return True
    return False


def _literal(node: ast.expr) -> bool:
    """A literal option (``dim=-1``, ``rotary_mode="half"``, ``(1, 2)``), not a data argument."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


class ImportedKernels(frozenset):
    """The local names of kernels imported from ``torch_npu``; ``real`` maps an alias to the kernel's name
    (``from torch_npu import npu_rotary_mul as rot``: ``rot`` -> ``npu_rotary_mul``)."""

    real: dict[str, str]


def _from_torch_npu(tree: ast.AST, real: dict[str, str]) -> None:
    for node in nodes_of(tree, ast.ImportFrom):
        assert isinstance(node, ast.ImportFrom)
        if node.module == "torch_npu":
            real.update((a.asname or a.name, a.name) for a in node.names if a.name.startswith("npu_"))


def torch_npu_names(tree: ast.Module) -> frozenset[str]:
    """The kernels a module imports from ``torch_npu``: its own import statements and, for a patch spec, what it
    adds to the generated module (``config.add_import("torch_npu", names=["npu_rotary_mul"])``, a post-import
    block ``from torch_npu import ...``), which the spec's replacement functions then call by the bare name."""
    real: dict[str, str] = {}
    _from_torch_npu(tree, real)
    for call in nodes_of(tree, ast.Call):
        assert isinstance(call, ast.Call)
        if not isinstance(call.func, ast.Attribute) or not call.args:
            continue
        first = call.args[0]
        text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if text is None:
            continue
        if call.func.attr == "add_import" and text == "torch_npu":
            names = next((k.value for k in call.keywords if k.arg == "names"), None)
            if names is None and len(call.args) > 1:
                names = call.args[1]
            for elt in names.elts if isinstance(names, (ast.List, ast.Tuple)) else ():
                if (
                    isinstance(elt, ast.Constant)
                    and isinstance(elt.value, str)
                    and elt.value.startswith("npu_")
                ):
                    real[elt.value] = elt.value
        elif call.func.attr == "add_post_import_block" and "torch_npu" in text:
            block = parse_snippet(text)
            if block is not None:
                _from_torch_npu(block, real)
    names = ImportedKernels(real)
    names.real = real
    return names


def kernel_of(call: ast.Call, imported: frozenset[str]) -> str | None:
    """``torch_npu.npu_x(...)`` -> ``npu_x``; ``npu_x(...)`` when imported from ``torch_npu``."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "torch_npu":
        return func.attr if func.attr.startswith("npu_") else None
    if isinstance(func, ast.Name) and func.id in imported:
        return getattr(imported, "real", {}).get(func.id, func.id)
    return None


def file_calls(tree: ast.Module, path: str) -> dict[int, tuple[str, KernelCall]]:
    """id(call) -> (kernel, KernelCall) for every ``torch_npu`` kernel call inside a function of ``tree``."""
    imported = torch_npu_names(tree)
    out: dict[int, tuple[str, KernelCall]] = {}
    for func in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
        consumed: dict[int, str] | None = None
        casts: set[str] = set()
        for assign in nodes_of(func, ast.Assign):
            assert isinstance(assign, ast.Assign)
            if _int32_cast(assign.value):
                casts.update(t.id for t in assign.targets if isinstance(t, ast.Name))
        for call in nodes_of(func, ast.Call):
            assert isinstance(call, ast.Call)
            kernel = kernel_of(call, imported)
            if kernel is None or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            int32 = frozenset(
                i
                for i, a in enumerate(call.args)
                if _int32_cast(a) or (isinstance(a, ast.Name) and a.id in casts)
            )
            data = frozenset(k.arg for k in call.keywords if k.arg is not None and not _literal(k.value))
            if consumed is None:
                consumed = _consumption(func)
            out[id(call)] = (
                kernel,
                KernelCall(
                    path,
                    call.lineno,
                    tuple(stem(a) for a in call.args),
                    tuple(ast.unparse(a) for a in call.args),
                    data,
                    int32,
                    consumed.get(id(call), ""),
                ),
            )
    return out


def tree_calls(project: Project) -> dict[str, tuple[KernelCall, ...]]:
    """kernel -> its calls in every module of the project's tree that imports ``torch_npu``."""
    if project.root is None:
        return {}
    stamps: list[tuple[str, int, int]] = []
    for site in project.import_sites.get("torch_npu", ()):
        path = os.path.join(project.root, site.path)
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamps.append((path, st.st_mtime_ns, st.st_size))
    key = tuple(sorted(set(stamps)))
    return project.remember(("npucalls.tree_calls", key), lambda: _tree_calls(key))


def _tree_calls(stamps: tuple[tuple[str, int, int], ...]) -> dict[str, tuple[KernelCall, ...]]:
    found: dict[str, list[KernelCall]] = {}
    for path, _, _ in stamps:
        parsed = load_file(path)
        tree = parsed.tree if parsed is not None else None
        if tree is None:
            continue
        for kernel, call in file_calls(tree, os.path.realpath(path)).values():
            found.setdefault(kernel, []).append(call)
    return {k: tuple(v) for k, v in found.items()}
