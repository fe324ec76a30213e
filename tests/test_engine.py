"""Engine behaviour that no single rule shows: overlapping fixes, fixes that would break the file,
suppression parsing, the process pool matching the serial run, and the single traversal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine import (
    apply_edits,
    fix_source,
    lint_paths,
    lint_source,
    noqa_codes,
)
from npu_lint.rules.base import REGISTRY, Rule


@pytest.fixture
def temp_rules():
    """Register throw-away rules for one test and remove them afterwards."""
    added: list[str] = []

    def register(cls: type[Rule]) -> type[Rule]:
        added.append(cls.code)
        return cls

    yield register
    for code in added:
        REGISTRY.pop(code, None)


def test_fix_that_breaks_the_file_is_dropped(temp_rules) -> None:
    @temp_rules
    class Breaker(Rule):
        code = "NPU990"
        name = "breaker"
        node_types = (ast.Name,)

        def visit(self, node: ast.AST) -> None:
            if isinstance(node, ast.Name) and node.id == "x":
                self.report(node, "x", Fix("break it", (self.ctx.replace(node, "x +"),)))

    src = SourceFile.from_text("m.py", "y = x\n")
    outcome = fix_source(src, ["NPU990"], Settings())
    assert outcome.text == "y = x\n"
    assert outcome.dropped and "NPU990 fix dropped: result would not parse" in outcome.dropped[0]


def test_overlapping_fixes_are_applied_over_passes(temp_rules) -> None:
    @temp_rules
    class Upper(Rule):
        code = "NPU991"
        name = "upper"
        node_types = (ast.Call, ast.Name)

        def visit(self, node: ast.AST) -> None:
            # the call and its argument both want rewriting: overlapping edits
            if isinstance(node, ast.Call) and self.ctx.dotted(node.func) == "f":
                self.report(node, "f", Fix("f->g", (self.ctx.replace(node.func, "g"), Edit(0, 0, ""))))
            if isinstance(node, ast.Name) and node.id == "a":
                parent = self.ctx.parent
                if isinstance(parent, ast.Call):
                    self.report(node, "a", Fix("a->b", (self.ctx.replace(node, "b"),)))

    src = SourceFile.from_text("m.py", "f(a)\n")
    outcome = fix_source(src, ["NPU991"], Settings())
    assert outcome.text == "g(b)\n"
    assert outcome.applied == 2


def test_unsafe_and_display_fixes(temp_rules) -> None:
    @temp_rules
    class Kinds(Rule):
        code = "NPU992"
        name = "kinds"
        node_types = (ast.Name,)

        def visit(self, node: ast.AST) -> None:
            assert isinstance(node, ast.Name)
            kind = {"u": Applicability.UNSAFE, "d": Applicability.DISPLAY}.get(node.id)
            if kind is not None:
                self.report(node, node.id, Fix("rename", (self.ctx.replace(node, node.id * 2),), kind))

    src = SourceFile.from_text("m.py", "u\nd\n")
    assert fix_source(src, ["NPU992"], Settings()).text == "u\nd\n"
    assert fix_source(src, ["NPU992"], Settings(), unsafe=True).text == "uu\nd\n"


def test_apply_edits_merges_identical_and_converts_newlines() -> None:
    edits = [Edit(0, 0, "import a\n"), Edit(0, 0, "import a\n"), Edit(4, 5, "y")]
    assert apply_edits("x = 1\r\nz\r\n", edits, "\r\n") == "import a\r\nx = y\r\nz\r\n"


@pytest.mark.parametrize(
    "line,expected",
    [
        ("x = 1", False),
        ("x = 1  # noqa", None),
        ("x = 1  # noqa: NPU101", {"NPU101"}),
        ("x = 1  # noqa:NPU101,NPU102", {"NPU101", "NPU102"}),
        ("x = 1  # NOQA: npu101 NPU103", {"NPU101", "NPU103"}),
    ],
)
def test_noqa_parsing(line: str, expected: object) -> None:
    assert noqa_codes(line) == expected


def test_pool_matches_serial(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(
            f"def f(m):\n    return m.cuda({'' if i % 2 else 'non_blocking=True'})\n"
        )
    files = sorted(str(p) for p in tmp_path.glob("*.py"))
    serial = lint_paths(files, ["NPU101"], Settings(), jobs=1)
    pooled = lint_paths(files, ["NPU101"], Settings(), jobs=2)
    assert [r.diagnostics for r in serial] == [r.diagnostics for r in pooled]
    assert sum(len(r.diagnostics) for r in pooled) == 40


def test_single_traversal_visits_each_node_once(temp_rules, monkeypatch) -> None:
    calls: list[int] = []

    @temp_rules
    class CountA(Rule):
        code = "NPU993"
        name = "count-a"
        node_types = (ast.Name,)

        def visit(self, node: ast.AST) -> None:
            calls.append(id(node))

    @temp_rules
    class CountB(Rule):
        code = "NPU994"
        name = "count-b"
        node_types = (ast.Name,)

        def visit(self, node: ast.AST) -> None:
            calls.append(id(node))

    import npu_lint.engine.lint as engine

    walks = []
    real_walk = engine._walk

    def counting_walk(tree, ctx, rules):  # noqa: ANN001, ANN202
        walks.append(len(rules))
        return real_walk(tree, ctx, rules)

    monkeypatch.setattr(engine, "_walk", counting_walk)
    lint_source(SourceFile.from_text("m.py", "a = b + c\nd = a\n"), ["NPU993", "NPU994"], Settings())
    assert walks == [2]  # one traversal for both rules
    assert len(calls) == 2 * 5  # five Name nodes, each handed to both rules
    assert len(set(calls)) == 5


def test_a_failing_project_rule_is_an_internal_error_naming_it(tmp_path, monkeypatch) -> None:
    from npu_lint.core.config import Settings
    from npu_lint.engine import project_diagnostics
    from npu_lint.engine.lint import InternalError
    from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules
    from npu_lint.veomni.project import Project

    load_rule_modules()

    def boom(self, project, paths):
        raise RuntimeError("unexpected shape")

    monkeypatch.setattr(PROJECT_REGISTRY["NPU501"], "check", boom)
    errors: list[str] = []
    found = project_diagnostics(Project(), [], ["NPU501", "NPU502"], Settings(), errors=errors)
    assert found == [] and errors == ["internal error in NPU501: RuntimeError: unexpected shape"]
    import pytest

    with pytest.raises(InternalError, match="internal error in NPU501"):
        project_diagnostics(Project(), [], ["NPU501"], Settings())


def test_what_a_lint_leaves_alive_is_not_left_to_the_young_collections(tmp_path: Path) -> None:
    """With the collector running (the language server, a serial check), the objects a file's rules keep
    alive after ``check_source`` (per-file memos holding its tree) are handed to the oldest generation: the
    young collection the next allocation triggers would otherwise traverse the whole tree to collect nothing
    (40-90 ms per change on a 2,500-line generated file)."""
    import gc
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from lsp_latency import REL_PATH, generated_text

    from npu_lint.engine.lint import check_source
    from npu_lint.rules.base import all_rules

    path = tmp_path / REL_PATH
    path.parent.mkdir(parents=True)
    path.write_text(generated_text(1500))
    src = SourceFile.from_text(str(path), path.read_text())
    codes = sorted(all_rules())
    assert gc.isenabled()
    check_source(src, codes)  # the rule modules loaded
    gc.collect()
    check_source(src, codes)
    young = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
    nodes = sum(1 for _ in ast.walk(ast.parse(src.text)))
    assert nodes > 10_000
    assert young < nodes // 10, (young, nodes)
