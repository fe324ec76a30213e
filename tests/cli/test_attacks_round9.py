"""Round-9 attacks (bench/accuracy/adversary-round9.md): each test fails without the fix it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.cli import main

KERNEL = "def forward(x):\n    return x\n\n\ndef backward(g):\n    return g\n"


# -- A9-14: a name imported differently by the branches of an `if` ---------------------------------------------


def test_a9_14_an_import_chosen_at_run_time_is_not_read_as_the_gpu_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`if not is_torch_npu_available(): from .triton import forward as fwd` / `else: from .npu import ...`:
    on Ascend the row binds the NPU kernel. NPU220 read only the `if` branch and said an Ascend host gets the
    Triton kernel (untrue); a name the branches bind differently is now left unresolved."""
    import corpus

    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    pkg = root / "veomni" / "ops" / "kernels" / "advx"
    (pkg / "standard").mkdir(parents=True)
    (pkg / "standard" / "__init__.py").write_text("", encoding="utf-8")
    for name in ("npu", "triton"):
        (pkg / "standard" / f"{name}.py").write_text(KERNEL, encoding="utf-8")
    (pkg / "__init__.py").write_text(
        "from veomni.utils.import_utils import is_torch_npu_available\n\n"
        "from ...registry import register_op\n"
        "from ...requirement import NpuKernelRequirement\n\n"
        "if not is_torch_npu_available():\n"
        "    from .standard.triton import forward as fwd\n"
        "else:\n"
        "    from .standard.npu import forward as fwd\n\n"
        'register_op("rms_norm", "advx", "npu", fwd, None, requirement=NpuKernelRequirement())\n',
        encoding="utf-8",
    )
    main(["check", "--no-cache", "--select", "NPU220", str(pkg)])
    assert "NPU220" not in capsys.readouterr().out
    # the same row bound to the Triton kernel in both branches is still said
    text = (pkg / "__init__.py").read_text(encoding="utf-8")
    (pkg / "__init__.py").write_text(text.replace(".standard.npu import", ".standard.triton import"), "utf-8")
    main(["check", "--no-cache", "--select", "NPU220", str(pkg)])
    assert "NPU220" in capsys.readouterr().out


# -- A9-01: `--diff` showed one fix pass, `--fix` writes several -------------------------------------------------


def _mixed_seed_oss(tmp_path: Path) -> Path:
    import corpus

    return corpus.mixed_seed_oss(tmp_path)


def _new_texts(diff: str) -> dict[str, str]:
    """The new text of every file in a unified diff of whole-file hunks' context (the `+` and ` ` lines)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in diff.splitlines(keepends=True):
        if line.startswith("+++ b/"):
            current = "/" + line[6:].strip()
            out[current] = []
        elif current and line.startswith("+") and not line.startswith("+++"):
            out[current].append(line[1:])
    return {path: "".join(lines) for path, lines in out.items()}


def test_a9_01_diff_shows_every_pass_fix_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --diff` ran one fix pass while `--fix` repeats passes (the NPU spec's reuses of the fixed GPU
    spec land in the second): the diff lacked them, so what a user reviewed was not what `--fix` wrote. The
    further passes now run on a private copy of the tree; the tree itself is never written."""
    dest = _mixed_seed_oss(tmp_path)
    before = {p: p.read_bytes() for p in dest.rglob("*.py")}
    main(["check", "--no-cache", "--diff", "--unsafe-fixes", str(dest)])
    diff = capsys.readouterr().out
    assert {p: p.read_bytes() for p in dest.rglob("*.py")} == before  # --diff writes nothing
    added = _new_texts(diff)
    npu_spec = str(dest / "seed_oss_npu_patch_gen_config.py")
    assert "replacement=seed_oss_attention_init_patched" in added[npu_spec]  # the second pass's reuse
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(dest)])
    capsys.readouterr()
    changed = {str(p) for p in dest.rglob("*.py") if before.get(p) != p.read_bytes()}
    assert changed == set(added)  # the diff names exactly the files --fix changed
    for path in changed:  # and every line --fix added is in the diff
        new_lines = set(Path(path).read_text(encoding="utf-8").splitlines(keepends=True))
        old_lines = set(before[Path(path)].decode("utf-8").splitlines(keepends=True))
        assert new_lines - old_lines <= set(added[path].splitlines(keepends=True))


# -- A9-38: one file --fix cannot write stopped the further passes for every other file ---------------------------


def test_a9_38_a_read_only_file_elsewhere_does_not_stop_the_next_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only file with a finding, named beside a package whose fix takes two passes: the first pass's
    error (the read-only file, reported, exit 2) ended the run after one pass, so the NPU spec's reuses were
    never applied. The file that failed is not tried again; the other files get their passes; the error is
    said once."""
    dest = _mixed_seed_oss(tmp_path)
    locked = dest.parent / "qwen3" / "ro_helper.py"
    locked.write_text("import torch\n\n\ndef g(x):\n    return x.cuda()\n", encoding="utf-8")
    locked.chmod(0o444)
    code = main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(dest), str(locked)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("read-only file") == 1
    npu_spec = dest / "seed_oss_npu_patch_gen_config.py"
    assert "replacement=seed_oss_attention_init_patched" in npu_spec.read_text(encoding="utf-8")
    assert locked.read_text(encoding="utf-8").endswith("x.cuda()\n")


def test_a9_01_the_staged_passes_keep_a_configuration_above_the_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration sits above the VeOmni tree and its anchored `per-file-ignores` turns NPU5 off for the
    NPU spec: the staged passes must match it as the real tree does (only the tree is copied, placed as it
    sits under the configuration), so `--diff` and `--fix` agree: no reuse lands in the NPU spec."""
    dest = _mixed_seed_oss(tmp_path / "cfg" / "sub")
    rel = dest.relative_to(tmp_path / "cfg").as_posix()
    (tmp_path / "cfg" / "pyproject.toml").write_text(
        f'[tool.npu-lint]\nper-file-ignores = {{ "./{rel}/seed_oss_npu_patch_gen_config.py" = ["NPU5"] }}\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path / "cfg")
    before = {p: p.read_bytes() for p in dest.rglob("*.py")}
    main(["check", "--no-cache", "--diff", "--unsafe-fixes", rel])
    added = _new_texts(capsys.readouterr().out)
    assert "replacement=" not in "".join(added.values())
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", rel])
    capsys.readouterr()
    changed = {p for p in dest.rglob("*.py") if before.get(p) != p.read_bytes()}
    assert {str(p.relative_to(tmp_path / "cfg")) for p in changed} == {k.lstrip("/") for k in added}
    assert "replacement=" not in (dest / "seed_oss_npu_patch_gen_config.py").read_text(encoding="utf-8")


# -- A9-39: a project finding left after --fix was reported at the line it had before the fixes ------------------


def test_a9_39_project_findings_left_by_fix_are_at_their_lines_in_the_fixed_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NPU505 (a project rule: the NPU spec is not generated yet, display-only) stays after `--fix`; it was
    computed on the text read, and the fixes above it (imports replaced, a copied patch reused) moved its line:
    the report named the old line. The findings `--fix` reports are now those a `check` of the result gives."""
    import json

    dest = _mixed_seed_oss(tmp_path)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", "--output-format", "json", str(dest)])
    after_fix = json.loads(capsys.readouterr().out)
    main(["check", "--no-cache", "--output-format", "json", str(dest)])
    fresh = json.loads(capsys.readouterr().out)

    def where(found: list[dict]) -> list[tuple]:
        return sorted(
            (d["code"], d["filename"], d["location"]["row"], d["end_location"]["row"]) for d in found
        )

    assert any(d["code"] == "NPU505" for d in fresh)
    assert where(after_fix) == where(fresh)


# -- A9-19: the model test migrate writes imported npu-lint itself ------------------------------------------------


def test_a9_19_the_generated_model_test_imports_nothing_from_npu_lint(tmp_path: Path) -> None:
    """The template of `tests/test_<model>_npu.py` carried `from npu_lint.core.safeio import read_text` (unused;
    a refactor of npu-lint's own reads reached the template): the tree's test then needs npu-lint installed to
    be collected (ruff's F401 fix removed it only where ruff runs and F401 is on), and every second `migrate`
    reported the model-test and ruff steps as changing the file it then left unchanged."""
    import ast

    import corpus

    from npu_lint.migrate.plan import Package, resolve_packages
    from npu_lint.migrate.testgen import render_test

    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    real_root, found = resolve_packages([str(root / "veomni" / "models_kernel" / "transformers" / "qwen2")])
    name, directory, module = found[0]
    text = render_test(real_root, Package(name, directory, directory, module))
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
    assert "npu_lint" not in imported
    assert "veomni" in imported  # the template was rendered
