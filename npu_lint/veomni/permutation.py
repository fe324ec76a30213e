"""Token permutations inside one function: tensors reordered by an index tensor (`x = x[window_index]`), their
token-aligned twins (names reshaped with the same shape expression), and the inverse permutation
(`argsort(index)`) and the paths that apply it. Asked by NPU728."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from npu_lint.core.astutil import call_name, nodes_of, own_nodes

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_walk(node: ast.AST) -> list[ast.AST]:
    """``node``'s subtree without nested function or class scopes: ``node``, then ``own_nodes(node)`` (the same
    stack order; listed once per file scope, shared with the other rules asking)."""
    return [node, *own_nodes(node)]


def _full_slice(node: ast.AST) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None and node.step is None


def _index_name(node: ast.AST | None) -> str | None:
    """``idx`` of ``idx``, ``idx.long()``, ``idx.to(device)`` (an index tensor, a name, perhaps cast or moved)."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("long", "int", "to", "cuda", "npu")
    ):
        node = node.func.value
    return node.id if isinstance(node, ast.Name) else None


def _gather_index(node: ast.AST) -> tuple[str, str] | None:
    """``(tensor, index)`` of ``t[idx]``, ``t[idx, :, :]``, ``t[idx, ...]``, ``t.index_select(0, idx)`` or
    ``torch.index_select(t, 0, idx)`` (a row gather by an index tensor ``idx``, a name, perhaps cast)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        sl = node.slice
        index = _index_name(sl)
        if index is not None:
            return node.value.id, index
        if (
            isinstance(sl, ast.Tuple)
            and sl.elts
            and _index_name(sl.elts[0]) is not None
            and all(
                _full_slice(e) or (isinstance(e, ast.Constant) and e.value is Ellipsis) for e in sl.elts[1:]
            )
        ):
            return node.value.id, _index_name(sl.elts[0])  # type: ignore[return-value]
    if isinstance(node, ast.Call) and call_name(node) == "index_select":
        args = list(node.args)
        if not (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)):
            return None
        if node.func.value.id == "torch":  # torch.index_select(t, 0, idx)
            if not args:
                return None
            tensor = args.pop(0)
        else:
            tensor = node.func.value
        keywords = {k.arg: k.value for k in node.keywords}
        dim = args[0] if args else keywords.get("dim")
        index = args[1] if len(args) > 1 else keywords.get("index")
        name = _index_name(index)
        if (
            isinstance(tensor, ast.Name)
            and isinstance(dim, ast.Constant)
            and dim.value == 0
            and name is not None
        ):
            return tensor.id, name
    return None


def _index_tensors(func: ast.AST) -> set[str]:
    """Names that may hold an index tensor: parameters and names bound from a call (directly or unpacked), never
    a loop variable or a name bound from a number."""
    out: set[str] = set()
    args = getattr(func, "args", None)
    if args is not None:
        out.update(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
    loop: set[str] = set()
    for node in _own_walk(func):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            loop.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Assign) and isinstance(
            node.value, (ast.Call, ast.Subscript, ast.Attribute)
        ):
            for target in node.targets:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return out - loop - {"self"}


def _reshape_key(value: ast.AST) -> tuple[str, str] | None:
    """``(receiver, shape)`` of ``x.reshape(shape...)`` / ``x.view(...)`` whose shape reads a name (a sequence
    length, a merge unit), not only literals."""
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("reshape", "view")
        and isinstance(value.func.value, ast.Name)
        and value.args
        and not value.keywords
    ):
        return None
    if not any(isinstance(n, ast.Name) for a in value.args for n in ast.walk(a)):
        return None
    return value.func.value.id, ast.dump(ast.Tuple(list(value.args), ast.Load()))


def _twin_faults(func: ast.AST, indexes: set[str]) -> Iterator[tuple[ast.AST, str]]:
    shaped: dict[str, dict[str, ast.Assign]] = {}  # shape -> name -> its (last) reshape statement
    gathered: dict[str, set[str]] = {}  # name -> index names it is gathered by
    permuting = {g[1] for n in _own_walk(func) if (g := _gather_index(n)) is not None and g[1] in indexes}
    for node in _own_walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            key = _reshape_key(node.value)
            if key is not None and key[0] == node.targets[0].id:
                shaped.setdefault(key[1], {})[key[0]] = node
        found = _gather_index(node)
        if found is not None:
            gathered.setdefault(found[0], set()).add(found[1])
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and _reshape_key(node.value) is None
        ):
            # bound by a helper handed the index (`rot = self.rot_pos_emb(grid_thw, window_index)`): it permutes
            handed = {_index_name(a) for a in (*node.value.args, *(k.value for k in node.value.keywords))}
            gathered.setdefault(node.targets[0].id, set()).update(h for h in handed if h in permuting)
            if not gathered[node.targets[0].id]:
                del gathered[node.targets[0].id]
    inverse_of: dict[str, str] = {}  # `rev = argsort(idx)`: rev -> idx
    first: dict[str, int] = {}  # name -> line of its first gather
    restored: dict[str, int] = {}  # name -> line where the inverse of one of its permutations gathers it
    for node in _own_walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and call_name(node.value) == "argsort"
        ):
            call = node.value
            source = call.func.value if isinstance(call.func, ast.Attribute) else None
            if not (isinstance(source, ast.Name) and source.id != "torch") and call.args:
                source = call.args[0]
            if isinstance(source, ast.Name):
                inverse_of[node.targets[0].id] = source.id
    for node in _own_walk(func):
        found = _gather_index(node)
        if found is not None:
            line = node.lineno  # type: ignore[attr-defined]
            first[found[0]] = min(first.get(found[0], line), line)
            if inverse_of.get(found[1]) in gathered.get(found[0], ()):
                restored[found[0]] = min(restored.get(found[0], line), line)
    assigns = [
        n
        for n in _own_walk(func)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    ]
    changed = True
    while changed:  # derived from a permuted tensor after its gather (`residual = self.norm(hidden_states)`)
        changed = False
        for n in assigns:
            target = n.targets[0].id  # type: ignore[attr-defined]
            if target in gathered:
                continue
            for g in {r.id for r in ast.walk(n.value) if isinstance(r, ast.Name)} - {target}:
                if g in gathered and g in first and n.lineno > first[g]:
                    gathered[target] = set(gathered[g])
                    first[target] = n.lineno
                    changed = True
                    break
    reported: set[str] = set()
    for names in shaped.values():
        if len(names) < 2:
            continue
        for a in sorted(names):
            perms = {p for p in gathered.get(a, ()) if p in indexes}
            if not perms:
                continue
            for b in sorted(names):
                if b == a or b in reported or gathered.get(b):
                    continue
                if a in restored and restored[a] < names[b].lineno:
                    continue  # `a` is back in its first order by the time `b` is shaped like it
                reported.add(b)
                perm = sorted(perms)[0]
                yield (
                    names[b],
                    f"`{b}` is reshaped like `{a}` (token for token), but only `{a}` is reordered by `{perm}`: "
                    f"`{b}` stays in the old order while `{a}`'s tokens move, so each token is paired with another "
                    f"token's `{b}` row; gather `{b}` with `{perm}` too",
                )


def _reads(stmt: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in _own_walk(stmt)
    )


def _exits(block: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in block for n in _own_walk(s))


def _covers(stmts: list[ast.stmt], name: str) -> bool:
    """Whether every path through ``stmts`` reads ``name`` before it leaves them (a raise is not a path)."""
    for s in stmts:
        if isinstance(s, ast.If):
            b, o = _covers(s.body, name), _covers(s.orelse, name)
            if b and o:
                return True
            if (not b and _exits(s.body)) or (not o and _exits(s.orelse)):
                return False
            continue
        if isinstance(s, (ast.With, ast.AsyncWith, ast.Try)):
            if _covers(s.body, name):
                return True
            if _exits(s.body):
                return False
            continue
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            if _exits(s.body):
                return False
            if any(_reads(b, name) for b in s.body):
                return True  # applied to each of the outputs the loop walks
            continue  # a loop may not run
        if isinstance(s, ast.Raise):
            return True
        if _reads(s, name):
            return True
        if isinstance(s, ast.Return):
            return False
    return False


def _one_sided(stmts: list[ast.stmt], name: str) -> ast.If | None:
    for s in stmts:
        for node in _own_walk(s):
            if isinstance(node, ast.If) and _covers(node.body, name) != _covers(node.orelse, name):
                return node
    return None


def _rest_after(func: ast.AST, target: ast.stmt) -> list[ast.stmt] | None:
    """The statements that may run after ``target``: the rest of its block and of each enclosing block (None
    inside a loop, where the next iteration runs it again)."""

    def find(block: list[ast.stmt]) -> list[ast.stmt] | None:
        for i, s in enumerate(block):
            if s is target:
                return block[i + 1 :]
            if isinstance(s, _FUNCS):
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(s, field, None)
                if isinstance(inner, list):
                    found = find(inner)
                    if found is not None:
                        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
                            return None
                        return found + block[i + 1 :]
            for handler in getattr(s, "handlers", []):
                found = find(handler.body)
                if found is not None:
                    return found + block[i + 1 :]
        return None

    return find(func.body)  # type: ignore[attr-defined]


def _guarded_tests(func: ast.AST, index: str) -> set[str]:
    """The tests of the ``if`` statements (without ``else``) under which the function permutes by ``index``."""
    out: set[str] = set()
    for node in _own_walk(func):
        if isinstance(node, ast.If) and not node.orelse:
            if any(
                (g := _gather_index(n)) is not None and g[1] == index for s in node.body for n in _own_walk(s)
            ):
                out.add(ast.unparse(node.test))
    return out


def _inverse_faults(func: ast.AST, permuting: set[str]) -> Iterator[tuple[ast.AST, str]]:
    for node in _own_walk(func):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and call_name(node.value) == "argsort"
        ):
            continue
        call = node.value
        source = call.args[0] if call.args else None
        if isinstance(call.func, ast.Attribute) and not (
            isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"
        ):
            source = call.func.value
        if not (isinstance(source, ast.Name) and source.id in permuting):
            continue
        inverse = node.targets[0].id
        rest = _rest_after(func, node)
        if rest is None or _covers(rest, inverse):
            continue
        if not any(_reads(s, inverse) for s in rest):
            yield (
                node,
                f"`{inverse}` (the inverse of the `{source.id}` permutation) is computed and never applied: the "
                f"output stays in `{source.id}` order; index the result with `{inverse}` before handing it on",
            )
            continue
        site = _one_sided(rest, inverse)
        if site is not None and ast.unparse(site.test) in _guarded_tests(func, source.id):
            continue  # the inverse is applied under the very test the permutation was
        yield (
            site or node,
            f"`{inverse}` (the inverse of the `{source.id}` permutation) is applied on one branch only: on the "
            f"other path the output leaves in `{source.id}` order; apply `{inverse}` on every path",
        )


def permutation_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """``(site, message)`` for each asymmetric token permutation of one function (see NPU728)."""
    # no row gather anywhere in the subtree (nested scopes included: a superset, read from the file's index):
    # nothing to report, without walking the function twice
    if not any(_gather_index(n) is not None for n in nodes_of(func, ast.Subscript, ast.Call)):
        return
    gathers = [g for n in _own_walk(func) if (g := _gather_index(n)) is not None]
    if not gathers:
        return
    indexes = _index_tensors(func)
    permuting = {index for _t, index in gathers if index in indexes}
    if not permuting:
        return
    yield from _twin_faults(func, indexes)
    yield from _inverse_faults(func, permuting)
