"""The rules a run can select, known without importing them: code -> (on by default, project rule), read from the
rule modules' file names and text (one rule per module: ``<family>/<code>_<name>.py``, its class declaring
``default_enabled = False`` when it is off by default and deriving from ``ProjectRule`` when it is one).

A warm run whose files all hit the cache resolves its selection and the project rules' cache key with it, and
imports no rule module (importing the 45 rule modules is a third of a warm check).
tests/test_semantic_model.py checks the index against the imported registry."""

from __future__ import annotations

import functools
import os
import re

from npu_lint.core.safeio import read_text

_OFF = re.compile(r"^    default_enabled(?:: ClassVar\[bool\])? = False\b", re.M)
_PROJECT = re.compile(r"^class \w+\(ProjectRule\):", re.M)
_MODULE = re.compile(r"npu\d{3}_\w+\.py")


@functools.lru_cache(maxsize=1)  # the installed package's own files: read once per process
def rule_index() -> dict[str, tuple[bool, bool]]:
    """``{code: (default_enabled, is_project_rule)}`` of every rule module, sorted by code."""
    out: dict[str, tuple[bool, bool]] = {}
    root = os.path.dirname(__file__)
    for family in sorted(os.listdir(root)):
        directory = os.path.join(root, family)
        if family.startswith(("_", ".")) or not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            if not (name.startswith("npu") and name.endswith(".py") and _MODULE.fullmatch(name)):
                continue
            text = read_text(os.path.join(directory, name))
            off = "default_enabled" in text and _OFF.search(text) is not None
            project = "(ProjectRule):" in text and _PROJECT.search(text) is not None
            out[name.split("_", 1)[0].upper()] = (not off, project)
    return dict(sorted(out.items()))


def known_codes() -> dict[str, bool]:
    """``{code: default_enabled}`` of every rule (what ``core.config.selected_codes`` resolves a selection in)."""
    return {code: on for code, (on, _project) in rule_index().items()}


def project_codes(codes: list[str]) -> list[str]:
    """The project rules among ``codes``, in their order."""
    index = rule_index()
    return [c for c in codes if c in index and index[c][1]]
