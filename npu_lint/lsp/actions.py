"""Code actions: per-diagnostic quick fixes, "Disable NPUxxx for this line", and fix-all.

Pure functions of a linted document (no server state), so they can be tested in-process.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import PositionCodec

from npu_lint.core.diagnostics import Applicability, CreateFile, Diagnostic, Edit, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine import SYNTAX_CODE, fix_applicable
from npu_lint.lsp.convert import text_edit, to_lsp_diagnostic, whole_text_edit

FIX_ALL_KIND = "source.fixAll.npu-lint"
# the suppression comment form the engine honours (npu_lint.engine), with the span of its code list
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)


@dataclass
class ActionContext:
    uri: str
    version: int | None
    src: SourceFile
    codec: PositionCodec
    diagnostics: list[Diagnostic]
    can_create_files: bool = True  # the client supports the `create` resource operation


def kind_requested(kind: str, only: Sequence[str] | None) -> bool:
    """Whether ``kind`` is wanted: ``only`` entries prefix-match kinds on dot boundaries."""
    if not only:
        return True
    return any(kind == k or kind.startswith(f"{k}.") for k in only)


def _workspace_edit(
    ctx: ActionContext, edits: list[types.TextEdit], creates: Sequence[CreateFile]
) -> types.WorkspaceEdit:
    if not creates:
        return types.WorkspaceEdit(changes={ctx.uri: edits})
    changes: list[types.TextDocumentEdit | types.CreateFile] = []
    for create in creates:
        uri = from_fs_path(str(Path(create.path).resolve())) or create.path
        # neither overwrite nor ignore: a file that exists by the time the edit is applied (made meanwhile, or
        # by an earlier action) makes the client reject the whole edit; with ``ignoreIfExists`` the insert
        # below would prepend a second copy of the content to that file
        changes.append(
            types.CreateFile(
                uri=uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)
            )
        )
        changes.append(
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None),
                edits=[
                    types.TextEdit(
                        range=types.Range(types.Position(0, 0), types.Position(0, 0)), new_text=create.content
                    )
                ],
            )
        )
    if edits:
        changes.append(
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=ctx.uri, version=ctx.version),
                edits=edits,  # type: ignore[arg-type]
            )
        )
    return types.WorkspaceEdit(document_changes=changes)


def _fix_action(
    ctx: ActionContext, diag: Diagnostic, fix: Fix, lsp_diag: types.Diagnostic
) -> types.CodeAction | None:
    if fix.creates and not ctx.can_create_files:
        return None
    if not fix.edits and not fix.creates:
        return None  # nothing to apply (a deferred fix that was not built)
    unsafe = fix.applicability is Applicability.UNSAFE
    title = fix.title
    if unsafe:
        title = f"{title} (unsafe): {fix.reason}" if fix.reason else f"{title} (unsafe)"
    edits = [text_edit(ctx.src, ctx.codec, e) for e in sorted(set(fix.edits))]
    return types.CodeAction(
        title=f"npu-lint ({diag.code}): {title}",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[lsp_diag],
        is_preferred=not unsafe,
        edit=_workspace_edit(ctx, edits, fix.creates),
    )


def _display_action(
    ctx: ActionContext, diag: Diagnostic, fix: Fix, lsp_diag: types.Diagnostic
) -> types.CodeAction:
    """A proposal that cannot be applied: offered disabled, with the reason (clients show it greyed out, the
    reason on hover or when chosen); no edit is attached, so it can never be applied by accident."""
    reason = fix.reason or "this proposal cannot be applied automatically"
    return types.CodeAction(
        title=f"npu-lint ({diag.code}): {fix.title} (not applicable)",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[lsp_diag],
        is_preferred=False,
        disabled=types.CodeActionDisabled(reason=reason),
    )


def _line_end_in_string(src: SourceFile, line: int) -> bool:
    """Whether the end of ``line`` is inside a multi-line string token (a comment there would change it)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src.text).readline):
            if tok.start[0] > line:
                return False
            if tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                if tok.start[0] <= line < tok.end[0]:
                    return True
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return True  # not tokenizable: do not touch it
    return False


def noqa_edit(src: SourceFile, line: int, code: str) -> Edit | None:
    """The edit that adds ``code`` to line ``line``'s ``# noqa:`` comment (creating it), or None when the line
    cannot take a comment (it ends with a backslash continuation, or inside a string that does not end on a
    later line). A line a multi-line string continues takes it where the string ends (where it is read)."""
    if _line_end_in_string(src, line):
        from npu_lint.engine.suppress import string_ends

        end_line = string_ends(src.text).get(line, 0)
        return noqa_edit(src, end_line, code) if end_line > line else None
    text = src.line_text(line)
    start = src.offset(line, 0)
    match = _NOQA.search(text)
    if match is not None:
        codes = match.group("codes")
        if codes is None:
            return None  # a bare suppression comment already silences every code on the line
        if code.upper() in {c.upper() for c in re.split(r"[\s,]+", codes) if c}:
            return None
        end = start + match.end("codes")
        return Edit(end, end, f", {code}")
    stripped = text.rstrip()
    if stripped.endswith("\\"):
        return None
    end = start + len(stripped)
    return Edit(end, start + len(text), f"  # noqa: {code}")


def _disable_action(
    ctx: ActionContext, diag: Diagnostic, lsp_diag: types.Diagnostic
) -> types.CodeAction | None:
    edit = noqa_edit(ctx.src, diag.line, diag.code)
    if edit is None:
        return None
    return types.CodeAction(
        title=f"Disable {diag.code} for this line",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[lsp_diag],
        edit=types.WorkspaceEdit(changes={ctx.uri: [text_edit(ctx.src, ctx.codec, edit)]}),
    )


def diagnostic_actions(
    ctx: ActionContext, diags: Sequence[Diagnostic], show_disable: bool = True
) -> list[types.CodeAction]:
    """Quick fixes for ``diags``: the safe fix (preferred) or the unsafe one, then "Disable ... for this line"."""
    actions: list[types.CodeAction] = []
    disables: list[types.CodeAction] = []
    # a generated file is rewritten by patchgen: a suppression there would be lost, and npu-lint never edits it
    show_disable = show_disable and not ctx.src.kind.generated
    seen_disable: set[tuple[int, str]] = set()
    for diag in diags:
        lsp_diag = to_lsp_diagnostic(ctx.src, ctx.codec, diag)
        fix = diag.fix
        if fix is not None and fix_applicable(fix, unsafe=True):
            action = _fix_action(ctx, diag, fix, lsp_diag)
            if action is not None:
                actions.append(action)
        elif (
            fix is not None
            and fix.applicability is Applicability.DISPLAY
            and not fix.deferred
            and not ctx.src.kind.generated  # there the spec is fixed instead (its own finding says so)
        ):
            actions.append(_display_action(ctx, diag, fix, lsp_diag))
        if show_disable and diag.code != SYNTAX_CODE and (diag.line, diag.code) not in seen_disable:
            seen_disable.add((diag.line, diag.code))
            action = _disable_action(ctx, diag, lsp_diag)
            if action is not None:
                disables.append(action)
    return actions + disables


def fix_all_title(unsafe: bool) -> str:
    return "npu-lint: fix all auto-fixable problems" + (" (including unsafe fixes)" if unsafe else "")


def fix_all_placeholder(ctx: ActionContext, unsafe: bool) -> types.CodeAction | None:
    """The fix-all action without its edit, for clients that resolve it (``codeAction/resolve``) only when
    chosen: building it lints the document several times, too much for every cursor move."""
    if not any(fix_applicable(d.fix, unsafe) for d in ctx.diagnostics):
        return None
    return types.CodeAction(
        title=fix_all_title(unsafe),
        kind=FIX_ALL_KIND,
        data={"uri": ctx.uri, "fixAll": True, "unsafe": unsafe},
    )


def fix_all_action(
    ctx: ActionContext, fix: Callable[[SourceFile, bool], tuple[str, list[CreateFile]]], unsafe: bool
) -> types.CodeAction | None:
    """One ``source.fixAll.npu-lint`` action: every applicable fix to a fixpoint, sent as one edit.

    ``fix(src, unsafe)`` returns the fixed text and the files to create (``npu_lint.engine.fix_tree``: project fixes included)."""
    if not any(fix_applicable(d.fix, unsafe) for d in ctx.diagnostics):
        return None
    new_text, creates = fix(ctx.src, unsafe)
    return fix_all_edit_action(ctx, new_text, creates, unsafe)


def fix_all_edit_action(
    ctx: ActionContext, new_text: str, creates: list[CreateFile], unsafe: bool
) -> types.CodeAction | None:
    """The ``source.fixAll.npu-lint`` action for a fix-all already computed (``new_text``, ``creates``); None
    when it changes nothing."""
    if new_text == ctx.src.text and not creates:
        return None
    if creates and not ctx.can_create_files:
        creates = []
    edits = [whole_text_edit(ctx.src, ctx.codec, new_text)] if new_text != ctx.src.text else []
    if not edits and not creates:
        return None
    return types.CodeAction(
        title=fix_all_title(unsafe), kind=FIX_ALL_KIND, edit=_workspace_edit(ctx, edits, creates)
    )
