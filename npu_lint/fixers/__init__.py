"""Structural codemods (libcst), built by the engine when fixes are applied; rules never import them.

A rule attaches ``Fix(deferred=True, builder=NAME)``; in fix mode the engine calls the builder registered here
under NAME (imported lazily) with the file's ``Context`` and replaces the deferred fix with the built one.

* :mod:`npu_lint.fixers.dispatch` - module-global dispatch -> instance-local handles owned by classes.
* :mod:`npu_lint.fixers.npu_spec` - the NPU sibling patch spec (NPU501) and reuse of a copied GPU patch (NPU504).
* :mod:`npu_lint.fixers.init_switch` - ``if IS_NPU_AVAILABLE`` choice of the generated module (NPU502; text edits).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# builder name -> "module:function"; the function takes the file's Context and returns a Fix or None
BUILDERS: dict[str, str] = {
    "dispatch-migration": "npu_lint.fixers.dispatch:build_migration_fix",
}


def builder(name: str) -> Callable[..., Any]:
    """The registered builder ``name`` (KeyError when unknown)."""
    module, _, func = BUILDERS[name].partition(":")
    return getattr(importlib.import_module(module), func)
