"""NPU317 parameter-not-forwarded."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._calls import callee, confirmed
from npu_lint.rules.base import Context, Example, Rule

# parameters that are conventionally part of an interface and unread by design
_INTERFACE = frozenset({"self", "cls", "ctx", "args", "kwargs", "module", "config", "kernel_kwargs"})


_NO_DEFAULT = "<required>"


def parameter_defaults(args: ast.arguments) -> dict[str, str]:
    """Each named parameter's default as source text (``<required>`` without one)."""
    positional = [*args.posonlyargs, *args.args]
    out = {p.arg: _NO_DEFAULT for p in positional}
    for p, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        out[p.arg] = ast.unparse(d)
    for p, kd in zip(args.kwonlyargs, args.kw_defaults):
        out[p.arg] = _NO_DEFAULT if kd is None else ast.unparse(kd)
    return out


def _stub(func: ast.AST) -> bool:
    """A body that only documents, passes or raises: an abstract interface method."""
    body = getattr(func, "body", [])
    body = (
        body[1:]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else body
    )
    return all(
        isinstance(s, (ast.Pass, ast.Raise))
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        for s in body
    )


def _interface_parameters(tree: ast.Module, cls: ast.ClassDef, name: str) -> set[str]:
    """The parameters of the abstract method ``name`` that one of ``cls``'s bases in the file declares (an
    override takes them because the interface does, and may ignore them by design)."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    out: set[str] = set()
    for base in cls.bases:
        found = classes.get(base.id) if isinstance(base, ast.Name) else None
        for stmt in found.body if found is not None else ():
            if (
                isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                and stmt.name == name
                and _stub(stmt)
            ):
                out.update(parameter_defaults(stmt.args))
    return out


def _unread_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """The named parameters ``func`` never reads (nested scopes included), interface names aside, with their
    defaults."""
    defaults = parameter_defaults(func.args)
    if not defaults:
        return {}
    # ``del group`` marks a parameter unused on purpose (the kernel does not support it)
    read = {n.id for n in nodes_of(func, ast.Name) if isinstance(n.ctx, (ast.Load, ast.Del))}  # type: ignore[attr-defined]
    return {
        p: d for p, d in defaults.items() if p not in read and p not in _INTERFACE and not p.startswith("_")
    }


class ParameterNotForwarded(Rule):
    code = "NPU317"
    name = "parameter-not-forwarded"
    summary = (
        "A function never reads one of its parameters, and calls one of the tree's own functions that takes a "
        "parameter of that very name without passing it: the caller's value is dropped and the callee's "
        "default (or nothing) stands in. Likewise a module-private helper that never reads a parameter its "
        "callers in the file hand a value."
    )
    why = (
        "Kernel wrappers, adapters and parallel helpers forward their inputs to the function that does the "
        "work: `gather_heads_scatter_seq(x, seq_dim=seq_dim, head_dim=head_dim, group=group)`, "
        "`sparse_mqa_bwd_interface(..., sm_scale=sm_scale)`, `chunk_fwd(q=q, k=k, ..., scale=scale)`. When the "
        "wrapper takes a value (`sm_scale`, `group`, `cu_seqlens`) that nothing in its body reads and the callee "
        "it delegates to has a parameter of the same name that the call leaves out, the caller's choice is "
        "silently replaced by the callee's default: the softmax runs unscaled, the collective uses the world "
        "group, the varlen kernel treats the packed batch as one sequence. Nothing raises and the numbers "
        "stay plausible. The callee is the tree's own `def` (resolved as NPU510 resolves it: the file's "
        "definitions, `self.` methods, names imported from the tree); parameters unread by interface "
        "(`self`, `ctx`, `**kwargs`, a leading underscore) are not considered, nor an optional parameter whose "
        "default is the callee's own (`generator=None` to `generator=None`): only an explicit value is at stake; "
        "nor a parameter the callee does not read either, one the function `del`s (unused on purpose), or one an "
        "abstract method of an in-file base class declares (an override takes it because the interface does). "
        "A module-private tensor helper (`_swiglu(x, swiglu_limit)`: undecorated, only called from its own file, "
        "calling torch, torch_npu or triton) whose body stops reading a parameter that a caller in the file hands "
        "one of its own parameters drops that value the same way: the clamp, group or scale chosen upstream "
        "never applies (unless its docstring says the parameter is unused)."
    )
    bad = (
        Example(
            """
            def sparse_mqa_bwd(q, kv, o, do, lse, sm_scale=None):
                scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
                return q * scale, kv


            def sparse_mla_backward(q, kv, o, do, lse, sm_scale):
                return sparse_mqa_bwd(q, kv, o, do, lse)
            """,
            path="veomni/ops/kernels/toy_sparse_mla/kernel.py",
            title="the caller's softmax scale never reaches the kernel",
        ),
    )
    good = (
        Example(
            """
            def sparse_mqa_bwd(q, kv, o, do, lse, sm_scale=None):
                scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
                return q * scale, kv


            def sparse_mla_backward(q, kv, o, do, lse, sm_scale):
                return sparse_mqa_bwd(q, kv, o, do, lse, sm_scale=sm_scale)
            """,
            path="veomni/ops/kernels/toy_sparse_mla/kernel.py",
        ),
        Example(
            """
            def sparse_mqa_bwd(q, kv, o, do, lse, sm_scale=None):
                scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
                return q * scale, kv


            def sparse_mla_backward(q, kv, o, do, lse, sm_scale):
                scale = sm_scale or q.shape[-1] ** -0.5
                return sparse_mqa_bwd(q, kv, o, do, lse, scale)
            """,
            path="veomni/ops/kernels/toy_sparse_mla/kernel.py",
        ),
    )
    fix_safety = "No fix: pass the value on by keyword (or drop the parameter if it is meant to be unused)."
    node_types = (ast.Call,)
    requires = ("(",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._unread: dict[int, dict[str, str]] = {}
        self._done: set[tuple[int, str]] = set()

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = self.ctx.function
        if func is None:
            return
        unread = self._unread.get(id(func))
        if unread is None:
            unread = self._unread[id(func)] = _unread_parameters(func)
            cls = self.ctx.enclosing(ast.ClassDef)
            if unread and isinstance(cls, ast.ClassDef) and func in cls.body:
                for param in _interface_parameters(self.ctx.tree, cls, func.name):
                    unread.pop(param, None)
        if not unread or any(isinstance(a, ast.Starred) for a in node.args):
            return
        if any(kw.arg is None for kw in node.keywords):
            return
        found = callee(self.ctx, node)
        if found is None or found.sig.opaque:
            return
        sig = found.sig
        passed = set(sig.positional[: len(node.args)]) | {kw.arg for kw in node.keywords if kw.arg}
        names = set(sig.positional) | set(sig.keywords)
        for param in sorted(unread):
            if (
                param in passed
                or param not in names
                or param in sig.unread
                or (id(func), param) in self._done
            ):
                continue
            if unread[param] != _NO_DEFAULT and unread[param] == sig.default_of(param):
                continue  # the defaults agree: only a caller's explicit value is at stake
            if not confirmed(self.ctx, node, found):
                return
            self._done.add((id(func), param))
            self.report(
                node,
                f"`{func.name}` takes `{param}` and never reads it, and {found.label} ({found.where}) takes "
                f"`{param}` too but is not given it: the caller's value is dropped; pass `{param}={param}`",
            )

    def _tensor_work(self, func: ast.AST) -> bool:
        """The helper calls torch, torch_npu or triton (a kernel adapter, a collective, a tensor transform)."""
        return any(
            (self.ctx.qualname(c.func) or "").startswith(_TENSOR_LIBRARIES)
            for c in nodes_of(func, ast.Call)
            if isinstance(c, ast.Call)
        )

    def _caller_parameters(self, call: ast.Call) -> set[str]:
        """The parameters of the top-level function (or method) whose body holds ``call``."""
        for stmt in self.ctx.tree.body:
            scopes = [stmt] if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
            if isinstance(stmt, ast.ClassDef):
                scopes = [s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for func in scopes:
                if func.lineno <= call.lineno <= (func.end_lineno or func.lineno):
                    self._caller_scope: ast.AST = func
                    return set(parameter_defaults(func.args))
        self._caller_scope = ast.Module(body=[], type_ignores=[])
        return set()

    def finish(self) -> None:
        """A module-private helper (``_name``: only this file calls it) that never reads a parameter its callers
        here hand a value: ``_swiglu(x, swiglu_limit)`` whose body no longer looks at ``swiglu_limit`` runs the
        plain path for every caller."""
        tree = self.ctx.tree
        helpers = {
            s.name: s
            for s in tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            and s.name.startswith("_")
            and not s.name.startswith("__")
            and not s.decorator_list
            and not _stub(s)
        }
        if not helpers:
            return
        unread = {
            name: {p: d for p, d in _unread_parameters(func).items() if not _documented_unused(func, p)}
            for name, func in helpers.items()
        }
        unread = {
            name: params for name, params in unread.items() if params and self._tensor_work(helpers[name])
        }
        if not unread:
            return
        # a helper also handled as a value (`impl = _fused if fused else _eager`) has an interface's signature
        called = {id(c.func) for c in nodes_of(tree, ast.Call) if isinstance(c, ast.Call)}
        for n in nodes_of(tree, ast.Name):
            if (
                isinstance(n, ast.Name)
                and n.id in unread
                and isinstance(n.ctx, ast.Load)
                and id(n) not in called
            ):
                unread.pop(n.id)
        passed: dict[tuple[str, str], tuple[ast.Call, ast.expr]] = {}
        for call in nodes_of(tree, ast.Call):
            assert isinstance(call, ast.Call)
            if not isinstance(call.func, ast.Name) or call.func.id not in unread:
                continue
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                continue
            caller = self._caller_parameters(call)
            vetted = {  # names the caller tests in an `assert` or an `if` that raises
                n.id
                for t in nodes_of(self._caller_scope, ast.Assert, ast.If)
                if isinstance(t, ast.Assert) or (t.body and isinstance(t.body[-1], ast.Raise))  # type: ignore[attr-defined]
                for n in ast.walk(t.test)  # type: ignore[attr-defined]
                if isinstance(n, ast.Name)
            }
            for param, value in _given(helpers[call.func.id], call):
                # a value the caller itself was handed (a knob passed down the chain), not a literal or a local,
                # and does not vet itself (`assert not interleaved`, `if window is not None: raise ...`)
                if (
                    param in unread[call.func.id]
                    and isinstance(value, ast.Name)
                    and value.id in caller
                    and value.id not in vetted
                ):
                    passed.setdefault((call.func.id, param), (call, value))
        for (name, param), (call, value) in sorted(passed.items(), key=lambda kv: (kv[1][0].lineno, kv[0])):
            func = helpers[name]
            arg = next(
                a for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs) if a.arg == param
            )
            self.report(
                arg,
                f"`{name}` never reads `{param}`, but its caller at line {call.lineno} hands it "
                f"`{ast.unparse(value)}`: the caller's value is dropped and the helper runs as if it were not set; "
                "use it (or stop passing it)",
            )


_TENSOR_LIBRARIES = ("torch.", "torch_npu.", "triton.")
_UNUSED_WORDS = re.compile(r"not used|unused|ignored|no effect|kept for compatibility", re.I)


def _documented_unused(func: ast.AST, param: str) -> bool:
    """The helper's docstring says the parameter is unused on purpose (``name (str): ... Currently not used``):
    its entry, the parameter's line and the lines indented deeper than it."""
    doc = ast.get_docstring(func) or ""  # type: ignore[arg-type]
    at = re.search(rf"^[ \t]*\**{re.escape(param)}\b", doc, re.M)
    if at is None:
        return False
    lines = doc[at.start() :].splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    own = [lines[0]]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        own.append(line)
    return _UNUSED_WORDS.search("\n".join(own)) is not None


def _given(func: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> list[tuple[str, ast.expr]]:
    """The parameters a call of ``func`` hands a value, with the value."""
    positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    out = [(positional[i], a) for i, a in enumerate(call.args) if i < len(positional)]
    return out + [(k.arg, k.value) for k in call.keywords if k.arg]
