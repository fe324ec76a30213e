"""NPU219 npu-parameter-ignored."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, walk
from npu_lint.rules.base import Context, Example, Rule

_SKIP_DECORATORS = ("abstractmethod", "overload", "override")


def _trivial(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A stub: only a docstring, ``pass``, ``...`` or a ``raise``."""
    for stmt in func.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, (ast.Pass, ast.Raise)):
            continue
        return False
    return True


class NpuParameterIgnored(Rule):
    code = "NPU219"
    name = "npu-parameter-ignored"
    summary = (
        "A function takes a parameter that chooses its NPU behaviour (`npu_as`, `npu_impl`, `on_npu`, ...) and "
        "never reads it, so every caller's NPU choice is dropped."
    )
    why = (
        "Dispatch helpers carry the NPU side of a choice in a parameter: the ops-config reader "
        "`resolve_op_impl(field, npu_as='chunk_loss')` maps the config's NPU name to the row the NPU actually "
        "registers, a kernel binder takes the NPU kernel's name, a builder an `on_npu` switch. A body that "
        "never reads that parameter returns the GPU-side answer on Ascend: the handle asks for a row nobody "
        "registered (KeyError at model build) or binds the wrong kernel, while every caller looks correct. The "
        "rule reads the function itself (stubs, abstract methods and overloads aside) and, for the tree's "
        "ops-config reader, names the specs that pass the parameter."
    )
    bad = (
        Example(
            """
            from veomni.ops.config import get_ops_config


            def read_impl(field: str, *, npu_alias: str | None = None) -> str:
                cfg = get_ops_config()
                return "eager" if cfg is None else getattr(cfg, field, "eager")
            """,
            path="veomni/models_kernel/utils/impl_reader.py",
            title="the NPU remap parameter of an ops-config reader is never read",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.config import get_ops_config


            def read_impl(field: str, *, npu_alias: str | None = None) -> str:
                cfg = get_ops_config()
                impl = "eager" if cfg is None else getattr(cfg, field, "eager")
                return npu_alias if (npu_alias is not None and impl == "npu") else impl


            def not_yet(field: str, npu_alias: str | None = None) -> str:
                raise NotImplementedError
            """,
            path="veomni/models_kernel/utils/impl_reader.py",
        ),
    )
    fix_safety = "No fix: how the parameter should change the result is decided by hand."
    requires = ("def ", ("npu", "NPU", "Npu"))
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        args = node.args
        params = [
            a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if "npu" in a.arg.lower().split("_")
        ]
        if not params or _trivial(node):
            return
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = last_name(target) or ""
            if name in _SKIP_DECORATORS:
                return
        read: set[str] = set()
        for sub in walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                read.add(sub.id)
            elif (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Name)
                and sub.func.id in ("locals", "vars")
            ):
                return  # the parameters are read as a whole
        for param in params:
            if param.arg in read:
                continue
            callers = [at for _r, _f, value, at in self.ctx.project.npu_remaps if param.arg == "npu_as"]
            evidence = (
                f" ({len(callers)} spec reads pass it, e.g. {callers[0]})"
                if callers and node.name in _resolvers(self.ctx)
                else ""
            )
            self.report(
                param,
                f"`{node.name}` takes `{param.arg}` but never reads it{evidence}: every caller's NPU choice is "
                "dropped, so on Ascend the function answers as on GPU (a row nobody registered, or the GPU "
                f"kernel); use `{param.arg}`",
            )


def _resolvers(ctx: Context) -> set[str]:
    """The names the tree's model specs use to read the ops config with an NPU remap."""
    return {resolver for resolver, _f, _v, _at in ctx.project.npu_remaps}
