"""Structural codemods (libcst), built by the engine when fixes are applied; rules never import them.

A rule attaches ``Fix(deferred=True, builder=NAME)``; in fix mode the engine calls the builder registered here
under NAME (imported lazily) with the file's ``SourceFile`` and ``Project`` and replaces the deferred fix with the built one.

* :mod:`npu_lint.fixers.dispatch` - module-global dispatch -> instance-local handles owned by classes.
* :mod:`npu_lint.fixers.npu_spec` - the NPU sibling patch spec (NPU501) and reuse of a copied GPU patch (NPU504).
* :mod:`npu_lint.fixers.init_switch` - ``if IS_NPU_AVAILABLE`` choice of the generated module (NPU502; text edits).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# builder name -> "module:function"; the function takes the file's SourceFile and Project, returns a Fix or None
BUILDERS: dict[str, str] = {
    "dispatch-migration": "npu_lint.fixers.dispatch:build_migration_fix",
    # project rules (NPU501, NPU502, NPU504) ask for these through ProjectRule.fixer
    "npu-spec": "npu_lint.fixers.npu_spec:build_npu_spec",
    "npu-spec-format": "npu_lint.fixers.npu_spec:format_many",
    "reuse-gpu-patch": "npu_lint.fixers.npu_spec:reuse_gpu_patch_edits",
    "init-switch-flag-edit": "npu_lint.fixers.init_switch:flag_import_edit",
    "init-switch-edit": "npu_lint.fixers.init_switch:switch_edit",
}


def builder(name: str) -> Callable[..., Any]:
    """The registered builder ``name`` (KeyError when unknown)."""
    module, _, func = BUILDERS[name].partition(":")
    return getattr(importlib.import_module(module), func)
