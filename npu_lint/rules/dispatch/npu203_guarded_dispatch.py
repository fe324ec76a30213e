"""NPU203 guarded-dispatch."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import handle_name, migration_fix, migration_needs, module_handle_names
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.dispatch._shared import GUARD_NODES, GuardFinder, summarised


class GuardedDispatch(Rule):
    code = "NPU203"
    name = "guarded-dispatch"
    summary = "A dispatch call is guarded (`use_non_eager_impl`, `bound_kernel()`, impl-name test) with an eager fallback."
    why = (
        "The OpSlot generation calls the fused kernel only when a slot is bound (`if slot.use_non_eager_impl: "
        "return slot(...)`) and otherwise falls through to a copy of the eager code. Two code paths per op drift "
        "apart, and a kernel that fails to bind silently runs eager. A VeomniOp handle is called "
        "unconditionally: the registry's `eager` row is the fallback, and an impossible selection fails loudly at "
        "construction. The guarded call may reach the handle through a callable bound to it "
        "(`self.loss = functools.partial(loss_helper, op=self.veomni_loss)`, a lambda that calls it). A "
        "`try`/`except` around the handle call whose handler does not re-raise is the same guard: any kernel "
        "error (a dtype or shape the kernel rejects) silently runs the eager copy; so is `with contextlib.suppress(...)` "
        "around it."
        ' On an OpSlot-generation tree under `target-api = "auto"` the guards are the generation\'s design: '
        'they are listed in NPU201\'s one finding per file instead (`target-api = "veomni-op"` reports each).'
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def toy_rmsnorm_forward(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            """,
            title="the OpSlot guard",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyMLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.impl = config.ops_config.swiglu_mlp_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", self.impl)

                def forward(self, x):
                    if self.impl != "eager":
                        return self.veomni_swiglu(x, self.gate_w, None, self.up_w, None, self.down_w, None)
                    return self.down(self.act(self.gate(x)) * self.up(x))
            """,
            title="a test of the implementation name",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyExperts(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_moe = VeomniOp("moe_experts", "standard", config.ops_config.moe_implementation)

                def forward(self, hidden_states, router_indices=None, routing_weights=None):
                    if self.veomni_moe.impl == "eager":
                        return toy_eager_experts(self, hidden_states, router_indices, routing_weights)
                    return self.veomni_moe(hidden_states, router_indices, routing_weights)
            """,
            title="the handle's own implementation name tested, the eager copy in the guarded branch",
        ),
        Example(
            """
            import functools

            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_router_loss(router_logits, num_experts, op=None):
                return op(router_logits, num_experts)


            def toy_router_loss_eager(router_logits, num_experts):
                return router_logits.softmax(-1).mean() * num_experts


            class ToyMoeForCausalLM(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_router_loss = VeomniOp(
                        "load_balancing_loss", "standard", resolve_op_impl("load_balancing_loss_implementation")
                    )
                    self.router_loss = functools.partial(toy_router_loss, op=self.veomni_router_loss)

                def forward(self, router_logits):
                    impl = resolve_op_impl("load_balancing_loss_implementation")
                    if impl in ("eager",):
                        return toy_router_loss_eager(router_logits, 8)
                    return self.router_loss(router_logits, 8)
            """,
            title="the handle reached through a `functools.partial` that binds it, tested through a local",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_block_init_patched(self, config):
                self.veomni_rotary = VeomniOp("rope", "full", resolve_op_impl("rope_implementation"))


            def toy_block_forward_patched(self, q, k, cos, sin):
                try:
                    q, k = self.veomni_rotary(q, k, cos, sin)
                except (RuntimeError, TypeError):
                    q, k = toy_rotate(q, cos, sin), toy_rotate(k, cos, sin)
                return q, k
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="a `try`/`except` whose handler runs eager code when the kernel raises",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyGate(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_gate = VeomniOp("swiglu_mlp", "standard", config.ops_config.swiglu_mlp_implementation)

                def forward(self, x):
                    try:
                        return self.veomni_gate(x)
                    except RuntimeError as err:
                        raise RuntimeError(f"gate kernel failed for shape {tuple(x.shape)}") from err
            """,
            title="a handler that re-raises: the error still surfaces",
        ),
        Example(
            """
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            def attention(config, query):
                # Hugging Face's own attention switch is not a VeOmni dispatch guard
                if config._attn_implementation != "eager":
                    return query * 2
                return query
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), attached once per file: it replaces the "
        "guard and its eager copy by an unconditional handle call."
    )
    node_types = GUARD_NODES

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.finder = GuardFinder(ctx)
        self.opslot = summarised(ctx.project.api)
        if self.opslot:
            # an OpSlot-generation tree: NPU201 lists the file's guards in one finding; only a guard that lets
            # the slot be called where it has no kernel is reported here (a bug in that generation too)
            self.node_types = (ast.If, ast.IfExp)

    def visit(self, node: ast.AST) -> None:
        if self.opslot:
            self._kernel_less_call(node)  # type: ignore[arg-type]
            return
        self.finder.visit(node)

    def _kernel_less_call(self, node: ast.If | ast.IfExp) -> None:
        """``if slot.is_bound: return slot(...)`` (or ``if not slot.use_eager_impl:``): the OpSlot raises "has no
        kernel bound" when called without a kernel, which ``is_bound`` allows (bound to eager) and ``not
        use_eager_impl`` allows (never bound). Only ``use_non_eager_impl`` / ``bound_kernel()`` mean a kernel."""
        test, negated = node.test, False
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, not negated
        if not (
            isinstance(test, ast.Attribute)
            and test.attr in ("is_bound", "use_eager_impl")
            and isinstance(test.value, ast.Name)
        ):
            return
        slot = test.value.id
        if slot not in module_handle_names(self.ctx):
            return
        kernel_side = negated if test.attr == "use_eager_impl" else not negated
        branch = node.body if kernel_side else node.orelse
        parts = branch if isinstance(branch, list) else [branch]
        if not any(
            isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == slot
            for part in parts
            for sub in ast.walk(part)
        ):
            return
        when = "bound to eager (no kernel resolved)" if test.attr == "is_bound" else "never bound"
        fix = None
        if kernel_side and branch is node.body:
            text = f"{slot}.use_non_eager_impl"
            fix = make_fix(f"Guard with `{text}`", [self.ctx.replace(node.test, text)])
        self.report(
            node.test,
            f"`{self.ctx.source.segment(node.test)}` also selects the call of `{slot}(...)` when the slot is {when}, "
            f"and an OpSlot without a kernel raises when called (an eager configuration then fails instead of "
            f"running the eager code); guard the call with `{slot}.use_non_eager_impl`",
            fix,
        )

    def finish(self) -> None:
        if self.opslot:
            return
        for node, what in self.finder.found():
            self._report(node, what)

    def _report(self, node: ast.AST, what: str) -> None:
        api = self.ctx.project.api
        needs = migration_needs(api)
        message = (
            f"dispatch guarded by {what} with an eager fallback: call the {handle_name(api)} handle "
            "unconditionally (the registry's eager row is the fallback)" + (f"; {needs}" if needs else "")
        )
        self.report(node, message, migration_fix(self.ctx))
