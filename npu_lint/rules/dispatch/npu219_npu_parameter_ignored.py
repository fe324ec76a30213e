"""NPU219 npu-parameter-ignored."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, own_nodes, walk
from npu_lint.rules._handles import ATTENTION_HELPERS, INSTANCE_HANDLES, ROW_RESOLVERS, call_name, spec_target
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.resolution import NPU_NAME, HostValue, NpuHost, host_env

_BUILT = (
    INSTANCE_HANDLES | ROW_RESOLVERS | ATTENTION_HELPERS
)  # VeomniOp, VeomniKernel, resolve_op, attention_op


def _class_functions(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Class name -> the functions of that class the file holds: its methods, and the patch-spec functions
    that replace one of its methods (``@config.override_method("Cls.forward")``)."""
    out: dict[str, list[ast.AST]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            out.setdefault(stmt.name, []).extend(
                s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cls = spec_target(stmt)[0]
            if cls:
                out.setdefault(cls, []).append(stmt)
    return out


def _interface_overrides(tree: ast.Module) -> set[int]:
    """Methods that implement an in-file base class's method of the same name and parameters (the signature is
    the interface's: a GPU-side implementation may have no use for the NPU parameter)."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    out: set[int] = set()
    for cls in classes.values():
        inherited: dict[str, set[str]] = {}
        for base in cls.bases:
            base_cls = classes.get(base.id) if isinstance(base, ast.Name) else None
            for stmt in base_cls.body if base_cls is not None else []:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = stmt.args
                    inherited[stmt.name] = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in inherited:
                a = stmt.args
                if {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)} <= inherited[stmt.name]:
                    out.add(id(stmt))
    return out


def _bases(tree: ast.Module) -> dict[str, set[str]]:
    return {
        s.name: {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in s.bases}
        for s in tree.body
        if isinstance(s, ast.ClassDef)
    }


def _self_reads(func: ast.AST) -> set[str]:
    """The attributes a function reads (``x.attr`` loads, ``getattr(x, "attr")``)."""
    out: set[str] = set()
    for node in walk(func):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            out.add(node.attr)
        elif isinstance(node, ast.Call) and last_name(node.func) in ("getattr", "hasattr", "attrgetter"):
            out.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return out


def _init_handles(func: ast.AST) -> list[tuple[str, ast.Assign, str]]:
    """``self.<attr> = VeomniOp(...)`` in an ``__init__``: (attr, statement, constructor)."""
    out = []
    for node in walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            name = call_name(node.value)
            if name not in _BUILT:
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    out.append((target.attr, node, name))
    return out


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
        "never reads it (or, a remap of the NPU name such as `npu_as`, reads it where the NPU name never "
        "reaches), so every caller's NPU choice is dropped; or an `__init__` builds a dispatch handle on "
        "`self` (carrying the ops config's NPU choice) that no function of its class reads."
    )
    why = (
        "Dispatch helpers carry the NPU side of a choice in a parameter: the ops-config reader "
        "`resolve_op_impl(field, npu_as='chunk_loss')` maps the config's NPU name to the row the NPU actually "
        "registers, a kernel binder takes the NPU kernel's name, a builder an `on_npu` switch. A body that "
        "never reads that parameter returns the GPU-side answer on Ascend: the handle asks for a row nobody "
        "registered (KeyError at model build) or binds the wrong kernel, while every caller looks correct. The "
        "rule reads the function itself (stubs, abstract methods and overloads aside) and, for the tree's "
        "ops-config reader, names the specs that pass the parameter. A reader that reads `npu_as` only under a "
        "test the NPU name fails (`if npu_as is not None and impl == 'eager'`) drops it the same way: the rule "
        "follows the body as an NPU host whose ops config holds the NPU name and whose caller passed the remap, "
        "and reports the return that answers the NPU name instead."
        " The same choice is dropped when an `__init__` builds `self.veomni_ce = VeomniOp(...)` from the ops "
        "config and nothing of the class uses it (a loss helper bound with `partial(...)` but without "
        "`op=self.veomni_ce`, a forward calling the eager function): the class's methods in the file (its own, "
        "or a spec's overrides of them, and its in-file base classes') are read for the attribute."
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
        Example(
            """
            from veomni.ops.config import get_ops_config


            def read_impl(field: str, *, npu_as: str | None = None) -> str:
                cfg = get_ops_config()
                impl = "eager" if cfg is None else getattr(cfg, field, "eager")
                if npu_as is not None and impl == "eager":
                    return npu_as
                return impl
            """,
            path="veomni/models_kernel/utils/impl_reader.py",
            title="the remap applied to another name than the NPU one",
        ),
        Example(
            """
            from functools import partial

            from veomni.ops import VeomniOp


            @config.override_method("ToyForSequenceClassification.__init__")
            def toy_seq_cls_init_patched(self, config):
                impl = resolve_op_impl("cross_entropy_loss_implementation", npu_as="chunk_loss")
                self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", impl)
                self.loss_function = partial(ForSequenceClassificationLoss)


            @config.override_method("ToyForSequenceClassification.forward")
            def toy_seq_cls_forward_patched(self, input_ids, labels=None):
                return self.loss_function(self.score(input_ids), labels)
            """,
            path="veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py",
            title="the handle built and never passed to the loss helper",
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
    requires = ("def ", ("npu", "NPU", "Npu", "VeomniOp", "VeomniKernel", "resolve_op", "attention_op"))
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def finish(self) -> None:
        """A handle an ``__init__`` builds on ``self`` (from the ops config, which carries the NPU choice) that no
        function of its class reads: the forward runs whatever it runs instead (a loss helper bound without
        ``op=``, a direct kernel call), so the configured implementation -- on Ascend the NPU one -- is dropped."""
        tree = self.ctx.tree
        classes = _class_functions(tree)
        bases = _bases(tree)
        for cls, funcs in sorted(classes.items()):
            inits = [f for f in funcs if (spec_target(f)[1] or getattr(f, "name", None)) == "__init__"]
            others = [f for f in funcs if f not in inits]
            if not inits or not others:
                continue  # the class's other methods are elsewhere: nothing to compare
            related = [f for c in bases.get(cls, ()) for f in classes.get(c, [])]
            for init in inits:
                handles = _init_handles(init)
                if not handles:
                    continue
                read: set[str] = set()
                for func in [*funcs, *related]:
                    read |= _self_reads(func)
                for attr, stmt, name in handles:
                    if attr in read:
                        continue
                    self.report(
                        stmt,
                        f"`{cls}.__init__` builds `self.{attr} = {name}(...)` and no function of `{cls}` reads "
                        f"`{attr}`: the implementation the ops config chose (on Ascend the NPU one) is never "
                        "called; pass the handle where it is meant to run (`op=self."
                        f"{attr}` to the loss helper, the call in `forward`)",
                    )

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        args = node.args
        params = [
            a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if "npu" in a.arg.lower().split("_")
        ]
        if not params or _trivial(node):
            return
        cached = getattr(self, "_overrides", None)
        if cached is None or cached[0] is not self.ctx.tree:
            cached = self._overrides = (self.ctx.tree, _interface_overrides(self.ctx.tree))
        if id(node) in cached[1]:
            return  # the base class's signature: the interface, not this implementation, takes the parameter
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
                if {"as", "alias", "name", "impl"} & set(param.arg.lower().split("_")):
                    self._remap_unused(node, param.arg)  # a remap of the NPU name: ``npu_as``, ``npu_alias``
                continue
            callers = [at for _r, _f, value, at in self.ctx.project.npu_remaps if param.arg == "npu_as"]
            evidence = (
                f" ({len(callers)} spec reads pass it, e.g. {callers[0]})"
                if callers and node.name in _resolvers(self.ctx)
                else ""
            )
            returns = [n for n in own_nodes(node) if isinstance(n, ast.Return) and n.value is not None]
            self.report(
                # where the function answers without it (the last return: where it belongs), else the parameter
                max(returns, key=lambda n: n.lineno) if returns else param,
                f"`{node.name}` takes `{param.arg}` but never reads it{evidence}: every caller's NPU choice is "
                "dropped, so on Ascend the function answers as on GPU (a row nobody registered, or the GPU "
                f"kernel); use `{param.arg}`",
            )

    def _remap_unused(self, func: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> None:
        """An ops-config reader that reads ``npu_as`` but, on an NPU host whose configuration holds the NPU name,
        still answers that name when a caller passes ``npu_as`` (``if npu_as is not None and impl == "eager"``):
        the remap never applies where it is meant to."""
        host = NpuHost()
        env = {**host_env(func, host), param: HostValue(_ASKED)}
        answer = _answer(func.body, host, env)
        if answer is None or answer[0].value is None or not answer[0].npu or answer[0].value == _ASKED:
            return
        shown = "its NPU name" if answer[0].value == NPU_NAME else f"`{answer[0].value}`"
        self.report(
            answer[1],
            f"on an NPU host whose ops config holds the NPU name, `{func.name}` answers {shown} even when a caller "
            f"passes `{param}`: the remap never applies where it is meant to, and the handle asks for a row the NPU "
            f"does not register (cross-entropy has no `npu` row); apply `{param}` when the value is the NPU name",
        )


_ASKED = "<npu_as>"  # what a caller passed as ``npu_as``
_CONFIG = "<config>"  # an ops config object


def _answer(
    stmts: list[ast.stmt], host: NpuHost, env: dict[str, HostValue]
) -> tuple[HostValue, ast.Return] | None:
    """What a function body returns on an NPU host, statement by statement (assignments followed, tests the host
    decides taken); None when a test is not decided or the return is not reached plainly."""
    env = dict(env)
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            return (host.value(stmt.value, env), stmt) if stmt.value is not None else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.Call) and "config" in call_name(value).lower():
                env[stmt.targets[0].id] = HostValue(_CONFIG)  # the installed ops config: not None on a run
            else:
                env[stmt.targets[0].id] = host.value(value, env)
        elif isinstance(stmt, ast.If):
            decided, _dep = host.test(stmt.test, env)
            if decided is None:
                return None
            branch = stmt.body if decided else stmt.orelse
            if any(isinstance(n, ast.Return) for s in branch for n in walk(s)):
                return _answer(branch, host, env)
            if any(isinstance(n, (ast.Assign, ast.AugAssign)) for s in branch for n in walk(s)):
                return None  # the branch rebinds names: not followed
        elif any(isinstance(n, (ast.Return, ast.Raise)) for n in walk(stmt)):
            return None  # returns inside loops, ``try`` or ``with``: not followed
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.With, ast.Try)):
            return None
    return None


def _resolvers(ctx: Context) -> set[str]:
    """The names the tree's model specs use to read the ops config with an NPU remap."""
    return {resolver for resolver, _f, _v, _at in ctx.project.npu_remaps}
