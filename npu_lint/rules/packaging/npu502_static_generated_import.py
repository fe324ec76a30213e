"""NPU502 static-generated-import."""

from __future__ import annotations

import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import Applicability, Diagnostic, Fix
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import _diag, _guarded, _linted, packages
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project
from npu_lint.veomni.registration import (
    find_partial_switches,
    find_static_imports,
    flag_bound,
    flag_import_module,
)


def _missing_module_steps(pkg: object, npu_file: str) -> str:
    """What must happen before the NPU module can be imported: the NPU spec (when missing) and patchgen."""
    spec = None
    for path in pkg.npu_specs:  # type: ignore[attr-defined]
        loaded = patchgen.load_spec(path)
        if loaded is not None and patchgen.effective_target_file(loaded) == npu_file:
            spec = path
    if spec is None and pkg.gpu_specs:  # type: ignore[attr-defined]
        spec = patchgen.npu_spec_path(pkg.gpu_specs[0])  # type: ignore[attr-defined]
        command = patchgen.regen_command(spec)
        return (
            f"create the NPU spec `{os.path.basename(spec)}` (NPU501) and generate it with `{command}` first"
        )
    command = patchgen.regen_command(spec) if spec else "patchgen"
    return f"generate it with `{command}` first"


def _missing_module_reason(pkg: object, npu_file: str) -> str:
    """Why switching to a generated module that does not exist yet is unsafe, naming the command that makes it."""
    spec = None
    for path in pkg.npu_specs:  # type: ignore[attr-defined]
        loaded = patchgen.load_spec(path)
        if loaded is not None and patchgen.effective_target_file(loaded) == npu_file:
            spec = path
    created = ""
    if spec is None and pkg.gpu_specs:  # type: ignore[attr-defined]
        spec = patchgen.npu_spec_path(pkg.gpu_specs[0])  # type: ignore[attr-defined]
        created = f" after NPU501's fix creates `{os.path.basename(spec)}`"
    command = patchgen.regen_command(spec) if spec else "patchgen"
    return (
        f"`generated/{npu_file}` does not exist yet: NPU hosts fail to import the package until "
        f"`{command}` has run{created}"
    )


class StaticGeneratedImport(ProjectRule):
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    code = "NPU502"
    name = "static-generated-import"
    summary = (
        "`__init__.py` imports the GPU generated module without choosing by `IS_NPU_AVAILABLE` (or chooses by "
        "device tests with no `else`, so some host imports neither module)."
    )
    why = (
        "A registered modeling function that always imports `generated.patched_modeling_<m>_gpu` gives NPU hosts "
        "the GPU module even when an NPU spec exists (or is being created): the NPU patches are never used. "
        "Migrated packages choose at import time: `if IS_NPU_AVAILABLE: from .generated.patched_modeling_<m>_npu "
        "import ...` else the `_gpu` module, in every registered function. The choice is read through the shared "
        "selection resolver: an alias (`use_npu = IS_NPU_AVAILABLE`), a `not` form, a helper returning the flag or "
        "an early return on the NPU branch is the same switch. A switch made only of device tests with no `else` "
        "(`if IS_CUDA_AVAILABLE: <gpu> elif IS_NPU_AVAILABLE: <npu>`) leaves a host where no test holds (CPU-only, "
        "or an Ascend host whose `torch.cuda.is_available()` answers True under `transfer_to_npu`, taking the GPU "
        "branch first) without the module it needs: test `IS_NPU_AVAILABLE` and import the `_gpu` module in `else`."
    )
    bad = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            fixed="""
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the package has `toy_gpu_patch_gen_config.py` and `toy_npu_patch_gen_config.py`",
        ),
        Example(
            """
            from ....utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                if IS_CUDA_AVAILABLE:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                elif IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="device tests with no `else`: a CPU-only host binds no class",
        ),
    )
    good = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = (
        "Unsafe: NPU hosts then import `patched_modeling_<m>_npu`, which must have been generated "
        "(`patchgen <m>_npu_patch_gen_config ...`). The fix rewrites each unconditional import in place "
        "(every registered function; the architecture fallback logic is untouched) and imports "
        "`IS_NPU_AVAILABLE` the way sibling packages do (relative `....utils.device`, or `veomni.utils.device`)."
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        for pkg in packages(paths):
            if pkg.init is None or os.path.normpath(pkg.init) not in linted:
                continue
            parsed = patchgen.load_file(pkg.init)
            if parsed is None or parsed.tree is None:
                continue
            for switch, func in find_partial_switches(parsed.tree):
                where = f"`{func.name}`" if func is not None else "the module"
                yield _diag(
                    self,
                    pkg.init,
                    switch.lineno,
                    f"{where} chooses its generated module by device tests with no `else`: a host where no test "
                    f"holds (CPU-only, or an Ascend host whose CUDA probe answers True) imports neither module and "
                    f"its classes are unbound; test `IS_NPU_AVAILABLE` for the `_npu` module and import the `_gpu` "
                    f"one in `else`",
                    col=switch.col_offset,
                    end_line=switch.lineno,
                    end_col=switch.col_offset + 2,
                    basis=parsed.text,
                )
            static = find_static_imports(parsed.tree)
            if not static:
                continue
            targets = pkg.targets()
            existing = {os.path.basename(g) for g in pkg.generated}
            flag_edit = None
            if not flag_bound(parsed.tree):
                module = flag_import_module(pkg.init, parsed.tree)
                flag_edit = self.fixer("npu_lint.fixers.init_switch:flag_import_edit")(
                    parsed.text, parsed.tree, module
                )
            for item in static:
                gpu_file, npu_file = item.gpu_module + ".py", item.npu_module + ".py"
                if not ({gpu_file, npu_file} & targets or npu_file in existing):
                    continue  # no spec produces this module: nothing to choose from
                edit = self.fixer("npu_lint.fixers.init_switch:switch_edit")(parsed.text, item)
                fix = None
                if edit is not None:
                    edits = (edit,) if flag_edit is None else (flag_edit, edit)
                    reason = "NPU hosts import the NPU generated module, which patchgen must have generated"
                    if npu_file not in existing:
                        reason = _missing_module_reason(pkg, npu_file)
                    title = f"Choose `{item.npu_module}` when `IS_NPU_AVAILABLE`"
                    if npu_file not in existing:
                        title += " (it does not exist yet: generate it first)"
                    fix = Fix(
                        title,
                        edits,
                        Applicability.UNSAFE,
                        reason=reason,
                    )
                where = f"`{item.function}`" if item.function else "the module"
                types = ", ".join(f"`{t}`" for t in item.model_types)
                registers = f" (registers {types})" if types else ""
                node = item.node
                missing = ""
                if npu_file not in existing:
                    missing = (
                        f"; `{item.npu_module}` does not exist yet: {_missing_module_steps(pkg, npu_file)}"
                    )
                yield _diag(
                    self,
                    pkg.init,
                    node.lineno,
                    f"{where}{registers} imports `{item.gpu_module}` on every device; choose "
                    f"`{item.npu_module}` with `if IS_NPU_AVAILABLE:`{missing}",
                    col=node.col_offset,
                    end_line=node.end_lineno or node.lineno,
                    end_col=node.end_col_offset,
                    fix=fix,
                    basis=parsed.text,
                )
