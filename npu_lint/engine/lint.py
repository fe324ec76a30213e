"""Lint one file: decode, parse once, walk once, generated-file policy, suppressions."""

from __future__ import annotations

import ast
import gc
import hashlib
import os
import re
import sys

from npu_lint.core.astutil import index_file, walk_memo
from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import SEVERITY_ERROR, Applicability, Diagnostic, Fix
from npu_lint.core.reparse import DocumentParse
from npu_lint.core.safeio import read_regular
from npu_lint.core.source import DecodeError, SourceFile, decode_source
from npu_lint.core.textscan import for_thread
from npu_lint.engine.guard import guard_fixes
from npu_lint.engine.result import FileResult, InternalError
from npu_lint.engine.suppress import apply_suppressions, per_file_ignored
from npu_lint.engine.walk import _walk, rule_classes
from npu_lint.rules.base import Context
from npu_lint.veomni.norms import defines_norm_class
from npu_lint.veomni.patchgen import module_of, shared_tree
from npu_lint.veomni.project import Project

SYNTAX_CODE = "NPU001"

GENERATED_FIX_REASON = "generated file: fix the patch spec and regenerate (patchgen), never edit generated/"


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
    project: Project | None = None,
    fix_mode: bool = False,
    share: os.stat_result | None = None,
    reuse: DocumentParse | None = None,
) -> list[Diagnostic]:
    """All diagnostics of the selected rules for one decoded file, before suppressions.

    The cyclic garbage collector is paused meanwhile: parsing and walking allocate tens of thousands of
    acyclic nodes, and the collections they trigger cost a third of the time; whatever is left to collect
    is collected once the collector runs again. ``share`` (the stat of the bytes ``src`` was decoded from)
    offers the tree of a generated file, spec or `__init__` to the project rules run later in this process.
    ``reuse`` (an editor document's last parse, ``core.reparse``) parses again only the statements an edit
    touched."""
    with walk_memo():  # the rules of one file walk the same subtrees many times: listed once
        if not gc.isenabled():
            return _check_source(src, codes, project, fix_mode, share, reuse)
        gc.disable()
        try:
            return _check_source(src, codes, project, fix_mode, share, reuse)
        finally:
            # what the rules keep (a file's tree in the per-file memos, until the next file replaces it) would
            # be traversed by the young collection the next allocation triggers: 40-90 ms on a 2,500-line
            # file in the language server, to collect nothing. The objects go straight to the oldest
            # generation instead (freeze, then unfreeze, both constant time); cyclic garbage among them waits
            # for the next full collection.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _check_source(
    src: SourceFile,
    codes: list[str],
    project: Project | None,
    fix_mode: bool,
    share: os.stat_result | None = None,
    reuse: DocumentParse | None = None,
) -> list[Diagnostic]:
    # the trees other files' rules read too (the project rules: specs, generated files, `__init__`s; the NPU40x
    # rules: a package's RMSNorm classes) are shared: each file is parsed once per run
    # (and a VeOmni tree's modules: the tree's module index reads the modules other files import or call)
    kind = src.kind
    shared = share is not None and (
        kind.generated
        or kind.spec
        or kind.init
        or module_of(src.path) is not None
        or defines_norm_class(src.text)
    )
    try:
        # a file the project (or another file's rules, or the module index) already parsed in this process, with
        # this text: whether or not this file's tree is offered to the project rules, it is not parsed again
        tree = shared_tree(src.path, src.text, share)
        if tree is None and reuse is not None:
            tree = reuse.parse(src.text, src.path)
        elif tree is None:
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
    if shared:
        from npu_lint.veomni.patchgen import share_tree

        share_tree(src.path, src.text, tree, share)  # parsed once: the project rules read this tree
    digits = _literal_digits(src.text)
    if MAX_INT_DIGITS >= digits > sys.get_int_max_str_digits() > 0:  # parsed but not printable by CPython
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(digits + 1)
        try:
            return _check_parsed(src, tree, codes, project, fix_mode, reuse)
        finally:
            sys.set_int_max_str_digits(limit)
    return _check_parsed(src, tree, codes, project, fix_mode, reuse)


# an integer literal in hex / octal / binary: CPython parses any length (a decimal one past 4,300 digits is a
# syntax error) but refuses to convert one past `sys.get_int_max_str_digits()` to text (`ast.unparse`, a message)
_LONG_INT = re.compile(r"0[xX][0-9a-fA-F_]{3000,}|0[oO][0-7_]{4000,}|0[bB][01_]{12000,}")
_BITS = {"x": 4.0, "o": 3.0, "b": 1.0}
# str() of such an int costs ~50 ms (quadratic): past this, the limit stays, and a rule that prints the literal
# fails alone (rule isolation)
MAX_INT_DIGITS = 30_000


def _literal_digits(text: str) -> int:
    """The decimal digits of the longest non-decimal integer literal of ``text`` that CPython will not convert
    to text under its default limit (0 when there is none)."""
    most = 0
    for m in _LONG_INT.finditer(text):
        lit = m.group().replace("_", "")
        most = max(most, int((len(lit) - 2) * _BITS[lit[1].lower()] * 0.30103) + 1)
    return most if most > 4300 else 0


def _check_parsed(
    src: SourceFile,
    tree: ast.Module,
    codes: list[str],
    project: Project | None,
    fix_mode: bool,
    reuse: DocumentParse | None = None,
) -> list[Diagnostic]:
    # the rules' per-function node lists come from one index of the file (``nodes_of``); an editor document's
    # parse hands its own (spliced around the edit)
    index_file(tree, reuse.index if reuse is not None and reuse.tree is tree else None)
    ctx = Context(src, tree, project, fix_mode)
    text = (
        src.text
    )  # each rule's text pre-check first (``Rule.requires``): a rule that cannot fire is not entered
    scan = for_thread()  # each word of the pre-checks searched once (an edited buffer: around the edit only)
    scan.begin(src.path, text)
    contains = scan.contains
    classes = [cls for cls in rule_classes(codes) if cls.may_fire(text, contains) and cls.applies_to(ctx)]
    if not classes:
        return []
    # rule isolation: a rule that raises is named (an internal error, exit 2; a recursion too deep for it is
    # NPU001) and the file is walked again without it, so its failure hides no other rule's findings
    failures: list[str] = []
    deep: list[str] = []
    while True:
        try:
            rules = [cls(ctx) for cls in classes]  # a rule whose constructor raises is isolated too
            _walk(tree, ctx, rules)
            for rule in rules:
                rule.finish()
            break
        except Exception as exc:  # RecursionError included
            culprit = _culprit(exc)
            if culprit == "npu-lint" or culprit not in {cls.code for cls in classes}:  # not a rule's own code
                if isinstance(exc, RecursionError):
                    return [_syntax_diagnostic(src, "file could not be analysed: nesting too deep", 1, 0)]
                raise InternalError(f"internal error in {culprit}: {type(exc).__name__}: {exc}") from exc
            if isinstance(exc, RecursionError):
                deep.append(culprit)
            else:
                failures.append(f"internal error in {culprit}: {type(exc).__name__}: {exc}")
            classes = [cls for cls in classes if cls.code != culprit]
            ctx = Context(src, tree, project, fix_mode)
            if not classes:
                break
    diags = ctx.diagnostics
    for code in deep:
        diags.append(_syntax_diagnostic(src, f"file could not be analysed by {code}: nesting too deep", 1, 0))
    if failures:  # the other rules' findings travel with the error (suppressions applied by lint_source)
        raise InternalError("; ".join(failures), diagnostics=_finish(src, tree, ctx, diags, fix_mode))
    return _finish(src, tree, ctx, diags, fix_mode)


def _finish(
    src: SourceFile, tree: ast.Module, ctx: Context, diags: list[Diagnostic], fix_mode: bool
) -> list[Diagnostic]:
    """The walk's findings with their deferred fixes built (fix mode), the fix invariant and the generated-file
    policy applied."""
    if fix_mode and not src.kind.generated:
        diags = _build_deferred(ctx, diags)
    if not src.kind.generated and any(d.fix is not None for d in diags):
        diags = guard_fixes(src.path, src.text, tree, diags, ctx.project)  # the fix invariant
    if src.kind.generated:
        diags = [_generated_policy(d) for d in diags]
        if diags:  # where each finding comes from in the patch spec (npu_lint.veomni.patchgen)
            from npu_lint.veomni.patchgen import attach_origins

            try:
                diags = attach_origins(src.path, src.text, tree, diags)
            except Exception as exc:  # one failure policy: name what raised and the findings it served
                codes_seen = ",".join(sorted({d.code for d in diags}))
                raise InternalError(
                    f"internal error in {codes_seen} origins (patchgen): {type(exc).__name__}: {exc}"
                ) from exc
    return diags


def _culprit(exc: BaseException) -> str:
    """The rule (or fixer) whose code raised: the innermost traceback frame whose ``self`` is a rule."""
    from npu_lint.rules.base import Rule

    found = "npu-lint"
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, Rule) and owner.code:
            found = owner.code
        tb = tb.tb_next
    return found


def _build_deferred(ctx: Context, diags: list[Diagnostic]) -> list[Diagnostic]:
    """Replace deferred fixes by the fixes their builders compute (``npu_lint.fixers.resolve``), once per builder and
    file; every finding that carries the same deferred fix shares the built one."""
    built: dict[str, Fix | None] = {}
    out = []
    for diag in diags:
        fix = diag.fix
        if fix is None or not fix.deferred or fix.builder is None:
            out.append(diag)
            continue
        if fix.builder not in built:
            from npu_lint.fixers import resolve

            try:
                built[fix.builder] = resolve(fix.builder)(ctx.source, ctx.project)
            except Exception as exc:  # one failure policy: reported with the codes it serves, exit 2
                raise InternalError(
                    f"internal error in {diag.code} fix ({fix.builder}): {type(exc).__name__}: {exc}"
                ) from exc
        out.append(diag.replace(fix=built[fix.builder]))
    return out


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


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(src: SourceFile) -> SourceFile:
    """An editor buffer may hold a lone surrogate (no file decoded from bytes can): the parser cannot encode it,
    so it is read as U+FFFD, one code point (and one UTF-16 unit) for one: every position stays the same."""
    if src.text.isascii() or not _SURROGATE.search(src.text):
        return src
    return SourceFile.from_text(src.path, _SURROGATE.sub("\ufffd", src.text), src.encoding)


def lint_source(
    src: SourceFile,
    codes: list[str],
    settings: Settings,
    project: Project | None = None,
    fix_mode: bool = False,
    share: os.stat_result | None = None,
    reuse: DocumentParse | None = None,
) -> list[Diagnostic]:
    src = without_surrogates(src)
    try:
        diags = check_source(src, codes, project, fix_mode, share, reuse)
    except InternalError as exc:  # a rule failed: the other rules' findings, suppressed as usual, go with it
        if exc.diagnostics:
            exc.diagnostics = _suppressed(src, exc.diagnostics, settings, codes)
        raise
    return _suppressed(src, diags, settings, codes)


def _suppressed(
    src: SourceFile, diags: list[Diagnostic], settings: Settings, codes: list[str]
) -> list[Diagnostic]:
    if diags:
        ignored = per_file_ignored(src.path, settings, codes)
        diags = apply_suppressions(src, diags, ignored)
    return sorted(diags, key=Diagnostic.sort_key)


def build_deferred_fixes(
    diagnostics: list[Diagnostic], codes: list[str], settings: Settings, project: Project | None = None
) -> list[Diagnostic]:
    """``diagnostics`` with every deferred fix built (each file that has one is linted again in fix mode, once),
    so that outputs which show fixes (``--show-fixes``, JSON, ``--diff``'s proposals) carry the real fix:
    its edits, and, for a display-only proposal, its reason. A file that cannot be read keeps its deferred
    fixes."""
    paths = sorted({d.path for d in diagnostics if d.fix is not None and d.fix.deferred})
    if not paths:
        return diagnostics
    built: dict[str, dict[tuple[str, int, int, int, int], Diagnostic]] = {}
    for path in paths:
        try:
            src = read_source(path)
        except (OSError, DecodeError):
            continue
        fixed = lint_source(src, codes, settings, project, fix_mode=True)
        built[path] = {(d.code, d.line, d.col, d.end_line, d.end_col): d for d in fixed}
    out = []
    for d in diagnostics:
        if d.fix is not None and d.fix.deferred and d.path in built:
            found = built[d.path].get((d.code, d.line, d.col, d.end_line, d.end_col))
            if found is not None:
                d = d.replace(fix=found.fix)
        out.append(d)
    return out


def read_source(path: str) -> SourceFile:
    """Read and decode; raises OSError (unreadable, not a regular file, too large) or DecodeError."""
    return read_snapshot(path)[0]


def read_snapshot(path: str) -> tuple[SourceFile, tuple[bytes, os.stat_result]]:
    """``read_source`` and what was read (bytes, stat): a write of a fix checks the file still has them."""
    data, st = read_regular(path)
    text, encoding = decode_source(data)
    return SourceFile.from_text(path, text, encoding), (data, st)


def lint_path(
    path: str, codes: list[str], settings: Settings, project: Project | None = None, share: bool = False
) -> FileResult:
    """Lint one file on disk. ``share``: offer its tree to the project rules run later in this process
    (a serial run; a pool's workers do not)."""
    try:
        data, st = read_regular(path)
        text, encoding = decode_source(data)
        src = SourceFile.from_text(path, text, encoding)
    except OSError as exc:
        return FileResult(path, error=f"{path}: cannot read file: {exc.strerror or exc}")
    except DecodeError as exc:
        digest = hashlib.sha256(data).hexdigest()
        if SYNTAX_CODE not in codes:  # not analysed, and said so (no digest: the result is not cached)
            return FileResult(path, size=len(data), not_analysed=f"{path}: not analysed: {exc}")
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
        return FileResult(path, [diag], size=len(data), digest=digest)
    try:
        result = FileResult(path, lint_source(src, codes, settings, project, share=st if share else None))
        result.size, result.digest = len(data), hashlib.sha256(data).hexdigest()
        return result
    except InternalError as exc:  # the other files (and the file's other rules) are still linted; exit 2
        return FileResult(path, exc.diagnostics, error=f"{path}: {exc}")
    except Exception as exc:
        return FileResult(path, error=f"{path}: internal error: {type(exc).__name__}: {exc}")
