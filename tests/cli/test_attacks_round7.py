"""Round-7 attacks (adversary-round7.md): each test fails without the fix it names."""

from __future__ import annotations

import shutil
from pathlib import Path

import corpus
import pytest

from npu_lint.cli import main


def _mixed_tree(tmp_path: Path) -> Path:
    """The VeomniOp tree with an OpSlot-era model package (veomni-main's seed_oss, GPU spec + full-copy NPU
    spec) dropped into its `models_kernel` layout: a tree mixing generations, as a user porting a model has."""
    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    src = corpus.shared_tree("veomni-main") / "veomni" / "models" / "transformers" / "seed_oss"
    dest = root / "veomni" / "models_kernel" / "transformers" / "seed_oss"
    shutil.copytree(src, dest)
    for path in [dest, *dest.rglob("*")]:  # the corpus may be read-only (CI); a user's working copy is not
        path.chmod(path.stat().st_mode | 0o200)
    (dest / "generated" / "patched_modeling_seed_oss_npu.py").unlink(missing_ok=True)
    for spec in dest.glob("*_patch_gen_config.py"):
        text = spec.read_text(encoding="utf-8")
        text = text.replace("veomni.models.transformers", "veomni.models_kernel.transformers")
        spec.write_text(
            text.replace("veomni/models/transformers", "veomni/models_kernel/transformers"), "utf-8"
        )
    return root


def test_a7_01_one_unsafe_fix_run_leaves_no_npu_spec_without_its_handle_builders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NPU504's reuse fix and the dispatch migration in one run: the NPU spec imported the GPU forward that the
    same run migrated to `self.loss_function` bound in `SeedOssForCausalLM.__init__`, but not that `__init__`;
    NPU208 then said so and its advice (one `check --fix` run) was what the user had just done."""
    root = _mixed_tree(tmp_path)
    package = root / "veomni" / "models_kernel" / "transformers" / "seed_oss"
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(package)])
    capsys.readouterr()
    main(["check", "--no-cache", "--output-format", "concise", str(package)])
    out = capsys.readouterr().out
    assert "NPU208" not in out
    npu_spec = (package / "seed_oss_npu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "OpSlot(" not in npu_spec  # migrated with its GPU sibling, not left behind


def _ruff_check(root: Path, *paths: Path) -> str:
    import subprocess

    from npu_lint.core.tools import ruff_binary

    binary = ruff_binary()
    assert binary is not None
    proc = subprocess.run(
        [binary, "check", "--no-cache", "--output-format", "concise", *map(str, paths)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def test_a7_02_a_nested_ruff_toml_that_extends_the_project_config_keeps_its_isort_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`veomni/models/ruff.toml` with `extend = "../../pyproject.toml"` (ruff's own inheritance): the fix's new
    `veomni.utils.device` import was sorted as third party (the inherited `known-first-party = ["veomni"]` was
    not read), and the tree's `ruff check` failed I001."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    (root / "veomni" / "models" / "ruff.toml").write_text(
        'extend = "../../pyproject.toml"\n\n[lint]\nextend-ignore = ["B008"]\n', encoding="utf-8"
    )
    target = root / "veomni" / "models" / "transformers" / "flux" / "encode_flux.py"
    assert "I001" not in _ruff_check(root, target)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU102", str(target)])
    capsys.readouterr()
    assert "get_device_type" in target.read_text(encoding="utf-8")
    assert "I001" not in _ruff_check(root, target)


def test_a7_03_force_single_line_isort_keeps_one_member_per_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tree whose isort has `force-single-line = true`: the fix merged `get_device_type` into the file's
    `from ..utils.device import is_torch_npu_available` and the created NPU spec imported its GPU config in the
    wrapped form; the tree's `ruff check` failed I001 on both."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(
        text.replace(
            'known-first-party = ["veomni"]', 'known-first-party = ["veomni"]\nforce-single-line = true'
        ),
        encoding="utf-8",
    )
    models = root / "veomni" / "models"
    auto, gpu_spec = models / "auto.py", models / "transformers" / "llama" / "llama_gpu_patch_gen_config.py"
    import subprocess

    from npu_lint.core.tools import ruff_binary

    subprocess.run(  # the tree as a force-single-line user keeps it: clean under its own ruff
        [str(ruff_binary()), "check", "--no-cache", "--fix", "--select", "I001", str(auto), str(gpu_spec)],
        cwd=root,
        capture_output=True,
        check=False,
    )
    assert "I001" not in _ruff_check(root, auto, gpu_spec)
    main(
        [
            "check",
            "--no-cache",
            "--fix",
            "--unsafe-fixes",
            "--select",
            "NPU102,NPU501",
            str(auto),
            str(gpu_spec),
        ]
    )
    capsys.readouterr()
    npu_spec = gpu_spec.with_name("llama_npu_patch_gen_config.py")
    assert npu_spec.is_file()
    assert "get_device_type" in auto.read_text(encoding="utf-8")
    assert "I001" not in _ruff_check(root, auto, npu_spec)


def test_a7_04_a_model_package_linked_into_an_op_slot_tree_takes_that_trees_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """veomni-main (OpSlot) with `llama` a symbolic link to a checkout elsewhere: the tree was looked for from
    the link's real path only, none was found, and the run used the built-in VeomniOp catalog: messages said
    "Build a VeomniOp handle" and the unsafe fix migrated the GPU spec to `veomni.ops.VeomniOp` and
    `veomni.models_kernel.utils.op_utils`, which this tree does not have."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    link = root / "veomni" / "models" / "transformers" / "llama"
    real = tmp_path / "elsewhere" / "llama"
    real.parent.mkdir()
    shutil.move(str(link), str(real))
    link.symlink_to(real, target_is_directory=True)
    main(["check", "--no-cache", "--output-format", "concise", str(link)])
    out = capsys.readouterr()
    assert "OpSlot generation" in out.err
    assert "Build a VeomniOp handle" not in out.out
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(link)])
    capsys.readouterr()
    spec = (real / "llama_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "VeomniOp" not in spec and "models_kernel" not in spec


def test_a7_05_audit_does_not_pass_registration_on_a_registry_the_tree_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A package copied from an OpSlot tree registers on `from ...loader import MODELING_REGISTRY`; the
    VeomniOp tree has no `veomni/models_kernel/loader.py` (its registry is `veomni.models_kernel.registry`).
    The checklist said `[x] pass: every model type registered`, though importing the package fails."""
    root = _mixed_tree(tmp_path)
    package = root / "veomni" / "models_kernel" / "transformers" / "seed_oss"
    main(["audit", str(package)])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "every model type registered" in x)
    assert "**FAIL**" in line and "`...loader`" in line
    main(["audit", str(root / "veomni" / "models_kernel" / "transformers" / "qwen3")])
    line = next(x for x in capsys.readouterr().out.splitlines() if "every model type registered" in x)
    assert "**pass**" in line


def test_a7_07_the_dispatch_migration_places_a_copied_signatures_import_in_its_isort_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The VeomniOp tree has `[tool.ruff]` with isort (I) selected. Migrating seed_oss's specs copies
    `SeedOssAttention.__init__(self, config: SeedOssConfig, ...)` and imported `SeedOssConfig` from transformers
    after the first-party `veomni` block: the tree's `ruff check` failed I001 on both specs."""
    import subprocess

    from npu_lint.core.tools import ruff_binary

    root = _mixed_tree(tmp_path)
    package = root / "veomni" / "models_kernel" / "transformers" / "seed_oss"
    specs = sorted(package.glob("*_patch_gen_config.py"))
    for argv in (["check", "--fix", "-q"], ["format", "-q"]):  # the user's tree passes its own `make quality`
        subprocess.run([str(ruff_binary()), *argv, "--no-cache", *map(str, specs)], cwd=root, check=False)
    assert "I001" not in _ruff_check(root, *specs)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(package)])
    capsys.readouterr()
    gpu = (package / "seed_oss_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "import SeedOssConfig" in gpu
    assert _ruff_check(root, *specs).strip() in ("", "All checks passed!")


def _hand_written_llama_npu_spec(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    """The VeomniOp tree with a hand-written llama NPU spec that re-registers three GPU forwards, not the
    `__init__` overrides that build their handles (NPU208)."""
    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    (root / "veomni" / "utils" / "model_outputs.py").write_text(  # the partial corpus lacks this module
        "".join(
            f"class {n}:\n    pass\n\n\n"
            for n in ("FusedLinearAuxOutput", "FusedLinearAuxOutputMixin", "CausalLMOutputWithLogProbs")
        ).rstrip()
        + "\n",
        encoding="utf-8",
    )
    package = root / "veomni" / "models_kernel" / "transformers" / "llama"
    gpu = "veomni.models_kernel.transformers.llama.llama_gpu_patch_gen_config"
    spec = package / "llama_npu_patch_gen_config.py"
    spec.write_text(
        f'"""Llama on Ascend NPU, written by hand."""\n\nfrom {gpu} import (\n'
        "    llama_forcausallm_forward_patched,\n    llama_mlp_forward_patched,\n"
        "    llama_rmsnorm_forward_patched,\n)\nfrom veomni.patchgen.patch_spec import PatchConfig\n\n\n"
        'config = PatchConfig(\n    source_module="transformers.models.llama.modeling_llama",\n'
        '    target_file="patched_modeling_llama_npu.py",\n    description="Llama on NPU",\n)\n\n'
        'config.override_method("LlamaRMSNorm.forward", replacement=llama_rmsnorm_forward_patched)\n'
        'config.override_method("LlamaMLP.forward", replacement=llama_mlp_forward_patched)\n'
        'config.override_method("LlamaForCausalLM.forward", replacement=llama_forcausallm_forward_patched)\n',
        encoding="utf-8",
    )
    return root, package, spec, gpu


def test_a7_08_npu208_fix_merges_the_reused_inits_into_the_specs_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-written NPU spec on the VeomniOp tree re-registers three GPU forwards (imported in one
    `from <gpu spec> import (...)`) but not the `__init__` overrides that build their handles. NPU208's fix
    added a second `from <gpu spec> import (...)` with unsorted members: the tree's `ruff check` failed I001."""
    root, package, spec, gpu = _hand_written_llama_npu_spec(tmp_path)
    assert _ruff_check(root, spec).strip() == "All checks passed!"
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU208", str(package)])
    capsys.readouterr()
    text = spec.read_text(encoding="utf-8")
    assert "replacement=llama_rmsnorm_init_patched" in text
    assert text.count(f"from {gpu} import") == 1
    assert _ruff_check(root, spec).strip() == "All checks passed!"


def test_a7_24_audit_fails_registration_of_a_package_its_parent_does_not_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """veomni-main with `seed_oss` dropped from `veomni/models/transformers/__init__.py`'s `from . import (...)`
    (a new model a user forgot to add): its `@MODELING_REGISTRY.register("seed_oss")` never runs, yet the
    checklist said `[x] pass: every model type registered`."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    parent = root / "veomni" / "models" / "transformers" / "__init__.py"
    text = parent.read_text(encoding="utf-8")
    parent.write_text(text.replace("    seed_oss,\n", "").replace('    "seed_oss",\n', ""), encoding="utf-8")
    main(["audit", str(parent.parent / "seed_oss")])
    line = next(x for x in capsys.readouterr().out.splitlines() if "every model type registered" in x)
    assert "**FAIL**" in line and "does not import `seed_oss`" in line
    main(["audit", str(parent.parent / "qwen3")])
    line = next(x for x in capsys.readouterr().out.splitlines() if "every model type registered" in x)
    assert "**pass**" in line


@pytest.mark.parametrize("how", ["noqa", "link"])
def test_a7_06_no_init_switch_to_an_npu_module_nothing_will_generate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """llama with NPU501 suppressed on its spec (`# noqa: NPU501`), or reached through a link (NPU501's creation
    refused): no NPU spec exists or is created in the run, yet NPU502's unsafe fix switched `__init__.py` to
    `generated.patched_modeling_llama_npu` under `IS_NPU_AVAILABLE`: NPU hosts then fail to import the
    package."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    package = root / "veomni" / "models" / "transformers" / "llama"
    if how == "noqa":
        spec = package / "llama_gpu_patch_gen_config.py"
        text = spec.read_text(encoding="utf-8")
        spec.write_text(
            text.replace("config = PatchConfig(\n", "config = PatchConfig(  # noqa: NPU501\n"), "utf-8"
        )
    else:
        real = tmp_path / "elsewhere" / "llama"
        real.parent.mkdir()
        shutil.move(str(package), str(real))
        package.symlink_to(real, target_is_directory=True)
    init = package / "__init__.py"
    before = init.read_text(encoding="utf-8")
    monkeypatch.chdir(root)  # run from the tree, as a user does (see A7-25 for a run from another project)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(package)])
    out = capsys.readouterr()
    assert not (package / "llama_npu_patch_gen_config.py").exists()
    assert init.read_text(encoding="utf-8") == before
    assert "NPU502" in out.out


def test_a7_22_npu208_help_names_what_its_fix_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NPU208's fix on a spec without any OpSlot re-registers `__init__` overrides; its help said "Migrate OpSlot
    dispatch to VeomniOp handles"."""
    _root, _package, spec, _gpu = _hand_written_llama_npu_spec(tmp_path)
    main(["check", "--no-cache", "--unsafe-fixes", "--show-fixes", "--select", "NPU208", str(spec)])
    out = capsys.readouterr().out
    assert "NPU208" in out
    assert "Migrate OpSlot dispatch" not in out
    assert "Re-register the GPU spec's `__init__` overrides" in out


def test_a7_25_no_spec_created_through_a_linked_package_from_another_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama linked into the tree, the run started from another directory whose pyproject configures npu-lint: the
    link check walked from that project's root and from the spec's own (linked) directory, found no link, and the
    NPU spec was created in the link's target. It also walks from the VeOmni tree now."""
    root = corpus.shared_tree_copy("veomni-main", tmp_path / "main")
    package = root / "veomni" / "models" / "transformers" / "llama"
    real = tmp_path / "elsewhere" / "llama"
    real.parent.mkdir()
    shutil.move(str(package), str(real))
    package.symlink_to(real, target_is_directory=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[tool.npu-lint]\nselect = ["NPU"]\n', encoding="utf-8")
    monkeypatch.chdir(other)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(package.absolute())])
    out = capsys.readouterr()
    assert not (real / "llama_npu_patch_gen_config.py").exists()
    assert "is a symbolic link" in out.err + out.out
