"""ModuleIndex: does ``from module import name`` resolve in the tree, statically."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.veomni.imports import MAX_REEXPORT_DEPTH, ModuleIndex, resolve_relative
from tests.rules.snippets import write_file

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"


@pytest.mark.parametrize(
    ("tree", "module", "name", "expected"),
    [
        # re-export through a package __init__ (relative import)
        ("veomni_op_models_kernel", "veomni.ops", "VeomniOp", True),
        ("veomni_op_models_kernel", "veomni.ops.registry", "VeomniOp", True),
        ("veomni_op_models_kernel", "veomni.ops", "OpSlot", False),
        ("veomni_op_models_kernel", "veomni.ops", "kernels", True),  # a submodule
        # an absolute import binds the name in the importing module
        ("veomni_op_models_kernel", "veomni.models_kernel.utils.op_utils", "VeomniOp", True),
        ("veomni_op_models_kernel", "veomni.models_kernel.utils.op_utils", "Tensor", True),  # external
        ("veomni_op_models_kernel", "veomni.models_kernel.utils.op_utils", "linear_bias", True),
        ("veomni_op_models_kernel", "veomni.models_kernel.utils.op_utils", "resolve_kernel_impl", False),
        ("veomni_op_models_kernel", "veomni.ops.config", "resolve_op_impl", False),  # no such module
        ("veomni_op_models_kernel", "veomni.ops.kernels.cross_entropy", "ForCausalLMLoss", True),
        # the OpSlot tree: the handle lives in veomni.ops.dispatch, re-exported by veomni.ops
        ("op_slot_models", "veomni.ops.dispatch", "OpSlot", True),
        ("op_slot_models", "veomni.ops", "OpSlot", True),
        ("op_slot_models", "veomni.ops", "VeomniOp", False),
        ("op_slot_models", "veomni.ops.kernel_registry", "KERNEL_REGISTRY", True),  # an assignment
        ("op_slot_models", "veomni.utils.device", "IS_NPU_AVAILABLE", True),
        ("op_slot_models", "veomni.utils.device", "get_dist_comm_backend", False),
        # a star re-export governed by __all__, and a relative import inside a module
        ("veomni_op_ops_config", "veomni.ops", "VeomniOp", True),
        ("veomni_op_ops_config", "veomni.ops", "register_op", True),
        ("veomni_op_ops_config", "veomni.ops", "resolve_op", False),
        ("veomni_op_ops_config", "veomni.ops.config", "VeomniOp", True),
        ("veomni_op_ops_config", "veomni.ops.config", "resolve_op_impl", True),
        ("veomni_kernel_models_kernel", "veomni.kernels", "VeomniKernel", True),
        ("veomni_kernel_models_kernel", "veomni.kernels", "register_kernel", True),
        ("veomni_kernel_models_kernel", "veomni.kernels", "VeomniOp", False),
        ("veomni_kernel_models_kernel", "veomni.models_kernel.utils.loss_utils", "ForCausalLMLoss", True),
        ("veomni_kernel_models_kernel", "veomni.models_kernel.loss_utils", "ForCausalLMLoss", False),
    ],
)
def test_defines(tree: str, module: str, name: str, expected: bool) -> None:
    assert ModuleIndex(TREES / tree).defines(module, name) is expected


def test_can_import_and_origin() -> None:
    index = ModuleIndex(TREES / "veomni_op_models_kernel")
    assert index.can_import("veomni.models_kernel.utils.op_utils", ["resolve_op_impl", "attention_op"])
    assert not index.can_import("veomni.models_kernel.utils.op_utils", ["resolve_op_impl", "nope"])
    assert index.origin("veomni.ops", "VeomniOp") == "veomni.ops.registry"
    assert index.origin("veomni.ops", "nope") is None
    assert index.has_module("veomni.ops.kernels.rms_norm")
    assert not index.has_module("veomni.ops.kernels.nope")
    assert not index.has_module("")


@pytest.mark.parametrize(
    ("module", "is_package", "level", "target", "expected"),
    [
        ("veomni.ops", True, 1, "registry", "veomni.ops.registry"),
        ("veomni.ops.config", False, 1, "registry", "veomni.ops.registry"),
        ("veomni.ops.kernels.rms_norm", True, 3, "registry", "veomni.ops.registry"),
        ("veomni.models.transformers.toy", True, 3, "loader", "veomni.models.loader"),
        ("veomni.ops", True, 2, None, "veomni"),
        ("veomni.ops.config", False, 0, "torch", "torch"),
        ("veomni", True, 3, "x", None),  # beyond the top-level package
    ],
)
def test_resolve_relative(
    module: str, is_package: bool, level: int, target: str | None, expected: str
) -> None:
    assert resolve_relative(module, is_package, level, target) == expected


def test_bindings_of_every_kind(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "pkg/__init__.py",
        """
        from .impl import exported as renamed
        from .impl import *
        from . import sub
        import os.path
        import json as js

        try:
            from .fast import speedy
        except ImportError:
            speedy = None
        if True:
            CONST: int = 1
        a, (b, *c) = 1, (2, 3)
        __all__ = ["lazy_name"]


        def __getattr__(name):
            raise AttributeError(name)
        """,
    )
    write_file(
        tmp_path,
        "pkg/impl.py",
        "exported = 1\n__all__ = ['exported', 'starred']\nstarred = 2\n_private = 3\n",
    )
    write_file(tmp_path, "pkg/sub.py", "")
    index = ModuleIndex(tmp_path)
    for name in (
        "renamed",
        "exported",
        "starred",
        "sub",
        "os",
        "js",
        "speedy",
        "CONST",
        "a",
        "b",
        "c",
        "lazy_name",
    ):
        assert index.defines("pkg", name), name
    for name in ("_private", "json", "path", "missing", "fast"):
        assert not index.defines("pkg", name), name
    assert index.defines("pkg.impl", "_private")


def test_reexport_chains_are_followed_a_bounded_number_of_levels(tmp_path: Path) -> None:
    depth = MAX_REEXPORT_DEPTH + 3
    for i in range(depth):
        write_file(tmp_path, f"chain/m{i}.py", f"from .m{i + 1} import target\n")
    write_file(tmp_path, f"chain/m{depth}.py", "target = 1\n")
    write_file(tmp_path, "chain/__init__.py", "")
    index = ModuleIndex(tmp_path)
    assert index.defines(f"chain.m{depth - 2}", "target")  # a short chain resolves
    assert not index.defines("chain.m0", "target")  # too long: not shown to resolve
    # a cycle terminates
    write_file(tmp_path, "cyc/__init__.py", "")
    write_file(tmp_path, "cyc/a.py", "from .b import x\n")
    write_file(tmp_path, "cyc/b.py", "from .a import x\n")
    assert not ModuleIndex(tmp_path).defines("cyc.a", "x")


def test_unparsable_module_defines_nothing(tmp_path: Path) -> None:
    write_file(tmp_path, "bad/__init__.py", "def broken(:\n")
    index = ModuleIndex(tmp_path)
    assert index.has_module("bad")
    assert not index.defines("bad", "broken")


def test_a_shim_forwarding_an_external_package_resolves_public_names(tmp_path) -> None:
    from npu_lint.veomni.imports import ModuleIndex

    shim = tmp_path / "veomni" / "patchgen"
    shim.mkdir(parents=True)
    (tmp_path / "veomni" / "__init__.py").write_text("")
    (shim / "__init__.py").write_text("")
    (shim / "patch_spec.py").write_text("from patchgen.patch_spec import *  # noqa: F403\n")
    index = ModuleIndex(tmp_path)
    assert index.defines("veomni.patchgen.patch_spec", "PatchConfig")
    assert not index.defines("veomni.patchgen.patch_spec", "_private")
