"""NPU441 replacement-head-mismatch."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath


class ReplacementHeadMismatch(Rule):
    code = "NPU441"
    name = "replacement-head-mismatch"
    summary = (
        "A spec registers, for one head's method (`Qwen3ForCausalLM.forward`), a replacement written for another "
        "head or another method (`..._seq_cls_init_patched`)."
    )
    why = (
        "Specs name each replacement after the class and method it replaces. A replacement of the "
        "sequence-classification head bound to the causal-LM forward (or an `__init__` replacement bound to a "
        "`forward`) generates a model whose head scores with the wrong projection and calls the wrong loss -- "
        "unshifted labels and `num_labels` instead of the vocabulary, or the reverse -- and it usually still "
        "runs. NPU sibling specs that re-register the GPU spec's functions are where a name gets crossed. The "
        "check compares the head (`ForCausalLM`, `ForSequenceClassification`, `ForTokenClassification`, "
        "`ForConditionalGeneration`) and method (`init`, `forward`) named by the target with those named by the "
        "`replacement=` function."
    )
    bad = (
        Example(
            """
            from veomni.patchgen import PatchConfig

            from .toy_gpu_patch_gen_config import toy_forcausallm_forward_patched, toy_seq_cls_forward_patched

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_toy_npu.py")
            config.override_method("ToyForCausalLM.forward", replacement=toy_seq_cls_forward_patched)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the causal-LM forward generated from the classification body",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen import PatchConfig

            from .toy_gpu_patch_gen_config import toy_forcausallm_forward_patched, toy_seq_cls_forward_patched

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_toy_npu.py")
            config.override_method("ToyForCausalLM.forward", replacement=toy_forcausallm_forward_patched)
            config.override_method("ToyForSequenceClassification.forward", replacement=toy_seq_cls_forward_patched)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="each head bound to its own body",
        ),
    )
    fix_safety = "No fix."
    requires = ("replacement=", ("For",))
    node_types = (ast.Call, ast.FunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.spec

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef):  # @config.override_method("Cls.meth") on the replacement itself
            for dec in node.decorator_list:
                target = _target(dec)
                if target is not None and not any(kw.arg == "replacement" for kw in dec.keywords):  # type: ignore[attr-defined]
                    self._check(target, node.name, dec)
            return
        target = _target(node)
        rep = next((kw.value for kw in node.keywords if kw.arg == "replacement"), None)  # type: ignore[attr-defined]
        if target is not None and isinstance(rep, ast.Name):
            self._check(target, rep.id, rep)

    def _check(self, target: str, rep: str, where: ast.AST) -> None:
        if "." not in target:
            return
        cls, method = target.split(".", 1)
        want_head, got_head = losspath.head_of_name(cls), losspath.head_of_name(rep)
        if want_head is not None and got_head is not None and want_head != got_head:
            self.report(
                where,
                f"`{target}` is replaced by `{rep}`, written for another head ({got_head}, not {want_head}): "
                "the generated forward scores and computes its loss as that head does",
            )
            return
        want_m, got_m = (method if method in ("__init__", "forward") else None), losspath.method_of_name(rep)
        if want_m is not None and got_m is not None and want_m != got_m:
            self.report(where, f"`{target}` is replaced by `{rep}`, written for `{got_m}`, not `{want_m}`")


def _target(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if not (isinstance(f, ast.Attribute) and f.attr in ("override_method", "replace_method")):
        return None
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None
