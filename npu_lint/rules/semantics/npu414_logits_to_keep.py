"""NPU414 logits-to-keep."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import LossRule, PatchedMethod, def_span, names_in, params_of

_PARAM = "logits_to_keep"


def _derived(func: ast.AST, seed: str) -> set[str]:
    """`seed` and every local assigned (transitively) from an expression that reads it."""
    assigns: list[tuple[set[str], set[str]]] = []
    for node in _walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in _walk(t) if isinstance(n, ast.Name)}
            if node.value is not None:
                assigns.append((bound, {n.id for n in _walk(node.value) if isinstance(n, ast.Name)}))
    found = {seed}
    changed = True
    while changed:
        changed = False
        for bound, used in assigns:
            if used & found and not bound <= found:
                found |= bound
                changed = True
    return found


def _negated(func: ast.AST) -> bool:
    """Some expression negates `logits_to_keep` (`slice(-logits_to_keep, None)`: keep the last positions)."""
    return any(
        isinstance(n, ast.UnaryOp)
        and isinstance(n.op, ast.USub)
        and isinstance(n.operand, ast.Name)
        and n.operand.id == _PARAM
        for n in _walk(func)
    )


def _unsigned_starts(func: ast.AST) -> list[ast.expr]:
    """Slice starts that are `logits_to_keep` itself, not negated: `slice(logits_to_keep, None)`,
    `hidden_states[:, logits_to_keep:, :]` (they keep all positions but the first ones)."""
    out: list[ast.expr] = []
    for n in _walk(func):
        start: ast.expr | None = None
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "slice"
            and len(n.args) >= 2
        ):
            start = n.args[0]
        elif isinstance(n, ast.Slice):
            start = n.lower
        if isinstance(start, ast.Name) and start.id == _PARAM:
            out.append(start)
    return out


def _default(func: ast.FunctionDef) -> ast.expr | None:
    """The default of the `logits_to_keep` parameter (positional or keyword-only), if any."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return next((d for a, d in pairs if a.arg == _PARAM), None)


def _slice_axes(func: ast.AST) -> list[tuple[ast.Subscript, int, int]]:
    """Subscripts that index with the `logits_to_keep` slice (a local derived from it) inside a tuple index:
    (node, the axis it sits on, the tuple's length)."""
    derived = _derived(func, _PARAM) - {_PARAM}
    out = []
    for n in _walk(func):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Tuple):
            for axis, elt in enumerate(n.slice.elts):
                if isinstance(elt, ast.Name) and elt.id in derived:
                    out.append((n, axis, len(n.slice.elts)))
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id in derived:
            out.append((n, 0, 1))  # `hidden_states[slice_indices]`: the first axis
    return out


def _front_axis(node: ast.Subscript, axis: int, length: int, rank: int) -> int:
    """The axis counted from the front for a tensor of ``rank`` axes (`[..., s, :]` on 3 axes is axis 1)."""
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if elts and isinstance(elts[0], ast.Constant) and elts[0].value is Ellipsis:
        return rank + axis - length
    return axis


def _lm_head_calls(func: ast.AST) -> list[ast.Call]:
    return [
        n
        for n in _walk(func)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "lm_head"
    ]


def _slices_lm_head(func: ast.AST) -> bool:
    """Some `lm_head(...)` call's input reads `logits_to_keep` (directly or through locals)."""
    derived = _derived(func, _PARAM)
    return any(
        any(isinstance(n, ast.Name) and n.id in derived for arg in call.args for n in _walk(arg))
        for call in _lm_head_calls(func)
    )


class LogitsToKeep(LossRule):
    code = "NPU414"
    name = "logits-to-keep"
    summary = "A patched causal-LM forward drops or ignores the upstream `logits_to_keep` parameter, changes its default, applies the slice on another axis, or slices from `logits_to_keep` where upstream slices from `-logits_to_keep`."
    why = (
        "Upstream causal-LM forwards take `logits_to_keep` and project only the last positions through "
        "`lm_head` (generation and RL rollouts keep 1; an int or an index tensor). A patched forward that drops "
        "the parameter, or keeps it but never reads it, computes the full `[batch, seq, vocab]` logits: memory "
        "blows up at large vocabularies and callers get a different shape than they asked for."
        " A slice that starts at `logits_to_keep` where the upstream one starts at `-logits_to_keep` (the sign dropped, in a `slice(...)` call or a subscript) keeps every position but the first ones instead of the last ones, and is reported too. So is the slice applied on another axis of the hidden states than upstream's (the batch instead of the positions), and an integer default other than upstream's (`logits_to_keep=1` where upstream has 0): the trainer never passes it, so training computes the loss on the last position only."
        " A forward that reads it (a slice is computed) but whose `lm_head` projections none use it (the path without labels projects all positions, or a hard-coded slice, or no projection without labels) is reported too, when the upstream forward slices the `lm_head` input."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="kept in the signature, never read",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                loss = None
                if labels is not None:
                    logits = self.lm_head(hidden_states)
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                else:
                    logits = self.lm_head(hidden_states[:, -1:, :])
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="a slice computed, but the projection ignores it",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralForCausalLM.forward")
            def mistral_lm_forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                if isinstance(logits_to_keep, int):
                    states = states[:, logits_to_keep:, :]
                else:
                    states = states[:, logits_to_keep, :]
                scores = self.lm_head(states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, scores
            """,
            path="veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py",
            title="the slice starts at `logits_to_keep`, not `-logits_to_keep`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2.modeling_qwen2", target_file="x.py")


            @config.override_method("Qwen2ForCausalLM.forward")
            def qwen2_lm_forward(self, input_ids=None, labels=None, logits_to_keep=1, **kwargs):
                states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                scores = self.lm_head(states[:, keep, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, scores
            """,
            path="veomni/models/transformers/qwen2/qwen2_npu_patch_gen_config.py",
            title="the default changed to keep only the last position",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2.modeling_qwen2", target_file="x.py")


            @config.override_method("Qwen2ForCausalLM.forward")
            def qwen2_lm_forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                scores = self.lm_head(states[keep, :, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, scores
            """,
            path="veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py",
            title="the slice applied on the batch axis",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[keep])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_npu_patch_gen_config.py",
            title="the slice as a plain subscript: it cuts the batch",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                loss = None
                if labels is not None:
                    logits = self.lm_head(hidden_states)
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                else:
                    kept = hidden_states[:, slice_indices, :]
                    logits = self.lm_head(kept)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="the slice applied through a local, on the path without labels",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralForCausalLM.forward")
            def mistral_lm_forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                if isinstance(logits_to_keep, int):
                    states = states[:, -logits_to_keep:, :]
                else:
                    states = states[:, logits_to_keep, :]
                scores = self.lm_head(states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=scores, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, scores
            """,
            path="veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py",
            title="the last positions kept through a subscript",
        ),
    )
    fix_safety = "No fix: where to slice depends on the loss path the patch chose."

    def check(self, patched: PatchedMethod) -> None:
        if _PARAM not in params_of(patched.upstream) or _PARAM not in names_in(patched.upstream):
            return
        func = patched.func
        if _PARAM not in params_of(func):
            self.report(
                def_span(self.ctx, func),
                f"`{patched.cls}.forward` drops the upstream `{_PARAM}` parameter: full logits are computed",
            )
            return
        # the slice moved to another axis (`hidden_states[slice_indices, :, :]` cuts the batch, not the positions)
        upstream_axes = {(axis, size) for _, axis, size in _slice_axes(patched.upstream)}
        if len(upstream_axes) == 1:
            (want, size) = next(iter(upstream_axes))
            for node, axis, length in _slice_axes(func):
                if length <= size and _front_axis(node, axis, length, size) != want:
                    self.report(
                        node,
                        f"the `{_PARAM}` slice is applied on axis {axis} of `{ast.unparse(node.value)}`, where "
                        f"upstream applies it on axis {want} (the sequence positions): another axis is cut",
                    )
        # the default changed: upstream keeps every position unless asked (0); a default of 1 trains on one token
        mine, theirs = _default(func), _default(patched.upstream)
        if (
            isinstance(mine, ast.Constant)
            and isinstance(theirs, ast.Constant)
            and type(mine.value) is int
            and type(theirs.value) is int
            and mine.value != theirs.value
        ):
            self.report(
                mine,
                f"`{_PARAM}` defaults to {mine.value} where upstream defaults to {theirs.value}: a caller that does "
                f"not pass it (the trainer) gets the logits of {'every' if mine.value == 0 else f'only the last {mine.value}'} "
                "position(s), and the loss is computed on another set of positions than upstream",
            )
        body_names = {n for stmt in func.body for n in names_in(stmt)}
        if _PARAM not in body_names:
            arg = next(a for a in [*func.args.args, *func.args.kwonlyargs] if a.arg == _PARAM)
            self.report(arg, f"`{_PARAM}` is accepted but never read: full logits are computed")
            return
        # the slice keeps the first positions off instead of the last ones on (the sign dropped)
        if _negated(patched.upstream) and not _negated(func):
            for start in _unsigned_starts(func):
                self.report(
                    start,
                    f"the slice starts at `{_PARAM}` where upstream starts at `-{_PARAM}`: it drops the first "
                    f"`{_PARAM}` positions instead of keeping the last ones (`{_PARAM}=1` returns almost every "
                    "position, and the next-token logit is not where callers read it)",
                )
            if _unsigned_starts(func):
                return
        # read (a slice is computed) but no projection uses it, where upstream slices the `lm_head` input
        calls = _lm_head_calls(func)
        if calls and _slices_lm_head(patched.upstream) and not _slices_lm_head(func):
            # the projection of the path without labels comes last in the forwards
            call = max(calls, key=lambda c: (c.lineno, c.col_offset))
            self.report(
                call,
                f"no `lm_head` projection uses `{_PARAM}` (upstream projects `hidden_states[:, slice_indices, :]`): "
                "full logits are computed and callers get another shape than they asked for",
            )
