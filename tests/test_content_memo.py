"""``core.memo.by_content``: an analysis of one node's subtree shared with the verbatim copies of that node in
other files (a generated GPU file and its NPU sibling), its nodes carried over to the copy."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from npu_lint.core.memo import by_content

CALLS: list[str] = []

FUNC = """\
def forward(self, x, mask):
    y = self.proj(x)
    if mask is not None:
        y = y.masked_fill(mask, 0)
    return y, x
"""


@dataclass
class Found:
    returns: list[tuple[ast.Return, ast.expr]] = field(default_factory=list)
    names: dict[str, set[str]] = field(default_factory=dict)
    shared: dict[str, set[str]] = field(default_factory=dict)


def analysis(func: ast.FunctionDef, tag: str) -> Found:
    CALLS.append(tag)
    out = Found()
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            out.returns.append((node, node.value))
        if isinstance(node, ast.Name):
            out.names.setdefault(node.id, set()).add(type(node.ctx).__name__)
    out.shared = out.names  # aliasing is kept
    return out


MODULE: list[ast.Module] = []


def outside(func: ast.FunctionDef) -> list[ast.AST]:
    """A (wrong) use: the result names a node of the file outside ``func``."""
    CALLS.append("outside")
    return [MODULE[-1].body[0]]


def _tree(prefix: str) -> tuple[ast.Module, list[str]]:
    text = prefix + FUNC
    return ast.parse(text), text.split("\n")


def test_a_verbatim_copy_reuses_the_analysis_with_its_own_nodes() -> None:
    CALLS.clear()
    gpu, gpu_lines = _tree("import torch\n\n\n")
    npu, npu_lines = _tree("import torch\nimport torch_npu\n\n\n\n")
    f_gpu, f_npu = gpu.body[-1], npu.body[-1]
    first = by_content(analysis, f_gpu, gpu_lines, "t")
    second = by_content(analysis, f_npu, npu_lines, "t")
    assert CALLS == ["t"]  # computed once
    ((ret, value),) = second.returns
    npu_return = next(n for n in ast.walk(f_npu) if isinstance(n, ast.Return))
    assert ret is npu_return and value is npu_return.value  # the copy's own nodes, at its own lines
    assert ret.lineno == first.returns[0][0].lineno + 2
    assert second.names == first.names and second.shared is second.names
    first.names.clear()  # what the first caller does with its result does not reach the next copy
    assert by_content(analysis, f_npu, npu_lines, "t").names == second.names


def test_other_text_or_arguments_compute_again() -> None:
    CALLS.clear()
    a, a_lines = _tree("")
    b_text = FUNC.replace("0)", "1)")
    b = ast.parse(b_text)
    by_content(analysis, a.body[0], a_lines, "x")
    by_content(analysis, b.body[0], b_text.split("\n"), "x")
    by_content(analysis, a.body[0], a_lines, "y")
    assert CALLS == ["x", "x", "y"]


def test_a_result_naming_a_node_outside_the_subtree_is_computed_again() -> None:
    CALLS.clear()
    a, a_lines = _tree("import torch\n")
    b, b_lines = _tree("import torch\n")
    MODULE.append(a)
    first = by_content(outside, a.body[-1], a_lines)
    MODULE.append(b)
    second = by_content(outside, b.body[-1], b_lines)
    assert CALLS == ["outside", "outside"]
    assert first[0] is a.body[0] and second[0] is b.body[0]


# -- Rule.report_shared ------------------------------------------------------------------------------------


from npu_lint.core.diagnostics import Edit, Fix  # noqa: E402
from npu_lint.core.source import SourceFile  # noqa: E402
from npu_lint.rules.base import Context, Rule  # noqa: E402


class _Returns(Rule):
    """Not registered (no code): reports every tuple return of a function through ``report_shared``."""

    name = "toy-returns"
    checks = 0
    with_fix = False

    def check(self, func: ast.AST) -> None:
        type(self).checks += 1
        for node in ast.walk(func):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                fix = Fix("drop", (Edit(0, 0, ""),)) if self.with_fix else None
                self.report(node.value, f"returns {ast.unparse(node.value)}", fix)


def _lint(prefix: str, with_fix: bool = False) -> list[tuple[int, int, str]]:
    text = prefix + FUNC
    ctx = Context(SourceFile.from_text("m.py", text), ast.parse(text))
    rule = _Returns(ctx)
    rule.with_fix = with_fix
    rule.report_shared(rule.check, ctx.tree.body[-1], with_fix)  # what the check reads besides the node
    assert "report" not in vars(rule)  # the recorder is gone
    return [(d.line, d.col, d.message) for d in ctx.diagnostics]


def test_report_shared_replays_the_reports_at_the_copy() -> None:
    _Returns.checks = 0
    first = _lint("import torch\n")
    second = _lint("import torch\nimport torch_npu\n\n")
    assert _Returns.checks == 1
    assert first == [(6, 11, "returns (y, x)")]
    assert second == [(8, 11, "returns (y, x)")]


def test_report_shared_runs_a_check_reporting_a_fix_unshared() -> None:
    _Returns.checks = 0
    assert _lint("# fix\n", with_fix=True) == [(6, 11, "returns (y, x)")]
    assert _lint("# fix\n\n", with_fix=True) == [(7, 11, "returns (y, x)")]
    assert _Returns.checks == 4  # recorded, refused, run; twice
