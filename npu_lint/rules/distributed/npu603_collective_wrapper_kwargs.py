"""NPU603 collective-wrapper-kwargs."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import str_value
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Context, Example, Rule, make_fix

# every optional parameter of the torch.distributed collectives a backend workaround wraps
_OPTIONAL = {"op", "group", "async_op", "src", "dst", "group_src", "group_dst", "scatter_list", "gather_list"}
# names whose presence says the file deals with collectives (the wrapper patches or wraps one)
_COLLECTIVE_WORDS = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "ReduceOp",
)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _forwards(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The call that passes the wrapper's ``*args`` and ``**kwargs`` on (``op(*args, **kwargs)``)."""
    star = func.args.vararg.arg if func.args.vararg else None
    double = func.args.kwarg.arg if func.args.kwarg else None
    if star is None or double is None:
        return None
    for sub in ast.walk(func):
        if not isinstance(sub, ast.Call):
            continue
        stars = any(
            isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id == star
            for a in sub.args
        )
        doubles = any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id == double for k in sub.keywords
        )
        if stars and doubles:
            return sub
    return None


def _mentions_key(node: ast.AST, kwargs: str, key: str) -> bool:
    """``"key" in kwargs`` / ``"key" not in kwargs`` / ``kwargs.get("key")`` in ``node``."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Compare)
            and str_value(sub.left) == key
            and any(isinstance(o, (ast.In, ast.NotIn)) for o in sub.ops)
            and any(isinstance(c, ast.Name) and c.id == kwargs for c in sub.comparators)
        ):
            return True
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("get", "setdefault", "pop", "keys")
            and isinstance(sub.func.value, ast.Name)
            and sub.func.value.id == kwargs
        ):
            if sub.func.attr == "keys" or (sub.args and str_value(sub.args[0]) == key):
                return True
    return False


class CollectiveWrapperKwargs(Rule):
    code = "NPU603"
    name = "collective-wrapper-kwargs"
    summary = (
        "A wrapper of a collective (an HCCL workaround) reads an optional argument from `**kwargs` without "
        "checking that it was passed."
    )
    why = (
        "HCCL lacks some of NCCL's reduce ops (`PREMUL_SUM`, `AVG`), so NPU ports patch `torch.distributed` "
        "collectives with a wrapper `def wrapper(*args, **kwargs)` that rewrites the reduce op and forwards "
        "the call. Every collective on the host goes through it, and most callers pass `op` (or `group`, "
        "`async_op`) positionally or not at all (the default `ReduceOp.SUM`): a wrapper that reads "
        '`kwargs["op"]` without testing `"op" in kwargs` raises KeyError in the first such call, so training '
        "on Ascend crashes inside the patch while GPUs (which never install it) are fine. Read it with "
        '`kwargs.get("op")` or test membership first; reads after the wrapper stored the key, or guarded by a '
        "membership test or a `KeyError` handler, are fine."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist
            from torch.distributed import ReduceOp


            def sum_then_scale(collective):
                def patched(*args, **kwargs):
                    scale = None
                    if kwargs["op"] == ReduceOp.PREMUL_SUM:
                        scale = kwargs["op"].__getstate__()[1]
                        kwargs["op"] = ReduceOp.SUM
                    work = collective(*args, **kwargs)
                    if scale is not None:
                        args[0].mul_(scale)
                    return work

                return patched


            dist.all_reduce = sum_then_scale(dist.all_reduce)
            """,
            fixed="""
            import torch.distributed as dist
            from torch.distributed import ReduceOp


            def sum_then_scale(collective):
                def patched(*args, **kwargs):
                    scale = None
                    if kwargs.get("op") == ReduceOp.PREMUL_SUM:
                        scale = kwargs["op"].__getstate__()[1]
                        kwargs["op"] = ReduceOp.SUM
                    work = collective(*args, **kwargs)
                    if scale is not None:
                        args[0].mul_(scale)
                    return work

                return patched


            dist.all_reduce = sum_then_scale(dist.all_reduce)
            """,
            title="the reduce op read from `**kwargs` before anything says it is there",
        ),
        Example(
            """
            import torch.distributed as dist


            def hccl_safe_gather(fn):
                def inner(*tensors, **options):
                    group = options["group"]
                    if group is None:
                        options["group"] = dist.group.WORLD
                    return fn(*tensors, **options)

                return inner


            dist.all_gather_into_tensor = hccl_safe_gather(dist.all_gather_into_tensor)
            """,
            title="the group of an all_gather wrapper",
        ),
    )
    good = (
        Example(
            """
            from torch.distributed import ReduceOp


            def sum_then_scale(collective):
                def patched(*args, **kwargs):
                    if "op" in kwargs and kwargs["op"] == ReduceOp.PREMUL_SUM:
                        kwargs["op"] = ReduceOp.SUM
                    kwargs.setdefault("async_op", False)
                    if kwargs["async_op"]:
                        return collective(*args, **kwargs)
                    return collective(*args, **kwargs)

                return patched
            """
        ),
        Example(
            """
            def log_calls(fn):
                def inner(*args, **kwargs):
                    print(kwargs["name"])  # not a collective's wrapper: this file names none
                    return fn(*args, **kwargs)

                return inner
            """
        ),
    )
    fix_safety = (
        'Safe when the read is an operand of `==` or `is`: `kwargs.get("op")` gives None for a missing key, '
        "which equals no reduce op, so the wrapper takes the path it takes for any other op (the one the "
        "collective's default or positional argument selects), exactly what it meant. Other reads have no "
        "fix: what a missing value means depends on the code."
    )
    node_types = (ast.Subscript,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code and the tree's own platform code (``veomni/ops/platform/npu`` holds the HCCL patches):
        anything but tests."""
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if "**" not in text or not any(word in text for word in _COLLECTIVE_WORDS):
            self.node_types = ()

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Subscript)
        if not isinstance(node.ctx, ast.Load) or not isinstance(node.value, ast.Name):
            return
        key = str_value(node.slice)
        if key not in _OPTIONAL:
            return
        ctx = self.ctx
        func = ctx.function
        if not isinstance(func, _FUNCS) or func.args.kwarg is None or func.args.kwarg.arg != node.value.id:
            return
        forward = _forwards(func)
        if forward is None or self._guarded(func, node, key):
            return
        kwargs = node.value.id
        target = ctx.source.segment(forward.func)
        message = (
            f'`{kwargs}["{key}"]` raises KeyError when a caller passes `{key}` positionally or leaves it at its '
            f"default: `{func.name}` forwards `*{func.args.vararg.arg}, **{kwargs}` to `{target}(...)` "  # type: ignore[union-attr]
            f'for every call of the collective it wraps; read `{kwargs}.get("{key}")` or test `"{key}" in '
            f"{kwargs}` first"
        )
        self.report(node, message, self._fix(node, kwargs, key))

    def _guarded(self, func: ast.AST, node: ast.Subscript, key: str) -> bool:
        kwargs = node.value.id  # type: ignore[attr-defined]
        line = node.lineno
        chain = self.ctx.parents
        for i, parent in enumerate(chain):
            if parent is func:
                chain = chain[i + 1 :]
                break
        for depth, parent in enumerate(chain):
            child = chain[depth + 1] if depth + 1 < len(chain) else node
            if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
                if _mentions_key(parent.test, kwargs, key):
                    return True  # inside a branch decided by the key's presence
            if isinstance(parent, ast.BoolOp):
                before = parent.values[: parent.values.index(child)] if child in parent.values else []
                if any(_mentions_key(v, kwargs, key) for v in before):
                    return True  # `"op" in kwargs and kwargs["op"] == ...`
            if isinstance(parent, ast.Try) and child in parent.body:
                for handler in parent.handlers:
                    names = [] if handler.type is None else list(ast.walk(handler.type))
                    if handler.type is None or any(
                        isinstance(n, ast.Name) and n.id in ("KeyError", "LookupError", "Exception")
                        for n in names
                    ):
                        return True
        # an earlier statement of the wrapper stored, defaulted or tested the key, or read it already (that
        # read is the one reported)
        here = (line, node.col_offset)
        for sub in ast.walk(func):
            if (getattr(sub, "lineno", line), getattr(sub, "col_offset", 0)) >= here:
                continue
            if (
                isinstance(sub, ast.Subscript)
                and isinstance(sub.ctx, ast.Load)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == kwargs
                and str_value(sub.slice) == key
            ):
                return True
            if (
                isinstance(sub, ast.Subscript)
                and isinstance(sub.ctx, ast.Store)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == kwargs
                and str_value(sub.slice) == key
            ):
                return True
            if isinstance(sub, (ast.If, ast.Assert)) and _mentions_key(sub.test, kwargs, key):
                return True
            if isinstance(sub, ast.Expr) and _mentions_key(sub.value, kwargs, key):
                return True  # kwargs.setdefault("op", ...)
        return False

    def _fix(self, node: ast.Subscript, kwargs: str, key: str):  # noqa: ANN202
        parent = self.ctx.parent
        if not (
            isinstance(parent, ast.Compare)
            and len(parent.ops) == 1
            and isinstance(parent.ops[0], (ast.Eq, ast.Is))
        ):
            return None
        edit = self.ctx.replace(node, f'{kwargs}.get("{key}")')
        return make_fix(f'Read `{kwargs}.get("{key}")`', [edit], Applicability.SAFE)
