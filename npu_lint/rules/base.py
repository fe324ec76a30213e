"""The rule framework: ``Rule`` (one class per rule), ``Example``, and the per-file ``Context``.

A rule declares the ``ast`` node types it wants (``node_types``); the engine walks each file's tree once
and hands every node to the rules registered for its type (``visit``). Rules that need to know when a
subtree ends declare ``leave_types`` and implement ``leave``. ``finish`` runs after the walk.

The class attributes (code, name, summary, why, bad, good, fix_safety) are the rule's documentation
(``npu-lint rule CODE``, docs/rules/*.md) and its test cases (tests/test_rule_examples.py).
"""

from __future__ import annotations

import ast
import bisect
import re
import textwrap
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from npu_lint.core.astutil import dotted_name, literal_getattr, literal_import, walk
from npu_lint.core.diagnostics import SEVERITY_WARNING, Applicability, Diagnostic, Edit, Fix, Origin
from npu_lint.core.imports import add_import_edit
from npu_lint.core.memo import by_content
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
    # The measured precision on real code is not rule metadata: one source, npu_lint/rules/accuracy.json
    # (written by bench/accuracy/figures.py from bench/accuracy/reviewed.json), read by npu_lint.docs.
    default_enabled: ClassVar[bool] = True  # low-confidence rules are off unless selected explicitly
    severity: ClassVar[str] = SEVERITY_WARNING


TextCheck = str | tuple[str, ...] | Callable[[str], bool]


class Rule(RuleMeta):
    node_types: ClassVar[tuple[type[ast.AST], ...]] = ()
    leave_types: ClassVar[tuple[type[ast.AST], ...]] = ()
    # The cheap text pre-check: what a file's text must hold for the rule to find anything in it. Every entry
    # must hold: a word (a substring), a tuple of words (any of them), or a function of the text. The engine
    # applies it before the walk (``may_fire``): a rule that cannot fire on a file is never instantiated.
    requires: ClassVar[tuple[TextCheck, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code:
            if cls.code in REGISTRY and REGISTRY[cls.code] is not cls:
                raise RuntimeError(f"duplicate rule code {cls.code}")
            REGISTRY[cls.code] = cls

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @classmethod
    def may_fire(cls, text: str, contains: Callable[[str], bool] | None = None) -> bool:
        """Whether ``text`` passes the rule's ``requires`` pre-check (True when it declares none). ``contains``:
        whether the text holds a word (the engine's ``core.textscan.WordScan``, which searches each word once)."""
        if contains is None:
            contains = text.__contains__
        for entry in cls.requires:
            if type(entry) is str:
                if not contains(entry):
                    return False
            elif type(entry) is tuple:
                for word in entry:  # a loop, not any(...): this runs for every rule on every file
                    if contains(word):
                        break
                else:
                    return False
            elif not entry(text):  # type: ignore[operator]
                return False
        return True

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

    def report_shared(self, check: Callable[..., None], node: ast.AST, *context: Hashable) -> None:
        """``check(node)``, a method of this rule whose reports depend on ``node``'s subtree and ``context``
        alone, with its reports shared with every verbatim copy of ``node`` (a generated NPU file's copy of a
        GPU function, a function the editor lints again unchanged): computed once per text and replayed at the
        copy's own nodes (``core.memo.by_content``). Its reports must be at nodes, without fixes or origins
        (else it runs unshared); what it leaves on the rule is not kept for a copy, so it must keep nothing that
        another visit reads, and it must not read the file beyond ``node`` (put what it reads in ``context``)."""
        try:
            found = by_content(
                _recorded, node, self.ctx.source.lines, type(self), check.__name__, context, unkeyed=(self,)
            )
        except _Unshared:
            check(node)
            return
        for at, message in found:
            self.ctx.add(self, at, message, None, None)


class _Unshared(Exception):
    """A shared check reported something a copy cannot reuse (a position, a fix, an origin)."""


def _recorded(
    node: ast.AST, cls: type[Rule], method: str, context: tuple[Hashable, ...], rule: Rule
) -> list[tuple[ast.AST, str]]:
    """What ``rule.method(node)`` reports, as (node, message) pairs, instead of reporting it."""
    found: list[tuple[ast.AST, str]] = []

    def record(at: object, message: str, fix: object = None, *, origin: object = None) -> None:
        if fix is not None or origin is not None or not isinstance(at, ast.AST):
            raise _Unshared
        found.append((at, message))

    rule.report = record  # type: ignore[method-assign]  # the instance's own attribute, removed below
    try:
        getattr(rule, method)(node)
    finally:
        del rule.report
    return found


class ProjectRule(RuleMeta):
    """A rule over the whole set of linted files (registration, specs, pins); runs after file rules.

    ``fix_mode`` is True when the run applies or shows fixes (--fix, --diff, editor actions): expensive
    parts of a fix (formatting a created file) may be skipped otherwise."""

    fix_mode: bool = False
    # True when the rule's findings over a set of files are the union of its findings over each model package's
    # files (nothing compared across packages): in a pool run it then runs in the worker that linted the
    # package, on the trees that worker parsed (``engine.pool.ProjectJob``)
    per_package: ClassVar[bool] = False
    # imports a fixer by its reference (``npu_lint.fixers.resolve``), set on the instance by the engine: project
    # rules name their fixers as ``"npu_lint.fixers.<module>:<function>"`` and never import a fixer
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


def _static_alias(value: ast.AST, imports: dict[str, str]) -> str | None:
    """What an assigned value names statically: a literal dynamic import, or an attribute / ``getattr``-literal
    chain rooted at one or at an imported name (``kernel = torch_npu.npu_rms_norm``)."""
    attrs: list[str] = []
    node = value
    while True:
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
            continue
        found = literal_getattr(node)
        if found is not None:
            attrs.append(found[1])
            node = found[0]
            continue
        break
    root = literal_import(node)
    if root is None:
        if not (isinstance(node, ast.Name) and node.id in imports and node is not value):
            return None
        root = imports[node.id]
    return ".".join([root, *reversed(attrs)])


def collect_imports(body: list[ast.stmt], imports: dict[str, str]) -> None:
    """Import bindings of a statement list (``if``/``try`` blocks included) into ``imports``."""
    _collect_imports(body, imports)


def _is_type_checking(test: ast.expr) -> bool:
    return (dotted_name(test) or "").split(".")[-1] == "TYPE_CHECKING"


def _collect_imports(body: list[ast.stmt], imports: dict[str, str], runtime_only: bool = False) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    imports[root] = root
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                module = "." * stmt.level + (stmt.module or "")
            else:
                module = stmt.module or ""
            for alias in stmt.names:
                if alias.name != "*":
                    imports[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and (module := _static_alias(stmt.value, imports)) is not None
        ):  # npu = importlib.import_module("torch_npu"); fa = getattr(flash_attn, "flash_attn_func")
            imports[stmt.targets[0].id] = module
        elif isinstance(stmt, (ast.If, ast.Try)):
            if not (runtime_only and isinstance(stmt, ast.If) and _is_type_checking(stmt.test)):
                _collect_imports(stmt.body, imports, runtime_only)
            _collect_imports(getattr(stmt, "orelse", []), imports, runtime_only)
            for handler in getattr(stmt, "handlers", []):
                _collect_imports(handler.body, imports, runtime_only)


_UNSET = object()
_ENCLOSING: tuple[tuple[type[ast.AST], ...], ...] = ((ast.FunctionDef, ast.AsyncFunctionDef), (ast.ClassDef,))
_WORD = re.compile(r"\w+")
_ASSIGNED_ROOT = re.compile(r"=\s*(\w+)\.")
_EMPTY: list[Project] = []


def _no_project() -> Project:
    """The project of a file outside any tree (built-in profile), shared."""
    if not _EMPTY:
        _EMPTY.append(Project())
    return _EMPTY[0]


_BODY_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _functions(tree: ast.AST, lambdas: bool) -> list[ast.AST]:
    """Every function of ``tree`` (and every lambda when ``lambdas``). A ``def`` is a statement, so without
    lambdas only statement lists are followed (a tenth of the nodes); a file that may hold a lambda (its
    text says ``lambda``) is walked whole."""
    if lambdas:
        return walk(tree)
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(node)
        for name in _BODY_FIELDS:
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend(value)
    return out


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
        # (last ancestor, ancestor count, enclosing function, enclosing class) of the last question
        self._enclosing_seen: list[Any] = [_UNSET, -1, _UNSET, _UNSET]

    @property
    def runtime_imports(self) -> dict[str, str]:
        """Like ``imports`` without the names bound only under ``if TYPE_CHECKING:`` (absent at run time)."""
        cached = self.memo.get("runtime_imports")
        if cached is None:
            cached = self.memo["runtime_imports"] = {}
            _collect_imports(self.tree.body, cached, runtime_only=True)  # type: ignore[arg-type]
        return cached  # type: ignore[return-value]

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
        return self._enclosing_at(0)  # type: ignore[return-value]

    @property
    def class_(self) -> ast.ClassDef | None:
        return self._enclosing_at(1)  # type: ignore[return-value]

    def _enclosing_at(self, which: int) -> ast.AST | None:
        """``enclosing(FunctionDef, AsyncFunctionDef)`` (0) or ``enclosing(ClassDef)`` (1), remembered for the
        current ancestors: the rules of one node ask it many times. A walk's ancestor stack is known by its
        length and its last node (a node has one chain of ancestors)."""
        parents = self.parents
        last = parents[-1] if parents else None
        seen = self._enclosing_seen
        if seen[0] is not last or seen[1] != len(parents):
            seen[:] = [last, len(parents), _UNSET, _UNSET]
        found = seen[2 + which]
        if found is _UNSET:
            found = seen[2 + which] = self.enclosing(*_ENCLOSING[which])
        return found  # type: ignore[return-value]

    def dotted(self, node: ast.AST) -> str | None:
        """``a.b.c`` for a Name/Attribute chain, without resolving imports."""
        return dotted_name(node)

    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name of a Name/Attribute chain with its root resolved through module imports (aliases
        included: ``from veomni.ops.dispatch import OpSlot as _Slot`` makes ``_Slot`` ``veomni.ops.dispatch.OpSlot``;
        ``npu = importlib.import_module("torch_npu")`` makes ``npu`` ``torch_npu``). A chain may start at a
        dynamic import or a ``getattr`` with literal names: ``importlib.import_module("torch_npu").npu_x`` and
        ``getattr(torch_npu, "npu_x")`` are both ``torch_npu.npu_x``. This is the one name resolver of the rules:
        :meth:`local_qualname` adds function-local imports."""
        typ = type(node)
        if typ is ast.Name:
            name = node.id  # type: ignore[attr-defined]
            return self.imports.get(name, name)
        if typ is not ast.Attribute and typ is not ast.Call:
            return None
        cached = self._qualnames.get(node, _UNSET)
        if cached is not _UNSET:
            return cached  # type: ignore[return-value]
        qual = self._resolve_chain(node, self.imports)
        self._qualnames[node] = qual
        return qual

    def _resolve_chain(self, node: ast.AST, imports: dict[str, str]) -> str | None:
        attrs: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                attrs.append(node.attr)
                node = node.value
                continue
            if isinstance(node, ast.Call):
                found = literal_getattr(node)
                if found is not None:
                    attrs.append(found[1])
                    node = found[0]
                    continue
                module = literal_import(node)
                if module is None and node.args and isinstance(node.func, (ast.Name, ast.Attribute)):
                    func = self._resolve_chain(node.func, imports)
                    if func == "importlib.import_module":
                        first = node.args[0]
                        if isinstance(first, ast.Constant) and isinstance(first.value, str):
                            module = first.value
                if module is None:
                    return None
                root = module
                break
            if isinstance(node, ast.Name):
                root = imports.get(node.id, node.id)
                break
            return None
        return ".".join([root, *reversed(attrs)])

    def local_imports(self, func: ast.AST) -> dict[str, str]:
        """Names bound by imports inside ``func`` (its own body, nested blocks included): ``import x as y``,
        ``from m import n``, ``y = importlib.import_module("x")``. Relative modules stay relative."""
        key = ("local_imports", id(func))
        cached = self.memo.get(key)
        if cached is not None and cached[0] is func:  # type: ignore[index]
            return cached[1]  # type: ignore[index]
        names: dict[str, str] = {}
        first, last = getattr(func, "lineno", 1), getattr(func, "end_lineno", None) or 0
        text = "\n".join(self.source.lines[first - 1 : last])
        if (
            "import" not in text
            and "getattr" not in text
            and not any(root in self.imports for root in _ASSIGNED_ROOT.findall(text))
        ):
            self.memo[key] = (func, names)
            return names
        seeded = dict(self.imports)  # chains rooted at module imports resolve (kernel = torch_npu.npu_x)
        stack = list(getattr(func, "body", []))
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found: dict[str, str] = {}
                _collect_imports([stmt], found)
                seeded.update(found)
                names.update(found)
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and (alias := _static_alias(stmt.value, seeded)) is not None
            ):
                seeded[stmt.targets[0].id] = names[stmt.targets[0].id] = alias
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(stmt, field, ()))
        self.memo[key] = (func, names)
        return names

    def may_be_imported(self, name: str) -> bool:
        """A cheap pre-check: ``name`` appears on a line that imports something (anywhere in the file, in
        strings too). Names that do not can skip :meth:`local_qualname`."""
        words = self.memo.get("import_words")
        if words is None:
            found: set[str] = set()
            continued = False  # inside a parenthesised or backslash-continued import
            for line in self.source.text.splitlines():
                if not (continued or "import" in line):
                    continue
                found.update(_WORD.findall(line))
                if continued:
                    continued = ")" not in line and not line.rstrip().endswith(")")
                else:
                    tail = line.split("import", 1)[1]
                    continued = ("(" in tail and ")" not in tail) or line.rstrip().endswith("\\")
            words = self.memo["import_words"] = frozenset(found)
        return name in words  # type: ignore[operator]

    def local_qualname(self, node: ast.AST) -> str | None:
        """:meth:`qualname` at the current traversal position: imports of the enclosing function first."""
        if type(node) is ast.Name and not self.may_be_imported(node.id):  # type: ignore[attr-defined]
            return node.id  # type: ignore[attr-defined]
        func = self.function
        if func is not None:
            key = ("scope_imports", id(func))
            cached = self.memo.get(key)
            if cached is None or cached[0] is not func:  # type: ignore[index]
                merged: dict[str, str] | None = None
                for parent in self.parents:  # outermost first: inner imports win
                    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        local = self.local_imports(parent)
                        if local:
                            merged = {**(merged or self.imports), **local}
                cached = (func, merged)
                self.memo[key] = cached
            merged = cached[1]  # type: ignore[index]
            if merged is not None:
                if type(node) is ast.Name:
                    return merged.get(node.id, node.id)  # type: ignore[attr-defined]
                return self._resolve_chain(node, merged)
        return self.qualname(node)

    def add_imports(self, bindings: dict[str, str]) -> None:
        """Import bindings from code the file carries as strings (post-import blocks of a patch spec): they
        reach the generated module's scope. Existing bindings win."""
        for name, target in bindings.items():
            if name not in self.imports:
                self.imports[name] = target
                self._qualnames.clear()

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
        if fix is not None and fix.applicability is not Applicability.DISPLAY and fix.edits:
            fix = self._default_call_guard(node, fix)
        if fix is not None and fix.applicability is Applicability.SAFE and fix.edits:
            fix = self._import_time_guard(node, fix)
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

    def evaluated_at_import(self, node: ast.AST | tuple[int, int, int, int]) -> bool:
        """Whether the node being reported runs when the module is imported: module level, a class body, a
        default value, decorator or annotation of a function (anything not inside a function or lambda body)."""
        chain = [*self.parents] if isinstance(node, tuple) else [*self.parents, node]
        for i in range(len(chain) - 1, 0, -1):
            parent, child = chain[i - 1], chain[i]
            # a statement child of a function is in its body (O(1): `in parent.body` scanned every statement)
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(child, ast.stmt):
                return False
            if isinstance(parent, ast.Lambda) and child is parent.body:
                return False
        return True

    def default_ranges(self) -> list[tuple[int, int]]:
        """Text ranges of every default value of a function or lambda parameter in the file (once per file)."""
        cached = self.memo.get("default-ranges")
        if cached is None:
            out = []
            for node in _functions(self.tree, "lambda" in self.source.text):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    for default in [*node.args.defaults, *node.args.kw_defaults]:
                        if default is not None:
                            out.append(self.source.node_range(default))
            cached = self.memo["default-ranges"] = sorted(out)
        return cached  # type: ignore[return-value]

    def _in_default(self, start: int, end: int) -> bool:
        """Whether ``start:end`` lies inside a default value's range: some range starting at or before ``start``
        ends at or after ``end``, i.e. the largest end among the ranges starting at or before ``start`` (a
        bisection over the sorted ranges, not a scan of every default of the file per edit)."""
        cached = self.memo.get("default-ranges-reach")
        if cached is None:
            ranges = self.default_ranges()
            reach: list[int] = []
            for _start, stop in ranges:
                reach.append(max(stop, reach[-1]) if reach else stop)
            cached = self.memo["default-ranges-reach"] = ([r[0] for r in ranges], reach)
        starts, reach = cached  # type: ignore[misc]
        i = bisect.bisect_right(starts, start)
        return i > 0 and reach[i - 1] >= end

    def _default_call_guard(self, node: ast.AST | tuple[int, int, int, int], fix: Fix) -> Fix:
        """A fix that would put a call into a default argument is never applied (ruff B008: the call runs
        once, at import time, and the tree's quality gate rejects it): display only, with the reason. A fix
        that takes the device inside the body instead (``device=None`` + ``if device is None: ...``) edits the
        default without a call and passes."""
        text = self.source.text
        calls = [e for e in fix.edits if e.content.count("(") > text[e.start : e.end].count("(")]
        if not calls or not any(self._in_default(e.start, e.end) for e in calls):
            return fix
        from dataclasses import replace

        return replace(
            fix,
            applicability=Applicability.DISPLAY,
            reason="it would put a call into a default argument (ruff B008: evaluated once, at import time)",
        )

    def _import_time_guard(self, node: ast.AST | tuple[int, int, int, int], fix: Fix) -> Fix:
        """A fix that makes a default value or module-level expression call a function at import time is unsafe
        (ruff B008; VeOmni's ``init_device="cuda"`` defaults would query the device on import)."""
        text = self.source.text
        adds_call = any(
            e.content.count("(") > text[e.start : e.end].count("(")
            and not e.content.lstrip().startswith(("from ", "import "))
            and ".add_import(" not in e.content
            for e in fix.edits
        )
        if not adds_call or not self.evaluated_at_import(node):
            return fix
        from dataclasses import replace

        return replace(
            fix,
            applicability=Applicability.UNSAFE,
            reason="the new call runs at import time (a default value or module-level expression)",
        )

    # -- fix helpers --------------------------------------------------------------------------------
    def replace(self, node: ast.AST, text: str) -> Edit:
        start, end = self.source.node_range(node)
        return Edit(start, end, text)

    def import_edits(self, module: str, name: str) -> list[Edit]:
        """Edits that make ``name`` importable from ``module`` in this file (none if already bound).

        In a patch spec the name must also reach the generated file, so a ``config.add_import(...)`` call is
        added as well (after the last one, or after the ``PatchConfig(...)`` assignment).
        """
        if self.runtime_imports.get(name) == f"{module}.{name}":
            return []
        edits = [add_import_edit(self.source, self.tree, module, name)]
        if self.source.kind.spec:
            edit = self._spec_import_edit(module, name)
            if edit is not None:
                edits.append(edit)
        return edits

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
