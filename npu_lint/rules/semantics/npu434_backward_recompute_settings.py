"""NPU434 backward-recompute-settings."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return stmt
    return None


def _saved_settings(forward: ast.FunctionDef) -> dict[str, str]:
    """``ctx.<attr> = <param>`` in the forward: forward parameter -> the ctx attribute that carries it."""
    params = {a.arg for a in [*forward.args.posonlyargs, *forward.args.args, *forward.args.kwonlyargs]}
    ctx = forward.args.args[0].arg if forward.args.args else "ctx"
    out: dict[str, str] = {}
    for node in ast.walk(forward):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = (
            list(zip(target.elts, value.elts))
            if isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
            else [(target, value)]
        )
        for t, v in pairs:  # `ctx.t = t`, `ctx.t, ctx.ig = t, ig`
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == ctx
                and isinstance(v, ast.Name)
                and v.id in params
            ):
                out[v.id] = t.attr
    return out


def _chains(func: ast.FunctionDef) -> dict[str, list[ast.Assign]]:
    """Every plain-name assignment of ``func`` (nested functions excluded), by name, in order."""
    out: dict[str, list[ast.Assign]] = {}
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (*_FUNCS, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, []).append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _reads(stmts: list[ast.Assign], guards: dict[int, set[str]]) -> set[str]:
    """Names and attribute names the assignments read (their values and the tests guarding them)."""
    out: set[str] = set()
    for stmt in stmts:
        for n in ast.walk(stmt.value):
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Attribute):
                out.add(n.attr)
        out |= guards.get(id(stmt), set())
    return out


def _guards(func: ast.FunctionDef) -> dict[int, set[str]]:
    """For each statement under an ``if``, the names the enclosing tests read."""
    out: dict[int, set[str]] = {}

    def visit(body: list[ast.stmt], reads: set[str]) -> None:
        for stmt in body:
            out[id(stmt)] = reads
            if isinstance(stmt, ast.If):
                inner = reads | {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
                inner |= {n.attr for n in ast.walk(stmt.test) if isinstance(n, ast.Attribute)}
                visit(stmt.body, inner)
                visit(stmt.orelse, inner)
            elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                for name in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, name, []) or [], reads)

    visit(func.body, set())
    return out


def _ctx_aliases(backward: ast.FunctionDef) -> dict[str, str]:
    """Locals of the backward bound to a ctx setting (`t = ctx.temperature`, `t, ig = ctx.temperature, ...`)."""
    ctx = backward.args.args[0].arg
    out: dict[str, str] = {}
    for node in ast.walk(backward):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = (
            list(zip(target.elts, value.elts))
            if isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
            else [(target, value)]
        )
        for t, v in pairs:
            if (
                isinstance(t, ast.Name)
                and isinstance(v, ast.Attribute)
                and isinstance(v.value, ast.Name)
                and v.value.id == ctx
            ):
                out[t.id] = v.attr
    return out


_NOT_DATA = frozenset({"torch", "F", "ctx", "nn", "math", "np"})


def _recomputed(name: str, first_forward: ast.Assign, first_backward: ast.Assign) -> bool:
    """Whether the backward's ``name`` recomputes the forward's: both are first computed from a same local
    tensor (the saved hidden states, the labels chunk), not restored from ``ctx`` or built from other inputs."""

    def data(stmt: ast.Assign) -> set[str]:
        return {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} - _NOT_DATA - {name}

    return bool(data(first_forward) & data(first_backward))


class BackwardRecomputeSettings(Rule):
    code = "NPU434"
    name = "backward-recompute-settings"
    summary = (
        "A custom autograd function's backward recomputes a forward value (the logits, a mask) without a setting "
        "the forward used for it and saved on `ctx` (the temperature, the ignore index): the gradient is taken "
        "of another function than the forward computed."
    )
    why = (
        "Memory-saving loss kernels (chunked cross-entropy, log-probs, distillation) do not keep the logits: the "
        "backward recomputes them chunk by chunk from the hidden states and the head weight, and has to apply "
        "exactly the steps the forward applied -- the division by the temperature, the fp32 upcast, the mask of "
        "ignored labels. The forward saves those settings on `ctx` for that purpose. A backward that recomputes "
        "`logits` without `ctx.temperature`, or builds its `mask` without `ctx.ignore_index`, returns the "
        "gradient of another loss: nothing fails, the NPU and GPU kernels (or two releases) just train "
        "differently. The check pairs each local assigned in both `forward` and `backward` of a "
        "`torch.autograd.Function` and reports the backward's when the forward's assignments to it (or the "
        "tests guarding them) read a parameter saved as `ctx.<setting>` and the backward's never read it."
    )
    bad = (
        Example(
            """
            import torch


            class ChunkedLogProbs(torch.autograd.Function):
                @staticmethod
                def forward(ctx, hidden, weight, labels, temperature, ignore_index):
                    logits = hidden @ weight.t()
                    if temperature != 1.0:
                        logits = logits / temperature
                    logits = logits.float()
                    keep = labels != ignore_index
                    ctx.save_for_backward(hidden, weight, labels)
                    ctx.temperature = temperature
                    ctx.ignore_index = ignore_index
                    return torch.where(keep, logits.log_softmax(-1).gather(-1, labels[:, None])[:, 0], 0.0)

                @staticmethod
                def backward(ctx, grad):
                    hidden, weight, labels = ctx.saved_tensors
                    logits = (hidden @ weight.t()).float()
                    keep = (labels != ctx.ignore_index).float()
                    dlogits = (grad * keep)[:, None] * (-logits.softmax(-1))
                    return dlogits @ weight, None, None, None, None
            """,
            path="veomni/ops/kernels/cross_entropy/toy_chunked.py",
            title="the backward's logits skip the temperature",
        ),
    )
    good = (
        Example(
            """
            import torch


            class ChunkedLogProbs(torch.autograd.Function):
                @staticmethod
                def forward(ctx, hidden, weight, labels, temperature, ignore_index):
                    logits = hidden @ weight.t()
                    if temperature != 1.0:
                        logits = logits / temperature
                    logits = logits.float()
                    keep = labels != ignore_index
                    ctx.save_for_backward(hidden, weight, labels)
                    ctx.temperature = temperature
                    ctx.ignore_index = ignore_index
                    return torch.where(keep, logits.log_softmax(-1).gather(-1, labels[:, None])[:, 0], 0.0)

                @staticmethod
                def backward(ctx, grad):
                    hidden, weight, labels = ctx.saved_tensors
                    logits = (hidden @ weight.t()).div(ctx.temperature).float()
                    keep = (labels != ctx.ignore_index).float()
                    dlogits = (grad * keep)[:, None] * (-logits.softmax(-1))
                    return dlogits @ weight, None, None, None, None
            """,
            path="veomni/ops/kernels/cross_entropy/toy_chunked.py",
            title="the same steps, written differently",
        ),
    )
    fix_safety = "No fix: the recomputation is the kernel author's to restore."
    requires = ("backward", "ctx.")
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        forward, backward = _method(node, "forward"), _method(node, "backward")
        if forward is None or backward is None or not backward.args.args:
            return
        settings = _saved_settings(forward)
        if not settings:
            return
        fwd, bwd = _chains(forward), _chains(backward)
        aliases = _ctx_aliases(backward)
        fwd_guards, bwd_guards = _guards(forward), _guards(backward)
        for name, stmts in bwd.items():
            if name not in fwd or not _recomputed(name, fwd[name][0], stmts[0]):
                continue
            forward_reads = _reads(fwd[name], fwd_guards)
            backward_reads = _reads(stmts, bwd_guards)
            backward_reads |= {aliases[n] for n in backward_reads if n in aliases}
            for param, attr in sorted(settings.items()):
                if param in forward_reads and attr not in backward_reads and param not in backward_reads:
                    self.report(
                        stmts[0],
                        f"`{node.name}.backward` recomputes `{name}` without `ctx.{attr}`, which `forward` used "
                        f"to compute it (`{param}`) and saved for the backward: the gradient is that of another "
                        f"`{name}` than the forward's (apply the same step with `ctx.{attr}`)",
                    )
                    break
