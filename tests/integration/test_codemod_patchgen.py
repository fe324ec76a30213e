"""The dispatch migration of the real veomni==0.1.12 specs, checked with VeOmni's own generator.

For every model of the wheel whose migrated counterpart exists upstream, the GPU spec (and its NPU sibling) are
migrated with the names of a VeomniOp-era profile (our stand-in tree, tests/fixtures/trees/veomni_op_runtime,
which names them as VeOmni's maintainers did at 5d90dd16). The migrated specs are written into a copy of the
wheel and VeOmni's patchgen (``python -m patchgen --all``, what ``veomni.patchgen`` forwards to) generates the
modules; then:

* every generated module compiles, and a second run reproduces it byte for byte;
* every name a generated module imports from ``veomni`` resolves: the handle API names in the target profile,
  the rest in the wheel itself; nothing is imported from the OpSlot API;
* every handle a generated module calls on ``self`` is built in that class's ``__init__`` (or a base's);
* a second migration changes nothing.

Needs torch==2.13.0, transformers==5.9.0, veomni==0.1.12 (--no-deps), psutil, ruff and VeOmni's ``patchgen``
package (installed, or the shared corpus's ``../shared/corpora/veomni-main/patchgen-pkg``); a missing one fails the
test (``make test`` installs the rest; CI has the shared corpora).
"""

from __future__ import annotations

import ast
import filecmp
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Applicability
from npu_lint.fixers.dispatch import migrate_source
from npu_lint.veomni.imports import ModuleIndex
from npu_lint.veomni.profile import detect_profile
from tests.corpus import SHARED_CORPORA, VEOMNI_MAIN, VEOMNI_OP, shared_tree, veomni_wheel_root

INSTALL = (
    "pip install torch==2.13.0 transformers==5.9.0 psutil && pip install --no-deps veomni==0.1.12 "
    "(and VeOmni's patchgen package)"
)
STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "trees" / "veomni_op_runtime"
# models of the wheel with a migrated counterpart upstream (ByteDance-Seed/VeOmni @5d90dd16)
UPSTREAM_MODELS = (
    "qwen3",
    "llama",
    "qwen2",
    "qwen3_vl",
    "seed_oss",
    "gemma3",
    "qwen3_5",
    "glm_moe_dsa",
    "deepseek_v3",
    "gpt_oss",
    "qwen3_moe",
    "qwen3_vl_moe",
    "qwen3_5_moe",
)
# those the codemod migrates exactly today (the others are display-only proposals; see
# bench/accuracy/codemod-vs-upstream.md for why)
MIGRATED = (
    "qwen3",
    "llama",
    "qwen2",
    "qwen3_vl",
    "seed_oss",
    "gemma3",
    "glm_moe_dsa",
    "qwen3_5",
    "deepseek_v3",
    "gpt_oss",
    "qwen3_moe",
    "qwen3_vl_moe",
    "qwen3_5_moe",
)
# models whose NPU spec stays a display-only proposal (its own slots serve GPU-spec functions): GPU side only
GPU_ONLY = ("qwen3_5_moe",)
OPSLOT_MODULES = ("veomni.ops.dispatch", "veomni.ops.kernels.cross_entropy")

pytestmark = pytest.mark.corpus
DEPENDENTS: tuple[str, ...] = ()  # qwen3_vl_moe / qwen3_5_moe (which reuse qwen3_vl's / qwen3_5's patch
# functions) are migrated in the same change now


# notes an exact migration may carry: what stays on the attention interface, the NPU sibling's slots that served
# the GPU spec's functions, a runtime kernel patch beside the spec
NOTES = ("stays on ALL_ATTENTION_FUNCTIONS", "were declared here for the GPU spec", "device_patch.py")


def exact(result) -> bool:  # noqa: ANN001
    """Migrated exactly: safe, or unsafe only because other models' specs import its functions."""
    if result.applicability is Applicability.SAFE:
        return True
    return result.applicability is Applicability.UNSAFE and all(
        r.startswith("specs of other models import") or any(note in r for note in NOTES)
        for r in result.reasons
    )


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _patchgen_path() -> str | None:
    """A directory to put on PYTHONPATH for ``patchgen`` ("" when it is installed), None when absent."""
    if importlib.util.find_spec("patchgen") is not None:
        return ""
    shared = (
        SHARED_CORPORA / VEOMNI_MAIN / "patchgen-pkg"
    )  # VeOmni's own patchgen (CI has the shared corpora)
    if (shared / "patchgen" / "__init__.py").is_file():
        return str(shared)
    cache = Path(os.environ.get("NPU_LINT_CORPUS_DIR", Path.home() / ".cache" / "npu-lint-corpus"))
    for candidate in sorted(cache.glob("patchgen-*/patchgen-pkg")):
        if (candidate / "patchgen" / "__init__.py").is_file():
            return str(candidate)
    return None


def _requirements() -> str | None:
    missing = []
    if not (_version("torch") or "").startswith("2.13.0"):
        missing.append("torch==2.13.0")
    if _version("transformers") != "5.9.0":
        missing.append("transformers==5.9.0")
    if _version("psutil") is None:
        missing.append("psutil")
    if _patchgen_path() is None:
        missing.append("patchgen")
    if (
        shutil.which("ruff", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        is None
    ):
        missing.append("ruff")
    if missing:
        return f"needs {', '.join(missing)}: {INSTALL}"
    return None


PYPROJECT = """\
[tool.patchgen]
search_root = "veomni/models"
package_prefix = "veomni.models"
ruff_isolated = false
ruff_extra_ignore = ["E501"]

[tool.ruff]
line-length = 120

[tool.ruff.lint]
select = ["E", "F", "I"]
ignore = ["E501", "E731", "E741", "F401", "F811", "F841"]
"""


def _spec_path(root: Path, model: str, side: str) -> Path:
    return root / "veomni" / "models" / "transformers" / model / f"{model}_{side}_patch_gen_config.py"


@pytest.fixture(scope="module")
def api():  # noqa: ANN201
    # the maintainers' VeomniOp tree: every name a migration writes is one that tree defines
    return detect_profile(shared_tree(VEOMNI_OP))


@pytest.fixture(scope="module")
def migrated(api) -> dict[tuple[str, str], object]:  # noqa: ANN001
    root = veomni_wheel_root()
    out = {}
    for model in UPSTREAM_MODELS:
        for side in ("gpu", "npu"):
            path = _spec_path(root, model, side)
            if path.is_file():
                out[(model, side)] = migrate_source(path.read_text(), str(path), profile=api)
    return out


def test_exact_migrations(migrated: dict) -> None:
    safe = {m for (m, side), r in migrated.items() if side == "gpu" and exact(r)}
    assert set(MIGRATED) <= safe, sorted(set(MIGRATED) - safe)
    for (model, side), result in migrated.items():
        if result.applicability is Applicability.DISPLAY:
            assert result.reasons, (model, side)  # every proposal that cannot be applied says why


def test_second_migration_changes_nothing(migrated: dict, api) -> None:  # noqa: ANN001
    root = veomni_wheel_root()
    for model in MIGRATED:
        path = _spec_path(root, model, "gpu")
        once = migrated[(model, "gpu")]
        again = migrate_source(once.text, str(path), profile=api)
        assert again.text == once.text and not again.handles, model


@pytest.fixture(scope="module")
def generated(migrated: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _requirements()
    if reason:
        pytest.fail(reason)  # make test installs all of it; CI has the shared corpora
    tree = tmp_path_factory.mktemp("patchgen")
    shutil.copytree(veomni_wheel_root() / "veomni", tree / "veomni")
    for model in MIGRATED:
        for side in ("gpu", "npu"):
            result = migrated.get((model, side))
            if result is not None and side == "npu" and model in GPU_ONLY:
                assert result.applicability is Applicability.DISPLAY and result.reasons, (model, side)
                _spec_path(tree, model, side).unlink()
                (
                    tree
                    / "veomni"
                    / "models"
                    / "transformers"
                    / model
                    / "generated"
                    / f"patched_modeling_{model}_npu.py"
                ).unlink()
                continue
            if result is not None:
                assert exact(result), (model, side, result.reasons)
                _spec_path(tree, model, side).write_text(result.text)
    for dependent in DEPENDENTS:  # they would need migrating in the same change (the unsafe reason says so)
        shutil.rmtree(tree / "veomni" / "models" / "transformers" / dependent)
    (tree / "pyproject.toml").write_text(PYPROJECT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), _patchgen_path()) if p)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

    def run() -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "patchgen", "--all"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])

    run()
    first = tree.parent / (tree.name + "-first")
    shutil.copytree(tree / "veomni" / "models" / "transformers", first)
    run()
    for model in MIGRATED:
        a, b = first / model / "generated", tree / "veomni" / "models" / "transformers" / model / "generated"
        names = sorted(p.name for p in a.glob("patched_modeling_*.py"))
        assert names, model
        match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
        assert not mismatch and not errors, (model, mismatch, errors)
    return tree


def _generated_files(tree: Path, model: str) -> list[Path]:
    return sorted(
        (tree / "veomni" / "models" / "transformers" / model / "generated").glob("patched_modeling_*.py")
    )


@pytest.mark.parametrize("model", MIGRATED)
def test_generated_modules(model: str, generated: Path, api) -> None:  # noqa: ANN001
    wheel = ModuleIndex(veomni_wheel_root())
    files = _generated_files(generated, model)
    assert {f.name for f in files} >= {f"patched_modeling_{model}_gpu.py"}
    for path in files:
        text = path.read_text()
        compile(text, str(path), "exec")
        tree = ast.parse(text)
        assert "use_non_eager_impl" not in text and "OpSlot" not in text, path.name
        vendor = [
            n
            for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and any((getattr(n, "module", None) or a.name).startswith("liger_kernel") for a in n.names)
        ]
        assert not vendor, path.name  # vendor classes named by the spec became handles
        api_modules = {
            m for m in (api.handle_module, api.resolver_module, api.loss_module, api.bias_module) if m
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "veomni":
                assert node.module not in OPSLOT_MODULES, (path.name, node.module)
                for alias in node.names:
                    if node.module in api_modules:
                        assert api.defines(node.module, alias.name), (path.name, node.module, alias.name)
                    else:
                        assert wheel.defines(node.module, alias.name), (path.name, node.module, alias.name)
        _check_handles_built(tree, path.name, api.handle)


def _check_handles_built(tree: ast.Module, name: str, handle: str) -> None:
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    built: dict[str, set[str]] = {}
    for cls in classes.values():
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == handle
            ):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                        built.setdefault(cls.name, set()).add(target.attr)
    handles = set().union(*built.values()) if built else set()
    assert handles, name

    def available(cls_name: str, seen: set[str]) -> set[str]:
        if cls_name in seen or cls_name not in classes:
            return set()
        seen.add(cls_name)
        out = set(built.get(cls_name, set()))
        for base in classes[cls_name].bases:
            if isinstance(base, ast.Name):
                out |= available(base.id, seen)
        return out

    for cls in classes.values():
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and node.func.attr in handles
            ):
                assert node.func.attr in available(cls.name, set()), (name, cls.name, node.func.attr)
