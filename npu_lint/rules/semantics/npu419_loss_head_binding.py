"""NPU419 loss-head-binding."""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.semantics._shared import class_methods
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import last_name

_CLS_HEADS = ("ForSequenceClassification", "ForTokenClassification")
_LM_HEADS = ("ForCausalLM", "ForConditionalGeneration")

# where a VeOmni tree defines the loss wrappers that `self.loss_function` and the loss handles resolve to
_WRAPPER_MODULES = (
    "veomni/ops/kernels/cross_entropy/__init__.py",
    "veomni/models/loss_utils.py",
    "veomni/models/loss_utils/__init__.py",
    "veomni/models_kernel/loss_utils/__init__.py",
)


def _kind(name: str, variants: dict[str, str]) -> str | None:
    """Which head a loss callable serves, from its own name or the variant of the handle it names:
    "causal" (shifts the labels by one), "cls" (one label per position or sequence), None (unknown)."""
    lowered = name.lower()
    variant = variants.get(name, "")
    if name == "ForCausalLMLoss" or "causal_lm_loss" in lowered or "causal" in variant:
        return "causal"
    if (
        name in ("ForSequenceClassificationLoss", "ForTokenClassification", "ForTokenClassificationLoss")
        or "seq_cls_loss" in lowered
        or "token_cls_loss" in lowered
        or variant in ("seq_cls", "token_cls")
    ):
        return "cls"
    return None


def _handle_variants(tree: ast.Module) -> dict[str, str]:
    """Loss handles with a literal variant (`veomni_x = OpSlot("cross_entropy_loss", "variant")`): name -> variant."""
    out: dict[str, str] = {}
    for node in _walk(tree):
        if not (
            isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.value.args) >= 2
        ):
            continue
        op, variant = node.value.args[0], node.value.args[1]
        if not (isinstance(variant, ast.Constant) and isinstance(variant.value, str)):
            continue
        if not (isinstance(op, ast.Constant) and isinstance(op.value, str) and "loss" in op.value):
            continue
        if last_name(node.value.func) not in ("OpSlot", "VeomniOp", "VeomniKernel"):
            continue
        for target in node.targets:
            name = last_name(target)
            if name:
                out[name] = variant.value
    return out


@functools.lru_cache(maxsize=16)
def _wrapper_arity(path: str, mtime: float, size: int) -> int | None:
    """The one tuple length every `For...Loss` wrapper of the module returns (None: none, or they disagree)."""
    parsed = load_file(path)  # the run's one tree of the file (shared with the file pass)
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    found: set[int] = set()
    for stmt in tree.body:
        if not (
            isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("For") and stmt.name.endswith("Loss")
        ):
            continue
        for node in _walk(stmt):
            if isinstance(node, ast.Return) and node.value is not None:
                if not isinstance(node.value, ast.Tuple):
                    return None
                found.add(len(node.value.elts))
    return next(iter(found)) if len(found) == 1 else None


def tree_loss_arity(root: str | None) -> tuple[int, str] | None:
    """How many values the tree's loss wrappers return, and the module that says so."""
    if root is None:
        return None
    for rel in _WRAPPER_MODULES:
        path = Path(root, rel)
        if path.is_file():
            stat = path.stat()
            arity = _wrapper_arity(str(path), stat.st_mtime, stat.st_size)
            if arity is not None:
                return arity, rel
    return None


def _returns_wrapper_tuple(call: ast.Call, variants: dict[str, str]) -> str | None:
    name = last_name(call.func)
    if name is None:
        return None
    if name == "loss_function" or _kind(name, variants) is not None:
        return name
    return None


class LossHeadBinding(Rule):
    code = "NPU419"
    name = "loss-head-binding"
    summary = "A classification head is bound to the causal-LM loss (or a causal-LM head to the classification loss), or a loss wrapper's return is unpacked into another number of values than the tree's wrappers return."
    why = (
        "VeOmni binds one loss per head: the causal-LM loss shifts the labels by one position (token t is "
        "scored against label t+1), the sequence/token-classification loss does not. A classification head "
        "(`...ForSequenceClassification`, `...ForTokenClassification`) whose methods bind or call the causal "
        "loss (`ForCausalLMLoss`, a `causal_lm_loss` handle, a handle declared with a causal variant) trains every "
        "position against its neighbour's label; the reverse pairing drops the shift of a causal-LM head. The "
        "tree's loss wrappers (`self.loss_function`, the loss handles) all return one tuple, whose length is "
        "read from the tree's cross-entropy module: unpacking another number of values raises on every labelled "
        "step, on whichever branch (fused or eager) does it."
    )
    bad = (
        Example(
            """
            from functools import partial

            from veomni.models_kernel.loss_utils import ForCausalLMLoss


            @config.modify_init("MistralForTokenClassification")
            def token_head_init(self, config):
                super(MistralForTokenClassification, self).__init__(config)
                self.loss_function = partial(ForCausalLMLoss, op=self.ce_op)
            """,
            path="veomni/models_kernel/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="a token-classification head bound to the causal-LM loss",
        ),
        Example(
            """
            lm_ce = OpSlot("cross_entropy_loss", "causal")


            class PhiForSequenceClassification(PhiPreTrainedModel):
                def forward(self, input_ids=None, labels=None, **kwargs):
                    hidden = self.model(input_ids, **kwargs).last_hidden_state
                    scores = self.score(hidden)
                    loss, scores, _ = lm_ce(logits=scores, labels=labels, vocab_size=self.num_labels, **kwargs)
                    return loss, scores
            """,
            path="veomni/models/transformers/phi/generated/patched_modeling_phi_gpu.py",
            title="a handle declared with the causal variant called by a classification head",
        ),
    )
    good = (
        Example(
            """
            from functools import partial

            from veomni.models_kernel.loss_utils import ForCausalLMLoss, ForSequenceClassificationLoss


            @config.modify_init("MistralForCausalLM")
            def lm_head_init(self, config):
                super(MistralForCausalLM, self).__init__(config)
                self.loss_function = partial(ForCausalLMLoss, op=self.ce_op)


            @config.modify_init("MistralForTokenClassification")
            def token_head_init(self, config):
                super(MistralForTokenClassification, self).__init__(config)
                self.loss_function = partial(ForSequenceClassificationLoss, op=self.ce_op)
            """,
            path="veomni/models_kernel/transformers/mistral/mistral_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: the classification loss to bind depends on the tree's loss module."

    node_types = ()

    def finish(self) -> None:
        ctx = self.ctx
        if ctx.source.kind.test:
            return
        text = ctx.source.text
        if "loss" not in text.lower():
            return
        variants = _handle_variants(ctx.tree) if ("OpSlot" in text or "VeomniOp" in text) else {}
        if "Classification" in text:
            self._head_binding(variants)
        if "loss" in text and "=" in text:
            self._arity(variants)

    def _head_binding(self, variants: dict[str, str]) -> None:
        cls_losses = sorted(
            {
                name
                for n in _walk(self.ctx.tree)
                if isinstance(n, (ast.Name, ast.Attribute))
                for name in [last_name(n)]
                if name and _kind(name, variants) == "cls"
            }
        )
        for cls, func in class_methods(self.ctx.tree):
            if cls.endswith(_CLS_HEADS):
                wrong, head, want = "causal", "classification", "the classification loss"
                if cls_losses:
                    want = f"`{cls_losses[0]}`"
            elif cls.endswith(_LM_HEADS):
                wrong, head, want = "cls", "causal-LM", "the causal-LM loss"
            else:
                continue
            seen: set[str] = set()
            for node in _walk(func):
                if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
                    continue
                name = last_name(node)
                if not name or name in seen or _kind(name, variants) != wrong:
                    continue
                seen.add(name)
                effect = (
                    "it shifts the labels by one, so every position is scored against its neighbour's label"
                    if wrong == "causal"
                    else "it does not shift the labels, so each token is trained to predict itself"
                )
                self.report(
                    node,
                    f"the {head} head `{cls}` uses the {'causal-LM' if wrong == 'causal' else 'classification'} "
                    f"loss `{name}`: {effect}; bind {want}",
                )

    def _arity(self, variants: dict[str, str]) -> None:
        unpacks: list[tuple[ast.Tuple, str]] = []
        for node in _walk(self.ctx.tree):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Call)
            ):
                continue
            if any(isinstance(t, ast.Starred) for t in node.targets[0].elts):
                continue
            name = _returns_wrapper_tuple(node.value, variants)
            if name is not None:
                unpacks.append((node.targets[0], name))
        if not unpacks:
            return
        found = tree_loss_arity(self.ctx.project.root if self.ctx.project else None)
        if found is not None:
            arity, where = found
            source = f"the loss wrappers of `{where}`"
        else:
            # the tree cannot tell: the count the file's other loss unpacks agree on (at least two, a clear majority)
            counts = Counter(len(t.elts) for t, _ in unpacks)
            (arity, most), *rest = counts.most_common()
            if most < 2 or (rest and rest[0][1] >= most):
                return
            source = f"as the file's {most} other unpacks of its loss calls take"
        for target, name in unpacks:
            if len(target.elts) == arity:
                continue
            self.report(
                target,
                f"`{name}(...)` returns {arity} values ({source}), but {len(target.elts)} are unpacked here: every "
                "labelled step raises",
            )
