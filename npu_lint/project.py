"""The cross-file index of a VeOmni tree (stub: the VeOmni root only; registry rows come later).

Built once per run from the linted paths, statically (never imports the linted code), and handed to
every rule through ``Context.project``. It must stay picklable (it is sent to worker processes).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Project:
    root: str | None = None  # directory that holds veomni/ops (the VeOmni checkout or wheel root)

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


def find_veomni_root(start: Path) -> Path | None:
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for directory in (start, *start.parents):
        if (directory / "veomni" / "ops").is_dir():
            return directory
        if directory.name == "veomni" and (directory / "ops").is_dir():
            return directory.parent
    return None


def load_project(paths: list[str], settings: object | None = None) -> Project:
    for raw in paths:
        root = find_veomni_root(Path(raw))
        if root is not None:
            return Project(root=str(root))
    return Project()
