"""A document's result depends on other files (its spec, its generated copies, its package's registration):
the server keys results on the text AND the project version, and lints open documents again when such a file
changes (watched-file events, the save of another document)."""

from __future__ import annotations

import shutil
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.helpers import REPO, codes, wait_diagnostics, watched_globs

PACKAGE = Path("veomni/models/transformers/toy_moe")
SPEC = PACKAGE / "toy_moe_npu_patch_gen_config.py"
GENERATED = PACKAGE / "generated" / "patched_modeling_toy_moe_npu.py"
# the hand edit the generated file has and its spec lacks (NPU505 generated-drift)
DRIFT = "    logits = logits.clamp(-30.0, 30.0)  # hand edit: lost at the next regeneration\n"


def tree(project: Path) -> Path:
    """The example tree (its toy_moe generated file drifts from its spec), linted for NPU505 only."""
    shutil.copytree(REPO / "examples" / "veomni", project / "veomni")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "toy"\n\n[tool.npu-lint]\nselect = ["NPU505"]\n'
    )
    return project


def spec_with_the_edit(project: Path) -> str:
    """The spec as it would be with the generated file's hand edit moved into it (no drift)."""
    text = (project / SPEC).read_text()
    anchor = "    logits = self.gate(hidden_states.float())\n"
    assert anchor in text
    return text.replace(anchor, anchor + DRIFT.replace("  # hand edit: lost at the next regeneration", ""))


def open_generated(client: LanguageClient, project: Path) -> str:
    path = project / GENERATED
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=path.read_text()
            )
        )
    )
    return uri


def generated_matches_spec(project: Path) -> None:
    """Make the generated file's body what the spec says (a regeneration), on disk only: the drift is gone."""
    gen = project / GENERATED
    gen_text = gen.read_text()
    assert DRIFT in gen_text
    (project / SPEC).write_text(spec_with_the_edit(project))


async def test_watched_spec_change_relints_open_generated_file(
    push_client: LanguageClient, project: Path
) -> None:
    tree(project)
    uri = open_generated(push_client, project)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU505"])
    generated_matches_spec(project)  # the spec changes on disk; the open generated document does not
    push_client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=(project / SPEC).as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])


async def test_saving_another_document_relints_open_documents(
    push_client: LanguageClient, project: Path
) -> None:
    tree(project)
    uri = open_generated(push_client, project)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU505"])
    # the spec is open too; it is edited and saved in the editor
    spec_uri = (project / SPEC).as_uri()
    old = (project / SPEC).read_text()
    push_client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=spec_uri, language_id="python", version=1, text=old)
        )
    )
    new = spec_with_the_edit(project)
    push_client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=spec_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=new)],
        )
    )
    (project / SPEC).write_text(new)
    push_client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=spec_uri))
    )
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])


async def test_pull_result_follows_the_project_version(pull_client: LanguageClient, project: Path) -> None:
    tree(project)
    uri = open_generated(pull_client, project)
    ask = types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
    first = await pull_client.text_document_diagnostic_async(ask)
    assert first.kind == "full" and codes(first.items) == ["NPU505"]
    generated_matches_spec(project)
    again = await pull_client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(
            text_document=types.TextDocumentIdentifier(uri=uri), previous_result_id=first.result_id
        )
    )
    # same document text, another project version: a new result, not "unchanged"
    assert again.kind == "full" and codes(again.items) == []
    assert again.result_id != first.result_id


async def test_watchers_cover_the_dependency_files(push_client: LanguageClient, project: Path) -> None:
    globs = await watched_globs(push_client)
    assert {"**/*_patch_gen_config.py", "**/generated/*.py", "**/__init__.py"} <= globs
