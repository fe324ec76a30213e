"""End-to-end tests of ``npu-lint server`` over stdio (pytest-lsp), with NPU101 (`x.cuda()`) as the rule."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCRequestMessage
from pytest_lsp import LanguageClient

from tests.lsp.helpers import (
    apply_text_edits,
    codes,
    edits_for,
    open_document,
    replace_text,
    units,
    wait_diagnostics,
)

MODEL = "veomni/models/transformers/toy/modeling_toy.py"

# a non-ASCII line: CJK (1 UTF-16 unit, 3 UTF-8 bytes) and an emoji (2 UTF-16 units, 4 UTF-8 bytes)
# before the finding
NON_ASCII = """\
import torch


def rotate(hidden_states: torch.Tensor, inv_freq):
    label, moved = "旋转位置编码 😀", inv_freq.cuda()
    return hidden_states * moved
"""
FIXED_NON_ASCII = NON_ASCII.replace("inv_freq.cuda()", "inv_freq.to(hidden_states.device)")

TWO_FINDINGS = """\
import torch


def build(model, hidden_states: torch.Tensor, rank: int):
    model = model.cuda()
    buf = torch.zeros(4).cuda(non_blocking=True)
    pinned = torch.ones(2).cuda(rank)
    return model, buf, pinned
"""


def expected_range(text: str, line_no: int, needle: str, end_needle: str, encoding: str) -> types.Range:
    line = text.splitlines()[line_no]
    start = line.index(needle)
    end = line.index(end_needle, start) + len(end_needle)
    return types.Range(
        start=types.Position(line_no, units(line[:start], encoding)),
        end=types.Position(line_no, units(line[:end], encoding)),
    )


# -- diagnostics ---------------------------------------------------------------------------------------


async def test_push_diagnostics_utf16(push_client: LanguageClient, project: Path) -> None:
    result = push_client.init_result  # type: ignore[attr-defined]
    assert result.capabilities.diagnostic_provider is None  # push-only client: no pull provider
    assert result.capabilities.position_encoding in (None, types.PositionEncodingKind.Utf16)
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    diags = await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    diag = diags[0]
    assert diag.code == "NPU101"
    assert diag.source == "npu-lint"
    assert diag.severity == types.DiagnosticSeverity.Warning
    assert diag.code_description is not None and diag.code_description.href.endswith("/NPU101.md")
    assert "hidden_states.device" in diag.message
    assert diag.range == expected_range(NON_ASCII, 4, "cuda", "cuda()", "utf-16")
    # the emoji counts 2 UTF-16 units: the column differs from the code point column
    assert diag.range.start.character == NON_ASCII.splitlines()[4].index("cuda") + 1


async def test_pull_diagnostics_utf8(pull_client: LanguageClient, project: Path) -> None:
    result = pull_client.init_result  # type: ignore[attr-defined]
    assert result.capabilities.diagnostic_provider is not None
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
    uri = open_document(pull_client, project / MODEL, NON_ASCII)
    report = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert report.kind == "full"
    assert codes(report.items) == ["NPU101"]
    assert report.items[0].range == expected_range(NON_ASCII, 4, "cuda", "cuda()", "utf-8")
    # same text again: the client's previous result id gives an "unchanged" report
    again = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(
            text_document=types.TextDocumentIdentifier(uri=uri), previous_result_id=report.result_id
        )
    )
    assert again.kind == "unchanged"
    # never both: a pull client gets no pushed diagnostics
    await asyncio.sleep(0.3)
    assert uri not in pull_client.diagnostics


async def test_incremental_change_on_non_ascii_line(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    line = NON_ASCII.splitlines()[4]
    col = units(line[: line.index("inv_freq.cuda")], "utf-16")
    # insert "hidden_states * " before inv_freq, in UTF-16 units, after the emoji
    push_client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(4, col), types.Position(4, col)), text="hidden_states * "
                )
            ],
        )
    )
    new_text = NON_ASCII.replace("inv_freq.cuda()", "hidden_states * inv_freq.cuda()")
    expected = expected_range(new_text, 4, "cuda", "cuda()", "utf-16")
    diags = await wait_diagnostics(push_client, uri, lambda d: len(d) == 1 and d[0].range == expected)
    assert diags[0].code == "NPU101"


# -- code actions --------------------------------------------------------------------------------------


async def _actions(
    client: LanguageClient, uri: str, diags: list[types.Diagnostic], only: list[str] | None = None
) -> list[types.CodeAction]:
    rng = diags[0].range if diags else types.Range(types.Position(0, 0), types.Position(0, 0))
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=rng,
            context=types.CodeActionContext(diagnostics=diags, only=only),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def test_quick_fix_applied_and_relinted(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    diags = list(await wait_diagnostics(push_client, uri, lambda d: len(d) == 1))
    actions = await _actions(push_client, uri, diags)
    titles = [a.title for a in actions]
    fixes = [a for a in actions if a.kind == types.CodeActionKind.QuickFix and a.is_preferred]
    assert len(fixes) == 1, titles
    assert "hidden_states.device" in fixes[0].title
    assert "Disable NPU101 for this line" in titles
    new_text = apply_text_edits(NON_ASCII, edits_for(fixes[0].edit, uri), "utf-16")
    assert new_text == FIXED_NON_ASCII
    replace_text(push_client, uri, new_text, 2)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)


async def test_quick_fix_utf8_client(pull_client: LanguageClient, project: Path) -> None:
    uri = open_document(pull_client, project / MODEL, NON_ASCII)
    report = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    actions = await _actions(pull_client, uri, list(report.items))
    fix = next(a for a in actions if a.is_preferred)
    assert apply_text_edits(NON_ASCII, edits_for(fix.edit, uri), "utf-8") == FIXED_NON_ASCII


async def test_disable_for_line_creates_and_extends_noqa(push_client: LanguageClient, project: Path) -> None:
    text = NON_ASCII.replace("inv_freq.cuda()", "inv_freq.cuda()  # noqa: E501")
    uri = open_document(push_client, project / MODEL, text)
    diags = list(await wait_diagnostics(push_client, uri, lambda d: len(d) == 1))
    disable = next(
        a for a in await _actions(push_client, uri, diags) if a.title == "Disable NPU101 for this line"
    )
    new_text = apply_text_edits(text, edits_for(disable.edit, uri), "utf-16")
    assert new_text.splitlines()[4].endswith("inv_freq.cuda()  # noqa: E501, NPU101")
    replace_text(push_client, uri, new_text, 2)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)

    # no comment yet: one is created
    replace_text(push_client, uri, NON_ASCII, 3)
    diags = list(await wait_diagnostics(push_client, uri, lambda d: len(d) == 1))
    disable = next(
        a for a in await _actions(push_client, uri, diags) if a.title == "Disable NPU101 for this line"
    )
    new_text = apply_text_edits(NON_ASCII, edits_for(disable.edit, uri), "utf-16")
    assert new_text.splitlines()[4] == NON_ASCII.splitlines()[4] + "  # noqa: NPU101"
    replace_text(push_client, uri, new_text, 4)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)


async def test_fix_all_and_unsafe_fix(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, TWO_FINDINGS)
    diags = list(await wait_diagnostics(push_client, uri, lambda d: len(d) == 3))
    # the explicit device index makes that fix unsafe: offered alone, "(unsafe)" in the title, not preferred
    pinned = next(d for d in diags if d.range.start.line == 6)
    unsafe = [a for a in await _actions(push_client, uri, [pinned]) if "(unsafe)" in a.title]
    assert len(unsafe) == 1 and not unsafe[0].is_preferred

    actions = await _actions(push_client, uri, [], only=[types.CodeActionKind.SourceFixAll])
    assert [a.kind for a in actions] == ["source.fixAll.npu-lint"]
    edits = edits_for(actions[0].edit, uri)
    assert len(edits) == 1
    fixed = apply_text_edits(TWO_FINDINGS, edits, "utf-16")
    assert "model = model.to(hidden_states.device)" in fixed
    assert "torch.zeros(4).to(hidden_states.device, non_blocking=True)" in fixed
    assert "torch.ones(2).cuda(rank)" in fixed  # unsafe: not part of fix-all by default
    replace_text(push_client, uri, fixed, 2)
    remaining = await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    assert remaining[0].range.start.line == 6

    # quick fixes only: no fix-all action
    kinds = {
        a.kind
        for a in await _actions(push_client, uri, list(remaining), only=[types.CodeActionKind.QuickFix])
    }
    assert kinds == {types.CodeActionKind.QuickFix}


# -- settings and configuration ------------------------------------------------------------------------


async def test_settings_change_relints(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    push_client.set_configuration({"ignore": ["NPU101"], "lint": {"debounce": 0}}, section="npu-lint")
    push_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)
    push_client.set_configuration({"lint": {"debounce": 0}}, section="npu-lint")
    push_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)


async def test_configuration_file_change_relints(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    config = project / "pyproject.toml"
    config.write_text('[tool.npu-lint]\nignore = ["NPU101"]\n', encoding="utf-8")
    push_client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)


async def test_run_on_save(push_client: LanguageClient, project: Path) -> None:
    push_client.set_configuration({"lint": {"run": "onSave", "debounce": 0}}, section="npu-lint")
    push_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    uri = open_document(push_client, project / MODEL, FIXED_NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)
    replace_text(push_client, uri, NON_ASCII, 2)
    await asyncio.sleep(0.4)
    assert len(push_client.diagnostics[uri]) == 0  # not linted while typing
    push_client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)


async def raw_request(client: LanguageClient, method: str, params: Any) -> Any:
    """Send a request whose params are not checked against the protocol's types (a misbehaving client)."""
    proto = client.protocol
    msg_id = str(uuid.uuid4())
    future: Future[Any] = Future()
    proto._request_futures[msg_id] = future
    proto._result_types[msg_id] = None
    proto._send_data(JsonRPCRequestMessage(id=msg_id, method=method, params=params, jsonrpc="2.0"))
    return await asyncio.wait_for(asyncio.wrap_future(future), 10)


# -- bad input -----------------------------------------------------------------------------------------


async def test_syntax_error_mid_edit(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, FIXED_NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)
    broken = FIXED_NON_ASCII.replace("inv_freq.to(hidden_states.device)", "inv_freq.cuda(")
    replace_text(push_client, uri, broken, 2)
    diags = await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU001"])
    assert diags[0].severity == types.DiagnosticSeverity.Error
    assert await _actions(push_client, uri, list(diags)) == []  # no fix to offer, and no crash
    replace_text(push_client, uri, NON_ASCII, 3)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU101"])


async def test_malformed_requests_get_errors(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    with pytest.raises(JsonRpcException):
        await raw_request(push_client, types.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": 3})
    with pytest.raises(JsonRpcException):
        await raw_request(push_client, "npu-lint/no-such-method", {})
    # a code action on a document the server never saw, at an impossible position
    ghost = await push_client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=(project / "ghost.py").as_uri()),
            range=types.Range(types.Position(99, 99), types.Position(120, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert not ghost
    # still serving
    replace_text(push_client, uri, FIXED_NON_ASCII, 2)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)


@pytest.mark.parametrize(
    "push_client",
    [{"select": ["NPU001"], "lint": {"debounce": 0}, "showDisableAction": False}],
    indirect=True,
)
async def test_initialization_options_settings(push_client: LanguageClient, project: Path) -> None:
    uri = open_document(push_client, project / MODEL, NON_ASCII.replace("return", "return (", 1))
    diags = await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)
    assert diags[0].code == "NPU001"  # NPU101 is not selected
    replace_text(push_client, uri, NON_ASCII, 2)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 0)


async def test_crlf_document_fix_all(push_client: LanguageClient, project: Path) -> None:
    text = TWO_FINDINGS.replace("\n", "\r\n")
    uri = open_document(push_client, project / MODEL, text)
    diags = await wait_diagnostics(push_client, uri, lambda d: len(d) == 3)
    assert diags[0].range == expected_range(TWO_FINDINGS, 4, "cuda", "cuda()", "utf-16")
    actions = await _actions(push_client, uri, [], only=[types.CodeActionKind.SourceFixAll])
    fixed = apply_text_edits(text, edits_for(actions[0].edit, uri), "utf-16")
    assert "\n" not in fixed.replace("\r\n", "")  # line endings kept
    replace_text(push_client, uri, fixed, 2)
    await wait_diagnostics(push_client, uri, lambda d: len(d) == 1)


async def test_pull_client_settings_change(pull_client: LanguageClient, project: Path) -> None:
    uri = open_document(pull_client, project / MODEL, NON_ASCII)
    ident = types.TextDocumentIdentifier(uri=uri)
    first = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=ident)
    )
    assert codes(first.items) == ["NPU101"]
    pull_client.set_configuration({"ignore": ["NPU101"]}, section="npu-lint")
    pull_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:  # the server re-reads workspace/configuration asynchronously
        report = await pull_client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=ident, previous_result_id=first.result_id)
        )
        if report.kind == "full" and not report.items:
            break
        assert loop.time() < deadline, report
        await asyncio.sleep(0.05)


async def test_fix_all_resolved_lazily(pull_client: LanguageClient, project: Path) -> None:
    """A general code action request lists fix-all without its edit; codeAction/resolve builds it."""
    uri = open_document(pull_client, project / MODEL, TWO_FINDINGS)
    ident = types.TextDocumentIdentifier(uri=uri)
    report = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=ident)
    )
    actions = await _actions(pull_client, uri, list(report.items[:1]))
    fix_all = [a for a in actions if a.kind == "source.fixAll.npu-lint"]
    assert len(fix_all) == 1 and fix_all[0].edit is None
    resolved = await pull_client.code_action_resolve_async(fix_all[0])
    fixed = apply_text_edits(TWO_FINDINGS, edits_for(resolved.edit, uri), "utf-8")
    assert "model = model.to(hidden_states.device)" in fixed and "torch.ones(2).cuda(rank)" in fixed
    replace_text(pull_client, uri, fixed, 2)
    report = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=ident)
    )
    assert [d.range.start.line for d in report.items] == [6]


async def test_fix_all_applies_project_fixes(push_client: LanguageClient, project: Path) -> None:
    """Editor fix-all goes through the same orchestration as `--fix` (engine.fix_tree): on a GPU spec whose
    package has no NPU sibling, it creates the sibling (NPU501, a project-rule fix) when unsafe fixes are
    enabled (creating a file is never a safe fix)."""
    import shutil

    shutil.copytree(Path(__file__).parents[2] / "examples" / "veomni", project / "veomni")
    spec = project / "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    text = spec.read_text(encoding="utf-8")
    uri = open_document(push_client, spec, text)
    await wait_diagnostics(push_client, uri, lambda d: "NPU501" in codes(d))
    safe = await _actions(push_client, uri, [], only=[types.CodeActionKind.SourceFixAll])
    safe_changes = (safe[0].edit.document_changes or []) if safe and safe[0].edit else []
    assert not any(isinstance(c, types.CreateFile) for c in safe_changes)
    push_client.set_configuration({"unsafeFixes": True, "lint": {"debounce": 0}}, section="npu-lint")
    push_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.3)
    actions = await _actions(push_client, uri, [], only=[types.CodeActionKind.SourceFixAll])
    assert [a.kind for a in actions] == ["source.fixAll.npu-lint"]
    changes = actions[0].edit.document_changes or []
    created = [c.uri for c in changes if isinstance(c, types.CreateFile)]
    assert any(u.endswith("toy_npu_patch_gen_config.py") for u in created), changes
