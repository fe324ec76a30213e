"""The project index (npu_lint.veomni.project): VeOmni root, dispatch generation, registry rows, model packages."""

from __future__ import annotations

import os
import pickle
import sys
import types
from pathlib import Path

import pytest

from npu_lint.core.config import ConfigError
from npu_lint.veomni.catalog import ANY, BUILTIN_ROWS, GPU, MLU, NPU, OpRow
from npu_lint.veomni.project import OP_SLOT, VEOMNI_OP, Project, load_project, read_live_rows
from tests.rules.snippets import write_file


@pytest.fixture
def veomni_op_tree(tmp_path: Path) -> Path:
    """A VeomniOp-generation tree: registry.py defines VeomniOp; kernels register rows."""
    write_file(tmp_path, "veomni/ops/__init__.py", "from .registry import VeomniOp, register_op\n")
    write_file(
        tmp_path,
        "veomni/ops/registry.py",
        "class VeomniOp:\n    pass\n\n\ndef register_op(*a, **k):\n    pass\n",
    )
    write_file(
        tmp_path,
        "veomni/ops/kernels/rms_norm/__init__.py",
        """
        from veomni.ops import register_op
        from veomni.ops.platform import GpuKernelRequirement, MluKernelRequirement, NpuKernelRequirement


        def _f(x):
            return x


        register_op("rms_norm", "standard", "eager", wrapper=_f)
        register_op("rms_norm", "standard", "npu", wrapper=_f, requirement=NpuKernelRequirement())
        register_op("rms_norm", "standard", "liger_kernel", wrapper=_f, requirement=GpuKernelRequirement(platforms=("cuda",)))
        register_op(op="rms_norm", variant="offset", impl="mlu", wrapper=_f, requirement=MluKernelRequirement())
        register_op("rms_norm", "offset", "eager", wrapper=_f, requirement=None)
        name = "computed"
        register_op("rms_norm", name, "eager", wrapper=_f)  # a module constant: read
        register_op("rms_norm", _f(name), "eager", wrapper=_f)  # computed: skipped
        """,
    )
    write_file(tmp_path, "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py", "config = None\n")
    write_file(tmp_path, "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py", "x = 1\n")
    write_file(tmp_path, "veomni/models/transformers/other/modeling_other.py", "x = 1\n")
    return tmp_path


def test_veomni_op_tree(veomni_op_tree: Path) -> None:
    project = load_project([str(veomni_op_tree / "veomni" / "models" / "transformers" / "toy")])
    assert project.root == str(veomni_op_tree.resolve())
    assert project.generation == VEOMNI_OP
    assert set(project.registered) == {
        OpRow("rms_norm", "standard", "eager", ANY),
        OpRow("rms_norm", "standard", "npu", NPU),
        OpRow("rms_norm", "standard", "liger_kernel", GPU),
        OpRow("rms_norm", "offset", "mlu", MLU),
        OpRow("rms_norm", "offset", "eager", ANY),
        OpRow("rms_norm", "computed", "eager", ANY),
    }
    # a VeomniOp tree's own rows are authoritative
    assert project.rows == project.registered
    assert project.has_triple("rms_norm", "standard", "npu")
    assert not project.has_triple("rope", "full", "eager")
    assert project.model_packages == (str((veomni_op_tree / "veomni/models/transformers/toy").resolve()),)
    assert "rms_norm/standard/npu" in project.row_sources


def test_fingerprint_follows_rows(veomni_op_tree: Path) -> None:
    before = load_project([str(veomni_op_tree)]).fingerprint()
    assert load_project([str(veomni_op_tree)]).fingerprint() == before  # stable
    kernel = veomni_op_tree / "veomni/ops/kernels/rms_norm/__init__.py"
    kernel.write_text(kernel.read_text().replace('"liger_kernel"', '"triton"'), encoding="utf-8")
    assert load_project([str(veomni_op_tree)]).fingerprint() != before


def test_project_is_picklable(veomni_op_tree: Path) -> None:
    project = load_project([str(veomni_op_tree)])
    clone = pickle.loads(pickle.dumps(project))
    assert clone == project
    assert clone.fingerprint() == project.fingerprint()


def test_out_of_tree_falls_back_to_builtin_rows(tmp_path: Path) -> None:
    write_file(tmp_path, "mymodel/mymodel_gpu_patch_gen_config.py", "config = None\n")
    write_file(tmp_path, "mymodel/modeling.py", "x = 1\n")
    project = load_project([str(tmp_path / "mymodel" / "modeling.py")])
    assert project.root is None and project.generation is None
    assert project.rows == BUILTIN_ROWS
    assert project.rows_origin == "the built-in catalog"
    assert project.model_packages == (str((tmp_path / "mymodel").resolve()),)
    assert Project().rows == BUILTIN_ROWS


def test_unknown_generation_merges_tree_rows_with_catalog(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "veomni/ops/kernels/extra.py",
        'from veomni.ops import register_op\nregister_op("rope", "full", "flash_rope", wrapper=None)\n',
    )
    project = load_project([str(tmp_path)])
    assert project.generation is None
    assert project.has_triple("rope", "full", "flash_rope")  # the tree's row
    assert project.has_triple("rms_norm", "offset", "npu")  # the catalog's


def test_wheel_index(tmp_path: Path) -> None:
    from corpus import veomni_wheel_root

    root = veomni_wheel_root()
    project = load_project([str(root / "veomni" / "models")])  # its speed is measured in bench/, not here
    assert project.root == str(root.resolve())
    assert project.generation == OP_SLOT
    # 0.1.12's register_op(OpSpec(...)) is the config registry, not VeomniOp rows
    assert project.registered == ()
    assert project.rows == BUILTIN_ROWS
    slots = set(project.slot_rows)
    # KernelSpec rows, including both rows of the `for _name, _hw in (...)` loop in cross_entropy
    assert OpRow("cross_entropy_loss", "causal", "npu", NPU) in slots
    assert OpRow("cross_entropy_loss", "causal", "chunk_loss", ANY) in slots
    assert OpRow("rms_norm", "qwen3_5", "npu", NPU) in slots
    assert OpRow("rms_norm", "standard", "liger_kernel", GPU) in slots  # from veomni/ops/liger
    assert OpRow("mhc", "pre", "tilelang", GPU) in slots  # `for variant, ... in (...)` loop
    assert OpRow("moe_experts", "standard", "triton", GPU) in slots  # device_type=["gpu", "mlu"]
    assert len(slots) == 35
    # 18 with a patch spec, 10 found by their registration (diffusers, flux, movqgan, ...)
    assert len(project.model_packages) == 28
    assert (
        sum(
            any(f.endswith("_gpu_patch_gen_config.py") for f in os.listdir(p)) for p in project.model_packages
        )
        == 18
    )
    assert all((Path(p) / "__init__.py").is_file() for p in project.model_packages)


def test_live_registry_needs_veomni(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "veomni", None)  # not importable
    with pytest.raises(ConfigError, match="cannot import veomni.ops"):
        read_live_rows()


def test_live_registry_reads_op_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    class Requirement:
        device = "npu"

    registry = types.SimpleNamespace(
        _entries={
            ("rms_norm", "offset", "eager", "any"): types.SimpleNamespace(requirement=None),
            ("rms_norm", "offset", "npu", "npu"): types.SimpleNamespace(requirement=Requirement()),
            ("rope", "full", "liger_kernel", "cuda"): types.SimpleNamespace(requirement=None),
        }
    )
    veomni = types.ModuleType("veomni")
    ops = types.ModuleType("veomni.ops")
    ops.OP_REGISTRY = registry  # type: ignore[attr-defined]
    veomni.ops = ops  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "veomni", veomni)
    monkeypatch.setitem(sys.modules, "veomni.ops", ops)
    project = Project()
    before = project.fingerprint()
    project.live_rows = tuple(read_live_rows())  # what the child process of load_live_registry answers
    assert set(project.rows) == {
        OpRow("rms_norm", "offset", "eager", ANY),
        OpRow("rms_norm", "offset", "npu", NPU),
        OpRow("rope", "full", "liger_kernel", GPU),
    }
    assert project.rows_origin == "the live OP_REGISTRY"
    assert project.fingerprint() != before


def test_live_registry_on_opslot_veomni(monkeypatch: pytest.MonkeyPatch) -> None:
    veomni = types.ModuleType("veomni")
    ops = types.ModuleType("veomni.ops")
    veomni.ops = ops  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "veomni", veomni)
    monkeypatch.setitem(sys.modules, "veomni.ops", ops)
    with pytest.raises(ConfigError, match="no OP_REGISTRY"):
        read_live_rows()


def test_cli_live_registry_without_veomni(tmp_path: Path) -> None:
    import os
    import subprocess

    write_file(tmp_path, "model.py", "x = 1\n")
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_lint",
            "check",
            "--no-cache",
            "--live-registry",
            str(tmp_path / "model.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    # the child's environment has no veomni (make test installs none; tests/veomni is not on its path)
    probe = [
        sys.executable,
        "-c",
        "import importlib.util as u, sys; sys.exit(u.find_spec('veomni') is not None)",
    ]
    assert subprocess.run(probe, env=env, cwd=tmp_path).returncode == 0, "veomni is installed here"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--live-registry: cannot import veomni.ops" in proc.stderr


def test_live_registry_imports_the_tree_in_a_subprocess_only(tmp_path: Path) -> None:
    write_file(tmp_path, "veomni/__init__.py", "")
    write_file(
        tmp_path,
        "veomni/ops/__init__.py",
        """
        import types
        OP_REGISTRY = types.SimpleNamespace(
            _entries={("rms_norm", "offset", "npu", "npu"): types.SimpleNamespace(requirement=None)}
        )
        """,
    )
    before = set(sys.modules)
    project = Project(root=str(tmp_path))
    note = project.load_live_registry()
    assert "subprocess" in note and "the tree's code" in note
    assert set(project.rows) == {OpRow("rms_norm", "offset", "npu", NPU)}
    assert not {m for m in set(sys.modules) - before if m.startswith("veomni")}


def test_tree_listing_selects_what_a_pruned_walk_lists(tmp_path: Path) -> None:
    """``scanstore.list_tree`` + ``select`` give each whole-tree scan the files, in the order, that its own
    sorted ``os.walk`` pruning its skipped directory names would list (the one walk ``load_project`` shares)."""
    import os

    from npu_lint.veomni import scanstore

    for rel in (
        "veomni/__init__.py",
        "veomni/ops/b.py",
        "veomni/ops/a.py",
        "veomni/ops/generated/g.py",
        "veomni/ops/kernels/x/k.py",
        "veomni/kernels/r.py",
        "veomni/models/m/generated/patched.py",
        "veomni/models/m/spec.py",
        "veomni/tests/t.py",
        "veomni/utils/tests/deep.py",
        "veomni/.hidden/h.py",
        "veomni/__pycache__/c.py",
        "veomni/utils/notes.txt",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")

    def walked(base: Path, skip: set[str]) -> list[Path]:
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
            out.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
        return out

    listing = scanstore.list_tree(tmp_path)
    for skip in ({"__pycache__", "generated"}, {"__pycache__", "tests", "test"}, {"__pycache__", "models"}):
        assert listing.select(skip) == walked(tmp_path / "veomni", skip)
        assert listing.select(skip, under=("ops",)) == walked(tmp_path / "veomni" / "ops", skip)
    assert tmp_path / "veomni/ops/generated/g.py" not in listing.select({"generated"})
    assert tmp_path / "veomni/utils/tests/deep.py" not in listing.select({"tests"})


def test_import_sites_come_back_from_the_scans_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The import-site scan stored in the run's index decodes to the same sites (and a wrong shape is recomputed)."""
    from npu_lint.veomni import scanstore
    from npu_lint.veomni.optional import LAZY, TOP, scan_sites

    (tmp_path / "veomni/ops").mkdir(parents=True)
    (tmp_path / "veomni/ops/a.py").write_text("import os\nimport blendkit\n\n\ndef f():\n    import quack\n")
    monkeypatch.setattr(scanstore, "RACY_NS", 0)  # the file was just written: store it all the same

    class Store:
        def __init__(self) -> None:
            self.slots: dict[tuple[str, str], object] = {}

        def get_scan(self, key: str, slot: str) -> object:
            return self.slots.get((key, slot))

        def put_scan(self, key: str, value: object, slot: str) -> None:
            self.slots[(key, slot)] = value

    store = Store()
    scanstore.use_store(store)
    try:
        first = scan_sites(tmp_path)
        assert [k[1] for k in store.slots] == ["imports"]
        assert scan_sites(tmp_path) == first
        assert {k: [(s.path, s.line, s.how) for s in v] for k, v in first.items()} == {
            "blendkit": [("veomni/ops/a.py", 2, TOP)],
            "quack": [("veomni/ops/a.py", 6, LAZY)],
        }
        for key in store.slots:
            store.slots[key] = {"blendkit": [["veomni/ops/a.py", "two", TOP]]}
        assert scan_sites(tmp_path) == first
    finally:
        scanstore.use_store(None)


def test_fingerprint_ignores_import_lines_but_not_import_sites(veomni_op_tree: Path) -> None:
    """A lazy import moving down a few lines changes no finding (NPU308 names the file, not the line), so it does
    not invalidate the tree's cached results; a new import site of a package does."""
    probe = veomni_op_tree / "veomni" / "ops" / "zz_probe.py"
    probe.write_text("def f():\n    import quack\n")
    before = load_project([str(veomni_op_tree)]).fingerprint()
    probe.write_text('"""Probe."""\n\n\ndef f():\n    import quack\n')
    assert load_project([str(veomni_op_tree)]).fingerprint() == before
    probe.write_text("import quack\n\n\ndef f():\n    import quack\n")
    assert load_project([str(veomni_op_tree)]).fingerprint() != before


def test_the_server_keeps_project_scans_in_memory(
    veomni_op_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project index rebuilt by the server (after a spec edit) takes the unchanged tree's scans from memory:
    the import-site scan does not read a file again."""
    from npu_lint.lsp.server import use_scan_store
    from npu_lint.veomni import optional, scanstore
    from npu_lint.veomni.project import load_project

    monkeypatch.setattr(scanstore, "RACY_NS", 0)  # the copied tree was just written: store it all the same
    use_scan_store()
    try:
        first = load_project([str(veomni_op_tree)])
        assert isinstance(scanstore.current(), scanstore.MemoryStore)

        def no_read(*args: object, **kwargs: object) -> None:
            raise AssertionError("the import-site scan read a file again")

        monkeypatch.setattr(optional, "read_regular", no_read)
        assert load_project([str(veomni_op_tree)]).import_sites == first.import_sites
        probe = veomni_op_tree / "veomni" / "ops" / "zz_probe.py"
        probe.write_text("import quack\n")
        with pytest.raises(AssertionError, match="read a file again"):
            load_project([str(veomni_op_tree)])
    finally:
        scanstore.use_store(None)


def test_memory_store_is_bounded() -> None:
    from npu_lint.veomni.scanstore import MemoryStore

    store = MemoryStore(limit=2)
    for i in range(3):
        store.put_scan(f"k{i}", i, "imports")
    assert [store.get_scan(f"k{i}", "imports") for i in range(3)] == [None, 1, 2]
