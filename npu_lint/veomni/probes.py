"""What a requirement probe tests, read from the tree.

VeOmni checks a backend's requirement before selecting it with availability probes: ``find_spec("x")`` /
``is_package_available("x")`` (a package), a flags table read (``_PACKAGE_FLAGS["x"]``), the tree's own
``is_<x>_available()`` helpers (whose bodies say which package or device they test), and device constants
(``IS_NPU_AVAILABLE``, ``IS_CUDA_AVAILABLE``, ``torch.cuda.is_available()``). ``Probe`` is what one expression
tests: packages and backends (``npu`` / ``cuda``). ``probe_of(expr, helpers)`` reads an expression;
``helper_probes(tree)`` reads a module's ``is_*_available`` functions, and ``tree_helper(root, module, name)``
one of another module of the tree (through the run's one store of parsed files), so that
``is_liger_kernel_available`` tests ``liger_kernel`` because its body reads ``_PACKAGE_FLAGS["liger_kernel"]``,
not because of its name (the name is the fallback when the body cannot be read).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from npu_lint.core.astutil import str_value
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.vendor_map import GPU_ATTENTION, GPU_KERNEL, NPU_VENDOR, VENDOR_PACKAGES

NPU = "npu"
CUDA = "cuda"
_SPEC_FUNCTIONS = frozenset({"find_spec", "is_package_available", "_is_package_available", "find_loader"})
_DEVICE_NAMES = {
    "IS_NPU_AVAILABLE": NPU,
    "IS_CUDA_AVAILABLE": CUDA,
    "is_npu_available": NPU,
    "is_cuda_available": CUDA,
}


@dataclass(frozen=True)
class Probe:
    packages: frozenset[str] = frozenset()
    backends: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.packages or self.backends)

    def __or__(self, other: Probe) -> Probe:
        return Probe(self.packages | other.packages, self.backends | other.backends)

    def describe(self) -> str:
        parts = [f"`{p}`" for p in sorted(self.packages)] + [
            f"an {b.upper()} device" for b in sorted(self.backends)
        ]
        return " and ".join(parts)


def package_backend(package: str) -> str | None:
    """The device a package serves: NPU for Ascend vendor packages, CUDA for GPU kernel packages."""
    kind = VENDOR_PACKAGES.get(package)
    if kind == NPU_VENDOR:
        return NPU
    if kind in (GPU_KERNEL, GPU_ATTENTION):
        return CUDA
    return None


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _from_name(name: str, known: frozenset[str]) -> Probe:
    """``is_liger_kernel_available`` -> ``liger_kernel``; ``is_flash_attn_2_available`` -> ``flash_attn`` (the
    longest known package the stem starts with); ``is_torch_npu_available`` -> ``torch_npu``."""
    if name in _DEVICE_NAMES:
        return Probe(backends=frozenset({_DEVICE_NAMES[name]}))
    if not (name.startswith("is_") and name.endswith("_available")):
        return Probe()
    stem = name[3:-10]
    hits = [p for p in known if stem == p or stem.startswith(p + "_")]
    return Probe(packages=frozenset({max(hits, key=len)})) if hits else Probe()


def probe_of(expr: ast.AST, helpers: dict[str, Probe], known: frozenset[str]) -> Probe:
    """What ``expr`` tests: every probe in it (calls, flag reads, device constants)."""
    found = Probe()
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = _name_of(node.func)
            if name in _SPEC_FUNCTIONS and node.args:
                value = str_value(node.args[0])
                if value:
                    found |= Probe(packages=frozenset({value.split(".", 1)[0]}))
            elif name == "is_available" and isinstance(node.func, ast.Attribute):
                base = _name_of(node.func.value)
                if base in (CUDA, NPU):  # torch.cuda.is_available() / torch.npu.is_available()
                    found |= Probe(backends=frozenset({base}))
            elif name in helpers:
                found |= helpers[name]
            else:
                found |= _from_name(name, known)
        elif isinstance(node, ast.Subscript) and "FLAG" in _name_of(node.value).upper():
            value = str_value(node.slice)
            if value:
                found |= Probe(packages=frozenset({value}))
        elif isinstance(node, ast.Name) and node.id in _DEVICE_NAMES:
            found |= Probe(backends=frozenset({_DEVICE_NAMES[node.id]}))
    return found


def helper_probes(tree: ast.Module, known: frozenset[str]) -> dict[str, Probe]:
    """The module's ``is_*_available`` functions -> what their bodies test (helpers calling helpers followed)."""
    funcs = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("is_") and n.name.endswith("_available")
    }
    out: dict[str, Probe] = {}
    for _ in range(3):  # helpers defined through other helpers
        for name, func in funcs.items():
            body = [s for s in func.body if isinstance(s, ast.Return) and s.value is not None]
            probe = Probe()
            for stmt in body:
                probe |= probe_of(stmt.value, {k: v for k, v in out.items() if k != name}, known)  # type: ignore[arg-type]
            if probe:
                out[name] = probe
    return out


def flag_packages(tree: ast.Module) -> frozenset[str]:
    """The keys of a module's package-flags table (``_PACKAGE_FLAGS = {"flash_attn": ..., ...}``)."""
    out: set[str] = set()
    for stmt in tree.body:
        target = (
            stmt.targets[0]
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            else (stmt.target if isinstance(stmt, ast.AnnAssign) else None)
        )
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and "FLAG" in target.id.upper() and isinstance(value, ast.Dict):
            out.update(k for k in (str_value(key) for key in value.keys if key is not None) if k)
    return frozenset(out)


def tree_module(root: str, module: str) -> ast.Module | None:
    """A module of the tree, parsed through the run's one store of parsed files."""
    parts = module.split(".")
    if parts[0] != "veomni":
        return None
    base = Path(root, *parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            parsed = load_file(str(candidate))
            return parsed.tree if parsed is not None else None
    return None
