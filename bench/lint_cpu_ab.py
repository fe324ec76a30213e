"""CPU time of one in-process lint of the LSP bench's file, two builds side by side.

Usage: python bench/lint_cpu_ab.py [--rounds 4] [--samples 6] NAME=SRC_DIR NAME=SRC_DIR
Each round runs every build once (the order alternating), each in a fresh interpreter with ``PYTHONPATH=SRC_DIR``:
one warm-up lint, then ``--samples`` lints of ``bench/lsp_latency.generated_text(2500)`` timed with
``time.process_time`` (CPU of the linting process only, so a loaded machine disturbs it far less than wall time).
Prints best and median per build. The language server's own overhead (JSON-RPC, debounce) is not included:
``bench/lsp_latency.py`` measures that with a real client.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import lsp_latency as bench
from npu_lint.core.config import Settings, selected_codes
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.rules.base import all_rules
text = bench.generated_text(2500)
root = Path(tempfile.mkdtemp(prefix="npu-lint-cpu-ab-"))
path = root / bench.REL_PATH
path.parent.mkdir(parents=True)
path.write_text(text, encoding="utf-8")
(root / "pyproject.toml").write_text("[tool.npu-lint]\n", encoding="utf-8")
known = {code: rule.default_enabled for code, rule in all_rules().items()}
settings = Settings(root=str(root))
codes = selected_codes(settings, known)
lint_source(SourceFile.from_text(str(path), text), codes, settings)
out = []
for _ in range(int(sys.argv[2])):
    start = time.process_time()
    lint_source(SourceFile.from_text(str(path), text), codes, settings)
    out.append(time.process_time() - start)
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("builds", nargs=2, metavar="NAME=SRC_DIR")
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.builds]
    times: dict[str, list[float]] = {name: [] for name, _ in builds}
    for r in range(args.rounds):
        for name, src in builds if r % 2 == 0 else builds[::-1]:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(HERE), str(args.samples)],
                env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
            )
            times[name] += json.loads(proc.stdout.strip().splitlines()[-1])
    for name, values in times.items():
        print(
            f"{name:<10} lint CPU best {min(values) * 1000:6.0f} ms   median {statistics.median(values) * 1000:6.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
