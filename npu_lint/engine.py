"""Lint one file or a tree: parse once, one traversal for all rules, suppressions, cache, fixes.

Per file: read bytes -> decode (PEP 263 / BOM) -> ``ast.parse`` once -> one iterative traversal that hands
each node to the rules registered for its type -> ``finish`` -> generated-file policy -> ``# noqa`` and
per-file-ignores -> sorted diagnostics. Trees are linted in a process pool; results are cached per file.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint import __version__
from npu_lint.config import Settings
from npu_lint.diagnostics import SEVERITY_ERROR, Applicability, CreateFile, Diagnostic, Edit, Fix
from npu_lint.rules.base import PROJECT_REGISTRY, REGISTRY, Context, Rule, load_rule_modules
from npu_lint.source import DecodeError, SourceFile, decode_source

SYNTAX_CODE = "NPU001"
MAX_FIX_PASSES = 10
POOL_THRESHOLD = 24  # files; below this a process pool costs more than it saves

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*npu-lint:[ \t]*noqa(?::[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?[ \t]*$",
    re.MULTILINE | re.IGNORECASE,
)
GENERATED_FIX_REASON = "generated file: fix the patch spec and regenerate (patchgen), never edit generated/"


class InternalError(Exception):
    pass


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None  # one-line message for an unreadable file / internal error (exit code 2)
    cached: bool = False


# -- the single traversal ---------------------------------------------------------------------------


def rule_classes(codes: Iterable[str]) -> list[type[Rule]]:
    load_rule_modules()
    return [REGISTRY[c] for c in sorted(codes) if c in REGISTRY]


# Leaf-only node kinds (expression contexts and operators) that no rule asks for are skipped, and so are the
# fields that never hold a node (names, identifiers, constants' values, operator fields).
_SKIPPABLE = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_SCALAR_FIELDS = frozenset(
    ("ctx", "op", "id", "attr", "name", "arg", "module", "level", "kind", "type_comment", "asname",
     "conversion", "is_async", "simple", "n", "s", "tag")
)  # fmt: skip
_SCALAR_BY_TYPE = {ast.Constant: ("value",), ast.MatchSingleton: ("value",), ast.Compare: ("ops",),
                   ast.Global: ("names",), ast.Nonlocal: ("names",), ast.MatchClass: ("kwd_attrs",),
                   ast.MatchMapping: ("rest",)}  # fmt: skip
_FIELDS: dict[type, tuple[str, ...]] = {}


def _node_fields(typ: type) -> tuple[str, ...]:
    skip = _SCALAR_BY_TYPE.get(typ, ())
    fields = tuple(f for f in typ._fields if f not in _SCALAR_FIELDS and f not in skip)  # type: ignore[attr-defined]
    _FIELDS[typ] = fields
    return fields


def _walk(tree: ast.AST, ctx: Context, rules: list[Rule]) -> None:
    """Pre-order traversal, iterative (deep trees cannot hit the recursion limit), once for all rules."""
    visit: dict[type, list[Callable[[ast.AST], None]]] = {}
    leave: dict[type, list[Callable[[ast.AST], None]]] = {}
    for rule in rules:
        for typ in rule.node_types:
            visit.setdefault(typ, []).append(rule.visit)
        for typ in rule.leave_types:
            leave.setdefault(typ, []).append(rule.leave)
    if any(issubclass(t, _SKIPPABLE) for t in (*visit, *leave)):
        _walk_generic(tree, ctx, visit, leave)
        return
    parents = ctx.parents
    fields_of = _FIELDS
    LEAVE = None  # stack marker: the next entry is a node to leave
    stack: list[ast.AST | None] = [tree]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if node is LEAVE:
            node = pop()
            for fn in leave.get(type(node), ()):
                fn(node)
            parents.pop()
            continue
        typ = type(node)
        for fn in visit.get(typ, ()):
            fn(node)
        fields = fields_of.get(typ)
        if fields is None:
            fields = _node_fields(typ)
        children: list[ast.AST] = []
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if type(value) is list:
                children.extend([item for item in value if item is not None])  # Dict.keys holds None for **x
            else:
                children.append(value)
        if children or typ in leave:
            push(node)
            push(LEAVE)
            parents.append(node)
            children.reverse()
            stack.extend(children)


def _walk_generic(tree: ast.AST, ctx: Context, visit: dict, leave: dict) -> None:  # noqa: ANN001
    """The same traversal over every node, operators and contexts included (when a rule asks for them)."""
    parents = ctx.parents
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            for fn in leave.get(type(node), ()):
                fn(node)
            parents.pop()
            continue
        for fn in visit.get(type(node), ()):
            fn(node)
        stack.append((node, True))
        parents.append(node)
        stack.extend((child, False) for child in reversed(list(ast.iter_child_nodes(node))))


def _syntax_diagnostic(src: SourceFile, message: str, line: int, col: int) -> Diagnostic:
    line = max(1, min(line, len(src.lines)))
    return Diagnostic(
        code=SYNTAX_CODE,
        name="syntax-error",
        message=message,
        path=src.path,
        line=line,
        col=max(0, col),
        end_line=line,
        end_col=max(0, col),
        severity=SEVERITY_ERROR,
        source_line=src.line_text(line),
    )


def check_source(
    src: SourceFile,
    codes: list[str],
    project: object | None = None,
    fix_mode: bool = False,
) -> list[Diagnostic]:
    """All diagnostics of the selected rules for one decoded file, before suppressions.

    The cyclic garbage collector is paused meanwhile: parsing and walking allocate tens of thousands of
    acyclic nodes, and the collections they trigger cost a third of the time; whatever is left to collect
    is collected once the collector runs again."""
    if not gc.isenabled():
        return _check_source(src, codes, project, fix_mode)
    gc.disable()
    try:
        return _check_source(src, codes, project, fix_mode)
    finally:
        gc.enable()


def _check_source(
    src: SourceFile,
    codes: list[str],
    project: object | None,
    fix_mode: bool,
) -> list[Diagnostic]:
    try:
        tree = ast.parse(src.text, filename=src.path)
    except SyntaxError as exc:
        if SYNTAX_CODE not in codes:
            return []
        line = exc.lineno or 1
        col = (exc.offset or 1) - 1
        text = src.line_text(line)
        col = min(col, len(text))
        return [_syntax_diagnostic(src, f"file could not be parsed: {exc.msg}", line, col)]
    except (RecursionError, MemoryError):
        if SYNTAX_CODE not in codes:
            return []
        return [_syntax_diagnostic(src, "file could not be parsed: nesting too deep for the parser", 1, 0)]
    ctx = Context(src, tree, project, fix_mode)
    rules = [cls(ctx) for cls in rule_classes(codes) if cls.applies_to(ctx)]
    if not rules:
        return []
    try:
        _walk(tree, ctx, rules)
        for rule in rules:
            rule.finish()
    except RecursionError:
        return [_syntax_diagnostic(src, "file could not be analysed: nesting too deep", 1, 0)]
    diags = ctx.diagnostics
    if src.kind.generated:
        diags = [_generated_policy(d) for d in diags]
        if diags:  # where each finding comes from in the patch spec (npu_lint.patchgen)
            from npu_lint.patchgen import attach_origins

            diags = attach_origins(src.path, src.text, tree, diags)
    return diags


def _generated_policy(diag: Diagnostic) -> Diagnostic:
    if diag.fix is None or diag.fix.applicability is Applicability.DISPLAY:
        return diag
    fix = Fix(
        diag.fix.title,
        diag.fix.edits,
        Applicability.DISPLAY,
        (),
        GENERATED_FIX_REASON,
    )
    return diag.replace(fix=fix)


# -- suppressions -----------------------------------------------------------------------------------


def _codes_in(text: str | None) -> set[str] | None:
    if not text:
        return None
    return {c.upper() for c in re.split(r"[\s,]+", text) if c}


def file_suppression(text: str) -> set[str] | None | bool:
    """False: none. True: whole file. A set: codes suppressed for the file."""
    match = _FILE_NOQA.search(text)
    if not match:
        return False
    codes = _codes_in(match.group("codes"))
    return True if codes is None else codes


def noqa_codes(line_text: str) -> set[str] | None | bool:
    """False: no noqa on the line; None: bare noqa (everything); a set: those codes."""
    if "noqa" not in line_text.lower():
        return False
    match = _NOQA.search(line_text)
    if not match:
        return False
    return _codes_in(match.group("codes"))


def apply_suppressions(src: SourceFile, diags: list[Diagnostic], ignored: set[str]) -> list[Diagnostic]:
    file_level = file_suppression(src.text) if "npu-lint" in src.text else False
    if file_level is True:
        return []
    if isinstance(file_level, set):
        ignored = ignored | file_level
    out = []
    for diag in diags:
        if diag.code in ignored:
            continue
        noqa = noqa_codes(src.line_text(diag.line))
        if noqa is False:
            out.append(diag)
        elif noqa is None or diag.code in noqa:
            continue
        else:
            out.append(diag)
    return out


def per_file_ignored(path: str, settings: Settings, known: list[str]) -> set[str]:
    if not settings.per_file_ignores:
        return set()
    import pathspec

    from npu_lint.config import expand_codes

    root = Path(settings.root).resolve()
    try:
        rel = Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        rel = Path(path).as_posix()
    out: set[str] = set()
    for pattern, codes in settings.per_file_ignores.items():
        spec = pathspec.GitIgnoreSpec.from_lines([pattern])
        if spec.match_file(rel) or spec.match_file(Path(rel).name):
            out |= expand_codes(codes, known, "per-file-ignores")
    return out


def lint_source(
    src: SourceFile,
    codes: list[str],
    settings: Settings,
    project: object | None = None,
    fix_mode: bool = False,
) -> list[Diagnostic]:
    diags = check_source(src, codes, project, fix_mode)
    if diags:
        ignored = per_file_ignored(src.path, settings, codes)
        diags = apply_suppressions(src, diags, ignored)
    return sorted(diags, key=Diagnostic.sort_key)


def read_source(path: str) -> SourceFile:
    """Read and decode; raises OSError (unreadable) or DecodeError (undecodable)."""
    data = Path(path).read_bytes()
    text, encoding = decode_source(data)
    return SourceFile.from_text(path, text, encoding)


def lint_path(path: str, codes: list[str], settings: Settings, project: object | None = None) -> FileResult:
    try:
        src = read_source(path)
    except OSError as exc:
        return FileResult(path, error=f"{path}: cannot read file: {exc.strerror or exc}")
    except DecodeError as exc:
        if SYNTAX_CODE not in codes:
            return FileResult(path)
        src = SourceFile(path, "")
        diag = Diagnostic(
            SYNTAX_CODE,
            "syntax-error",
            f"file could not be decoded: {exc}",
            path,
            exc.line,
            0,
            exc.line,
            0,
            severity=SEVERITY_ERROR,
        )
        return FileResult(path, [diag])
    try:
        return FileResult(path, lint_source(src, codes, settings, project))
    except Exception as exc:  # an internal error must not stop the run
        return FileResult(path, error=f"{path}: internal error: {type(exc).__name__}: {exc}")


# -- cache --------------------------------------------------------------------------------------------


class Cache:
    """Per-file results keyed by (tool version, effective config, project index, path, content hash)."""

    def __init__(self, directory: str, fingerprint: str) -> None:
        self.directory = Path(directory) / f"v{__version__}"
        self.fingerprint = fingerprint
        self.keys: dict[str, str] = {}  # path -> key of every file looked up in this run

    def tree_key(self, extra: str) -> str:
        """A key for results computed over all files looked up so far (project rules)."""
        h = hashlib.sha256(self.fingerprint.encode() + b"\0" + extra.encode())
        for path in sorted(self.keys):
            h.update(f"\0{path}\0{self.keys[path]}".encode())
        return h.hexdigest()

    def key(self, path: str, data: bytes) -> str:
        h = hashlib.sha256()
        h.update(self.fingerprint.encode())
        h.update(b"\0")
        h.update(os.path.abspath(path).encode())
        h.update(b"\0")
        h.update(data)
        return h.hexdigest()

    def _file(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[Diagnostic] | None:
        try:
            raw = self._file(key).read_bytes()
        except OSError:
            return None
        try:
            return [Diagnostic.from_json(d) for d in json.loads(raw)]
        except (ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, diags: list[Diagnostic]) -> None:
        target = self._file(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.dumps([d.to_json() for d in diags], separators=(",", ":")).encode()
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except OSError:
            pass  # a cache that cannot be written is not an error


# -- many files -------------------------------------------------------------------------------------

_WORKER: dict[str, object] = {}


def _init_worker(codes: list[str], settings: Settings, project: object | None) -> None:
    _WORKER["args"] = (codes, settings, project)
    load_rule_modules()


def _work(path: str) -> FileResult:
    codes, settings, project = _WORKER["args"]  # type: ignore[misc]
    return lint_path(path, codes, settings, project)


def lint_paths(
    paths: list[str],
    codes: list[str],
    settings: Settings,
    project: object | None = None,
    cache: Cache | None = None,
    jobs: int | None = None,
    during: Callable[[], None] | None = None,
) -> list[FileResult]:
    """Lint files (cache first, then a process pool for many files). ``during`` runs in this process while
    the pool's workers lint (the CLI runs the project rules there), or after a serial run."""
    results: dict[str, FileResult] = {}
    todo: list[str] = []
    keys: dict[str, str] = {}
    if cache is not None:
        for path in paths:
            try:
                data = Path(path).read_bytes()
            except OSError:
                todo.append(path)
                continue
            key = cache.keys[path] = cache.key(path, data)
            hit = cache.get(key)
            if hit is None:
                keys[path] = key
                todo.append(path)
            else:
                results[path] = FileResult(path, hit, cached=True)
    else:
        todo = list(paths)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if len(todo) >= POOL_THRESHOLD and workers > 1:
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(codes, settings, project)
        ) as pool:
            chunk = max(1, len(todo) // (workers * 4))
            pending = pool.map(_work, todo, chunksize=chunk)  # submits every chunk now
            if during is not None:
                during()
            for res in pending:
                results[res.path] = res
    else:
        for path in todo:
            results[path] = lint_path(path, codes, settings, project)
        if during is not None:
            during()
    if cache is not None:
        for path, key in keys.items():
            res = results[path]
            if res.error is None:
                cache.put(key, res.diagnostics)
    return [results[p] for p in sorted(results)]


def project_diagnostics(
    project: object,
    files: list[str],
    codes: list[str],
    settings: Settings,
    fix_mode: bool = False,
    cache: Cache | None = None,
    sources: dict[str, SourceFile] | None = None,
) -> list[Diagnostic]:
    """Diagnostics of the project (whole-tree) rules, suppressions applied. Cached, like file results,
    under a key covering every linted file's key (content, configuration, project index). ``sources`` gives
    the text to read suppressions from for some paths (an editor's unsaved buffer); others are read from disk.
    Used by the CLI, the audit and the language server."""
    load_rule_modules()
    rules = [PROJECT_REGISTRY[c] for c in codes if c in PROJECT_REGISTRY]
    if not rules:
        return []
    key = None
    if cache is not None and not fix_mode:
        key = cache.tree_key("project:" + ",".join(c.code for c in rules))
        hit = cache.get(key)
        if hit is not None:
            return hit
    out = []
    for cls in rules:
        rule = cls()
        rule.fix_mode = fix_mode
        diags = list(rule.check(project, files))
        for diag in diags:
            src = (sources or {}).get(diag.path)
            if src is None:
                try:
                    src = read_source(diag.path)
                except (OSError, DecodeError):
                    out.append(diag)
                    continue
            ignored = per_file_ignored(diag.path, settings, codes)
            out.extend(apply_suppressions(src, [diag], ignored))
    if key is not None:
        cache.put(key, out)
    return out


# -- fixes ------------------------------------------------------------------------------------------


def _overlaps(a: Edit, b: Edit) -> bool:
    if a == b:
        return False
    if a.start == a.end == b.start == b.end:
        return True  # two different insertions at one point: order would be arbitrary
    return a.start < b.end and b.start < a.end


def apply_edits(text: str, edits: Iterable[Edit], newline: str = "\n") -> str:
    unique = sorted(set(edits), key=lambda e: (e.start, e.end))
    out = []
    pos = 0
    for edit in unique:
        if edit.start < pos:
            raise ValueError("overlapping edits")
        out.append(text[pos : edit.start])
        content = edit.content
        if newline != "\n" and "\n" in content:
            content = content.replace("\r\n", "\n").replace("\n", newline)
        out.append(content)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    return True


def fix_applicable(fix: Fix | None, unsafe: bool) -> bool:
    return fix is not None and fix.applies(unsafe)


@dataclass
class FixOutcome:
    text: str
    applied: int = 0
    applied_codes: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # fixes whose result did not parse
    creates: list[CreateFile] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)


def _fix_id(diag: Diagnostic) -> tuple[str, str, str]:
    return (diag.code, diag.fix.title if diag.fix else "", diag.source_line.strip())


def fix_source(
    src: SourceFile,
    codes: list[str],
    settings: Settings,
    project: object | None = None,
    unsafe: bool = False,
) -> FixOutcome:
    """Apply fixes to a fixpoint (bounded). Never returns text that does not parse (if the input parsed)."""
    text = src.text
    newline = src.newline
    outcome = FixOutcome(text)
    rejected: set[tuple[str, str, str]] = set()
    created: dict[str, CreateFile] = {}
    current = src
    diags = lint_source(current, codes, settings, project, fix_mode=True)
    for _ in range(MAX_FIX_PASSES):
        candidates = [d for d in diags if fix_applicable(d.fix, unsafe) and _fix_id(d) not in rejected]
        if not candidates:
            break
        accepted: list[Diagnostic] = []
        taken: list[Edit] = []
        for diag in sorted(
            candidates, key=lambda d: (min((e.start for e in d.fix.edits), default=0), d.code)
        ):
            edits = diag.fix.edits  # type: ignore[union-attr]
            if any(_overlaps(e, t) for e in edits for t in taken):
                continue  # left for the next pass
            accepted.append(diag)
            taken.extend(edits)
        new_text = apply_edits(text, taken, newline)
        if not parses(new_text):
            # find the culprit(s): keep the first fix that parses on its own, retry the rest next pass
            new_text = text
            good: list[Diagnostic] = []
            for diag in accepted:
                attempt = apply_edits(text, diag.fix.edits, newline)  # type: ignore[union-attr]
                if parses(attempt):
                    good.append(diag)
                    new_text = attempt
                    break
                rejected.add(_fix_id(diag))
                outcome.dropped.append(
                    f"{src.path}:{diag.line}:{diag.col + 1}: {diag.code} fix dropped: result would not parse"
                )
            accepted = good
        for diag in accepted:
            for create in diag.fix.creates:  # type: ignore[union-attr]
                created.setdefault(create.path, create)
            outcome.applied += 1
            outcome.applied_codes[diag.code] = outcome.applied_codes.get(diag.code, 0) + 1
        if new_text == text:
            break
        text = new_text
        current = SourceFile(src.path, text, src.encoding, src.kind)
        diags = lint_source(current, codes, settings, project, fix_mode=True)
    else:
        diags = lint_source(current, codes, settings, project, fix_mode=True)
    outcome.text = text
    outcome.creates = list(created.values())
    outcome.remaining = diags
    return outcome


def write_atomic(path: str, text: str, encoding: str) -> None:
    """Write ``text`` to ``path`` atomically, keeping the encoding (BOM included) and the file mode."""
    target = Path(path)
    data = text.encode(encoding)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
