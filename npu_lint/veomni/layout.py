"""Where a VeOmni tree and its model packages are, found by what is there (never by a fixed path).

The root is the directory holding the ``veomni`` package with a dispatch API (``veomni/ops`` or
``veomni/kernels``). A model package is a directory holding a patch spec (``*_patch_gen_config.py``), a
``generated/`` directory of patched modeling files, or an ``__init__.py`` that registers model types
(``MODELING_REGISTRY.register(...)``), wherever it is (``veomni/models/``, ``veomni/models_kernel/``, ...).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from npu_lint.core.safeio import read_regular

SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist", "generated"}
MAX_PACKAGE_SCAN = 5000  # directories visited when looking for model packages
_REGISTRATION = b"MODELING_REGISTRY.register("


def find_veomni_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``veomni/ops`` or ``veomni/kernels``: first along
    the path as named (a model package linked into a tree belongs to that tree), then along its real path."""
    try:
        real = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop: reported by discovery, per path
        return None
    named = Path(os.path.abspath(start))
    for begin in (named, real) if named != real else (real,):
        if begin.is_file():
            begin = begin.parent
        for directory in (begin, *begin.parents):
            package = directory / "veomni"
            if (package / "ops").is_dir() or (package / "kernels").is_dir():
                return directory.resolve()
            if directory.name == "veomni" and (
                (directory / "ops").is_dir() or (directory / "kernels").is_dir()
            ):
                return directory.parent.resolve()
    return None


def is_model_package(directory: Path, filenames: list[str], dirnames: list[str]) -> bool:
    """A VeOmni model package: a patch spec, a ``generated/`` directory of patched files, or registration."""
    if any(f.endswith("_patch_gen_config.py") for f in filenames):
        return True
    if "generated" in dirnames:
        try:
            if any(n.startswith("patched_modeling_") for n in os.listdir(directory / "generated")):
                return True
        except OSError:
            pass
    if "__init__.py" in filenames:
        try:
            return _REGISTRATION in read_regular(directory / "__init__.py")[0]
        except OSError:
            return False
    return False


def find_model_packages(base: Path, limit: int = MAX_PACKAGE_SCAN) -> list[str]:
    """Resolved directories under ``base`` that are VeOmni model packages (see :func:`is_model_package`)."""
    out: list[str] = []
    if base.is_file():
        base = base.parent
    seen = 0
    for dirpath, dirnames, filenames in os.walk(base):
        seen += 1
        if seen > limit:
            break
        if is_model_package(Path(dirpath), filenames, dirnames):
            out.append(str(Path(dirpath).resolve()))
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
    return out


def layouts_of(root: Path, packages: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The model layouts present (``veomni/models``, ``veomni/models_kernel``): the first two components of
    each package's path relative to the root."""
    out: set[str] = set()
    base = root.resolve()
    for package in packages:
        try:
            rel = Path(package).resolve().relative_to(base)
        except ValueError:
            continue
        if len(rel.parts) >= 2:
            out.add("/".join(rel.parts[:2]))
    return tuple(sorted(out))


# top-level subpackages of VeOmni's framework: a file under ``veomni/<one of these>`` that is not inside a model
# package is framework code (device layer, registry, loaders), not model code
FRAMEWORK_SUBPACKAGES = frozenset(
    {"ops", "kernels", "utils", "distributed", "trainer", "data", "checkpoint", "optim", "lora", "patchgen",
     "arguments", "schedulers", "models", "models_kernel"}
)  # fmt: skip
BUILTIN_LAYOUTS = (
    "veomni/models",
    "veomni/models_kernel",
)  # where model packages live (<layout>/<family>/<m>/)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def in_model_package(
    path: str,
    root: str | None = None,
    packages: tuple[str, ...] | list[str] = (),
    layouts: tuple[str, ...] = (),
) -> bool:
    """Whether ``path`` is a file of a VeOmni model package: inside one of the tree's ``packages`` (found by
    what is there), or, by shape, ``<layout>/<family>/<package>/...`` for one of the tree's ``layouts`` (or the
    built-in ones) -- a package still being written may have no spec yet. Without a tree (``root`` None) the
    path's own ``veomni/<layout>/...`` components decide."""
    full = os.path.abspath(path)
    if any(_under(full, package) for package in packages):
        return True
    if packages:
        # a package being written (no spec yet) beside found ones: same family directory
        families = {os.path.dirname(package) for package in packages}
        return any(_under(full, family) and full != family for family in families) and not any(
            os.path.dirname(full) == family for family in families
        )
    parts = Path(path.replace("\\", "/")).parts
    if root is not None:
        try:
            parts = Path(full).relative_to(Path(root).resolve()).parts
        except ValueError:
            pass
    for layout in tuple(layouts) + BUILTIN_LAYOUTS:
        lparts = tuple(layout.split("/"))
        n = len(lparts)
        for i in range(len(parts) - n, -1, -1):
            if parts[i : i + n] == lparts:
                # <family>/<package>/<file>; framework helpers (``<layout>/utils/...``) are not a family
                return len(parts) - (i + n) >= 3 and parts[i + n] != "utils"
    return False


def in_veomni_framework(path: str, root: str | None = None) -> bool:
    """Whether ``path`` lies under a VeOmni framework subpackage (``veomni/ops``, ``veomni/utils``...), by its
    position under the tree's root, or, without a tree, under its last ``veomni`` path component."""
    full = os.path.abspath(path)
    if root is not None:
        try:
            parts = Path(full).relative_to(Path(root).resolve()).parts
        except ValueError:
            return False
        return len(parts) >= 2 and parts[0] == "veomni" and parts[1] in FRAMEWORK_SUBPACKAGES
    parts = Path(path.replace("\\", "/")).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "veomni":
            return parts[i + 1] in FRAMEWORK_SUBPACKAGES
    return False


def is_model_code(
    path: str,
    root: str | None = None,
    packages: tuple[str, ...] | list[str] = (),
    layouts: tuple[str, ...] = (),
) -> bool:
    """Model code for rules that keep vendor code out of models: a file of a model package, or any file that is
    not part of VeOmni's framework (user code outside the tree). Framework files (``veomni/utils/device.py``,
    ``veomni/models_kernel/utils/op_utils.py``, ``veomni/models/auto.py``) bind kernels for the models."""
    if in_model_package(path, root, packages, layouts):
        return True
    return not in_veomni_framework(path, root)


def in_model_layout(path: str, root: str | None = None, layouts: tuple[str, ...] = ()) -> bool:
    """Whether ``path`` lies under a model layout directory (``veomni/models/``, ``veomni/models_kernel/``, or
    another layout of the tree): model packages and the model-loading code beside them."""
    parts = Path(path.replace("\\", "/")).parts
    if root is not None:
        try:
            parts = Path(os.path.abspath(path)).relative_to(Path(root).resolve()).parts
        except ValueError:
            pass
    for layout in tuple(layouts) + BUILTIN_LAYOUTS:
        lparts = tuple(layout.split("/"))
        n = len(lparts)
        if any(parts[i : i + n] == lparts for i in range(len(parts) - n)):
            return True
    return False


# -- kernel backends and Ascend adapters ----------------------------------------------------------------------
# An Ascend adapter is named as the eager function it replaces with one of these affixes (``rope_apply_npu``,
# ``fused_rope_apply``); NPU314 reads the eager function from a sibling module.
ADAPTER_AFFIXES = ("_npu", "_fused", "npu_", "fused_")


def adapter_bases(name: str) -> set[str]:
    """The names of the eager function an adapter named ``name`` may replace (its name without an affix)."""
    bases = {name.removesuffix(a) for a in ADAPTER_AFFIXES if name.endswith(a)}
    bases |= {name.removeprefix(a) for a in ADAPTER_AFFIXES if name.startswith(a)}
    bases.discard(name)
    return bases


def in_kernel_backends(path: str) -> bool:
    """``path`` is a module of the kernel backends tree (``veomni/ops/kernels/<op>/...``), not a package init."""
    posix = path.replace(os.sep, "/")
    return "/ops/kernels/" in f"/{posix}" and not posix.endswith("__init__.py")


def sibling_modules(path: str, inits: bool = True) -> list[str]:
    """The other Python modules of ``path``'s directory, sorted: regular files only (an editor's dangling lock
    symlink ``.#x.py``, a directory or a FIFO named ``*.py`` is skipped), ``path`` itself (under any spelling)
    left out. Empty when the directory cannot be listed."""
    here = os.path.realpath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.name.endswith(".py") or (not inits and entry.name == "__init__.py"):
            continue
        try:
            if not entry.is_file():  # follows symlinks: a dangling one is not a file
                continue
        except OSError:
            continue
        if os.path.realpath(entry.path) != here:
            out.append(entry.path)
    return out


def shared_module_files(root: str | Path | None, adapters: Iterable[str] = ()) -> list[str]:
    """The modules per-file rules read besides the linted file's model package, for cache keys: the kernel
    backends (``veomni/ops/kernels``, recursively: sibling backends for NPU316, eager counterparts for NPU314),
    the tree's helper packages (``veomni/utils``, ``veomni/<pkg>/utils``: the zero-argument implementation
    resolvers NPU204 follows) and the ``sibling_modules`` of each of ``adapters`` (paths relative to ``root``:
    the tree's ``torch_npu`` importers, whose eager counterparts NPU314 reads wherever they are). The rest of
    ``veomni/ops`` is read by the project scan, whose tables are keyed already. Sorted paths (the adapters'
    siblings after the rest, each once); empty without a root."""
    if root is None:
        return []
    base = Path(root) / "veomni"
    out: list[str] = []
    for top in (base / "ops" / "kernels",):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            out.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    try:
        helpers = [base / "utils", *(base / d / "utils" for d in sorted(os.listdir(base)) if d != "utils")]
    except OSError:
        helpers = []
    for directory in helpers:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        out.extend(str(directory / n) for n in names if n.endswith(".py"))
    listed = set(out)
    for adapter in sorted(set(adapters)):
        for file in sibling_modules(os.path.join(root, adapter)):
            if file not in listed:
                listed.add(file)
                out.append(file)
    return out
