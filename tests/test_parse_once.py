"""One parse per file: a cold serial run over the examples tree parses each file once, whoever reads it (the file
pass, the project scans, the rules' reads of other files, the upstream transformers modules), and parses no
text twice (a snippet the rules share is parsed once through ``core.astutil.parse_snippet``).

The run is a fresh interpreter with ``ast.parse`` counted, as ``bench/profile_cold.py --counts-only`` does on a
real tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_COUNTING_RUN = r"""
import ast, collections, contextlib, io, json, os, sys
files, texts, where, paths = collections.Counter(), collections.Counter(), {}, collections.defaultdict(set)
_parse = ast.parse

def counting(source, filename="<unknown>", *args, **kwargs):
    name = str(filename)
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    if isinstance(text, str):
        texts[text] += 1
        frame = sys._getframe(1)
        where.setdefault(text, []).append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
    if not name.startswith("<"):
        files[os.path.realpath(name)] += 1
        if isinstance(text, str):
            paths[text].add(os.path.realpath(name))
    return _parse(source, filename, *args, **kwargs)

ast.parse = counting
from npu_lint.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["check", "--select", "ALL", "--no-cache", "--exit-zero", "-q", "--jobs", "1", sys.argv[1]])
again = {k: v for k, v in files.items() if v > 1}
# the same characters parsed more often than the files holding them were read (files with equal content: once each)
twice = [where[t] for t, n in texts.items() if n > max(1, len(paths[t]))]
print(json.dumps({"parses": sum(texts.values()), "files": len(files), "again": again, "twice": twice}))
"""


def test_cold_run_parses_each_file_and_text_once() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _COUNTING_RUN, str(ROOT / "examples")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["files"] >= 100  # the examples tree and the upstream modules its specs patch were parsed
    assert got["again"] == {}, got["again"]
    assert got["twice"] == [], got["twice"]
