"""NPU703 text-only-dummy-forward."""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable

from npu_lint.core.astutil import call_name, nodes_of, scoped_memo
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules._handles import method_name, spec_target
from npu_lint.rules.base import Example
from npu_lint.rules.multimodal._shared import (
    MEDIA,
    TOWERS,
    PatchedMethod,
    WrapperRule,
    def_span,
    params_of,
    upstream_towers,
)
from npu_lint.veomni.mediaflow import DUMMY_FORWARD, is_dummy_callee, medium_of, no_media_exits
from npu_lint.veomni.patchgen import generated_banner
from npu_lint.veomni.upstream import last_name


def _dummy_calls(func: ast.AST) -> list[ast.Call]:
    return [
        n
        for n in nodes_of(func, ast.Call)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == DUMMY_FORWARD
    ]


def _tower_of(call: ast.Call) -> str | None:
    value = call.func.value  # type: ignore[attr-defined]
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        return value.attr
    return None


def _is_zero(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and node.value == 0
    )


def _zero_products(func: ast.AST) -> list[ast.expr]:
    """The products by zero of ``func``, however spelled: `x * 0.0`, `0 * x`, `x.mul(0.0)`, `x.mul_(0)`,
    `torch.mul(x, 0.0)`."""
    out: list[ast.expr] = []
    for node in nodes_of(func, ast.BinOp, ast.Call):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if _is_zero(node.left) or _is_zero(node.right):
                out.append(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("mul", "mul_")
        ):
            factors = [*node.args, *(k.value for k in node.keywords if k.arg == "other")]
            if any(_is_zero(f) for f in factors[-1:]):  # the multiplier: the last positional (or `other=`)
                out.append(node)
    return out


def _zeroed(func: ast.FunctionDef, call: ast.Call) -> bool:
    """Whether the dummy forward's output reaches a multiplication by zero: directly
    (`tower.dummy_forward().x.mean() * 0.0`) or through locals it is assigned to (three steps at most)."""
    products = [set(_walk(p)) for p in _zero_products(func)]
    if any(call in nodes for nodes in products):
        return True
    product_names = {n.id for nodes in products for n in nodes if isinstance(n, ast.Name)}
    assigns = []
    for stmt in nodes_of(func, ast.Assign):
        if isinstance(stmt, ast.Assign):
            inside = set(_walk(stmt.value))
            names = {n.id for n in inside if isinstance(n, ast.Name)}
            targets = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            assigns.append((call in inside, names, targets))
    derived: set[str] = set()
    for _ in range(3):
        before = len(derived)
        for has_call, names, targets in assigns:
            if has_call or names & derived:
                derived |= targets
        if len(derived) == before:
            break
    return bool(derived & product_names)


def _dummy_helpers(
    tree: ast.Module, func: ast.FunctionDef
) -> list[tuple[ast.Call, ast.FunctionDef, list[ast.Call]]]:
    """The calls of ``func`` to a function of the same file that runs a tower's dummy forward itself (a method of
    its class, `self._audio_dummy(...)`, or a module-level helper, `_run_dummy(self, ...)`): (the call in
    ``func``, the helper, the helper's dummy forwards)."""
    defs: dict[str, ast.FunctionDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            defs.setdefault(stmt.name, stmt)
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and func in stmt.body:
            defs.update((m.name, m) for m in stmt.body if isinstance(m, ast.FunctionDef))
    out: list[tuple[ast.Call, ast.FunctionDef, list[ast.Call]]] = []
    for call in nodes_of(func, ast.Call):
        assert isinstance(call, ast.Call)
        callee = call.func
        if (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and callee.value.id == "self"
        ):
            name = callee.attr
        elif isinstance(callee, ast.Name):
            name = callee.id
        else:
            continue
        helper = defs.get(name)
        if helper is None or helper is func:
            continue
        inner = [c for c in _dummy_calls(helper) if _tower_of(c) is not None]
        if inner:
            out.append((call, helper, inner))
    return out


def _returned(func: ast.FunctionDef, call: ast.Call) -> bool:
    """Whether the dummy forward's output (or a value computed from it) is what ``func`` returns."""
    flow = _Flow(func)
    tainted = _tainted_defs(func, flow, {call})
    return any(
        isinstance(n, ast.Return) and n.value is not None and _touches(n.value, flow, {call}, tainted)
        for n in _walk(func)
    )


_CASTS = {"to", "mean", "sum", "float", "type_as", "detach", "contiguous", "view", "reshape", "flatten"}
_PRIMARY = {"pooler_output", "last_hidden_state", "hidden_states"}  # the tower's main output (any of them)


def _mentions(node: ast.AST, roots: set[ast.AST], tainted: set[str]) -> bool:
    return any(n in roots or (isinstance(n, ast.Name) and n.id in tainted) for n in _walk(node))


class _Flow:
    """Which definition of a local reaches a use: the last assignment of the name on an earlier line (textual
    order approximates the branches of a forward, which VeOmni writes as sequential `if`/`elif` blocks)."""

    def __init__(self, func: ast.FunctionDef) -> None:
        self.defs: dict[str, list[tuple[int, ast.AST]]] = {}
        for node in nodes_of(func, ast.Assign, ast.AnnAssign, ast.AugAssign):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t in _walk(target):
                        if isinstance(t, ast.Name):
                            self.defs.setdefault(t.id, []).append((node.lineno, node))
        self.lines: dict[str, list[int]] = {}
        for name, entries in self.defs.items():
            entries.sort(key=lambda e: e[0])
            self.lines[name] = [line for line, _node in entries]

    def reaching(self, name: ast.Name) -> ast.AST | None:
        lines = self.lines.get(name.id)
        if not lines:
            return None
        at = bisect.bisect_left(lines, name.lineno)  # the last definition on an earlier line
        return self.defs[name.id][at - 1][1] if at else None


def _tainted_defs(func: ast.FunctionDef, flow: _Flow, roots: set[ast.AST]) -> set[ast.AST]:
    tainted: set[ast.AST] = set()
    assigns = nodes_of(func, ast.Assign)  # read only
    # what `_touches(node.value, ...)` reads, once per assignment: whether it holds a root, and the definitions its
    # loaded names reach (the rounds below only ask whether one of those is tainted yet)
    facts: list[tuple[ast.Assign, bool, list[ast.AST]]] = []
    for node in assigns:
        assert isinstance(node, ast.Assign)
        rooted = False
        reached: list[ast.AST] = []
        for n in _walk(node.value):
            if n in roots:
                rooted = True
                break
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                found = flow.reaching(n)
                if found is not None:
                    reached.append(found)
        facts.append((node, rooted, reached))
    for _ in range(6):
        before = len(tainted)
        for node, rooted, reached in facts:
            if node not in tainted and (rooted or any(d in tainted for d in reached)):
                tainted.add(node)
        if len(tainted) == before:
            break
    return tainted


def _touches(node: ast.AST, flow: _Flow, roots: set[ast.AST], tainted: set[ast.AST]) -> bool:
    for n in _walk(node):
        if n in roots:
            return True
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and flow.reaching(n) in tainted:
            return True
    return False


def _derived(func: ast.FunctionDef, flow: _Flow, call: ast.Call) -> set[ast.AST]:
    """The zero products (`x * 0.0`) computed from this dummy forward's output (through locals)."""
    tainted = _tainted_defs(func, flow, {call})
    return {p for p in _zero_products(func) if _touches(p, flow, {call}, tainted)}


def _consumed(func: ast.FunctionDef, call: ast.Call) -> bool:
    """Whether the dummy forward's zero-valued output reaches the text path: added to a value that is not part
    of the dummy chain (`inputs_embeds + fake`), passed to a call that is not a conversion of it, or returned."""
    flow = _Flow(func)
    roots = _derived(func, flow, call) or {call}
    tainted = _tainted_defs(func, flow, roots)

    def touches(node: ast.AST) -> bool:
        return _touches(node, flow, roots, tainted)

    def clean_name(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and n.id != "self"
            and flow.reaching(n) not in tainted
            and not any(r in set(_walk(node)) for r in roots)
            for n in _walk(node)
        )

    holder: dict[ast.AST, ast.Assign] = {}  # BinOp -> the statement storing it in a local
    for node in nodes_of(func, ast.Assign):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            for n in _walk(node.value):
                if isinstance(n, ast.BinOp):
                    holder[n] = node

    def dead(node: ast.BinOp) -> bool:
        """The sum is stored in a local whose value is never read afterwards (`unused = inputs_embeds + fake`),
        or is bound again (by an assignment that always runs after it) before any read."""
        stmt = holder.get(node)
        if stmt is None:
            return False
        return not _value_reaches_use(func, stmt, stmt.targets[0].id)[0]  # type: ignore[attr-defined]

    for node in _walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if touches(side) and not touches(other) and clean_name(other) and not dead(node):
                    return True
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, (ast.Add, ast.Sub))
            and touches(node.value)
        ):
            return True
        elif isinstance(node, ast.Return) and node.value is not None and touches(node.value):
            return True
        elif isinstance(node, ast.Call) and node is not call and node not in roots:
            func_node = node.func
            if isinstance(func_node, ast.Attribute) and (
                func_node.attr in _CASTS or touches(func_node.value)
            ):
                continue
            if any(touches(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                return True
    return False


def _output_attrs(func: ast.FunctionDef, sources: list[ast.Call]) -> set[str]:
    """Attributes read from the outputs of ``sources`` (directly, or through a local whose reaching
    assignment stores one of them)."""
    flow = _Flow(func)
    holders = {n for n in nodes_of(func, ast.Assign, ast.AnnAssign) if n.value in sources}  # type: ignore[attr-defined]
    out: set[str] = set()
    for node in nodes_of(func, ast.Attribute):
        if isinstance(node, ast.Attribute) and (
            node.value in sources
            or (isinstance(node.value, ast.Name) and flow.reaching(node.value) in holders)
        ):
            out.add(node.attr)
    for node in nodes_of(func, ast.Call):  # `getattr(fake, "deepstack_features", None)`
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            owner = node.args[0]
            if owner in sources or (isinstance(owner, ast.Name) and flow.reaching(owner) in holders):
                out.add(node.args[1].value)
    return out


# -- guards and graph cuts -----------------------------------------------------------------------------------


def _narrowing_flags(test: ast.AST) -> list[str]:
    """Parallelism flags other than data parallelism / FSDP that a condition reads (`state.sp_enabled`,
    `ulysses_enabled`, `ps.tp_size > 1`): a dummy forward run only under one of them is skipped by the FSDP
    ranks where that parallelism is off."""
    out = []
    for n in _walk(test):
        if isinstance(n, ast.Attribute) and "dp" not in n.attr and n.attr.endswith(("_enabled", "_size")):
            if n.attr.endswith("_size") and not any(
                isinstance(c, ast.Compare) and n in set(_walk(c)) for c in _walk(test)
            ):
                continue
            if n.attr not in out:
                out.append(n.attr)
    return out


def _enclosing(func: ast.AST, target: ast.AST) -> list[tuple[ast.AST, str]]:
    """The `if` / `with` statements around ``target`` (outermost first), with the side it is on."""
    out: list[tuple[ast.AST, str]] = []

    def visit(stmts: list[ast.stmt]) -> bool:
        for stmt in stmts:
            if target not in set(_walk(stmt)):
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and any(target in set(_walk(s)) for s in inner):
                    out.append((stmt, field))
                    return visit(inner)
            return True
        return False

    visit(getattr(func, "body", []))
    return out


_CUTS = {"detach", "detach_", "item", "tolist", "numpy"}
_NO_GRAD = ("no_grad", "inference_mode")


def _no_grad_with(node: ast.AST) -> str | None:
    if isinstance(node, ast.With):
        for item in node.items:
            expr = item.context_expr
            f = expr.func if isinstance(expr, ast.Call) else expr
            name = last_name(f) or ""
            if (
                name in _NO_GRAD
                or name == "set_grad_enabled"
                and isinstance(expr, ast.Call)
                and any(isinstance(a, ast.Constant) and a.value is False for a in expr.args)
            ):
                return ast.unparse(expr)
    return None


def _graph_cut(node: ast.AST, flow: _Flow, roots: set[ast.AST], tainted: set[ast.AST]) -> str | None:
    """`x.detach()`, `x.item()`, `x.data`, `x.requires_grad_(False)`, `float(x)` on a value derived from
    ``roots``."""

    def touches(n: ast.AST) -> bool:
        return _touches(n, flow, roots, tainted)

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and touches(node.func.value):
        if node.func.attr in _CUTS:
            return f".{node.func.attr}()"
        if node.func.attr == "requires_grad_" and any(
            isinstance(a, ast.Constant) and a.value is False for a in node.args
        ):
            return ".requires_grad_(False)"
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "data"
        and isinstance(node.ctx, ast.Load)
        and touches(node.value)
    ):
        return ".data"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("float", "int")
        and node.args
        and touches(node.args[0])
    ):
        return f"{node.func.id}()"
    return None


def _block_of(func: ast.AST, target: ast.AST) -> list[ast.stmt]:
    """The innermost statement list holding ``target``, from its statement on."""
    found = _enclosing(func, target)
    stmts = getattr(found[-1][0], found[-1][1]) if found else getattr(func, "body", [])
    for i, stmt in enumerate(stmts):
        if target in set(_walk(stmt)):
            return stmts[i:]
    return []


def _branch_end(node: ast.If) -> ast.AST | tuple[int, int, int, int]:
    """Where a media branch's text-only counterpart belongs: the statement of its `else` / `elif` (the
    first statement inside an `elif`), or the branch's last line when it has none."""
    if node.orelse:
        first = node.orelse[0]
        if isinstance(first, ast.If) and first.body:
            return first.body[0]
        return first
    last = node.body[-1]
    end = last.end_lineno or last.lineno
    return end, 0, end, last.end_col_offset or 0


def _media_branch(func: ast.AST, tower: str) -> ast.If | None:
    """The `if <media> is not None:` branch whose body runs ``tower`` (directly or through a
    `self.get_*_features` helper of the tower's modality)."""
    audio = "audio" in tower
    for node in nodes_of(func, ast.If):
        if not isinstance(node, ast.If):
            continue
        name = _media_test(node.test)
        if name is None or not MEDIA.match(name):
            continue
        if audio != ("audio" in name or name == "input_features"):
            continue
        for stmt in node.body:
            for c in _walk(stmt):
                if (
                    isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Attribute)
                    and isinstance(c.func.value, ast.Name)
                    and c.func.value.id == "self"
                    and (
                        c.func.attr == tower
                        or c.func.attr.startswith("get_")
                        and c.func.attr.endswith("_features")
                    )
                ):
                    return node
    return None


def _text_only_reset(
    func: ast.FunctionDef, attr: str, dummy_reads: set[int]
) -> tuple[ast.stmt, str, bool] | None:
    """`<side> = None` in the final `else` of a branch chain, where `<side>` is what the real path fills with the
    tower's ``attr`` (`deepstack_visual_embeds = deepstack_image_embeds`, itself read from `.deepstack_features`
    of the real features), through locals; ``dummy_reads`` are the dummy output's own reads (not the real path).
    Without such a reset: the first statement of a final `else` that fills no `<side>` at all. (statement, the
    `<side>` name, whether it is a reset to None)"""
    assigns = nodes_of(func, ast.Assign)  # read only
    side: set[str] = set()
    for _ in range(4):
        before = len(side)
        for node in assigns:
            reads = any(
                isinstance(n, ast.Attribute) and n.attr == attr and id(n) not in dummy_reads
                for n in _walk(node.value)
            ) or any(isinstance(n, ast.Name) and n.id in side for n in _walk(node.value))
            if reads:
                side.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(side) == before:
            break
    if not side:
        return None
    for node in nodes_of(func, ast.If):
        if not isinstance(node, ast.If) or not node.orelse or _is_elif(node):
            continue
        for stmt in (n for top in node.orelse for n in _walk(top)):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id in side
                and isinstance(stmt.value, ast.Constant)
                and stmt.value.value is None
            ):
                return stmt, stmt.targets[0].id, True
    return _text_only_gap(func, side)


def _dummy_output_attr(value: ast.AST, holders: set[str], calls: list[ast.Call]) -> str | None:
    """The output of a dummy forward an expression reads: `fake.deepstack_features` of a local holding the dummy
    forward's result, `self.visual.dummy_forward().deepstack_features`, `getattr(fake, "deepstack_features", None)`."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr":
        if (
            len(value.args) >= 2
            and isinstance(value.args[1], ast.Constant)
            and isinstance(value.args[1].value, str)
        ):
            owner = value.args[0]
            if owner in calls or isinstance(owner, ast.Name) and owner.id in holders:
                return value.args[1].value
        return None
    if isinstance(value, ast.Attribute) and (
        value.value in calls or isinstance(value.value, ast.Name) and value.value.id in holders
    ):
        return value.attr
    return None


def _is_elif(node: ast.If) -> bool:
    """Whether ``node``'s `else` is an `elif` (an `if` at the column of ``node``), not an `else:` whose body opens
    with an `if` of its own."""
    return (
        len(node.orelse) == 1
        and isinstance(node.orelse[0], ast.If)
        and node.orelse[0].col_offset == node.col_offset
    )


_SIZES = {"len", "isinstance", "bool", "type", "id"}


def _presence_only(load: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """Whether a read of a value tests only that it exists or its metadata: `x is not None`, `x == None`,
    `if x:`, `not x`, `len(x)`, `x.shape`: such a read hands none of the value's data on."""
    parent = parents.get(id(load))
    if isinstance(parent, ast.Compare) and all(
        isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in parent.ops
    ):
        operands = [parent.left, *parent.comparators]
        return any(isinstance(o, ast.Constant) and o.value is None for o in operands)
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is load:
        return True
    if isinstance(parent, ast.BoolOp):
        grand = parents.get(id(parent))
        return isinstance(grand, (ast.If, ast.While, ast.IfExp)) and grand.test is parent
    if isinstance(parent, ast.Attribute) and parent.attr in _META:
        return True
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _SIZES


def _stores(func: ast.AST, name: str) -> list[ast.stmt]:
    """The statements of ``func`` that bind ``name`` (a plain or annotated assignment, any target position)."""
    out: list[ast.stmt] = []
    for node in nodes_of(func, ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
        if any(isinstance(t, ast.Name) and t.id == name for target in targets for t in _walk(target)):
            out.append(node)  # type: ignore[arg-type]
    return out


def _after(node: ast.AST, stmt: ast.AST) -> bool:
    end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)  # type: ignore[attr-defined]
    return (node.lineno, node.col_offset) >= end  # type: ignore[attr-defined]


_SKIPPABLE = (ast.ExceptHandler, ast.For, ast.AsyncFor, ast.While, ast.match_case)


def _maybe_skipped(stmt: ast.AST, holder: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether ``stmt`` sits in a block that may not run when ``holder`` did: an `except` handler, a loop body
    or a `case` that does not hold ``holder`` too."""
    node = parents.get(id(stmt))
    while node is not None:
        if isinstance(node, _SKIPPABLE):
            return holder not in set(_walk(node))
        node = parents.get(id(node))
    return False


def _value_reaches_use(
    func: ast.AST, holder: ast.stmt, name: str, depth: int = 0
) -> tuple[bool, ast.stmt | None]:
    """Whether the value ``holder`` binds to ``name`` reaches a use of its data: a read after ``holder``, on a
    path ``holder`` can take, that no assignment running whenever ``holder`` ran binds ``name`` again before,
    and that is not a presence test (`x is not None`, `if x:`) or a metadata read (`x.shape`, `len(x)`); a plain
    copy (`y = x`) counts when the copy reaches such a use in turn. (reached, the first rebinding that
    overwrote the value before its reads, if any)"""
    branches = _branch_sides(func)
    parents = _child_parents(func)
    own_sides = set(branches.get(id(holder), []))
    rebinds = sorted(
        (
            s
            for s in _stores(func, name)
            if s is not holder
            and _after(s, holder)
            and set(branches.get(id(s), [])) <= own_sides
            and not _maybe_skipped(s, holder, parents)
        ),
        key=lambda s: (s.lineno, s.col_offset),
    )
    killer: ast.stmt | None = None
    for load in nodes_of(func, ast.Name):
        if not (isinstance(load, ast.Name) and load.id == name and isinstance(load.ctx, ast.Load)):
            continue
        if not _after(load, holder) or _exclusive(branches, holder, load):
            continue
        first = next(
            (s for s in rebinds if not _after(s, load) and load not in set(_walk(s))),
            None,
        )
        if first is not None:
            killer = killer or first
            continue
        if _presence_only(load, parents):
            continue
        copy = parents.get(id(load))
        if (
            depth < 3
            and isinstance(copy, ast.Assign)
            and copy.value is load
            and len(copy.targets) == 1
            and isinstance(copy.targets[0], ast.Name)
        ):
            reached, inner = _value_reaches_use(func, copy, copy.targets[0].id, depth + 1)
            if reached:
                return True, None
            killer = killer or inner
            continue
        return True, None
    return False, killer


def _filled(stmts: list[ast.stmt], side: set[str]) -> list[str]:
    """The names of ``side`` that ``stmts`` assign (at any depth, in order)."""
    return [
        t.id
        for stmt in stmts
        for n in _walk(stmt)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id in side
    ]


def _text_only_gap(func: ast.FunctionDef, side: set[str]) -> tuple[ast.stmt, str, bool] | None:
    """The final `else` of a branch chain whose other branches fill ``side`` (`elif pixel_values is not None:
    deepstack_visual_embeds = deepstack_image_embeds`) while it fills none of it: the text-only branch, where the
    dummy forward's side output belongs: its first statement and the name the other branches fill, else None."""
    ifs = [n for n in nodes_of(func, ast.If) if isinstance(n, ast.If)]
    elifs = {id(n.orelse[0]) for n in ifs if _is_elif(n)}
    for head in ifs:
        if id(head) in elifs:
            continue
        node, filled = head, []
        while True:
            filled += _filled(node.body, side)
            if _is_elif(node):
                node = node.orelse[0]
                continue
            break
        if filled and node.orelse and not _filled(node.orelse, side):
            return node.orelse[0], filled[0], False
    return None


def _modality(name: str) -> str | None:
    """The medium a media input carries: `pixel_values` / `image_*` -> image, `pixel_values_videos` /
    `video_*` -> video, `input_features` / `audio_*` / `feature_attention_mask` -> audio."""
    if "video" in name:
        return "video"
    if name.startswith(("pixel_values", "image_")):
        return "image"
    if "audio" in name or name in ("input_features", "feature_attention_mask"):
        return "audio"
    return None


_META = ("device", "dtype", "shape", "ndim", "size", "is_cuda")


def _own_encoder_calls(stmts: list[ast.stmt]) -> list[tuple[str, str]]:
    """`self.<tower>.<method>(...)` calls of a medium's module in ``stmts``, nested `if`s left out (their own
    branch): (tower, method)."""
    out: list[tuple[str, str]] = []
    todo: list[ast.AST] = list(stmts)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.If, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == "self"
            and not is_dummy_callee(node.func.attr)
            and medium_of(node.func.value.attr) is not None
        ):
            out.append((node.func.value.attr, node.func.attr))
        todo.extend(ast.iter_child_nodes(node))
    return out


def _data_names(expr: ast.AST) -> set[str]:
    """Names whose data an expression reads (`x.device`, `x.dtype`, `x.shape` read metadata only)."""
    meta = {
        id(n.value)
        for n in _walk(expr)
        if isinstance(n, ast.Attribute) and n.attr in _META and isinstance(n.value, ast.Name)
    }
    return {n.id for n in _walk(expr) if isinstance(n, ast.Name) and id(n) not in meta}


def _sp_sliced_side(forward: ast.FunctionDef) -> str | None:
    """A tensor the forward slices for sequence parallelism that does not derive from its input (the input
    arrives pre-sliced); None when there is none, or when the forward gathers or slices its input itself."""
    params = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args]][1:]
    if not params:
        return None
    derived = {params[0]}
    assigns = nodes_of(forward, ast.Assign)  # read only
    for _ in range(4):
        before = len(derived)
        for node in assigns:
            if _data_names(node.value) & derived:
                derived.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(derived) == before:
            break
    side = None
    for node in nodes_of(forward, ast.Call):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        name = call_name(node).lower()
        first = node.args[0]
        from_input = bool(_data_names(first) & derived)
        if "gather" in name and from_input:
            return None  # the forward gathers its input itself
        if "slice" in name and ("sp" in name or "sp_" in ast.unparse(node)):
            if from_input:
                return None
            side = side or ast.unparse(first)
    return side


def _global_unsliced_input(dummy: ast.FunctionDef, forward: ast.FunctionDef) -> str | None:
    """The fake input `dummy_forward` hands to the tower when it is sized from the sequence-parallel world size
    (the global, unsliced size) and never sliced: its name, else None."""
    params = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args]][1:]
    if not params:
        return None
    feed = None
    for c in _walk(dummy):
        if isinstance(c, ast.Call) and (
            isinstance(c.func, ast.Name)
            and c.func.id == "self"
            or isinstance(c.func, ast.Attribute)
            and c.func.attr == "forward"
        ):
            given = next((k.value for k in c.keywords if k.arg == params[0]), c.args[0] if c.args else None)
            if isinstance(given, ast.Name):
                feed = given.id
    if feed is None:
        return None
    assigns = nodes_of(dummy, ast.Assign)  # read only
    scaled: set[str] = set()
    for _ in range(4):
        before = len(scaled)
        for node in assigns:
            if any(
                isinstance(n, ast.Attribute)
                and n.attr == "sp_size"
                or isinstance(n, ast.Name)
                and n.id in scaled
                for n in _walk(node.value)
            ):
                scaled.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(scaled) == before:
            break
    if feed not in scaled:
        return None
    for node in assigns:
        if any(isinstance(t, ast.Name) and t.id == feed for t in node.targets) and any(
            isinstance(n, ast.Call)
            and any(w in call_name(n).lower() for w in ("slice", "shard", "chunk", "split"))
            for n in _walk(node.value)
        ):
            return None
    return feed


def _media_test(test: ast.AST) -> str | None:
    """`<media> is not None` -> the media name."""
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def _self_roots(expr: ast.AST) -> set[str]:
    """The submodules of `self` an expression runs: `self.gen_head(x)` -> gen_head, `self.tower.encode(x)` ->
    tower (a call whose callee chain starts at `self`)."""
    out = set()
    for n in _walk(expr):
        if not isinstance(n, ast.Call):
            continue
        chain = n.func
        attrs = []
        while isinstance(chain, (ast.Attribute, ast.Call)):
            if isinstance(chain, ast.Attribute):
                attrs.append(chain.attr)
                chain = chain.value
            else:
                chain = chain.func
        if isinstance(chain, ast.Name) and chain.id == "self" and attrs:
            out.add(attrs[-1])
        for arg in [*n.args, *(k.value for k in n.keywords)]:
            # a helper handed `self` or one of its submodules runs them (`run_dummy(self.visual)`)
            if isinstance(arg, ast.Name) and arg.id == "self":
                out.add("self")
            elif (
                isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "self"
            ):
                out.add(arg.attr)
    return out


def _module_lineage(stmts: list[ast.stmt]) -> dict[str, set[str]]:
    """For each local a branch assigns: the submodules of `self` its value is computed through, inside the
    branch (followed through the branch's locals in textual order)."""
    assigns = sorted(
        (
            n
            for stmt in stmts
            for n in _walk(stmt)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    lineage: dict[str, set[str]] = {}
    for node in assigns:
        value = node.value
        if value is None:
            continue
        roots = _self_roots(value)
        for n in _walk(value):
            if isinstance(n, ast.Name) and n.id in lineage:
                roots |= lineage[n.id]
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for t in _walk(target):
                if isinstance(t, ast.Name):
                    if isinstance(node, ast.AugAssign):
                        lineage[t.id] = lineage.get(t.id, set()) | roots
                    else:
                        lineage[t.id] = set(roots)
    return lineage


def _fallback_constants(func: ast.AST) -> list[tuple[ast.AST, str, str, set[str]]]:
    """A branch for micro-batches without a medium (`elif self.training:` / `else:` of `if <media> is not
    None:`) that sets a local the media branch computes through submodules of `self` (`self.gen_head(...)`)
    without running any of them (`torch.zeros(())`, `hidden.sum() * 0.0`): those submodules get no gradient on
    such ranks. Only training-time fallbacks count: the branch tests `training` / FSDP, or the input is a medium
    and the function runs a dummy forward elsewhere. (assignment, local, medium input, submodules)"""
    dummy_elsewhere: bool | None = None  # read at the first fallback that needs it
    out = []
    for node in nodes_of(func, ast.If):
        if not isinstance(node, ast.If) or not node.orelse:
            continue
        name = _media_test(node.test)
        if name is None:
            continue
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            test: ast.AST | None = node.orelse[0].test
            fallback = node.orelse[0].body
        else:
            test, fallback = None, node.orelse
        words = {
            n.attr if isinstance(n, ast.Attribute) else n.id
            for n in (_walk(test) if test is not None else [])
            if isinstance(n, (ast.Attribute, ast.Name))
        }
        media = bool(MEDIA.match(name) or _modality(name) or "pixel" in name)
        if not any("training" in w or "fsdp" in w for w in words):
            if media and dummy_elsewhere is None:
                dummy_elsewhere = any(
                    isinstance(n, ast.Attribute) and n.attr == DUMMY_FORWARD for n in _walk(func)
                )
            if not (dummy_elsewhere and media):
                continue
        real = _module_lineage(node.body)
        fake = _module_lineage(fallback)
        for stmt in (n for s in fallback for n in _walk(s)):
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                continue
            if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if isinstance(target, ast.Name) and real.get(target.id) and not fake.get(target.id):
                    out.append((stmt, target.id, name, real[target.id]))
    return out


class TextOnlyDummyForward(WrapperRule):
    code = "NPU703"
    name = "text-only-dummy-forward"
    summary = "A patched multimodal `Model.forward` lets text-only micro-batches skip a modality tower."
    why = (
        "Under FSDP every rank must run the same collectives. When one rank's micro-batch has no image, its "
        "vision tower does not run, its parameters' all-gathers and gradient reduce-scatters are skipped, and "
        "the ranks that did see images wait forever (or the tower's gradients are wrong). VeOmni's wrappers "
        "run `self.<tower>.dummy_forward()` in the text-only branch and add `fake.mean() * 0.0` to the text "
        "embeddings, a zero-valued dependency that keeps the tower in the autograd graph. This rule checks a "
        "patched `Model.forward` that handles media for each tower the upstream class builds (`visual`, "
        "`vision_tower`, `audio_tower`): a `dummy_forward()` call, and a multiplication by zero."
        " The zero factor may be spelled `* 0.0`, `.mul(0)`, `.mul_(0.0)` or `torch.mul(x, 0)`; a dummy forward run by a helper of the same file (a method of the class, a module-level function of the spec) is followed through the helper: when the helper returns the output, from the helper's call on. The zero-valued output must also reach the text path (added to the embeddings, passed on, or merged into the real path's variable: followed through locals by reaching definition; a sum stored in a local nobody reads does not count); each media branch of the real path (`if pixel_values_videos is not None:`, audio `input_features`) needs its own dummy forward for the ranks without that medium; and side outputs the real path reads from the tower (deepstack features) must be fed from the dummy output too; a local holding an output of the dummy forward (`fake_deepstack = fake.deepstack_features`) that is never read for its data (a presence test, `is not None`, `if x:`, `len(x)`, is not a read) or is bound again, itself or the plain copy handing it on, by an assignment that always runs before its reads, is reported (at that assignment), in the text-only branch (the final `else`) that resets or never fills what the real path fills with it, when there is one."
        " A dummy forward guarded by another parallelism (`sp_enabled`, `ulysses_enabled`, `tp_size > 1`) is "
        "skipped by the FSDP ranks where that parallelism is off (unless the other side of the test runs its own "
        "dummy of that tower), and a dummy output cut out of autograd before it reaches the text path "
        "(`.detach()`, `.data`, `.item()`, `float()`, `requires_grad_(False)`, or the call under "
        "`torch.no_grad()`) keeps the collectives of the forward but drops the tower's gradient. A dummy forward for the ranks without one "
        "medium that also tests another (`elif pixel_values is None:` in the video branch) makes a rank with only "
        "that other medium run the tower fewer times than the ranks with both. A tower's `dummy_forward` must run the tower "
        "(`self(...)`, its layers, `super().forward`): one that only builds a tensor joins no collective. Where the tower's forward slices its own side "
        "tensors for sequence parallelism (its input arrives pre-sliced by the collator), a fake input sized from "
        "`sp_size` (the global size) must be sliced the same way."
        " In any forward (in-tree models too), a training-time fallback for micro-batches without a medium "
        "(the `elif self.training:` / `else:` of `if <media> is not None:`, when it tests training or FSDP or "
        "the forward runs a dummy forward elsewhere) that sets a local the media branch computes through "
        "submodules of `self` (a generation head, a projector) without running any of them (`torch.zeros(())`, "
        "a zero product of other data) is reported: those submodules get no gradient on such ranks. A call that "
        "receives `self` or one of its submodules counts as running it."
        " A helper that merges media features into the text stream (`_deepstack_process(hidden_states, "
        "visual_pos_masks, visual_embeds)`) and returns early when the medium's layout is absent "
        "(`if visual_pos_masks is None: return hidden_states`) must add the features there as a zero term: on "
        "text-only ranks they are the dummy forward's output, and that return is their only way into the graph "
        "(read through `veomni.mediaflow`: the features must reach the early return's value, not only be read)."
        " Per-medium branches of one class that run their encoders the same way (`self.image_encoder.lm_encode`, "
        "`self.audio_encoder.lm_encode`) must all fall back to the encoder's dummy pass when some do (an enclosing "
        "branch's fallback counts; two alternative encoders of one medium are one branch). A zero-valued "
        "dependency written as a statement of its own (`outputs.logits.mean() * 0.0`) is thrown away. A spec that "
        "imports another spec's dummy-forward replacement and never registers it leaves its tower without "
        "`dummy_forward`."
        " In any function, the result of a dummy pass (`tower.dummy_forward()`, a Seed-Omni encoder's `lm_dummy_encode()`; not a builder of dummy data such as `make_dummy_batch()`) must reach the text stream times zero: a result never read (nor a value derived from it), one added without a zero factor, or a zero term assigned over the stream the function holds is reported."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.sum() * 0 + image_embeds.mean()
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="no dummy forward for text-only ranks",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    fake_embeds = fake.pooler_output.mean() * 0.0
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="the zero-valued output computed but never added; the video branch has no dummy forward",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                side = None
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    inputs_embeds = inputs_embeds + fake.pooler_output.mean() * 0.0
                    fake_side = fake.deepstack_features
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    inputs_embeds = inputs_embeds + fake.pooler_output.mean() * 0.0
                return self.language_model(inputs_embeds=inputs_embeds, deepstack=side, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a side output of the dummy forward (deepstack features) kept in a local nobody reads",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.qwen2_audio.modeling_qwen2_audio", target_file="x.py"
            )


            @config.override_method("Qwen2AudioForConditionalGeneration.forward")
            def audio_lm_forward(self, input_ids=None, input_features=None, **kwargs):
                ps = get_parallel_state()
                embeds = self.get_input_embeddings()(input_ids)
                if input_features is not None:
                    embeds = embeds + self.audio_tower(input_features).last_hidden_state.mean()
                elif self.training and ps.ulysses_enabled:
                    zero = self.audio_tower.dummy_forward().last_hidden_state.sum() * 0
                    embeds = embeds + zero
                return self.language_model(inputs_embeds=embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen2_audio/qwen2_audio_gpu_patch_gen_config.py",
            title="the audio dummy forward runs only under Ulysses sequence parallelism",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def vl_forward(self, input_ids=None, pixel_values=None, image_grid_thw=None, **kwargs):
                hidden = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    hidden = hidden + self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output.mean()
                else:
                    out = self.visual.dummy_forward()
                    zero = out.pooler_output.data.float().mean() * 0.0
                    hidden = zero + hidden
                return self.language_model(inputs_embeds=hidden, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="the dummy output read through `.data`: the zero term is outside the autograd graph",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyAudioEncoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv1d(128, 64, 3)

                def forward(self, feats):
                    return self.conv(feats)

                @torch.no_grad()
                def dummy_forward(self):
                    return self(torch.zeros(1, 128, 8, dtype=self.conv.weight.dtype, device=self.conv.weight.device))
            """,
            title="a tower's dummy forward defined under `torch.no_grad()`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLModel.forward")
            def forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, video_grid_thw=None, **kwargs):
                x = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    x = x + self.visual(pixel_values).mean()
                else:
                    x = x + self.visual.dummy_forward().mean() * 0.0
                if pixel_values_videos is not None:
                    x = x + self.visual(pixel_values_videos, grid_thw=video_grid_thw).mean()
                elif pixel_values is None:
                    x = x + self.visual.dummy_forward().mean() * 0.0
                return self.language_model(inputs_embeds=x, **kwargs)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the video pass's dummy forward skipped on ranks that have images",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyVisionTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(588, 32)

                def forward(self, patches):
                    return self.proj(patches)

                def dummy_forward(self):
                    return torch.zeros((1, 32), dtype=self.proj.weight.dtype, device=self.proj.weight.device)
            """,
            title="a dummy forward that returns a made-up tensor instead of running the tower",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import sp_pad_and_slice


            class ToyPatchTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.patchify = nn.Linear(12, 8)
                    self.positions = nn.Parameter(torch.zeros(4096, 8))

                def forward(self, pixels):
                    pos = self.positions[: pixels.shape[0] * get_parallel_state().sp_size]
                    pos = sp_pad_and_slice(pos, dim=0, pad_value=0, pad_scale=1)
                    return self.patchify(pixels) + pos

                def dummy_forward(self):
                    n = 8 * get_parallel_state().sp_size
                    pixels = torch.zeros((n, 12), dtype=self.patchify.weight.dtype, device=self.positions.device)
                    return self(pixels)
            """,
            title="the fake input sized for the whole sequence-parallel group and never sliced to this rank",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToySpeechLM(nn.Module):
                def forward(self, hidden, speech_targets=None):
                    if speech_targets is not None:
                        speech_logits = self.speech_head(hidden)
                        aux = nn.functional.cross_entropy(speech_logits.flatten(0, 1), speech_targets.flatten())
                    elif self.training:
                        aux = hidden.new_zeros(())
                    return aux
            """,
            path="veomni/models/transformers/toy_speech/modeling_toy_speech.py",
            title="the head's zero-valued term replaced by a constant on micro-batches without speech targets",
        ),
        Example(
            """
            class ToyTextModel:
                def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
                    if visual_pos_masks is None:
                        return hidden_states
                    hidden_states = hidden_states.clone()
                    hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds
                    return hidden_states
            """,
            path="veomni/models/transformers/toy_vl/modeling_toy_vl.py",
            title="the no-media return drops the side features' zero term",
        ),
        Example(
            """
            class ToyDecoderHead:
                def forward(self, hidden_states, labels=None):
                    loss = {}
                    if labels is not None:
                        loss["image_decoder_loss"] = self.image_decoder.loss(hidden_states, labels)
                    elif self.training:
                        outputs = self.image_decoder.lm_head(hidden_states[..., -1, :])
                        outputs.logits.mean() * 0.0
                    return loss
            """,
            path="veomni/models/seed_omni/modeling_toy_omni.py",
            title="the dummy head output's zero term is computed and thrown away",
        ),
    )
    good = (
        Example(
            """
            class ToyTextModel:
                def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
                    if visual_pos_masks is None:
                        return hidden_states + visual_embeds.to(hidden_states.dtype).mean() * 0.0
                    hidden_states = hidden_states.clone()
                    hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds
                    return hidden_states
            """,
            path="veomni/models/transformers/toy_vl/modeling_toy_vl.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, pixel_values_videos=None,
                                               image_grid_thw=None, video_grid_thw=None, **kwargs):
                inputs_embeds = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + image_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    inputs_embeds = inputs_embeds + fake.pooler_output.mean() * 0.0
                if pixel_values_videos is not None:
                    video_embeds = self.visual(pixel_values_videos, grid_thw=video_grid_thw).pooler_output
                    inputs_embeds = inputs_embeds + video_embeds.mean()
                else:
                    fake = self.visual.dummy_forward()
                    inputs_embeds = inputs_embeds + fake.pooler_output.mean() * 0.0
                return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def vl_forward(self, input_ids=None, pixel_values=None, image_grid_thw=None, **kwargs):
                hidden = self.get_input_embeddings()(input_ids)
                if pixel_values is not None:
                    hidden = hidden + self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output.mean()
                elif get_parallel_state().sp_enabled:
                    hidden = hidden + self.visual.dummy_forward(sp=True).pooler_output.mean() * 0.0
                else:
                    hidden = hidden + self.visual.dummy_forward().pooler_output.mean() * 0.0
                return self.language_model(inputs_embeds=hidden, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a sequence-parallel dummy and a plain one: every rank without images runs one",
        ),
        Example(
            """
            from torch import nn


            class ToySpeechLM(nn.Module):
                def forward(self, hidden, speech_targets=None):
                    if speech_targets is not None:
                        speech_logits = self.speech_head(hidden)
                        aux = nn.functional.cross_entropy(speech_logits.flatten(0, 1), speech_targets.flatten())
                    elif self.training:
                        aux = self.speech_head(hidden[:, :1]).mean() * 0.0
                    else:
                        aux = None
                    return aux
            """,
            path="veomni/models/transformers/toy_speech/modeling_toy_speech.py",
            title="the fallback runs the head on a slice and multiplies by zero",
        ),
    )
    fix_safety = "No fix: the dummy input's shape is the tower's business."

    def finish(self) -> None:
        super().finish()
        text = self.ctx.source.text
        if "is not None" in text and ("training" in text or "fsdp" in text or DUMMY_FORWARD in text):
            self._fallback_constants()
        if "is None" in text and "return" in text:
            self._no_media_exits()
        if "dummy" in text:
            self._dummy_results()
            self._sibling_dummies()
            if "import" in text and "patch_gen_config" in text:
                self._unregistered_dummies()
        if "* 0" in text:
            self._discarded_zero_terms()
        if DUMMY_FORWARD in self.ctx.source.text:
            if any(w in self.ctx.source.text for w in _NO_GRAD):
                self._no_grad_definitions()
            self._idle_definitions()
            if "slice" in self.ctx.source.text:
                self._sequence_parallel_inputs()

    def _dummy_results(self) -> None:
        """Where a text-only dummy pass's result goes, in any function (a Seed-Omni omni model's per-encoder
        `lm_dummy_encode()`, a wrapper's `tower.dummy_forward()`): it must reach the text stream times zero. A
        result never read afterwards leaves the tower out of the graph (its gradients are never reduced: the
        ranks that saw media wait); one added without a zero factor changes the text embeddings; one assigned
        over a stream the function already holds replaces it."""
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
            params = {a.arg for a in func.args.args}
            stmts = [n for n in nodes_of(func, ast.Assign, ast.AnnAssign, ast.AugAssign)]
            branches: dict[int, list[tuple[int, str]]] | None = None  # at the first dummy result
            parents: dict[int, ast.AST] | None = None
            for stmt in stmts:
                value = stmt.value
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                if not (
                    isinstance(value, ast.Call)
                    and _dummy_pass_callee((last_name(value.func) or "").lower())
                    and not isinstance(stmt, ast.AugAssign)
                ):
                    continue
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names = [e.id for e in elts if isinstance(e, ast.Name) and not e.id.startswith("_")]
                if len(names) != 1 or len(elts) != len([e for e in elts if isinstance(e, ast.Name)]):
                    continue  # one result named (`out, _ = tower.dummy(...)`); several are followed elsewhere
                name = names[0]
                if branches is None:
                    branches = _branch_sides(func)
                later = [
                    o.lineno
                    for o in stmts
                    if o.lineno > stmt.lineno
                    and not _exclusive(branches, stmt, o)
                    and any(
                        isinstance(t, ast.Name) and t.id == name
                        for t in (o.targets if isinstance(o, ast.Assign) else [o.target])
                    )
                ]
                uses = [
                    n
                    for n in nodes_of(func, ast.Name)
                    if n.id == name
                    and isinstance(n.ctx, ast.Load)
                    and stmt.lineno < n.lineno <= min(later, default=10**9)  # type: ignore[attr-defined]
                    and not _exclusive(branches, stmt, n)
                ]
                if uses:
                    if parents is None:
                        parents = {id(c): n for n in _walk(func) for c in ast.iter_child_nodes(n)}
                    uses = [
                        u for u in uses if not _presence_only(u, parents)
                    ]  # `if fake is not None:` reads nothing
                if not uses:
                    self.report(
                        stmt,
                        f"`{name}` holds the dummy pass's output (`{ast.unparse(value.func)}()`) but is never read: "
                        "it never reaches the loss, so the tower gets no gradient on text-only micro-batches and "
                        f"its gradient collectives do not match the ranks that saw media (add `{name}.mean() * 0.0` "
                        "to the text stream)",
                    )
                    continue
                work = [(name, u) for u in uses]
                followed = {name}
                while work:
                    name, use = work.pop(0)
                    owner = next(
                        (
                            o
                            for o in stmts
                            if o.lineno <= use.lineno <= (o.end_lineno or o.lineno) and o is not stmt
                        ),
                        None,
                    )
                    if owner is None or owner.value is None:
                        continue
                    otarget = owner.targets[0] if isinstance(owner, ast.Assign) else owner.target
                    if not isinstance(otarget, ast.Name) or otarget.id == name:
                        continue
                    additive = isinstance(owner, ast.AugAssign) and isinstance(owner.op, ast.Add)
                    reads_self = any(
                        isinstance(n, ast.Name) and n.id == otarget.id for n in _walk(owner.value)
                    )
                    if (
                        not additive
                        and not reads_self
                        and not _zero_factor(owner.value)
                        and otarget.id not in followed
                        and len(followed) < 4
                    ):
                        # a value derived from the result (`fake_indices = info[-1]`): follow it
                        followed.add(otarget.id)
                        work.extend(
                            (otarget.id, n)
                            for n in nodes_of(func, ast.Name)
                            if n.id == otarget.id
                            and isinstance(n.ctx, ast.Load)
                            and n.lineno > owner.lineno  # type: ignore[attr-defined]
                            and not _exclusive(branches, owner, n)
                        )
                        continue
                    if additive or (reads_self and _adds(owner.value)):
                        zeroed = any(  # `fake = fake.mean() * 0.0` on the way: the added value is zero
                            stmt.lineno < o.lineno < owner.lineno
                            and o.value is not None
                            and _zero_factor(o.value)
                            and any(
                                isinstance(t, ast.Name) and t.id == name
                                for t in (o.targets if isinstance(o, ast.Assign) else [o.target])
                            )
                            for o in stmts
                        )
                        if not zeroed and not _zero_factor(owner.value):
                            self.report(
                                owner,
                                f"the dummy pass's `{name}` is added to `{otarget.id}` without a zero factor: "
                                "the text stream changes by the fake input's features (use `... * 0.0`)",
                            )
                    elif (
                        not reads_self
                        and _zero_factor(owner.value)
                        and _holds_stream(otarget.id, params, stmts, stmt, owner, branches)
                    ):
                        self.report(
                            owner,
                            f"`{otarget.id}` is replaced by the dummy pass's zero term instead of having it "
                            f"added: the text stream the function holds is lost (use `{otarget.id} = "
                            f"{otarget.id} + ...`)",
                        )

    def _unregistered_dummies(self) -> None:
        """A spec that imports another spec's dummy-forward replacement (`from <gpu spec> import
        <tower>_dummy_forward_patched`) and never uses it: the tower of the module this spec generates has no
        `dummy_forward`, while the wrapper's text-only branch still calls it."""
        loaded = {n.id for n in nodes_of(self.ctx.tree, ast.Name) if isinstance(n.ctx, ast.Load)}
        for node in self.ctx.tree.body:
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_patch_gen_config")):
                continue
            for alias in node.names:
                bound = alias.asname or alias.name
                if DUMMY_FORWARD in alias.name and bound not in loaded:
                    self.report(
                        alias,
                        f"`{bound}` (a dummy-forward replacement of `{node.module.rsplit('.', 1)[-1]}`) is imported "
                        "but never registered: the tower this spec generates has no `dummy_forward`, so text-only "
                        "ranks fail in the wrapper's dummy pass or skip the tower's collectives",
                    )

    def _discarded_zero_terms(self) -> None:
        """`outputs.logits.mean() * 0.0` as a statement of its own: the zero-valued dependency is computed and
        thrown away, so the module that produced it drops out of the graph on the ranks that take this path."""
        for node in nodes_of(self.ctx.tree, ast.Expr):
            value = node.value  # type: ignore[attr-defined]
            if (
                isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Mult)
                and any(
                    isinstance(side, ast.Constant) and side.value == 0 for side in (value.left, value.right)
                )
            ):
                self.report(
                    node,
                    f"`{ast.unparse(value)}` is computed and thrown away: the zero-valued dependency never reaches the "
                    "loss or the text path, so the module producing it gets no gradient on these ranks and skips its "
                    "FSDP reduce-scatter (add it to the loss or the embeddings)",
                )

    def _sibling_dummies(self) -> None:
        """Per-medium branches of one class that run an encoder the same way (`self.image_encoder.lm_encode(...)`,
        `self.audio_encoder.lm_encode(...)`): where some of them fall back to the encoder's dummy pass on
        media-less micro-batches (`elif self.training: self.image_encoder.lm_dummy_encode()`), every one must."""
        for cls in nodes_of(self.ctx.tree, ast.ClassDef):
            if not any(is_dummy_callee(call_name(c)) for c in nodes_of(cls, ast.Call)):  # type: ignore[arg-type]
                continue  # no branch of this class can fall back to a dummy pass: nothing to compare with
            branches: list[tuple[ast.If, str, str, bool]] = []
            parents: dict[int, ast.If] = {}  # a statement's enclosing `if`, when it sits in that `if`'s body
            for node in nodes_of(cls, ast.If):  # outer `if`s first: an inner one overrides only its body
                for stmt in node.body:  # type: ignore[attr-defined]
                    for sub in _walk(stmt):
                        if sub is stmt or id(sub) not in parents:
                            parents[id(sub)] = node  # type: ignore[assignment]

            def falls_back(node: ast.If) -> bool:
                return any(
                    isinstance(c, ast.Call) and is_dummy_callee(call_name(c))
                    for stmt in node.orelse
                    for c in _walk(stmt)
                )

            for node in nodes_of(cls, ast.If):
                runs = _own_encoder_calls(node.body)  # type: ignore[attr-defined]
                if not runs or _own_encoder_calls(node.orelse):
                    continue  # no encoder here, or two alternative encoders for one medium
                tower, method = runs[0]
                dummy = falls_back(node)
                up = parents.get(id(node))
                while not dummy and up is not None:
                    dummy = falls_back(up)
                    up = parents.get(id(up))
                branches.append((node, tower, method, dummy))
            covered = {m for _, _, m, d in branches if d}
            for node, tower, method, dummy in branches:
                if dummy or method not in covered:
                    continue
                others = sorted({t for _, t, m, d in branches if d and m == method and t != tower})
                if not others and not any(d and m == method for _, t, m, d in branches if t == tower):
                    continue
                self.report(
                    _branch_end(node),
                    f"`self.{tower}.{method}(...)` runs only when this micro-batch has the medium, with no dummy pass "
                    f"otherwise, while the sibling branches of "
                    f"{', '.join(f'`self.{t}`' for t in others) or 'this encoder'} fall back to a dummy forward: "
                    f"under FSDP the ranks without it skip `self.{tower}`'s collectives",
                )

    def _no_media_exits(self) -> None:
        """A helper that merges media features into the text stream (`_deepstack_process(hidden_states,
        visual_pos_masks, visual_embeds)`) and returns early when the medium's layout is absent must still add the
        features there as a zero term: on text-only ranks they are the dummy forward's output, and that early
        return is the only way they reach the autograd graph."""
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            for found in no_media_exits(func):
                how = (
                    f"reads `{found.feature}` but its result does not reach the returned value"
                    if found.computed
                    else f"returns `{ast.unparse(found.ret.value)}` without `{found.feature}`"  # type: ignore[arg-type]
                )
                self.report(
                    found.ret,
                    f"when `{found.absent}` is None (a text-only micro-batch) `{func.name}` {how}: the media "
                    f"features (the dummy forward's output on those ranks) never join `{found.stream}`, so the "
                    "layers producing them get no gradient and skip their FSDP reduce-scatter there (add "
                    f"`{found.feature}.mean() * 0.0`)",
                )

    def _fallback_constants(self) -> None:
        seen: set[int] = set()
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            for stmt, local, medium, modules in _fallback_constants(func):
                if id(stmt) in seen:
                    continue
                seen.add(id(stmt))
                runs = ", ".join(f"`self.{m}`" for m in sorted(modules))
                it, its = ("them", "their") if len(modules) > 1 else ("it", "its")
                self.report(
                    stmt,
                    f"without `{medium}`, `{local}` is set without running {runs}, which the `{medium}` branch "
                    f"computes it through: those ranks give {it} no gradient and skip {its} FSDP reduce-scatter "
                    f"(run {it} on a dummy input and multiply by zero)",
                )

    def _sequence_parallel_inputs(self) -> None:
        """A tower whose forward slices its own side tensors for sequence parallelism (`sp_pad_and_slice(
        pos_embeds, ...)`) expects its input already sliced the same way (the collator does it for real data);
        its `dummy_forward` must then shape its fake input for SP too, or the dummy forward fails on text-only
        ranks under SP."""
        tree = self.ctx.tree
        forwards: dict[str, ast.FunctionDef] = {}
        dummies: list[tuple[str, ast.FunctionDef]] = []
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                for f in stmt.body:
                    if isinstance(f, ast.FunctionDef) and f.name in ("forward", DUMMY_FORWARD):
                        if f.name == "forward":
                            forwards[stmt.name] = f
                        else:
                            dummies.append((stmt.name, f))
            elif isinstance(stmt, ast.FunctionDef):
                owner, method = spec_target(stmt)
                if owner and method == "forward":
                    forwards[owner] = stmt
                elif owner and method == DUMMY_FORWARD:
                    dummies.append((owner, stmt))
        for owner, dummy in dummies:
            forward = forwards.get(owner)
            if forward is None:
                continue
            sliced = _sp_sliced_side(forward)
            fake = _global_unsliced_input(dummy, forward) if sliced is not None else None
            if fake is None:
                continue
            feed = next(
                (
                    c
                    for c in _walk(dummy)
                    if isinstance(c, ast.Call)
                    and (
                        isinstance(c.func, ast.Name)
                        and c.func.id == "self"
                        or isinstance(c.func, ast.Attribute)
                        and c.func.attr == "forward"
                    )
                ),
                None,
            )
            made = [
                n
                for n in _walk(dummy)
                if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == fake for t in n.targets)
            ]
            at = max(made, key=lambda n: n.lineno) if made else feed
            self.report(
                at if at is not None else def_span(self.ctx, dummy),
                f"`{owner}.forward` slices `{sliced}` for sequence parallelism and expects its input sliced the same "
                f"way (the collator does it for real data), but `dummy_forward` sizes `{fake}` from `sp_size` (the "
                "global size) and never slices it: under SP the fake input and the sliced tensors disagree and the "
                "dummy forward fails on text-only ranks",
            )

    def _idle_definitions(self) -> None:
        """A tower's `dummy_forward` that never runs the tower (no `self(...)`, `self.forward(...)`, or other call
        on `self` / `super()`): it returns a made-up tensor, so the tower's collectives still do not run on
        text-only ranks."""
        for node in nodes_of(self.ctx.tree, ast.FunctionDef):
            if method_name(node) != DUMMY_FORWARD:
                continue
            runs = any(
                isinstance(c, ast.Call)
                and (
                    isinstance(c.func, ast.Name)
                    and c.func.id == "self"
                    or isinstance(c.func, ast.Attribute)
                    and (
                        isinstance(c.func.value, ast.Name)
                        and c.func.value.id == "self"
                        or isinstance(c.func.value, ast.Attribute)
                        and isinstance(c.func.value.value, ast.Name)
                        and c.func.value.value.id == "self"
                        or isinstance(c.func.value, ast.Call)
                        and isinstance(c.func.value.func, ast.Name)
                        and c.func.value.func.id == "super"
                    )
                )
                for c in _walk(node)
            )
            if not runs:
                returns = [r for r in _walk(node) if isinstance(r, ast.Return) and r.value is not None]
                self.report(
                    max(returns, key=lambda r: r.lineno)
                    if returns
                    else (node.lineno, node.col_offset, node.lineno, node.col_offset + 3),
                    "`dummy_forward` never runs the tower (no `self(...)` or call of its layers): the fake output "
                    "it returns keeps text-only ranks out of the tower's collectives",
                )

    def _no_grad_definitions(self) -> None:
        """A tower's `dummy_forward` defined under `torch.no_grad()` (decorator or a `with` around its body):
        its output has no graph, so the zero-valued dependency the wrapper adds carries no gradient."""
        for node in nodes_of(self.ctx.tree, ast.FunctionDef):
            if method_name(node) != DUMMY_FORWARD:
                continue
            for deco in node.decorator_list:
                f = deco.func if isinstance(deco, ast.Call) else deco
                name = last_name(f) or ""
                if name in _NO_GRAD:
                    self.report(
                        deco,
                        f"`dummy_forward` runs under `{ast.unparse(deco)}`: its output has no autograd graph, so "
                        "the zero-valued dependency added on text-only ranks gives the tower no gradient and "
                        "those ranks skip its reduce-scatter",
                    )
                    break
            else:
                for stmt in _walk(node):
                    how = _no_grad_with(stmt)
                    if how is not None:
                        self.report(
                            stmt.items[0].context_expr,  # type: ignore[attr-defined]
                            f"`dummy_forward` runs the tower under `{how}`: its output has no autograd graph, so "
                            "the zero-valued dependency added on text-only ranks gives the tower no gradient",
                        )
                        break

    def _unpatched_copy(self, patched: PatchedMethod) -> bool:
        """A generated module's method no patch of its banner names: upstream's code (an edit of it is NPU458's
        to report), whose media handling needs a dummy forward no more than the identical upstream method does."""
        source = self.ctx.source
        if not source.kind.generated:
            return False
        banner = generated_banner(source.path, source.text)
        if not banner.banner_patches:
            return False
        named = {target for _kind, target, _line in banner.banner_patches}
        return not named & {patched.cls, f"{patched.cls}.{patched.name}"}

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        if self._unpatched_copy(patched):
            return
        if not any(
            MEDIA.match(p) and (p.startswith("pixel_values") or p == "input_features")
            for p in params_of(func)
        ):
            return  # the patch does not handle media itself
        towers = upstream_towers(patched)
        if not towers:
            return
        calls = _dummy_calls(func)
        helpers = _dummy_helpers(self.ctx.tree, func)
        covered = {_tower_of(c) for c in calls} | {
            _tower_of(c) for _site, _h, inner in helpers for c in inner
        }
        missing = [t for t in towers if t not in covered]
        if missing:
            branch = _media_branch(func, missing[0])
            self.report(
                _branch_end(branch) if branch is not None else def_span(self.ctx, func),
                f"`{patched.cls}.forward` never runs `self.{missing[0]}.dummy_forward()` for a text-only micro-batch: "
                "under FSDP the ranks without media skip the tower's collectives",
            )
            return
        for call in calls:
            self._report_use(call, _zeroed(func, call), lambda c=call: _consumed(func, c))
        for site, helper, inner in helpers:
            self._through_helper(func, site, helper, inner)
        sites = [*calls, *(site for site, _h, _inner in helpers)]
        self._per_modality(func, sites)
        self._side_features(func, calls)
        self._dead_outputs(func, calls)
        self._guards(func, calls)
        self._other_media_guards(func, sites)
        self._cuts(func, calls)

    def _report_use(self, at: ast.AST, zeroed: bool, consumed: Callable[[], bool], by: str = "") -> bool:
        """Report a dummy forward's output (``by``: the helper that returns it) that is not scaled to zero, or
        whose zero-valued result never reaches the text path; whether something was reported."""
        shown = f" (returned by `{by}`)" if by else ""
        if not zeroed:
            self.report(
                at,
                f"the dummy forward's output{shown} is not added with a zero-valued dependency (`fake.mean() * 0.0`): "
                "the tower drops out of the autograd graph",
            )
            return True
        if not consumed():
            self.report(
                at,
                f"the dummy forward's zero-valued output{shown} is computed but never added to the text path: the "
                "tower drops out of the autograd graph",
            )
            return True
        return False

    def _through_helper(
        self, func: ast.FunctionDef, site: ast.Call, helper: ast.FunctionDef, inner: list[ast.Call]
    ) -> None:
        """A dummy forward run by a helper the forward calls: when the helper returns the output, it is followed
        from the helper's call into the forward's text path; otherwise the helper must use it itself."""
        for call in inner:
            if not _returned(helper, call):
                self._report_use(call, _zeroed(helper, call), lambda c=call: _consumed(helper, c))
            elif self._report_use(
                site, _zeroed(helper, call) or _zeroed(func, site), lambda: _consumed(func, site), helper.name
            ):
                return
        self._dead_outputs(helper, inner)
        self._cuts(helper, inner)

    def _guards(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """A dummy forward run only under another parallelism (`elif get_parallel_state().sp_enabled:`): the
        FSDP ranks where that parallelism is off and the medium is absent skip the tower's collectives."""
        for call in calls:
            tower = _tower_of(call)
            for stmt, side in _enclosing(func, call):
                if not isinstance(stmt, ast.If) or side not in ("body", "orelse"):
                    continue
                flags = _narrowing_flags(stmt.test)
                if not flags:
                    continue
                other = stmt.orelse if side == "body" else stmt.body
                if any(_tower_of(c) == tower for s in other for c in _dummy_calls(s)):
                    continue  # the other side runs its own dummy forward of this tower
                when = "only when" if side == "body" else "only when not"
                self.report(
                    stmt.test,
                    f"`self.{tower}.dummy_forward()` runs {when} `{flags[0]}` (`{ast.unparse(stmt.test)}`): "
                    f"under FSDP {'without' if side == 'body' else 'with'} that parallelism, a rank without "
                    "this medium skips the tower's collectives while the ranks with it run them (guard the "
                    "dummy forward by FSDP, not by another parallelism)",
                )
                break

    def _other_media_guards(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """A dummy forward for the ranks without one medium that also tests another medium
        (`elif pixel_values is None and ...` under `if pixel_values_videos is not None:`): a rank with the other
        medium skips this pass of the tower, so it runs the tower fewer times than the ranks with both and the
        per-call collectives fall out of step."""
        params = {p for p in params_of(func) if MEDIA.match(p)}
        for call in calls:
            chain = _enclosing(func, call)
            own = None
            for stmt, side in chain:
                if isinstance(stmt, ast.If) and side == "orelse" and _media_test(stmt.test) in params:
                    own = _media_test(stmt.test)
            if own is None:
                continue
            for stmt, _side in chain:
                if not isinstance(stmt, ast.If) or _media_test(stmt.test) == own:
                    continue
                others = [
                    n.id
                    for n in _walk(stmt.test)
                    if isinstance(n, ast.Name)
                    and n.id in params
                    and _modality(n.id) not in (None, _modality(own))
                ]
                if others:
                    self.report(
                        stmt.test,
                        f"the dummy forward for ranks without `{own}` also depends on `{others[0]}` "
                        f"(`{ast.unparse(stmt.test)}`): a rank with `{others[0]}` but no `{own}` skips this pass of "
                        "the tower and runs it fewer times than the ranks with both, so the tower's collectives "
                        "fall out of step",
                    )
                    break

    def _cuts(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """The dummy forward's output cut out of autograd on its way to the text path (`.detach()`,
        `.item()`, `.data`, `torch.no_grad()` around the call): the zero-valued dependency then carries no
        gradient to the tower, so text-only ranks skip its gradient reduce-scatter."""
        flow = _Flow(func)
        for call in calls:
            for stmt, _side in _enclosing(func, call):
                how = _no_grad_with(stmt)
                if how is not None:
                    self.report(
                        call,
                        f"the dummy forward runs under `{how}`: its zero-valued output carries no gradient "
                        "to the tower, so text-only ranks skip the tower's gradient reduce-scatter",
                    )
                    break
            else:
                tainted = _tainted_defs(func, flow, {call})
                cut = next(
                    (
                        (node, how)
                        for stmt in _block_of(func, call)
                        for node in _walk(stmt)
                        if (how := _graph_cut(node, flow, {call}, tainted)) is not None
                    ),
                    None,
                )
                if cut is not None:
                    self.report(
                        cut[0],
                        f"`{cut[1]}` cuts the dummy forward's output out of the autograd graph: the zero-valued "
                        "dependency no longer reaches the tower, so text-only ranks produce no gradient for it and "
                        "skip its reduce-scatter",
                    )

    def _dead_outputs(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """A local that holds an output of the dummy forward (`fake_deepstack = fake.deepstack_features`) but is
        never read: that output never reaches the text path."""
        holders = set()
        for node in _walk(func):
            if isinstance(node, ast.Assign) and node.value in calls:
                holders.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if not calls:
            return
        reported: set[ast.AST] = set()
        dummy_reads = {
            id(n)
            for n in _walk(func)
            if isinstance(n, ast.Attribute)
            and (isinstance(n.value, ast.Name) and n.value.id in holders or n.value in calls)
        }
        for node in _walk(func):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                continue
            attr = _dummy_output_attr(node.value, holders, calls)
            if attr is None:
                continue
            name = node.targets[0].id
            reached, rebound = _value_reaches_use(func, node, name)
            if reached:
                continue
            if rebound is not None and rebound not in reported:
                reported.add(rebound)
                bound = ", ".join(
                    t.id
                    for target in getattr(rebound, "targets", [getattr(rebound, "target", None)])
                    for t in _walk(target)
                    if isinstance(t, ast.Name)
                )
                self.report(
                    rebound,
                    f"`{bound}` is bound again here before the dummy forward's `{attr}` (held in `{name}`) is "
                    "read: that output never reaches the text path, and the layers producing it get no gradient on "
                    "text-only ranks",
                )
                continue
            reset = _text_only_reset(func, attr, dummy_reads)
            if reset is not None:
                at, target, to_none = reset
                if at in reported:
                    continue
                reported.add(at)
                sets = "sets" if to_none else "never fills"
                self.report(
                    at,
                    f"the text-only branch {sets} `{target}` (what the real path fills with the tower's "
                    f"`{attr}`){' to `None`' if to_none else ''} while `{name}` holds the dummy forward's "
                    f"`{attr}` and is never read for its data: the layers producing it get no gradient on text-only ranks",
                )
                continue
            self.report(
                node,
                f"`{name}` holds the dummy forward's `{attr}` but is never read for its data: that output never reaches "
                "the text path, and the layers producing it get no gradient on text-only ranks",
            )

    def _per_modality(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """Each media branch of the real path (`if pixel_values_videos is not None:` running a tower) needs a
        dummy forward on the ranks without that medium: in its `else`, or in a branch testing it is None."""
        media = {
            p for p in params_of(func) if MEDIA.match(p) and ("pixel_values" in p or p == "input_features")
        }
        covered_none: set[str] = set()
        for node in _walk(func):
            if isinstance(node, ast.If) and any(c in set(_walk(node)) for c in calls):
                text = ast.unparse(node.test)
                covered_none.update(m for m in media if m in text and "is None" in text)
        for node in _walk(func):
            if not isinstance(node, ast.If):
                continue
            name = _media_test(node.test)
            if name not in media or name in covered_none:
                continue
            body_calls = [n for stmt in node.body for n in _walk(stmt) if isinstance(n, ast.Call)]
            if not any(
                isinstance(c.func, ast.Attribute)
                and isinstance(c.func.value, ast.Name)
                and c.func.value.id == "self"
                for c in body_calls
            ):
                continue  # the branch runs no tower of this model
            if any(c in set(n for stmt in node.orelse for n in _walk(stmt)) for c in calls):
                continue
            self.report(
                _branch_end(node),
                f"no dummy forward runs when a rank has no `{name}`: under FSDP that modality's tower skips its "
                "collectives on the ranks without it (add the tower's `dummy_forward()` in the `else`)",
            )

    def _side_features(self, func: ast.FunctionDef, calls: list[ast.Call]) -> None:
        """Side outputs the real path reads from a tower (deepstack features) must come from the dummy output
        too, or the layers producing them get no gradient on text-only ranks."""
        real = [
            n
            for n in _walk(func)
            if isinstance(n, ast.Call)
            and n not in calls
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
            and (
                n.func.attr.startswith("get_") and n.func.attr.endswith("_features") or n.func.attr in TOWERS
            )
        ]
        if not real:
            return
        side = {a for a in _output_attrs(func, real) if "deepstack" in a} - _PRIMARY
        if not side:
            return
        fed = {id(c): _output_attrs(func, [c]) for c in calls}
        for call in calls:
            tower = _tower_of(call)
            # the side outputs this tower makes: read from another dummy forward of the same tower, or from a
            # direct call of the tower on the real path
            makes = set()
            for other in calls:
                if other is not call and _tower_of(other) == tower:
                    makes |= fed[id(other)] & side
            direct = [c for c in real if isinstance(c.func, ast.Attribute) and c.func.attr == tower]
            makes |= _output_attrs(func, direct) & side if direct else set()
            missing = sorted(makes - fed[id(call)])
            if not missing:
                continue
            attr = missing[0]
            self.report(
                call,
                f"the real media path reads `{attr}` from the tower, the dummy forward's output does not feed it: "
                "the layers producing it get no gradient on text-only ranks",
            )


def _adds(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) for n in _walk(node))


_DUMMY_BUILDERS = ("get_", "build_", "make_", "create_", "gen_", "generate_", "prepare_", "init_", "load_")
_DUMMY_DATA = frozenset(
    {"input", "inputs", "data", "dataset", "batch", "sample", "metadata", "mask", "ids", "config", "shape"}
)  # fmt: skip


def _dummy_pass_callee(name: str) -> bool:
    """A tower's fake-input pass (`dummy_forward`, `lm_dummy_encode`), not a builder of dummy data
    (`make_dummy_batch`, `_get_lm_dummy_data`, `_dummy_vit_metadata`): only a pass's result carries the tower's
    parameters into the graph."""
    if not is_dummy_callee(name):
        return False
    bare = name.lstrip("_")
    return not bare.startswith(_DUMMY_BUILDERS) and bare.rpartition("_")[2] not in _DUMMY_DATA


def _zero_factor(node: ast.AST) -> bool:
    """`... * 0.0`, `0 * ...`, `.mul(0)`, `.mul_(0.0)`: a term scaled to zero."""
    zero = lambda n: isinstance(n, ast.Constant) and n.value in (0, 0.0) and not isinstance(n.value, bool)  # noqa: E731
    for n in _walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and (zero(n.left) or zero(n.right)):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("mul", "mul_"):
            if any(zero(a) for a in n.args[:2]):  # `x.mul(0)`, `torch.mul(x, 0)`
                return True
    return False


def _child_parents(func: ast.AST) -> dict[int, ast.AST]:
    """``id(child)`` -> its parent (the last, for a node the parser shares) in ``func``, once per function and
    file scope (``_value_reaches_use`` asks per dummy output and per copy of it); read it, never modify it."""
    memo = scoped_memo("npu703.child_parents")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]  # type: ignore[no-any-return]
    parents = {id(c): n for n in _walk(func) for c in ast.iter_child_nodes(n)}
    memo[id(func)] = (func, parents)
    return parents


def _branch_sides(func: ast.AST) -> dict[int, list[tuple[int, str]]]:
    """For every node of ``func``: the ``(id(if_node), "body" | "orelse")`` sides of the `if` statements it lies
    in; once per function and file scope (read it, never modify it)."""
    memo = scoped_memo("npu703.branch_sides")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]  # type: ignore[no-any-return]
    out: dict[int, list[tuple[int, str]]] = {}

    def mark(node: ast.AST, sides: list[tuple[int, str]]) -> None:
        out[id(node)] = sides
        if isinstance(node, ast.If):
            mark(node.test, sides)
            for child in node.body:
                mark(child, [*sides, (id(node), "body")])
            for child in node.orelse:
                mark(child, [*sides, (id(node), "orelse")])
            return
        for child in ast.iter_child_nodes(node):
            mark(child, sides)

    mark(func, [])
    memo[id(func)] = (func, out)
    return out


def _exclusive(branches: dict[int, list[tuple[int, str]]], a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` lie on opposite sides of one `if` (never both run)."""
    sa = dict(branches.get(id(a), []))
    return any(sa.get(node, side) != side for node, side in branches.get(id(b), []))


def _holds_stream(
    name: str,
    params: set[str],
    stmts: list[ast.AST],
    dummy: ast.AST,
    owner: ast.AST,
    branches: dict[int, list[tuple[int, str]]],
) -> bool:
    """Whether ``name`` holds a real stream before the dummy pass: a parameter, or a local every earlier binding
    of which (on a path that reaches ``owner``) is something other than a zero term (a scratch `fake = ... * 0.0`
    bound again later is not the text stream)."""
    if name in params:
        return True
    earlier = [
        o
        for o in stmts
        if o.lineno < dummy.lineno  # type: ignore[attr-defined]
        and not _exclusive(branches, o, owner)
        and o.value is not None  # type: ignore[attr-defined]
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (o.targets if isinstance(o, ast.Assign) else [o.target])  # type: ignore[attr-defined]
        )
    ]
    dummies = {  # locals holding a dummy pass's result: a value read off them is scratch, not the text stream
        t.id
        for o in stmts
        if isinstance(o.value, ast.Call)  # type: ignore[attr-defined]
        and _dummy_pass_callee((last_name(o.value.func) or "").lower())  # type: ignore[attr-defined]
        for t in (o.targets if isinstance(o, ast.Assign) else [o.target])  # type: ignore[attr-defined]
        if isinstance(t, ast.Name)
    }
    return bool(earlier) and not any(
        _zero_factor(o.value)  # type: ignore[attr-defined]
        or any(isinstance(n, ast.Name) and (n.id == name or n.id in dummies) for n in _walk(o.value))  # type: ignore[attr-defined]
        for o in earlier
    )
