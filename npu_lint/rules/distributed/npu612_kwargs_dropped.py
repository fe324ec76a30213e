"""NPU612 kwargs-dropped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.upstream import file_source_module, upstream_class_method

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WRAPPERS = ("ForConditionalGeneration", "ForCausalLM", "Model")


def _kwarg(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    return func.args.kwarg.arg if func.args.kwarg is not None else None


def _spreads(call: ast.Call) -> list[str]:
    """Names spread into ``call`` with ``**`` (``**kwargs``; ``**{...}`` counts as an anonymous spread)."""
    return [k.value.id if isinstance(k.value, ast.Name) else "" for k in call.keywords if k.arg is None]


class KwargsDropped(Rule):
    code = "NPU612"
    name = "kwargs-dropped"
    summary = (
        "A module's `forward` takes `**kwargs` and passes them to one call of a wrapped module but not to "
        "another, so a caller's keyword (`skip_ulysses`, "
        "`cu_seq_lens_q`, `attention_mask`...) silently never arrives."
    )
    why = (
        "VeOmni routes per-call switches and packed-sequence metadata through `**kwargs`: a block passes "
        "`skip_ulysses=True` to its cross-attention (the text context is not sequence-sharded, so the Ulysses "
        "all-to-all must not run), a decoder layer hands the flash-attention `cu_seq_lens_*`/`max_length_*` and "
        "the sequence-parallel state down to the attention. A `forward` that accepts `**kwargs` and then calls "
        "the module it wraps without them drops every such keyword without an error: the attention runs the "
        "all-to-all on unsharded data (wrong output or a shape error only under sequence parallelism), or "
        "attends across packed sequences. Reported: in a `forward`, a call of a module (`self.<name>(...)`) "
        "that the same `forward` calls elsewhere with its `**kwargs` spread, while this call spreads nothing. "
        "Not reported: a filtered copy (`**text_kwargs`, a deliberate choice), calls in different arms of one "
        "`if` (a mamba mixer and an attention mixer take different arguments), and a call that passes its own "
        "mask or positions (it runs on other sequences). In a copy of an upstream wrapper (a generated "
        "`...ForConditionalGeneration` / `...Model`, its upstream class read from the installed transformers), a "
        "call of a submodule the upstream `forward` hands its `**kwargs` to (`self.model(...)`) that no longer "
        "gets them while another call still does (the loss) is reported too: the collator's media masks and "
        "packed-sequence metadata stop at the wrapper."
    )
    bad = (
        Example(
            """
            from torch import nn


            class ToyCrossAttention(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.core = ToyAttentionCore(dim)

                def forward(self, x, text, image=None, **kwargs):
                    out = self.core(x, text)
                    if image is not None:
                        out = out + self.core(x, image, **kwargs)
                    return out
            """,
            title="the wrapped module gets the caller's keywords on one call and not on the other",
        ),
        Example(
            """
            from torch import nn


            class ToyJointBlock(nn.Module):
                def forward(self, image_tokens, text_tokens, **attn_kwargs):
                    joint = self.norm(image_tokens)
                    image_out = self.attention(joint, **attn_kwargs)
                    for _ in range(self.text_rounds):
                        text_tokens = self.attention(self.norm(text_tokens))
                    return image_out, text_tokens
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
            title="another name for the keywords, a call inside a loop",
        ),
    )
    good = (
        Example(
            """
            from torch import nn


            class ToyAttention(nn.Module):
                def forward(self, hidden_states, **kwargs):
                    return self.attention_interface(self, hidden_states, **kwargs)


            class ToyDecoderLayer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.self_attn = ToyAttention()
                    self.cross_attn = ToyAttention()

                def forward(self, hidden_states, context, **kwargs):
                    hidden_states = hidden_states + self.self_attn(hidden_states, **kwargs)
                    text_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("cu_seq")}
                    return hidden_states + self.cross_attn(context, **text_kwargs)
            """,
            title="forwarded everywhere (a filtered copy is a deliberate choice)",
        ),
        Example(
            """
            from torch import nn


            class ToyHybridBlock(nn.Module):
                def forward(self, hidden_states, attention_mask=None, contrast_ids=None, contrast_mask=None, **kwargs):
                    if self.kind == "mamba":
                        out = self.mixer(hidden_states, attention_mask=attention_mask)
                    else:
                        out = self.mixer(hidden_states, attention_mask=attention_mask, **kwargs)
                    if contrast_ids is not None:
                        out = out + self.mixer(self.embed(contrast_ids), attention_mask=contrast_mask)
                    return out
            """,
            title="exclusive branches; a side pass over other sequences with its own mask",
        ),
    )
    fix_safety = "No fix: which keywords the wrapped module should see is the caller's decision."
    requires = ("**",)
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        for method in node.body:
            if isinstance(method, _FUNCS) and method.name == "forward":
                kwarg = _kwarg(method)
                if kwarg is not None:
                    self._inconsistent(method, kwarg)
                    self._upstream_spread(node.name, method, kwarg)

    @staticmethod
    def _self_calls(func: ast.AST) -> list[tuple[str, ast.Call]]:
        out = []
        for sub in _walk(func):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
            ):
                out.append((sub.func.attr, sub))
        return out

    def _upstream_spread(self, cls: str, method: ast.AST, kwarg: str) -> None:
        """A copy of an upstream class's `forward` (a generated file) that still spreads its `**kwargs` into some
        call but no longer into a submodule the upstream `forward` hands them to (`self.model(...)` of a
        `ForConditionalGeneration`): the collator's metadata that rides in the keywords (media masks, packed-sequence
        `cu_seq_lens_*`) stops at the wrapper."""
        module = self.ctx.memo.get("npu612_source")
        if module is None:
            module = file_source_module(self.ctx.tree, self.ctx.source.text, self.ctx.source.path) or ""
            self.ctx.memo["npu612_source"] = module
        if not module or not cls.endswith(_WRAPPERS):
            return  # a layer's mixers take the keywords they need; a wrapper hands all of them to its model
        calls = self._self_calls(method)
        if not any(kwarg in _spreads(call) for _, call in calls):
            return  # the method dropped its keywords everywhere: a deliberate rewrite
        wanted = _upstream_spread_attrs(module, cls)
        for attr in sorted(wanted):
            mine = [call for a, call in calls if a == attr]
            if not mine or any(_spreads(call) for call in mine):
                continue
            call = mine[0]
            last = max(
                [*call.args, *(k.value for k in call.keywords)], key=lambda n: n.end_lineno or 0, default=call
            )
            self.report(
                last,
                f"`self.{attr}(...)` is called without `**{kwarg}`, which the upstream `{cls}.forward` passes to it "
                f"(and this `forward` still passes to another call): the caller's keywords (the collator's media "
                "masks and metadata, packed-sequence `cu_seq_lens_*` / `max_length_*`) never reach the wrapped "
                "model; pass them on",
            )
            return

    def _inconsistent(self, method: ast.AST, kwarg: str) -> None:
        calls = self._self_calls(method)
        spreading = [(attr, call) for attr, call in calls if kwarg in _spreads(call)]
        if not spreading:
            return
        spread_attrs = {attr for attr, _ in spreading}
        candidates = [
            (attr, call)
            for attr, call in calls
            if attr in spread_attrs
            and not _spreads(call)
            # a call that brings its own sequence metadata runs on other data
            and not any(_own_metadata(k.arg) for k in call.keywords)
        ]
        if not candidates:
            return
        arms = _arms(method)
        for attr, call in candidates:
            if not any(a == attr and not _exclusive(arms, call, other) for a, other in spreading):
                continue
            self.report(
                call,
                f"`self.{attr}(...)` is called here without `**{kwarg}`, which `{method.name}` passes to it on "  # type: ignore[attr-defined]
                "another call: the caller's keywords (sequence-parallel switches such as `skip_ulysses`, "
                "packed-sequence metadata) never reach this call; pass them on",
            )


def _upstream_spread_attrs(module: str, cls: str) -> set[str]:
    """The submodules (`self.<attr>(...)`) the upstream class's `forward` hands its `**kwargs` to."""
    upstream = upstream_class_method(module, cls, "forward")
    if upstream is None or upstream.args.kwarg is None:
        return set()
    name = upstream.args.kwarg.arg
    return {
        attr
        for attr, call in KwargsDropped._self_calls(upstream)
        if name in _spreads(call) and attr != "loss_function" and not attr.startswith("get_")
    }


def _own_metadata(name: str | None) -> bool:
    return name is not None and any(w in name for w in ("mask", "position", "cu_seq", "seq_len"))


def _arms(func: ast.AST) -> dict[int, list[tuple[int, str]]]:
    """Node id -> the ``if`` arms it sits in, from the outside in: (id of the ``if``, "body" or "orelse")."""
    out: dict[int, list[tuple[int, str]]] = {}

    def walk(node: ast.AST, path: list[tuple[int, str]]) -> None:
        out[id(node)] = path
        if isinstance(node, ast.If):
            walk(node.test, path)
            for child in node.body:
                walk(child, [*path, (id(node), "body")])
            for child in node.orelse:
                walk(child, [*path, (id(node), "orelse")])
            return
        for child in ast.iter_child_nodes(node):
            walk(child, path)

    walk(func, [])
    return out


def _exclusive(arms: dict[int, list[tuple[int, str]]], one: ast.AST, other: ast.AST) -> bool:
    """The two calls sit in different arms of one ``if`` (a ``mamba`` branch and an ``attention`` branch)."""
    mine = dict(arms.get(id(one), []))
    return any(mine.get(if_id, arm) != arm for if_id, arm in arms.get(id(other), []))
