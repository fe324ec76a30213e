"""NPU506 transformers-pin."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import (
    _diag,
    _guarded,
    _installed_transformers,
    _linted,
    _repo_pin,
    _version_key,
    packages,
)
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project


class TransformersPin(ProjectRule):
    code = "NPU506"
    name = "transformers-pin"
    summary = (
        "The installed `transformers` differs from the version the repository pins (or its generated files "
        "were based on)."
    )
    why = (
        "Generated modeling files are copies of one transformers release (`Based on: transformers==X` in their "
        "banner) and VeOmni pins it (`transformers==X` in pyproject.toml). Upstream classes the patches call "
        "change between releases: running another version mixes two releases' code, and regenerating with it "
        "produces a different file. Generated files based on different versions are reported too."
    )
    bad = (
        Example(
            """
            [project]
            name = "veomni"
            dependencies = ["transformers==4.0.0"]
            """,
            path="pyproject.toml",
            title="the environment has another transformers installed",
        ),
    )
    good = (
        Example(
            """
            [project]
            name = "veomni"
            dependencies = ["transformers==5.9.0"]
            """,
            path="pyproject.toml",
            title="the pin equals the installed version",
        ),
    )
    fix_safety = (
        "No fix: install the pinned release (`pip install transformers==<pin>`), or move the pin and regenerate "
        "every generated file."
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        installed = _installed_transformers()
        root = project.root
        if root is None and paths:
            root = patchgen.veomni_root_of(paths[0])
        pin = _repo_pin(root)
        banners: list[tuple[str, str, int]] = []
        linted = _linted(paths)
        for pkg in packages(paths):
            for gen_path in pkg.generated:
                if os.path.normpath(gen_path) not in linted:
                    continue
                parsed = patchgen.load_file(gen_path)
                if parsed is None:
                    continue
                gen = patchgen.generated_banner(gen_path, parsed.text)
                if gen.based_on:
                    banners.append((gen.based_on, gen_path, gen.based_on_line))
        if pin is not None:
            expected, where = pin[0], (pin[1], pin[2])
            source = f"the repository pin (pyproject.toml: transformers=={expected})"
            short = "the pyproject.toml pin"
        elif banners:
            counts = Counter(v for v, _, _ in banners)
            top = max(counts.values())
            tied = [v for v, n in counts.items() if n == top]
            expected = installed if installed in tied else max(tied, key=_version_key)
            first = next(b for b in banners if b[0] == expected)
            where = (first[1], first[2])
            source = f"the generated files (`Based on: transformers=={expected}`)"
            short = "most generated files"
        else:
            return
        if installed is not None and installed != expected:
            yield _diag(
                self,
                where[0],
                where[1],
                f"installed transformers {installed} differs from {source}: install transformers=={expected}",
            )
        for version, gen_path, line in banners:
            if version != expected:
                yield _diag(
                    self,
                    gen_path,
                    line,
                    f"generated from transformers=={version}, but {short} use {expected}: regenerate it",
                )
