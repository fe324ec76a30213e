"""NPU201 module-global-dispatch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules._handles import (
    ATTENTION_HELPERS,
    GUARD_ATTRS,
    INSTANCE_HANDLES,
    REGISTRY_OBJECTS,
    ROW_RESOLVERS,
    Block,
    block_of,
    call_arg,
    constructor_kind,
    dispatch_doc,
    handle_name,
    in_function,
    migration_fix,
    migration_needs,
    module_handle_names,
    module_scope_calls,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch._shared import (
    GUARD_NODES,
    GuardFinder,
    cached_slot_reads,
    ops_config_slots,
    summarised,
)
from npu_lint.veomni.profile import BUILTIN_PROFILES


class ModuleGlobalDispatch(Rule):
    code = "NPU201"
    name = "module-global-dispatch"
    summary = "An operator dispatch object (OpSlot, VeomniOp, resolved row) is created at module scope."
    why = (
        'OpSlot-era modeling code declares `veomni_rms_norm = OpSlot("rms_norm", "standard")` at module '
        "scope (usually through a patch spec's `add_post_import_block`). The slot is bound once per process, "
        "so every model built from the module shares one binding: a second model built with another ops config "
        "silently retargets the first. VeOmni's VeomniOp generation gives each model class its own handles, "
        "built in `__init__` from the model's ops config and stored on `self`. Declarations inside a spec's "
        "post-import block are reported at their line inside the string."
        " Names are resolved: an aliased import (`OpSlot as _Slot`), a kernel read from the registry object "
        "(`KERNEL_REGISTRY.resolve(...)`) and a module-global slot stored on `self` where its bound kernel was "
        "meant (`self.fn = slot` instead of `slot.bound_kernel()`, also as one outcome of a conditional or "
        "`or`) are all module-global dispatch. A method that reads a slot's process-wide binding "
        "(`slot.use_non_eager_impl`, `slot.bound_kernel()`) while its instance cached the slot's kernel on `self` "
        "in another method diverges from what the instance runs once another model rebinds the slot. These two "
        "are reported one by one on every tree, the OpSlot generation's included: that generation has the fix "
        "(`bound_kernel()`, or testing the cached kernel)."
        ' On a tree of the OpSlot generation under `target-api = "auto"` this is the tree\'s own design and '
        "nothing there can be migrated (the generation has no instance-local handle API): NPU201 then reports "
        "each spec or generated file once, listing its slots, its guards (NPU203) and its `OpsConfigSlot`s "
        "(NPU207) and what a migration would need on a handle generation, and the run says the generation's "
        'limitation once; `target-api = "veomni-op"` (or a tree that has VeomniOp / VeomniKernel) gives one '
        "finding per declaration, as in the examples."
    )
    bad = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(hidden_states, weight, eps):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, weight, eps)
                return hidden_states * weight
            """,
            title="an OpSlot in model code",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_gpu.py",
            )

            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rotary = OpSlot("rotary_pos_emb", "full")
                """
            )
            ''',
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="an OpSlot declared in a patch spec's post-import block",
        ),
        Example(
            """
            from veomni.ops import VeomniOp

            ROPE = VeomniOp("rope", "full", "eager")
            """,
            title="a VeomniOp handle at import time",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            class ToyMlp:
                def forward(self, x, act=VeomniOp("swiglu_mlp", "standard", resolve_op_impl("swiglu_mlp_implementation"))):
                    return act(x)
            """,
            title="a handle as a method's default argument (built once, when the class body runs)",
        ),
        Example(
            """
            from veomni.ops.dispatch import OpSlot as _Slot
            from veomni.ops.kernel_registry import KERNEL_REGISTRY

            veomni_causal_conv1d = _Slot("causal_conv1d", "standard")
            conv_kernel = KERNEL_REGISTRY.resolve("causal_conv1d", "standard", "triton")


            class ToyGatedDeltaNet:
                def __init__(self):
                    self.causal_conv1d_fn = veomni_causal_conv1d
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="names hide the dispatch: an aliased OpSlot, a registry read, the slot stored on self",
        ),
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_toy_scan = OpSlot("toy_scan", "standard")


            def toy_scan_eager(x):
                return x.cumsum(-1)


            class ToyMixer:
                def __init__(self):
                    self.scan_fn = veomni_toy_scan.bound_kernel() or toy_scan_eager

                def forward(self, x, cu_seqlens=None):
                    if cu_seqlens is not None and not veomni_toy_scan.use_non_eager_impl:
                        raise RuntimeError("packed sequences need the fused scan")
                    return self.scan_fn(x)


            class ToyGate:
                def __init__(self):
                    self.gate_fn = veomni_toy_scan if veomni_toy_scan.is_bound else None
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="a method reads the slot's process-wide binding although the instance cached its kernel; the "
            "slot itself stored as one outcome of a conditional",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl

            _gate_proj_act = None


            class ToyGatedMLP:
                def __init__(self, config):
                    global _gate_proj_act
                    impl = resolve_op_impl("swiglu_mlp_implementation")
                    _gate_proj_act = VeomniOp("swiglu_mlp", "standard", impl) if impl != "eager" else None

                def forward(self, x):
                    return _gate_proj_act(x)
            """,
            title="a handle built in `__init__` but rebound as a module global (`global`)",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
            """
        ),
        Example(
            """
            from veomni.ops.dispatch import OpSlot  # importing the name is not a declaration

            veomni_rms_norm = None  # placeholder in a spec: the slot lives in the generated file
            """
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl

            _built = 0


            class ToyGatedMLP:
                def __init__(self, config):
                    global _built
                    _built += 1
                    self.veomni_act = VeomniOp("swiglu_mlp", "standard", resolve_op_impl("swiglu_mlp_implementation"))
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`): it rewrites the whole spec or model "
        "module to per-instance VeomniOp handles, attached to the first finding of the file. In generated files "
        "it is display-only (fix the spec and regenerate). No fix on an OpSlot-generation tree under "
        '`target-api = "auto"` (the per-file summary says why).'
    )
    node_types = (ast.Call, ast.Assign)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        self.summary = summarised(ctx.project.api)
        # the per-file summary (OpSlot-generation tree): (position, kind, description) of every item
        self.items: list[tuple[tuple[int, int, int, int], str, str]] = []
        self.guards = GuardFinder(ctx) if self.summary else None
        words = (
            "OpSlot",
            *INSTANCE_HANDLES,
            *ROW_RESOLVERS,
            *ATTENTION_HELPERS,
            "bound_kernel",
            "add_post_import_block",
            *REGISTRY_OBJECTS,
        )
        if self.summary:
            words = (*words, "OpsConfigSlot", *GUARD_ATTRS, "_implementation", "_impl")
        if not any(word in text for word in words):
            self.node_types = ()  # every finding names one of these in a call
        elif self.summary:
            self.node_types = (ast.Call, *GUARD_NODES)

    def visit(self, node: ast.AST) -> None:
        if self.guards is not None and isinstance(node, GUARD_NODES):
            self.guards.visit(node)
            if not isinstance(node, (ast.Call, ast.Assign)):
                return
        if isinstance(node, ast.Assign):
            self._slot_on_self(node)
            return
        assert isinstance(node, ast.Call)
        if self.summary:
            for call, block in ops_config_slots(self.ctx, node):
                field = str_value(call_arg(call, 0, "field"))
                shown = f'`OpsConfigSlot("{field}")`' if field else "`OpsConfigSlot(...)`"
                self.items.append((self._position(call, block), "config", shown))
        kind = constructor_kind(node, self.ctx)
        if kind is None and not (
            isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block"
        ):
            return  # the cheap checks first: only module-scope calls of these names matter
        owner = _def_time_owner(self.ctx, node)
        if in_function(self.ctx) and owner is None:
            rebound = _global_rebinding(self.ctx, node) if kind is not None else None
            if rebound is not None:  # `global h` then `h = VeomniOp(...)` in a method: a module global again
                self._report(node, kind, None, rebound=rebound)  # type: ignore[arg-type]
            return
        if kind is not None:
            self._report(node, kind, None, owner)
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block":
            block = block_of(self.ctx, node)
            if block is None:
                return
            for call in sorted(module_scope_calls(block.tree), key=lambda c: (c.lineno, c.col_offset)):
                kind = constructor_kind(call, self.ctx)
                if kind is not None:
                    self._report(call, kind, block)

    def _position(self, node: ast.AST, block: Block | None) -> tuple[int, int, int, int]:
        if block is not None and isinstance(node, ast.Call):
            return block.position(node)
        src = self.ctx.source
        line, end_line = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
        return (
            line,
            src.char_col(line, node.col_offset),  # type: ignore[attr-defined]
            end_line,
            src.char_col(end_line, node.end_col_offset or 0),  # type: ignore[attr-defined]
        )

    def finish(self) -> None:
        for read, slot, attr, method in cached_slot_reads(self.ctx):
            what = self.ctx.source.segment(read)
            self.report(
                read,
                f"`{what}` reads the process-wide binding of the module-global slot `{slot}`, but this instance "
                f"cached its kernel in `self.{attr}` (in `{method}`): once another model rebinds `{slot}` the two "
                f"disagree; test `self.{attr}` instead",
            )
        if self.guards is not None:
            for node, what in self.guards.found():
                self.items.append((self._position(node, None), "guard", what))
        if not self.items:
            return
        self.items.sort()
        slots = [d for _p, k, d in self.items if k == "slot"]
        guards = [(p[0], d) for p, k, d in self.items if k == "guard"]
        configs = [d for _p, k, d in self.items if k == "config"]
        parts: list[str] = []
        if slots:
            parts.append(f"{_count(len(slots), 'module-level dispatch object')} ({_listing(slots)})")
        if guards:
            kinds = _listing(sorted({d for _l, d in guards}))
            lines = _listing([str(line) for line, _d in guards], limit=10)
            parts.append(f"{_count(len(guards), 'guard')} with an eager fallback ({kinds}; line {lines})")
        if configs:
            parts.append(f"{_count(len(configs), '`OpsConfigSlot` kernel choice')} ({_listing(configs)})")
        api = self.ctx.project.api
        targets = " or ".join(
            p.handle for p in BUILTIN_PROFILES.values() if p.generation is not api.generation
        )
        needs = []
        if slots:
            needs.append(
                "builds each handle in its owning class's `__init__` from the ops config and stores it on `self`"
            )
        if guards:
            needs.append("calls it unconditionally in place of each guard and its eager copy")
        if configs:
            needs.append("reads each `OpsConfigSlot` field from the ops config in `__init__`")
        message = (
            f"module-global dispatch in this file: {'; '.join(parts)}. This tree is of the {api.handle} generation, which "
            f"has no instance-local handle API, so there is nothing to fix here until the tree moves to {targets}; there "
            f'a migration {_and(needs)} (`target-api = "veomni-op"` reports each one)'
        )
        self.report(self.items[0][0], message)

    def _slot_on_self(self, node: ast.Assign) -> None:
        """``self.fn = veomni_slot`` in a method: the instance keeps the module-global slot itself, so a later
        ``bind()`` by another model switches this instance's kernel too (its bound kernel was meant)."""
        if self.ctx.function is None:
            return
        if not any(
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            for t in node.targets
        ):
            return
        handles = module_handle_names(self.ctx)
        stored = next((n for n in _outcomes(node.value) if isinstance(n, ast.Name) and n.id in handles), None)
        if stored is None:
            return
        name = stored.id
        target = self.ctx.source.segment(node.targets[0])
        shown = f"`{target} = {name}`" if stored is node.value else f"`{target}` (one outcome: `{name}`)"
        # reported one by one even on an OpSlot-generation tree: the generation itself has the fix
        # (``bound_kernel()`` resolves the slot's kernel once, for this instance)
        self.report(
            node,
            f"{shown} stores the module-global dispatch slot on the instance: a later `bind()` by another model "
            f"switches this instance's kernel too; store `{name}.bound_kernel()`, the kernel bound now"
            + (" (or build a VeomniOp handle in `__init__`)" if not self.summary else ""),
            migration_fix(self.ctx),
        )

    def _report(
        self,
        call: ast.Call,
        kind: str,
        block: Block | None,
        owner: str | None = None,
        rebound: str | None = None,
    ) -> None:
        where: ast.AST | tuple[int, int, int, int] = call if block is None else block.position(call)
        label = kind if kind != "bound_kernel" else "`.bound_kernel()`"
        op = str_value(call_arg(call, 0, "op_name" if kind == "OpSlot" else "op"))
        variant = str_value(call_arg(call, 1, "variant"))
        what = f'`{kind}("{op}", "{variant}")`' if op and variant and kind != "attention_op" else f"`{label}`"
        if isinstance(call.func, ast.Attribute) and call.func.attr == "resolve":  # a kernel-registry read
            what = "`KERNEL_REGISTRY.resolve(...)`"
            if block is None:
                shown = " ".join(self.ctx.source.segment(call).split())
                what = f"`{shown}`" if len(shown) <= 80 else what
        inside = " (in a post-import block)" if block is not None else ""
        if owner is not None:
            inside = f" (a default argument or decorator of `{owner}`, evaluated once when the `def` runs)"
        if rebound is not None:
            function = self.ctx.function
            scope = getattr(function, "name", "a function")
            inside = (
                f" (bound to the module global `{rebound}` declared `global` in `{scope}`: every call rebinds it "
                "for all instances, so the last model built decides every instance's kernel)"
            )
        if self.summary:
            self.items.append((self._position(call, block), "slot", what + inside))
            return
        api = self.ctx.project.api
        needs = migration_needs(api)
        created = "is created at import time" if rebound is None else "is stored process-wide"
        message = (
            f"module-global dispatch{inside}: {what} {created}; {dispatch_doc(kind)}. "
            f"Build a {handle_name(api)} handle in the owning class's `__init__` and store it on `self`"
            + (f" ({needs})" if needs else "")
        )
        self.report(where, message, migration_fix(self.ctx) if owner is None and rebound is None else None)


def _global_rebinding(ctx: Context, node: ast.AST) -> str | None:
    """The module global a dispatch object built in a function is assigned to (``global h`` in that function,
    then ``h = VeomniOp(...)``, also as one outcome of a conditional or `or`); None otherwise."""
    function = ctx.function
    if function is None or "global " not in ctx.source.text:
        return None
    declared = {name for stmt in walk(function) if isinstance(stmt, ast.Global) for name in stmt.names}
    if not declared:
        return None
    statement = ctx.enclosing(ast.Assign, ast.AnnAssign)
    if statement is None:
        return None
    value = statement.value  # type: ignore[union-attr]
    if value is None or not any(outcome is node for outcome in _outcomes(value)):
        return None
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]  # type: ignore[union-attr]
    for target in targets:
        if isinstance(target, ast.Name) and target.id in declared:
            return target.id
    return None


def _def_time_owner(ctx: Context, node: ast.AST) -> str | None:
    """The name of the function whose default argument or decorator holds ``node`` when that runs at import
    (the ``def`` itself at module level or in a module-level class body); None otherwise."""
    scope = ctx.enclosing(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    if scope is None or not ctx.evaluated_at_import(node):
        return None
    return getattr(scope, "name", "lambda")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _listing(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", and {len(items) - limit} more" if len(items) > limit else "")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def _outcomes(value: ast.expr) -> list[ast.expr]:
    """The values an expression may evaluate to: both branches of a conditional, each operand of `or` /
    `and`, the expression itself otherwise."""
    if isinstance(value, ast.IfExp):
        return [*_outcomes(value.body), *_outcomes(value.orelse)]
    if isinstance(value, ast.BoolOp):
        return [o for v in value.values for o in _outcomes(v)]
    return [value]
