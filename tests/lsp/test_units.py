"""In-process tests of the server's pure parts: settings, positions, noqa edits, actions with file creation."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.workspace import PositionCodec

from npu_lint.core.diagnostics import SEVERITY_ERROR, Applicability, CreateFile, Diagnostic, Edit, Fix, Origin
from npu_lint.core.source import SourceFile
from npu_lint.engine import apply_edits
from npu_lint.lsp.actions import ActionContext, diagnostic_actions, kind_requested, noqa_edit
from npu_lint.lsp.convert import (
    client_position,
    offset_of_client_position,
    to_lsp_diagnostic,
    whole_text_edit,
)
from npu_lint.lsp.server import LspTextDocument
from npu_lint.lsp.settings import RUN_ON_SAVE, ServerSettings, merge_settings, settings_from_init_options
from tests.lsp.helpers import apply_text_edits

UTF16 = PositionCodec(types.PositionEncodingKind.Utf16)
UTF8 = PositionCodec(types.PositionEncodingKind.Utf8)


def _diag(src: SourceFile, line: int, col: int, end_col: int, **kw: object) -> Diagnostic:
    return Diagnostic(
        code=str(kw.pop("code", "NPU101")),
        name="cuda-call",
        message="msg",
        path=src.path,
        line=line,
        col=col,
        end_line=line,
        end_col=end_col,
        source_line=src.line_text(line),
        **kw,  # type: ignore[arg-type]
    )


# -- settings ------------------------------------------------------------------------------------------


def test_settings_nested_and_dotted() -> None:
    s = merge_settings(ServerSettings(), {"select": ["NPU1"], "lint": {"run": "onSave"}, "unsafeFixes": True})
    assert s.select == ("NPU1",) and s.run == RUN_ON_SAVE and s.unsafe_fixes
    s = merge_settings(ServerSettings(), {"lint.debounce": 0, "ignore": "NPU101, NPU001", "fixAll": False})
    assert s.debounce_ms == 0 and s.ignore == ("NPU101", "NPU001") and not s.fix_all
    assert not s.problems


def test_settings_bad_values_reported_and_defaults_kept() -> None:
    s = merge_settings(ServerSettings(), {"lint": {"run": "sometimes"}, "fixAll": "yes", "select": 3})
    assert s == ServerSettings()
    assert len(s.problems) == 3


def test_init_options_forms() -> None:
    assert settings_from_init_options({"settings": {"ignore": ["NPU101"]}}).ignore == ("NPU101",)
    assert settings_from_init_options({"settings": {"npu-lint": {"ignore": ["NPU101"]}}}).ignore == (
        "NPU101",
    )
    assert settings_from_init_options(None) == ServerSettings()


def test_kind_requested_prefix_on_dots() -> None:
    assert kind_requested("source.fixAll.npu-lint", ["source.fixAll"])
    assert kind_requested("source.fixAll.npu-lint", ["source"])
    assert not kind_requested("source.fixAll.npu-lint", ["source.fix"])
    assert not kind_requested("quickfix", ["source.fixAll"])
    assert kind_requested("quickfix", None)


# -- positions -----------------------------------------------------------------------------------------


def test_positions_non_ascii_both_encodings() -> None:
    text = 'x = "é😀"; y.cuda()\n'
    src = SourceFile.from_text("m.py", text)
    col = text.index("cuda")
    assert client_position(src, UTF16, 1, col) == types.Position(0, col + 1)  # emoji: 2 UTF-16 units
    assert client_position(src, UTF8, 1, col) == types.Position(0, col + 1 + 3)  # é 2 bytes, emoji 4
    for codec in (UTF16, UTF8):
        pos = client_position(src, codec, 1, col)
        assert offset_of_client_position(src, codec, pos) == col


def test_lines_split_like_lsp() -> None:
    """A form feed or U+2028 is no line break for LSP (nor for Python): incremental edits stay in place."""
    text = "a = 1\x0c\nb = '\u2028'\nc.cuda()\n"
    doc = LspTextDocument("file:///m.py", text, version=1)
    assert len(doc.lines) == 3
    doc.apply_change(
        types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(2, 0), types.Position(2, 1)), text="d"
        )
    )
    assert doc.source == "a = 1\x0c\nb = '\u2028'\nd.cuda()\n"
    src = SourceFile.from_text("m.py", text)
    assert client_position(src, UTF16, 3, 2) == types.Position(2, 2)


def test_whole_text_edit_crlf() -> None:
    old = "import torch\r\n\r\nx = y.cuda()\r\nz = 1\r\n"
    new = "import torch\r\nfrom veomni.utils.device import get_device_type\r\n\r\nx = y.to(get_device_type())\r\nz = 1\r\n"
    src = SourceFile.from_text("m.py", old)
    edit = whole_text_edit(src, UTF16, new)
    assert apply_text_edits(old, [edit], "utf-16") == new
    assert edit.range.start.line == 1 and edit.range.start.character == 0


def test_whole_text_edit_keeps_mixed_line_endings() -> None:
    """A CRLF-first buffer with some LF lines: the fixed middle keeps each line's own ending (the server's
    fix-all turned the LF line into CRLF: an independent adversary, round 2)."""
    old = "import torch\r\ndef f():\r\n    return torch.zeros(3).cuda()\r\ndef g():\n    return torch.ones(2).cuda()\r\n"
    new = old.replace(".cuda()", ".to(d)")
    src = SourceFile.from_text("m.py", old)
    assert apply_text_edits(old, [whole_text_edit(src, UTF16, new)], "utf-16") == new


# -- diagnostics ---------------------------------------------------------------------------------------


def test_origin_and_severity(tmp_path: Path) -> None:
    spec = tmp_path / "toy_gpu_patch_gen_config.py"
    src = SourceFile.from_text(str(tmp_path / "generated" / "patched.py"), "x.cuda()\n")
    diag = _diag(src, 1, 2, 8, origin=Origin(str(spec), 12, "from this patch"), severity=SEVERITY_ERROR)
    lsp = to_lsp_diagnostic(src, UTF16, diag)
    assert lsp.severity == types.DiagnosticSeverity.Error
    assert lsp.related_information is not None
    info = lsp.related_information[0]
    assert info.location.uri == spec.as_uri() and info.location.range.start.line == 11
    assert info.message == "from this patch"
    assert lsp.code_description is not None and lsp.code_description.href.endswith("NPU101.md")


# -- noqa ----------------------------------------------------------------------------------------------


def test_noqa_edit_forms() -> None:
    text = "a = x.cuda()\nb = x.cuda()  # noqa: E501\nc = x.cuda()  # noqa\nd = x.cuda()  # noqa: NPU101\n"
    src = SourceFile.from_text("m.py", text)
    e1 = noqa_edit(src, 1, "NPU101")
    e2 = noqa_edit(src, 2, "NPU101")
    assert noqa_edit(src, 3, "NPU101") is None  # a bare noqa already covers it
    assert noqa_edit(src, 4, "NPU101") is None
    assert e1 is not None and e2 is not None
    out = apply_edits(text, [e1, e2]).splitlines()
    assert out[0] == "a = x.cuda()  # noqa: NPU101"
    assert out[1] == "b = x.cuda()  # noqa: E501, NPU101"


def test_noqa_edit_refuses_where_a_comment_cannot_go() -> None:
    text = 'a = f(x.cuda(), """doc\nmore""")\nb = x.cuda() + \\\n    1\n'
    src = SourceFile.from_text("m.py", text)
    assert noqa_edit(src, 3, "NPU101") is None  # backslash continuation
    # the line ends inside a string: the noqa goes where the string ends, where it is read (as ruff)
    edit = noqa_edit(src, 1, "NPU101")
    assert edit is not None
    assert apply_edits(text, [edit]).splitlines()[1] == 'more""")  # noqa: NPU101'
    assert noqa_edit(SourceFile.from_text("m.py", 'a = """x.cuda()\n'), 1, "NPU101") is None  # never ends


# -- actions -------------------------------------------------------------------------------------------


def test_fix_creating_a_file_is_a_workspace_edit(tmp_path: Path) -> None:
    text = "x = y.cuda()\n"
    src = SourceFile.from_text(str(tmp_path / "m.py"), text)
    new_file = tmp_path / "toy_npu_patch_gen_config.py"
    fix = Fix(
        "Create the NPU spec", (Edit(4, 12, "y"),), Applicability.SAFE, (CreateFile(str(new_file), "spec\n"),)
    )
    diag = _diag(src, 1, 6, 12, fix=fix)
    uri = Path(src.path).as_uri()
    ctx = ActionContext(uri, 3, src, UTF16, [diag], can_create_files=True)
    actions = diagnostic_actions(ctx, [diag], show_disable=False)
    assert len(actions) == 1 and not actions[0].is_preferred  # creating a file is never safe: (unsafe)
    assert "(unsafe)" in actions[0].title
    changes = actions[0].edit.document_changes
    assert isinstance(changes[0], types.CreateFile) and changes[0].uri == new_file.as_uri()
    assert isinstance(changes[1], types.TextDocumentEdit) and changes[1].edits[0].new_text == "spec\n"
    assert isinstance(changes[2], types.TextDocumentEdit) and changes[2].text_document.version == 3
    # a client that cannot create files is not offered the fix
    ctx.can_create_files = False
    assert diagnostic_actions(ctx, [diag], show_disable=False) == []


def test_unsafe_and_display_fixes() -> None:
    text = "x = y.cuda(1)\nz = w.cuda()\n"
    src = SourceFile.from_text("m.py", text)
    unsafe = _diag(
        src, 1, 6, 13, fix=Fix("Use .to()", (Edit(5, 13, ".to(d)"),), Applicability.UNSAFE, reason="drops 1")
    )
    display = _diag(
        src,
        2,
        6,
        12,
        fix=Fix("Fix the spec", (Edit(5, 12, ".to(d)"),), Applicability.DISPLAY, reason="not exact"),
    )
    ctx = ActionContext("file:///m.py", 1, src, UTF16, [unsafe, display])
    actions = diagnostic_actions(ctx, [unsafe, display])
    assert [a.title for a in actions] == [
        "npu-lint (NPU101): Use .to() (unsafe): drops 1",
        "npu-lint (NPU101): Fix the spec (not applicable)",
        "Disable NPU101 for this line",
        "Disable NPU101 for this line",
    ]
    # a display-only proposal is offered disabled, with its reason, and carries no edit
    shown = actions[1]
    assert shown.disabled is not None and shown.disabled.reason == "not exact" and shown.edit is None


def test_deferred_fixes_are_built_for_code_actions(monkeypatch) -> None:  # noqa: ANN001
    """A plain lint may defer expensive fixes (no edits); code actions lint again in fix mode, once."""
    from npu_lint.core.config import Settings
    from npu_lint.lsp import server as srv

    src = SourceFile.from_text("m.py", "x = y.cuda()\n")
    deferred = _diag(src, 1, 6, 12, fix=Fix("Use .to()", (), Applicability.SAFE, deferred=True))
    built = deferred.replace(fix=Fix("Use .to()", (Edit(5, 12, ".to(d)"),)))
    calls: list[bool] = []

    def fake_lint(src_, codes, settings, project=None, fix_mode=False):  # noqa: ANN001, ANN202
        calls.append(fix_mode)
        return [built] if fix_mode else [deferred]

    monkeypatch.setattr(srv, "lint_source", fake_lint)
    ls = srv.NpuLintServer()
    result = srv.LintResult(src.text, 0, 1, src, [deferred], [], [], Settings(), None, {})
    assert ls.diagnostics_with_fixes(result) == [built]
    assert ls.diagnostics_with_fixes(result) == [built]
    assert calls == [True]
    ctx = ActionContext("file:///m.py", 1, src, UTF16, [deferred])
    assert diagnostic_actions(ctx, [deferred], show_disable=False) == []  # no edits: nothing offered
    assert len(diagnostic_actions(ctx, [built], show_disable=False)) == 1


def test_no_edits_offered_in_generated_files(tmp_path: Path) -> None:
    src = SourceFile.from_text(str(tmp_path / "generated" / "patched_modeling_toy.py"), "x = y.cuda()\n")
    fix = Fix("Fix the spec", (Edit(5, 12, ".to(d)"),), Applicability.DISPLAY, reason="generated file")
    diag = _diag(src, 1, 6, 12, fix=fix)
    ctx = ActionContext(Path(src.path).as_uri(), 1, src, UTF16, [diag])
    assert diagnostic_actions(ctx, [diag]) == []


def test_debounce_adapts_to_the_documents_lint_time_unless_configured() -> None:
    from dataclasses import replace

    import npu_lint.lsp.server as srv
    from npu_lint.lsp.settings import ADAPTIVE_MIN_MS, DEFAULT_DEBOUNCE_MS

    ls = srv.NpuLintServer()
    assert ls.settings.debounce_ms is None  # adaptive by default
    assert ls.debounce("file:///a.py") == DEFAULT_DEBOUNCE_MS / 1000  # not linted yet
    ls.measured("file:///a.py", 5.0)
    assert ls.debounce("file:///a.py") == ADAPTIVE_MIN_MS / 1000  # a cheap document: answered almost at once
    ls.measured("file:///b.py", 120.0)
    assert ls.debounce("file:///b.py") == 0.12
    ls.measured("file:///b.py", 20.0)  # a moving average: one fast lint does not set the pace
    assert ls.debounce("file:///b.py") == (0.7 * 120 + 0.3 * 20) / 1000
    ls.measured("file:///c.py", 5000.0)
    assert ls.debounce("file:///c.py") == DEFAULT_DEBOUNCE_MS / 1000  # capped
    ls.settings = replace(ls.settings, debounce_ms=0)
    assert ls.debounce("file:///c.py") == 0.0  # a configured value is used as given
    for i in range(300):
        ls.measured(f"file:///{i}.py", 1.0)
    assert len(ls._lint_ms) <= 256
