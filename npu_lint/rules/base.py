"""The rule framework: ``Rule`` (one class per rule), ``Example``, and the per-file ``Context``.

A rule declares the ``ast`` node types it wants (``node_types``); the engine walks each file's tree once
and hands every node to the rules registered for its type (``visit``). Rules that need to know when a
subtree ends declare ``leave_types`` and implement ``leave``. ``finish`` runs after the walk.

The class attributes (code, name, summary, why, bad, good, fix_safety) are the rule's documentation
(``npu-lint rule CODE``, docs/rules/*.md) and its test cases (tests/test_rule_examples.py).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from npu_lint.core.astutil import dotted_name, import_table
from npu_lint.core.diagnostics import SEVERITY_WARNING, Applicability, Diagnostic, Edit, Fix, Origin
from npu_lint.veomni.project import Project

if TYPE_CHECKING:
    from npu_lint.core.source import SourceFile

REGISTRY: dict[str, type[Rule]] = {}
PROJECT_REGISTRY: dict[str, type[ProjectRule]] = {}

DEFAULT_EXAMPLE_PATH = "veomni/models/transformers/toy/modeling_toy.py"


@dataclass(frozen=True)
class Example:
    """A documented example. ``code`` is dedented. For bad examples ``fixed`` is the expected text after
    applying every fix (safe and unsafe) to a fixpoint, or None when the rule offers no applicable fix."""

    code: str
    fixed: str | None = None
    path: str = DEFAULT_EXAMPLE_PATH
    title: str = ""

    @property
    def source(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")

    @property
    def expected(self) -> str | None:
        return None if self.fixed is None else textwrap.dedent(self.fixed).lstrip("\n")


class RuleMeta:
    """Documentation fields shared by file rules and project rules."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    why: ClassVar[str] = ""
    bad: ClassVar[tuple[Example, ...]] = ()
    good: ClassVar[tuple[Example, ...]] = ()
    fix_safety: ClassVar[str] = "No fix."
    precision: ClassVar[str] = ""  # measured precision on real code, stated in the docs
    default_enabled: ClassVar[bool] = True  # low-confidence rules are off unless selected explicitly
    severity: ClassVar[str] = SEVERITY_WARNING


class Rule(RuleMeta):
    node_types: ClassVar[tuple[type[ast.AST], ...]] = ()
    leave_types: ClassVar[tuple[type[ast.AST], ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code:
            if cls.code in REGISTRY and REGISTRY[cls.code] is not cls:
                raise RuntimeError(f"duplicate rule code {cls.code}")
            REGISTRY[cls.code] = cls

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Whether this rule runs on the file at all (default: model code, i.e. not veomni/ops or tests)."""
        return ctx.source.kind.model_code

    def visit(self, node: ast.AST) -> None:  # pragma: no cover - interface
        pass

    def leave(self, node: ast.AST) -> None:  # pragma: no cover - interface
        pass

    def finish(self) -> None:
        pass

    def report(
        self,
        node: ast.AST | tuple[int, int, int, int],
        message: str,
        fix: Fix | None = None,
        *,
        origin: Origin | None = None,
    ) -> Diagnostic:
        """Report at ``node`` (or at (line, col, end_line, end_col) in code points, line 1-based)."""
        return self.ctx.add(self, node, message, fix, origin)


class ProjectRule(RuleMeta):
    """A rule over the whole set of linted files (registration, specs, pins); runs after file rules.

    ``fix_mode`` is True when the run applies or shows fixes (--fix, --diff, editor actions): expensive
    parts of a fix (formatting a created file) may be skipped otherwise."""

    fix_mode: bool = False
    # the fixer registry's lookup (``npu_lint.fixers.builder``), set on the instance by the engine: project
    # rules build their fixes through it and never import a fixer
    fixer_lookup: Callable[[str], Callable[..., Any]] | None = None

    def fixer(self, name: str) -> Callable[..., Any]:
        if self.fixer_lookup is None:
            raise RuntimeError(f"{self.code}: no fixer registry (project rules run through the engine)")
        return self.fixer_lookup(name)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code:
            if cls.code in PROJECT_REGISTRY and PROJECT_REGISTRY[cls.code] is not cls:
                raise RuntimeError(f"duplicate rule code {cls.code}")
            PROJECT_REGISTRY[cls.code] = cls

    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:  # pragma: no cover
        return ()


def _collect_imports(body: list[ast.stmt], imports: dict[str, str]) -> None:
    import_table(body, imports)  # core.astutil's one import table


_UNSET = object()
_EMPTY: list[Project] = []


def _no_project() -> Project:
    """The project of a file outside any tree (built-in profile), shared."""
    if not _EMPTY:
        _EMPTY.append(Project())
    return _EMPTY[0]


class Context:
    """Per-file state shared by the rules during the single traversal."""

    def __init__(
        self, source: SourceFile, tree: ast.Module, project: Project | None = None, fix_mode: bool = False
    ) -> None:
        self.source = source
        self.tree = tree
        # the tree's index and API profile; outside any tree, the built-in profile (never None)
        self.project: Project = project if project is not None else _no_project()
        # True when fixes will be applied (--fix, --diff, editor code actions). Rules whose fixes are
        # expensive to build return ``Fix(..., deferred=True)`` without edits when it is False.
        self.fix_mode = fix_mode
        self.parents: list[ast.AST] = []  # ancestors of the node being visited (outermost first)
        self.diagnostics: list[Diagnostic] = []
        self.imports: dict[str, str] = {}
        _collect_imports(tree.body, self.imports)
        self._qualnames: dict[ast.AST, str | None] = {}  # qualname() per node: several rules ask per call
        # per-file results of rule helpers, computed once (key: a tuple naming the helper and its arguments)
        self.memo: dict[object, object] = {}

    # -- tree helpers -------------------------------------------------------------------------------
    @property
    def parent(self) -> ast.AST | None:
        return self.parents[-1] if self.parents else None

    def enclosing(self, *types: type[ast.AST]) -> ast.AST | None:
        for node in reversed(self.parents):
            if isinstance(node, types):
                return node
        return None

    @property
    def function(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return self.enclosing(ast.FunctionDef, ast.AsyncFunctionDef)  # type: ignore[return-value]

    @property
    def class_(self) -> ast.ClassDef | None:
        return self.enclosing(ast.ClassDef)  # type: ignore[return-value]

    def dotted(self, node: ast.AST) -> str | None:
        """``a.b.c`` for a Name/Attribute chain, without resolving imports."""
        return dotted_name(node)

    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name of a Name/Attribute chain with its root resolved through module imports."""
        typ = type(node)
        if typ is ast.Name:
            name = node.id  # type: ignore[attr-defined]
            return self.imports.get(name, name)
        if typ is not ast.Attribute:
            return None
        cached = self._qualnames.get(node, _UNSET)
        if cached is not _UNSET:
            return cached  # type: ignore[return-value]
        dotted = dotted_name(node)
        if dotted is None:
            qual = None
        else:
            root, _, rest = dotted.partition(".")
            qual = f"{self.imports.get(root, root)}.{rest}"
        self._qualnames[node] = qual
        return qual

    # -- reporting ----------------------------------------------------------------------------------
    def add(
        self,
        rule: Rule,
        node: ast.AST | tuple[int, int, int, int],
        message: str,
        fix: Fix | None,
        origin: Origin | None,
    ) -> Diagnostic:
        src = self.source
        if isinstance(node, tuple):
            line, col, end_line, end_col = node
        else:
            line = node.lineno  # type: ignore[attr-defined]
            col = src.char_col(line, node.col_offset)  # type: ignore[attr-defined]
            end_line = node.end_lineno or line  # type: ignore[attr-defined]
            end_col = src.char_col(end_line, node.end_col_offset or 0)  # type: ignore[attr-defined]
        diag = Diagnostic(
            code=rule.code,
            name=rule.name,
            message=message,
            path=src.path,
            line=line,
            col=col,
            end_line=end_line,
            end_col=end_col,
            fix=fix,
            origin=origin,
            severity=rule.severity,
            source_line=src.line_text(line),
        )
        self.diagnostics.append(diag)
        return diag

    # -- fix helpers --------------------------------------------------------------------------------
    def replace(self, node: ast.AST, text: str) -> Edit:
        start, end = self.source.node_range(node)
        return Edit(start, end, text)

    def import_edits(self, module: str, name: str) -> list[Edit]:
        """Edits that make ``name`` importable from ``module`` in this file (none if already bound).

        In a patch spec the name must also reach the generated file, so a ``config.add_import(...)`` call is
        added as well (after the last one, or after the ``PatchConfig(...)`` assignment).
        """
        if self.imports.get(name) == f"{module}.{name}":
            return []
        edits = [self._module_import_edit(f"from {module} import {name}\n")]
        if self.source.kind.spec:
            edit = self._spec_import_edit(module, name)
            if edit is not None:
                edits.append(edit)
        return edits

    def _module_import_edit(self, line: str) -> Edit:
        body = self.tree.body
        insert_after: ast.stmt | None = None
        for i, stmt in enumerate(body):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                insert_after = stmt  # module docstring
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                insert_after = stmt
                continue
            break
        if insert_after is None:
            return Edit(0, 0, line)
        end_line = insert_after.end_lineno or insert_after.lineno
        offset = self.source.offset(end_line + 1, 0) if end_line < len(self.source.lines) else None
        if offset is None:
            return Edit(len(self.source.text), len(self.source.text), "\n" + line.rstrip("\n"))
        return Edit(offset, offset, line)

    def _spec_import_edit(self, module: str, name: str) -> Edit | None:
        last: ast.stmt | None = None
        config_name = "config"
        for stmt in self.tree.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Call)
                and self.dotted(stmt.value.func) in ("PatchConfig", "deepcopy", "copy.deepcopy")
                and isinstance(stmt.targets[0], ast.Name)
            ):
                config_name = stmt.targets[0].id
                last = stmt
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr == "add_import"
            ):
                for arg in stmt.value.args[:1]:
                    if isinstance(arg, ast.Constant) and arg.value == module:
                        names = next((k.value for k in stmt.value.keywords if k.arg == "names"), None)
                        if isinstance(names, (ast.List, ast.Tuple)) and any(
                            isinstance(e, ast.Constant) and e.value == name for e in names.elts
                        ):
                            return None
                last = stmt
        if last is None:
            return None
        end_line = last.end_lineno or last.lineno
        offset = self.source.offset(end_line + 1, 0)
        text = f'{config_name}.add_import("{module}", names=["{name}"])\n'
        return Edit(offset, offset, text)


def make_fix(
    title: str,
    edits: Iterable[Edit],
    applicability: Applicability = Applicability.SAFE,
    reason: str = "",
) -> Fix:
    return Fix(title, tuple(edits), applicability, (), reason)


def all_rules() -> dict[str, type[RuleMeta]]:
    """Every registered rule (file and project rules), by code. Imports the rule modules."""
    load_rule_modules()
    merged: dict[str, type[RuleMeta]] = {**REGISTRY, **PROJECT_REGISTRY}
    return dict(sorted(merged.items()))


_LOADED = False


def load_rule_modules() -> None:
    """Import every rule module of ``npu_lint.rules`` (all families) so their classes register themselves."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    import npu_lint.rules as pkg

    # one rule per module: npu_lint/rules/<family>/<code>_<name>.py (private modules start with "_")
    for info in sorted(pkgutil.walk_packages(pkg.__path__, "npu_lint.rules."), key=lambda m: m.name):
        leaf = info.name.rpartition(".")[2]
        if not info.ispkg and leaf != "base" and not leaf.startswith("_"):
            importlib.import_module(info.name)
    _LOADED = True
