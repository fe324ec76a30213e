"""Structural codemods (libcst), built by the engine when fixes are applied; rules never import them.

A rule names its fixer by a direct reference, the fixer function's dotted path
``"npu_lint.fixers.<module>:<function>"`` (a string, so that rules need not import fixers and libcst / astroid
load only when a fix is built): ``Fix(deferred=True, builder=REF)`` for a file rule, whose builder the engine
calls in fix mode with the file's ``SourceFile`` and ``Project``, and ``ProjectRule.fixer(REF)`` for a project
rule. :func:`resolve` imports the function; tests/fixers/test_fixer_refs.py checks that every reference in the
package resolves.

* :mod:`npu_lint.fixers.dispatch` - module-global dispatch -> instance-local handles owned by classes.
* :mod:`npu_lint.fixers.npu_spec` - the NPU sibling patch spec (NPU501) and reuse of a copied GPU patch (NPU504).
* :mod:`npu_lint.fixers.init_switch` - ``if IS_NPU_AVAILABLE`` choice of the generated module (NPU502; text edits).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from npu_lint.core.diagnostics import is_fixer_ref


def resolve(ref: str) -> Callable[..., Any]:
    """The fixer function ``ref`` (``"npu_lint.fixers.<module>:<function>"``) names, imported now.

    ValueError for anything else (a fixer lives in this package); ImportError / AttributeError when the module
    or the function does not exist."""
    if not is_fixer_ref(ref):
        raise ValueError(f"not a fixer reference (npu_lint.fixers.<module>:<function>): {ref!r}")
    module, _, func = ref.partition(":")
    found = getattr(importlib.import_module(module), func)
    if not callable(found):
        raise TypeError(f"fixer reference {ref!r} names a {type(found).__name__}, not a function")
    return found
