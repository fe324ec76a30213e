"""NPU201 module-global-dispatch."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import (
    ATTENTION_HELPERS,
    INSTANCE_HANDLES,
    REGISTRY_OBJECTS,
    ROW_RESOLVERS,
    Block,
    _dispatch_doc,
    block_of,
    call_arg,
    constructor_kind,
    handle_name,
    in_function,
    migration_fix,
    migration_needs,
    module_handle_names,
    module_scope_calls,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule


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
        "meant (`self.fn = slot` instead of `slot.bound_kernel()`) are all module-global dispatch."
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
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`): it rewrites the whole spec or model "
        "module to per-instance VeomniOp handles, attached to the first finding of the file. In generated files "
        "it is display-only (fix the spec and regenerate)."
    )
    node_types = (ast.Call, ast.Assign)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(
            word in text
            for word in (
                "OpSlot",
                *INSTANCE_HANDLES,
                *ROW_RESOLVERS,
                *ATTENTION_HELPERS,
                "bound_kernel",
                "add_post_import_block",
                *REGISTRY_OBJECTS,
            )
        ):
            self.node_types = ()  # every finding names one of these in a call

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            self._slot_on_self(node)
            return
        assert isinstance(node, ast.Call)
        kind = constructor_kind(node, self.ctx)
        if kind is None and not (
            isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block"
        ):
            return  # the cheap checks first: only module-scope calls of these names matter
        if in_function(self.ctx):
            return
        if kind is not None:
            self._report(node, kind, None)
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block":
            block = block_of(self.ctx, node)
            if block is None:
                return
            for call in sorted(module_scope_calls(block.tree), key=lambda c: (c.lineno, c.col_offset)):
                kind = constructor_kind(call, self.ctx)
                if kind is not None:
                    self._report(call, kind, block)

    def _slot_on_self(self, node: ast.Assign) -> None:
        """``self.fn = veomni_slot`` in a method: the instance keeps the module-global slot itself, so a later
        ``bind()`` by another model switches this instance's kernel too (its bound kernel was meant)."""
        value = node.value
        if not isinstance(value, ast.Name) or self.ctx.function is None:
            return
        if not any(
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            for t in node.targets
        ):
            return
        if value.id not in module_handle_names(self.ctx):
            return
        target = self.ctx.source.segment(node.targets[0])
        self.report(
            node,
            f"`{target} = {value.id}` stores the module-global dispatch slot on the instance: a later `bind()` by "
            f"another model switches this instance's kernel too; store `{value.id}.bound_kernel()` (or build a "
            "VeomniOp handle in `__init__`)",
            migration_fix(self.ctx),
        )

    def _report(self, call: ast.Call, kind: str, block: Block | None) -> None:
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
        api = self.ctx.project.api
        needs = migration_needs(api)
        message = (
            f"module-global dispatch{inside}: {what} is created at import time; {_dispatch_doc(kind)}. "
            f"Build a {handle_name(api)} handle in the owning class's `__init__` and store it on `self`"
            + (f" ({needs})" if needs else "")
        )
        self.report(where, message, migration_fix(self.ctx))
