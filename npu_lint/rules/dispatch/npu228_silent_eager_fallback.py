"""NPU228 silent-eager-fallback."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name, nodes_of, none_tested, str_value, walk
from npu_lint.rules.base import Context, Example, Rule

_GPU_DEVICES = frozenset({"cuda", "gpu"})
# calls that say something: a log line, a warning, a print
_SPEAKS = ("warn", "log", "info", "error", "debug", "critical", "exception", "print", "rank0")
_MATH = frozenset({"log", "log1p", "log2", "log10", "logaddexp", "logcumsumexp", "logdet", "error_norm"})
# calls that ask whether a kernel's requirement or package is there
_PROBES = ("match", "check", "available", "satisf", "support", "usable", "installed", "can_use", "is_enabled")
_FAILURES = frozenset(
    {"ImportError", "ModuleNotFoundError", "RuntimeError", "KeyError", "LookupError", "Exception", "OSError"}
)


_NO_SENTINEL = object()


def _eager_selection(node: ast.AST | None) -> bool:
    """An expression that selects the eager row or kernel: a lookup or call keyed with ``"eager"``, or a name
    spelled for it (``eager_forward``, ``self._eager_entry``). The bare literal ``"eager"`` is not: assigned to
    a name it is an implementation name, which the next lookup may still refuse."""
    if node is None:
        return False
    if _other_device_row(node):
        return True
    for sub in walk(node):
        if isinstance(sub, (ast.Subscript, ast.Call)):
            parts = _keyed_parts(sub)
            if any(str_value(e) == "eager" for p in parts for e in walk(p) if isinstance(e, ast.Constant)):
                return True
        if isinstance(sub, ast.Name) and "eager" in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and "eager" in sub.attr.lower():
            return True
    return False


def _keyed_parts(node: ast.Subscript | ast.Call) -> list[ast.AST]:
    """The parts of a lookup or call that key what it selects. A default handed to ``getattr(obj, name, d)`` or
    ``mapping.get(key, d)`` / ``.pop`` / ``.setdefault`` is left out: ``getattr(config, "attn_implementation",
    "eager")`` reads a setting whose default is the eager name, it selects nothing."""
    if isinstance(node, ast.Call):
        name = call_name(node)
        if name == "getattr" and isinstance(node.func, ast.Name):
            return [node.func, *node.args[:2]]
        if name in ("get", "pop", "setdefault") and isinstance(node.func, ast.Attribute):
            return [node.func, *node.args[:1]]
    return [*ast.iter_child_nodes(node)]


def _other_device_row(node: ast.AST) -> bool:
    """A registry lookup keyed with a CUDA device (``entries.get((op, variant, impl, "cuda"))``): the row another
    device registered, which an Ascend host cannot run."""
    for sub in walk(node):
        key = None
        if isinstance(sub, ast.Subscript):
            key = sub.slice
        elif isinstance(sub, ast.Call) and call_name(sub) == "get" and sub.args:
            key = sub.args[0]
        if isinstance(key, ast.Tuple) and any(str_value(e) in _GPU_DEVICES for e in key.elts):
            return True
    return False


def _speaks(stmts: list[ast.stmt], nested: bool = True, holds: frozenset[str] = frozenset()) -> bool:
    """Whether the statements raise, warn or log (the fallback is then said). ``nested=False``: a raise or log
    under a nested condition (``if devices: raise ...`` in a lookup-miss branch) does not announce the fallback
    the block goes on to take, unless the condition is one of ``holds`` (true on this path: ``impl != "eager"``
    after the function returned for the eager implementation)."""
    for stmt in stmts:
        if not nested and isinstance(stmt, ast.If):
            if ast.unparse(stmt.test) in holds and _speaks(stmt.body, nested=False, holds=holds):
                return True
            continue
        for sub in walk(stmt):
            if isinstance(sub, ast.Raise):
                return True
            if not isinstance(sub, ast.Call):
                continue
            name = call_name(sub).lower()
            if name in _MATH or name.startswith(("log_soft", "log_sig", "logical", "logit", "logsum")):
                continue  # `torch.log`, `log_softmax`: arithmetic, not a message
            if any(w in name for w in _SPEAKS):
                return True
    return False


def _selects_eager(
    stmts: list[ast.stmt], name_too: bool = False, sentinel: object = _NO_SENTINEL
) -> ast.AST | None:
    """The statement of a block that returns or binds an eager selection (an attribute or local), or None.
    ``name_too``: the bare implementation name ``"eager"`` counts (a block that runs because a kernel's
    package or requirement is missing: the name is then what binds). ``sentinel``: the constant the function
    itself returns for the eager implementation (``if impl_name == "eager": return None``)."""
    for stmt in stmts:
        value = stmt.value if isinstance(stmt, (ast.Return, ast.Assign, ast.AnnAssign)) else None
        if value is None:
            if isinstance(stmt, ast.Return) and sentinel is None:
                return stmt
            continue
        if _eager_selection(value) or (name_too and str_value(value) == "eager"):
            return stmt
        if (
            isinstance(stmt, ast.Return)
            and isinstance(value, ast.Constant)
            and sentinel is not _NO_SENTINEL
            and value.value == sentinel
        ):
            return stmt
    return None


def _eager_names(function: ast.AST) -> frozenset[str]:
    """The names a function compares with ``"eager"`` (its implementation name: ``impl_name == "eager"``)."""
    out = set()
    for sub in nodes_of(function, ast.Compare):
        if (
            isinstance(sub, ast.Compare)
            and len(sub.ops) == 1
            and isinstance(sub.ops[0], (ast.Eq, ast.NotEq))
            and str_value(sub.comparators[0]) == "eager"
        ):
            out.add(ast.unparse(sub.left))
    return frozenset(out)


def _eager_guard(function: ast.AST) -> tuple[object, str | None]:
    """(the sentinel, the implementation name the guard compares) of ``if impl == "eager": return <sentinel>``
    at the top of a function; (``_NO_SENTINEL``, None) without one."""
    for stmt in function.body if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else ():
        if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
            continue
        test = stmt.test
        if (
            len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and str_value(test.comparators[0]) == "eager"
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Return)
        ):
            value = stmt.body[0].value
            if value is None:
                return None, ast.unparse(test.left)
            if isinstance(value, ast.Constant):
                return value.value, ast.unparse(test.left)
    return _NO_SENTINEL, None


def _failed_probe(test: ast.expr, keys: frozenset[str] = frozenset()) -> str | None:
    """``not req.matches()`` / ``not is_x_available()`` / ``entry is None`` (a lookup that found nothing): the
    test's text, or None. ``keys``: the implementation names of the function (compared with ``"eager"``); a
    ``not in`` test of another value (``module_name not in _PATCHABLE``: a guard, not a lookup miss) is none."""
    for sub in walk(test):
        if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Not) and isinstance(sub.operand, ast.Call):
            if any(p in call_name(sub.operand).lower() for p in _PROBES):
                return ast.unparse(sub)
        if none_tested(sub) is not None:
            return ast.unparse(sub)
        if (
            isinstance(sub, ast.Compare)
            and len(sub.ops) == 1
            and isinstance(sub.ops[0], ast.NotIn)
            and not isinstance(sub.comparators[0], (ast.Tuple, ast.List, ast.Set, ast.Constant))
            and (not keys or ast.unparse(sub.left) in keys)
        ):
            return ast.unparse(sub)  # a key the table does not hold (``impl not in bucket``)
    return None


def _import_failure(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind] if kind is not None else []
    return any(_last_name(n) in ("ImportError", "ModuleNotFoundError") for n in names)


def _last_name(node: ast.AST) -> str:
    return last_name(node) or ""


def _handled(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind] if kind is not None else []
    if kind is None:
        return True
    return any((last_name(n) or "") in _FAILURES for n in names)


class SilentEagerFallback(Rule):
    code = "NPU228"
    name = "silent-eager-fallback"
    summary = (
        "A kernel lookup or binding that fails (a requirement not met, an import error, a missing row) selects "
        "the eager row or kernel (or the row a CUDA device registered) instead of raising, and says nothing."
    )
    why = (
        "The ops config names the kernel a run must use (`npu` / `fused_npu` on Ascend), and the registry's "
        "`resolve` raises when that row does not exist for the device or its requirement is not met. Code that "
        "turns the failure into the eager row -- `if not entry.requirement.matches(): return "
        'self._entries[(op, variant, "eager", ANY_DEVICE)]`, `except ImportError: self.kernel = eager_forward`, '
        '`table.get(key, table[(op, "eager")])` -- keeps the run going on the slow reference path: an Ascend '
        "host whose torch_npu or kernel package is broken, or a misspelt variant, trains for days at a fraction "
        "of the throughput (and with different numerics) and nothing in the log says so; a fallback to the row "
        "keyed for `cuda` runs a GPU kernel on Ascend and fails inside it. The rule reports such "
        "a branch or handler when it neither raises nor warns nor logs; a fallback that is announced is left "
        "alone. The same silence in three other shapes: a generic binder reading a config field by a computed "
        "name with a computed default (`getattr(ops_config, self.field_name, self._value)`: a misspelt field "
        'keeps the compiled-in kernel); a chain over an implementation name (`if kernel == "npu": ... elif '
        'kernel == "triton": ...`) whose `else` binds `None` instead of raising; and a flag that holds the '
        'requested implementation only where call conditions hold too (`use_k = impl == "k" and x.is_cuda`) '
        'with no raise or warning for `impl == "k" and not use_k`.'
    )
    bad = (
        Example(
            """
            class ToyRegistry:
                def resolve(self, op, variant, impl):
                    entry = self._entries[(op, variant, impl)]
                    if entry.requirement is not None and not entry.requirement.matches():
                        return self._entries[(op, variant, "eager")]
                    return entry
            """,
            path="veomni/ops/toy_registry.py",
            title="a failed requirement resolves to the eager row",
        ),
        Example(
            """
            from veomni.ops.kernels.toy import eager_forward


            def bind_kernel(module, impl):
                try:
                    from veomni.ops.kernels.toy.npu import npu_forward

                    module.kernel = npu_forward
                except ImportError:
                    module.kernel = eager_forward
            """,
            path="veomni/ops/toy_binding.py",
            title="an import error leaves the handle on the eager kernel",
        ),
        Example(
            """
            def resolve(table, op, variant, impl):
                return table.get((op, variant, impl), table[(op, "standard", "eager")])
            """,
            path="veomni/ops/toy_lookup.py",
            title="a default that swallows an unknown variant",
        ),
    )
    good = (
        Example(
            """
            import logging

            logger = logging.getLogger(__name__)


            class ToyRegistry:
                def resolve(self, op, variant, impl):
                    entry = self._entries[(op, variant, impl)]
                    if entry.requirement is not None and not entry.requirement.matches():
                        logger.warning("%s/%s: %s unavailable, using eager", op, variant, impl)
                        return self._entries[(op, variant, "eager")]
                    return entry


            def implementation(ops_config):
                return getattr(ops_config, "rms_norm_implementation", "eager")
            """,
            path="veomni/ops/toy_registry.py",
        ),
    )
    fix_safety = "No fix: raise, or warn before falling back; which one the op wants is decided by hand."
    requires = (("eager", "cuda", "kernel", "impl", "getattr"),)
    node_types = (ast.If, ast.Try, ast.Call)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._said_narrowed: set[tuple[int, str]] = set()

    def visit(self, node: ast.AST) -> None:
        if self.ctx.function is None:
            return
        if isinstance(node, ast.If):
            unbound = _unknown_name_unbinds(node, self.ctx.parent)
            if unbound is not None:
                subject, target = unbound
                self.report(
                    target,
                    f"an implementation name that no branch of the chain over `{subject}` accepts (a misspelt "
                    "one, or a GPU kernel's name on an Ascend host) leaves "
                    f"`{ast.unparse(target.targets[0])}` unbound (`None`) without raising: the missing kernel "
                    "fails later, far from the setting that caused it; raise for an unknown or unavailable name",
                )
                return
            narrowed = _narrowed_request(node, self.ctx.function)
            if narrowed is not None:
                assign, request = narrowed
                key = (id(assign), "narrowed")
                if key not in self._said_narrowed:
                    self._said_narrowed.add(key)
                    self.report(
                        node.test,
                        f"`{ast.unparse(assign.targets[0])}` (line {assign.lineno}) holds `{ast.unparse(request)}` only where the other "
                        "conditions hold too, and nothing raises or warns when the implementation was requested "
                        f"but they fail (`{ast.unparse(request)} and not {ast.unparse(assign.targets[0])}`): on a "
                        "call the kernel cannot serve (an Ascend tensor, a shape it lacks) the configured kernel is "
                        "dropped for the fallback path without notice; raise when the requested one cannot run",
                    )
            probe = _failed_probe(node.test, _eager_names(self.ctx.function))
            if probe is None:
                return
            sentinel, guarded = _eager_guard(self.ctx.function)
            chosen = _selects_eager(node.body, name_too=not probe.endswith("is None"), sentinel=sentinel)
            holds = frozenset({f"{guarded} != 'eager'"} if guarded is not None else ())
            if chosen is None or _speaks(node.body, nested=False, holds=holds):
                return
            self.report(
                chosen,
                f"when `{probe}` (line {node.test.lineno}) the branch falls back to {_what(chosen)} (`{_short(chosen)}`) without raising, "
                "warning or logging: a run whose configured kernel (on Ascend the NPU row) cannot be used "
                "silently runs another kernel than the one configured; raise, or at least warn before "
                "falling back",
            )
        elif isinstance(node, ast.Try):
            for handler in node.handlers:
                if not _handled(handler):
                    continue
                chosen = _selects_eager(handler.body, name_too=_import_failure(handler))
                if chosen is None or _speaks(handler.body):
                    continue
                caught = ast.unparse(handler.type) if handler.type is not None else "every exception"
                self.report(
                    handler,
                    f"the handler of `{caught}` falls back to {_what(chosen)} (`{_short(chosen)}`) without "
                    "raising, warning or logging: a missing or broken kernel (on Ascend the NPU one) silently "
                    "leaves the op on the eager reference path; let the error through, or warn before falling "
                    "back",
                )
        elif isinstance(node, ast.Call):
            if _config_field_default(node):
                self.report(
                    node.args[2],
                    f"`{_short(node)}` answers a field the ops config does not have with "
                    f"`{ast.unparse(node.args[2])}`: a misspelt or stale field name silently keeps the compiled-in "
                    "kernel choice (a GPU backend on an Ascend host) instead of failing when the config is bound; "
                    "read the field without a default",
                )
                return
            if call_name(node) != "get" or len(node.args) != 2 or not isinstance(node.func, ast.Attribute):
                return
            default = node.args[1]
            if isinstance(default, ast.Constant) or not _eager_selection(default):
                return
            self.report(
                default,
                f"`{ast.unparse(node.func.value)}.get(...)` answers a key it does not hold with the eager entry "
                f"`{ast.unparse(default)}`: an unknown variant or implementation name silently runs the eager "
                "path instead of failing the lookup; look the key up and raise when it is missing",
            )


def _config_field_default(node: ast.Call) -> bool:
    """``getattr(ops_config, self.field_name, self._value)``: a config object's field read by a name the code
    computes (a generic binder of config slots), with a default other than ``None`` standing in for a field the
    config lacks. A literal field name is a reader of one known field (its default documents the config's own)."""
    if not (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 3):
        return False
    obj, field, default = node.args
    owner = (_last_name(obj) or "").lower()
    if "config" not in owner and "cfg" not in owner:
        return False
    # a literal default ("eager", None) is the config's documented value for a field it may lack; a computed one
    # (`self._value`, a parameter) is a kernel choice compiled in elsewhere
    return not isinstance(field, ast.Constant) and not isinstance(default, ast.Constant)


def _name_test(test: ast.expr) -> str | None:
    """The subject of ``impl == "literal"`` (also as the first operand of an ``and``), else None."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[0]
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Eq, ast.In))
        and isinstance(test.left, (ast.Name, ast.Attribute))
        and _literals(test.comparators[0])
    ):
        return ast.unparse(test.left)
    return None


def _narrowed_request(node: ast.If, function: ast.AST | None) -> tuple[ast.Assign, ast.expr] | None:
    """``use_k = impl == "k" and x.is_cuda and ...`` then ``if use_k:`` with an ``else`` path (or code after it):
    the assignment and the request (``impl == "k"``) when no test of ``not use_k`` in the function speaks."""
    if function is None or not isinstance(node.test, ast.Name):
        return None
    flag = node.test.id
    assigns = [
        a
        for a in walk(function)
        if isinstance(a, ast.Assign)
        and len(a.targets) == 1
        and isinstance(a.targets[0], ast.Name)
        and a.targets[0].id == flag
    ]
    if len(assigns) != 1 or not isinstance(assigns[0].value, ast.BoolOp):
        return None
    value = assigns[0].value
    if not isinstance(value.op, ast.And) or len(value.values) < 2:
        return None
    request = next(
        (v for v in value.values if _name_test(v) is not None and isinstance(v, ast.Compare)), None
    )
    if request is None or not _names_implementation(_name_test(request) or ""):
        return None
    if not any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) for b in node.body for c in walk(b)):
        return None  # the branch runs no kernel function of its own (a layout or unpacking choice)
    for other in walk(function):
        if isinstance(other, ast.If) and other is not node:
            negated = any(
                isinstance(n, ast.UnaryOp)
                and isinstance(n.op, ast.Not)
                and isinstance(n.operand, ast.Name)
                and n.operand.id == flag
                for n in walk(other.test)
            )
            if negated and _speaks(other.body):
                return None
    return assigns[0], request


def _names_implementation(subject: str) -> bool:
    """A name that holds an implementation choice (``fused_moe_kernel``, ``attn_backend``, ``self.impl``)."""
    return any(w in subject.rsplit(".", 1)[-1].lower() for w in ("impl", "backend", "kernel"))


def _literals(node: ast.expr) -> bool:
    """A string literal, or a tuple / list / set of them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(str_value(e) is not None for e in node.elts)
    return str_value(node) is not None


def _unknown_name_unbinds(node: ast.If, parent: ast.AST | None) -> tuple[str, ast.Assign] | None:
    """The head of a chain ``if impl == "a": k = ... elif impl == "b": k = ... else: k = None`` (two or more
    tests of one name against literals, each branch binding the kernel): the subject and the ``else`` that binds
    ``None`` without raising or logging."""
    if isinstance(parent, ast.If) and parent.orelse == [node]:
        return None  # not the head of the chain
    subject = _name_test(node.test)
    if subject is None or not _names_implementation(subject):
        return None
    tests, branch = 1, node
    while len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If):
        branch = branch.orelse[0]
        if _name_test(branch.test) != subject:
            return None
        tests += 1
    final = branch.orelse
    if tests < 2 or len(final) != 1 or not isinstance(final[0], ast.Assign):
        return None
    assign = final[0]
    if (
        not (isinstance(assign.value, ast.Constant) and assign.value.value is None)
        or len(assign.targets) != 1
    ):
        return None
    target = ast.unparse(assign.targets[0])
    bound = [
        b
        for b in _chain_bodies(node)
        if any(isinstance(s, ast.Assign) and target in {ast.unparse(t) for t in s.targets} for s in b)
    ]
    if len(bound) < 2:
        return None
    return subject, assign


def _chain_bodies(node: ast.If) -> list[list[ast.stmt]]:
    out = [node.body]
    while len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
        node = node.orelse[0]
        out.append(node.body)
    return out


def _what(node: ast.AST) -> str:
    return "a CUDA device's row" if _other_device_row(node) else "the eager path"


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."
