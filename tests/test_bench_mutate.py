"""bench/mutate.py: the generic mutants it plants, and its grading on a small tree."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("bench_mutate", ROOT / "bench" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mutate"] = module
    spec.loader.exec_module(module)
    return module


mutate = _load()

SNIPPET = textwrap.dedent(
    """
    import torch

    def forward(self, hidden, image_embeds, video_embeds):
        mask = torch.zeros(hidden.shape[0], device=hidden.device)
        x = hidden.float()
        probs = torch.softmax(x, dim=-1)
        if isinstance(hidden, torch.Tensor):
            out = self.q_proj(hidden) + self.k_proj(image_embeds)
        return probs.mean() + mask
    """
)


def _sites(text: str) -> set[tuple[str, str]]:
    return {(op, new) for op, _node, new in mutate.sites(ast.parse(text))}


def test_sites_cover_each_operator_family() -> None:
    found = _sites(SNIPPET)
    assert ("device-drop", "torch.zeros(hidden.shape[0])") in found
    assert ("upcast-drop", "hidden") in found
    assert ("kwarg-drop", "torch.softmax(x)") in found
    assert ("reduce-swap", "probs.sum()") in found
    assert ("operand-drop", "self.q_proj(hidden)") in found
    assert ("binop-swap", "self.q_proj(hidden) - self.k_proj(image_embeds)") in found
    assert ("name-swap", "video_embeds") in found
    assert ("name-swap", "self.k_proj") in found
    assert ("stmt-drop", "pass") in found
    assert ("const", "(-2)") not in found  # -1 is a UnaryOp: mutated as a whole
    assert ("const", "0") in found


def test_no_argument_mutants_of_plumbing_or_inside_kernels() -> None:
    found = _sites(SNIPPET)
    assert not any(op == "arg-swap" and new.startswith("isinstance") for op, new in found)
    kernel = "import triton\n\n@triton.jit\ndef k(x, y):\n    z = x + y\n"
    assert _sites(kernel) == set()


def test_apply_checks_the_line_and_the_parse() -> None:
    text = "def f(a, b):\n    return a + b\n"
    m = mutate.Mutant("t", "f.py", "other", "operand-drop", 2, 2, "a + b", "a")
    assert mutate.apply(text, m) == "def f(a, b):\n    return a\n"
    assert mutate.apply(text, mutate.Mutant("t", "f.py", "other", "x", 1, 1, "a + b", "a")) is None
    assert mutate.apply(text, mutate.Mutant("t", "f.py", "other", "x", 2, 2, "a + b", "a +")) is None


def test_apply_replaces_the_planned_span_not_the_first_match_on_the_line(tmp_path: Path) -> None:
    text = "def rotate(x, sin_u, sin, cos):\n    return x * sin_u + x * sin\n"
    (tmp_path / "veomni").mkdir()
    (tmp_path / "veomni" / "rope.py").write_text(text)
    planned = [m for m in mutate.plan(tmp_path, 100, 0, set(), {"name-swap"}, "t") if m.old == "sin"]
    assert planned and all(m.col == text.splitlines()[1].rindex("sin") for m in planned)
    for m in planned:
        assert (
            mutate.apply(text, m) == f"def rotate(x, sin_u, sin, cos):\n    return x * sin_u + x * {m.new}\n"
        )
    stale = mutate.Mutant("t", "rope.py", "other", "name-swap", 2, 2, "sin", "cos", col=planned[0].col - 1)
    assert mutate.apply(text, stale) is None


def test_halves_split_the_sites_and_are_stable() -> None:
    ms = [mutate.Mutant("t", f"f{i}.py", "other", "const", i, i, "1", "2") for i in range(200)]
    halves = [mutate.half_of(m) for m in ms]
    assert 60 < halves.count("dev") < 140
    assert halves == [mutate.half_of(m) for m in ms]


def test_a_dropped_device_in_a_forward_is_killed_and_a_harmless_mutant_is_not(tmp_path: Path) -> None:
    pkg = tmp_path / "veomni" / "models" / "toy"
    pkg.mkdir(parents=True)
    (tmp_path / "veomni" / "__init__.py").write_text("")
    source = textwrap.dedent(
        """
        import torch
        from torch import nn


        class ToyModel(nn.Module):
            def forward(self, hidden):
                mask = torch.ones(hidden.shape[0], device=hidden.device)
                scale = 2
                return hidden * mask * scale
        """
    )
    (pkg / "modeling_toy.py").write_text(source)
    linter = mutate.Linter(tmp_path)
    rel = "veomni/models/toy/modeling_toy.py"
    dropped = mutate.Mutant(
        "t", rel, "model", "device-drop", 8, 8,
        "torch.ones(hidden.shape[0], device=hidden.device)", "torch.ones(hidden.shape[0])",
    )  # fmt: skip
    linter.judge(dropped, source)
    assert dropped.killed and dropped.strict and any(c.startswith("NPU1") for c in dropped.codes)
    harmless = mutate.Mutant("t", rel, "model", "const", 9, 9, "2", "3")
    linter.judge(harmless, source)
    assert not harmless.killed
    assert (pkg / "modeling_toy.py").read_text() == source
