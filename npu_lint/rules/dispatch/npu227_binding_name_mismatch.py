"""NPU227 binding-name-mismatch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._handles import call_arg, call_name, post_import_blocks, self_attr, str_value
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.bindnames import field_contradiction, replacement_stem, variant_contradiction, vocabulary

_SLOT = "OpSlot"
_INSTANCE = frozenset({"VeomniOp", "VeomniKernel"})
_FIELD_SLOT = "OpsConfigSlot"


class BindingNameMismatch(Rule):
    code = "NPU227"
    name = "binding-name-mismatch"
    summary = (
        "A dispatch binding's name names one op, variant or ops-config field and its arguments bind another "
        '(`veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "seq_cls")`), or a spec replaces a function with '
        "the replacement it gives another one."
    )
    why = (
        "A slot, handle or ops-config slot is named after what it binds: `veomni_causal_lm_loss` is the "
        "causal-LM loss, `veomni_dsa_attention_implementation` reads the sparse-attention choice. The code that "
        "calls it is written against the name (`loss = veomni_causal_lm_loss(logits, labels, ...)` expects the "
        "shifted next-token loss), while the arguments decide what runs. When a copy-paste or a rename changes one "
        "side only, the binding still resolves, to a row of another variant (the sequence-classification loss, "
        "no label shift) or to another config field (the indexer's choice steering attention), and nothing "
        "fails: the model trains on the wrong kernel, on NPU typically the row the other variant registers for "
        "Ascend. The rule reads the variants of each op and the ops-config fields from the tree (the OpSlot rows "
        "of an OpSlot tree, the registry rows otherwise, `veomni/bindnames.py`), and reports only when the name "
        "spells exactly one other variant (or field) of the same op as whole words and not the bound one, or, "
        "failing that, exactly one other variant near-missed (underscores dropped, `qwen35` for `qwen3_5`, or one "
        "letter off in a word of five or more letters) while the bound one is not. "
        'A spec\'s `replace_function("b", replacement=a_patched)` is the same mistake one level up when the spec '
        "also gives `a` that replacement: the function written for `a` (its slot, its layout) now runs as `b`."
    )
    bad = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "seq_cls")
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the causal-LM loss slot bound to the sequence-classification variant",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpsConfigSlot
                veomni_dsa_attention_implementation = OpsConfigSlot("dsa_indexer_implementation")
                """
            )
            ''',
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an ops-config slot named for one field reading another",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


            def apply_rotary_pos_emb_patched(q, k, cos, sin):
                return q, k


            def apply_rotary_pos_emb_vision_patched(q, k, cos, sin):
                return q, k


            config.replace_function("apply_rotary_pos_emb", replacement=apply_rotary_pos_emb_patched)
            config.replace_function("apply_rotary_pos_emb_vision", replacement=apply_rotary_pos_emb_patched)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the vision RoPE replaced by the text RoPE's replacement",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "causal")
            veomni_seq_cls_loss = OpSlot("cross_entropy_loss", "seq_cls")
            veomni_rms_norm = OpSlot("rms_norm", "standard")
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


            def apply_rotary_pos_emb_patched(q, k, cos, sin):
                return q, k


            def apply_rotary_pos_emb_vision_patched(q, k, cos, sin):
                return q, k


            config.replace_function("apply_rotary_pos_emb", replacement=apply_rotary_pos_emb_patched)
            config.replace_function("apply_rotary_pos_emb_vision", replacement=apply_rotary_pos_emb_vision_patched)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: which side is wrong (the name or the arguments) is the author's call."
    requires = (("OpSlot", "VeomniOp", "VeomniKernel", "OpsConfigSlot", "replace_function"),)
    node_types = ()

    def finish(self) -> None:
        vocab = vocabulary(self.ctx.project)
        for node in nodes_of(self.ctx.tree, ast.Assign):
            assert isinstance(node, ast.Assign)
            self._check(node, node, vocab)
        for block in post_import_blocks(self.ctx):
            for stmt in block.tree.body:
                if isinstance(stmt, ast.Assign):
                    self._check(stmt, block.position(stmt.value), vocab)
        if "replace_function" in self.ctx.source.text:
            self._replacements()

    def _replacements(self) -> None:
        """``config.replace_function("b", replacement=a_patched)`` while the spec also gives ``a`` that same
        replacement: the function named for ``a`` now also replaces ``b``."""
        bound: list[tuple[str, str, ast.expr, int]] = []  # (target, replacement, its node, line)
        for node in nodes_of(self.ctx.tree, ast.Call):
            assert isinstance(node, ast.Call)
            if not (isinstance(node.func, ast.Attribute) and node.func.attr == "replace_function"):
                continue
            target = str_value(call_arg(node, 0, "target"))
            replacement = call_arg(node, 1, "replacement")
            if target and isinstance(replacement, ast.Name):
                bound.append((target, replacement.id, replacement, node.lineno))
        for target, name, node, _line in bound:
            stem = replacement_stem(name)
            if stem == target:
                continue
            other = next((b for b in bound if b[0] == stem and b[1] == name), None)
            if other is not None:
                self.report(
                    node,
                    f"`{target}` is replaced by `{name}`, the replacement this spec gives `{stem}` (line "
                    f"{other[3]}): both upstream functions now run one body, and `{target}` loses its own "
                    "contract (the slot or kernel it dispatches to)",
                )

    def _check(self, node: ast.Assign, where: object, vocab: object) -> None:
        if len(node.targets) != 1 or not isinstance(node.value, ast.Call):
            return
        target = node.targets[0]
        name = target.id if isinstance(target, ast.Name) else self_attr(target)
        if not name:
            return
        call = node.value
        kind = call_name(call, self.ctx)
        if kind == _FIELD_SLOT:
            field = str_value(call_arg(call, 0, "field"))
            if field is None:
                return
            other = field_contradiction(name, field, vocab.fields)  # type: ignore[attr-defined]
            if other is not None:
                self.report(
                    where,  # type: ignore[arg-type]
                    f"`{name}` names the ops-config field `{other}` but reads `{field}`: the code written "
                    f"against the name follows the `{field}` choice",
                )
            return
        if kind != _SLOT and kind not in _INSTANCE:
            return
        op = str_value(call_arg(call, 0, "op"))
        variant = str_value(call_arg(call, 1, "variant"))
        if op is None or variant is None:
            return
        table = vocab.slot_variants if kind == _SLOT else vocab.op_variants  # type: ignore[attr-defined]
        padded = f"_{name.lower()}_"
        named = max((o for o in table if f"_{o}_" in padded), key=len, default=None)
        if named is not None and named != op and op in table:
            self.report(
                where,  # type: ignore[arg-type]
                f'`{name}` names the `{named}` op but binds `{kind}("{op}", "{variant}")`: the code written '
                f"against the name runs the `{op}` kernel (its arguments, its NPU row) instead",
            )
            return
        variants = table.get(op)
        if not variants or variant not in variants:
            return  # an unknown variant is NPU205's
        other = variant_contradiction(name, op, variant, variants)
        if other is not None:
            self.report(
                where,  # type: ignore[arg-type]
                f'`{name}` names the `{other}` variant of `{op}` but binds `{kind}("{op}", "{variant}")`: the '
                f"code written against the name runs the `{variant}` rows (the tree registers both)",
            )
