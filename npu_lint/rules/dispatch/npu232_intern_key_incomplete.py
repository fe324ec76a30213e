"""NPU232 intern-key-incomplete."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule

_CONSTRUCTORS = ("__new__", "__init__")


def _params(func: ast.FunctionDef) -> list[str]:
    args = func.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return [n for n in names if n not in ("self", "cls")]


def _key_names(key: ast.expr) -> list[str] | None:
    """The names a tuple key is made of (``(op, variant)``), or None when it is not a tuple of plain names."""
    if not isinstance(key, ast.Tuple) or not key.elts or not all(isinstance(e, ast.Name) for e in key.elts):
        return None
    return [e.id for e in key.elts]  # type: ignore[attr-defined]


class InternKeyIncomplete(Rule):
    code = "NPU232"
    name = "intern-key-incomplete"
    summary = (
        "A class interns (caches) its instances under a key built from some of its constructor's parameters, "
        "while the constructor resolves what the instance runs from more of them: two requests that differ only "
        "in the left-out parameter share one instance."
    )
    why = (
        "VeomniOp handles are interned per `(op, variant, impl)` so that every module asking for the same row "
        "shares one handle. A key that leaves out a parameter the constructor resolves with -- `(op, variant)` "
        "while `__init__` calls `resolve_op(op, variant, impl)` -- hands the first handle built for a row to every "
        'later request: `VeomniOp("rms_norm", "standard", "npu")` returns the eager (or Liger) handle built '
        "earlier in the process, the ops config's NPU choice is silently ignored, and which kernel runs depends on "
        "import order. The constructor's own parameter list is the reference: every parameter the resolution reads "
        "belongs in the key."
    )
    bad = (
        Example(
            """
            class ToyOp:
                _intern = {}

                def __new__(cls, op, variant, impl="eager"):
                    cached = cls._intern.get((op, variant))
                    return cached if cached is not None else super().__new__(cls)

                def __init__(self, op, variant, impl="eager"):
                    self._entry = resolve_op(op, variant, impl)
                    type(self)._intern[(op, variant)] = self
            """,
            path="veomni/ops/toy_handles.py",
            title="handles interned without their implementation",
        ),
    )
    good = (
        Example(
            """
            class ToyOp:
                _intern = {}

                def __new__(cls, op, variant, impl="eager"):
                    cached = cls._intern.get((op, variant, impl))
                    return cached if cached is not None else super().__new__(cls)

                def __init__(self, op, variant, impl="eager", label=None):
                    self._entry = resolve_op(op, variant, impl)
                    type(self)._intern[(op, variant, impl)] = self
            """,
            path="veomni/ops/toy_handles.py",
        ),
    )
    fix_safety = "No fix: add the parameter to every place the key is built (lookup and store)."
    requires = ("__new__", "__init__")
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef) and m.name in _CONSTRUCTORS}
        init = methods.get("__init__")
        if init is None:
            return
        params = _params(init)
        # the parameters the constructor resolves with: arguments of a call whose result it stores on self
        resolved: set[str] = set()
        for assign in nodes_of(init, ast.Assign):
            assert isinstance(assign, ast.Assign)
            if not isinstance(assign.value, ast.Call):
                continue
            if not any(isinstance(t, ast.Attribute) for t in assign.targets):
                continue
            call = assign.value
            for arg in (*call.args, *(k.value for k in call.keywords)):
                if isinstance(arg, ast.Name) and arg.id in params:
                    resolved.add(arg.id)
        if len(resolved) < 2:
            return
        for method in methods.values():
            for key, at in self._intern_keys(method):
                names = _key_names(key)
                if names is None or not set(names) < resolved:
                    continue
                missing = sorted(resolved - set(names), key=params.index)
                self.report(
                    at,
                    f"`{node.name}` instances are interned under `{ast.unparse(key)}`, but `__init__` resolves "
                    f"them with `{', '.join(missing)}` too: requests differing only in "
                    f"`{missing[0]}` share the first instance built; put every resolved parameter in the key",
                )
                return

    @staticmethod
    def _intern_keys(method: ast.FunctionDef) -> list[tuple[ast.expr, ast.AST]]:
        """Keys of ``table[key] = self`` stores and ``table.get(key)`` lookups in a constructor."""
        out: list[tuple[ast.expr, ast.AST]] = []
        for assign in nodes_of(method, ast.Assign):
            assert isinstance(assign, ast.Assign)
            if not (isinstance(assign.value, ast.Name) and assign.value.id == "self"):
                continue
            for target in assign.targets:
                if isinstance(target, ast.Subscript):
                    out.append((target.slice, assign))
        if method.name == "__new__":
            for call in nodes_of(method, ast.Call):
                assert isinstance(call, ast.Call)
                if isinstance(call.func, ast.Attribute) and call.func.attr == "get" and call.args:
                    out.append((call.args[0], call))
        return out
