"""NPU722 upstream-call-contract."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.patchgen import generated_banner
from npu_lint.veomni.upcalls import (
    UpstreamCall,
    attention_module_gaps,
    object_attributes,
    patch_functions,
    pipeline_position_keys,
    scalar_expr,
    upstream_calls,
)


def _spread_opaque(call: ast.Call, wrapper_kwargs: bool) -> bool:
    """A ``*args`` or a ``**mapping`` the call passes (besides a wrapper's own ``**kwargs``): may carry anything."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return True
    spreads = [k for k in call.keywords if k.arg is None]
    if wrapper_kwargs:
        return len(spreads) > 1
    return any(
        not (isinstance(k.value, ast.Dict) and all(isinstance(x, ast.Constant) for x in k.value.keys))
        for k in spreads
    )


def _keywords(call: ast.Call) -> set[str]:
    out = {k.arg for k in call.keywords if k.arg}
    for k in call.keywords:
        if k.arg is None and isinstance(k.value, ast.Dict):
            out.update(str(x.value) for x in k.value.keys if isinstance(x, ast.Constant))
    return out


def _enclosing(func_items: list[tuple[str | None, ast.FunctionDef]], node: ast.AST) -> ast.FunctionDef | None:
    line = getattr(node, "lineno", 0)
    best = None
    for _, func in func_items:
        if func.lineno <= line <= (func.end_lineno or func.lineno):
            if best is None or func.lineno >= best.lineno:
                best = func
    return best


class UpstreamCallContract(Rule):
    code = "NPU722"
    name = "upstream-call-contract"
    summary = (
        "A patch calls the installed transformers code in a way that code no longer accepts: a parameter it "
        "requires is not supplied, a keyword or positional it does not take, a Python number where its forward "
        "uses a tensor, a fake `self` without an attribute the method reads, or a method the upstream class lacks."
    )
    why = (
        "A spec's replacement functions, and the patched methods of a generated file, run upstream code: the "
        "patched class's own methods (`self.compute_3d_position_ids(...)`), the submodules its `__init__` builds "
        "(`self.rotary_pos_emb(...)` runs the rotary class's `forward`), and unbound methods handed another "
        "object as `self` (`partial(get_position_id, Qwen3VLModel.get_rope_index, fake_model)`, called by the "
        "data pipeline as `position_id_func(input_ids=..., attention_mask=..., **grids)`). When transformers "
        "moves, these calls break while the patch still reads well: transformers 5.9 made `mm_token_type_ids` a "
        "required parameter of `get_rope_index`, made `get_rope_index` call `self.get_vision_position_ids`, and "
        "made the vision rotary module take position ids instead of a length. Such a patch fails on its first "
        "multimodal batch (TypeError, AttributeError), on GPU and NPU alike, or only in the dataloader workers. "
        "The upstream functions are read from the installed transformers source (never imported); a keyword the "
        "call may carry through a `**mapping` or `*args` is not reported, and for a wrapped position-id function "
        "the keywords every `position_id_func(...)` caller of the tree's `veomni/data` passes count as supplied. A model-local module that hands itself to an attention function of the registry "
        "(`self.attention_interface = ALL_ATTENTION_FUNCTIONS[impl]`, then `self.attention_interface(self, q, k, "
        "v)`) is held to what those functions read without a default: `flash_attention_forward` reads "
        "`module.config._attn_implementation`, so such a module must set `self.config`."
    )
    bad = (
        Example(
            """
            from functools import partial
            from types import SimpleNamespace

            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.add_helper
            def get_position_id(main_func, self, **kwargs):
                position_ids, rope_deltas = main_func(self, **kwargs)
                return {"position_ids": position_ids, "rope_deltas": rope_deltas}


            @config.override_method("Qwen2VLForConditionalGeneration.get_position_id_func")
            def get_position_id_func(self):
                fake_model = SimpleNamespace(config=self.config)
                return partial(get_position_id, Qwen2VLModel.get_rope_index, fake_model)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the wrapped `get_rope_index` lacks `mm_token_type_ids`, and the fake self lacks "
            "`get_vision_position_ids`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLVisionModel.rot_pos_emb")
            def rot_pos_emb(self, grid_thw):
                grid_thw_list = grid_thw.tolist()
                max_hw = max(max(h, w) for _, h, w in grid_thw_list)
                freq_table = self.rotary_pos_emb(max_hw)
                return freq_table
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="the v4 length call of a rotary module whose 5.9 forward takes position ids",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def forward(self, input_ids=None, inputs_embeds=None, image_grid_thw=None, attention_mask=None, **kwargs):
                position_ids = self.compute_3d_position_ids(
                    input_ids=input_ids,
                    inputs_embeds=inputs_embeds,
                    grid_thw=image_grid_thw,
                    attention_mask=attention_mask,
                )
                return self.language_model(inputs_embeds=inputs_embeds, position_ids=position_ids, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a keyword the upstream helper does not take",
        ),
    )
    good = (
        Example(
            """
            from functools import partial
            from types import SimpleNamespace

            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.add_helper
            class _FakeForPosID(SimpleNamespace):
                def get_vision_position_ids(self, *args, **kwargs):
                    return Qwen2VLModel.get_vision_position_ids(self, *args, **kwargs)


            @config.add_helper
            def get_position_id(main_func, self, **kwargs):
                if kwargs.get("mm_token_type_ids") is None:
                    kwargs["mm_token_type_ids"] = token_types(kwargs["input_ids"], self.config)
                position_ids, rope_deltas = main_func(self, **kwargs)
                return {"position_ids": position_ids, "rope_deltas": rope_deltas}


            @config.override_method("Qwen2VLForConditionalGeneration.get_position_id_func")
            def get_position_id_func(self):
                fake_model = _FakeForPosID(config=self.config)
                return partial(get_position_id, Qwen2VLModel.get_rope_index, fake_model)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLVisionModel.rot_pos_emb")
            def rot_pos_emb(self, grid_thw):
                pos_ids = self.positions(grid_thw)
                return self.rotary_pos_emb(pos_ids)


            @config.override_method("Qwen3VLModel.forward")
            def forward(self, input_ids=None, inputs_embeds=None, attention_mask=None, **kwargs):
                position_ids = self.compute_3d_position_ids(
                    input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **kwargs
                )
                return self.language_model(inputs_embeds=inputs_embeds, position_ids=position_ids)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a tensor of position ids; keywords that may ride in `**kwargs`",
        ),
    )
    fix_safety = "No fix: what to pass depends on what the installed transformers expects."

    requires = (("override_method", "Source:", "ATTENTION_FUNCTIONS"),)

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        kind = ctx.source.kind
        return kind.spec or kind.generated or (kind.model_code and not kind.test)

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        if "ATTENTION_FUNCTIONS" in text:
            self._attention_modules()
        if not (ctx.source.kind.spec or ctx.source.kind.generated):
            return
        listed: set[str] | None = None
        if ctx.source.kind.generated:
            listed = {
                target
                for kind, target, _ in generated_banner(ctx.source.path, text).banner_patches
                if kind == "method_override"
            }
        pf = patch_functions(ctx.tree, text, ctx.source.path, listed)
        if pf is None or not pf.items:
            return
        calls, missing = upstream_calls(pf)
        for ref in missing:
            self.report(
                ref.node,
                f"`{ref.cls}.{ref.name}` is not a method of the installed transformers' `{ref.cls}` (nor of its "
                "bases): the patch fails with AttributeError when it runs",
            )
        pipeline: frozenset[str] | None = None
        for call in calls:
            if call.via_wrapper and pipeline is None:
                root = ctx.project.root
                pipeline = pipeline_position_keys(os.path.join(str(root), "veomni") if root else None)
            self._check(call, pf, pipeline or frozenset())

    def _attention_modules(self) -> None:
        """A module handing itself to an attention function of a registry must carry what those functions read
        (`flash_attention_forward` reads `module.config._attn_implementation`)."""
        for cls in nodes_of(self.ctx.tree, ast.ClassDef):
            assert isinstance(cls, ast.ClassDef)
            for at, attr in attention_module_gaps(cls):
                self.report(
                    at,
                    f"`{cls.name}` hands itself to an attention function of the attention registry, which reads "
                    f"`module.{attr}` (transformers' `flash_attention_forward` reads "
                    f"`module.config._attn_implementation`), but no method of `{cls.name}` sets `self.{attr}`: "
                    "every non-eager attention backend raises AttributeError",
                )

    def _check(self, up: UpstreamCall, pf, pipeline: frozenset[str]) -> None:  # type: ignore[no-untyped-def]
        call, facts = up.node, up.facts
        offset = 1 if up.bound else 0
        given_kw = _keywords(call)
        positional = facts.positional[offset:]
        who = "this file's re-definition of" if up.signature_only else "the installed transformers'"
        # keywords and positionals the callee does not take
        if not facts.var_keyword:
            unknown = sorted(k for k in given_kw if k not in facts.keywords)
            if unknown:
                at = next((k.value for k in call.keywords if k.arg == unknown[0]), call)
                self.report(
                    at,
                    f"{who} `{facts.name}` takes no "
                    f"{', '.join(f'`{k}=`' for k in unknown)} (and no `**kwargs`): this call raises TypeError",
                )
                return
        if not facts.var_positional and not any(isinstance(a, ast.Starred) for a in call.args):
            if len(call.args) > len(positional):
                self.report(
                    call.args[len(positional)],
                    f"{who} `{facts.name}` takes {len(positional)} positional argument"
                    f"{'s' if len(positional) != 1 else ''} here and is given {len(call.args)}: TypeError",
                )
                return
        if up.signature_only:
            return
        # required parameters
        if not _spread_opaque(call, up.via_wrapper):
            bound = set(positional[: len(call.args)])
            supplied = bound | given_kw | up.supplied
            if up.via_wrapper:
                supplied |= pipeline
            needed = sorted(facts.required - supplied)
            if needed:
                where = (
                    " (the data pipeline's `position_id_func(...)` callers do not pass "
                    f"{'it' if len(needed) == 1 else 'them'} either)"
                    if up.via_wrapper
                    else ""
                )
                self.report(
                    call,
                    f"`{facts.name}` in the installed transformers requires "
                    f"{', '.join(f'`{n}`' for n in needed)}, which this call does not supply{where}: TypeError "
                    "on every call",
                )
        # a fake self
        if up.self_obj is not None:
            attrs = object_attributes(up.self_obj, up.scope, pf.classes)
            if attrs is not None:
                lacking = sorted(a for a in facts.self_reads - attrs if not a.startswith("_"))
                if lacking:
                    self.report(
                        up.anchor or call,
                        f"`{facts.name}` is handed `{ast.unparse(up.self_obj)}` as `self`, which lacks "
                        f"{', '.join(f'`{a}`' for a in lacking)} that the installed transformers' method reads: "
                        "AttributeError when it runs",
                    )
        # a Python number where the callee uses a tensor
        if facts.tensor_params and not up.via_wrapper:
            scope = _enclosing(pf.items, call)
            pairs = list(zip(positional, call.args, strict=False)) + [
                (k.arg, k.value) for k in call.keywords if k.arg
            ]
            for name, value in pairs:
                if name in facts.tensor_params and scalar_expr(value, scope):
                    self.report(
                        value,
                        f"`{facts.name}` in the installed transformers uses `{name}` as a tensor, and this call "
                        f"passes a Python number (`{ast.unparse(value)}`): an older transformers API (a length "
                        "or size where position ids are now expected)",
                    )
                    break
