"""The import rules of the layout (docs/architecture.md): core <- veomni <- rules, fixers <- engine <- front ends.

Read statically from every module of the package (function-local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import npu_lint

PKG = Path(npu_lint.__file__).parent
FAMILIES = sorted(p.name for p in (PKG / "rules").iterdir() if p.is_dir() and not p.name.startswith("_"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Every npu_lint module a file imports, `if TYPE_CHECKING:` blocks and function-local imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name == "npu_lint" or name.startswith("npu_lint."):
                out.append(name)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "root"
    top = parts[1]
    if top == "rules" and len(parts) > 2 and parts[2] in FAMILIES:
        return f"rules.{parts[2]}"
    return {"cli": "front", "lsp": "front", "audit": "front", "report": "front", "docs": "front", "demo": "front",
            "verify": "front", "__main__": "front"}.get(top, top)  # fmt: skip


def _importable(module: str) -> bool:
    parts = module.split(".")
    path = PKG.parent.joinpath(*parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


ALLOWED = {
    "core": {"root", "core"},
    "veomni": {"root", "core", "veomni"},
    "rules": {"root", "core", "veomni", "rules"},  # rules.base, rules._handles (shared, not a family)
    "fixers": {"root", "core", "veomni", "fixers"},
    "engine": {"root", "core", "veomni", "rules", "fixers", "engine", *(f"rules.{f}" for f in FAMILIES)},
}


def test_imports_run_one_way() -> None:
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        here = _layer(_module_name(path))
        for target in _imports(path):
            if not _importable(target):
                continue  # `from pkg import name` also lists pkg.name: only modules count
            there = _layer(target)
            if here.startswith("rules.") and there.startswith("rules.") and here != there:
                problems.append(f"{path.relative_to(PKG)}: rule family {here} imports {target}")
            elif here.startswith("rules."):
                if there not in ALLOWED["rules"] and there != here:
                    problems.append(f"{path.relative_to(PKG)}: a rule imports {target}")
            elif here in ALLOWED and there not in ALLOWED[here]:
                problems.append(f"{path.relative_to(PKG)} ({here}) imports {target} ({there})")
            elif here == "front" and there.startswith("rules."):
                problems.append(f"{path.relative_to(PKG)}: a front end imports rule module {target}")
    assert not problems, "\n".join(problems)


def test_one_rule_per_module() -> None:
    from npu_lint.rules.base import PROJECT_REGISTRY, REGISTRY, load_rule_modules

    load_rule_modules()
    modules: dict[str, list[str]] = {}
    for code, cls in {**REGISTRY, **PROJECT_REGISTRY}.items():
        if cls.__module__.startswith("npu_lint.rules."):
            modules.setdefault(cls.__module__, []).append(code)
    for module, codes in modules.items():
        assert len(codes) == 1, f"{module} defines {codes}"
        family = module.split(".")[2]
        assert family in FAMILIES and module.rsplit(".", 1)[1].startswith(codes[0].lower()), module
