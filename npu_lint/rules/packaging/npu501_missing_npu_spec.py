"""NPU501 missing-npu-spec."""

from __future__ import annotations

import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import CREATES_FILE_REASON, Applicability, CreateFile, Diagnostic, Fix
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import _diag, _first_line_range, _guarded, _linted, packages
from npu_lint.veomni import patchgen
from npu_lint.veomni.patchgen import npu_spec_path, npu_target_file
from npu_lint.veomni.project import Project


class MissingNpuSpec(ProjectRule):
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    code = "NPU501"
    name = "missing-npu-spec"
    summary = "A model package has a GPU patch spec but no NPU sibling spec."
    why = (
        "VeOmni generates one patched modeling file per device from a patch spec "
        "(`<m>_gpu_patch_gen_config.py` -> `generated/patched_modeling_<m>_gpu.py`). Without "
        "`<m>_npu_patch_gen_config.py` there is no NPU module to load on an Ascend host, so the model cannot be "
        "migrated by switching the import. The smallest sibling is `config = deepcopy(gpu_config)` with its own "
        "`target_file`: every device-neutral GPU patch is reused, and only what the NPU path needs is added."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_gpu.py",
                description="Toy model with VeOmni patches",
            )
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="`toy_gpu_patch_gen_config.py` with no `toy_npu_patch_gen_config.py` next to it",
        ),
    )
    good = (
        Example(
            '''
            """NPU sibling of the toy GPU spec.

            Regen command:
            patchgen veomni.models.transformers.toy.toy_npu_patch_gen_config -o veomni/models/transformers/toy/generated --diff -v
            """

            from copy import deepcopy

            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config


            config = deepcopy(gpu_config)
            config.target_file = "patched_modeling_toy_npu.py"
            config.description = "Toy model with VeOmni patches (Ascend NPU)"
            ''',
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the sibling npu-lint creates (the GPU spec is device-neutral)",
        ),
    )
    fix_safety = (
        "Creates `<m>_npu_patch_gen_config.py` (the `deepcopy(gpu_config)` shape, with the patchgen command in "
        "its docstring; ruff-formatted when ruff is installed). Unsafe, always: creating a file is never a safe "
        "fix (`--fix --unsafe-fixes` creates it; nothing imports it until the package's `__init__.py` chooses "
        "the NPU module (NPU502) and patchgen has been run). When the GPU spec replaces classes with GPU-only "
        "libraries (liger_kernel...), those are listed in the new file and need NPU replacements first."
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        build_npu_spec, format_many = (
            self.fixer("npu_lint.fixers.npu_spec:build_npu_spec"),
            self.fixer("npu_lint.fixers.npu_spec:format_many"),
        )
        linted = _linted(paths)
        found = []
        for pkg in packages(paths):
            targets = None
            for gpu in pkg.gpu_specs:
                if os.path.normpath(gpu) not in linted:
                    continue
                npu_path = npu_spec_path(gpu)
                if os.path.isfile(npu_path):  # a directory of that name is no spec
                    continue
                spec = patchgen.load_spec(gpu)
                if spec is None or not spec.parsed or spec.config_node is None:
                    continue
                if targets is None:
                    targets = pkg.targets()
                npu_target = npu_target_file(spec)
                if npu_target in targets:
                    continue  # an NPU spec under another name exists
                found.append((pkg, gpu, spec, npu_path, npu_target, build_npu_spec(gpu, format=False)))
        plans = [(plan.content, plan.path) for *_, plan in found if plan is not None and not plan.refused]
        # formatting runs ruff in a subprocess: only worth it when the file will be written or shown
        texts = format_many(plans) if self.fix_mode else [content for content, _ in plans]
        for pkg, gpu, spec, npu_path, npu_target, plan in found:
            fix = None
            if plan is not None and plan.refused:
                fix = Fix(
                    f"Create {os.path.basename(plan.path)}", (), Applicability.DISPLAY, (), plan.refused
                )
            elif plan is not None:
                plan.content = texts.pop(0)
                reason = CREATES_FILE_REASON
                if plan.gpu_only:
                    reason += (
                        "; the GPU spec uses GPU-only replacements that the NPU path must override: "
                        + "; ".join(plan.gpu_only)
                    )
                fix = Fix(
                    f"Create {os.path.basename(plan.path)} (deepcopy of the GPU spec), then run "
                    f"`{plan.command}`",
                    (),
                    Applicability.UNSAFE,
                    (CreateFile(plan.path, plan.content),),
                    reason,
                )
            col, end = _first_line_range(gpu, spec.config_line)
            yield _diag(
                self,
                gpu,
                spec.config_line,
                f"model package `{os.path.basename(pkg.dir) or '.'}` has a GPU patch spec but no NPU sibling "
                f"`{os.path.basename(npu_path)}` (target `{npu_target}`)",
                col=col,
                end_col=end,
                fix=fix,
            )
