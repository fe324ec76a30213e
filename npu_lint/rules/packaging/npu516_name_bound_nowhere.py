"""NPU516 name-bound-nowhere."""

from __future__ import annotations

import ast
import builtins
import os

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.genscope import BINDERS, module_bindings

_IMPLICIT = frozenset(dir(builtins)) | {
    "__file__",
    "__name__",
    "__doc__",
    "__spec__",
    "__package__",
    "__path__",
    "__loader__",
    "__builtins__",
    "__annotations__",
    "__class__",
    "__module__",
    "__qualname__",
    "__dict__",
}
# a file that reaches its namespace dynamically (or catches the NameError) may bind names no statement shows
_DYNAMIC = frozenset({"globals", "locals", "vars", "exec", "eval", "NameError", "UnboundLocalError"})
_REHOMED = ("__code__", "FunctionType", "__globals__")
_BINDERS = (*BINDERS, ast.MatchStar, ast.MatchMapping, ast.AugAssign)  # genscope's, and the match captures


def _bound_inside(definition: ast.AST) -> set[str]:
    """Every name a top-level definition binds anywhere inside it (its nested scopes too: an
    over-approximation, so a read counts as unbound only when nothing in the definition binds it). An
    augmented assignment (``n += 1``) reads its target first, so it binds nothing by itself."""
    out: set[str] = set()
    augmented: set[int] = set()
    nodes = nodes_of(definition, *_BINDERS)
    for node in nodes:
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            augmented.add(id(node.target))
    for node in nodes:
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load) and id(node) not in augmented:
                out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
    return out


def _module_level_stores(body: list[ast.stmt]) -> set[str]:
    """Names the module's own statements bind wherever they sit (a walrus in an ``if`` test, a ``match``
    capture, a ``while`` or ``except*`` body): the definitions' bodies are their own scopes."""
    out: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            out.add(getattr(node, "name", ""))
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _annotation_names(definition: ast.AST) -> set[str]:
    """Names read only inside annotations (under ``from __future__ import annotations`` never evaluated)."""
    out: set[str] = set()
    for node in nodes_of(definition, ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign):
        ann = getattr(
            node, "returns" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else "annotation"
        )
        if ann is not None:
            out.update(n.id for n in ast.walk(ann) if isinstance(n, ast.Name))
    return out


class NameBoundNowhere(Rule):
    code = "NPU516"
    name = "name-bound-nowhere"
    summary = (
        "A function of the tree reads a name that nothing binds: no parameter, assignment, loop target or "
        "import of the function, no module-level definition and no builtin (an assignment dropped, or only "
        "ever updated with `+=`)."
    )
    why = (
        "A statement lost while porting a function (the `padding = ...` before its use, the `parts = []` "
        "an `append` fills, the `count = 0` a loop adds to) leaves a read that raises `NameError` or "
        "`UnboundLocalError` the first time the line runs, which on an NPU port is often a branch GPU CI never "
        "takes (the sequence-parallel path, the NPU module, a fallback). The check is flow-insensitive and "
        "conservative: a name bound anywhere in the top-level definition (nested scopes included), at module "
        "level (inside `if`/`try` too, a walrus or `match` capture included) or by Python itself is never reported, and a file that star-imports, "
        "reads `globals()`/`locals()`/`vars()`, calls `exec`/`eval`, catches `NameError` or re-homes a function "
        "into another module's globals is not judged; neither are patch specs (their bodies run in the "
        "generated module: NPU514)."
    )
    bad = (
        Example(
            """
            import torch


            def pad_for_sp(x, sp_world):
                if x.shape[1] % sp_world:
                    return torch.nn.functional.pad(x, (0, 0, 0, padding_size))
                return x
            """,
            title="the assignment the read needs was dropped",
        ),
        Example(
            """
            def split_tokens(lengths, world):
                for length in lengths:
                    tokens_split.append(length // world)
                return tokens_split
            """,
            title="the list an `append` fills was never created",
        ),
        Example(
            """
            def count_media(samples):
                for sample in samples:
                    num_tokens += sample["image_len"]
                return num_tokens
            """,
            title="only ever updated with `+=`",
        ),
    )
    good = (
        Example(
            """
            import torch


            def split_tokens(lengths, world):
                tokens_split = []
                num_tokens = 0
                for length in lengths:
                    tokens_split.append(length // world)
                    num_tokens += length
                return torch.tensor(tokens_split), num_tokens
            """
        ),
        Example(
            """
            try:
                from torch_npu import npu_format_cast
            except ImportError:
                npu_format_cast = None


            def cast(x):
                return x if npu_format_cast is None else npu_format_cast(x, 29)
            """
        ),
    )
    fix_safety = "No fix: restore the binding the function lost (or import the name)."
    node_types = (ast.Module,)

    _known: frozenset[str] = frozenset()  # the module's names, for the definition being checked

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        # a spec's bodies run in the generated module (NPU514 judges them); a function re-homed into another
        # module's globals (``types.FunctionType(f.__code__, other.__dict__)``) reads that module's names
        # a transformers modular file is a template its converter completes with the modeling file's names
        if kind.test or kind.spec or os.path.basename(ctx.source.path).startswith("modular_"):
            return False
        return not any(w in ctx.source.text for w in _REHOMED)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        module = module_bindings(node.body)
        if module is None:
            return
        text = self.ctx.source.text  # a name read is spelled in the text: without the word, no node to test
        if any(w in text for w in _DYNAMIC) and any(
            isinstance(n, ast.Name) and n.id in _DYNAMIC for n in nodes_of(node, ast.Name)
        ):
            return
        declared = {name for g in nodes_of(node, ast.Global) if isinstance(g, ast.Global) for name in g.names}
        known = frozenset(module | _module_level_stores(node.body) | declared | _IMPLICIT)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                # once per definition text and module names (a definition the editor lints again unchanged)
                self._known = known
                self.report_shared(self._check_definition, stmt, known)

    def _check_definition(self, stmt: ast.AST) -> None:
        """The reads of one top-level definition that nothing binds (``self._known``: the module's names)."""
        assert isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        # an augmented assignment's target is read first (``n += 1`` raises before any later read)
        augmented = {id(a.target) for a in nodes_of(stmt, ast.AugAssign) if isinstance(a, ast.AugAssign)}
        reads = sorted(
            (
                n
                for n in nodes_of(stmt, ast.Name)
                if isinstance(n, ast.Name)
                and (isinstance(n.ctx, ast.Load) or id(n) in augmented)
                and n.id not in self._known
            ),
            key=lambda n: (n.lineno, n.col_offset),
        )
        if not reads:
            return
        bound = _bound_inside(stmt) | _annotation_names(stmt)
        seen: set[str] = set()
        for read in reads:
            assert isinstance(read, ast.Name)
            if read.id in bound or read.id in seen:
                continue
            seen.add(read.id)
            self.report(
                read,
                f"`{read.id}` is read here but bound nowhere: no parameter, assignment, loop target or "
                f"import of `{stmt.name}` binds it, nor the module, nor Python: it raises NameError (or "
                "UnboundLocalError) when this line runs (a dropped assignment?)",
            )
