"""NPU222 npu-selection-forced-eager."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch.npu212_npu_fallback_incomplete import _is_fallback_table
from npu_lint.rules.dispatch.npu216_npu_fallback_gpu_row import field_ops
from npu_lint.veomni.catalog import NPU
from npu_lint.veomni.resolution import NPU_NAME, HostValue, NpuHost, default_env, host_env, names_npu


def _eager(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "eager"


def _names_eager(test: ast.expr) -> bool:
    return any(str_value(n) == "eager" for n in ast.walk(test) if isinstance(n, ast.Constant))


def _npu_with_eager(test: ast.expr) -> str | None:
    """``impl in ("eager", "npu")``: an NPU implementation name listed with ``eager`` in one membership test,
    so whatever holds the name, the NPU value takes the eager branch. The NPU literal, or None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)):
        return None
    right = test.comparators[0]
    if not isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        return None
    literals = [str_value(e) for e in right.elts]
    if "eager" not in literals:
        return None
    return next((lit for lit in literals if names_npu(lit)), None)


def _defaulted_eager(value: ast.expr | None, host: NpuHost | None, env: dict[str, HostValue] | None) -> str:
    """The parameters (``npu_as``), as words, whose defaults make ``value`` the string ``eager``
    (``npu_as if npu_as is not None else "eager"``, ``npu_as or "eager"``, ``npu_as`` defaulting to ``"eager"``);
    "" when it is not eager that way."""
    if value is None or host is None or not env or host.value(value, env).value != "eager":
        return ""
    used = sorted(
        {
            n.id
            for n in ast.walk(value)
            if isinstance(n, ast.Name) and n.id in env and not env[n.id].npu and env[n.id].value is not None
        }
    )
    return " and ".join(f"`{name}`" for name in used)


def _mappings(func: ast.AST, constants: dict[str, ast.expr]) -> list[ast.expr]:
    """The expressions of ``func`` that may map an implementation name to another: lookups in a literal table or
    a module-level one (``_ALIASES[impl]``, ``_ALIASES.get(impl, impl)``), ``.replace("npu", ...)``."""

    def table(node: ast.expr) -> bool:
        return isinstance(node, ast.Dict) or (isinstance(node, ast.Name) and node.id in constants)

    out: list[ast.expr] = []
    for node in nodes_of(func, ast.Subscript, ast.Call):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and table(node.value):
            out.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr == "get" and table(node.func.value):
                out.append(node)
            elif node.func.attr == "replace" and names_npu(str_value(node.args[0])):
                out.append(node)
    return out


class NpuSelectionForcedEager(Rule):
    code = "NPU222"
    name = "npu-selection-forced-eager"
    summary = (
        "Code that turns an implementation name into a binding decides, on an NPU host, for the eager path: a "
        "test that NPU availability or the NPU implementation name makes true (or false) selects `eager`, "
        "returns no kernel, or skips the binding (an NPU name listed with `eager` in one membership test "
        "included); or an NPU-decided choice between two names picks the one not named for the NPU."
    )
    why = (
        "On Ascend the ops config resolves every op the tree has an NPU kernel for to its NPU name (`npu`, "
        "`fused_npu`), and the binders (`OpSlot.bind`, the registry's `resolve`, per-model patching, a "
        "`VeomniOp(..., impl)` built from `resolve_op_impl`, helpers that translate names) must carry that name "
        "to the kernel. A test that the NPU host decides by itself -- `is_torch_npu_available()`, "
        "`IS_NPU_AVAILABLE`, or a comparison of the implementation name that the NPU value satisfies "
        "(`impl in ('eager', 'npu')`, `impl if impl == 'liger_kernel' else 'eager'`) -- and whose branch "
        "selects eager makes every Ascend run silently use the unfused path (or lose the only varlen kernel) "
        "whatever the config says. The rule evaluates each test as an NPU host does: NPU availability true, "
        "CUDA availability false, an implementation field holding its NPU name (the tree's own NPU default "
        "when it is eager counts as no decision), local names followed through their assignments, parameters "
        "left at their defaults (a resolver whose NPU branch returns `npu_as if npu_as is not None else "
        "'eager'` sends every op called without `npu_as` -- RMSNorm, RoPE -- to eager); a table lookup "
        '(`{"npu": "eager"}.get(impl, impl)`) or a rewrite (`impl.replace("npu", "eager")`) that turns the NPU '
        "name into eager is the same decision without a test."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import is_torch_npu_available


            def bind_slots(module, ops_config):
                for slot in module.slots:
                    if is_torch_npu_available():
                        impl = "eager"  # fused kernels are tuned for GPUs
                    else:
                        impl = getattr(ops_config, f"{slot.op_name}_implementation", "eager")
                    slot.bind(impl)
            """,
            path="veomni/models/binder.py",
            title="every slot bound to eager on an NPU host",
        ),
        Example(
            """
            def pick_norm(ops_config):
                impl = ops_config.layer_norm_implementation
                return impl if impl == "liger_kernel" else "eager"
            """,
            path="veomni/models/norm_choice.py",
            title="a name test that keeps only a GPU name and sends `npu` to eager",
        ),
        Example(
            """
            def apply_patches(ops_config, table):
                for field, target in table.items():
                    value = getattr(ops_config, field)
                    if value in ("eager", "npu"):
                        continue
                    target.bind(value)
            """,
            path="veomni/ops/config/patching.py",
            title="the NPU name skipped like eager",
        ),
        Example(
            """
            from veomni.utils.import_utils import is_torch_npu_available

            _ROWS = {}


            def find_scan(op: str, impl: str):
                if impl in ("eager", "npu"):
                    return None
                return _ROWS[op, impl]


            def legacy_scan_alias(value: str) -> str:
                if value == "fused":
                    value = "scan_triton" if is_torch_npu_available() else "scan_npu"
                return value
            """,
            path="veomni/ops/scan_rows.py",
            title="the NPU name listed with eager; an NPU-decided alias with its branches swapped",
        ),
        Example(
            """
            from veomni.ops.config import get_ops_config


            def resolve_op_impl(field: str, *, npu_as: str | None = None) -> str:
                cfg = get_ops_config()
                impl = "eager" if cfg is None else getattr(cfg, field, "eager")
                if impl == "npu":
                    return npu_as if npu_as is not None else "eager"
                return impl
            """,
            path="veomni/models_kernel/utils/op_utils.py",
            title="the tree's resolver sends `npu` to eager for every op called without `npu_as`",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import is_torch_npu_available


            def bind_slots(module, ops_config):
                for slot in module.slots:
                    impl = getattr(ops_config, f"{slot.op_name}_implementation", "eager")
                    if impl == "eager":
                        continue
                    slot.bind(impl)
                if not is_torch_npu_available():
                    return
            """,
            path="veomni/models/binder.py",
        ),
    )
    fix_safety = "No fix: whether the op has an NPU kernel that the branch should keep is decided by hand."
    requires = (("eager", 'npu"', "npu'"), ("npu", "NPU", "_implementation"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        self._seen: set[int] = set()
        self._tables()
        constants = {
            s.targets[0].id: s.value
            for s in self.ctx.tree.body
            if isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name)
            and isinstance(s.value, ast.Dict)
        }
        host = NpuHost(constants=constants)
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            env: dict[str, HostValue] | None = None
            mappings = _mappings(func, constants)
            if mappings:
                self._mapped_to_eager(func, mappings, host)
            for node in nodes_of(func, ast.If, ast.IfExp):
                assert isinstance(node, (ast.If, ast.IfExp))
                if env is None:
                    # parameters at their defaults (``npu_as=None``): what a call that leaves them out gets
                    env = {**default_env(func), **host_env(func, host)}
                decided, dep = host.test(node.test, env)
                if decided is None or not dep:
                    self._grouped_with_eager(node)
                    if isinstance(node, ast.IfExp):
                        self._inverted_choice(node, host, env)
                    continue
                if isinstance(node, ast.IfExp) and self._inverted_choice(node, host, env):
                    continue
                what = self._eager_path(node, decided, host, env)
                if what is None:
                    continue
                reason = self._reason(node.test, env, host)
                self.report(
                    node.test,
                    f"on an NPU host `{ast.unparse(node.test)}` is {decided} ({reason}) and the branch it "
                    f"selects {what}: the op's NPU kernel is never bound on Ascend, whatever the ops config "
                    "selects; carry the configured NPU implementation name to the binding",
                )

    def _mapped_to_eager(self, func: ast.AST, mappings: list[ast.expr], host: NpuHost) -> None:
        """A value computed from the implementation name an NPU host reads that is ``eager`` with no test on the
        way: a table lookup (``_ALIASES.get(impl, impl)`` with ``{"npu": "eager"}``), a rewrite
        (``impl.replace("npu", "eager")``)."""
        for node in mappings:
            if id(node) in self._seen:
                continue  # a nested function's node, met again in the enclosing one
            self._seen.add(id(node))
            # what the names hold where the mapping reads them (``impl = _ALIASES.get(impl, impl)`` rebinds)
            env = {**default_env(func), **host_env(func, host, before=node.lineno)}
            got = host.value(node, env)
            if got.value != "eager" or not got.npu:
                continue
            self.report(
                node,
                f"on an NPU host `{ast.unparse(node)}` turns the configured NPU implementation name into "
                "`'eager'`: the op's NPU kernel is never bound on Ascend, whatever the ops config selects; carry "
                "the NPU name to the binding",
            )

    def _grouped_with_eager(self, node: ast.If | ast.IfExp) -> None:
        npu = _npu_with_eager(node.test)
        if npu is None:
            return
        what = self._eager_path(node, True)
        if what is None:
            return
        self.report(
            node.test,
            f"`{ast.unparse(node.test)}` lists the NPU implementation name `{npu}` with `eager`, and the branch "
            f"it selects {what}: an NPU selection is never bound on Ascend; keep `{npu}` out of the eager test",
        )

    def _inverted_choice(self, node: ast.IfExp, host: NpuHost, env: dict[str, HostValue]) -> bool:
        """``"fused_quack" if is_torch_npu_available() else "fused_npu"``: a choice between two implementation
        names that an NPU host decides, taking the one not named for the NPU while the other branch is."""
        decided, dep = host.test(node.test, env)
        if decided is None or not dep:
            return False
        chosen, other = (node.body, node.orelse) if decided else (node.orelse, node.body)
        picked, alternative = str_value(chosen), str_value(other)
        if picked is None or alternative is None or picked == "eager":
            return False
        if names_npu(picked) or not names_npu(alternative):
            return False
        self.report(
            node.test,
            f"on an NPU host `{ast.unparse(node.test)}` is {decided}, so the expression picks `{picked}` there and "
            f"`{alternative}`, the NPU implementation, elsewhere: the branches are swapped",
        )
        return True

    def _tables(self) -> None:
        """The NPU default table (``{"x_implementation": "npu", ...}``) mapping a field to eager although the tree
        registers an NPU kernel for the field's op."""
        rows = [
            r for r in (*self.ctx.project.registered, *self.ctx.project.slot_rows) if r.requirement == NPU
        ]
        if not rows:
            return
        for stmt in self.ctx.tree.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
            if isinstance(stmt, ast.AnnAssign):
                target = stmt.target
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict) or not value.keys:
                continue
            if not _is_fallback_table(target.id, value) or "default" not in target.id.lower():
                continue
            for key, val in zip(value.keys, value.values, strict=False):
                field = str_value(key) if key is not None else None
                if field is None or not field.endswith("_implementation") or not _eager(val):
                    continue
                ops = field_ops(field)
                npu_rows = sorted({f"{r.op}/{r.variant}/{r.impl}" for r in rows if r.op in ops})
                if not npu_rows:
                    continue
                self.report(
                    val,
                    f"the NPU default table `{target.id}` maps `{field}` to `'eager'`, but the tree registers NPU "
                    f"kernels for it ({', '.join(npu_rows[:3])}): every Ascend run with a default config "
                    "silently uses the eager path; map it to the NPU implementation name",
                )

    @staticmethod
    def _eager_path(
        node: ast.If | ast.IfExp,
        decided: bool,
        host: NpuHost | None = None,
        env: dict[str, HostValue] | None = None,
    ) -> str | None:
        if isinstance(node, ast.IfExp):
            chosen = node.body if decided else node.orelse
            return "is `'eager'`" if _eager(chosen) else None
        block = node.body if decided else node.orelse
        for stmt in block:
            if isinstance(stmt, ast.Assign) and _eager(stmt.value):
                return f"sets `{ast.unparse(stmt.targets[0])}` to `'eager'`"
            if isinstance(stmt, ast.Assign) and (defaulted := _defaulted_eager(stmt.value, host, env)):
                return f"sets `{ast.unparse(stmt.targets[0])}` to `'eager'` in every call that leaves out {defaulted}"
            if isinstance(stmt, ast.Return):
                if _eager(stmt.value):
                    return "returns `'eager'`"
                defaulted = _defaulted_eager(stmt.value, host, env)
                if defaulted:
                    return f"returns `'eager'` to every call that leaves out {defaulted}"
                if (
                    stmt.value is None or (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
                ) and (_names_eager(node.test)):
                    return "returns no kernel (the eager path)"
            if isinstance(stmt, ast.Continue) and _names_eager(node.test):
                return "skips the binding like eager"
        return None

    @staticmethod
    def _reason(test: ast.expr, env: dict[str, HostValue], host: NpuHost) -> str:
        for sub in ast.walk(test):
            if isinstance(sub, (ast.Name, ast.Attribute, ast.Call)):
                got = host.value(sub, env) if not isinstance(sub, ast.Call) else HostValue(None)
                if got.npu and got.value is not None:
                    shown = "its NPU name" if got.value == NPU_NAME else f"`{got.value}`"
                    return f"`{ast.unparse(sub)}` holds the implementation name, {shown} on Ascend"
        return "NPU availability is true there, CUDA availability false"
