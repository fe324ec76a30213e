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


# the one reader (core/safeio.py) and the one writer (engine/write.py); verify's child runs without npu-lint on
# its path and the child-process module reads its own standard input (the result protocol)
READ_EXEMPT = {"core/safeio.py", "engine/write.py", "verify/_child.py", "core/process.py"}


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append((node.lineno, "open()"))
        elif isinstance(func, ast.Attribute):
            owner = func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else ""
            if func.attr in ("read_text", "read_bytes", "open") and owner_name not in (
                "os",
                "io",
                "webbrowser",
            ):
                found.append((node.lineno, f".{func.attr}()"))
            elif func.attr == "load" and owner_name in ("json", "tomllib", "tomli", "pickle"):
                found.append((node.lineno, f"{owner_name}.load()"))
            elif func.attr in ("read", "readline", "readlines") and "stdin" in ast.unparse(owner):
                found.append((node.lineno, f"{ast.unparse(owner)}.{func.attr}()"))
    return found


def test_every_read_goes_through_the_one_reader() -> None:
    """No ``open()`` / ``read_text()`` / ``read_bytes()`` / ``json.load`` / ``tomllib.load`` / stdin read outside
    ``core/safeio.py``: a FIFO, ``/dev/zero`` or a huge file anywhere in a tree must never hang npu-lint."""
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in READ_EXEMPT:
            continue
        for line, what in _reads(ast.parse(path.read_text(encoding="utf-8"))):
            problems.append(f"{rel}:{line}: {what} (use npu_lint.core.safeio)")
    assert not problems, "\n".join(problems)


def test_the_layout_check_sees_a_read() -> None:
    tree = ast.parse(
        "import json\nopen('x')\nPath('x').read_text()\njson.load(fh)\nsys.stdin.buffer.read()\n"
    )
    assert [what for _, what in _reads(tree)] == [
        "open()",
        ".read_text()",
        "json.load()",
        "sys.stdin.buffer.read()",
    ]
