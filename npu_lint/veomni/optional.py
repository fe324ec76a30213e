"""Which third-party packages a tree treats as optional, and how it guards them, read statically.

VeOmni imports its optional packages (GPU kernel libraries such as ``liger_kernel``, ``flash_attn``, ``quack``,
``tile_kernels``, ``gram_newton_schulz``; NPU ones such as ``torch_npu``) lazily: inside the function that needs
them, under ``try: ... except ImportError``, or under an availability test (``if is_liger_kernel_available():``,
``if importlib.util.find_spec("x")``). A module that imports one of them when it loads fails to import on every
host that lacks it, an Ascend host (which cannot install the CUDA ones) included. The tree's own habits say
which packages are optional: a package the file itself imports lazily elsewhere, or one that no module of the
tree imports when it loads while some import it lazily, and that the project's ``[project] dependencies`` do
not require.

``import_sites(tree)``: each import statement of a parsed module, its top-level package and how it is reached
(``TOP``: when the module loads; ``GUARDED``: under a ``try`` that catches ImportError or an availability test;
``LAZY``: otherwise inside a function or a block). ``scan_sites(root, files)``: the same, per package, over
every ``veomni/**/*.py`` file of a tree (a text scan: an import statement in column 0 is a top-level one), run
once by ``load_project`` on the tree's one listing and kept as ``Project.import_sites`` (with the scans'
store, reused while no file's stat key changed). ``required(root)``: the packages the tree's pyproject
requires (``Project.required_packages``); ``extras(root)`` / ``optional_extra``: those it lists only as optional
extras. ``loaded_elsewhere`` / ``optional_in_tree`` ask the project.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npu_lint.core.astutil import last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.safeio import read_regular, read_toml
from npu_lint.veomni import scanstore

if TYPE_CHECKING:
    from npu_lint.veomni.project import Project

TOP = "top"
LAZY = "lazy"
GUARDED = "guarded"
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})

# packages every Python / PyTorch host has: never "optional" in the sense of this module
_ALWAYS = frozenset({"torch", "veomni", "__future__", "typing_extensions"})
SKIP_DIRS = frozenset({"__pycache__", "tests", "test", "node_modules"})  # not read by the import scan
_IMPORT_LINE = re.compile(
    rb"^([ \t]*)(?:from[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import\b|import[ \t]+([A-Za-z_]\w*))", re.M
)
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class Site:
    """One import of a package: the file (relative to the root), its line, TOP or LAZY."""

    path: str
    line: int
    how: str


def third_party(package: str) -> bool:
    """A top-level package name that is neither the standard library nor always present."""
    return bool(package) and package not in _ALWAYS and package not in sys.stdlib_module_names


def _catches_import_error(handler: ast.excepthandler) -> bool:
    kind = handler.type  # type: ignore[attr-defined]
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(
        n is None
        or (
            isinstance(n, (ast.Name, ast.Attribute))
            and (n.id if isinstance(n, ast.Name) else n.attr) in _IMPORT_ERRORS
        )
        for n in names
    )


def probe_test(test: ast.expr) -> bool:
    """An availability test: a call or name that asks whether a package or backend is present
    (``is_x_available()``, ``find_spec("x")``, ``_PACKAGE_FLAGS["x"]``, ``IS_CUDA_AVAILABLE``)."""
    for sub in _walk(test):
        name = last_name(sub) or ""
        if "available" in name.lower() or name in ("find_spec", "_PACKAGE_FLAGS"):
            return True
    return False


def import_sites(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, str, str]]:
    """(statement, top-level package, TOP/LAZY/GUARDED) for every absolute import of a module: GUARDED under a
    ``try`` that catches ImportError (or an availability test), LAZY in a function or another block."""
    out: list[tuple[ast.Import | ast.ImportFrom, str, str]] = []

    def visit(body: list[ast.stmt], how: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                out.extend((stmt, a.name.split(".", 1)[0], how) for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                if not stmt.level and stmt.module:
                    out.append((stmt, stmt.module.split(".", 1)[0], how))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(stmt.body, LAZY if how == TOP else how)
            elif isinstance(stmt, ast.ClassDef):
                visit(stmt.body, how)
            elif isinstance(stmt, ast.Try):
                guarded = any(_catches_import_error(h) for h in stmt.handlers)
                visit(stmt.body, GUARDED if guarded else LAZY if how == TOP else how)
                for part in (stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                    visit(part, LAZY if how == TOP else how)
            elif isinstance(stmt, ast.If):
                visit(stmt.body, GUARDED if probe_test(stmt.test) else LAZY if how == TOP else how)
                visit(stmt.orelse, LAZY if how == TOP else how)
            else:
                for name in ("body", "orelse", "finalbody"):
                    part = getattr(stmt, name, None)
                    if isinstance(part, list) and part and isinstance(part[0], ast.stmt):
                        visit(part, LAZY if how == TOP else how)

    visit(tree.body, TOP)
    return out


def scan_sites(root: Path, files: list[Path] | None = None) -> dict[str, tuple[Site, ...]]:
    """package -> its import sites over the tree's ``veomni`` package (a text scan of ``files``, the tree's
    listing selected with ``SKIP_DIRS``); with a store (``scanstore.use_store``) reused while no file's stat key
    changed. ``load_project`` keeps the result as ``Project.import_sites``."""
    base = Path(root)
    paths = scanstore.list_tree(base).select(SKIP_DIRS) if files is None else files

    def compute() -> dict[str, tuple[Site, ...]]:
        found: dict[str, list[Site]] = {}
        for path in paths:
            try:
                data = read_regular(path)[0]
            except OSError:
                continue
            rel = str(path.relative_to(base))
            line, at = 1, 0
            for m in _IMPORT_LINE.finditer(data):
                package = (m.group(2) or m.group(3)).decode("ascii", "replace")
                if not third_party(package):
                    continue
                line += data.count(b"\n", at, m.start())
                at = m.start()
                found.setdefault(package, []).append(Site(rel, line, LAZY if m.group(1) else TOP))
        return {k: tuple(v) for k, v in found.items()}

    def encode(value: dict[str, tuple[Site, ...]]) -> dict[str, list[list[Any]]]:
        return {k: [[s.path, s.line, s.how] for s in v] for k, v in value.items()}

    def decode(hit: Any) -> dict[str, tuple[Site, ...]] | None:
        if not isinstance(hit, dict):
            return None
        out: dict[str, tuple[Site, ...]] = {}
        for package, rows in hit.items():
            if not isinstance(rows, list) or not all(
                isinstance(r, list)
                and len(r) == 3
                and isinstance(r[0], str)
                and isinstance(r[1], int)
                and r[2] in (TOP, LAZY)
                for r in rows
            ):
                return None
            out[str(package)] = tuple(Site(r[0], r[1], r[2]) for r in rows)
        return out

    return scanstore.stored("imports", base, paths, compute, encode, decode)


def required(root: str | Path) -> frozenset[str]:
    """The import names of the packages the tree's pyproject ``[project] dependencies`` require (a
    distribution name with ``-`` read as ``_``); ``load_project`` keeps them as ``Project.required_packages``."""
    path = Path(root) / "pyproject.toml"
    names: set[str] = set()
    try:
        data = read_toml(path)
    except (OSError, ValueError):
        data = {}
    deps = data.get("project", {}).get("dependencies", []) if isinstance(data, dict) else []
    for dep in deps if isinstance(deps, list) else []:
        m = _REQ_NAME.match(dep) if isinstance(dep, str) else None
        if m:
            names.add(m.group(1).lower().replace("-", "_").replace(".", "_"))
    return frozenset(names)


def extras(root: str | Path) -> frozenset[str]:
    """The import names of the packages the tree's pyproject lists only under ``[project.optional-dependencies]``
    (any extra: ``gpu``, ``npu``, ``dev``), not under ``[project] dependencies``: packages a host may lack."""
    path = Path(root) / "pyproject.toml"
    try:
        data = read_toml(path)
    except (OSError, ValueError):
        return frozenset()
    groups = data.get("project", {}).get("optional-dependencies", {}) if isinstance(data, dict) else {}
    names: set[str] = set()
    for deps in groups.values() if isinstance(groups, dict) else ():
        for dep in deps if isinstance(deps, list) else []:
            m = _REQ_NAME.match(dep) if isinstance(dep, str) else None
            if m:
                names.add(m.group(1).lower().replace("-", "_").replace(".", "_"))
    return frozenset(names - required(root))


def optional_extra(project: Project, package: str) -> bool:
    """Whether the project's pyproject lists ``package`` only as an optional extra (``extras``): by its name, or
    as the namespace of an extra's distribution (``megatron`` of ``megatron-energon``)."""
    if project.root is None:
        return False
    root = project.root
    names = project.remember("optional.extras", lambda: extras(root))
    low = package.lower()
    return low in names or any(name.startswith(low + "_") for name in names)


def loaded_elsewhere(project: Project, package: str, path: str) -> bool:
    """Whether a module of the project's tree other than ``path`` imports ``package`` when it loads (or the
    project's pyproject requires it): then the tree does not treat it as optional."""
    if package.lower() in project.required_packages:
        return True
    return any(s.how == TOP for s in _others(project, package, path))


def optional_in_tree(project: Project, package: str, path: str) -> Site | None:
    """A lazy import of ``package`` elsewhere in the project's tree when no other module imports it when it
    loads and the pyproject does not require it: the tree treats it as optional. None otherwise. ``path``: the
    file asking (its own sites are left out)."""
    if loaded_elsewhere(project, package, path):
        return None
    sites = _others(project, package, path)
    return sites[0] if sites else None


def _others(project: Project, package: str, path: str) -> list[Site]:
    sites = project.import_sites.get(package, ())
    if not sites or project.root is None:
        return []
    try:
        rel = str(Path(path).resolve().relative_to(Path(project.root).resolve()))
    except ValueError:
        rel = path
    return [s for s in sites if s.path != rel]
