"""What a file dispatches and where (stdlib ``ast`` over the original text).

:class:`Analyzer` reads one spec or module into a :class:`~npu_lint.fixers.dispatch.plan.Plan`: its slots, the
functions and methods that test or call them and the class whose ``self`` each one is, free functions whose slot
call must be inlined into their callers (in the spec, in ``self``-taking helpers, or upstream), kernel and
gated-norm attributes built from a slot in ``__init__``, MoE calls, and what an NPU sibling inherits from its GPU
spec. Anything it cannot migrate exactly is recorded with ``Plan.fail``.
"""

from __future__ import annotations

import ast
import re
import textwrap

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.safeio import read_text
from npu_lint.fixers.dispatch.owners import HandleOwners
from npu_lint.fixers.dispatch.plan import (
    CE_LOSS,
    CONFIG_SLOT,
    GUARD_ATTR,
    KERNEL_CONTRACTS,
    MOE_CONTRACTS,
    MOE_MODULE_CONTRACTS,
    FnInfo,
    FreeFn,
    Names,
    Plan,
    Slot,
)
from npu_lint.fixers.dispatch.spec import (
    base_original,
    base_spec_import,
    const_str,
    decorator_target,
    guard_slot,
    is_offset_weight,
    post_import_block_text,
    registered_functions,
    rename_def,
    slots_in,
    snake_case,
    unsupported_case,
    walk_fn,
)
from npu_lint.fixers.dispatch.vendor import vendor_prepass


class Analyzer(HandleOwners):
    def __init__(self, tree: ast.Module, text: str, path: str, spec: bool, names: Names) -> None:
        self.tree = tree
        self.text = text
        self.path = path
        self.base_migrated = False  # the spec whose functions this one reuses no longer has OpSlot dispatch
        self.plan = Plan(spec=spec, names=names)

    # -- collection ---------------------------------------------------------------------------------
    def run(self) -> Plan:
        plan = self.plan
        tree = self.tree
        if plan.spec:
            for stmt in tree.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Call)
                    and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
                    and isinstance(stmt.targets[0], ast.Name)
                ):
                    plan.config_name = stmt.targets[0].id
                    for kw in stmt.value.keywords:
                        if kw.arg == "source_module":
                            plan.source_module = const_str(kw.value)
        for slot in slots_in(tree.body):
            plan.slots[slot.name] = slot
        for stmt in tree.body:
            block = post_import_block_text(stmt, plan.config_name)
            if block is not None and ("OpSlot" in block or "OpsConfigSlot" in block):
                try:
                    inner = ast.parse(textwrap.dedent(block))
                except SyntaxError:
                    plan.fail("a post-import block with OpSlot declarations does not parse")
                    continue
                for slot in slots_in(inner.body):
                    plan.slots[slot.name] = slot
        if not plan.slots:
            return plan
        self._collect_functions()
        self._inherit_from_gpu_sibling()
        self._analyse_free_functions()
        self._analyse_uses()
        self._kernel_and_module_users()
        self._plan_attention()
        self._plan_inits()
        for name, free in plan.free.items():
            if not plan.free_callers.get(name):
                where = "upstream or in this spec" if plan.spec else "in this module (callers elsewhere?)"
                plan.fail(
                    f"`{free.key}` uses `{free.slot.name}` but no method calls `{name}` {where}: "
                    "there is no class to own the handle"
                )
        used = {h.attr for per in plan.handles.values() for h in per.values()} | {
            f.slot.name for f in plan.free.values()
        }
        unused = sorted(set(plan.slots) - used - plan.guarded)
        served = sorted(set(unused) & plan.gpu_slot_users)
        if served:
            # an NPU sibling declares slots for the GPU spec's patch functions it re-registers: the declarations go,
            # and the GPU spec's new __init__ overrides are re-registered here (sibling_registrations)
            plan.note(
                f"slot(s) {', '.join(served)} were declared here for the GPU spec's patch functions this spec "
                "re-registers: the declarations go, the GPU spec's handle-building __init__ overrides are re-registered"
            )
            unused = sorted(set(unused) - set(served))
        if unused and self.base_migrated:
            plan.fail(
                f"slot(s) {', '.join(unused)} serve the patch functions this spec reuses from a spec that was migrated "
                "without it: migrate both from their OpSlot-era text in the same change (one `check --fix` run, or "
                "`migrate`)"
            )
        elif unused:
            plan.fail(
                f"slot(s) {', '.join(unused)} are declared here but no function of this file uses them (patch "
                "functions imported from another spec?): migrate the spec that uses them and re-register its new "
                "__init__ overrides here"
            )
        return plan

    def _collect_functions(self) -> None:
        plan = self.plan
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dec = decorator_target(stmt, plan.config_name) if plan.spec else None
                params = [a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args)]
                if dec and dec[0] == "override_method" and "." in dec[1]:
                    owner = dec[1].split(".")[0]
                    plan.functions[stmt.name] = FnInfo(stmt.name, stmt, owner, "method", dec[1])
                elif dec and dec[0] == "replace_function":
                    plan.functions[stmt.name] = FnInfo(
                        stmt.name, stmt, None, "free", dec[1], dec[1] or stmt.name
                    )
                elif params[:1] == ["self"]:
                    plan.functions[stmt.name] = FnInfo(
                        stmt.name, stmt, None, "helper", dec[1] if dec else None
                    )
                else:
                    plan.functions[stmt.name] = FnInfo(stmt.name, stmt, None, "free", None, stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                dec = decorator_target(stmt, plan.config_name) if plan.spec else None
                cls_name = dec[1] if dec and dec[0] == "replace_class" and dec[1] else stmt.name
                for item in stmt.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        key = f"{stmt.name}.{item.name}"
                        plan.functions[key] = FnInfo(key, item, cls_name, "method", None)

    def _inherit_from_gpu_sibling(self) -> None:
        """An NPU sibling that imports its GPU spec's patch functions: the GPU spec's migration builds the handles
        of the classes whose ``__init__`` this spec registers from it, and its kernel / gated-norm attributes become
        handles, so this spec's own methods that call those attributes are rewritten the same way."""
        plan = self.plan
        if not plan.spec:
            return
        found_base = base_spec_import(self.tree, self.path)
        if found_base is None:
            return
        gpu, gpu_path = found_base
        try:
            gpu_text = base_original(gpu_path, read_text(gpu_path))
        except (OSError, ValueError):
            return
        self.base_migrated = not re.search(r"\bOpSlot\(", gpu_text)
        try:
            gpu_text, _, _ = vendor_prepass(gpu_text, gpu_path)
            gpu_plan = Analyzer(ast.parse(gpu_text), gpu_text, gpu_path, True, plan.names).run()
        except Exception:  # noqa: BLE001 - the sibling is then analysed on its own
            return
        if gpu_plan.display:
            return
        imported = {a.asname or a.name: a.name for a in gpu.names}
        registered = registered_functions(self.tree, plan.config_name)
        init_owner = {
            key: cls for cls, key in gpu_plan.init_keys.items()
        }  # base spec __init__ fn -> its class
        class_map: dict[str, str] = {}  # the base spec's class -> this spec's class
        for local, target in registered.items():
            cls, _, meth = target.partition(".")
            base_cls = init_owner.get(imported.get(local, ""))
            if meth == "__init__" and local in imported and (base_cls or cls) in gpu_plan.handles:
                base_cls = base_cls or cls
                plan.gpu_inits[cls] = set(gpu_plan.handles[base_cls])
                class_map[base_cls] = cls
        gpu_users = {imported.get(local, local) for local in registered if local in imported}
        for fn in gpu_plan.functions.values():
            if fn.key in gpu_users:
                plan.gpu_slot_users |= {n.id for n in ast.walk(fn.node) if isinstance(n, ast.Name)} & set(
                    plan.slots
                )
        for per in gpu_plan.handles.values():
            plan.gpu_slot_users |= set(per) & set(plan.slots)
        for (base_cls, attr), slot in gpu_plan.kernel_attrs.items():
            cls = class_map.get(base_cls)
            if cls is not None and slot in plan.slots:
                plan.kernel_attrs[(cls, attr)] = slot
                plan.add_handle(cls, plan.slots[slot])
        for (base_cls, attr), found in gpu_plan.module_attrs.items():
            cls = class_map.get(base_cls)
            if cls is not None and found[0] in plan.slots:
                plan.module_attrs[(cls, attr)] = found
                plan.add_handle(cls, plan.slots[found[0]])

    def _uses(self, fn: FnInfo) -> list[ast.Name]:
        return [n for n in walk_fn(fn.node) if isinstance(n, ast.Name) and n.id in self.plan.slots]

    def _analyse_free_functions(self) -> None:
        plan = self.plan
        for fn in plan.functions.values():
            if fn.kind != "free" or not self._uses(fn):
                continue
            body = list(fn.node.body)
            if body and isinstance(body[0], ast.Expr) and const_str(body[0].value) is not None:
                body = body[1:]
            first = body[0] if body else None
            guard = guard_slot(first.test, plan.slots) if isinstance(first, ast.If) else None
            ok = (
                guard is not None
                and not guard[1]
                and not first.orelse  # type: ignore[union-attr]
                and len(first.body) == 1  # type: ignore[union-attr]
                and isinstance(first.body[0], ast.Return)  # type: ignore[union-attr]
                and isinstance(first.body[0].value, ast.Call)  # type: ignore[union-attr]
                and isinstance(first.body[0].value.func, ast.Name)  # type: ignore[union-attr]
                and first.body[0].value.func.id == guard[0].name  # type: ignore[union-attr]
            )
            rest_uses = [
                n for s in body[1:] for n in ast.walk(s) if isinstance(n, ast.Name) and n.id in plan.slots
            ]
            if not ok or rest_uses:
                plan.fail(
                    f"`{fn.key}` uses a slot in a free function in a shape other than "
                    "`if slot.use_non_eager_impl: return slot(...)` at its top; its callers cannot be rewritten exactly"
                )
                continue
            assert guard is not None
            plan.free[fn.upstream or fn.key] = FreeFn(fn.upstream or fn.key, fn.key, guard[0])
            plan.touched.add(fn.key)

    def _calls_to(self, node: ast.AST, name: str) -> list[ast.Call]:
        return [
            c
            for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name
        ]

    def _helper_owners(self, helper: FnInfo) -> set[str] | None:
        owners: set[str] = set()
        for fn in self.plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            for call in self._calls_to(fn.node, helper.key):
                if not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"):
                    return None
                owners.add(fn.owner)
        return owners or None

    def _fn_owners(self, fn: FnInfo) -> set[str]:
        if fn.key in self.plan.owners:
            return self.plan.owners[fn.key]
        if fn.kind == "method" and fn.owner:
            owners = {fn.owner}
        elif fn.kind == "helper":
            owners = self._helper_owners(fn) or set()
        else:
            owners = set()
        self.plan.owners[fn.key] = owners
        return owners

    def _analyse_uses(self) -> None:
        plan = self.plan
        for fn in plan.functions.values():
            if fn.kind == "free":
                for name, free in plan.free.items():
                    if free.key != fn.key and self._calls_to(fn.node, name):
                        plan.fail(
                            f"module-level function `{fn.key}` calls `{name}`: it has no `self` for the handle"
                        )
                continue  # its own slot use is handled through its callers
            uses = self._uses(fn)
            free_calls = [c for name in plan.free for c in self._calls_to(fn.node, name)]
            if not uses and not free_calls:
                continue
            plan.touched.add(fn.key)
            owners = self._fn_owners(fn)
            if not owners:
                plan.fail(
                    f"`{fn.key}` uses a slot but is neither a method nor a helper called as `helper(self, ...)` "
                    "from methods: there is no `self` to own the handle"
                )
                continue
            for owner in sorted(owners):
                self._record_uses(fn, owner)
        self._upstream_callers()

    def _record_uses(self, fn: FnInfo, owner: str) -> None:
        plan = self.plan
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(fn.node):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(fn.node):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in plan.free:
                plan.free_callers[node.func.id] = plan.free_callers.get(node.func.id, 0) + 1
                plan.add_handle(owner, plan.free[node.func.id].slot)
                if any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                ):
                    plan.fail(
                        f"`{fn.key}` calls `{node.func.id}` with *args/**kwargs: cannot inline the op call"
                    )
            if not (isinstance(node, ast.Name) and node.id in plan.slots):
                continue
            slot = plan.slots[node.id]
            parent = parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr == GUARD_ATTR:
                continue  # a guard; handled by the rewrite
            if (
                isinstance(parent, ast.Attribute)
                and parent.attr == "use_eager_impl"
                and slot.op == "moe_experts"
                and plan.names.moe_resolver
            ):
                continue  # `if not slot.use_eager_impl: raise`: a handle always has a row; goes with the fallback
            if isinstance(parent, ast.Call) and parent.func is node:
                self._record_call(fn, owner, slot, parent)
                continue
            if slot.op == CONFIG_SLOT:
                if isinstance(parent, ast.Attribute) and parent.attr == "value":
                    plan.add_handle(owner, slot)
                else:
                    plan.add_handle(owner, slot)
                    plan.fail(f"`{fn.key}` uses the OpsConfigSlot `{slot.name}` other than through `.value`")
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "bound_kernel":
                attr = self._kernel_alias(fn, parents, parent)
                if attr is not None and slot.op in KERNEL_CONTRACTS:
                    plan.add_handle(owner, slot)
                    plan.kernel_attrs[(owner, attr)] = slot.name
                    continue
                plan.add_handle(owner, slot)
                plan.fail(
                    f"`{fn.key}` freezes `{slot.name}.bound_kernel()` (None for eager); a VeomniOp handle is always "
                    "callable, so code that tests the kernel for None changes behaviour: review by hand"
                )
                continue
            plan.add_handle(owner, slot)
            plan.fail(
                f"`{fn.key}` uses `{slot.name}` as a value, not in a call or guard: cannot translate it"
            )
        for node in ast.walk(fn.node):
            guard = guard_slot(node.test, plan.slots) if isinstance(node, ast.If) else None
            if guard is not None:
                plan.guarded.add(guard[0].name)
                fused = node.orelse if guard[1] else node.body
                calls = {
                    c.func.id
                    for stmt in fused
                    for c in ast.walk(stmt)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                }
                if (
                    guard[0].name not in calls
                    and not any(plan.free[f].slot == guard[0] for f in calls if f in plan.free)
                    and not self._moe_keyword_call(fn, owner, guard[0], fused, guard[1])
                ):
                    plan.fail(
                        f"`{fn.key}` tests `{guard[0].name}.{GUARD_ATTR}` but its branch does not call the slot; "
                        "a VeomniOp handle has no such flag: choose the implementation by hand"
                    )
            if isinstance(node, ast.If) and guard_slot(node.test, plan.slots):
                guard_info = guard_slot(node.test, plan.slots)
                body = list(node.body)
                if guard_info and not guard_info[1] and node.orelse and unsupported_case(body[0]):
                    # `if slot: if C: raise ...` with an eager else: C takes the eager path (upstream's shape)
                    body = body[1:]
                for stmt in body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Raise):
                            plan.fail(
                                f"`{fn.key}`: the guarded branch of `{guard_slot(node.test, plan.slots)[0].name}` "  # type: ignore[index]
                                "raises where the eager fallback did not; made unconditional, that error would "
                                "hit every implementation"
                            )

    def _moe_keyword_call(
        self, fn: FnInfo, owner: str, slot: Slot, fused: list[ast.stmt], negated: bool
    ) -> bool:
        """``if slot.use_non_eager_impl: return fused_fn(<the op's keywords>)``: the handle, called with them."""
        plan = self.plan
        if (
            negated
            or slot.op != "moe_experts"
            or not plan.names.moe_resolver
            or slot.variant not in MOE_CONTRACTS
        ):
            return False
        positional, keywords = MOE_CONTRACTS[slot.variant]
        if not (
            len(fused) == 1 and isinstance(fused[0], ast.Return) and isinstance(fused[0].value, ast.Call)
        ):
            return False
        call = fused[0].value
        if not isinstance(call.func, ast.Name) or call.args:
            return False
        given = {k.arg for k in call.keywords}
        if None in given or not given <= {*positional, *keywords} or positional[0] not in given:
            return False
        if any(
            isinstance(k.value, ast.Constant) and k.value.value is None and k.arg in keywords
            for k in call.keywords
        ):
            return False
        if any(isinstance(k.value, ast.Constant) and k.value.value is None for k in call.keywords):
            if not plan.names.empty_bias:
                return False
            weights = [
                k
                for k in call.keywords
                if k.arg.endswith("_weight") and not isinstance(k.value, ast.Constant)
            ]
            if not weights:
                return False
        plan.moe_calls[(fn.key, call.func.id)] = slot.name
        plan.moe_fns.add(fn.key)
        plan.add_handle(owner, slot)
        return True

    def _kernel_and_module_users(self) -> None:
        """Methods of a class whose bound-kernel / gated-norm attributes became handles are rewritten too."""
        plan = self.plan
        attrs = {*plan.kernel_attrs, *plan.module_attrs}
        if not attrs:
            return
        for fn in plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            used = {
                n.attr
                for n in ast.walk(fn.node)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            if any(owner == fn.owner and attr in used for owner, attr in attrs):
                plan.touched.add(fn.key)
                plan.owners.setdefault(fn.key, set()).add(fn.owner)

    def _kernel_alias(
        self, fn: FnInfo, parents: dict[ast.AST, ast.AST], attribute: ast.Attribute
    ) -> str | None:
        """``self.<attr> = slot.bound_kernel() [or fallback]`` in an ``__init__``: the attr."""
        if not (fn.node.name == "__init__" or (fn.target or "").endswith(".__init__")):
            return None
        call = parents.get(attribute)
        node = parents.get(call) if isinstance(call, ast.Call) else None
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and node.values[0] is call:
            node = parents.get(node)
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.targets[0].value, ast.Name)
            and node.targets[0].value.id == "self"
        ):
            return node.targets[0].attr
        return None

    def _gated_norm_module(self, fn: FnInfo, slot: Slot, call: ast.Call) -> str | None:
        """``if slot.use_non_eager_impl: self.<a> = slot(dim, eps=E, activation=A, ...) else: self.<a> =
        Eager(dim, eps=E)`` in an ``__init__`` (a gated RMSNorm module): the attr, recorded with E and A."""
        if slot.op != "rms_norm_gated":
            return None
        for node in ast.walk(fn.node):
            if not (isinstance(node, ast.If) and guard_slot(node.test, self.plan.slots)):
                continue
            body, orelse = node.body, node.orelse
            if not (len(body) == 1 and len(orelse) == 1):
                continue
            fused, eager = body[0], orelse[0]
            if not (isinstance(fused, ast.Assign) and fused.value is call and isinstance(eager, ast.Assign)):
                continue
            t1, t2 = fused.targets[0], eager.targets[0]
            if not (
                isinstance(t1, ast.Attribute)
                and isinstance(t2, ast.Attribute)
                and t1.attr == t2.attr
                and isinstance(t1.value, ast.Name)
                and t1.value.id == "self"
            ):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            if "eps" not in keywords or "activation" not in keywords:
                return None
            eps = ast.get_source_segment(self.text, keywords["eps"])
            activation = ast.get_source_segment(self.text, keywords["activation"])
            if eps is None or activation is None:
                return None
            self.plan.module_attrs[(fn.owner or "", t1.attr)] = (slot.name, eps, activation)
            return t1.attr
        return None

    def _record_call(self, fn: FnInfo, owner: str, slot: Slot, call: ast.Call) -> None:
        plan = self.plan
        if (
            fn.node.name == "__init__" or (fn.target or "").endswith(".__init__")
        ) and self._gated_norm_module(fn, slot, call):
            plan.add_handle(owner, slot)
            return
        variant = None
        if slot.op == "rms_norm":
            weight = (
                call.args[1]
                if len(call.args) > 1
                else next((k.value for k in call.keywords if k.arg in ("weight", "w")), None)
            )
            if weight is not None and is_offset_weight(weight) is not None:
                if slot.variant == "standard":
                    # Gemma: norm(x) * (1 + w) through a standard slot is the offset norm
                    variant = plan.names.offset_variant
                else:
                    plan.fail(f"`{fn.key}` passes `1 + weight` to the {slot.variant} slot `{slot.name}`")
            elif weight is not None and isinstance(weight, ast.Name) and slot.variant == "standard":
                plan.note(
                    f"`{fn.key}` passes the variable `{weight.id}` as the RMSNorm weight of `{slot.name}`; "
                    "kept as the standard variant"
                )
        if slot.op == "swiglu_mlp":
            if not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"):
                plan.fail(f"`{fn.key}` calls the SwiGLU slot without the module as first argument")
            elif not self._has_projections(owner):
                plan.fail(
                    f"`{owner}` has no gate_proj/up_proj/down_proj linears (checked in its __init__): "
                    "cannot spell the VeomniOp swiglu_mlp call"
                )
        if slot.op == "rms_norm":
            positional = [a for a in call.args if not isinstance(a, ast.Starred)]
            if len(positional) > 3 or any(isinstance(a, ast.Starred) for a in call.args):
                plan.fail(f"`{fn.key}` calls the RMSNorm slot `{slot.name}` with an unexpected argument list")
        if slot.op == "moe_experts" and self._moe_module_call(fn, owner, slot, call):
            plan.add_handle(owner, slot)
            return
        if (
            slot.op not in ("swiglu_mlp", "cross_entropy_loss")
            and call.args
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == "self"
        ):
            plan.fail(
                f"`{fn.key}` passes the module itself to `{slot.name}` ({slot.op}); the VeomniOp call contract for "
                f"{slot.op} with a module argument is not known: migrate that call by hand"
            )
        if slot.op == "cross_entropy_loss" and slot.variant not in CE_LOSS:
            plan.fail(f"cross_entropy_loss variant {slot.variant!r} has no loss helper")
        if fn.node.name == "__init__" or (fn.target or "").endswith(".__init__"):
            plan.fail(
                f"`{fn.key}` calls `{slot.name}` inside __init__ (the slot builds a module there); the VeomniOp "
                "handle is a per-tensor op: migrate the module's forward by hand"
            )
        plan.add_handle(owner, slot, variant)

    def _moe_module_call(self, fn: FnInfo, owner: str, slot: Slot, call: ast.Call) -> bool:
        """``slot(self, a, b, c)`` of a MoE kernel that read the module's tensors: the op's contract is known and
        the class builds every attribute it names."""
        plan = self.plan
        contract = MOE_MODULE_CONTRACTS.get(slot.variant)
        if contract is None or not plan.names.moe_resolver or call.keywords:
            return False
        params, positional, keywords = contract
        if not (
            len(call.args) == len(params) + 1
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == "self"
            and not any(isinstance(a, ast.Starred) for a in call.args)
        ):
            return False
        attrs = {p.split("self.", 1)[1] for p in positional if "self." in p} | set(keywords)
        if any(p.startswith("empty:") for p in positional) and not plan.names.empty_bias:
            return False
        if self._has_attrs(owner, {"limit"}) and "limit" not in keywords:
            plan.fail(
                f"`{owner}` has a `limit` (clamped SwiGLU): the moe_experts/{slot.variant} call contract known here "
                "has no place for it; migrate that call by hand"
            )
            return True
        if not self._has_attrs(owner, attrs):
            plan.fail(
                f"`{owner}` does not build {', '.join(sorted(attrs))} in its __init__: cannot spell the "
                f"moe_experts/{slot.variant} call"
            )
            return True
        plan.moe_fns.add(fn.key)
        return True

    def _has_attrs(self, owner: str, needed: set[str]) -> bool:
        init = self.plan.functions.get(f"{owner}.__init__")
        if init is None:
            local = self._local_class(owner)
            init = self.plan.functions.get(f"{local.name}.__init__") if local is not None else None
        if init is None:
            init_key = self._spec_init_key(owner)
            init = self.plan.functions.get(init_key) if init_key else None
        if init is None:
            return False
        attrs = {
            t.attr
            for t in ast.walk(init.node)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        }
        return needed <= attrs

    def _has_projections(self, owner: str) -> bool:
        needed = {"gate_proj", "up_proj", "down_proj"}
        init = self.plan.functions.get(f"{owner}.__init__")
        if init is None:
            init_key = self._spec_init_key(owner)
            init = self.plan.functions.get(init_key) if init_key else None
        if init is not None:
            attrs = {
                t.attr
                for t in ast.walk(init.node)
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            }
            return needed <= attrs
        if self.plan.spec and self.plan.source_module:
            from npu_lint.veomni import upstream

            attrs_up = upstream.self_attributes(self.plan.source_module, owner)
            return attrs_up is not None and needed <= attrs_up
        return False

    def _spec_init_key(self, cls: str) -> str | None:
        for fn in self.plan.functions.values():
            if fn.kind == "method" and fn.target == f"{cls}.__init__":
                return fn.key
        return None

    # -- free-function callers upstream ---------------------------------------------------------------
    def _upstream_callers(self) -> None:
        plan = self.plan
        if not plan.free:
            return
        if not plan.spec:
            return
        if not plan.source_module:
            plan.fail(
                "the spec names no source_module: cannot find the upstream callers of replaced functions"
            )
            return
        from npu_lint.veomni import upstream

        overridden = {fn.target for fn in plan.functions.values() if fn.kind == "method" and fn.target}
        replaced = {fn.upstream for fn in plan.functions.values() if fn.kind == "free" and fn.target}
        for name, free in plan.free.items():
            found = upstream.callers_of(plan.source_module, name)
            if found is None:
                plan.fail(f"cannot read upstream `{plan.source_module}` (transformers not installed?)")
                return
            methods, functions = found
            for func in functions:
                if func not in replaced:
                    plan.fail(
                        f"upstream function `{func}` calls `{name}`; it has no `self` for the handle "
                        "(it keeps the eager body)"
                    )
            for cls, meth in methods:
                target = f"{cls}.{meth}"
                if target in overridden:
                    continue
                src = upstream.method_source(plan.source_module, cls, meth)
                if src is None:
                    plan.fail(f"cannot read upstream `{target}`")
                    continue
                fname = self._fresh_name(f"{snake_case(cls)}_{meth.strip('_')}_patched")
                text = rename_def(src.text, meth, fname)
                self._signature_imports(text)
                op_name = (plan.target(free.slot) or (free.slot.op,))[0]
                desc = f"Call the {op_name} op through self.{free.slot.name}"
                deco = (
                    f'@{plan.config_name}.override_method(\n    "{target}",\n    description="{desc}",\n)\n'
                )
                plan.after.setdefault(free.key, []).append(deco + text)
                key = fname
                plan.functions[key] = FnInfo(key, ast.parse(text).body[0], cls, "method", target)  # type: ignore[arg-type]
                plan.owners[key] = {cls}
                plan.touched.add(key)
                plan.free_callers[name] = plan.free_callers.get(name, 0) + 1
                plan.add_handle(cls, free.slot)
