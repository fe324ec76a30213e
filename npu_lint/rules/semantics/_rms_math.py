"""The eager RMSNorm math the NPU407/NPU408 rules read (private to the semantics family).

An RMSNorm site is any function the tree can run as an RMSNorm: a spec's replacement of an RMSNorm class's method
or a generated copy of one (paired with the upstream method), a method of an RMSNorm class the tree defines itself,
and a module-level function that computes the mean of squares (a kernel's eager fallback in ``veomni/ops``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

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
        for method in ("forward", "_norm"):
            for patched in patched_methods(
                ctx.tree, text, method, ("RMSNorm", "RMSNormGated"), path=ctx.source.path
            ):
                out.append(RmsSite(patched.cls, patched.func, patched.upstream, method))
    else:
        for stmt in ctx.tree.body:
            if isinstance(stmt, ast.ClassDef) and _rms_class(stmt.name):
                methods = [f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"]
                if any(squares_mean(f) for f in methods):  # a forward through the class's own helper counts
                    out.extend(RmsSite(stmt.name, func, None) for func in methods)
            elif isinstance(stmt, ast.FunctionDef) and squares_mean(stmt) and not stmt.decorator_list:
                out.append(RmsSite(None, stmt, None))
    ctx.memo["rms_math_sites"] = out
    return out


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
    return False


def fp32_returns(func: ast.FunctionDef) -> list[ast.Return]:
    """The returns of ``func`` (not of nested functions) whose value is an fp32 tensor made in it."""
    out: list[ast.Return] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            if fp32_value(func, node.value, node.lineno):
                out.append(node)
            continue
        stack.extend(ast.iter_child_nodes(node))
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
