"""NPU411 logit-softcapping."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import (
    LossRule,
    PatchedMethod,
    def_span,
    functions_of,
    loss_calls,
    mentions_attr,
    path_before,
)

_FUSED_STATES = ("hidden_states", "hidden", "inputs")
_FUSED_WEIGHTS = ("weights", "weight", "head_weight", "lm_head_weight")


def _is_cap_ref(node: ast.AST, aliases: set[str]) -> bool:
    name = last_name(node) or ""
    return "softcap" in name.lower() or name in aliases


def _mentions_cap(node: ast.AST, aliases: set[str]) -> bool:
    return any(_is_cap_ref(n, aliases) for n in _walk(node))


def _cap_value(node: ast.AST) -> bool:
    """The cap itself (`config.final_logit_softcapping`, `getattr(config, "final_logit_softcapping", None)`,
    `float(cap)`), not a value computed with it (`logits / cap` is no alias of the cap)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _is_cap_ref(node, set())
    if not isinstance(node, ast.Call):
        return False
    callee = call_name(node)
    if callee == "getattr" and len(node.args) >= 2:
        return isinstance(node.args[1], ast.Constant) and "softcap" in str(node.args[1].value).lower()
    if callee in ("float", "get") and node.args:
        first = node.args[0]
        return _cap_value(first) or (
            isinstance(first, ast.Constant) and "softcap" in str(first.value).lower()
        )
    return False


def _cap_aliases(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in _walk(func):
        if isinstance(node, ast.Assign) and _cap_value(node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _cap_steps(stmt: ast.stmt, aliases: set[str]) -> tuple[bool, bool, bool]:
    """(divides by a cap, takes a tanh, multiplies by a cap) within one simple statement."""
    div = tanh = mul = False
    for node in _walk(stmt):
        if isinstance(node, ast.BinOp) and _mentions_cap(node.right, aliases):
            div = div or isinstance(node.op, ast.Div)
            mul = mul or isinstance(node.op, ast.Mult)
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mult)
            and _mentions_cap(node.left, aliases)
        ):
            mul = True
        elif isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "tanh")
            or (isinstance(node.func, ast.Name) and node.func.id == "tanh")
        ):
            tanh = True
    return div, tanh, mul


def partial_caps(func: ast.AST) -> list[tuple[ast.stmt, str]]:
    """Soft-capping applied partially in one statement list: `x / cap` and `tanh` without the final `* cap`
    (or a multiply without the division), with the missing step named."""
    aliases = _cap_aliases(func)
    out = []
    for node in _walk(func):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            steps = []
            for stmt in stmts:
                if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
                    found = _cap_steps(stmt, aliases)
                    if any(found):
                        steps.append((stmt, found))
            if not steps:
                continue
            div = any(f[0] for _, f in steps)
            tanh = any(f[1] for _, f in steps)
            mul = any(f[2] for _, f in steps)
            if not (div or mul) or not tanh and not (div and mul):
                continue  # no cap arithmetic here, or only a tanh / a plain scale
            missing = [
                w
                for w, ok in (
                    ("the division by the cap", div),
                    ("the tanh", tanh),
                    ("the final multiplication by the cap", mul),
                )
                if not ok
            ]
            if missing:
                out.append((steps[0][0], missing[0]))
    return out


def _is_tanh(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "tanh")
        or (isinstance(node.func, ast.Name) and node.func.id == "tanh")
    )


def _capped_names(stmt: ast.stmt, aliases: set[str]) -> set[str]:
    """Names a statement soft-caps: an assignment whose value takes a tanh, or an `if <cap> ...:` block whose body
    does (the block counts once, whatever the number of its steps)."""
    if isinstance(stmt, ast.Assign) and any(_is_tanh(n) for n in _walk(stmt.value)):
        return {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    if isinstance(stmt, ast.If) and _mentions_cap(stmt.test, aliases):
        out: set[str] = set()
        for inner in stmt.body:
            out |= _capped_names(inner, aliases)
        return out
    return set()


def _tanh_runs(func: ast.AST) -> list[ast.stmt]:
    """Second soft-capping of the same tensor in one straight-line statement list (the cap applied twice),
    a capping `if <cap> is not None:` block counting as one application."""
    aliases = _cap_aliases(func)
    out = []
    for node in _walk(func):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            seen: set[str] = set()
            for stmt in stmts:
                capped = _capped_names(stmt, aliases)
                if capped & seen:
                    out.append(stmt)
                    break
                seen |= capped
    return out


def _test_states(test: ast.AST, aliases: set[str]) -> tuple[str | None, str | None]:
    """What an `if` test says of the cap in its body and in its `else`: "none" (unset), "set", or None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _mentions_cap(test.left, aliases):
        right = test.comparators[0]
        if isinstance(right, ast.Constant) and right.value is None:
            if isinstance(test.ops[0], ast.Is):
                return "none", "set"
            if isinstance(test.ops[0], ast.IsNot):
                return "set", "none"
        return None, None
    if isinstance(test, (ast.Name, ast.Attribute)) and _is_cap_ref(test, aliases):
        return "set", "none"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        body, orelse = _test_states(test.operand, aliases)
        return orelse, body
    if isinstance(test, ast.BoolOp):
        states = [_test_states(v, aliases) for v in test.values]
        if isinstance(test.op, ast.And):  # the body holds every conjunct
            known = [b for b, _ in states if b is not None]
            return (known[0] if known else None), None
        known = [o for _, o in states if o is not None]  # the `else` of an `or` holds no disjunct
        return None, (known[0] if known else None)
    return None, None


def _cap_state(func: ast.AST, target: ast.AST, aliases: set[str]) -> str | None:
    """Whether ``target`` runs where an enclosing `if` has the cap unset ("none") or set ("set")."""
    found: str | None = None

    def visit(node: ast.AST) -> bool:
        nonlocal found
        for field in ("body", "orelse", "finalbody", "handlers"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if stmt is target or any(n is target for n in _walk(stmt)):
                    states = []
                    if isinstance(node, ast.If) and field in ("body", "orelse"):
                        body, orelse = _test_states(node.test, aliases)
                        states.append(body if field == "body" else orelse)
                    for earlier in stmts[:i]:  # `if cap is None: return ...` leaves the cap set below it
                        if (
                            isinstance(earlier, ast.If)
                            and not earlier.orelse
                            and isinstance(earlier.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
                        ):
                            states.append(_test_states(earlier.test, aliases)[1])
                    for state in states:
                        if state == "none" or (state == "set" and found is None):
                            found = state
                    visit(stmt)
                    return True
        return False

    visit(func)
    return found


def _applies_cap(stmt: ast.stmt, aliases: set[str]) -> bool:
    """A statement that caps (arithmetic on the cap, the cap passed to a call) or refuses a capped config."""
    if isinstance(stmt, ast.If) and _mentions_cap(stmt.test, aliases):
        if any(isinstance(n, ast.Raise) for n in _walk(stmt)):
            return True
    for node in _walk(stmt):
        if isinstance(node, ast.BinOp) and (
            _mentions_cap(node.left, aliases) or _mentions_cap(node.right, aliases)
        ):
            return True
        if isinstance(node, ast.Call) and any(
            _mentions_cap(a, aliases) for a in [*node.args, *(k.value for k in node.keywords)]
        ):
            return True
        if isinstance(node, ast.Call) and _capping_callee(node):
            return True  # `logits = self.soft_cap(logits)`: a capping helper that reads the cap itself
    return False


def _capping_callee(call: ast.Call) -> bool:
    name = call_name(call)
    return "cap" in name.lower()


class LogitSoftcapping(LossRule):
    code = "NPU411"
    name = "logit-softcapping"
    summary = "A patched causal-LM forward drops (or repeats) the upstream final-logit soft-capping."
    why = (
        "Gemma-family models cap their logits (`logits = tanh(logits / cap) * cap`, with "
        "`config.final_logit_softcapping`) before the loss. A patched `ForCausalLM.forward` that computes the "
        "loss itself (a fused linear cross-entropy, a loss handle) and no longer mentions the cap trains on "
        "uncapped logits; one that caps twice squashes them. The upstream forward is read from the installed "
        "transformers source; only models whose upstream forward caps are checked."
        " Each loss path is checked on its own: a fused branch (a loss that takes hidden states) must be preceded by the cap or by a guard that refuses a capped config; a loss inside the branch an `if` on the cap takes when the cap is set (`if cap is not None:`, `if config.final_logit_softcapping:`, the `else` of `if cap is None:`) must be preceded by the capping itself (arithmetic on the cap, the cap handed to a call or to the loss, a helper named for capping), not only by the test (a loss in the branch where the cap is unset needs none); and in any function a soft-cap applied partially (`x / cap` and `tanh` without the final `* cap`) is reported."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2ForCausalLM.forward")
            def gemma2_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                cap = self.config.final_logit_softcapping
                logits = self.lm_head(hidden)
                if cap is not None:
                    logits = torch.tanh(logits / cap) * cap
                loss, _, aux = veomni_causal_lm_loss(
                    logits=logits, labels=labels, hidden_states=hidden, head_weight=self.lm_head.weight, **kwargs
                )
                return loss, logits
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="capped logits handed to a loss that also gets the hidden states and the head weight",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                hidden_states = outputs.last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="the cap dropped",
        ),
        Example(
            """
            import torch


            def cap_logits(logits, softcap):
                logits = logits / softcap
                logits = torch.tanh(logits)
                return logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="applied partially: divide and tanh without the final multiply",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                if veomni_causal_lm_loss.use_non_eager_impl:
                    loss, logits, aux = veomni_causal_lm_loss(
                        logits=None, labels=labels, hidden_states=hidden_states, weights=self.lm_head.weight, **kwargs
                    )
                else:
                    logits = self.lm_head(hidden_states)
                    if self.config.final_logit_softcapping is not None:
                        logits = torch.tanh(logits / self.config.final_logit_softcapping) * self.config.final_logit_softcapping
                    loss, _, aux = self.loss_function(logits=logits, labels=labels, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="the fused branch skips the cap (no guard refusing a capped config)",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                hidden_states = outputs.last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                if self.config.final_logit_softcapping is not None:
                    logits = logits / self.config.final_logit_softcapping
                    logits = torch.tanh(logits)
                    logits = logits * self.config.final_logit_softcapping
                limit = self.config.final_logit_softcapping
                if limit is not None:
                    logits = torch.tanh(logits / limit) * limit
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="capped twice: a second `if <cap> is not None:` block through a local",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2ForCausalLM.forward")
            def gemma2_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                if getattr(self.config, "final_logit_softcapping", None):
                    logits = self.lm_head(hidden_states)
                    loss, _, aux = self.loss_function(logits=logits, labels=labels, **kwargs)
                else:
                    loss, logits, aux = self.loss_function(
                        logits=None, labels=labels, hidden_states=hidden_states, weights=self.lm_head.weight, **kwargs
                    )
                return loss, logits
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="the branch taken when the cap is set computes the loss on uncapped logits (only the test names the cap)",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2ForCausalLM.forward")
            def gemma2_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                if lm_ce_handle.use_non_eager_impl:
                    if self.config.final_logit_softcapping is not None:
                        raise ValueError("the fused loss cannot cap the logits")
                    loss, logits, aux = lm_ce_handle(
                        logits=None, labels=labels, hidden_states=hidden, weights=self.lm_head.weight, **kwargs
                    )
                else:
                    logits = self.lm_head(hidden)
                    if self.config.final_logit_softcapping is not None:
                        cap = self.config.final_logit_softcapping
                        logits = torch.tanh(logits / cap) * cap
                    loss, _, aux = self.loss_function(
                        logits=logits, labels=labels, hidden_states=hidden, weights=self.lm_head.weight, **kwargs
                    )
                return loss, logits
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="the capped call on the path the kernel switch keeps for the eager loss (it takes the logits)",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                hidden_states = outputs.last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                if self.config.final_logit_softcapping is not None:
                    logits = logits / self.config.final_logit_softcapping
                    logits = torch.tanh(logits)
                    logits = logits * self.config.final_logit_softcapping
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2ForCausalLM.forward")
            def gemma2_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                cap = self.config.final_logit_softcapping
                if cap is None:
                    loss, logits, aux = self.loss_function(
                        logits=None, labels=labels, hidden_states=hidden_states, weights=self.lm_head.weight, **kwargs
                    )
                else:
                    logits = self.lm_head(hidden_states)
                    logits = torch.tanh(logits / cap) * cap
                    loss, _, aux = self.loss_function(logits=logits, labels=labels, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: where the cap belongs depends on the loss path the patch chose."

    def check(self, patched: PatchedMethod) -> None:
        if not mentions_attr(patched.upstream, "final_logit_softcapping"):
            return
        func = patched.func
        if not mentions_attr(func, "final_logit_softcapping"):
            if mentions_attr(func, "lm_head") or mentions_attr(func, "loss_function"):
                self.report(
                    def_span(self.ctx, func),
                    f"`{patched.cls}.forward` replaces the upstream loss path but drops the final-logit "
                    "soft-capping (`config.final_logit_softcapping`) the upstream forward applies",
                )
            return
        for stmt in _tanh_runs(func):
            self.report(stmt, "the final-logit soft-capping is applied a second time in the same path")
        aliases = _cap_aliases(func)
        for call in loss_calls(func):
            before = path_before(func, call)
            state = _cap_state(func, call, aliases)
            if state == "none":
                continue  # a branch where the cap is known unset (`if cap is None:`, the `else` of `if cap:`)
            if state == "set":
                # the branch where the cap is set: the cap must be applied on the way, not only tested
                if any(
                    isinstance(n, ast.stmt)
                    and not any(m is call for m in _walk(n))
                    and _applies_cap(n, aliases)
                    for n in before
                ) or any(_mentions_cap(a, aliases) for a in [*call.args, *(k.value for k in call.keywords)]):
                    self._fused_after_cap(func, call, aliases)
                    continue  # capped on the way, or the cap handed to the loss itself
            elif any(mentions_attr(n, "final_logit_softcapping") for n in before):
                self._fused_after_cap(func, call, aliases)
                continue
            self.report(
                call,
                "this loss path skips the final-logit soft-capping the upstream forward applies: cap the logits "
                "before the loss, or, for a fused kernel that cannot apply the cap, refuse a capped config",
            )

    def _fused_after_cap(self, func: ast.AST, call: ast.Call, aliases: set[str]) -> None:
        """A loss call on the capped path that also hands over the hidden states and the head's weight: a fused
        kernel projects them itself and never sees the capped logits."""
        given = {k.arg: k.value for k in call.keywords if k.arg}
        states = next((given[k] for k in _FUSED_STATES if k in given), None)
        weight = next((given[k] for k in _FUSED_WEIGHTS if k in given), None)
        if (
            states is None
            or weight is None
            or any(isinstance(v, ast.Constant) and v.value is None for v in (states, weight))
        ):
            return
        if any(_mentions_cap(k.value, aliases) for k in call.keywords):
            return  # the cap itself handed to the kernel
        if any(
            isinstance(b, ast.expr) and "eager" in ast.unparse(b).lower() for b in path_before(func, call)
        ):
            return  # the capped call sits on a path chosen by the kernel switch: the eager loss takes the logits
        self.report(
            weight,
            f"the logits are soft-capped on this path, but the loss call also gets `{ast.unparse(states)}` and "
            f"`{ast.unparse(weight)}`: whatever path of the loss projects them itself (a fused-linear kernel, the "
            "per-token log-probs path) recomputes the logits without the cap and trains or scores on uncapped "
            "logits; pass only the capped `logits=` here (no hidden states or weights)",
        )

    def finish(self) -> None:
        super().finish()
        text = self.ctx.source.text
        if "tanh" not in text or "softcap" not in text.lower():
            return
        for func in functions_of(self.ctx.tree, text, "tanh"):
            for stmt, missing in partial_caps(func):
                self.report(
                    stmt, f"soft-capping applied partially: {missing} is missing (`tanh(x / cap) * cap`)"
                )
