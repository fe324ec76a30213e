"""Where a VeOmni tree and its model packages are, found by what is there (never by a fixed path).

The root is the directory holding the ``veomni`` package with a dispatch API (``veomni/ops`` or
``veomni/kernels``). A model package is a directory holding a patch spec (``*_patch_gen_config.py``), a
``generated/`` directory of patched modeling files, or an ``__init__.py`` that registers model types
(``MODELING_REGISTRY.register(...)``), wherever it is (``veomni/models/``, ``veomni/models_kernel/``, ...).
"""

from __future__ import annotations

import os
from pathlib import Path

SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist", "generated"}
MAX_PACKAGE_SCAN = 5000  # directories visited when looking for model packages
_REGISTRATION = b"MODELING_REGISTRY.register("


def find_veomni_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``veomni/ops`` or ``veomni/kernels``."""
    try:
        start = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop: reported by discovery, per path
        return None
    if start.is_file():
        start = start.parent
    for directory in (start, *start.parents):
        package = directory / "veomni"
        if (package / "ops").is_dir() or (package / "kernels").is_dir():
            return directory
        if directory.name == "veomni" and ((directory / "ops").is_dir() or (directory / "kernels").is_dir()):
            return directory.parent
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
            return _REGISTRATION in (directory / "__init__.py").read_bytes()
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
