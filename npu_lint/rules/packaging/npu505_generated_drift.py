"""NPU505 generated-drift."""

from __future__ import annotations

import ast
import os
import shutil
from collections.abc import Iterable

from npu_lint.core.diagnostics import Applicability, Diagnostic, Fix, Origin
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import (
    _diag,
    _first_line_range,
    _guarded,
    _linted,
    packages,
    patchgen_banner,
)
from npu_lint.veomni import patchgen
from npu_lint.veomni.patchgen import regen_command
from npu_lint.veomni.project import Project


class GeneratedDrift(ProjectRule):
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    code = "NPU505"
    name = "generated-drift"
    summary = "A generated file no longer matches its patch spec (edited by hand, or not regenerated)."
    why = (
        "`generated/patched_modeling_<m>_<dev>.py` is produced by patchgen from the spec and must never be edited: "
        "the next regeneration silently drops a hand edit, and a spec change that was not regenerated is not what "
        "runs. Each patched section must hold the spec function's body (compared as normalised ASTs after "
        "`name_map`, ignoring docstrings, comments and formatting), every patch in the spec must have its section, "
        "and every section its patch. A spec whose generated file does not exist yet (a new NPU sibling) is "
        "reported on the spec. The import header is compared too: a name the generated file imports from a "
        "`veomni` module that the spec (its `add_import`s and post-import blocks, and those it copies) no longer "
        "provides is reported on the spec, because regenerating drops it while the patched code still uses it. "
        "This works without patchgen (VeOmni's own gate is `patchgen --check`)."
    )
    bad = (
        Example(
            """
            # ======================================================================
            # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # Source: transformers.models.toy.modeling_toy
            # Based on: transformers==5.9.0
            # ======================================================================
            import torch
            from torch import nn


            # ======================================================================
            # [MODIFIED CLASS] ToyRMSNorm
            # Methods patched: forward
            # ======================================================================
            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return self.weight * hidden_states  # edited here, not in the spec
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the spec's `ToyRMSNorm.forward` patch has a different body",
        ),
    )
    good = (
        Example(
            """
            # ======================================================================
            # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # Source: transformers.models.toy.modeling_toy
            # Based on: transformers==5.9.0
            # ======================================================================
            import torch
            from torch import nn


            # ======================================================================
            # [MODIFIED CLASS] ToyRMSNorm
            # Methods patched: forward
            # ======================================================================
            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the section holds the spec function's body",
        ),
    )
    fix_safety = (
        "Display only: the fix is to regenerate, `patchgen <spec module> -o <package>/generated --diff -v` (the "
        "message's fix title gives the exact command; run it where patchgen is installed). npu-lint never edits "
        "`generated/`."
    )

    def _import_drift(
        self,
        spec: patchgen.Spec,
        gen_path: str,
        text: str,
        linted: set[str],
        command: str,
        tree: ast.Module | None = None,
    ) -> Iterable[Diagnostic]:
        """Names the generated file imports from a veomni module that its spec no longer provides: reported on
        the spec (at its ``add_import`` of that module) when the spec is linted, else on the generated line."""
        by_module: dict[str, list[tuple[str, int]]] = {}
        for module, name, line in patchgen.import_drift(spec, text, tree):
            by_module.setdefault(module, []).append((name, line))
        target = os.path.basename(gen_path)
        for module, items in by_module.items():
            names = ", ".join(f"`{n}`" for n, _ in items)
            message = (
                f"`generated/{target}` imports {names} from `{module}`, which {os.path.basename(spec.path)} no "
                "longer provides: regenerating drops the import and leaves the name undefined where the patched "
                "code uses it; add it back to the spec's imports"
            )
            if os.path.normpath(spec.path) in linted:
                line = next((ln for ln, mod, _ in spec.added_imports if mod == module), spec.config_line)
                col, end = _first_line_range(spec.path, line)
                yield _diag(self, spec.path, line, message, col=col, end_col=end)
            else:
                line = items[0][1]
                col, end = _first_line_range(gen_path, line)
                yield _diag(
                    self,
                    gen_path,
                    line,
                    message,
                    col=col,
                    end_col=end,
                    origin=Origin(spec.path, spec.config_line),
                )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        have_patchgen = shutil.which("patchgen") is not None
        for pkg in packages(paths):
            # a spec whose generated file does not exist yet (e.g. an NPU sibling just created by NPU501)
            for spec_path in pkg.specs:
                if os.path.normpath(spec_path) not in linted:
                    continue
                spec = patchgen.load_spec(spec_path)
                target = patchgen.effective_target_file(spec) if spec is not None and spec.parsed else None
                if (
                    spec is None
                    or not target
                    or not target.endswith(".py")
                    or os.sep in target
                    or "/" in target
                ):
                    continue
                if os.path.exists(os.path.join(pkg.dir or ".", "generated", target)):
                    continue
                command = regen_command(spec_path)
                col, end = _first_line_range(spec_path, spec.config_line)
                yield _diag(
                    self,
                    spec_path,
                    spec.config_line,
                    f"`generated/{target}` has not been generated from this spec yet: run `{command}`",
                    col=col,
                    end_col=end,
                    fix=Fix(
                        f"Generate: `{command}`",
                        (),
                        Applicability.DISPLAY,
                        reason="patchgen writes generated/",
                    ),
                )
            for gen_path in pkg.generated:
                if os.path.normpath(gen_path) not in linted:
                    continue
                parsed = patchgen.load_file(gen_path)
                if parsed is None or patchgen_banner(parsed.text) is False:
                    continue
                spec = patchgen.spec_for_generated(gen_path)
                if spec is None or not spec.parsed:
                    continue
                gen = patchgen.parse_generated(gen_path, parsed.text, None, full=False)
                command = regen_command(spec.path)
                yield from self._import_drift(spec, gen_path, parsed.text, linted, command, parsed.tree)
                for drift in patchgen.compare_generated(spec, gen):
                    fix = Fix(
                        f"Regenerate: `{command}`"
                        + ("" if have_patchgen else " (patchgen is not installed here)"),
                        (),
                        Applicability.DISPLAY,
                        reason="generated files are regenerated from the spec, never edited",
                    )
                    col, end = _first_line_range(gen_path, drift.line)
                    yield _diag(
                        self,
                        gen_path,
                        drift.line,
                        f"{drift.message}; regenerate from {os.path.basename(spec.path)}",
                        col=col,
                        end_col=end,
                        fix=fix,
                        origin=drift.origin,
                    )
