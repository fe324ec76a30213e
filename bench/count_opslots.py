"""Independent count of module-scope OpSlot declarations (for NPU201's accuracy review).

Line-based, no ``ast``: a line ``<name> = OpSlot(`` counts when it starts at column 0 (module scope of a
spec or generated file) or when it sits inside the triple-quoted string of an ``add_post_import_block(``
call (which patchgen pastes at module scope of the generated file). Indented declarations elsewhere (inside
functions or classes) are listed separately and not counted.

Usage: python bench/count_opslots.py [ROOT]   (default: the cached veomni 0.1.12 wheel's veomni/models)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DECL = re.compile(r"^(?P<indent>[ \t]*)[A-Za-z_][A-Za-z0-9_]*\s*=\s*OpSlot\(")
DEFAULT = Path.home() / ".cache" / "npu-lint-corpus" / "veomni-0.1.12" / "veomni" / "models"


def count(path: Path) -> tuple[int, int, int]:
    """(at column 0, inside post-import blocks, elsewhere)."""
    top = block = other = 0
    in_block = False
    waiting = False  # saw add_post_import_block( and wait for the opening quotes
    for line in path.read_text(encoding="utf-8").splitlines():
        if in_block:
            if DECL.match(line):
                block += 1
            if '"""' in line or "'''" in line:
                in_block = False
            continue
        if "add_post_import_block(" in line:
            waiting = True
        if waiting and ('"""' in line or "'''" in line):
            quote = '"""' if '"""' in line else "'''"
            waiting = False
            rest = line.split(quote, 1)[1]
            if quote not in rest:
                in_block = True
            continue
        match = DECL.match(line)
        if match:
            if match.group("indent"):
                other += 1
            else:
                top += 1
    return top, block, other


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    totals = [0, 0, 0]
    for path in sorted(root.rglob("*.py")):
        for i, n in enumerate(count(path)):
            totals[i] += n
    top, block, other = totals
    print(f"module scope (column 0): {top}")
    print(f"inside add_post_import_block strings: {block}")
    print(f"total module-scope OpSlot declarations: {top + block}")
    print(f"indented outside post-import blocks (not module scope, not counted): {other}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
