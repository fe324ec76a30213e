"""The eager RMSNorm math the NPU407/NPU408 rules read (private to the semantics family).

An RMSNorm site is any function the tree can run as an RMSNorm: a spec's replacement of an RMSNorm class's method
or a generated copy of one (paired with the upstream method), a method of an RMSNorm class the tree defines itself,
and a module-level function that computes the mean of squares (a kernel's eager fallback in ``veomni/ops``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from npu_lint.core.astutil import call_name, nodes_of, own_nodes
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context
from npu_lint.veomni.upstream import file_source_module, patched_methods, upstream_class_method

EPS_WORDS = ("eps", "epsilon", "variance_epsilon", "norm_eps", "rms_norm_eps", "layer_norm_eps")
_SQUARES = ("pow", "square")
_ROOTS = ("sqrt", "rsqrt")
# tensor methods that keep the dtype of their receiver (and promote with their tensor arguments)
_KEEP = frozenset(
    {
        "view",
        "reshape",
        "contiguous",
        "mul",
        "add",
        "sub",
        "div",
        "mul_",
        "add_",
        "pow",
        "square",
        "sqrt",
        "rsqrt",
        "mean",
        "sum",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "flatten",
        "transpose",
        "permute",
        "clamp",
        "neg",
        "abs",
    }
)


@dataclass(frozen=True)
class RmsSite:
    """One function computing an RMSNorm: its class (None for a module-level function) and, for a spec's
    replacement or a generated copy, the upstream method it replaces."""

    cls: str | None
    func: ast.FunctionDef
    upstream: ast.FunctionDef | None
    method: str = ""  # the method it stands for (a spec's replacement has its own name)

    @property
    def label(self) -> str:
        """`Cls.method` (with the replacement's own name when it differs), or the function's name."""
        if self.cls is None:
            return f"`{self.func.name}`"
        method = self.method or self.func.name
        extra = f" (`{self.func.name}`)" if method != self.func.name else ""
        return f"`{self.cls}.{method}`{extra}"


def squares_mean(func: ast.AST) -> bool:
    """Whether ``func`` computes a mean of squares (`x.pow(2).mean(...)`, `torch.mean(x * x, ...)`)."""
    for node in _walk(func):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if name == "mean" or (isinstance(node.func, ast.Attribute) and name == "mean"):
            inner = [node.func.value, *node.args] if isinstance(node.func, ast.Attribute) else list(node.args)
            for part in inner:
                for sub in _walk(part):
                    if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                        if sub.func.attr in _SQUARES:
                            return True
                    if isinstance(sub, ast.BinOp) and (
                        isinstance(sub.op, ast.Pow)
                        or (isinstance(sub.op, ast.Mult) and ast.dump(sub.left) == ast.dump(sub.right))
                    ):
                        return True
    return False


def _rms_class(name: str) -> bool:
    return "rmsnorm" in name.lower()


def rms_sites(ctx: Context) -> list[RmsSite]:
    """Every RMSNorm site of the file (computed once per file)."""
    memo = ctx.memo.get("rms_math_sites")
    if memo is not None:
        return memo  # type: ignore[return-value]
    out: list[RmsSite] = []
    text = ctx.source.text
    module = file_source_module(ctx.tree, text, ctx.source.path)
    if module is not None and module.startswith("transformers."):
        for stmt in ctx.tree.body:  # a spec's own RMSNorm helpers (`def _rms_norm_eager(x, w, eps)`)
            if (
                isinstance(stmt, ast.FunctionDef)
                and not stmt.decorator_list
                and "rms" in stmt.name.lower()
                and (squares_mean(stmt) or _normaliser_roots(stmt))
            ):
                out.append(RmsSite(None, stmt, None))
        for method in ("forward", "_norm"):
            for patched in patched_methods(
                ctx.tree, text, method, ("RMSNorm", "RMSNormGated"), path=ctx.source.path
            ):
                out.append(RmsSite(patched.cls, patched.func, patched.upstream, method))
    else:
        classes = [n for n in nodes_of(ctx.tree, ast.ClassDef) if _rms_class(n.name)]
        for cls in classes:  # nested ones too (a quantised / offloading wrapper defined inside a method)
            methods = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"]
            if any(squares_mean(f) or _roots(f) for f in methods):  # through the class's own helper too
                out.extend(RmsSite(cls.name, func, None) for func in methods)
        for stmt in ctx.tree.body:
            if isinstance(stmt, ast.ClassDef):
                continue
            if (
                isinstance(stmt, ast.FunctionDef)
                and not stmt.decorator_list
                and rms_function(stmt, ctx.source.path)
                and (squares_mean(stmt) or _normaliser_roots(stmt))
            ):
                out.append(RmsSite(None, stmt, None))
    ctx.memo["rms_math_sites"] = out
    return out


def rms_function(func: ast.FunctionDef, path: str) -> bool:
    """A module-level function that is an RMSNorm: named so (`rms_norm_fallback`, `_rms`), or in an RMSNorm
    kernel module (`ops/kernels/rms_norm/...`); not another norm that also takes a root of squares (`l2norm`, an
    error metric)."""
    lowered = path.replace("\\", "/").lower()
    return "rms" in func.name.lower() or "rms_norm" in lowered or "rmsnorm" in lowered


def upstream_method(module: str | None, cls: str, name: str) -> ast.FunctionDef | None:
    if not module or not module.startswith("transformers."):
        return None
    found = upstream_class_method(module, cls, name)
    return found if isinstance(found, ast.FunctionDef) else None


# -- dtypes ---------------------------------------------------------------------------------------------


def is_upcast_call(node: ast.AST) -> bool:
    """`x.float()`, `x.to(torch.float32)`, `x.to(dtype=torch.float32)`, `x.type(torch.float32)`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr == "float" and not node.args:
        return True
    if node.func.attr in ("to", "type"):
        args = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        return any(ast.unparse(a) in ("torch.float32", "torch.float", "float32") for a in args)
    return False


def is_downcast_call(node: ast.AST) -> bool:
    """A cast to a dtype other than fp32: `.type_as(x)`, `.to(input_dtype)`, `.to(x.dtype)`, `.half()`,
    `.bfloat16()`, `.to(torch.bfloat16)`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr = node.func.attr
    if attr in ("type_as", "half", "bfloat16"):
        return True
    if attr not in ("to", "type"):
        return False
    args = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
    if not args or is_upcast_call(node):
        return False
    text = ast.unparse(args[0])
    return (
        "dtype" in text
        or text in ("torch.bfloat16", "torch.float16", "torch.half")
        or isinstance(args[0], ast.Name)
    )


def _last_assignment(func: ast.AST, name: str, line: int) -> ast.Assign | None:
    found: ast.Assign | None = None
    for node in _walk(func):
        if (
            isinstance(node, ast.Assign)
            and node.lineno < line
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and (found is None or node.lineno > found.lineno)
        ):
            found = node
    return found


def receiver(func: ast.FunctionDef) -> str:
    return func.args.args[0].arg if func.args.args else "self"


def fp32_value(func: ast.FunctionDef, expr: ast.AST, line: int, depth: int = 8) -> bool:
    """Whether ``expr`` (at ``line`` of ``func``) is provably an fp32 tensor made from an upcast in ``func``:
    an upcast, dtype-keeping steps and arithmetic on one (type promotion keeps fp32), a method of the module given
    one (`self._norm(x.float())`), a local assigned from one; never through a cast to another dtype."""
    if depth < 0:
        return False
    if is_upcast_call(expr):
        return True
    if is_downcast_call(expr):
        return False
    if isinstance(expr, ast.BinOp):
        return fp32_value(func, expr.left, line, depth - 1) or fp32_value(func, expr.right, line, depth - 1)
    if isinstance(expr, ast.UnaryOp):
        return fp32_value(func, expr.operand, line, depth - 1)
    if isinstance(expr, ast.Subscript):
        return fp32_value(func, expr.value, line, depth - 1)
    if isinstance(expr, ast.Name):
        assign = _last_assignment(func, expr.id, line)
        return assign is not None and fp32_value(func, assign.value, assign.lineno, depth - 1)
    if isinstance(expr, ast.Call):
        f = expr.func
        args = [*expr.args, *(k.value for k in expr.keywords)]
        if isinstance(f, ast.Attribute):
            if f.attr in _KEEP:
                return any(fp32_value(func, a, line, depth - 1) for a in [f.value, *args])
            if isinstance(f.value, ast.Name) and f.value.id == receiver(func):  # self._norm(x.float())
                return any(fp32_value(func, a, line, depth - 1) for a in args)
            if isinstance(f.value, ast.Name) and f.value.id == "torch" and f.attr in _KEEP:
                return any(fp32_value(func, a, line, depth - 1) for a in args)
        # a norm kernel (a dispatch handle, `torch_npu.npu_rms_norm`, Liger's) returns its input's dtype
        name = call_name(expr).lower()
        if ("norm" in name or name == "apply") and expr.args:
            return fp32_value(func, expr.args[0], line, depth - 1)
    return False


def fp32_returns(func: ast.FunctionDef) -> list[ast.Return]:
    """The returns of ``func`` (not of nested functions) whose value is an fp32 tensor made in it."""
    out: list[ast.Return] = [
        node
        for node in own_nodes(func)
        if isinstance(node, ast.Return)
        and node.value is not None
        and fp32_value(func, node.value, node.lineno)
    ]
    return sorted(out, key=lambda r: r.lineno)


def has_downcast(func: ast.FunctionDef) -> bool:
    return any(is_downcast_call(n) for n in _walk(func))


# -- eps -----------------------------------------------------------------------------------------------


def _root_call(node: ast.AST) -> str | None:
    """ "sqrt" | "rsqrt" for `torch.sqrt(v)`, `v.sqrt()`, `torch.rsqrt(v)`, `v.rsqrt()`, `v ** 0.5`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ROOTS:
        return node.func.attr
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Pow)
        and isinstance(node.right, ast.Constant)
        and node.right.value in (0.5, -0.5)
    ):
        return "sqrt" if node.right.value == 0.5 else "rsqrt"
    return None


def _root_operand(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.args:
            return node.args[0]
        return node.func.value
    if isinstance(node, ast.BinOp):
        return node.left
    return None


def is_eps(func: ast.FunctionDef, node: ast.AST) -> bool:
    """An epsilon: `self.eps`, `self.variance_epsilon`, a parameter or local named like one, a small literal."""
    if isinstance(node, ast.Attribute) and node.attr in EPS_WORDS:
        return True
    if isinstance(node, ast.Name) and (node.id in EPS_WORDS or node.id.endswith("_eps")):
        return True
    return isinstance(node, ast.Constant) and type(node.value) is float and 0 < node.value < 1e-3


def eps_after_root(func: ast.FunctionDef) -> list[tuple[ast.BinOp, ast.AST]]:
    """`torch.sqrt(variance) + eps` (also through a local: `rms = variance.sqrt(); x / (rms + eps)`): the epsilon
    added after the square root, with the root call; only where the root's own operand adds none."""
    out: list[tuple[ast.BinOp, ast.AST]] = []
    for node in _walk(func):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            continue
        for side, other in ((node.left, node.right), (node.right, node.left)):
            root = side
            if isinstance(side, ast.Name):
                assign = _last_assignment(func, side.id, node.lineno + 1)
                root = assign.value if assign is not None else side
            if _root_call(root) is None or not is_eps(func, other):
                continue
            operand = _root_operand(root)
            if operand is not None and any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) for n in _walk(operand)
            ):
                continue
            out.append((node, root))
            break
    return out


# -- the statistic -------------------------------------------------------------------------------------------


def _squares(node: ast.AST) -> bool:
    for sub in _walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _SQUARES:
            return True
        if isinstance(sub, ast.BinOp) and (
            (isinstance(sub.op, ast.Pow) and isinstance(sub.right, ast.Constant) and sub.right.value == 2)
            or (isinstance(sub.op, ast.Mult) and ast.dump(sub.left) == ast.dump(sub.right))
        ):
            return True
    return False


def _expand(func: ast.FunctionDef, node: ast.AST, line: int, depth: int = 3) -> list[ast.AST]:
    """``node`` and the values of the locals it reads (assigned before ``line``), a few levels deep."""
    out = [node]
    if depth <= 0:
        return out
    for sub in _walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            assign = _last_assignment(func, sub.id, line)
            if assign is not None:
                out.extend(_expand(func, assign.value, assign.lineno, depth - 1))
    return out


def _reduction(call: ast.AST) -> tuple[str, ast.AST | None, ast.AST | None, ast.AST] | None:
    """`t.mean(dim, keepdim=...)`, `torch.mean(t, dim, ...)`, `.sum`, `.var`: (name, dim node, keepdim node,
    reduced tensor)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    name = call.func.attr
    if name not in ("mean", "sum", "var"):
        return None
    kw = {k.arg: k.value for k in call.keywords}
    base = call.func.value
    args = list(call.args)
    if isinstance(base, ast.Name) and base.id == "torch":
        if not args:
            return None
        base, args = args[0], args[1:]
    dim = kw.get("dim", args[0] if args else None)
    keep = kw.get("keepdim", args[1] if len(args) > 1 else None)
    return name, dim, keep, base


def _last_dim(node: ast.AST | None) -> bool | None:
    """True for -1 (or `(-1,)`), False for a non-negative literal 0 or 1 (a token or batch dimension), None for
    anything else (not judged)."""
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        return node.operand.value == 1 or None
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == 1:
        return _last_dim(node.elts[0])
    if isinstance(node, ast.Constant) and node.value in (0, 1) and type(node.value) is int:
        return False
    return None


def _restores_dim(func: ast.FunctionDef) -> bool:
    for node in _walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr
            in (
                "unsqueeze",
                "view",
                "reshape",
                "expand_as",
                "view_as",
            )
        ):
            return True
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(p, ast.Constant) and p.value is None for p in parts):
                return True
    return False


def _roots(func: ast.FunctionDef) -> list[ast.AST]:
    return [n for n in _walk(func) if _root_call(n) is not None]


def normaliser_issues(func: ast.FunctionDef) -> list[tuple[str, ast.AST]]:
    """What is wrong with the normaliser of an RMSNorm function: ("var" | "sum" | "dim" | "keepdim" |
    "inverted", node to report at)."""
    out: list[tuple[str, ast.AST]] = []
    roots = _roots(func)
    for root in roots:
        operand = _root_operand(root)
        if operand is None:
            continue
        parts = _expand(func, operand, getattr(root, "lineno", 0) + 1)
        reductions = [r for p in parts for n in _walk(p) if (r := _reduction(n)) is not None]
        reduce_nodes = [n for p in parts for n in _walk(p) if _reduction(n) is not None]
        for (name, dim, keep, base), node in zip(reductions, reduce_nodes):
            if name == "var":
                out.append(("var", node))
                continue
            if not _squares(base) and not any(_squares(p) for p in _expand(func, base, node.lineno)):
                continue
            if name == "sum" and not any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for p in parts for n in _walk(p)
            ):
                out.append(("sum", node))
            if name == "mean" and _last_dim(dim) is False:
                out.append(("dim", node))
            keep_true = isinstance(keep, ast.Constant) and keep.value is True
            if name in ("mean", "sum") and dim is not None and not keep_true and not _restores_dim(func):
                out.append(("keepdim", node))
    # the root used the wrong way round: `x * sqrt(ms + eps)`, `x / rsqrt(ms + eps)` (directly or via a local)
    for node in _walk(func):
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div)):
            continue
        sides = [node.left, node.right] if isinstance(node.op, ast.Mult) else [node.right]
        for side in sides:
            value = side
            if isinstance(side, ast.Name):
                assign = _last_assignment(func, side.id, node.lineno + 1)
                value = assign.value if assign is not None else side
            while (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr
                in (
                    "to",
                    "type_as",
                    "float",
                )
            ):
                value = value.func.value
            kind = _root_call(value)
            if kind is None:
                continue
            operand = _root_operand(value)
            parts = _expand(func, operand, node.lineno + 1) if operand is not None else []
            if not any(_reduction(n) is not None for p in parts for n in _walk(p)):
                continue  # not the normaliser (a scaling by sqrt(head_dim), ...)
            if (kind == "sqrt" and isinstance(node.op, ast.Mult)) or (
                kind == "rsqrt" and isinstance(node.op, ast.Div)
            ):
                out.append(("inverted", node))
    return out


def _normaliser_roots(func: ast.FunctionDef) -> list[tuple[ast.AST, list[ast.AST]]]:
    """The roots of ``func`` taken of a reduction (`rsqrt(x.pow(2).mean(-1) + eps)`, through locals), each with
    the expressions its operand is made of."""
    out = []
    for root in _roots(func):
        operand = _root_operand(root)
        if operand is None:
            continue
        parts = _expand(func, operand, getattr(root, "lineno", 0) + 1)
        if any(_reduction(n) is not None for p in parts for n in _walk(p)):
            out.append((root, parts))
    return out


def roots_without_eps(func: ast.FunctionDef) -> list[ast.AST]:
    """Roots of the mean of squares with no epsilon under them nor added after them."""
    if eps_after_root(func):
        return []
    out = []
    for root, parts in _normaliser_roots(func):
        adds = [
            n
            for p in parts
            for n in _walk(p)
            if isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Add)
            or (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("add", "clamp", "clamp_min")
            )
        ]
        if not adds:
            out.append(root)
    return out


_FIXED_LOW = ("torch.bfloat16", "torch.float16", "torch.half")


def fixed_casts(func: ast.FunctionDef) -> list[ast.Call]:
    """Casts of an fp32 value made in ``func`` to a fixed low-precision dtype (`.to(torch.bfloat16)`,
    `.half()`, `.bfloat16()`)."""
    out = []
    for node in _walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr = node.func.attr
        args = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        fixed = attr in ("half", "bfloat16") or (
            attr in ("to", "type") and bool(args) and ast.unparse(args[0]) in _FIXED_LOW
        )
        if fixed and fp32_value(func, node.func.value, node.lineno):
            out.append(node)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _squared_bases(node: ast.AST) -> set[str]:
    """The names whose squares ``node`` holds (`x ** 2`, `x.pow(2)`, `x.square()`, `torch.square(x)`, `x * x`)."""
    out: set[str] = set()
    for sub in _walk(node):
        base: ast.AST | None = None
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _SQUARES:
            receiver_ = sub.func.value
            base = (
                sub.args[0]
                if isinstance(receiver_, ast.Name) and receiver_.id == "torch" and sub.args
                else receiver_
            )
        elif isinstance(sub, ast.BinOp) and (
            (isinstance(sub.op, ast.Pow) and isinstance(sub.right, ast.Constant) and sub.right.value == 2)
            or (isinstance(sub.op, ast.Mult) and ast.dump(sub.left) == ast.dump(sub.right))
        ):
            base = sub.left
        while (
            isinstance(base, ast.Call)
            and isinstance(base.func, ast.Attribute)
            and base.func.attr
            in _KEEP
            | {
                "float",
                "to",
                "type_as",
            }
        ):
            base = base.func.value
        if isinstance(base, ast.Name):
            out.add(base.id)
    return out


def self_scaled_by_root(func: ast.FunctionDef) -> list[ast.BinOp]:
    """A tensor multiplied by the root of its own mean of squares (`x * sqrt(mean(x ** 2) + eps)`) or divided by
    its reciprocal root (`x / rsqrt(...)`), in any function: a norm statistic (RMSNorm, PixelNorm, an L2 norm)
    used the wrong way round scales each row up by its magnitude, whatever the class is called. Only a root
    taken of a reduction of the same tensor's squares counts (through locals), so a scaling by another tensor's
    RMS (noise rescaling, a target norm) stays out."""
    out: list[ast.BinOp] = []
    for node in _walk(func):
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div)):
            continue
        pairs = (
            [(node.left, node.right), (node.right, node.left)]
            if isinstance(node.op, ast.Mult)
            else [(node.left, node.right)]
        )
        for scaled, side in pairs:
            value = side
            if isinstance(side, ast.Name):
                assign = _last_assignment(func, side.id, node.lineno + 1)
                value = assign.value if assign is not None else side
            kind = _root_call(value)
            if kind is None or (kind == "sqrt") != isinstance(node.op, ast.Mult):
                continue
            operand = _root_operand(value)
            if operand is None:
                continue
            parts = _expand(func, operand, getattr(value, "lineno", node.lineno) + 1)
            reduced = [
                r[3] for p in parts for n in _walk(p) if (r := _reduction(n)) is not None and r[0] != "var"
            ]
            bases = {
                b for r in reduced for p in (r, *_expand(func, r, node.lineno + 1)) for b in _squared_bases(p)
            }
            target = scaled
            while (
                isinstance(target, ast.Call)
                and isinstance(target.func, ast.Attribute)
                and target.func.attr
                in (
                    "float",
                    "to",
                    "type_as",
                )
            ):
                target = target.func.value
            if isinstance(target, ast.Name) and target.id in bases:
                since = min((getattr(r, "lineno", node.lineno) for r in reduced), default=node.lineno)
                if _rebound_between(func, target.id, since, node.lineno):
                    continue  # `x = x / norm; x = f(x); return x * norm`: a new value, restored to scale
                out.append(node)
                break
    return out


_CASTS = ("float", "to", "type_as", "contiguous")


def _rebound_between(func: ast.AST, name: str, after: int, before: int) -> bool:
    """`name` is bound to a new value (not a cast of itself: `x = x.float()`) on a line after `after` and before
    `before`."""
    for stmt in _walk(func):
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            targets, value = [stmt.target], stmt.value
        else:
            continue
        if not after < stmt.lineno < before:
            continue
        if not any(isinstance(n, ast.Name) and n.id == name for t in targets for n in _walk(t)):
            continue
        if isinstance(stmt, ast.AugAssign):
            return True
        while (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _CASTS
        ):
            value = value.func.value
        if not (isinstance(value, ast.Name) and value.id == name):
            return True
    return False
