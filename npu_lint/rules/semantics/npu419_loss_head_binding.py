"""NPU419 loss-head-binding."""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import class_methods, functions_of
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import file_source_module, last_name, upstream_class_method

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
    for node in nodes_of(tree, ast.Assign):
        if not (isinstance(node.value, ast.Call) and len(node.value.args) >= 2):
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


_WEIGHT_KWARGS = ("weights", "weight", "head_weight", "lm_head_weight")
_NOT_VOCAB = ("router", "gate", "expert", "attn", "score")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _method_name(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The method a function is (a spec's `@config.override_method("Cls.meth")` replacement: `meth`)."""
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and last_name(deco.func) == "override_method" and deco.args:
            target = deco.args[0]
            if isinstance(target, ast.Constant) and isinstance(target.value, str) and "." in target.value:
                return target.value.rpartition(".")[2]
    return func.name


def _fused_weights(func: ast.AST) -> list[tuple[ast.expr, str]]:
    """`weights=self.lm_head.weight` given to a loss call: (value, "self.lm_head")."""
    out = []
    for node in nodes_of(func, ast.Call):
        if not isinstance(node, ast.Call):
            continue
        name = last_name(node.func) or ""
        if not ("loss" in name.lower() or "cross_entropy" in name):
            continue
        for kw in node.keywords:
            if kw.arg in _WEIGHT_KWARGS and isinstance(kw.value, ast.Attribute) and kw.value.attr == "weight":
                head = _dotted(kw.value.value)
                if head is not None and head.startswith("self."):
                    out.append((kw.value, head))
    return out


def _eager_heads(func: ast.AST) -> set[str]:
    """Modules a function calls to compute vocabulary logits: `logits = self.lm_head(hidden_states[...])`."""
    out = set()
    for node in _walk(func):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if not any("logits" in n and not any(w in n for w in _NOT_VOCAB) for n in names):
            continue
        head = _dotted(node.value.func)
        if head is not None and head.startswith("self.") and head.count(".") <= 2:
            out.add(head)
    return out


def _head_key(node: ast.AST | None) -> str | None:
    """The head a loss-table key names: "cls" (`"ForSequenceClassification"`), "causal" (`"ForCausalLM"`)."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    if node.value.endswith(_CLS_HEADS):
        return "cls"
    if node.value.endswith(_LM_HEADS):
        return "causal"
    return None


def _table_bindings(tree: ast.Module) -> list[tuple[str, str, ast.expr, int]]:
    """Loss-table entries a file binds: `TABLE["ForSequenceClassification"] = value` and the items of a dict
    literal with head keys (`TABLE.update({...})`): (head kind, key, value, id of the enclosing statement list
    or dict, so entries bound together are compared)."""
    out: list[tuple[str, str, ast.expr, int]] = []
    for node in _walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for stmt in stmts:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                target = stmt.targets[0]
                if isinstance(target, ast.Subscript):
                    kind = _head_key(target.slice)
                    if kind is not None:
                        out.append((kind, target.slice.value, stmt.value, id(stmts)))  # type: ignore[attr-defined]
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                kind = _head_key(key)
                if kind is not None:
                    out.append((kind, key.value, value, id(node)))  # type: ignore[union-attr]
    return out


def _callable_name(value: ast.expr) -> str | None:
    """The loss a table value names: `f`, `mod.f`, `partial(f, ...)`."""
    if isinstance(value, ast.Call) and last_name(value.func) == "partial" and value.args:
        value = value.args[0]
    return last_name(value) if isinstance(value, (ast.Name, ast.Attribute)) else None


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
            from transformers.loss.loss_utils import LOSS_MAPPING


            def bind_fused_losses(fused_fn):
                LOSS_MAPPING["ForCausalLM"] = fused_fn
                LOSS_MAPPING["ForConditionalGeneration"] = fused_fn
                LOSS_MAPPING["ForTokenClassification"] = fused_fn
            """,
            path="veomni/ops/kernels/cross_entropy/install.py",
            title="a token-classification table entry given the causal heads' fused loss",
        ),
        Example(
            """
            from functools import partial

            from .wrappers import ForCausalLMLoss, ForSequenceClassificationLoss

            HEAD_LOSSES = {
                "ForCausalLM": partial(ForCausalLMLoss, impl="blockwise"),
                "ForSequenceClassification": partial(ForCausalLMLoss, impl="blockwise"),
            }


            def _blockwise_seq_cls_factory():
                return partial(ForCausalLMLoss, impl="blockwise")
            """,
            path="veomni/ops/kernels/cross_entropy/registry.py",
            title="a registry dict and a classification factory built from the causal loss",
        ),
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
        Example(
            """
            # Source: transformers.models.qwen2.modeling_qwen2


            class Qwen2ForCausalLM(Qwen2PreTrainedModel):
                def forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                    hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                    loss = logits = None
                    if labels is not None:
                        loss, logits, _ = self.loss_function(
                            logits=None, labels=labels, hidden_states=hidden, weights=self.model.embed_tokens.weight
                        )
                    else:
                        logits = self.lm_head(hidden[:, -logits_to_keep:, :])
                    return loss, logits
            """,
            path="veomni/models/transformers/qwen2/generated/patched_modeling_qwen2_npu.py",
            title="the fused loss projects with the input embeddings, the eager branch with `lm_head`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def causal_forward(self, input_ids=None, labels=None, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                loss, _, _ = self.loss_function(
                    logits=None, labels=labels, hidden_states=hidden_states, weights=self.model.embed_tokens.weight
                )
                return loss
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="a fused-only forward, compared with the upstream forward's head",
        ),
    )
    good = (
        Example(
            """
            from functools import partial

            from transformers.loss.loss_utils import LOSS_MAPPING

            from .wrappers import ForCausalLMLoss, ForSequenceClassificationLoss


            def bind_fused_losses(fused_fn, token_ce):
                LOSS_MAPPING["ForCausalLM"] = fused_fn
                LOSS_MAPPING["ForConditionalGeneration"] = fused_fn
                LOSS_MAPPING["ForTokenClassification"] = partial(ForSequenceClassificationLoss, ce=token_ce)


            def _blockwise_seq_cls_factory():
                return partial(ForSequenceClassificationLoss, impl="eager")
            """,
            path="veomni/ops/kernels/cross_entropy/install.py",
            title="the classification entry keeps its own (unshifted) loss",
        ),
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
        Example(
            """
            # Source: transformers.models.qwen2.modeling_qwen2


            class Qwen2ForCausalLM(Qwen2PreTrainedModel):
                def forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                    hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                    loss = logits = None
                    if labels is not None:
                        loss, logits, _ = self.loss_function(
                            logits=None, labels=labels, hidden_states=hidden, weights=self.lm_head.weight
                        )
                    else:
                        logits = self.lm_head(hidden[:, -logits_to_keep:, :])
                    return loss, logits
            """,
            path="veomni/models/transformers/qwen2/generated/patched_modeling_qwen2_npu.py",
            title="both branches project with `lm_head`",
        ),
    )
    fix_safety = "No fix: the classification loss to bind depends on the tree's loss module."

    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # model code, and the kernels' loss tables (veomni/ops)
        return not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        if ctx.source.kind.test:
            return
        text = ctx.source.text
        if "loss" not in text.lower():
            return
        variants = _handle_variants(ctx.tree) if ("OpSlot" in text or "VeomniOp" in text) else {}
        if "Classification" in text and "For" in text:
            self._table_binding(variants)  # loss tables and factories: model code and the tree's kernels
        if not ctx.source.kind.model_code:
            return
        if "Classification" in text:
            self._head_binding(variants)
        if "loss" in text and "=" in text:
            self._arity(variants)
        if "weight" in text:
            self._fused_head()

    def _fused_head(self) -> None:
        """The fused loss projects with `weights=<module>.weight`: the module must be the head whose call gives the
        eager logits (in the same function, else in the upstream forward the method replaces)."""
        ctx = self.ctx
        owners = {id(func): cls for cls, func in class_methods(ctx.tree)}
        module: str | None = None
        for func in functions_of(ctx.tree):
            fused = _fused_weights(func)
            if not fused:
                continue
            heads = _eager_heads(func)
            where = "its eager branch"
            if not heads and id(func) in owners:
                if module is None:
                    module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path) or ""
                if module.startswith("transformers."):
                    upstream = upstream_class_method(module, owners[id(func)], _method_name(func))
                    heads = set() if upstream is None else _eager_heads(upstream)
                    where = "upstream's forward"
            for value, head in fused:
                if heads and head not in heads:
                    want = sorted(heads)[0]
                    self.report(
                        value,
                        f"the fused loss projects with `{head}.weight`, but {where} computes the logits with "
                        f"`{want}`: training optimises another matrix than the one that generates (for an untied "
                        f"checkpoint `{want}` never gets a gradient); pass `{want}.weight`",
                    )

    def _table_binding(self, variants: dict[str, str]) -> None:
        """A loss table (`LOSS_MAPPING`, a registry dict) binds each head's loss: a classification key must not get
        the causal-LM loss (named so, or the very value a causal-LM key gets alongside it), and the reverse."""
        for func in functions_of(self.ctx.tree):
            lowered = func.name.lower()
            if not any(w in lowered for w in ("seq_cls", "token_cls", "classification")):
                continue
            for node in _walk(func):
                if isinstance(node, ast.Return) and node.value is not None:
                    name = _callable_name(node.value)
                    if name and _kind(name, variants) == "causal":
                        self.report(
                            node.value,
                            f"`{func.name}` builds the loss of a classification head from `{name}`, the causal-LM "
                            "loss: it shifts the labels by one position, so each class label is scored at its "
                            "neighbour's position; build it from the classification loss",
                        )
        bindings = _table_bindings(self.ctx.tree)
        if not bindings:
            return
        lm_values: dict[int, list[tuple[str, str]]] = {}
        for kind, key, value, scope in bindings:
            if kind == "causal":
                lm_values.setdefault(scope, []).append((key, ast.dump(value)))
        for kind, key, value, scope in bindings:
            name = _callable_name(value)
            named = _kind(name, variants) if name else None
            text = ast.unparse(value)
            if kind == "cls":
                same = next((k for k, dumped in lm_values.get(scope, []) if dumped == ast.dump(value)), None)
                if named == "causal" or same is not None:
                    how = (
                        f"`{name}`, the causal-LM loss"
                        if same is None
                        else f"`{text}`, what `{same}` gets here"
                    )
                    self.report(
                        value,
                        f"the `{key}` entry is bound to {how}: a causal-LM loss shifts the labels by one position, "
                        "so each token-level class label is scored at its neighbour's position; bind the "
                        "classification loss (no shift) for this head",
                    )
            elif named == "cls":
                self.report(
                    value,
                    f"the `{key}` entry is bound to `{name}`, the classification loss: it does not shift the labels, "
                    "so each token is trained to predict itself; bind the causal-LM loss for this head",
                )

    def _head_binding(self, variants: dict[str, str]) -> None:
        cls_losses = sorted(
            {
                name
                for n in nodes_of(self.ctx.tree, ast.Name, ast.Attribute)
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
        for node in nodes_of(self.ctx.tree, ast.Assign):
            if not (
                len(node.targets) == 1
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
