"""Property-based fuzzing (hypothesis): inputs made from real VeOmni code, mutated.

The budget: ``NPU_LINT_FUZZ_EXAMPLES`` examples per property (default ``CI_EXAMPLES``: the whole directory runs in
well under a minute); ``bench/fuzz.py`` runs the same properties with a larger budget. Anchors: ruff's fuzzers
(every fixed file parses, a second pass changes nothing) and LibCST's round-trip tests (text in, same text out).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import shared_tree  # noqa: E402

CI_EXAMPLES = 25
EXAMPLES = int(os.environ.get("NPU_LINT_FUZZ_EXAMPLES", CI_EXAMPLES))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("NPU_LINT_FUZZ_RANDOM") is None,  # CI: the same examples every run
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
    database=None,
)

TREE = "veomni-main"
# device / dispatch / distributed code: where the rules fire and fixes apply
_INTERESTING = re.compile(r"\.cuda\b|torch\.cuda|\"cuda\"|'cuda'|nccl|flash_attn|device=|OpSlot|\.to\(")
MAX_CHUNK_LINES = 60


@functools.lru_cache(maxsize=1)
def chunks() -> tuple[tuple[str, str], ...]:
    """(module header: the file's imports, one top-level def/class) of real VeOmni files that mention devices."""
    root = shared_tree(TREE) / "veomni"
    out = []
    for path in sorted(root.rglob("*.py")):
        if "generated" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        if not _INTERESTING.search(text):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        header = "".join(
            "".join(lines[n.lineno - 1 : n.end_lineno])
            for n in tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom))
        )
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                continue
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            body = "".join(lines[start - 1 : node.end_lineno])
            if node.end_lineno - start < MAX_CHUNK_LINES and _INTERESTING.search(body):
                out.append((header, body))
    assert len(out) > 20, f"too few device-related chunks in {root}"
    return tuple(out)


SNIPPETS = (
    "x = torch.zeros(3).cuda()\n",
    "torch.cuda.synchronize()\n",
    "device = torch.device('cuda')\n",
    "y = model.to('cuda:0')\n",
    "if torch.cuda.is_available():\n    pass\n",
    "t = torch.ones(2, device='cuda')\n",
    "n = torch.cuda.device_count()\n",
    "torch.cuda.empty_cache()\n",
    'z = torch.empty(4, device="cuda")  # noqa\n',
    "s = 'x.cuda()  # noqa'\n",
    "w = torch.zeros(1).cuda()  # noqa: NPU101\n",
    "u = '''\n# npu-lint: noqa\n'''\n",
    "é = torch.randn(2).cuda()  # unicode name\n",
    "dist.init_process_group('nccl')\n",
)


@st.composite
def mutated_source(draw: st.DrawFn) -> str:
    """One or two real chunks, with snippets inserted between top-level blocks, line endings changed."""
    pool = chunks()
    picked = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=2))
    header = pool[picked[0]][0]
    blocks = [pool[i][1] for i in picked]
    extra = draw(st.lists(st.sampled_from(SNIPPETS), max_size=4))
    for snippet in extra:
        blocks.insert(draw(st.integers(0, len(blocks))), snippet)
    text = (
        "import torch\n" + header + "\n\n" + "\n\n".join(b if b.endswith("\n") else b + "\n" for b in blocks)
    )
    for _ in range(draw(st.integers(0, 3))):  # line-level damage: the result may not parse (fixes must cope)
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "tab", "keep"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            col = draw(st.integers(0, len(lines[i])))
            piece = draw(
                st.sampled_from(["(", ")", ":", "\\", "'", '"""', "\t", "é", " # noqa", ".cuda()", "\x0c"])
            )
            lines[i] = lines[i][:col] + piece + lines[i][col:]
        elif op == "tab":
            lines[i] = "\t" + lines[i]
        text = "\n".join(lines)
    ending = draw(st.sampled_from(["\n", "\r\n", "\n", "\r", "mixed"]))
    if ending in ("\r\n", "\r"):
        text = text.replace("\n", ending)
    elif ending == "mixed":
        lines = text.split("\n")
        flips = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
        text = "".join(line + ("\r\n" if flip else "\n") for line, flip in zip(lines[:-1], flips)) + lines[-1]
    if draw(st.booleans()):
        text = text.rstrip("\r\n")  # no final newline
    return text
