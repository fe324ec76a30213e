"""NPU514 generated-name-unbound."""

from __future__ import annotations

import os

from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.genscope import unbound_names
from npu_lint.veomni.patchgen import parse_spec


class GeneratedNameUnbound(Rule):
    code = "NPU514"
    name = "generated-name-unbound"
    summary = (
        "A body a patch spec emits (a replacement or a helper, its own or reused from another spec) reads a global "
        "name the generated module will not define: not in the upstream module, not an `add_import`, a "
        "post-import block or a helper of the spec."
    )
    why = (
        "patchgen copies the upstream transformers module and adds only what the spec asks for: its "
        "`add_import` names, its post-import blocks and its `add_helper` definitions. The replacement bodies "
        "are written into that module, so a name they read that none of those bind raises NameError there, "
        "although the spec module itself imports it and reads fine. NPU specs that reuse the GPU spec's "
        "functions and pick its helpers one by one are where this happens: the GPU module defines the helper, "
        "the NPU one does not, and only Ascend runs fail (the dataloader's position-id precompute, the "
        "multimodal forward). The generated scope is computed from the spec as regeneration would build it "
        "(base specs, copied lists, dropped names, `name_map`), not from the generated file on disk, which may "
        "be stale."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            def token_types(input_ids, image_token_id):
                return (input_ids == image_token_id).long()


            @config.override_method("Qwen3VLModel.get_placeholder_mask")
            def placeholder_mask(self, input_ids, inputs_embeds=None, **kwargs):
                return token_types(input_ids, self.config.image_token_id) == 1
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a spec function the body calls, never registered with `add_helper`",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.add_helper
            def token_types(input_ids, image_token_id):
                return (input_ids == image_token_id).long()


            @config.override_method("Qwen3VLModel.get_placeholder_mask")
            def placeholder_mask(self, input_ids, inputs_embeds=None, **kwargs):
                return token_types(input_ids, self.config.image_token_id) == 1 and torch.is_tensor(input_ids)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="the helper is emitted; `torch` is imported by the upstream module",
        ),
    )
    fix_safety = (
        "No fix: register the helper (`config.add_helper(...)`) or the import (`config.add_import(...)`)."
    )

    requires = ("PatchConfig", "config")

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return bool(ctx.source.kind.spec)

    def finish(self) -> None:
        ctx = self.ctx
        try:
            spec = parse_spec(ctx.source.path, ctx.source.text, ctx.tree)
        except Exception:  # noqa: BLE001 - a spec we cannot model has nothing to say here
            return
        if spec is None:
            return
        here = os.path.normpath(ctx.source.path)
        for found in unbound_names(spec):
            patch = found.patch
            line = patch.line if os.path.normpath(patch.spec_path) == here else spec.config_line
            what = patch.target or patch.replacement or "a helper"
            origin = (
                ""
                if os.path.normpath(found.def_path) == here
                else f" (its body is `{os.path.basename(found.def_path)}`:{found.def_line})"
            )
            width = (
                len(ctx.source.text.splitlines()[line - 1])
                if 0 < line <= ctx.source.text.count("\n") + 1
                else 0
            )
            self.report(
                (line, 0, line, width),
                f"the generated module will not define `{found.name}`, which the body emitted for `{what}` "
                f"reads{origin}: NameError when it runs; register it (`config.add_helper({found.name})` or "
                "`config.add_import(...)`)",
            )
