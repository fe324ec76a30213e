"""NPU417 router-logits-normalised."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.upstream import file_source_module, last_name, patched_methods, upstream_class_method

_NORMALISERS = {"softmax", "log_softmax", "sigmoid"}
# the MoE routing modules: a router or gate, or the sparse block that computes the routing itself
_ROUTING_CLASSES = ("Router", "Gate", "MoeBlock", "MoEBlock", "SparseMoeBlock", "MoE", "Moe")


def _returned_logits(func: ast.FunctionDef) -> list[tuple[ast.Return, ast.Name]]:
    """Names with `logits` in them that a `return` hands back (alone or in a tuple)."""
    out = []
    for node in _walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            out.extend((node, e) for e in elts if isinstance(e, ast.Name) and "logits" in e.id)
    return out


def _last_binding(func: ast.FunctionDef, name: str, before: int) -> ast.expr | None:
    best: tuple[int, ast.expr] | None = None
    for node in _walk(func):
        if isinstance(node, ast.Assign) and node.lineno < before:
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                if best is None or node.lineno > best[0]:
                    best = (node.lineno, node.value)
    return None if best is None else best[1]


def _normaliser(value: ast.expr | None) -> str | None:
    if value is None:
        return None
    for node in _walk(value):
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


def _is_detach(node: ast.AST | None) -> str | None:
    """`x.detach()` / `x.data` on a name: that name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach":
        node = node.func.value
    elif isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    else:
        return None
    return node.id if isinstance(node, ast.Name) else None


def _detached_returns(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """Router logits a `return` hands back cut off the graph: `return logits.detach(), ...`, or a returned
    local last bound to a detached value."""
    out: list[tuple[ast.AST, str]] = []
    for node in _walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for e in elts:
                name = _is_detach(e)
                if name is not None and "logits" in name:
                    out.append((e, name))
                elif isinstance(e, ast.Name) and "logits" in e.id:
                    bound = _last_binding(func, e.id, node.lineno)
                    if _is_detach(bound) is not None:
                        out.append((bound, e.id))  # type: ignore[arg-type]
    return out


def _recorders(tree: ast.Module) -> list[tuple[ast.Call, str, int]]:
    """`"router_logits": OutputRecorder(Cls, index=N)` entries of a file (alone or in a list): (call, Cls, N)."""
    out: list[tuple[ast.Call, str, int]] = []
    for node in nodes_of(tree, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and key.value == "router_logits"):
                continue
            for call in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
                if not (
                    isinstance(call, ast.Call) and last_name(call.func) == "OutputRecorder" and call.args
                ):
                    continue
                cls = last_name(call.args[0])
                index = next((kw.value for kw in call.keywords if kw.arg == "index"), None)
                if index is None and len(call.args) > 1:
                    index = call.args[1]
                if cls is None or not (isinstance(index, ast.Constant) and type(index.value) is int):
                    continue
                out.append((call, cls, index.value))
    return out


def _local_forward(tree: ast.Module, cls: str) -> ast.FunctionDef | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == cls:
            return next(
                (f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None
            )
    return None


def _return_elements(func: ast.FunctionDef) -> list[ast.expr] | None:
    """The elements of the tuple the function's last `return` hands back (None when it returns no tuple)."""
    rets = [n for n in _walk(func) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
    if not rets:
        return None
    return list(max(rets, key=lambda r: r.lineno).value.elts)  # type: ignore[union-attr]


class RouterLogitsNormalised(Rule):
    code = "NPU417"
    name = "router-logits-normalised"
    summary = "A patched MoE router returns normalised probabilities (or detached logits) where the upstream router returns raw logits, or a model records another router output than the logits as `router_logits`."
    why = (
        "An MoE router's logits leave the layer (`router_logits` in the model output) and feed the "
        "load-balancing loss, which applies its own softmax. The upstream router keeps the raw logits and puts "
        "the softmax into a separate local. A patched router that rebinds the logits variable to "
        "`softmax(...)` (or `sigmoid(...)`) and returns it makes the auxiliary loss normalise twice: the loss is "
        "flattened towards uniform and the experts are no longer balanced, with no error. Compared with the "
        "upstream method: reported only when the upstream returns the same name unnormalised. A router that returns its logits detached (`.detach()`, `.data`, directly or through a rebinding) where upstream returns them with their graph is reported too: the auxiliary loss then trains nothing. "
        "The same holds where a model records the router's output by position (`_can_record_outputs`: "
        "`\"router_logits\": OutputRecorder(Router, index=N)`): output N of the router's forward (the file's own "
        "class, else the upstream one) must be its raw logits, not its top-k scores or indices."
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
        Example(
            """
            # Source: transformers.models.mixtral.modeling_mixtral
            import torch
            import torch.nn.functional as F


            class MixtralTopKRouter(nn.Module):
                def forward(self, hidden_states):
                    flat = hidden_states.reshape(-1, self.hidden_dim)
                    gate_logits = F.linear(flat, self.weight)
                    scores = gate_logits.softmax(dim=-1, dtype=torch.float)
                    top_value, top_index = torch.topk(scores, self.top_k, dim=-1)
                    router_logits = gate_logits.detach()
                    return router_logits, top_value / top_value.sum(dim=-1, keepdim=True), top_index
            """,
            path="veomni/models/transformers/mixtral/generated/patched_modeling_mixtral_gpu.py",
            title="the router logits returned detached",
        ),
        Example(
            """
            from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeDecoderLayer, Qwen3MoeTopKRouter
            from transformers.utils.output_capturing import OutputRecorder
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.replace_class("Qwen3MoePreTrainedModel")
            class PatchedQwen3MoePreTrainedModel(PreTrainedModel):
                _can_record_outputs = {
                    "router_logits": OutputRecorder(Qwen3MoeTopKRouter, index=2),
                    "hidden_states": Qwen3MoeDecoderLayer,
                }
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
            title="the router's expert indices recorded as its logits (the router is upstream's)",
        ),
        Example(
            """
            # Source: transformers.models.toy_moe.modeling_toy_moe
            import torch


            class ToyMoeGate(nn.Module):
                def forward(self, hidden_states):
                    gate_logits = self.proj(hidden_states)
                    weights = gate_logits.softmax(dim=-1)
                    top_w, top_i = torch.topk(weights, self.top_k, dim=-1)
                    return top_w, top_i, gate_logits


            class ToyMoePreTrainedModel(PreTrainedModel):
                _can_record_outputs = {"router_logits": OutputRecorder(ToyMoeGate, index=0)}
            """,
            path="veomni/models/transformers/toy_moe/generated/patched_modeling_toy_moe_gpu.py",
            title="the top-k weights recorded as the logits (the router defined in the file)",
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
        Example(
            """
            # Source: transformers.models.toy_moe.modeling_toy_moe
            import torch


            class ToyMoeGate(nn.Module):
                def forward(self, hidden_states):
                    gate_logits = self.proj(hidden_states)
                    weights = gate_logits.softmax(dim=-1)
                    top_w, top_i = torch.topk(weights, self.top_k, dim=-1)
                    return top_w, top_i, gate_logits


            class ToyMoePreTrainedModel(PreTrainedModel):
                _can_record_outputs = {"router_logits": OutputRecorder(ToyMoeGate, index=2)}
            """,
            path="veomni/models/transformers/toy_moe/generated/patched_modeling_toy_moe_gpu.py",
            title="the raw logits recorded, wherever the router puts them",
        ),
    )
    fix_safety = "No fix: the probabilities must move to their own local and every later use be renamed."

    requires = ("logits", tuple(sorted((*_NORMALISERS, "detach", "OutputRecorder"))))
    node_types = ()

    def _recorded_outputs(self) -> None:
        """`_can_record_outputs` records `router_logits` from the router's outputs by position: the position must
        be the router's raw logits, not its top-k scores or indices (the load-balancing loss softmaxes what is
        recorded over the expert axis)."""
        ctx = self.ctx
        module: str | None = None
        for call, cls, index in _recorders(ctx.tree):
            forward = _local_forward(ctx.tree, cls)
            if forward is None:
                if module is None:
                    module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path) or ""
                if not module.startswith("transformers."):
                    continue
                forward = upstream_class_method(module, cls, "forward")
            elts = None if forward is None else _return_elements(forward)
            if not elts or index >= len(elts) or index < -len(elts):
                continue
            picked = elts[index]
            if not isinstance(picked, ast.Name):
                continue
            value = _last_binding(forward, picked.id, 10**9)  # type: ignore[arg-type]
            raw = [i for i, e in enumerate(elts) if isinstance(e, ast.Name) and "logits" in e.id]
            if "logits" in picked.id and _normaliser(value) is None:
                continue
            if not raw:
                continue
            self.report(
                call,
                f"`router_logits` is recorded from output {index} of `{cls}.forward`, which is `{picked.id}`; the "
                f"router's raw logits are output {raw[0]} (`{elts[raw[0]].id}`): the load-balancing loss softmaxes "  # type: ignore[attr-defined]
                "the recorded tensor over the experts, so it balances nothing",
            )

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        if "OutputRecorder" in text:
            self._recorded_outputs()
        for patched in patched_methods(ctx.tree, text, "forward", _ROUTING_CLASSES, path=ctx.source.path):
            upstream_names = {n.id for _, n in _returned_logits(patched.upstream)}
            if not upstream_names or _normalised_returns(patched.upstream):
                continue
            for node, name in _detached_returns(patched.func):
                if name in upstream_names and not _detached_returns(patched.upstream):
                    self.report(
                        node,
                        f"`{patched.cls}.forward` returns `{name}` detached, where upstream returns it with its "
                        "graph: the load-balancing loss computed from the router logits sends no gradient to the "
                        "router, so the experts are never balanced",
                    )
            for name, value, kind in _normalised_returns(patched.func):
                if name.id not in upstream_names:
                    continue
                self.report(
                    value,
                    f"`{name.id}` is rebound to `{kind}(...)` and returned by `{patched.cls}.forward`, where "
                    f"upstream returns the raw logits: the load-balancing loss normalises them again; keep the "
                    f"probabilities in another local",
                )
