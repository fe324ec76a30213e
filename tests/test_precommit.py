"""End to end: this repository as a pre-commit hook repository (`pre-commit try-repo`).

pre-commit builds the hook's virtualenv with pip from the package index (setuptools for the build, then
libcst, astroid, pathspec), so the test needs the index (CI reaches PyPI): it fails, saying so, when it is
unreachable. It takes about a minute (the environment is built once, in a temporary PRE_COMMIT_HOME). try-repo uses the
committed HEAD of the repository (plus uncommitted changes, through a shadow commit), found relative to this
file: the worktree in development, the checkout in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = Path("veomni/models/transformers/toy/modeling_toy.py")
BAD = """\
import torch


def build(model):
    model = model.cuda()
    return model
"""
CLEAN = """\
def rotate(hidden_states, inv_freq):
    return hidden_states * inv_freq.to(hidden_states.device)
"""


def _index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def _index_reachable() -> str | None:
    """None when the package index answers, else the reason it does not."""
    url = f"{_index_url()}/setuptools/"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - fixed https URL
            if response.status >= 400:
                return f"{url} answered HTTP {response.status}"
    except Exception as exc:  # any network failure: the test cannot run
        return f"{url} is unreachable ({type(exc).__name__}: {exc})"
    return None


def _cannot_run() -> str | None:
    if shutil.which("git") is None:
        return "git is not installed"
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        return "pre-commit is not installed (extra `dev`)"
    if not (REPO / ".pre-commit-hooks.yaml").is_file():
        return f"{REPO} has no .pre-commit-hooks.yaml"
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        return f"{REPO} is not a git repository with a commit (try-repo needs one)"
    return _index_reachable()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _try_repo(cwd: Path, hook: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), hook, "--all-files", "--color", "never"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_hooks_end_to_end(tmp_path: Path) -> None:
    reason = _cannot_run()
    assert reason is None, f"the pre-commit end-to-end test cannot run: {reason}"
    work = tmp_path / "user-repo"
    work.mkdir()
    _git(work, "init", "-q")
    _git(work, "config", "user.email", "test@example.com")
    _git(work, "config", "user.name", "test")
    bad = work / MODEL
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD, encoding="utf-8")
    (work / "clean.py").write_text(CLEAN, encoding="utf-8")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "a GPU-only model")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PRE_COMMIT_HOME")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    env["NO_COLOR"] = "1"

    # the checking hook fails and prints the diagnostic
    checked = _try_repo(work, "npu-lint", env)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 1, output
    assert "NPU101" in output, output
    assert str(MODEL) in output, output
    assert "clean.py:" not in output  # the clean file has nothing to report
    assert bad.read_text(encoding="utf-8") == BAD  # the checking hook writes nothing

    # the fixing hook rewrites the file (pre-commit fails the run because files were modified)
    fixed = _try_repo(work, "npu-lint-fix", env)
    output = fixed.stdout + fixed.stderr
    assert fixed.returncode == 1, output
    assert "files were modified by this hook" in output, output
    text = bad.read_text(encoding="utf-8")
    assert ".cuda()" not in text
    assert "model.to(get_device_type())" in text
    assert "from veomni.utils.device import get_device_type" in text

    # now everything is clean: both hooks pass
    again = _try_repo(work, "npu-lint", env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Passed" in again.stdout
