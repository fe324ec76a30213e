"""NPU507 partial-gpu-mirror."""

from __future__ import annotations

import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import _diag, _first_line_range, _guarded, _linted, packages
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project

# what an NPU spec built on a fresh ``PatchConfig`` copies from its GPU sibling to emit the same module
_LISTS = ("additional_imports", "post_import_blocks", "helpers", "drop_imported_names")


class PartialGpuMirror(ProjectRule):
    code = "NPU507"
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    name = "partial-gpu-mirror"
    summary = (
        "An NPU spec copies some of its GPU sibling's module-level lists (imports, import blocks, helpers, "
        "dropped imports) but not all of them."
    )
    why = (
        "An NPU spec that starts from its own `PatchConfig` and reuses the GPU patches rebuilds the GPU module's "
        "top by copying four lists from the GPU config: `additional_imports`, `post_import_blocks`, `helpers` and "
        "`drop_imported_names`. They belong together: the GPU spec drops an upstream name because it imports or "
        "defines a replacement (an output class with extra fields), and its helpers use the names its imports "
        "bring. Copying the replacements without the drops (or the helpers without their imports) makes the NPU "
        "module differ from the GPU one in what those names are, or leaves them undefined, and the generated "
        "NPU file no longer matches what the GPU spec was written for. A list the NPU spec covers itself (its "
        "own `drop_import_names` of every name the GPU spec drops) counts as copied."
    )
    bad = (
        Example(
            """
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_npu.py",
            )
            config.additional_imports.extend(gpu_config.additional_imports)
            config.helpers.extend(gpu_config.helpers)
            config.patches.extend(gpu_config.patches)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the GPU spec drops `ToyCausalLMOutputWithPast`; this copy keeps it",
        ),
    )
    good = (
        Example(
            """
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_npu.py",
            )
            config.additional_imports.extend(gpu_config.additional_imports)
            config.helpers.extend(gpu_config.helpers)
            config.drop_imported_names.update(gpu_config.drop_imported_names)
            config.patches.extend(gpu_config.patches)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "No fix: add the missing copy (`config.<list>.extend(gpu_config.<list>)`, or `.update` for "
        "`drop_imported_names`) next to the others, then regenerate the NPU file."
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        for pkg in packages(paths):
            for npu_path in pkg.npu_specs:
                if os.path.normpath(npu_path) not in linted:
                    continue
                spec = patchgen.load_spec(npu_path)
                if (
                    spec is None
                    or not spec.parsed
                    or not spec.mirrors
                    or spec.base_mode in ("deepcopy", "shared")
                ):
                    continue
                sources = {module for _, module in spec.mirrors.values()}
                if len(sources) != 1:
                    continue
                gpu = patchgen.spec_for_module(next(iter(sources)), spec.path)
                if gpu is None or not gpu.parsed or gpu.path == spec.path:
                    continue
                missing: list[str] = []
                for attr in _LISTS:
                    if attr in spec.mirrors:
                        continue
                    if attr == "drop_imported_names":
                        lacking = sorted(patchgen.effective_drops(gpu) - patchgen.effective_drops(spec))
                        if lacking:
                            shown = ", ".join(f"`{n}`" for n in lacking[:3]) + (
                                ", ..." if len(lacking) > 3 else ""
                            )
                            missing.append(f"`drop_imported_names` ({shown})")
                    elif attr == "additional_imports":
                        own = {n for _, _, names in spec.added_imports for n in names}
                        theirs = {n for *_, names in patchgen.effective_added_imports(gpu) for n in names}
                        if theirs - own:
                            missing.append("`additional_imports`")
                    elif attr == "post_import_blocks":
                        own_blocks = {code.strip() for _, code in spec.post_blocks}
                        if any(
                            code.strip() not in own_blocks for *_, code in patchgen.effective_post_blocks(gpu)
                        ):
                            missing.append("`post_import_blocks`")
                    elif attr == "helpers":
                        own_helpers = {p.replacement for p in spec.patches if p.kind == "helper"}
                        if any(p.replacement not in own_helpers for p in patchgen.effective_helpers(gpu)):
                            missing.append("`helpers`")
                if not missing:
                    continue
                line = max(line for line, _ in spec.mirrors.values())
                copied = ", ".join(f"`{a}`" for a in _LISTS if a in spec.mirrors)
                col, end = _first_line_range(npu_path, line)
                yield _diag(
                    self,
                    npu_path,
                    line,
                    f"copies {copied} from {os.path.basename(gpu.path)} but not {', '.join(missing)}: the NPU "
                    "module's top differs from the GPU module it reuses the patches of; copy it too and regenerate",
                    col=col,
                    end_col=end,
                )
