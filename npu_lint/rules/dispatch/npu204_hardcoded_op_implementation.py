"""NPU204 hardcoded-op-implementation."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules._handles import (
    ATTENTION_FIELDS,
    IMPL_RESOLVERS,
    INSTANCE_HANDLES,
    ROW_RESOLVERS,
    call_arg,
    call_name,
    field_of,
    impl_argument,
    local_value,
    module_handle_names,
    op_fields,
    post_import_blocks,
    registry_read,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.veomni.catalog import CONFIG_FIELD_TO_OP
from npu_lint.veomni.resolvers import wrapped_field

_CHECKED = INSTANCE_HANDLES | ROW_RESOLVERS  # VeomniOp(...), VeomniKernel(...), resolve_op(...), ...


class HardcodedOpImplementation(Rule):
    code = "NPU204"
    name = "hardcoded-op-implementation"
    summary = (
        'An operator implementation is a literal (other than "eager") or read from the wrong config field.'
    )
    why = (
        "The implementation of a VeomniOp handle is the user's choice, made in the ops config: "
        '`resolve_op_impl("rms_norm_implementation")` ("eager" when no config is installed) or '
        '`config.ops_config.rms_norm_implementation`. A literal such as "liger_kernel" pins a GPU kernel on '
        "every device (on an NPU host the handle raises at construction), and a field of another op "
        '(`rope` reading `rms_norm_implementation`) silently follows the wrong switch. "eager" is the one '
        "literal that is always valid."
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyRMSNorm:
                def __init__(self):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "liger_kernel")
            """,
            fixed="""
            from veomni.models_kernel.utils.op_utils import resolve_op_impl
            from veomni.ops import VeomniOp


            class ToyRMSNorm:
                def __init__(self):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
            """,
            title="a literal implementation",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.utils.import_utils import is_torch_npu_available

            _ROPE_IMPL = "npu" if is_torch_npu_available() else "liger_kernel"


            class ToyAttention:
                def __init__(self):
                    self.veomni_rope = VeomniOp("rope", "full", _ROPE_IMPL)
            """,
            title="literals chosen by device in a module constant",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRotary:
                def __init__(self):
                    self.veomni_rope = VeomniOp("rope", "full", resolve_op_impl("rms_norm_implementation"))
            """,
            title="the wrong config field (rope has two fields: no automatic fix)",
        ),
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyMLP:
                def __init__(self, config):
                    impl = config.ops_config.rms_norm_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", impl)
            """,
            fixed="""
            from veomni.ops import VeomniOp


            class ToyMLP:
                def __init__(self, config):
                    impl = config.ops_config.swiglu_mlp_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", impl)
            """,
            title="the wrong field, through a local variable",
        ),
        Example(
            """
            from veomni.ops.kernel_registry import KERNEL_REGISTRY as _KERNELS


            class ToyShortConv:
                def __init__(self, config):
                    conv_impl = "fla"
                    self.conv_fn = _KERNELS.resolve("short_conv", "standard", conv_impl)
            """,
            title="a kernel read from the registry object by a literal name (through a local)",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyModel:
                def __init__(self, config):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))
                    self.veomni_rope = VeomniOp("rope", "full", "eager")
                    self.veomni_attn = VeomniOp("attention", "standard", config._attn_implementation)
                    impl = config.ops_config.moe_implementation if config is not None else "eager"
                    self.veomni_moe = VeomniOp("moe_experts", "standard", impl)
            """
        ),
    )
    fix_safety = (
        "Unsafe (the implementation then follows the ops config, whose default may differ from the literal): a "
        'literal becomes `resolve_op_impl("<field>")` of the op\'s config field, and a wrong field is replaced '
        "by the op's field. No fix when the op has several fields (`rope`: `rotary_pos_emb_implementation` or "
        "`rotary_pos_emb_vision_implementation`) or none."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if (
            not any(word in text for word in (*_CHECKED, *IMPL_RESOLVERS))
            and ".bind(" not in text
            and "_REGISTRY" not in text  # KERNEL_REGISTRY.resolve(...) (an alias is imported by that name)
        ):
            self.node_types = ()  # only handle constructors (VeomniOp(...), resolve_op(...), ...) are checked

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        name = call_name(node)
        if name in IMPL_RESOLVERS:
            self._unmapped_npu_name(node, name)
            return
        if name == "bind":
            self._slot_binding(node)
            return
        if name not in _CHECKED and not (name == "resolve" and registry_read(node, self.ctx)):
            return  # a handle constructor, a row resolver, or a read of the kernel registry object
        op = str_value(call_arg(node, 0, "op"))
        impl = impl_argument(node)
        if op is None or impl is None:
            return
        self._check(node, op, impl, impl, depth=0)

    def _unmapped_npu_name(self, call: ast.Call, resolver: str) -> None:
        """``resolve_op_impl(field)`` without ``npu_as`` where the tree's specs read the same field with
        ``npu_as=...`` and the field's op has no row named by the config's NPU name: on an NPU host the handle
        asks for a row nobody registered."""
        if any(k.arg == "npu_as" for k in call.keywords):
            return
        field = str_value(call_arg(call, 0, "field"))
        project = self.ctx.project
        remaps = [(value, at) for r, f, value, at in project.npu_remaps if r == resolver and f == field]
        if field is None or not remaps:
            return
        op = CONFIG_FIELD_TO_OP.get(field)
        rows = project.rows_for(op) if op else []
        if not rows or any(r.impl == "npu" for r in rows):
            return  # the NPU name has a row: the remap is a choice, not a necessity
        if self._remapped_by_hand(call):
            return
        values = sorted({value for value, _at in remaps})
        implementations = ", ".join(sorted({r.impl for r in rows}))
        self.report(
            call,
            f'`{resolver}("{field}")` without `npu_as` returns the config\'s NPU name `npu` unchanged, and `{op}` has no `npu` row '
            f"({implementations}, per {project.rows_origin}); the tree's specs read this field with "
            f'`npu_as="{values[0]}"` ({len(remaps)} reads, e.g. {remaps[0][1]}): add it',
        )

    def _remapped_by_hand(self, call: ast.Call) -> bool:
        """The resolved name is stored in a local that the same scope then compares with the NPU name
        (``impl = resolve_op_impl(field)`` then ``if impl == "npu": impl = ...``): the remap is written out."""
        scope = self.ctx.function if self.ctx.function is not None else self.ctx.tree
        names = {
            target.id
            for node in nodes_of(scope, ast.Assign)
            if node.value is call
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        if not names:
            return False
        for compare in nodes_of(scope, ast.Compare):
            sides = [compare.left, *compare.comparators]
            named = any(isinstance(side, ast.Name) and side.id in names for side in sides)
            if named and any("npu" in _literals(side) for side in sides):
                return True
        return False

    def _module_constant(self, op: str, name: ast.Name) -> None:
        """A module-level name bound once to literals (``_IMPL = "liger_kernel"``, ``_IMPL = "npu" if
        is_torch_npu_available() else "liger_kernel"``): the handle is pinned the same way, one step away."""
        func = self.ctx.function
        if func is not None:
            args = func.args
            params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
            params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            stored = {
                sub.id
                for sub in ast.walk(func)
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)
            }
            if name.id in params | stored:
                return  # a parameter or a local of the function, not the module constant
        bindings = [
            stmt
            for stmt in self.ctx.tree.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and any(
                isinstance(t, ast.Name) and t.id == name.id
                for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            )
        ]
        if len(bindings) != 1 or bindings[0].value is None:
            return
        value = bindings[0].value
        if self._environment_read(value) is not None:
            fields = op_fields(op, self.ctx.project.api)
            self._report_environment(op, value, self._environment_read(value), fields, name)  # type: ignore[arg-type]
            return
        branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        literals = [str_value(b) for b in branches]
        if any(lit is None for lit in literals):
            return
        pinned = sorted({lit for lit in literals if lit and lit != "eager"})
        if not pinned:
            return
        fields = op_fields(op, self.ctx.project.api)
        resolver = self.ctx.project.api.resolver
        where = (
            f'`{resolver}("{fields[0]}")`'
            if len(fields) == 1 and resolver
            else f"the op's ops-config field{f' `{fields[0]}`' if len(fields) == 1 else ''}"
        )
        shown = " / ".join(f'"{lit}"' for lit in pinned)
        self.report(
            name,
            f"hard-coded implementation {shown} for op `{op}` through the module constant `{name.id}` (line "
            f"{bindings[0].lineno}): take it from the ops config ({where}) in the owning class's `__init__`; "
            '"eager" is the only literal allowed',
        )

    @staticmethod
    def _literal_fallback(impl: ast.expr) -> tuple[ast.expr, str] | None:
        """``getattr(cfg, "moe_implementation", "fused_quack")``, ``cfg.get("...", "liger_kernel")``,
        ``cfg.moe_implementation or "fused_triton"``: a configured value with a literal (non-eager) fallback."""
        default: ast.expr | None = None
        if isinstance(impl, ast.Call):
            name = call_name(impl) or ""  # `_handles.call_name` without a context: the callee's last name
            if name == "getattr" and len(impl.args) == 3:
                default = impl.args[2]
            elif name in ("get", "pop") and isinstance(impl.func, ast.Attribute) and len(impl.args) == 2:
                default = impl.args[1]
        elif isinstance(impl, ast.BoolOp) and isinstance(impl.op, ast.Or):
            default = impl.values[-1]
        literal = str_value(default) if default is not None else None
        if default is None or literal is None or literal == "eager":
            return None
        return default, literal

    def _slot_binding(self, call: ast.Call) -> None:
        """``veomni_rms_norm.bind("liger_kernel")`` / ``.bind(os.environ.get(...))`` on a module-global OpSlot:
        the OpSlot generation's binding, chosen in model code instead of from the ops config."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and call.args):
            return
        slot = func.value.id
        if slot not in module_handle_names(self.ctx):
            return
        op = None
        for body in (self.ctx.tree.body, *(b.tree.body for b in post_import_blocks(self.ctx))):
            for stmt in body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == slot for t in stmt.targets)
                    and isinstance(stmt.value, ast.Call)
                ):
                    op = str_value(call_arg(stmt.value, 0, "op_name"))
        if op is None:
            return
        impl = call.args[0]
        if isinstance(impl, ast.Name):
            value = local_value(self.ctx, impl)
            impl = value if value is not None else impl
        env = self._environment_read(impl)
        fields = op_fields(op, self.ctx.project.api)
        if env is not None:
            self._report_environment(op, impl, env, fields, call.args[0])
            return
        literal = str_value(impl)
        if literal is None or literal == "eager":
            return
        where = f"the ops-config field `{fields[0]}`" if len(fields) == 1 else "the ops config"
        self.report(
            call.args[0],
            f'hard-coded implementation "{literal}" bound to the OpSlot `{slot}` (op `{op}`): bind it from '
            f'{where} (the tree\'s ops-config binding); "eager" is the only literal allowed',
        )

    def _environment_read(self, node: ast.expr) -> ast.Call | ast.Subscript | None:
        """``os.environ.get(K[, D])`` / ``os.getenv(K[, D])`` / ``os.environ[K]`` / ``os.environ.setdefault(...)``,
        possibly normalised (``.lower()``, ``.strip()``, ``str(...)``): an implementation chosen by the process
        environment."""
        ctx = self.ctx
        while True:
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("lower", "strip", "upper", "casefold")
            ):
                node = node.func.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "str"
                and node.args
            ):
                node = node.args[0]
            else:
                break
        if isinstance(node, ast.Subscript):
            return node if ctx.qualname(node.value) == "os.environ" else None
        if isinstance(node, ast.Call):
            qual = ctx.qualname(node.func) or ""
            if qual == "os.getenv":
                return node
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault", "pop")
                and ctx.qualname(node.func.value) == "os.environ"
            ):
                return node
        return None

    def _report_environment(
        self, op: str, impl: ast.expr, env: ast.Call | ast.Subscript, fields: list[str], at: ast.expr
    ) -> None:
        ctx = self.ctx
        api = ctx.project.api
        resolver, module = api.resolver, api.resolver_module
        args = env.args if isinstance(env, ast.Call) else [env.slice]
        variable = str_value(args[0]) if args else None
        default = str_value(args[1]) if isinstance(env, ast.Call) and len(args) > 1 else None
        var = f"`{variable}`" if variable else f"`{ctx.source.segment(env)}`"
        where = (
            f'`{resolver}("{fields[0]}")`'
            if len(fields) == 1 and resolver
            else f"the op's ops-config field{f' `{fields[0]}`' if len(fields) == 1 else ''}"
        )
        tail = ""
        if default is not None and default != "eager":
            tail = f'; its default "{default}" is bound on every device where the variable is unset'
        fix = None
        if len(fields) == 1 and op != "attention" and resolver and module and at is impl:
            edits = [ctx.replace(impl, f'{resolver}("{fields[0]}")')]
            if resolver not in ctx.imports:
                edits.extend(ctx.import_edits(module, resolver))
            fix = make_fix(
                f'Read the implementation from the ops config: `{resolver}("{fields[0]}")`',
                edits,
                Applicability.UNSAFE,
                f"the implementation then follows the ops config instead of the environment variable {var}",
            )
        self.report(
            at,
            f"op `{op}` takes its implementation from the environment variable {var}, outside the ops config "
            f"(which selects and validates the row per device){tail}: take it from the ops config ({where})",
            fix,
        )

    def _check(self, call: ast.Call, op: str, impl: ast.expr, at: ast.expr, depth: int) -> None:
        ctx = self.ctx
        fields = op_fields(op, ctx.project.api)
        if isinstance(impl, ast.IfExp):
            for branch in (impl.body, impl.orelse):
                self._check(call, op, branch, branch, depth)
            return
        if isinstance(impl, ast.Name) and depth == 0:
            value = local_value(ctx, impl)
            if value is not None:
                self._check(call, op, value, value, depth + 1)
                return
            self._module_constant(op, impl)
            return
        env = self._environment_read(impl)
        if env is not None:
            self._report_environment(op, impl, env, fields, at if depth == 0 else impl)
            return
        literal = str_value(impl)
        if literal is not None:
            if literal == "eager":
                return
            fix = None
            api = ctx.project.api  # the tree's resolver and the module defining it
            resolver, module = api.resolver, api.resolver_module
            if len(fields) == 1 and op != "attention" and resolver and module:
                edits = [ctx.replace(impl, f'{resolver}("{fields[0]}")')]
                if resolver not in ctx.imports:
                    edits.extend(ctx.import_edits(module, resolver))
                fix = make_fix(
                    f'Read the implementation from the ops config: `{resolver}("{fields[0]}")`',
                    edits,
                    Applicability.UNSAFE,
                    f'the implementation then follows the ops config instead of always being "{literal}"',
                )
            where = (
                f'`{resolver}("{fields[0]}")`'
                if len(fields) == 1 and resolver
                else f"the op's ops-config field{f' `{fields[0]}`' if len(fields) == 1 else ''}"
            )
            self.report(
                impl,
                f'hard-coded implementation "{literal}" for op `{op}`: take it from the ops config ({where}); '
                '"eager" is the only literal allowed',
                fix,
            )
            return
        fallback = self._literal_fallback(impl)
        if fallback is not None:
            node, literal = fallback
            where = (
                f'`{ctx.project.api.resolver}("{fields[0]}")`'
                if len(fields) == 1 and ctx.project.api.resolver
                else f"the op's ops-config field{f' `{fields[0]}`' if len(fields) == 1 else ''}"
            )
            self.report(
                node,
                f'op `{op}` falls back to the hard-coded implementation "{literal}" when the config has no value: '
                f"that row is bound on every device, NPU included; take the implementation from the ops config "
                f'({where}), whose default is device-aware; "eager" is the only literal allowed',
            )
            return
        found = field_of(impl)
        if found is None:
            self._wrapped_resolver(op, impl, at if depth == 0 else impl, fields)
            return
        name, holder = found
        if op == "attention":
            if name in ATTENTION_FIELDS:
                return
        elif name in fields:
            return
        if name not in CONFIG_FIELD_TO_OP and name not in ATTENTION_FIELDS:
            if not name.endswith("_implementation"):
                return
        owner = "attention" if name in ATTENTION_FIELDS else CONFIG_FIELD_TO_OP.get(name, "no op")
        expected = ", ".join(f"`{f}`" for f in fields) or "(none in the catalog)"
        fix = None
        attribute_ok = isinstance(holder, ast.Constant) or (
            isinstance(holder, ast.Attribute)
            and isinstance(holder.value, ast.Attribute)
            and holder.value.attr == "ops_config"
        )
        if len(fields) == 1 and op != "attention" and attribute_ok:
            if isinstance(holder, ast.Constant):
                edit = ctx.replace(holder, f'"{fields[0]}"')
            else:
                assert isinstance(holder, ast.Attribute)
                start, end = ctx.source.node_range(holder)
                edit = Edit(end - len(holder.attr), end, fields[0])
            fix = make_fix(
                f"Read `{fields[0]}`",
                [edit],
                Applicability.UNSAFE,
                "the handle then follows another config switch",
            )
        self.report(
            at if depth == 0 else holder,
            f"op `{op}` reads the implementation from `{name}` (the field of {owner}); its field is {expected}",
            fix,
        )

    def _wrapped_resolver(
        self, op: str, impl: ast.expr, at: ast.expr, fields: tuple[str, ...] | list[str]
    ) -> None:
        """``VeomniOp("load_balancing_loss", ..., resolve_moe_impl())``: a zero-argument resolver of the tree that
        reads another op's field (its body is the reference)."""
        if not isinstance(impl, ast.Call) or impl.args or impl.keywords or op == "attention" or not fields:
            return
        index = self.ctx.project.api.index
        qual = self.ctx.qualname(impl.func)
        if index is None or not qual or "." not in qual:
            return
        module, name = qual.rsplit(".", 1)
        field = wrapped_field(index, module, name)
        if field is None or field in fields or field not in CONFIG_FIELD_TO_OP:
            return
        expected = ", ".join(f"`{f}`" for f in fields)
        self.report(
            at,
            f"op `{op}` reads the implementation from `{ast.unparse(impl)}`, which resolves `{field}` (the field of "
            f"{CONFIG_FIELD_TO_OP[field]}); its field is {expected}: the handle asks for a row named after another "
            "op's kernel (a KeyError, or the wrong kernel)",
        )


def _literals(node: ast.expr) -> set[str | None]:
    """The string values of a literal, or of the elements of a tuple, list or set display (``impl in ("npu", ...)``)."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {str_value(elt) for elt in elts}
