"""How VeOmni code switches a parallel path: flag parameters, the gates that test them, DTensor branches,
the weights a deferred-init builder loads.

Read by the distributed family (NPU628-NPU633). A parallel mode is named by words VeOmni uses for its
parallel dimensions and collectives (``ulysses``, ``sp``, ``ep``, ``fsdp``, ``gather``, ...)."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name, nodes_of, walk

# whole "_"-separated words of an identifier that name a parallel mode or a collective step
PARALLEL_WORDS = frozenset(
    {
        "ulysses",
        "sp",
        "cp",
        "ep",
        "tp",
        "dp",
        "pp",
        "fsdp",
        "fsdp2",
        "ddp",
        "async",
        "gather",
        "scatter",
        "parallel",
        "reshard",
        "shard",
        "broadcast",
        "sequence",
        "distributed",
        "collective",
        "all2all",
    }
)

# substrings of identifiers that mark a function as running a parallel step
_PATH_MARKS = (
    "get_parallel_state",
    "parallel_state",
    "all_to_all",
    "all_gather",
    "all_reduce",
    "reduce_scatter",
    "scatter_heads",
    "scatter_seq",
    "ulysses",
    "broadcast",
)


def parallel_word(identifier: str) -> bool:
    """Whether one of ``identifier``'s ``_``-separated words names a parallel mode (``skip_ulysses``)."""
    return any(w in PARALLEL_WORDS for w in identifier.lower().split("_"))


_COLLECTIVE_MARKS = (
    "all_to_all",
    "all_gather",
    "all_reduce",
    "reduce_scatter",
    "gather_seq_scatter_heads",
    "gather_heads_scatter_seq",
    "gather_outputs",
    "slice_input_tensor",
    "scatter",
    "gather",
)


def collective_name(name: str) -> bool:
    """A function name that runs a collective or a sequence-parallel split/gather (``gather_outputs``,
    ``all_to_all_single``, ``slice_input_tensor``), not a query of the parallel state (``get_*``, ``is_*``)."""
    if not name or name.startswith(("get_", "is_", "init_", "set_", "_get")):
        return False
    return any(mark in name for mark in _COLLECTIVE_MARKS)


def _int_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def collective_call(call: ast.Call) -> str | None:
    """The collective name ``call`` runs (see ``collective_name``), or None. An index ``gather``
    (``torch.gather(x, -1, idx)``, ``x.gather(1, idx)``, ``gather(..., index=...)``) picks elements of one
    rank's tensor: no collective."""
    name = call_name(call)
    if not collective_name(name):
        return None
    if name == "gather" and (
        any(k.arg in ("index", "dim") for k in call.keywords) or any(_int_literal(a) for a in call.args[:2])
    ):
        return None
    return name


def bool_flag_params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    """Parameters with a literal ``True``/``False`` default whose name names a parallel mode."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    found: list[ast.arg] = []
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults)) + [
        (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None
    ]
    for arg, default in pairs:
        if isinstance(default, ast.Constant) and isinstance(default.value, bool) and parallel_word(arg.arg):
            found.append(arg)
    return found


def is_stub(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of only a docstring, ``...``, ``pass`` or ``raise``: an interface, whose parameters are the
    implementations' to read."""
    for stmt in func.body:
        if isinstance(stmt, (ast.Pass, ast.Raise)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        return False
    return True


def _identifiers(node: ast.AST) -> list[str]:
    out: list[str] = []
    for n in nodes_of(node, ast.Name, ast.Attribute):
        out.append(n.id if isinstance(n, ast.Name) else n.attr)  # type: ignore[attr-defined]
    return out


def runs_parallel_path(func: ast.AST) -> bool:
    """The function reads VeOmni's parallel state or calls a collective (by name)."""
    return any(mark in ident for ident in _identifiers(func) for mark in _PATH_MARKS)


def names_read(func: ast.AST) -> set[str]:
    """Every name loaded anywhere in ``func`` (nested functions included: a closure reads it too), and every
    name it ``del``s: ``del async_op  # API compat`` drops the flag on purpose."""
    return {n.id for n in nodes_of(func, ast.Name) if isinstance(n.ctx, (ast.Load, ast.Del))}  # type: ignore[attr-defined]


def may_take_flag(func: ast.AST) -> bool:
    """The function runs a parallel path, or calls something that could be handed the flag: a callee whose
    name names a parallel mode, a collective or an attention backend (``self.attn_fn``), or a call
    forwarding ``**kwargs``."""
    if runs_parallel_path(func):
        return True
    for call in nodes_of(func, ast.Call):
        name = call_name(call)
        if name and (parallel_word(name) or collective_name(name) or "attn" in name or "attention" in name):
            return True
        if any(k.arg is None for k in call.keywords):  # type: ignore[attr-defined]
            return True
    return False


def conjuncts(test: ast.expr) -> list[ast.expr]:
    """The operands of a top-level ``and`` chain (the test itself otherwise)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        out: list[ast.expr] = []
        for value in test.values:
            out.extend(conjuncts(value))
        return out
    return [test]


def parallel_gate(test: ast.expr) -> ast.expr | None:
    """The first conjunct of ``test`` that is a parallel gate (``is_parallel_gate``), or None."""
    return next((part for part in conjuncts(test) if is_parallel_gate(part)), None)


def parallel_words(node: ast.AST) -> set[str]:
    """The parallel-mode words the identifiers of ``node`` name (``ps.ulysses_enabled``: ``ulysses``)."""
    return {w for ident in _identifiers(node) for w in ident.lower().split("_") if w in PARALLEL_WORDS}


def is_parallel_gate(part: ast.expr) -> bool:
    """A condition on a parallel mode: ``ulysses_enabled``, ``ps.sp_enabled``, ``ps.ulysses_size > 1``,
    ``dist.get_world_size() > 1``, or an ``or`` of conditions one of which is one
    (``ps.sp_enabled or ps.cp_enabled``)."""
    if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
        part = part.operand
    if isinstance(part, ast.BoolOp):
        return any(is_parallel_gate(v) for v in part.values)
    if isinstance(part, ast.Compare):
        part = part.left
        if isinstance(part, ast.Call):
            part = part.func
        if "world_size" in (part.id if isinstance(part, ast.Name) else getattr(part, "attr", "")):
            return True
    if isinstance(part, ast.Name):
        return parallel_word(part.id)
    if isinstance(part, ast.Attribute):
        return parallel_word(part.attr)
    return False


# -- DTensor branches -------------------------------------------------------------------------------------

_DTENSOR_ATTRS = ("device_mesh", "placements")


def dtensor_subject(test: ast.expr) -> str | None:
    """The name a branch test identifies as a DTensor: ``hasattr(t, "device_mesh")``,
    ``isinstance(t, DTensor)`` (one conjunct of an ``and`` chain)."""
    for part in conjuncts(test):
        if not isinstance(part, ast.Call) or not isinstance(part.func, ast.Name) or len(part.args) != 2:
            continue
        subject, kind = part.args
        if not isinstance(subject, ast.Name):
            continue
        if part.func.id == "hasattr" and isinstance(kind, ast.Constant) and kind.value in _DTENSOR_ATTRS:
            return subject.id
        if part.func.id == "isinstance":
            kinds = kind.elts if isinstance(kind, ast.Tuple) else [kind]
            for k in kinds:
                name = last_name(k) or ""
                if name == "DTensor":
                    return subject.id
    return None


def _layout_of(node: ast.AST, subject: str) -> bool:
    """``subject.device_mesh`` / ``subject.placements``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in _DTENSOR_ATTRS
        and isinstance(node.value, ast.Name)
        and node.value.id == subject
    )


def layout_reads(body: list[ast.stmt], subject: str) -> list[tuple[str, ast.Assign]]:
    """``mesh = t.device_mesh`` / ``placements = t.placements`` statements of a branch body (name, statement)."""
    found: list[tuple[str, ast.Assign]] = []
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _layout_of(stmt.value, subject)
        ):
            found.append((stmt.targets[0].id, stmt))
    return found


def branch_calls(body: list[ast.stmt]) -> list[ast.Call]:
    """The calls of a branch body, statement by statement, each in walk order."""
    return [call for stmt in body for call in nodes_of(stmt, ast.Call)]  # type: ignore[misc]


def branch_reads(body: list[ast.stmt]) -> set[str]:
    """Names loaded by the statements of a branch body."""
    return {
        n.id for stmt in body for n in walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }


def distributes_with(body: list[ast.stmt], subject: str) -> bool:
    """A call of the branch is handed ``subject``'s mesh or placements directly
    (``distribute_tensor(full, param.device_mesh, param.placements)``, ``DTensor.from_local(...,
    device_mesh=param.device_mesh)``): the branch distributes its value with the subject's layout."""
    return any(
        _layout_of(v, subject)
        for call in branch_calls(body)
        for v in (*call.args, *(k.value for k in call.keywords))
    )


# -- deferred initialisation ------------------------------------------------------------------------------


def weights_parameter(name: str) -> bool:
    """A parameter of a VeOmni builder that names where pretrained weights are read from (``weights_path``,
    ``model_path``): what ``build_parallelize_model(..., init_device="meta")`` loads into the shards."""
    return name.endswith("_path") and any(
        w in name for w in ("weight", "model", "pretrained", "ckpt", "checkpoint")
    )
