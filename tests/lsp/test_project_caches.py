"""The language server's answer follows the tree's files: what NPU323 derives from the whole tree (the import
requirements its handlers declare, a guarded module's import closure) lives with the project index, which the
server builds again when a file it depends on changes, not in a module-level cache keyed by the file listing."""

from __future__ import annotations

import textwrap
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.helpers import codes, open_document, wait_diagnostics, watched_globs

PACKAGE = Path("veomni/ops/kernels/scan")
INIT = """
def build_scan():
    try:
        from .dispatcher import chunk_scan
    except ImportError as e:
        if e.name == "scan_npu":
            raise RuntimeError("install scan_npu") from e
        raise
    return chunk_scan
"""
DISPATCHER = "from .kernel import chunk_scan  # noqa: F401\n"
KERNEL = """import torch
import torch_npu


def chunk_scan(x, decay):
    return torch.ops.npu.npu_chunk_scan(x, decay, chunk_size=64)
"""


def tree(project: Path) -> None:
    files = {
        "pyproject.toml": '[project]\nname = "veomni"\n\n[tool.npu-lint]\nselect = ["NPU323"]\n',
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/__init__.py": "",
        str(PACKAGE / "__init__.py"): INIT,
        str(PACKAGE / "dispatcher.py"): DISPATCHER,
    }
    for rel, text in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(textwrap.dedent(text).lstrip())


def changed(client: LanguageClient, path: Path) -> None:
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=path.as_uri(), type=types.FileChangeType.Changed)]
        )
    )


async def test_closure_follows_an_edited_module(push_client: LanguageClient, project: Path) -> None:
    tree(project)
    uri = open_document(push_client, project / PACKAGE / "kernel.py", KERNEL)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU323"])
    # the dispatcher no longer imports the kernel module: it is outside the guarded import's closure
    dispatcher = project / PACKAGE / "dispatcher.py"
    dispatcher.write_text("def chunk_scan(x, decay):\n    return x\n")
    changed(push_client, dispatcher)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])


async def test_requirements_follow_an_edited_handler(push_client: LanguageClient, project: Path) -> None:
    tree(project)
    uri = open_document(push_client, project / PACKAGE / "kernel.py", KERNEL)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU323"])
    # the handler no longer says the import loads `scan_npu`
    init = project / PACKAGE / "__init__.py"
    init.write_text("def build_scan():\n    from .dispatcher import chunk_scan\n\n    return chunk_scan\n")
    changed(push_client, init)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])


# the guarded import reaches the kernel through a module outside `veomni/ops`, `veomni/kernels`, the model
# packages and the `utils` helpers: the project's version must cover it (issue 19 item 3)
OUTSIDE = Path("veomni/distributed/scan_entry.py")
INIT_OUTSIDE = INIT.replace("from .dispatcher import", "from veomni.distributed.scan_entry import")
ENTRY = "from veomni.ops.kernels.scan.kernel import chunk_scan  # noqa: F401\n"


async def test_closure_follows_a_module_outside_the_shared_directories(
    push_client: LanguageClient, project: Path
) -> None:
    assert "**/veomni/**/*.py" in await watched_globs(push_client)  # a real client reports the edit
    tree(project)
    (project / PACKAGE / "__init__.py").write_text(textwrap.dedent(INIT_OUTSIDE).lstrip())
    for rel in ("veomni/distributed/__init__.py", str(OUTSIDE)):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
    (project / "veomni/distributed/__init__.py").write_text("")
    (project / OUTSIDE).write_text(ENTRY)
    uri = open_document(push_client, project / PACKAGE / "kernel.py", KERNEL)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU323"])
    # the entry module no longer imports the kernel module: the kernel is outside the guarded import's closure
    entry = project / OUTSIDE
    entry.write_text("def chunk_scan(x, decay):\n    return x\n")
    changed(push_client, entry)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])
