"""Every statement is true for the tree being linted, run through the CLI as a user runs it, on copies of the
two shared VeOmni trees (public ``main``, OpSlot generation; the maintainers' VeomniOp-era tree at 5d90dd16).

- every ``op/variant`` a message, a fix title or an audit line names is registered in that tree;
- no placeholder text, no "a OpSlot";
- on an OpSlot tree under ``target-api = "auto"`` module-global dispatch is reported at most once per file, the
  generation's limitation is said once per run, and the per-slot findings come back with ``target-api =
  "veomni-op"``;
- NPU202 reports a per-call handle on the VeomniOp tree only where it can change behaviour.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from corpus import VEOMNI_MAIN, VEOMNI_OP, shared_tree, shared_tree_copy

from npu_lint.veomni.catalog import BUILTIN_ROWS, OPSLOT_TO_VEOMNIOP
from npu_lint.veomni.project import load_project

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.corpus

MODELS = {VEOMNI_MAIN: "veomni/models", VEOMNI_OP: "veomni/models_kernel"}
# audited packages: every kind of operator line (OpSlots, an offset RMSNorm, OpsConfigSlots, vendor classes)
AUDITED = {
    VEOMNI_MAIN: ("qwen3", "qwen3_5", "deepseek_v4", "seed_oss", "gemma3"),
    VEOMNI_OP: ("qwen3", "llama", "gemma3", "deepseek_v3", "glm_moe_dsa"),
}
# `op/variant` as a message writes it (a path such as `veomni/models` is not one: its first part is no op)
OP_VARIANT = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)/([a-z0-9_]+)(?![\w/-])")
# a placeholder: `(...)` that follows no callable name, or the words a missing name used to leave behind
PLACEHOLDERS = (
    re.compile(r"(?<![\w\])`])\(\.\.\.\)"),
    re.compile(r"\ba OpSlot\b"),
    re.compile(r"resolver\(\.\.\.\)"),
)


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def _check(path: Path, *extra: str) -> tuple[list[dict], str]:
    proc = _cli("check", "--no-cache", "--show-fixes", "--output-format", "json", *extra, str(path))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _config(directory: Path, target_api: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "npu-lint.toml"
    path.write_text(f'target-api = "{target_api}"\n', encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: shared_tree_copy(name, tmp_path_factory.mktemp(name)) for name in MODELS}


@pytest.fixture(scope="module")
def runs(trees: dict[str, Path]) -> dict[str, tuple[list[dict], str]]:
    return {name: _check(root / MODELS[name]) for name, root in trees.items()}


def _texts(name: str, root: Path, findings: list[dict]) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for d in findings:
        texts.append((f"{d['code']} {d['filename']}:{d['location']['row']}", d["message"]))
        if d.get("fix"):
            texts.append((f"{d['code']} fix title", d["fix"].get("message") or ""))
    for model in AUDITED[name]:
        proc = _cli("audit", str(root / MODELS[name] / "transformers" / model))
        assert proc.returncode in (0, 1), proc.stderr
        texts.append((f"audit {model}", proc.stdout))
    return texts


@pytest.mark.parametrize("name", [VEOMNI_MAIN, VEOMNI_OP])
def test_every_named_op_variant_is_registered_and_nothing_is_a_placeholder(
    name: str, trees: dict[str, Path], runs: dict[str, tuple[list[dict], str]]
) -> None:
    root = trees[name]
    project = load_project([str(root / MODELS[name])])
    registered = {(r.op, r.variant) for r in (*project.registered, *project.slot_rows)}
    assert registered, "the tree's registry was not read"
    ops = {r.op for r in BUILTIN_ROWS} | {op for op, _ in OPSLOT_TO_VEOMNIOP} | {op for op, _ in registered}
    texts = _texts(name, root, runs[name][0])
    named = [(where, f"{op}/{v}") for where, text in texts for op, v in OP_VARIANT.findall(text) if op in ops]
    assert named, "no message names an op/variant: the extraction is broken"
    wrong = [(where, ov) for where, ov in named if tuple(ov.split("/")) not in registered]
    assert not wrong, wrong[:10]
    leftovers = [(where, p.pattern) for where, text in texts for p in PLACEHOLDERS if p.search(text)]
    assert not leftovers, leftovers[:10]
    if name == VEOMNI_MAIN:  # main registers no attention op and names its rotary op rotary_pos_emb
        assert not any(ov in ("attention/standard", "rope/full") for _w, ov in named)
        audit = dict(texts)["audit qwen3"]
        assert "built-in catalog" not in audit and "the tree's `KernelSpec` rows" in audit
        assert "rms_norm/offset" not in audit


def test_opslot_tree_reports_dispatch_once_per_file(runs: dict[str, tuple[list[dict], str]]) -> None:
    findings, stderr = runs[VEOMNI_MAIN]
    dispatch = [d for d in findings if d["code"] in ("NPU201", "NPU203", "NPU207")]
    per_file = Counter(d["filename"] for d in dispatch)
    assert dispatch and max(per_file.values()) == 1
    assert {d["code"] for d in dispatch} == {"NPU201"}
    for d in dispatch:
        assert "OpSlot generation, which has no instance-local handle API" in d["message"], d["message"]
        assert "nothing to fix here until the tree moves to VeomniOp or VeomniKernel" in d["message"]
        assert d["fix"] is None
    v4 = next(d for d in dispatch if d["filename"].endswith("deepseek_v4_gpu_patch_gen_config.py"))
    assert '`OpsConfigSlot("dsa_indexer_implementation")`' in v4["message"]
    assert "guard" in v4["message"]
    notes = [line for line in stderr.splitlines() if "OpSlot generation" in line]
    assert len(notes) == 1 and notes[0].startswith("npu-lint: note:")


def test_target_api_veomni_op_brings_back_the_per_slot_findings(
    trees: dict[str, Path], runs: dict[str, tuple[list[dict], str]], tmp_path: Path
) -> None:
    root = trees[VEOMNI_MAIN]
    findings, stderr = _check(
        root / MODELS[VEOMNI_MAIN], "--config", str(_config(tmp_path, "veomni-op")), "--select", "NPU2"
    )
    counts = Counter(d["code"] for d in findings)
    default = Counter(d["code"] for d in runs[VEOMNI_MAIN][0])
    assert counts["NPU201"] > default["NPU201"] and counts["NPU203"] > 0 and counts["NPU207"] > 0
    assert "does not define VeomniOp" in stderr
    npu207 = next(d for d in findings if d["code"] == "NPU207")
    assert "defines no ops-config resolver" in npu207["message"]


def test_npu202_on_the_maintainers_interned_handles(runs: dict[str, tuple[list[dict], str]]) -> None:
    findings, _ = runs[VEOMNI_OP]
    assert not [d for d in findings if d["code"] == "NPU202"]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_npu202_reports_a_handle_built_from_per_call_data(tmp_path: Path) -> None:
    root = shared_tree_copy(VEOMNI_OP, tmp_path / "tree")
    spec = root / "veomni/models_kernel/transformers/llama/llama_gpu_patch_gen_config.py"
    _edit(
        spec,
        'rope = VeomniOp("rope", "full", resolve_op_impl("rotary_pos_emb_implementation"))',
        'rope = VeomniOp("rope", "full", "eager" if q.is_cuda else "npu")',
    )
    findings, _ = _check(spec, "--select", "NPU202")
    (rope,) = findings
    assert (
        'the implementation from `"eager" if q.is_cuda else "npu"`, a value of this call' in rope["message"]
    )
    assert "`VeomniOp` (`veomni.ops.registry`) interns one handle per (op, variant, impl)" in rope["message"]


def test_npu202_follows_a_docstring_that_forbids_forward_calls(tmp_path: Path) -> None:
    root = shared_tree_copy(VEOMNI_OP, tmp_path / "tree")
    _edit(
        root / "veomni/ops/registry.py",
        "    Interned by triple.",
        "    Interned by triple. Do not call it from forward: build it in ``__init__``.",
    )
    spec = root / "veomni/models_kernel/transformers/llama/llama_gpu_patch_gen_config.py"
    findings, _ = _check(spec, "--select", "NPU202")
    assert len(findings) == 2  # the rope handle and the attention helper
    assert all("Do not call it from forward" in d["message"] for d in findings)


@pytest.mark.parametrize("opslot", [True, False])
def test_verify_isolation_separates_not_attainable_from_fails(tmp_path: Path, opslot: bool) -> None:
    """The isolation check in its child process: module-scope OpSlots on a tree with no handle API are not
    attainable there; a module-scope VeomniOp on a tree that has the API fails."""
    ops = tmp_path / "veomni" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "veomni" / "__init__.py").write_text("", encoding="utf-8")
    (ops / "dispatch.py").write_text(
        "class OpSlot:\n    def __init__(self, op, variant):\n        self.op, self.variant = op, variant\n",
        encoding="utf-8",
    )
    if opslot:
        (ops / "__init__.py").write_text("", encoding="utf-8")
        model = 'from veomni.ops.dispatch import OpSlot\n\nveomni_rms_norm = OpSlot("rms_norm", "standard")\n'
    else:
        (ops / "__init__.py").write_text(
            "class VeomniOp:\n    def __init__(self, op, variant, impl='eager'):\n        self.op = op\n",
            encoding="utf-8",
        )
        model = 'from veomni.ops import VeomniOp\n\nveomni_rms_norm = VeomniOp("rms_norm", "standard")\n'
    (tmp_path / "toy_model.py").write_text(model, encoding="utf-8")
    from npu_lint.verify.runner import run_child

    request = {"check": "isolation", "gpu_module": "toy_model", "sys_path": [str(tmp_path)]}
    # the child as verify runs it: own process group, minimal environment, verdict on an authenticated pipe
    check = run_child(request, sys.executable, 300, tmp_path)
    result = {"status": check.status, "findings": check.findings, "details": check.details}
    if opslot:
        assert result["status"] == "not attainable" and not result["findings"]
        assert "OpSlot generation" in result["details"] and "veomni_rms_norm" in result["details"]
    else:
        assert result["status"] == "fail"
        assert "veomni_rms_norm" in result["findings"][0]["what"]
    from npu_lint.verify.report import render_markdown
    from npu_lint.verify.runner import CheckResult

    class _Pkg:
        package, model_dir = "toy", tmp_path

    check = CheckResult("isolation", result["status"], 0.0, result["findings"], result["details"])
    text = render_markdown([{"package": _Pkg(), "checks": [check]}], "test")
    if opslot:
        assert "| isolation | not attainable on this generation |" in text
        assert "not attainable on this generation (not a failure) (exit 0)." in text
    else:
        assert "| isolation | **FAIL** |" in text


def test_shared_trees_are_present() -> None:
    for name in MODELS:
        assert (shared_tree(name) / MODELS[name]).is_dir()
