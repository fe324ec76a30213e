"""Long work does not block the language server (adversary round 3, B9/A40): a fix-all over 20 000 findings, and
the lint of a 20 000-line buffer, run off the event loop; requests about other documents are answered meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.helpers import apply_text_edits, edits_for, open_document, replace_text, wait_diagnostics

N = 20_000
BIG = "import torch\n\n\ndef f(x):\n" + "    x = x.cuda()\n" * N + "    return x\n"
SMALL = "import torch\n\n\ndef g(y):\n    return y.cuda()\n"
GENEROUS = 900.0  # seconds: a loaded CI machine; no other timing is asserted


async def _code_actions(
    client: LanguageClient, uri: str, only: list[str], diags: list[types.Diagnostic] | None = None
) -> list[types.CodeAction]:
    rng = diags[0].range if diags else types.Range(types.Position(0, 0), types.Position(0, 0))
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=rng,
            context=types.CodeActionContext(diagnostics=diags or [], only=only),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def test_other_documents_are_served_while_a_huge_fix_all_runs(
    push_client: LanguageClient, project: Path
) -> None:
    big = open_document(push_client, project / "big.py", BIG)
    await wait_diagnostics(push_client, big, lambda d: len(d) == N, timeout=GENEROUS)
    small = open_document(push_client, project / "small.py", SMALL)
    diags = list(await wait_diagnostics(push_client, small, lambda d: len(d) == 1, timeout=GENEROUS))

    start = time.perf_counter()
    fix_all = asyncio.ensure_future(_code_actions(push_client, big, [types.CodeActionKind.SourceFixAll]))
    await asyncio.sleep(0)  # the fix-all request is sent first
    # while it runs: a quick fix for another document, and that document's diagnostics after an edit
    quick = await asyncio.wait_for(
        _code_actions(push_client, small, [types.CodeActionKind.QuickFix], diags), GENEROUS
    )
    answered = time.perf_counter() - start
    assert not fix_all.done(), "the quick fix waited for the fix-all (the server's loop was blocked)"
    assert any(a.is_preferred for a in quick)
    replace_text(push_client, small, SMALL.replace("y.cuda()", "y"), 2)
    await wait_diagnostics(push_client, small, lambda d: len(d) == 0, timeout=GENEROUS)
    assert not fix_all.done(), "the edited document's diagnostics waited for the fix-all"

    actions = await asyncio.wait_for(fix_all, GENEROUS)
    took = time.perf_counter() - start
    assert [a.kind for a in actions] == ["source.fixAll.npu-lint"]
    fixed = apply_text_edits(BIG, edits_for(actions[0].edit, big), "utf-16")
    assert ".cuda()" not in fixed and fixed.count("\n") == BIG.count("\n")
    print(
        f"\nfix-all of {N} findings: {took:.1f} s; another document's quick fix answered after {answered:.2f} s"
    )


async def test_a_cancelled_fix_all_leaves_the_server_serving(
    push_client: LanguageClient, project: Path
) -> None:
    big = open_document(push_client, project / "big.py", BIG[: len(BIG) // 4])
    await wait_diagnostics(push_client, big, lambda d: len(d) > 0, timeout=GENEROUS)
    fix_all = asyncio.ensure_future(_code_actions(push_client, big, [types.CodeActionKind.SourceFixAll]))
    await asyncio.sleep(0.5)
    fix_all.cancel()  # pytest-lsp sends $/cancelRequest: the server kills the child computing it
    small = open_document(push_client, project / "small.py", SMALL)
    await wait_diagnostics(push_client, small, lambda d: len(d) == 1, timeout=GENEROUS)
    again = await asyncio.wait_for(
        _code_actions(push_client, small, [types.CodeActionKind.SourceFixAll]), GENEROUS
    )
    assert [a.kind for a in again] == ["source.fixAll.npu-lint"]


async def test_other_documents_are_served_while_a_huge_buffer_is_linted(
    push_client: LanguageClient, project: Path
) -> None:
    big = open_document(push_client, project / "big.py", BIG)
    small = open_document(push_client, project / "small.py", SMALL)
    await wait_diagnostics(push_client, small, lambda d: len(d) == 1, timeout=GENEROUS)
    assert push_client.diagnostics.get(big) is None, "the small document waited for the big one's lint"
    await wait_diagnostics(push_client, big, lambda d: len(d) == N, timeout=GENEROUS)


async def test_pull_diagnostics_of_a_huge_buffer_do_not_block(
    pull_client: LanguageClient, project: Path
) -> None:
    big = open_document(pull_client, project / "big.py", BIG)
    small = open_document(pull_client, project / "small.py", SMALL)

    def report(uri: str) -> asyncio.Future[types.DocumentDiagnosticReport]:
        return asyncio.ensure_future(
            pull_client.text_document_diagnostic_async(
                types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
        )

    big_report = report(big)
    await asyncio.sleep(0)
    small_report = await asyncio.wait_for(report(small), GENEROUS)
    assert not big_report.done(), "the small document's diagnostics waited for the big one's lint"
    assert len(small_report.items) == 1
    assert len((await asyncio.wait_for(big_report, GENEROUS)).items) == N


async def test_a_quick_fix_on_a_long_changed_document_does_not_block_the_server(
    push_client: LanguageClient, project: Path
) -> None:
    """The quick fixes of a long document whose text changed since its last lint: that lint runs in a forked
    child like the published one, and another document's quick fix is answered meanwhile."""
    big = open_document(push_client, project / "big.py", BIG)
    await wait_diagnostics(push_client, big, lambda d: len(d) == N, timeout=GENEROUS)
    small = open_document(push_client, project / "small.py", SMALL)
    diags = list(await wait_diagnostics(push_client, small, lambda d: len(d) == 1, timeout=GENEROUS))
    replace_text(push_client, big, BIG.replace("def f(x):", "def f(x, y=None):"), 2)
    big_diag = types.Diagnostic(
        range=types.Range(types.Position(4, 8), types.Position(4, 16)),
        message="",
        code="NPU101",
        source="npu-lint",
    )
    start = time.perf_counter()
    on_big = asyncio.ensure_future(
        _code_actions(push_client, big, [types.CodeActionKind.QuickFix], [big_diag])
    )
    await asyncio.sleep(0)  # the big document's request is sent first
    quick = await asyncio.wait_for(
        _code_actions(push_client, small, [types.CodeActionKind.QuickFix], diags), GENEROUS
    )
    answered = time.perf_counter() - start
    assert not on_big.done(), "the small document's quick fix waited for the long document's lint"
    assert any(a.is_preferred for a in quick)
    actions = await asyncio.wait_for(on_big, GENEROUS)
    assert any(a.is_preferred for a in actions)  # the changed text's fix, at the line asked about
    print(f"\nanother document's quick fix answered after {answered:.2f} s")
