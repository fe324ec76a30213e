"""Outside any VeOmni tree (a user's training script; a pre-commit hook's isolated environment, where veomni is
not installed), `.cuda()` and hard-coded "cuda" get torch's own accelerator API, named in the fix title; a
copy of the VeOmni package under another directory name, and a script beside `veomni/`, use the tree's own
helpers; the run says which tree it resolved."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from veomni_stub import make_veomni_stub

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.project import load_project

SCRIPT = textwrap.dedent(
    """\
    import torch


    def train(model, batch, device="cuda"):
        model = model.cuda()
        scale = torch.ones(4, device="cuda")
        with torch.autocast(device_type="cuda", enabled=False):
            out = model(batch.cuda(non_blocking=True))
        return out * scale, device
    """
)
FIXED = textwrap.dedent(
    """\
    import torch


    def train(model, batch, device=None):
        if device is None:
            device = (torch.accelerator.current_accelerator() or torch.device("cpu")).type
        model = model.to(torch.accelerator.current_accelerator() or "cpu")
        scale = torch.ones(4, device=(torch.accelerator.current_accelerator() or torch.device("cpu")).type)
        with torch.autocast(device_type=(torch.accelerator.current_accelerator() or torch.device("cpu")).type, enabled=False):
            out = model(batch.to(torch.accelerator.current_accelerator() or "cpu", non_blocking=True))
        return out * scale, device
    """
)
SAFE_FIXED = FIXED.replace(
    'def train(model, batch, device=None):\n    if device is None:\n        device = (torch.accelerator.current_accelerator() or torch.device("cpu")).type\n',
    'def train(model, batch, device="cuda"):\n',
)


def _run(cwd: Path, *args: str, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-I"] if isolated else []
    return subprocess.run(
        [sys.executable, *flags, "-m", "npu_lint", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=300,
    )


def test_whole_file_fix_outside_any_tree(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    src = SourceFile.from_text(str(path), SCRIPT)
    project = load_project([str(path)])
    assert project.root is None
    outcome = fix_source(src, ["NPU101", "NPU102"], Settings(), project, unsafe=True)
    assert outcome.text == FIXED
    assert "veomni" not in outcome.text and "npu" not in outcome.text
    safe = fix_source(src, ["NPU101", "NPU102"], Settings(), project, unsafe=False)
    assert safe.text == SAFE_FIXED  # the default's fix changes the signature: unsafe


def test_fix_title_names_torch_accelerator(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    diags = lint_source(
        SourceFile.from_text(str(path), SCRIPT), ["NPU101"], Settings(), load_project([str(path)])
    )
    titles = {d.fix.title for d in diags if d.fix}
    assert titles == {'Replace `.cuda()` with `.to(torch.accelerator.current_accelerator() or "cpu")` '
                      "(torch >= 2.6; `cpu` on a host without an accelerator)"}  # fmt: skip


def test_precommit_like_run_without_veomni(tmp_path: Path) -> None:
    """pre-commit's isolated environment: `python -I`, veomni not importable; the hook's `--fix` rewrites the
    whole file to the torch.accelerator form and says why."""
    probe = subprocess.run(
        [sys.executable, "-I", "-c", "import importlib.util as u; print(u.find_spec('veomni') is None)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True"
    (tmp_path / "train.py").write_text(SCRIPT)
    res = _run(tmp_path, "--fix", "--unsafe-fixes", "--force-exclude", "train.py", isolated=True)
    assert (tmp_path / "train.py").read_text() == FIXED, res.stdout + res.stderr
    assert res.stderr.count("outside any VeOmni tree") == 1
    assert "torch.accelerator.current_accelerator()" in res.stderr


def test_fixed_script_runs_on_a_cpu_only_host(tmp_path: Path) -> None:
    """The fixed code runs with the installed torch on this CPU-only machine (current_accelerator() is None)."""
    (tmp_path / "run.py").write_text(
        FIXED
        + textwrap.dedent(
            """

            assert torch.accelerator.current_accelerator() is None
            out, device = train(torch.nn.Linear(4, 4), torch.ones(2, 4))
            assert out.device.type == "cpu" and device == "cpu", (out.device, device)
            print("ok")
            """
        )
    )
    res = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_no_fix_without_torch_bound(tmp_path: Path) -> None:
    text = "from torch import nn\n\n\ndef f(m: nn.Module):\n    return m.cuda()\n"
    path = tmp_path / "m.py"
    outcome = fix_source(
        SourceFile.from_text(str(path), text), ["NPU101"], Settings(), load_project([str(path)])
    )
    assert outcome.text == text  # `torch` is not bound: no import is added behind the user's back
    assert "torch.accelerator" in outcome.remaining[0].message


def test_vendored_copy_and_script_beside_the_package(tmp_path: Path) -> None:
    """A VeOmni copy under another directory name (third_party/veomni_fork/veomni/...) and a script at its root
    use the tree's own helpers; a script outside it gets torch.accelerator; the output names the tree."""
    fork = tmp_path / "third_party" / "veomni_fork"
    make_veomni_stub(fork)
    (fork / "pyproject.toml").write_text('[tool.ruff.lint.isort]\nknown-first-party = ["veomni"]\n')
    body = "import torch\n\n\ndef main(model):\n    return model.cuda()\n"
    (fork / "train_here.py").write_text(body)
    (tmp_path / "train.py").write_text(body)
    res = _run(tmp_path, "--fix", "third_party/veomni_fork/train_here.py", "train.py")
    assert (fork / "train_here.py").read_text() == (
        "import torch\n\nfrom veomni.utils.device import get_device_type\n\n\n"
        "def main(model):\n    return model.to(get_device_type())\n"
    ), res.stdout + res.stderr
    assert (tmp_path / "train.py").read_text() == body.replace(
        "model.cuda()", 'model.to(torch.accelerator.current_accelerator() or "cpu")'
    )
    assert (
        f"VeOmni tree resolved: {fork.resolve()}" in res.stderr
        or f"VeOmni tree resolved: {fork}" in res.stderr
    )
    assert "1 file outside any VeOmni tree" in res.stderr


def test_no_accelerator_fix_when_the_project_pins_an_older_torch(tmp_path: Path) -> None:
    """torch.accelerator needs torch >= 2.6: a project that pins an older torch gets no such fix."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\ndependencies = ["torch==2.4.1"]\n')
    path = tmp_path / "train.py"
    outcome = fix_source(
        SourceFile.from_text(str(path), SCRIPT),
        ["NPU101", "NPU102"],
        Settings(),
        load_project([str(path)]),
        unsafe=True,
    )
    assert outcome.text == SCRIPT
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\ndependencies = ["torch>=2.6"]\n')
    outcome = fix_source(
        SourceFile.from_text(str(path), SCRIPT),
        ["NPU101", "NPU102"],
        Settings(),
        load_project([str(path)]),
        unsafe=True,
    )
    assert outcome.text == FIXED


RUNTIME = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist


    def setup(model, batch):
        n = torch.cuda.device_count()
        torch.cuda.set_device(torch.cuda.current_device())
        torch.cuda.synchronize()
        dist.init_process_group(backend="nccl")
        if batch.is_cuda or batch.device.type == "cuda":
            batch = batch.to("cuda:0")
        with torch.cuda.amp.autocast():
            model(batch)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return n, torch.cuda.get_rng_state()
    """
)


def test_runtime_messages_never_name_veomni_outside_any_tree(tmp_path: Path) -> None:
    """The run's note says files outside VeOmni get torch's own API: no NPU102 message there may send the user
    to `veomni.utils.device` (or its helpers) instead."""
    path = tmp_path / "train.py"
    diags = lint_source(
        SourceFile.from_text(str(path), RUNTIME), ["NPU102"], Settings(), load_project([str(path)])
    )
    assert len(diags) >= 10
    for d in diags:
        for word in (
            "veomni",
            "get_device_type",
            "get_torch_device",
            "IS_CUDA_AVAILABLE",
            "get_dist_comm_backend",
        ):
            assert word not in d.message, d.message
    assert any("torch.accelerator.device_count" in d.message for d in diags)
