"""NPU303 vendor-class-patch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.rules._handles import migration_fix
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.vendor._shared import op_advice, register_advice, str_arg
from npu_lint.veomni import vendor_map


class VendorClassPatch(Rule):
    code = "NPU303"
    name = "vendor-class-patch"
    summary = "A patch spec swaps a model class for a vendor kernel class named by strings (`create_patch_from_external`)."
    why = (
        '`config.patches.append(create_patch_from_external(target="ToyRMSNorm", '
        'replacement_module="liger_kernel.transformers.rms_norm", replacement_name="LigerRMSNorm"))` makes '
        "patchgen import the vendor class into the generated file and use it in place of the model's class. "
        "The strings hide the dependency from imports, the generated file cannot be imported where the "
        "vendor package does not exist (Liger has no Ascend build), and the choice ignores the ops config. "
        "VeOmni's maintainers replaced these patches (seed_oss) with `__init__` / `forward` overrides of the "
        "model's own class that call the op's handle; the registry then picks Liger, the NPU kernel or the "
        "eager formula per device. NPU301 reports the same call as a vendor import; this finding carries the "
        "migration."
        " The advice is in the linted tree's own names and dispatch API (read from its registry and ops "
        "config): on a handle tree the registry op and its handle; on an OpSlot-generation tree the slot "
        '(`OpSlot("rotary_pos_emb", "full")`), its ops-config field and its registered rows; for an op '
        "the tree does not register, what it has instead (attention through transformers' "
        "`ALL_ATTENTION_FUNCTIONS`) or how to register one with the tree's registration function."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_gpu.py",
            )

            config.patches.append(
                create_patch_from_external(
                    target="ToyRMSNorm",
                    replacement_module="liger_kernel.transformers.rms_norm",
                    replacement_name="LigerRMSNorm",
                )
            )
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="a Liger RMSNorm swapped in by name",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
            config.patches.append(
                create_patch_from_external(
                    target="ToyRMSNorm",
                    replacement_module="veomni.models.transformers.toy.layers",
                    replacement_name="ToyFastRMSNorm",
                )
            )
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="a replacement class of the project's own is not a vendor class",
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), shared with NPU201-203 and NPU207: "
        "a vendor RMSNorm or SwiGLU MLP class becomes an `__init__` override of the model's class (the "
        "upstream `__init__` plus the op's handle) and a `forward` override calling the handle; the rest of "
        "the upstream `forward` stays (e.g. SeedOssMLP's dropout). It is offered only where the tree's API "
        "profile defines every name it imports (never on an OpSlot-era tree under `target-api = auto`), and "
        "is display-only, with the reason, for a vendor class no handle covers or an upstream `forward` "
        "whose formula is not the standard one. The example has no tree to migrate into (no upstream "
        "`ToyRMSNorm`), so its fix is display-only."
    )
    requires = ("create_patch_from_external",)
    node_types = (ast.Call,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        name = call_name(node)
        if name != "create_patch_from_external":
            return
        module = str_arg(node, 1, "replacement_module")
        if module is None or not vendor_map.is_vendor(module):
            return
        cls = str_arg(node, 2, "replacement_name") or ""
        target = str_arg(node, 0, "target") or "a class"
        kernel = vendor_map.lookup(f"{module}.{cls}" if cls else module)
        dotted = f"{module}.{cls}" if cls else module
        if kernel is not None and kernel.op:
            advice, _title = op_advice(self.ctx.project, kernel.op, kernel.variant or "standard", "call")
            how = f"override `{target}.__init__` / `forward` to keep the upstream class and {advice}"
        else:
            how = f"keep the upstream class; {register_advice(self.ctx.project.api)}"
        self.report(
            node,
            f"`{target}` is swapped for the vendor class `{dotted}` by name; {how}",
            migration_fix(self.ctx),
        )
