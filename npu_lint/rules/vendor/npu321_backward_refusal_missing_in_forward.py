"""NPU321 backward-refusal-missing-in-forward."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule


def _refusals(body: list[ast.stmt]) -> list[tuple[ast.If, str]]:
    """The leading ``if <test>: raise ...`` statements of a function body (before its first other statement,
    docstring aside), each with its test's text."""
    out: list[tuple[ast.If, str]] = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if (
            isinstance(stmt, ast.If)
            and not stmt.orelse
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Raise)
        ):
            out.append((stmt, ast.unparse(stmt.test)))
            continue
        break
    return out


def _called_names(test: ast.expr) -> set[str]:
    """The names a test reads or calls (``is_arch35``, ``IS_NPU_AVAILABLE``, ``x.is_cuda`` -> ``is_cuda``)."""
    names: set[str] = set()
    for node in ast.walk(test):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


_PAIRS = (("forward", "backward"), ("fwd", "bwd"))


class BackwardRefusalMissingInForward(Rule):
    code = "NPU321"
    name = "backward-refusal-missing-in-forward"
    summary = (
        "A backward starts by refusing a device, architecture or configuration (`if is_arch35(): raise ...`) "
        "that its forward does not test: the forward launches the unsupported kernel before anything fails."
    )
    why = (
        "Ascend and GPU kernel ports refuse what they do not support at the top of both passes: the "
        "triton-ascend causal convolution raises `NotImplementedError` on arch35 parts in its forward and its "
        "backward, and a CUDA kernel's backward refuses a non-CUDA tensor just like its forward. The forward's "
        "refusal is the one that matters: it runs first, and without it the unsupported kernel is launched "
        "(a crash deep in the compiler or silently wrong output) and training only stops, if at all, at the "
        "first backward. A refusal the backward keeps (a leading `if <test>: raise`) whose probe the forward "
        "never reads is what remains when an edit dropped the forward's copy. Pairs are the `forward` / "
        "`backward` methods of one class (an `autograd.Function`) and module functions `<x>_fwd` / `<x>_bwd` "
        "or `<x>_forward` / `<x>_backward`."
    )
    bad = (
        Example(
            """
            import torch

            from .utils import is_arch35


            class ShortConvFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight):
                    ctx.save_for_backward(x, weight)
                    return short_conv_fwd(x, weight)

                @staticmethod
                def backward(ctx, dy):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    x, weight = ctx.saved_tensors
                    return short_conv_bwd(dy, x, weight)
            """,
            path="veomni/ops/kernels/short_conv/_ascend/short_conv.py",
        ),
    )
    good = (
        Example(
            """
            import torch

            from .utils import is_arch35


            class ShortConvFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    ctx.save_for_backward(x, weight)
                    return short_conv_fwd(x, weight)

                @staticmethod
                def backward(ctx, dy):
                    if is_arch35():
                        raise NotImplementedError("short_conv is not supported on arch35")
                    x, weight = ctx.saved_tensors
                    return short_conv_bwd(dy, x, weight)
            """,
            path="veomni/ops/kernels/short_conv/_ascend/short_conv.py",
        ),
    )
    fix_safety = "No fix: copy the backward's refusal to the top of the forward."
    node_types = (ast.ClassDef, ast.Module)
    requires = ("raise",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.ClassDef, ast.Module))
        functions = {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for name, forward in functions.items():
            for fwd, bwd in _PAIRS:
                if isinstance(node, ast.ClassDef):
                    if name != fwd or fwd != "forward":
                        continue
                    partner = bwd
                else:
                    if not name.endswith("_" + fwd):
                        continue
                    partner = name[: -len(fwd)] + bwd
                backward = functions.get(partner)
                if backward is None:
                    continue
                read = {n.id for n in ast.walk(forward) if isinstance(n, ast.Name)} | {
                    n.attr for n in ast.walk(forward) if isinstance(n, ast.Attribute)
                }
                for stmt, text in _refusals(backward.body):
                    params = {
                        a.arg
                        for a in (*backward.args.posonlyargs, *backward.args.args, *backward.args.kwonlyargs)
                    }
                    probes = {
                        n
                        for n in _called_names(stmt.test)
                        if n not in params and n not in ("ctx", "self", "None")
                    }
                    if not probes or probes & read:
                        continue
                    self.report(
                        forward,
                        f"`{backward.name}` refuses `{text}` (line {stmt.lineno}) but `{forward.name}` never tests "
                        "it: the forward launches the kernel on what the backward says is unsupported, and the run "
                        "fails (or computes garbage) before that refusal; refuse it at the top of the forward too",
                    )
                    break
