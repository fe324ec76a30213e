"""NPU513 spec-target-device."""

from __future__ import annotations

import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import _diag, _guarded, _linted, packages
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project


def _device_of(name: str) -> str | None:
    stem = os.path.splitext(os.path.basename(name))[0]
    for device in ("npu", "gpu"):
        if stem.endswith("_" + device) or stem.endswith("_" + device + "_patch_gen_config"):
            return device
    return None


class SpecTargetDevice(ProjectRule):
    per_package = True
    code = "NPU513"
    name = "spec-target-device"
    summary = (
        "A patch spec generates the other device's module (an NPU spec whose effective `target_file` is the "
        "`_gpu` file, or the reverse), or two specs of a package generate the same file."
    )
    why = (
        "An NPU spec usually starts as a copy of its GPU sibling (`config = deepcopy(gpu_config)`): the copy "
        "keeps the GPU `target_file` unless it is set again. patchgen then writes the NPU patches over "
        "`generated/patched_modeling_<m>_gpu.py` (or the GPU ones over the `_npu` file), so one device runs "
        "the other's kernels, and whichever spec ran last decides what both devices import. The target is "
        "read as patchgen would (the spec's own assignment, else the base spec's), and compared with the "
        "device the spec's file name declares and with the package's other specs."
    )
    bad = (
        Example(
            """
            from copy import deepcopy

            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config

            config = deepcopy(gpu_config)
            config.description = "Toy with NPU kernels"
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="a deepcopy of the GPU config that never sets its own `target_file`",
        ),
    )
    good = (
        Example(
            """
            from copy import deepcopy

            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config

            config = deepcopy(gpu_config)
            config.target_file = "patched_modeling_toy_npu.py"
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        for pkg in packages(paths):
            targets: dict[str, list[str]] = {}
            loaded: dict[str, patchgen.Spec] = {}
            for path in pkg.specs:
                spec = patchgen.load_spec(path)
                if spec is None or not spec.parsed:
                    continue
                target = patchgen.effective_target_file(spec)
                if not target:
                    continue
                loaded[path] = spec
                targets.setdefault(target, []).append(path)
            mismatched = {
                path
                for path, spec in loaded.items()
                if _device_of(path)
                and _device_of(patchgen.effective_target_file(spec) or "")
                and _device_of(path) != _device_of(patchgen.effective_target_file(spec) or "")
            }
            for path, spec in loaded.items():
                if os.path.normpath(path) not in linted:
                    continue
                target = patchgen.effective_target_file(spec) or ""
                declared, produced = _device_of(path), _device_of(target)
                line = spec.config_line
                own = spec.target_file is not None
                where = (
                    "its own `target_file`" if own else "the `target_file` it inherits from its base config"
                )
                if declared and produced and declared != produced:
                    yield _diag(
                        self,
                        path,
                        line,
                        f"`{os.path.basename(path)}` is the {declared.upper()} spec but {where} is `{target}`: "
                        f"patchgen writes its {declared.upper()} patches over the {produced.upper()} generated "
                        f"module; set `target_file` to the `_{declared}` file",
                    )
                    continue
                others = [p for p in targets.get(target, []) if p != path and p not in mismatched]
                if any(p in mismatched for p in targets.get(target, [])):
                    continue  # the spec that generates the other device's file is the one reported
                if others:
                    yield _diag(
                        self,
                        path,
                        line,
                        f"`{os.path.basename(path)}` and `{os.path.basename(others[0])}` both generate "
                        f"`generated/{target}` ({where}): the spec run last overwrites the other",
                    )
