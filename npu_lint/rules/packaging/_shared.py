"""Helpers shared by the rules of the packaging family (private to it)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from npu_lint.core.astutil import transformers_version
from npu_lint.core.diagnostics import Diagnostic, Fix, Origin, text_hash
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.rules.base import ProjectRule
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project


def _guarded(check: Callable[..., Iterable[Diagnostic]]) -> Callable[..., list[Diagnostic]]:
    """A project rule's findings as a list. Failures are not swallowed here: the engine reports them as
    ``internal error in NPUxxx`` (``engine.pool.project_diagnostics``), the other rules still run, exit 2."""

    @functools.wraps(check)
    def wrapper(self: ProjectRule, project: Project, paths: list[str]) -> list[Diagnostic]:
        return list(check(self, project, paths))

    return wrapper


# -- the model packages among the linted paths ---------------------------------------------------------


@dataclass
class Package:
    dir: str  # in the style of the linted paths
    specs: list[str] = field(default_factory=list)
    init: str | None = None
    generated: list[str] = field(default_factory=list)  # generated/patched_modeling_*.py

    @property
    def gpu_specs(self) -> list[str]:
        return [s for s in self.specs if s.endswith(patchgen.GPU_SPEC_SUFFIX)]

    @property
    def npu_specs(self) -> list[str]:
        return [s for s in self.specs if s.endswith(patchgen.NPU_SPEC_SUFFIX)]

    def targets(self) -> set[str]:
        out = set()
        for path in self.specs:
            spec = patchgen.load_spec(path)
            if spec is not None:
                target = patchgen.effective_target_file(spec)
                if target:
                    out.add(target)
        return out


_MEMO: dict[tuple[object, ...], list[Package]] = {}


def _dir_stamp(directory: str) -> tuple[object, ...]:
    """The names in a package directory and its ``generated/``: a created NPU spec or generated module
    invalidates the memo (the language server lives long; mtimes can be too coarse to tell)."""
    out: list[object] = []
    for d in (directory or ".", os.path.join(directory or ".", "generated")):
        try:
            out.append(hash(tuple(sorted(os.listdir(d)))))
        except OSError:
            out.append(None)
    return tuple(out)


def packages(paths: list[str]) -> list[Package]:
    """Model packages (directories with a ``*_patch_gen_config.py``) holding at least one linted file.
    Remembered for the last set of paths while none of their directories changed."""
    dirs: dict[str, None] = {}
    for path in paths:
        directory = os.path.dirname(path)
        if os.path.basename(directory) == "generated":
            directory = os.path.dirname(directory)
        dirs.setdefault(directory, None)
    key = (tuple(paths), tuple(_dir_stamp(d) for d in dirs))
    if key in _MEMO:
        return _MEMO[key]
    out = []
    for directory in sorted(dirs):
        specs = patchgen.package_specs(directory or ".")
        if not specs:
            continue
        if not directory:
            specs = [os.path.basename(s) for s in specs]
        pkg = Package(directory, specs)
        init = os.path.join(directory, "__init__.py")
        pkg.init = init if os.path.isfile(init) else None
        gen_dir = os.path.join(directory, "generated")
        try:
            names = sorted(os.listdir(gen_dir))
        except OSError:
            names = []
        pkg.generated = [
            os.path.join(gen_dir, n) for n in names if n.startswith("patched_modeling_") and n.endswith(".py")
        ]
        out.append(pkg)
    _MEMO.clear()
    _MEMO[key] = out
    return out


def _linted(paths: list[str]) -> set[str]:
    return {os.path.normpath(p) for p in paths}


def _lines(path: str) -> list[str]:
    parsed = patchgen.load_file(path)
    return parsed.lines if parsed is not None else []


def _diag(
    rule: type[ProjectRule] | ProjectRule,
    path: str,
    line: int,
    message: str,
    *,
    col: int = 0,
    end_col: int | None = None,
    end_line: int | None = None,
    fix: Fix | None = None,
    origin: Origin | None = None,
    basis: str | None = None,
) -> Diagnostic:
    if fix is not None and fix.edits and not fix.basis:
        # the text the edits were computed on (``basis``, else the cached read the rule parsed): the fix
        # pass applies them only to that text (engine.fix.fix_tree)
        if basis is None:
            loaded = patchgen.load_file(path)
            basis = loaded.text if loaded is not None else None
        if basis is not None:
            fix = dataclasses.replace(fix, basis=text_hash(basis))
    lines = _lines(path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if end_col is None:
        end_col = len(text)
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=message,
        path=path,
        line=line,
        col=col,
        end_line=end_line or line,
        end_col=end_col,
        fix=fix,
        origin=origin,
        severity=rule.severity,
        source_line=text,
    )


def _first_line_range(path: str, line: int) -> tuple[int, int]:
    lines = _lines(path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text) - len(text.lstrip()), len(text.rstrip())


# -- NPU501 ------------------------------------------------------------------------------------------


# -- NPU502 ------------------------------------------------------------------------------------------


# -- NPU503 ------------------------------------------------------------------------------------------

_TOP_NAME = re.compile(r"^(?:class|def|async def)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=", re.MULTILINE)


def _top_level_names(path: str) -> set[str] | None:
    parsed = patchgen.load_file(path)
    if parsed is None:
        return None
    names = {a or b for a, b in _TOP_NAME.findall(parsed.text)}
    return names


def _defines(path: str, name: str, names: set[str]) -> bool:
    if name in names:
        return True
    parsed = patchgen.load_file(path)  # imported names, multi-line imports: ask the tree
    if parsed is None or parsed.tree is None:
        return True
    for stmt in parsed.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return True
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for tgt in targets:
                for node in ast.walk(tgt):
                    if isinstance(node, ast.Name) and node.id == name:
                        return True
        elif isinstance(stmt, (ast.If, ast.Try)):
            for node in ast.walk(stmt):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                    return True
                if isinstance(node, ast.alias) and (node.asname or node.name) == name:
                    return True
    return False


# -- NPU504 ------------------------------------------------------------------------------------------


# -- NPU505 ------------------------------------------------------------------------------------------


def patchgen_banner(text: str) -> bool:
    return "AUTO-GENERATED FILE" in text[:4096] or "# [" in text


# -- NPU506 ------------------------------------------------------------------------------------------

_PIN = re.compile(r"""["']transformers\s*==\s*([\w.+-]+)\s*(?:;[^"'\n]*)?["']""")


def _installed_transformers() -> str | None:
    """Version of the transformers source the linter reads (the one resolver: NPU_LINT_TRANSFORMERS_SRC first)."""
    return transformers_version()


def _repo_pin(root: str | None) -> tuple[str, str, int] | None:
    if not root:
        return None
    path = os.path.join(root, "pyproject.toml")
    try:
        text = read_text(path, limit=MAX_SMALL_BYTES)
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    preferred: str | None = None  # the pin in [project] dependencies wins over extras
    try:
        import tomllib

        deps = tomllib.loads(text).get("project", {}).get("dependencies", [])
        for dep in deps if isinstance(deps, list) else []:
            match = re.fullmatch(r"\s*transformers\s*==\s*([\w.+-]+)\s*(;.*)?", str(dep))
            if match:
                preferred = match.group(1)
                break
    except (ImportError, ValueError):
        pass
    first: tuple[str, str, int] | None = None
    for i, line in enumerate(lines, 1):
        match = _PIN.search(line)
        if match and not line.lstrip().startswith("#"):
            if preferred is None or match.group(1) == preferred:
                return match.group(1), path, i
            first = first or (match.group(1), path, i)
    return first


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version))
