"""NPU416 loss-logits-overwritten."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import LossRule, PatchedMethod, loss_calls
from npu_lint.veomni.upstream import last_name


def _projections(func: ast.AST) -> list[bool]:
    """For every `lm_head(...)` call of a function: whether it runs only when labels are given (inside the body
    of an `if labels ...:` branch)."""
    out: list[bool] = []

    def mentions_labels(test: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == "labels" for n in _walk(test))

    def visit(stmts: list[ast.stmt], labelled: bool) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If):
                inner = labelled or mentions_labels(stmt.test)
                visit(stmt.body, inner)
                visit(stmt.orelse, labelled)
                continue
            children = [getattr(stmt, f, None) for f in ("body", "orelse", "finalbody")]
            nested = [c for c in children if isinstance(c, list)]
            if nested:
                for block in nested:
                    visit(block, labelled)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body, labelled)
                continue
            out.extend(
                labelled for n in _walk(stmt) if isinstance(n, ast.Call) and last_name(n.func) == "lm_head"
            )

    visit(getattr(func, "body", []), False)
    return out


def _bound(target: ast.AST) -> set[str]:
    return {n.id for n in _walk(target) if isinstance(n, ast.Name)}


def _projects(value: ast.AST, projected: set[str]) -> bool:
    """The value is the output projection (an `lm_head(...)` call) or an expression of a local holding it."""
    for node in _walk(value):
        if isinstance(node, ast.Call) and last_name(node.func) == "lm_head":
            return True
        if isinstance(node, ast.Name) and node.id in projected:
            return True
    return False


def _overwrites(func: ast.FunctionDef) -> list[tuple[ast.Name, ast.Call]]:
    """Locals that hold the `lm_head` projection when a loss call's return is unpacked into them, where the
    loss call reads them (it consumed the projection and hands back something else in its place)."""
    losses = {id(c) for c in loss_calls(func)}
    found: list[tuple[ast.Name, ast.Call]] = []

    def visit(stmts: list[ast.stmt], projected: set[str]) -> set[str]:
        projected = set(projected)
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = stmt.value
                bound = set().union(*(_bound(t) for t in targets))
                if isinstance(value, ast.Call) and id(value) in losses:
                    read = {n.id for n in _walk(value) if isinstance(n, ast.Name)}
                    for target in targets:
                        for node in _walk(target):
                            if isinstance(node, ast.Name) and node.id in projected and node.id in read:
                                found.append((node, value))
                    projected -= bound
                elif _projects(value, projected):
                    projected |= bound
                else:
                    projected -= bound
            elif isinstance(stmt, ast.If):
                projected = visit(stmt.body, projected) & visit(stmt.orelse, projected)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                projected &= visit(stmt.body, projected)
                projected &= visit(stmt.orelse, projected)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                projected = visit(stmt.body, projected)
            elif isinstance(stmt, ast.Try):
                after = visit(stmt.body, projected)
                for handler in stmt.handlers:
                    after &= visit(handler.body, projected)
                after = visit(stmt.orelse, after)
                projected = visit(stmt.finalbody, after)
            elif isinstance(stmt, ast.Match):
                projected = set.intersection(projected, *(visit(case.body, projected) for case in stmt.cases))
        return projected

    visit(func.body, set())
    return found


def _read_after(func: ast.FunctionDef, name: str, line: int) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > line
        for n in _walk(func)
    )


class LossLogitsOverwritten(LossRule):
    code = "NPU416"
    name = "loss-logits-overwritten"
    summary = "A patched forward unpacks the loss call's return into the local holding the `lm_head` logits, so the model outputs what the loss hands back."
    why = (
        "Upstream forwards project `logits = self.lm_head(hidden_states)`, pass them to the loss and return them "
        "unchanged (`[batch, seq, vocab]`). VeOmni's loss helpers return a tuple whose second slot is the loss's "
        "own view of the logits: flattened to `[tokens, vocab]`, upcast to fp32, or None on the fused-linear "
        "path. A forward that unpacks that slot back into the variable holding the projection (in the eager "
        "fallback of an OpSlot guard, say) returns a differently shaped tensor, or none, to every caller "
        "(generation, RL log-probs, evaluation), and its branches disagree. The local is followed through "
        "branches and rebindings; it is reported only when it is read again after the loss call."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralForCausalLM.forward")
            def mistral_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                scores = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss, scores, extra = self.loss_function(
                        logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs
                    )
                return loss, scores
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2.modeling_qwen2", target_file="x.py")


            @config.override_method("Qwen2ForCausalLM.forward")
            def qwen2_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = None
                if labels is not None and fused_loss.use_non_eager_impl:
                    loss, logits, _ = fused_loss(hidden_states=hidden_states, weights=self.lm_head.weight, labels=labels)
                elif labels is not None:
                    projected = self.lm_head(hidden_states)
                    logits = projected.float()
                    loss, logits, _ = self.loss_function(logits, labels, self.config.vocab_size, **kwargs)
                else:
                    loss = None
                    logits = self.lm_head(hidden_states[:, slice_indices, :])
                return loss, logits
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
            title="in the eager fallback, through an upcast local (the fused branch, which never projected, is not reported)",
        ),
        Example(
            """
            # Source: transformers.models.qwen2.modeling_qwen2


            class Qwen2ForCausalLM(Qwen2PreTrainedModel):
                def forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                    hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                    keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                    loss = logits = None
                    if labels is not None:
                        logits = self.lm_head(hidden_states[:, keep, :])
                        loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
                    return CausalLMOutputWithPast(loss=loss, logits=logits)
            """,
            path="veomni/models/transformers/qwen2/generated/patched_modeling_qwen2_gpu.py",
            title="the logits projected only when labels are given",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralForCausalLM.forward")
            def mistral_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                scores = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss, _, extra = self.loss_function(
                        logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs
                    )
                    if extra is not None:
                        scores = None
                return loss, scores
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2.modeling_qwen2", target_file="x.py")


            @config.override_method("Qwen2ForCausalLM.forward")
            def qwen2_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = None
                loss = None
                if labels is not None:
                    loss, logits, aux = fused_loss(logits=logits, labels=labels, hidden_states=hidden_states, weights=self.lm_head.weight)
                else:
                    logits = self.lm_head(hidden_states)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
            title="a fused loss that never received a projection fills the logits slot",
        ),
    )
    fix_safety = "No fix: which slot to keep depends on the branch contract (the fused-linear path empties the logits slot)."

    def check(self, patched: PatchedMethod) -> None:
        self._no_labels_path(patched)
        if _overwrites(patched.upstream):
            return  # the upstream forward does the same: not a divergence of the patch
        for name, call in _overwrites(patched.func):
            if not _read_after(patched.func, name.id, call.end_lineno or call.lineno):
                continue
            self.report(
                name,
                f"`{name.id}` holds the `lm_head` projection, but the return of `{ast.unparse(call.func)}(...)` is "
                f"unpacked into it: the forward outputs the loss's view of the logits (flattened, upcast, or None on "
                f"the fused-linear path) instead of the `[batch, seq, vocab]` projection upstream returns; bind that "
                f"slot to `_`",
            )

    def _no_labels_path(self, patched: PatchedMethod) -> None:
        """Upstream projects the logits whether or not labels are given; a patch that projects them only inside
        its `if labels ...:` branch returns no logits at inference or evaluation."""
        upstream = _projections(patched.upstream)
        if not upstream or all(upstream):
            return
        mine = _projections(patched.func)
        if not mine or not all(mine):
            return
        returns = [n for n in _walk(patched.func) if isinstance(n, ast.Return) and n.value is not None]
        where: ast.AST = max(returns, key=lambda r: r.lineno) if returns else patched.func
        self.report(
            where,
            f"`{patched.cls}.forward` projects the logits with `lm_head` only when `labels` are given, where "
            "upstream always does: without labels (generation, evaluation, `logits_to_keep`) it returns no logits; "
            "project `hidden_states[:, slice_indices, :]` on the no-labels branch",
        )
