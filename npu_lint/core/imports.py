"""Adding a ``from M import name`` the way the file's own isort (ruff ``I001``) would have placed it.

The new import goes into the module's leading import block, in its isort section (``__future__``, standard
library, third party, first party, relative), in ruff's default order inside the section (``import x`` before
``from x import``, modules compared case-insensitively, relative imports furthest first), merged into an existing
``from M import ...`` of the same module (members in ruff's order-by-type order, wrapped in parentheses when
the line would exceed the target tree's line length). The insertion point is never after the first statement
that is not an import, so the name is bound before any module-level use (compound ``import x; y = x.f()``
lines, docstrings, ``__future__`` imports, ``if TYPE_CHECKING:`` blocks that follow the imports).

The target tree's ruff settings (``line-length``, ``lint.isort.known-first-party``) are read from the nearest
``pyproject.toml`` / ``ruff.toml`` / ``.ruff.toml``; a top-level package next to that file (or under ``src/``)
is first party, as in ruff's default ``src``.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from dataclasses import dataclass

from npu_lint.core.diagnostics import Edit
from npu_lint.core.source import SourceFile

FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL = range(5)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


@dataclass(frozen=True)
class RuffStyle:
    root: str | None = None  # the directory of the ruff configuration (or None: none found)
    line_length: int = 88
    known_first_party: frozenset[str] = frozenset()
    known_third_party: frozenset[str] = frozenset()
    lines_after_imports: int = -1  # -1: ruff's automatic choice
    long_line_limit: int | None = None  # the E501 limit when the tree's `ruff check` selects E501, else None
    e501_ignored_in: tuple[str, ...] = ()  # the (per-file-ignores) patterns of files where E501 is ignored
    force_single_line: bool = False  # isort `force-single-line`: one member per `from` import, never merged

    def section(self, module: str, level: int) -> int:
        if level:
            return LOCAL
        top = module.split(".")[0]
        if top == "__future__":
            return FUTURE
        if top in self.known_first_party:
            return FIRST_PARTY
        if top in self.known_third_party:
            return THIRD_PARTY
        if top in _STDLIB:
            return STDLIB
        if self.root is not None and any(
            os.path.isdir(os.path.join(self.root, *sub, top)) for sub in ((), ("src",))
        ):
            return FIRST_PARTY
        return THIRD_PARTY


def _e501_limit(cfg: dict, lint: dict, line_length: int) -> int | None:
    """The line length E501 enforces when the configuration selects it (the most specific selector wins; an
    ignore wins a tie), else None. Per-file ignores: ``_e501_ignored_in``."""

    def selectors(key: str) -> list[str]:
        value = lint.get(key, cfg.get(key))
        return [v.upper() for v in value if isinstance(v, str)] if isinstance(value, list) else []

    def specificity(codes: list[str]) -> int:
        return max(
            (0 if c == "ALL" else len(c) for c in codes if c == "ALL" or "E501".startswith(c)), default=-1
        )

    select = selectors("select") or ["E4", "E7", "E9", "F"]
    chosen = max(specificity(select), specificity(selectors("extend-select")))
    if chosen < 0 or specificity(selectors("ignore")) >= chosen:
        return None
    style = lint.get("pycodestyle", cfg.get("pycodestyle"))
    limit = style.get("max-line-length") if isinstance(style, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else line_length


def _e501_ignored_in(cfg: dict, lint: dict) -> tuple[str, ...]:
    """The ``per-file-ignores`` / ``extend-per-file-ignores`` patterns whose codes cover E501 (``E``, ``E5``,
    ``E50``, ``E501``, ``ALL``), as written (a leading ``!`` negates)."""
    out: list[str] = []
    for key in ("per-file-ignores", "extend-per-file-ignores"):
        table = lint.get(key, cfg.get(key))
        if not isinstance(table, dict):
            continue
        for pattern, codes in table.items():
            if isinstance(codes, list) and any(
                isinstance(c, str) and (c.upper() == "ALL" or "E501".startswith(c.upper())) and c
                for c in codes
            ):
                out.append(pattern)
    return tuple(out)


def _read_toml(path: str) -> dict | None:
    from npu_lint.core.safeio import read_toml

    try:
        return read_toml(path)
    except (OSError, ValueError):
        return None


_CONFIG_NAMES = ("ruff.toml", ".ruff.toml", "pyproject.toml")


def ruff_style(directory: str) -> RuffStyle:
    """The ruff settings that govern files in ``directory`` (nearest configuration upwards). Remembered per
    state (size, mtime) of the configuration files on the way up, so a long-lived process (the language server)
    sees an edited, a new or a removed one."""
    state: list[tuple[str, int, int]] = []
    current = os.path.abspath(directory)
    while True:
        for name in _CONFIG_NAMES:
            path = os.path.join(current, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            state.append((path, st.st_size, st.st_mtime_ns))
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return _ruff_style_at(directory, tuple(state))


@functools.lru_cache(maxsize=256)
def _ruff_style_at(directory: str, _state: tuple[tuple[str, int, int], ...]) -> RuffStyle:
    current = os.path.abspath(directory)
    while True:
        for name in _CONFIG_NAMES:
            path = os.path.join(current, name)
            if not os.path.isfile(path):
                continue
            data = _read_toml(path)
            if data is None:
                continue
            cfg = data.get("tool", {}).get("ruff") if name == "pyproject.toml" else data
            if not isinstance(cfg, dict):
                continue
            cfg = _extended(cfg, current)
            length = cfg.get("line-length", 88)
            lint = cfg.get("lint", {}) if isinstance(cfg.get("lint"), dict) else {}
            isort = lint.get("isort", cfg.get("isort", {}))
            isort = isort if isinstance(isort, dict) else {}
            after = isort.get("lines-after-imports", -1)
            line_length = length if isinstance(length, int) and length > 0 else 88
            return RuffStyle(
                root=current,
                line_length=line_length,
                known_first_party=_names(isort.get("known-first-party")),
                known_third_party=_names(isort.get("known-third-party")),
                lines_after_imports=after if isinstance(after, int) else -1,
                long_line_limit=_e501_limit(cfg, lint, line_length),
                e501_ignored_in=_e501_ignored_in(cfg, lint),
                force_single_line=isort.get("force-single-line") is True,
            )
        parent = os.path.dirname(current)
        if parent == current:
            return RuffStyle()
        current = parent


def _merged(base: dict, child: dict) -> dict:
    out = dict(base)
    for key, value in child.items():
        out[key] = (
            _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _extended(cfg: dict, directory: str, depth: int = 0) -> dict:
    """``cfg`` over the configuration its ``extend`` names (a path relative to ``directory``, followed as ruff
    does, a few levels deep): a nested ``ruff.toml`` that extends the project's keeps its isort and line-length
    settings."""
    target = cfg.get("extend")
    if not isinstance(target, str) or not target or depth >= 8:
        return cfg
    path = os.path.normpath(os.path.join(directory, os.path.expanduser(target)))
    data = _read_toml(path) if os.path.isfile(path) else None
    if data is None:
        return cfg
    base = data.get("tool", {}).get("ruff") if os.path.basename(path) == "pyproject.toml" else data
    if not isinstance(base, dict):
        return cfg
    base = _extended(base, os.path.dirname(path), depth + 1)
    return _merged(base, {k: v for k, v in cfg.items() if k != "extend"})


def _names(value: object) -> frozenset[str]:
    return frozenset(x for x in value if isinstance(x, str)) if isinstance(value, list) else frozenset()


def _member_key(name: str) -> tuple[int, str, str]:
    """ruff's ``order-by-type``: CONSTANTS, then Classes, then everything else; case-insensitive."""
    bare = name.split(" as ")[0]
    if bare.isupper() and len(bare) > 1:
        kind = 0
    elif bare[:1].isupper():
        kind = 1
    else:
        kind = 2
    return (kind, bare.lower(), name)


def _stmt_key(stmt: ast.stmt, style: RuffStyle) -> tuple:
    if isinstance(stmt, ast.ImportFrom):
        module = stmt.module or ""
        key = (style.section(module, stmt.level), 1, -stmt.level, module.lower())
        if style.force_single_line and stmt.names:  # one member per line: members order the same module
            return (*key, _member_key(_alias_text(stmt.names[0])))
        return key
    assert isinstance(stmt, ast.Import)
    module = stmt.names[0].name
    return (style.section(module, 0), 0, 0, module.lower())


def split_module(module: str) -> tuple[int, str]:
    """``"....utils.device"`` -> (4, "utils.device")."""
    bare = module.lstrip(".")
    return len(module) - len(bare), bare


def leading_block(tree: ast.Module) -> tuple[ast.stmt | None, list[ast.stmt], ast.stmt | None]:
    """(docstring, the leading import statements, the first other statement)."""
    body = tree.body
    i = 0
    doc = None
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            doc, i = body[0], 1
    block: list[ast.stmt] = []
    while i < len(body) and isinstance(body[i], (ast.Import, ast.ImportFrom)):
        block.append(body[i])
        i += 1
    return doc, block, body[i] if i < len(body) else None


def _line_start(source: SourceFile, line: int) -> int:
    """Offset of the start of 1-based ``line`` (the end of the text after the last line)."""
    if line > len(source.lines):
        return len(source.text)
    return source.offset(line, 0)


def _after(source: SourceFile, stmt: ast.stmt) -> tuple[int, str]:
    """Offset just after ``stmt``'s last line, and a newline to prepend when the file ends there unterminated."""
    end_line = stmt.end_lineno or stmt.lineno
    if end_line < len(source.lines):
        return source.offset(end_line + 1, 0), ""
    text = source.text
    return len(text), "" if text.endswith(("\n", "\r")) else "\n"


def _render_from(module: str, names: list[str], style: RuffStyle, indent: str = "") -> str:
    one = f"{indent}from {module} import {', '.join(names)}"
    if len(one) <= style.line_length:
        return one
    inner = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {module} import (\n{inner}{indent})"


def _alias_text(alias: ast.alias) -> str:
    return f"{alias.name} as {alias.asname}" if alias.asname else alias.name


def merge_edit(source: SourceFile, stmt: ast.ImportFrom, name: str, style: RuffStyle) -> Edit | None:
    """Add ``name`` to an existing ``from M import ...`` (members re-sorted); None when it has comments."""
    start, end = source.node_range(stmt)
    if "#" in source.text[start:end] or any(a.name == "*" for a in stmt.names):
        return None
    names = sorted({*(_alias_text(a) for a in stmt.names), name}, key=_member_key)
    module = "." * stmt.level + (stmt.module or "")
    text = _render_from(module, names, style, "").replace("\n", source.newline)
    return Edit(start, end, text)


def add_import_edit(
    source: SourceFile, tree: ast.Module, module: str, name: str, style: RuffStyle | None = None
) -> Edit:
    """The edit that adds ``from module import name`` (``module`` may be relative: ``..utils.device``)."""
    if style is None:
        style = ruff_style(os.path.dirname(os.path.abspath(source.path)))
    level, bare = split_module(module)
    doc, block, first_code = leading_block(tree)
    for stmt in block:
        if (
            isinstance(stmt, ast.ImportFrom)
            and stmt.level == level
            and (stmt.module or "") == bare
            and not any(a.asname for a in stmt.names)  # isort keeps ``x as y`` imports apart (combine-as off)
            and not style.force_single_line
        ):
            edit = merge_edit(source, stmt, name, style)
            if edit is not None:
                return edit
    nl = source.newline
    line = _render_from(module, [name], style).replace("\n", nl)
    key: tuple = (style.section(bare, level), 1, -level, bare.lower())
    if style.force_single_line:
        key = (*key, _member_key(name))
    if not block:
        want = style.lines_after_imports
        if want < 0:
            defines = isinstance(first_code, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            want = 2 if defines else 1
        if doc is not None:
            offset, pre = _after(source, doc)
            text = f"{pre}{nl}{line}{nl}"
            after_line = (doc.end_lineno or doc.lineno) + 1
        else:
            # after a shebang / encoding / licence comment header, before the first statement
            first_line = first_code.lineno if first_code is not None else len(source.lines) + 1
            header = 0
            for i, raw in enumerate(source.lines[: first_line - 1], start=1):
                if raw.strip() and not raw.lstrip().startswith("#"):
                    break
                if raw.lstrip().startswith("#"):
                    header = i
            offset = _line_start(source, header + 1)
            pre = "" if header == 0 or offset == 0 or source.text[offset - 1] in "\r\n" else nl
            text = f"{pre}{nl if header else ''}{line}{nl}"
            after_line = header + 1
        if first_code is not None:
            # blank lines between the new import and the code it now precedes (ruff's lines-after-imports)
            gap = sum(1 for raw in source.lines[after_line - 1 : first_code.lineno - 1] if not raw.strip())
            text += nl * max(0, want - gap)
        return Edit(offset, offset, text)
    keys = [_stmt_key(s, style) for s in block]
    index = next((i for i, k in enumerate(keys) if k > key), len(block))
    if index < len(block) and keys[index][0] == key[0]:  # inside its section, before one that sorts after it
        offset = _line_start(source, block[index].lineno)
        text = f"{line}{nl}"
    elif index > 0 and keys[index - 1][0] == key[0]:  # the last of its section
        offset, pre = _after(source, block[index - 1])
        text = f"{pre}{line}{nl}"
    elif index < len(block):
        if index > 0:  # a new section between two others: after the previous one, blank lines around it
            offset, pre = _after(source, block[index - 1])
            text = f"{pre}{nl}{line}{nl}"
        else:  # a new first section
            offset = _line_start(source, block[0].lineno)
            text = f"{line}{nl}{nl}"
    else:
        last = block[-1]
        offset, pre = _after(source, last)
        text = f"{pre}{line}{nl}" if keys[-1][0] == key[0] else f"{pre}{nl}{line}{nl}"
    if first_code is not None:
        # never after the first statement that is not an import (``import torch; x = torch.ones(2)``)
        limit = _line_start(source, first_code.lineno)
        if offset > limit:
            offset, text = limit, f"{line}{nl}"
    return Edit(offset, offset, text)


# -- imports a fix orphaned ---------------------------------------------------------------------------


# modules imported for their side effect as well (``import torch_npu`` registers the ``npu`` device): the
# decision to drop them belongs to the rule that reports them (NPU301), never to the orphan clean-up
_SIDE_EFFECT_IMPORTS = frozenset({"torch_npu", "transformer_engine", "apex", "deepspeed", "mindspeed"})


def _top_imports(tree: ast.Module) -> list[tuple[ast.stmt, ast.alias, str]]:
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                out.append((stmt, alias, alias.asname or alias.name.split(".")[0]))
        elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            for alias in stmt.names:
                if alias.name != "*":
                    out.append((stmt, alias, alias.asname or alias.name))
    return out


_SPEC_IMPORT_CALLS = frozenset({"add_import", "add_post_import_block"})


def _used_names(tree: ast.Module) -> set[str]:
    """Names the module reads (``Name`` nodes), plus every word of its string constants (string annotations,
    ``__all__``): conservative, a name mentioned in a string counts as used."""
    used: set[str] = set()
    # a patch spec's ``config.add_import(module, names=[...])`` / ``add_post_import_block("...")`` strings name
    # what the generated file imports, not a use of the spec's own imports (ruff reports those F401)
    for_generated = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _SPEC_IMPORT_CALLS
        for sub in ast.walk(node)
        if isinstance(sub, ast.Constant)
    }
    for node in ast.walk(tree):
        if id(node) in for_generated:
            continue
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 2000:
            used.update(w for w in node.value.replace(".", " ").replace("[", " ").split() if w.isidentifier())
    return used


def orphaned_import_edits(before: str, source: SourceFile, tree: ast.Module | None = None) -> list[Edit]:
    """Edits removing the module-level imports that ``before`` used and ``source`` no longer uses: a fix that
    replaced the last ``torch.cuda.synchronize()`` must not leave ``import torch`` behind (ruff F401).
    Package ``__init__.py`` files are left alone (their imports are re-exports)."""
    if os.path.basename(source.path) == "__init__.py":
        return []
    try:
        old_tree = ast.parse(before)
        new_tree = tree or ast.parse(source.text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    used_before, used_after = _used_names(old_tree), _used_names(new_tree)
    bound_before = {name for _, _, name in _top_imports(old_tree)}
    orphans: dict[ast.stmt, list[ast.alias]] = {}
    for stmt, alias, name in _top_imports(new_tree):
        if isinstance(stmt, ast.Import) and alias.name.split(".")[0] in _SIDE_EFFECT_IMPORTS:
            continue
        if name in bound_before and name in used_before and name not in used_after:
            orphans.setdefault(stmt, []).append(alias)
    edits = []
    text, lines = source.text, source.lines
    for stmt, aliases in orphans.items():
        start, end = source.node_range(stmt)
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        alone = not text[source.offset(first, 0) : start].strip() and (
            not lines[last - 1][end - source.offset(last, 0) :].strip()
            or lines[last - 1][end - source.offset(last, 0) :].lstrip().startswith("#")
        )
        if len(aliases) == len(stmt.names):
            if not alone:
                continue  # ``import torch; x = 1``: leave it
            cut_end = last + 1
            above_blank = first == 1 or not lines[first - 2].strip()
            if above_blank and cut_end <= len(lines) and not lines[cut_end - 1].strip():
                cut_end += (
                    1  # the statement was a section of its own: drop one of the two blank lines around it
                )
            edits.append(Edit(source.offset(first, 0), _line_start(source, cut_end), ""))
            continue
        if "#" in text[start:end]:
            continue
        keep = [_alias_text(a) for a in stmt.names if a not in aliases]
        if isinstance(stmt, ast.Import):
            new = f"import {', '.join(keep)}"
        else:
            module = "." * stmt.level + (stmt.module or "")
            new = _render_from(module, keep, ruff_style(os.path.dirname(os.path.abspath(source.path))))
        edits.append(Edit(start, end, new.replace("\n", source.newline)))
    return edits
