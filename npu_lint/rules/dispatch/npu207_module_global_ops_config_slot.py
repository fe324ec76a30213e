"""NPU207 module-global-ops-config-slot."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import (
    HANDLE_CONSTRUCTORS,
    IMPL_RESOLVERS,
    Block,
    block_of,
    call_arg,
    call_name,
    migration_fix,
    module_scope_calls,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch._shared import ops_config_slots, summarised


class ModuleGlobalOpsConfigSlot(Rule):
    code = "NPU207"
    name = "module-global-ops-config-slot"
    summary = (
        "An `OpsConfigSlot` (a kernel choice read from the ops config) is declared at module scope, or the "
        "ops-config resolver is called at import time."
    )
    why = (
        'OpSlot-era specs declare `veomni_dsa_indexer_implementation = OpsConfigSlot("dsa_indexer_implementation")` '
        "at module scope (usually in a spec's `add_post_import_block`) and branch on its `.value` inside the "
        "model's methods. Like an `OpSlot`, the slot is bound once per process: every model built from the "
        "module shares one choice, and a second model built with another ops config silently changes the "
        "first model's kernel. In the handle generations the choice belongs to the instance: the owning "
        "class reads it in `__init__` with the profile's resolver (`resolve_op_impl` / `resolve_kernel_impl`) "
        "and stores it on `self`. VeOmni's maintainers went further for glm_moe_dsa (dedicated `dsa_indexer` "
        "/ `dsa_attention` handles); the migration keeps the model's own branches and makes the choice "
        "instance-local, which is exact. The message names the tree's resolver, or says the tree has none."
        ' On an OpSlot-generation tree under `target-api = "auto"` the slots are listed in NPU201\'s one finding '
        'per file instead (`target-api = "veomni-op"` reports each).'
        " The same choice made with the handle generation's own resolver at import time (a module constant, "
        "a class attribute or a default argument holding `resolve_op_impl(...)`, then passed to the handle in "
        "`__init__`) is worse: it runs before any ops config is installed, so every instance gets the "
        "resolver's answer for no config and the NPU implementation the config selects is never used."
    )
    bad = (
        Example(
            """
            from torch import nn
            from veomni.ops.dispatch import OpsConfigSlot

            veomni_indexer_impl = OpsConfigSlot("dsa_indexer_implementation")


            class ToyIndexer(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)

                def forward(self, x):
                    if veomni_indexer_impl.value == "eager":
                        return self.proj(x)
                    return self.proj(x).relu()
            """,
            fixed="""
            from torch import nn
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            class ToyIndexer(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.proj = nn.Linear(dim, dim)
                    self.veomni_indexer_impl = resolve_op_impl("dsa_indexer_implementation")

                def forward(self, x):
                    if self.veomni_indexer_impl == "eager":
                        return self.proj(x)
                    return self.proj(x).relu()
            """,
            title="a module-global kernel choice in model code",
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
                from veomni.ops.dispatch import OpsConfigSlot
                veomni_attention_impl = OpsConfigSlot("dsa_attention_implementation")
                """
            )
            ''',
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="declared in a patch spec's post-import block (no method uses it here: display-only)",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl

            _ROPE_IMPL = {"rope": resolve_op_impl("rope_implementation")}


            class ToyAttention(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_rope = VeomniOp("rope", "full", _ROPE_IMPL["rope"])
            """,
            title="the resolver called at import (a module constant later passed to the handle)",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            class ToyNorm(nn.Module):
                def __init__(self, dim, impl=resolve_op_impl("rms_norm_implementation")):
                    super().__init__()
                    self.veomni_norm = VeomniOp("rms_norm", "standard", impl)
            """,
            title="the resolver as a default argument (evaluated once, when the class is defined)",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            class ToyIndexer(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.impl = resolve_op_impl("dsa_indexer_implementation")
            """
        ),
        Example(
            """
            from veomni.ops.dispatch import OpsConfigSlot  # importing the name is not a declaration


            def build():
                return OpsConfigSlot("dsa_indexer_implementation")  # built per call, not at import
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), shared with NPU201-203: each class "
        "whose methods read `<slot>.value` gets `self.<slot> = <resolver>(<field>)` in its `__init__` "
        "(an `__init__` override in a spec) and reads `self.<slot>`; the declaration goes. Names come from the "
        "tree's API profile; it is offered only where the tree defines them, never on an OpSlot-era tree "
        "under `target-api = auto`. A slot no method of the file uses makes the fix display-only, with the "
        "reason."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        # the resolver, and the ops-config getter it reads (`get_ops_config().rms_norm_implementation`)
        self.resolvers = (
            IMPL_RESOLVERS
            | {"get_ops_config"}
            | ({ctx.project.api.resolver} if ctx.project.api.resolver else set())
        )
        if summarised(ctx.project.api) or not (
            "OpsConfigSlot" in text or any(name in text for name in self.resolvers)
        ):
            self.node_types = ()  # an OpSlot-generation tree: NPU201 lists the file's OpsConfigSlots in one finding

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        for call, block in ops_config_slots(self.ctx, node):
            self._report(call, block)
        if call_name(node) in self.resolvers and self.ctx.evaluated_at_import(node):
            if any(isinstance(p, ast.Call) and call_name(p) in HANDLE_CONSTRUCTORS for p in self.ctx.parents):
                return  # the argument of a module-global handle: NPU201 reports the handle
            self._import_time_read(node, None)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block":
            block = block_of(self.ctx, node)
            if block is not None:
                for call in sorted(module_scope_calls(block.tree), key=lambda c: (c.lineno, c.col_offset)):
                    if call_name(call) in self.resolvers:
                        self._import_time_read(call, block)

    def _import_time_read(self, call: ast.Call, block: Block | None) -> None:
        """The ops-config resolver called when the module is imported (module level, a class body, a default
        value, a post-import block): the choice is made before any model installs its ops config."""
        where: ast.AST | tuple[int, int, int, int] = call if block is None else block.position(call)
        name = call_name(call)
        field = str_value(call_arg(call, 0, "field"))
        what = f'`{name}("{field}")`' if field else f"`{name}(...)`"
        inside = " (in a post-import block)" if block is not None else ""
        self.report(
            where,
            f"kernel choice read at import time{inside}: {what} runs once when the module is imported, before "
            "any model installs its ops config, so every instance uses that one answer instead of its own "
            f"config's implementation; call `{name}` in the owning class's `__init__`",
        )

    def _report(self, call: ast.Call, block: Block | None) -> None:
        where: ast.AST | tuple[int, int, int, int] = call if block is None else block.position(call)
        field = str_value(call_arg(call, 0, "field"))
        what = f'`OpsConfigSlot("{field}")`' if field else "`OpsConfigSlot(...)`"
        inside = " (in a post-import block)" if block is not None else ""
        api = self.ctx.project.api
        if api.resolver and api.resolver_module and api.defines(api.resolver_module, api.resolver):
            read = f'with `{api.resolver}("{field}")`' if field else f"with `{api.resolver}`"
            how = f"read it in the owning class's `__init__` {read} (`{api.resolver_module}`) and store it on `self`"
        else:
            how = (
                "read it in the owning class's `__init__` and store it on `self` (this VeOmni tree defines no "
                "ops-config resolver to read it with"
                + (f"; `{api.resolver}` is the {api.handle} generation's" if api.resolver else "")
                + ")"
            )
        message = (
            f"module-global kernel choice{inside}: {what} is bound once per process and shared by every model "
            f"instance; {how}"
        )
        self.report(where, message, migration_fix(self.ctx))
