"""NPU320 op-registration-import-missing."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from npu_lint.core.astutil import absolute_module, dotted_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.resolution import module_of

# operator namespaces torch itself fills
_TORCH_NAMESPACES = frozenset(
    {
        "aten",
        "prims",
        "higher_order",
        "c10d",
        "_c10d_functional",
        "_c10d_functional_autograd",
        "c10d_functional",
        "quantized",
        "_quantized",
        "quantized_decomposed",
        "profiler",
        "rngprims",
        "inductor",
        "mkldnn",
        "_prims",
        "debugprims",
        "_inductor_test",
        "fsdp",
        "_dtensor",
        "symm_mem",
        "_TorchScriptTesting",
    }
)
# the ``npu`` namespace's operators torch_npu itself registers (its public kernels); others are registered by
# an extension package (``fla_npu``, ``mindspeed``'s ops, a tree's own ``_C``) that must be imported first
TORCH_NPU_OPS = frozenset(
    """
    npu_format_cast npu_format_cast_ get_npu_format npu_rms_norm npu_rms_norm_backward npu_add_rms_norm
    npu_rotary_mul npu_rotary_mul_backward npu_apply_rotary_pos_emb npu_rotary_position_embedding
    npu_interleave_rope npu_fusion_attention npu_fusion_attention_grad npu_fused_infer_attention_score
    npu_incre_flash_attention npu_prompt_flash_attention npu_flash_attention npu_grouped_matmul
    npu_grouped_matmul_finalize_routing npu_swiglu npu_swiglu_backward npu_geglu npu_geglu_grad npu_gelu
    npu_gelu_backward npu_fast_gelu npu_silu npu_silu_ npu_mish npu_moe_gating_top_k_softmax
    npu_moe_gating_top_k npu_moe_init_routing npu_moe_init_routing_v2 npu_moe_token_permute
    npu_moe_token_unpermute npu_moe_compute_expert_tokens npu_moe_finalize_routing npu_moe_distribute_dispatch
    npu_moe_distribute_combine npu_moe_re_routing npu_layer_norm_eval npu_dropout npu_dropout_with_add_softmax
    npu_dropout_do_mask npu_dropout_gen_mask npu_confusion_transpose npu_bmmV2 npu_linear npu_transpose
    npu_broadcast npu_scaled_masked_softmax npu_softmax_cross_entropy_with_logits npu_cross_entropy_loss
    npu_quant_matmul npu_weight_quant_batchmatmul npu_dynamic_quant npu_anti_quant npu_quantize
    npu_convert_weight_to_int4pack npu_mm_all_reduce_base npu_all_gather_base_mm npu_mm_reduce_scatter_base
    npu_group_norm_silu npu_top_k_top_p npu_scatter npu_scatter_nd_update npu_scatter_nd_update_
    npu_kv_rmsnorm_rope_cache npu_mla_prolog npu_mla_prolog_v2 npu_gather_backward npu_ps_roi_pooling
    npu_nms_v4 npu_iou npu_giou npu_batch_nms npu_roi_align npu_indexing npu_slice npu_stride_copy
    npu_sort_v2 npu_one_hot npu_max npu_min npu_bert_apply_adam npu_apply_adam npu_apply_adam_w
    npu_alloc_float_status npu_get_float_status npu_clear_float_status npu_trans_quant_param
    npu_ffn npu_sign_bits_pack npu_sign_bits_unpack npu_random_choice_with_mask npu_rotated_box_decode
    npu_rotated_box_encode npu_rotated_iou npu_rotated_overlaps npu_yolo_boxes_encode npu_conv2d
    npu_conv3d npu_conv_transpose2d npu_convolution npu_convolution_transpose npu_deformable_conv2d
    npu_lstm npu_gru npu_lstm_cell npu_multi_head_attention npu_fused_attention_score npu_ciou npu_diou
    npu_ifmr npu_normalize_batch npu_pad npu_anchor_response_flags npu_grid_assign_positive
    npu_fast_gelu_backward npu_swiglu_grad npu_dtype_cast npu_advance_step_flashattn
    npu_gather_sparse_index npu_nsa_compress npu_nsa_select_attention npu_moe_gating_top_k_softmax_v2
    npu_group_quant npu_dynamic_block_quant npu_hans_encode npu_hans_decode npu_cross_entropy_loss_backward
    """.split()
)


def _op_of(node: ast.Attribute) -> tuple[str, str] | None:
    """``torch.ops.<namespace>.<op>`` -> (namespace, op)."""
    name = dotted_name(node)
    if name is None:
        return None
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops":
        return parts[2], parts[3]
    return None


def _registers(text: str, namespace: str) -> bool:
    """Whether a module's text registers operators of ``namespace`` (a schema string, a ``Library``, a loaded
    extension)."""
    return any(
        marker in text
        for marker in (
            f'"{namespace}::',
            f"'{namespace}::",
            f'Library("{namespace}"',
            f"Library('{namespace}'",
            f"TORCH_LIBRARY({namespace}",
            "load_library(",
            "load_inline(",
            "cpp_extension.load(",
        )
    )


class OpRegistrationImportMissing(Rule):
    code = "NPU320"
    name = "op-registration-import-missing"
    summary = (
        "A file calls `torch.ops.<ns>.<op>` (an extension's operator: not torch's, not one of torch_npu's own "
        "kernels) but imports nothing that registers it: the side-effect import (`import fla_npu  # noqa: F401`) "
        "was pruned."
    )
    why = (
        "Extension kernels reach PyTorch through the dispatcher: importing the package (`fla_npu`, a tree's "
        "`_C`, MindSpeed's ops) registers `torch.ops.npu.npu_chunk_fwd_o` and its siblings, and the kernel "
        "module calls them through `torch.ops`, never through the package's names. The import is therefore "
        "unused to every linter and is kept with a `# noqa: F401`; a cleanup that drops it leaves a module that "
        "imports fine and fails at its first forward (`torch.ops.npu has no attribute ...`). A call of "
        "`torch.ops.<ns>.<op>` is reported when the namespace is not one of torch's, the operator is not one "
        "of torch_npu's own kernels (for `npu`), and neither the file nor a tree module it imports registers "
        'the namespace (a `"ns::op"` schema, `torch.library.Library("ns", ...)`, a loaded extension) nor does '
        "the file keep an import for its side effect (a name imported and never read, `torch_npu` aside)."
    )
    bad = (
        Example(
            """
            import torch
            import torch_npu


            def chunk_fwd_o(q, k, v, h, g, scale):
                return torch.ops.npu.npu_chunk_fwd_o(q, k, v, h, g, scale=scale)
            """,
            path="veomni/ops/kernels/gated_delta_rule/_ascend/chunk_o.py",
            title="the registration import of `fla_npu` pruned",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu

            import fla_npu  # noqa: F401  (registers torch.ops.npu.npu_chunk_fwd_o)


            def chunk_fwd_o(q, k, v, h, g, scale):
                return torch.ops.npu.npu_chunk_fwd_o(q, k, v, h, g, scale=scale)
            """,
            path="veomni/ops/kernels/gated_delta_rule/_ascend/chunk_o.py",
        ),
        Example(
            """
            import torch


            def rms_norm(x, weight, eps):
                return torch.ops.npu.npu_rms_norm(x, weight, epsilon=eps)[0]
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
            title="torch_npu's own kernels need no extra import",
        ),
    )
    fix_safety = "No fix: restore the import that registers the operators (`import <package>  # noqa: F401`)."
    node_types = ()
    requires = ("torch.ops.",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        calls: list[tuple[ast.Attribute, str, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                op = _op_of(node.func)
                if op is None or op[0] in _TORCH_NAMESPACES or (op[0] == "npu" and op[1] in TORCH_NPU_OPS):
                    continue
                if op[1] in ("default", "overload") or op[1].startswith("_"):
                    continue
                calls.append((node.func, *op))
        if not calls:
            return
        text = self.ctx.source.text
        if self._side_effect_import(tree):
            return
        namespaces = {ns for _node, ns, _op in calls}
        registered = {ns for ns in namespaces if _registers(text, ns) or self._tree_registers(tree, ns)}
        reported: set[str] = set()
        for node, ns, op in sorted(calls, key=lambda c: (c[0].lineno, c[0].col_offset)):
            if ns in registered or ns in reported:
                continue
            reported.add(ns)
            self.report(
                node,
                f"`torch.ops.{ns}.{op}` is an extension operator (not torch's{', not a torch_npu kernel' if ns == 'npu' else ''}) "
                "and nothing this file imports registers it: the import kept for its side effect "
                "(`import <package>  # noqa: F401`) is missing, so the call fails at the first forward; "
                "restore it",
            )

    @staticmethod
    def _side_effect_import(tree: ast.Module) -> bool:
        """An import of a package whose names the file never reads (kept for its side effect):
        ``torch``, ``torch_npu`` and the standard library aside (a tree module, a compiled ``_C``, included)."""
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        read |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}

        def foreign(module: str) -> bool:
            top = module.split(".")[0]
            return (
                bool(top)
                and top not in ("torch", "torch_npu", "veomni")
                and top not in sys.stdlib_module_names
            )

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if foreign(alias.name) and (alias.asname or alias.name.split(".")[0]) not in read:
                        return True
            elif isinstance(node, ast.ImportFrom) and (node.level or foreign(node.module or "")):
                if any((a.asname or a.name) not in read for a in node.names if a.name != "*"):
                    return True
        return False

    def _tree_registers(self, tree: ast.Module, namespace: str) -> bool:
        """A tree module the file imports (relative or ``veomni.``) whose text registers ``namespace``."""
        path = self.ctx.source.path
        module, is_package = module_of(path)
        root = self.ctx.project.root
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = absolute_module(module, is_package, node.level, node.module)
            if not base:
                continue
            for target in (base, *(f"{base}.{a.name}" for a in node.names)):
                parts = target.split(".")
                if node.level:
                    # resolve against the file's own directory
                    here = Path(path).parent
                    for _ in range(node.level - 1):
                        here = here.parent
                    rel = [*(node.module or "").split(".")] if node.module else []
                    stem = here.joinpath(*[p for p in rel if p])
                    extra = target[len(base) + 1 :] if target != base else ""
                    stem = stem / extra if extra else stem
                elif root and parts[0] == "veomni":
                    stem = Path(root, *parts)
                else:
                    continue
                for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                    if candidate.is_file():
                        parsed = load_file(str(candidate))
                        if parsed is not None and _registers(parsed.text, namespace):
                            return True
        return False
