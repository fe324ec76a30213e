"""What ``verify`` needs to know about one model package, read from the files (nothing is imported).

This is the one module of ``npu_lint.verify`` that may depend on the rest of npu-lint; it needs only the one
reader (``core.safeio``): the facts (tree root, dotted package, specs, generated modules, transformers pin)
are a few path and text reads.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.safeio import read_text

GPU_SPEC_SUFFIX = "_gpu_patch_gen_config.py"
NPU_SPEC_SUFFIX = "_npu_patch_gen_config.py"
_TARGET = re.compile(r"""target_file\s*=\s*["']([\w.]+\.py)["']""")
_PIN = re.compile(r"""["']transformers\s*==\s*([\w.+-]+)["']""")
_BANNER_PIN = re.compile(r"^#\s+Based on:\s*transformers==([\w.+-]+)", re.M)


class NotAModel(Exception):
    """The directory is not a VeOmni model package (exit 2)."""


@dataclass
class ModelPackage:
    model_dir: Path
    name: str
    root: Path  # the directory whose child is the top package (what goes on sys.path)
    package: str  # dotted name of the model package
    specs: dict[str, str] = field(default_factory=dict)  # side -> dotted spec module
    generated: dict[str, Path] = field(default_factory=dict)  # side -> generated .py path (may not exist yet)
    pin: str | None = None
    pin_source: str = ""
    registered: list[str] = field(default_factory=list)  # classes __init__.py imports from generated modules

    def module_for(self, side: str) -> str | None:
        path = self.generated.get(side)
        if path is None or not path.is_file():
            return None
        return f"{self.package}.generated.{path.stem}"


def _package_root(model_dir: Path) -> tuple[Path, str]:
    if not (model_dir / "__init__.py").is_file():
        raise NotAModel(f"{model_dir} is not a Python package (no __init__.py)")
    parts = [model_dir.name]
    top = model_dir
    while (top.parent / "__init__.py").is_file():
        top = top.parent
        parts.insert(0, top.name)
    return top.parent, ".".join(parts)


def _target_file(spec: Path, default: str) -> str:
    try:
        found = _TARGET.findall(read_text(spec))
    except (OSError, UnicodeDecodeError):
        return default
    return found[-1] if found else default  # a deepcopy sibling sets target_file after the copy


def _pin(root: Path, generated: list[Path]) -> tuple[str | None, str]:
    for name in ("pyproject.toml", "setup.cfg", "requirements.txt"):
        path = root / name
        try:
            text = read_text(path, errors="replace")
        except OSError:
            continue
        m = _PIN.search(text) or re.search(r"^transformers\s*==\s*([\w.+-]+)", text, re.M)
        if m:
            return m.group(1), name
    for path in generated:
        try:
            m = _BANNER_PIN.search(read_text(path, errors="replace")[:4000])
        except OSError:
            continue
        if m:
            return m.group(1), f"`Based on:` banner of {path.name} (the tree has no pyproject pin)"
    return None, ""


def load_model_package(path: str | Path) -> ModelPackage:
    model_dir = Path(path).resolve()
    if not model_dir.is_dir():
        raise NotAModel(f"{path}: not a directory")
    gpu_specs = sorted(model_dir.glob(f"*{GPU_SPEC_SUFFIX}"))
    gen_dir = model_dir / "generated"
    if not gpu_specs and not gen_dir.is_dir():
        raise NotAModel(f"{path}: not a VeOmni model package (no *{GPU_SPEC_SUFFIX} and no generated/)")
    if gpu_specs:
        name = gpu_specs[0].name[: -len(GPU_SPEC_SUFFIX)]
    else:
        name = model_dir.name
    root, package = _package_root(model_dir)
    pkg = ModelPackage(model_dir=model_dir, name=name, root=root, package=package)
    for side, suffix in (("gpu", GPU_SPEC_SUFFIX), ("npu", NPU_SPEC_SUFFIX)):
        spec = model_dir / f"{name}{suffix}"
        default = f"patched_modeling_{name}_{side}.py"
        if spec.is_file():
            pkg.specs[side] = f"{package}.{spec.stem}"
            pkg.generated[side] = gen_dir / _target_file(spec, default)
        elif (gen_dir / default).is_file():
            pkg.generated[side] = gen_dir / default
    pkg.pin, pkg.pin_source = _pin(root, list(pkg.generated.values()))
    pkg.registered = _registered_classes(model_dir / "__init__.py")
    return pkg


def _registered_classes(init: Path) -> list[str]:
    """Names ``__init__.py`` imports from its generated modules (the classes VeOmni builds)."""
    try:
        tree = ast.parse(read_text(init))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "generated" in node.module.split("."):
            names.extend(a.name for a in node.names if a.name not in names)
    return names
