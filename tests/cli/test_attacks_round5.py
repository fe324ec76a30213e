"""Round-5 adversarial findings (bench/accuracy/adversary-round5.md): each test failed before its fix."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Diagnostic, Origin
from tests.veomni_stub import make_veomni_stub

REPO = Path(__file__).resolve().parents[2]
CUDA = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _bad_name(directory: Path) -> Path:
    path = Path(os.fsdecode(os.fsencode(str(directory)) + b"/bad\xff.py"))
    path.write_bytes(CUDA.encode())
    return path


def test_non_utf8_file_name_with_the_cache_on(tmp_path: Path) -> None:
    """A5-02: one file whose name is not UTF-8 made every cached run an internal error (exit 2), also runs
    that named only other files of the same VeOmni tree (the tree's scan key encoded the name strictly)."""
    (tmp_path / "plain").mkdir()
    _bad_name(tmp_path / "plain")
    res = run("check", "plain", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "internal error" not in res.stderr
    assert "NPU101" in res.stdout

    tree = make_veomni_stub(tmp_path / "tree")
    pkg = tree / "veomni" / "models" / "transformers" / "foo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text(CUDA)
    _bad_name(pkg)
    for _ in range(2):  # a cold and a warm cache
        res = run("check", "veomni/models/transformers/foo/ok.py", cwd=tree)
        assert res.returncode == 1, res.stderr
        assert "internal error" not in res.stderr
    res = run("check", "--fix", "veomni/models/transformers/foo", cwd=tree)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ".cuda()" not in (pkg / "ok.py").read_text()


def test_migrate_output_never_replaces_a_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A5-15: `migrate -o <model>/__init__.py` wrote the markdown report over the package's `__init__.py`
    (check, audit and verify refuse such a path; migrate did not, and only after a 40 s run)."""
    import npu_lint.migrate as migrate_pkg
    from npu_lint.migrate.cli import main

    pkg = tmp_path / "veomni" / "models" / "transformers" / "foo"
    pkg.mkdir(parents=True)
    init = pkg / "__init__.py"
    init.write_text("from .generated import x\n")
    (pkg / "foo_gpu_patch_gen_config.py").write_text("config = None\n")
    calls: list[object] = []
    monkeypatch.setattr(migrate_pkg, "migrate", lambda *a, **k: calls.append(a) or 1 / 0)
    assert main([str(pkg), "--no-verify", "-o", str(init)]) == 2
    err = capsys.readouterr().err
    assert "refusing" in err and len(err.strip().splitlines()) == 1
    assert init.read_text() == "from .generated import x\n"
    assert not calls  # refused before any step ran
    assert main([str(pkg), "--no-verify", "-o", str(tmp_path / "no" / "such" / "r.md")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not calls


@pytest.mark.parametrize("front", ["migrate", "verify"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_timeout_must_be_finite_and_positive(
    front: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A5-24: `verify --timeout nan` never timed out (every deadline comparison with nan is false): a model
    that hangs hung npu-lint for good. A bad value is one line and exit 2, as every usage error."""
    if front == "migrate":
        from npu_lint.migrate.cli import build_parser
    else:
        from npu_lint.verify.cli import build_parser
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["somewhere", "--timeout", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--timeout" in err, err
    assert build_parser().parse_args(["somewhere", "--timeout", "0.5"]).timeout == 0.5


def test_verify_flags_are_never_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    """A5-25: `verify --time 5` was taken as `--timeout 5` (check, migrate refuse abbreviations)."""
    from npu_lint.verify.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["somewhere", "--time", "5"])
    assert "--time" in capsys.readouterr().err


def test_add_noqa_writes_a_spec_once_however_its_findings_spell_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A5-20: `check --add-noqa veomni` on veomni-main left six specs with "changed since it was linted; run
    --add-noqa again": a generated finding's origin spelled the spec `./pkg/spec.py`, the spec's own findings
    `pkg/spec.py`; the file was written for one spelling, then refused for the other."""
    from npu_lint.engine.adopt import add_noqa

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    spec = tmp_path / "pkg" / "spec.py"
    spec.write_text("a = 1\nb = 2\n")
    own = Diagnostic("NPU201", "x", "m", "pkg/spec.py", 1, 0, 1, 5)
    generated = Diagnostic(
        "NPU301", "y", "m", "pkg/generated/g.py", 7, 0, 7, 3, origin=Origin("./pkg/spec.py", 2)
    )
    digests = {"pkg/spec.py": hashlib.sha256(spec.read_bytes()).hexdigest()}
    result = add_noqa([own, generated], digests, [str(tmp_path)])
    assert not result.skipped and not result.errors, result.skipped + result.errors
    assert spec.read_text() == "a = 1  # noqa: NPU201\nb = 2  # noqa: NPU301\n"
    assert result.added == 2


def test_dot_slash_patterns_match_as_ruff_reads_them(tmp_path: Path) -> None:
    """A5-31: `extend-exclude = ["./out"]` and `per-file-ignores = {"./src/*" = [...]}` matched nothing (gitignore
    patterns never match `./`): a silently ignored configuration."""
    for name in ("out", "src"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.py").write_text(CUDA)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.npu-lint]\nextend-exclude = ["./out"]\nper-file-ignores = { "./src/*" = ["NPU101"] }\n'
    )
    res = run("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "NPU101" not in res.stdout


def test_accelerator_fix_not_offered_where_torch_is_rebound(tmp_path: Path) -> None:
    """A5-01: outside VeOmni, `.cuda()` became `.to(torch.accelerator...)` even in `def f(x, torch=None)` or
    after a local `import numpy as torch`: a "safe" fix calling `.accelerator` on the parameter."""
    src = (
        "import torch\n\n\ndef f(x, torch=None):\n    return x.cuda()\n\n\n"
        "def g(x):\n    import numpy as torch\n\n    return x.cuda(), torch\n\n\n"
        "def h(x):\n    return x.cuda()\n"
    )
    (tmp_path / "a.py").write_text(src)
    res = run("check", "--no-cache", "--fix", "a.py", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = (tmp_path / "a.py").read_text().splitlines()
    assert lines[4] == "    return x.cuda()"
    assert lines[10] == "    return x.cuda(), torch"
    assert lines[14] == '    return x.to(torch.accelerator.current_accelerator() or "cpu")'


@pytest.mark.parametrize("kind", ["dangling-symlink", "dangling-into-a-directory"])
def test_a_file_fix_never_claims_a_file_it_did_not_create(tmp_path: Path, kind: str) -> None:
    """A5-33: with a dangling symlink where NPU501's NPU spec goes, `--fix --unsafe-fixes` said "1 fixed, 0
    remaining" and created nothing (the name "existed"): a fix reported applied, lost."""
    from corpus import shared_tree_copy

    tree = shared_tree_copy("veomni-op-5d90dd16", tmp_path / "tree")
    pkg = "veomni/models_kernel/transformers/qwen2"
    target = tree / pkg / "qwen2_npu_patch_gen_config.py"
    if kind == "dangling-symlink":
        target.symlink_to(tmp_path / "nowhere.py")
    else:
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere" / "gone")  # dangling, into a directory outside
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", pkg, cwd=tree)
    assert "1 fixed, 0 remaining" not in res.stdout, res.stdout
    assert res.returncode != 0
    assert "not created" in res.stdout + res.stderr
    assert not (tmp_path / "nowhere.py").exists() and not (tmp_path / "elsewhere" / "gone").exists()


def _unrecognised_tree(root: Path) -> Path:
    """A `veomni` package without ops/ or kernels/ (a fork, a sparse checkout): no tree is recognised, and its
    utils/device.py has neither get_device_type nor synchronize."""
    for sub in (
        "veomni",
        "veomni/utils",
        "veomni/models",
        "veomni/models/transformers",
        "veomni/models/transformers/foo",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "veomni" / "utils" / "device.py").write_text("def get_device_id():\n    return 0\n")
    model = root / "veomni" / "models" / "transformers" / "foo" / "modeling_foo.py"
    model.write_text(
        "import torch\n\n\ndef f(x):\n    torch.cuda.synchronize()\n"
        '    y = torch.zeros(3, device="cuda")\n    return x.cuda(), y\n'
    )
    return model


def test_no_fix_imports_a_helper_the_package_beside_lacks(tmp_path: Path) -> None:
    """A5-22: in such a package `--fix` wrote `from veomni.utils.device import get_device_type, synchronize`
    (the built-in catalog's names), an ImportError the package does not define."""
    model = _unrecognised_tree(tmp_path)
    before = model.read_text()
    res = run("check", "--no-cache", "--fix", "veomni", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert model.read_text() == before


def test_messages_name_no_helper_the_package_beside_lacks(tmp_path: Path) -> None:
    """A5-22b: in such a package the messages still sent the user to `get_device_type()` and
    `get_torch_device()`, which its device module does not define; they name torch's own API instead."""
    _unrecognised_tree(tmp_path)
    res = run("check", "--no-cache", "--output-format", "concise", "veomni", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "get_device_type" not in res.stdout and "get_torch_device" not in res.stdout
    assert res.stdout.count("torch.accelerator") == 3, res.stdout


def test_guard_is_linear_in_the_fixes_of_one_long_line(tmp_path: Path) -> None:
    """A5-09: 20,000 `device="cuda"` findings on one 600 KB line took 34 s: the import guard scanned the whole
    line once per edit (17 s of it in `guard_fixes` alone; 0.2 s now)."""
    import time

    from npu_lint.core.diagnostics import Edit, Fix
    from npu_lint.engine.guard import guard_fixes
    from npu_lint.veomni.project import load_project

    n, unit = 20000, 'torch.zeros(3, device="cuda")'
    text = "import torch\nx = [" + ",".join([unit] * n) + "]\n"
    base = len("import torch\nx = [") + len("torch.zeros(3, device=")
    diags = []
    for i in range(n):
        start = base + i * (len(unit) + 1)
        fix = Fix("f", (Edit(start, start + 6, "dev"),))
        diags.append(Diagnostic("NPU102", "n", "m", "a.py", 2, 0, 2, 1, fix=fix))
    (tmp_path / "a.py").write_text(text)
    project = load_project([str(tmp_path / "a.py")])
    started = time.perf_counter()
    out = guard_fixes(str(tmp_path / "a.py"), text, None, diags, project)
    assert len(out) == n
    assert time.perf_counter() - started < 4.0


def test_statistics_follow_the_json_output_format(tmp_path: Path) -> None:
    """A5-44: `--statistics --output-format json` printed the text table (ruff prints JSON)."""
    import json

    (tmp_path / "a.py").write_text(CUDA)
    res = run("check", "--no-cache", "--statistics", "--output-format", "json", "a.py", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    rows = json.loads(res.stdout)
    assert rows == [
        {"code": "NPU101", "name": "cuda-call", "count": 1, "generated_copies": 0, "fixable": True}
    ]


def test_a_directory_named_like_the_npu_spec_is_no_spec(tmp_path: Path) -> None:
    """A5-34: a directory named `qwen2_npu_patch_gen_config.py` silenced NPU501 ("All checks passed!"); now the
    finding stays and `--fix --unsafe-fixes` says why it creates nothing."""
    from corpus import shared_tree_copy

    tree = shared_tree_copy("veomni-op-5d90dd16", tmp_path / "tree")
    pkg = "veomni/models_kernel/transformers/qwen2"
    (tree / pkg / "qwen2_npu_patch_gen_config.py").mkdir()
    res = run("check", "--no-cache", "--output-format", "concise", pkg, cwd=tree)
    assert "NPU501" in res.stdout, res.stdout + res.stderr
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", pkg, cwd=tree)
    assert "not created" in res.stdout + res.stderr and "0 remaining" not in res.stdout


def test_paths_beside_stdin_filename_are_said_to_be_ignored(tmp_path: Path) -> None:
    """A5-06: `check --stdin-filename x.py a.py` linted standard input and dropped `a.py` without a word."""
    (tmp_path / "a.py").write_text(CUDA)
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    res = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--stdin-filename", "x.py", "a.py"],
        cwd=tmp_path, input="x = 1\n", capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ignoring a.py" in res.stderr


def test_jobs_is_bounded_by_the_cpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A5-51: `check --jobs 1000` on veomni-main started 254 worker processes on a 2-CPU machine (68 s instead
    of 17 s); workers are now at most 4 per CPU."""
    import concurrent.futures

    from npu_lint.core.config import Settings
    from npu_lint.engine.pool import POOL_THRESHOLD, lint_paths

    for i in range(POOL_THRESHOLD + 2):
        (tmp_path / f"m{i}.py").write_text(CUDA)
    seen: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def spy(*args: object, **kwargs: object) -> concurrent.futures.ProcessPoolExecutor:
        seen.append(int(kwargs["max_workers"]))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", spy)
    paths = sorted(str(p) for p in tmp_path.glob("m*.py"))
    results = lint_paths(paths, ["NPU101"], Settings(root=str(tmp_path)), jobs=1000)
    assert len(results) == len(paths)
    assert seen and seen[0] <= 4 * (os.cpu_count() or 1)


def test_add_noqa_needs_one_run_on_an_opslot_spec_with_a_repeated_slot(tmp_path: Path) -> None:
    """A5-20b: on veomni-main's qwen3_5 (an OpSlot tree: NPU201 is one summary per file), a second `--add-noqa`
    added one more directive: the NPU spec declares `veomni_rms_norm` twice in its post-import block, and once the
    first line carried `# noqa: NPU201` the generated file's finding was traced to the second, identical line."""
    from corpus import VEOMNI_MAIN, shared_tree_copy

    root = shared_tree_copy(VEOMNI_MAIN, tmp_path / "tree")
    package = "veomni/models/transformers/qwen3_5"
    first = run("check", "--no-cache", "--add-noqa", package, cwd=root)
    assert first.returncode == 0 and "Added" in first.stdout, first.stdout + first.stderr
    second = run("check", "--no-cache", "--add-noqa", package, cwd=root)
    assert "Added 0 noqa directives" in second.stdout, second.stdout + second.stderr
    third = run("check", "--no-cache", package, cwd=root)
    assert third.returncode == 0, third.stdout
