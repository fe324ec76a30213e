"""NPU427 loss-branch-inputs."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of
from npu_lint.veomni.upstream import last_name

# the test of a dispatch between a kernel and the eager loss
_DISPATCH_TESTS = ("use_non_eager_impl", "non_eager", "fused", "kernel", "use_liger", "impl")
# the inputs a fused-linear loss path needs besides the logits (the hidden states, the head's weight) and the
# pre-shifted targets
_CARRIED = ("hidden_states", "weights", "weight", "lm_head_weight", "shift_labels")
# not compared: `ignore_index=` / `vocab_size=` (spelled out with their default on one side only, the same input)


def _branch_calls(stmts: list[ast.stmt], test: str = "") -> list[ast.Call]:
    """The main-loss calls of one branch (nested functions skipped): callee named like a loss, not an
    auxiliary one, or the kernel the dispatch tests (`if fused_kernel is not None: return fused_kernel(...)`)."""
    out: list[ast.Call] = []
    stack: list[ast.AST] = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call):
            name = (last_name(node.func) or "").lower()
            tested = bool(test) and ast.unparse(node.func) in test
            constructor = (last_name(node.func) or "x")[:1].isupper()  # a loss module built, not called
            if not constructor and (
                tested or ("loss" in name and not any(w in name for w in ("aux", "balanc", "z_loss", "kl")))
            ):
                if any(k.arg for k in node.keywords):
                    out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


class LossBranchInputs(Rule):
    code = "NPU427"
    name = "loss-branch-inputs"
    summary = (
        "The two branches of a loss dispatch (the kernel handle and the eager `loss_function`) hand the loss "
        "different inputs: one passes `hidden_states=` / `weights=` (or `shift_labels=`) that the "
        "other omits."
    )
    why = (
        "A patched forward that dispatches its loss (`if veomni_causal_lm_loss.use_non_eager_impl: ... else: "
        "self.loss_function(...)`) runs the eager branch whenever no fused kernel is bound, which is the usual state "
        "of a fresh NPU port. VeOmni's loss wrappers serve both branches with the same contract: the hidden states "
        "and the `lm_head` weight are needed for the fused-linear and per-token log-prob paths "
        "(`return_log_probs`), `shift_labels` changes what is scored. An input passed on one branch "
        'and not the other makes the eager path raise ("requires hidden_states") or score differently on exactly '
        "the devices that take it. Checked in every function, spec, generated copy and helper: an `if` whose "
        "branches each call a main loss (a callee named like a loss, not an auxiliary one) with keywords; the "
        "keywords of these inputs given on one side only are reported on the call that lacks them (a loss module's "
        "constructor, `ignore_index=` and `vocab_size=` are not compared: a default spelled out on one side is the same input)."
    )
    bad = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "standard")


            def toy_lm_forward(self, input_ids=None, labels=None, **kwargs):
                hidden_states = self.model(input_ids).last_hidden_state
                if veomni_causal_lm_loss.use_non_eager_impl:
                    loss, logits, aux = veomni_causal_lm_loss(
                        logits=None,
                        labels=labels,
                        vocab_size=self.vocab_size,
                        hidden_states=hidden_states,
                        weights=self.lm_head.weight,
                        **kwargs,
                    )
                else:
                    logits = self.lm_head(hidden_states)
                    loss, _, aux = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
                return loss, logits, aux
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="the eager branch loses the hidden states and the head weight",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "standard")


            def toy_lm_forward(self, input_ids=None, labels=None, **kwargs):
                hidden_states = self.model(input_ids).last_hidden_state
                head = {"hidden_states": hidden_states, "weights": self.lm_head.weight}
                if veomni_causal_lm_loss.use_non_eager_impl:
                    loss, logits, aux = veomni_causal_lm_loss(
                        logits=None, labels=labels, vocab_size=self.vocab_size, **head, **kwargs
                    )
                else:
                    logits = self.lm_head(hidden_states)
                    loss, _, aux = self.loss_function(
                        logits=logits, labels=labels, vocab_size=self.vocab_size, **head, **kwargs
                    )
                return loss, logits, aux
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: the missing input has to be passed by hand."
    requires = ("loss", "if ")
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        seen: set[int] = set()
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "loss"):
            for holder in _walk(func):
                for field in ("body", "orelse"):
                    stmts = getattr(holder, field, None)
                    if not isinstance(stmts, list):
                        continue
                    for index, node in enumerate(stmts):
                        if not isinstance(node, ast.If) or id(node) in seen:
                            continue
                        seen.add(id(node))
                        if node.orelse:
                            other: list[ast.stmt] = node.orelse
                            if isinstance(other[0], ast.If) and len(other) == 1:
                                continue  # an elif chain: more than two paths, not one dispatch
                        elif node.body and isinstance(node.body[-1], ast.Return):
                            other = stmts[index + 1 :]  # `if fused: return kernel(...)`, then the eager path
                        else:
                            continue
                        self._branches(node, other)

    def _branches(self, node: ast.If, other: list[ast.stmt]) -> None:
        test = ast.unparse(node.test).lower()
        if not any(w in test for w in _DISPATCH_TESTS):
            return  # a model condition (soft-capping, a head kind): its branches differ on purpose
        body, orelse = _branch_calls(node.body, ast.unparse(node.test)), _branch_calls(other)
        if len(body) != 1 or len(orelse) != 1:
            return
        callees = ast.unparse(body[0].func).lower() + ast.unparse(orelse[0].func).lower()
        if "cls" in callees or "classif" in callees:
            return  # classification losses take no hidden states on either path
        self._compare(body[0], orelse[0])
        self._compare(orelse[0], body[0])

    def _compare(self, given: ast.Call, other: ast.Call) -> None:
        if any(k.arg is None and not isinstance(k.value, ast.Name) for k in other.keywords):
            return  # `**{...}` spelled inline: not readable
        mine = {k.arg for k in given.keywords if k.arg}
        theirs = {k.arg for k in other.keywords if k.arg}
        if any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id != "kwargs" for k in other.keywords
        ):
            return  # a local dict of inputs (`**head`): may carry them
        missing = [k for k in _CARRIED if k in mine and k not in theirs]
        if not missing:
            return
        listed = ", ".join(f"`{k}=`" for k in missing)
        self.report(
            other,
            f"`{ast.unparse(other.func)}` is not given {listed}, which the other branch's "
            f"`{ast.unparse(given.func)}` passes: the two paths of the same loss get different inputs, so the path "
            "taken without a fused kernel (the usual one on a fresh NPU port) fails or scores differently",
        )
