"""NPU417 router-logits-normalised."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.upstream import last_name, patched_methods

_NORMALISERS = {"softmax", "log_softmax", "sigmoid"}
# the MoE routing modules: a router or gate, or the sparse block that computes the routing itself
_ROUTING_CLASSES = ("Router", "Gate", "MoeBlock", "MoEBlock", "SparseMoeBlock", "MoE", "Moe")


def _returned_logits(func: ast.FunctionDef) -> list[tuple[ast.Return, ast.Name]]:
    """Names with `logits` in them that a `return` hands back (alone or in a tuple)."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            out.extend((node, e) for e in elts if isinstance(e, ast.Name) and "logits" in e.id)
    return out


def _last_binding(func: ast.FunctionDef, name: str, before: int) -> ast.expr | None:
    best: tuple[int, ast.expr] | None = None
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and node.lineno < before:
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                if best is None or node.lineno > best[0]:
                    best = (node.lineno, node.value)
    return None if best is None else best[1]


def _normaliser(value: ast.expr | None) -> str | None:
    if value is None:
        return None
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and last_name(node.func) in _NORMALISERS:
            return last_name(node.func)
    return None


def _normalised_returns(func: ast.FunctionDef) -> list[tuple[ast.Name, ast.expr, str]]:
    out = []
    for ret, name in _returned_logits(func):
        value = _last_binding(func, name.id, ret.lineno)
        kind = _normaliser(value)
        if kind is not None and value is not None:
            out.append((name, value, kind))
    return out


class RouterLogitsNormalised(Rule):
    code = "NPU417"
    name = "router-logits-normalised"
    summary = (
        "A patched MoE router returns normalised probabilities where the upstream router returns raw logits."
    )
    why = (
        "An MoE router's logits leave the layer (`router_logits` in the model output) and feed the "
        "load-balancing loss, which applies its own softmax. The upstream router keeps the raw logits and puts "
        "the softmax into a separate local. A patched router that rebinds the logits variable to "
        "`softmax(...)` (or `sigmoid(...)`) and returns it makes the auxiliary loss normalise twice: the loss is "
        "flattened towards uniform and the experts are no longer balanced, with no error. Compared with the "
        "upstream method: reported only when the upstream returns the same name unnormalised."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.override_method("Qwen3MoeTopKRouter.forward")
            def router_forward_patched(self, hidden_states):
                hidden_states = hidden_states.reshape(-1, self.hidden_dim)
                router_logits = hidden_states @ self.weight.t()
                router_logits = router_logits.float().softmax(dim=-1)
                top_value, top_index = torch.topk(router_logits, self.top_k, dim=-1)
                if self.norm_topk_prob:
                    top_value = top_value / top_value.sum(dim=-1, keepdim=True)
                return router_logits, top_value.to(hidden_states.dtype), top_index
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.override_method("Qwen3MoeTopKRouter.forward")
            def router_forward_patched(self, hidden_states):
                hidden_states = hidden_states.reshape(-1, self.hidden_dim)
                router_logits = hidden_states @ self.weight.t()
                probs = router_logits.float().softmax(dim=-1)
                top_value, top_index = torch.topk(probs, self.top_k, dim=-1)
                if self.norm_topk_prob:
                    top_value = top_value / top_value.sum(dim=-1, keepdim=True)
                return router_logits, top_value.to(hidden_states.dtype), top_index
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: the probabilities must move to their own local and every later use be renamed."

    requires = ("logits", tuple(sorted(_NORMALISERS)))
    node_types = ()

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        for patched in patched_methods(ctx.tree, text, "forward", _ROUTING_CLASSES, path=ctx.source.path):
            upstream_names = {n.id for _, n in _returned_logits(patched.upstream)}
            if not upstream_names or _normalised_returns(patched.upstream):
                continue
            for name, value, kind in _normalised_returns(patched.func):
                if name.id not in upstream_names:
                    continue
                self.report(
                    value,
                    f"`{name.id}` is rebound to `{kind}(...)` and returned by `{patched.cls}.forward`, where "
                    f"upstream returns the raw logits: the load-balancing loss normalises them again; keep the "
                    f"probabilities in another local",
                )
