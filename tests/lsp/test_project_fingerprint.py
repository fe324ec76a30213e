"""An open document's findings can depend on files outside its model package that per-file rules read: a sibling
kernel backend under `veomni/ops/kernels` (NPU316), the eager function beside an Ascend adapter (NPU314). The
server's project version stats them, so a watched-file event for such a file re-lints the open document."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.lsp.helpers import REPO, codes, glob_watches, open_document, wait_diagnostics, watched_globs
from tests.rules.snippets import WAN_ADAPTER, WAN_EAGER


def _select(project: Path, code: str) -> None:
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "toy"\n\n[tool.npu-lint]\nselect = ["{code}"]\n'
    )


def _changed_on_disk(client: LanguageClient, path: Path, text: str) -> None:
    """``path`` gets ``text`` (a later mtime even when the size stays) and the editor reports it changed."""
    path.write_text(text)
    later = time.time_ns() + 10**9
    os.utime(path, ns=(later, later))
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=path.as_uri(), type=types.FileChangeType.Changed)]
        )
    )


_EAGER_LOSS = "def eager_toy_loss({params}, ignore_index=-100):\n    return logits\n"
_NPU_LOSS = "def npu_toy_loss(labels, logits, ignore_index=-100):\n    return logits\n"


async def test_changed_kernel_backend_relints_an_open_sibling(
    push_client: LanguageClient, project: Path
) -> None:
    _select(project, "NPU316")
    op = project / "veomni" / "ops" / "kernels" / "toy_loss"
    op.mkdir(parents=True)
    for d in (project / "veomni", project / "veomni" / "ops", project / "veomni" / "ops" / "kernels", op):
        (d / "__init__.py").write_text("")
    eager = op / "eager.py"
    eager.write_text(_EAGER_LOSS.format(params="logits, labels"))
    uri = open_document(push_client, op / "npu.py", _NPU_LOSS)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU316"])
    # the eager backend takes the NPU order: the open document's text is the same, its finding is stale
    _changed_on_disk(push_client, eager, _EAGER_LOSS.format(params="labels, logits"))
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])
    _changed_on_disk(push_client, eager, _EAGER_LOSS.format(params="logits, labels"))
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU316"])


async def test_changed_eager_counterpart_outside_the_packages_relints_the_adapter(
    push_client: LanguageClient, project: Path
) -> None:
    _select(project, "NPU314")
    (project / "veomni" / "ops").mkdir(parents=True)  # a VeOmni tree
    wan = project / "veomni" / "models" / "diffusers" / "wan"  # no spec, no generated/: no model package
    wan.mkdir(parents=True)
    eager = wan / "modeling_wan.py"
    eager.write_text(WAN_EAGER.format(merge=".flatten(2)"))
    uri = open_document(push_client, wan / "npu_patch.py", WAN_ADAPTER)
    found = await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU314"])
    assert "`rope_apply` in modeling_wan.py" in found[0].message
    # the eager function keeps the per-head layout now: the adapter matches it
    _changed_on_disk(push_client, eager, WAN_EAGER.format(merge=""))
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])


_MODEL = """from veomni.models_kernel.utils.op_utils import resolve_moe_impl
from veomni.ops import VeomniOp


class Toy:
    def __init__(self):
        self.loss = VeomniOp("load_balancing_loss", "standard", resolve_moe_impl())
"""


async def test_changed_resolver_in_a_utils_package_relints_its_caller(
    push_client: LanguageClient, project: Path
) -> None:
    """The resolver lives in another directory than the document (`veomni/models_kernel/utils`)."""
    _select(project, "NPU204")
    shutil.copytree(
        REPO / "tests" / "fixtures" / "trees" / "veomni_op_runtime" / "veomni", project / "veomni"
    )
    resolver = project / "veomni" / "models_kernel" / "utils" / "op_utils.py"
    text = resolver.read_text()
    assert 'resolve_op_impl("moe_implementation")' in text
    uri = open_document(push_client, project / "veomni" / "models_kernel" / "toy" / "modeling_toy.py", _MODEL)
    found = await wait_diagnostics(push_client, uri, lambda d: codes(d) == ["NPU204"])
    assert "resolves `moe_implementation`" in found[0].message
    right = text.replace('"moe_implementation"', '"load_balancing_loss_implementation"')
    _changed_on_disk(push_client, resolver, right)
    await wait_diagnostics(push_client, uri, lambda d: codes(d) == [])
    # an editor reports the resolver's change
    assert glob_watches(await watched_globs(push_client), resolver)
