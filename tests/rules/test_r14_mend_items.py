"""Review items on the rules merged from r14disp: NPU314 survives an editor's dangling lock symlink beside the
adapter; a cached run re-reports when a file outside the model packages that a rule reads changes (a sibling
kernel backend, an implementation resolver)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

_ADAPTER = """import torch_npu
from einops import rearrange


def rope_apply_npu(x, cos, sin, head_dim):
    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = torch_npu.npu_rotary_mul(x, cos, sin)
    return x_out.to(x.dtype)
"""


def _check(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    from npu_lint.cli import main

    monkeypatch.chdir(tree)
    capsys.readouterr()
    code = main(["check", "--jobs", "1", "--output-format", "concise", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_npu314_dangling_lock_symlink_beside_the_adapter(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    package = tmp_path / "veomni" / "models" / "transformers" / "toy"
    package.mkdir(parents=True)
    adapter = package / "npu_patch.py"
    adapter.write_text(_ADAPTER)
    os.symlink("user@host.1234", package / ".#npu_patch.py")  # an Emacs lock file
    (package / "dir.py").mkdir()
    code, out = _check(tmp_path, monkeypatch, capsys, "--no-cache", "--select", "NPU314", ".")
    assert code == 1 and "internal error" not in out and "NPU314" in out, out
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(_ADAPTER.encode())))
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        "--no-cache",
        "--select",
        "NPU314",
        "--stdin-filename",
        str(adapter),
        "-",
    )
    assert code == 1 and "internal error" not in out and "NPU314" in out, out


QUIET = 0.3


def test_cached_run_rereads_a_changed_sibling_backend(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    from npu_lint.engine import cache

    monkeypatch.setattr(cache, "RACY_NS", 10**8)
    op = tmp_path / "veomni" / "ops" / "kernels" / "toy_loss"
    op.mkdir(parents=True)
    for d in (tmp_path / "veomni", tmp_path / "veomni" / "ops", tmp_path / "veomni" / "ops" / "kernels", op):
        (d / "__init__.py").write_text("")
    eager, npu = op / "eager.py", op / "npu.py"
    eager.write_text("def eager_toy_loss(logits, labels, ignore_index=-100):\n    return logits\n")
    npu.write_text("def npu_toy_loss(labels, logits, ignore_index=-100):\n    return logits\n")
    time.sleep(QUIET)
    code, out = _check(
        tmp_path, monkeypatch, capsys, "--select", "NPU316", "veomni/ops/kernels/toy_loss/npu.py"
    )
    assert code == 1 and "npu.py" in out, out
    # the eager sibling takes the NPU order now: npu.py is unchanged, its cached finding is stale
    eager.write_text("def eager_toy_loss(labels, logits, ignore_index=-100):\n    return logits\n")
    time.sleep(QUIET)
    code, out = _check(
        tmp_path, monkeypatch, capsys, "--select", "NPU316", "veomni/ops/kernels/toy_loss/npu.py"
    )
    assert code == 0 and "NPU316" not in out, out


_RESOLVER = """from veomni.ops.config import get_ops_config


def resolve_op_impl(field: str) -> str:
    cfg = get_ops_config()
    return "eager" if cfg is None else getattr(cfg, field, "eager")


def resolve_moe_impl() -> str:
    return resolve_op_impl("{field}")
"""


def test_npu204_rereads_a_changed_resolver(tmp_path: Path) -> None:
    """The resolver's field is memoised by the resolver file's state, not by its name."""
    from npu_lint.veomni.imports import ModuleIndex
    from npu_lint.veomni.resolvers import wrapped_field

    utils = tmp_path / "veomni" / "models_kernel" / "utils"
    utils.mkdir(parents=True)
    for d in (tmp_path / "veomni", tmp_path / "veomni" / "models_kernel", utils):
        (d / "__init__.py").write_text("")
    module = utils / "op_utils.py"
    module.write_text(_RESOLVER.format(field="rotary_pos_emb_implementation"))
    index = ModuleIndex(tmp_path)
    origin = "veomni.models_kernel.utils.op_utils"
    assert wrapped_field(index, origin, "resolve_moe_impl") == "rotary_pos_emb_implementation"
    module.write_text(_RESOLVER.format(field="moe_implementation"))
    os.utime(module, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert wrapped_field(index, origin, "resolve_moe_impl") == "moe_implementation"


def test_fingerprint_covers_kernel_backends_and_resolvers(tmp_path: Path) -> None:
    from npu_lint.veomni.layout import shared_module_files

    for rel in (
        "veomni/ops/kernels/toy/npu.py",
        "veomni/models_kernel/utils/op_utils.py",
        "veomni/utils/x.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    got = {os.path.relpath(f, tmp_path) for f in shared_module_files(tmp_path)}
    assert {
        "veomni/ops/kernels/toy/npu.py",
        "veomni/models_kernel/utils/op_utils.py",
        "veomni/utils/x.py",
    } <= got
