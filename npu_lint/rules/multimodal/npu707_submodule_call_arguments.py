"""NPU707 submodule-call-arguments."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.patchgen import generated_banner
from npu_lint.veomni.upstream import _decorator_target, file_source_module, upstream_class_method

# Keywords a patched method may drop on purpose: output switches and generation caches VeOmni does not use.
_OPTIONAL = frozenset(
    {
        "return_dict",
        "output_attentions",
        "output_hidden_states",
        "use_cache",
        "past_key_values",
        "cache_position",
        "logits_to_keep",
    }
)


def _self_calls(func: ast.AST) -> dict[str, list[ast.Call]]:
    """``self.<attr>(...)`` calls of a function by attribute (a submodule or a method of the class)."""
    out: dict[str, list[ast.Call]] = {}
    for node in nodes_of(func, ast.Call):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            out.setdefault(node.func.attr, []).append(node)
    return out


def _dict_literal(func: ast.FunctionDef, name: str) -> ast.Dict | None:
    """The dict literal a local is bound to, when it is bound once, to one (`extra = {"a": a}`)."""
    found: list[ast.AST] = []
    for node in nodes_of(func, ast.Name):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            found.append(node)
    if len(found) != 1:
        return None
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(t is found[0] for t in node.targets):
            return node.value if isinstance(node.value, ast.Dict) else None
    return None


def _none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _bound(func: ast.FunctionDef) -> set[str]:
    """Parameters and locals of a function."""
    args = func.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    for node in _walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _params(func: ast.FunctionDef) -> tuple[list[str], int, int]:
    """Parameter names and how many have defaults (a re-defined method that gives a parameter a default makes
    it optional for its callers)."""
    args = func.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    return names, len(args.defaults), sum(d is not None for d in args.kw_defaults)


def _resigned(module: str, cls: str, attr: str, mine: ast.FunctionDef | None) -> bool:
    """Whether the file re-defines the called method ``cls.attr`` with other parameters than upstream's (its
    callers then follow the new signature)."""
    if mine is None:
        return False
    theirs = upstream_class_method(module, cls, attr)
    return theirs is None or _params(theirs) != _params(mine)


def _splatting(targets: list[tuple[str, str, ast.FunctionDef]]) -> dict[str, list[ast.FunctionDef]]:
    """Submodule -> the file's patched methods that hand their own ``**kwargs`` on to ``self.<submodule>(...)``
    (the image features method beside the video one: the twin that shows the keywords are meant to arrive)."""
    out: dict[str, list[ast.FunctionDef]] = {}
    for _cls, _method, func in targets:
        mine = func.args.kwarg.arg if func.args.kwarg is not None else None
        if mine is None:
            continue
        for attr, calls in _self_calls(func).items():
            if any(
                k.arg is None and isinstance(k.value, ast.Name) and k.value.id == mine
                for c in calls
                for k in c.keywords
            ):
                out.setdefault(attr, []).append(func)
    return out


def _targets(tree: ast.Module) -> list[tuple[str, str, ast.FunctionDef]]:
    """Every method a spec (``override_method``) or generated file (class bodies) defines: (class, method, def)."""
    out: list[tuple[str, str, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            target = _decorator_target(stmt)
            if target is not None:
                out.append((target[0], target[1], stmt))
        elif isinstance(stmt, ast.ClassDef):
            out.extend(
                (stmt.name, item.name, item) for item in stmt.body if isinstance(item, ast.FunctionDef)
            )
    return out


class SubmoduleCallArguments(Rule):
    code = "NPU707"
    name = "submodule-call-arguments"
    summary = (
        "A patched method still calls a submodule (tower, language model) the upstream method calls, but no "
        "longer passes it an input the upstream call passes (a keyword, or the `**kwargs` the upstream method and "
        "a twin patched method of the file hand on)."
    )
    why = (
        "The wrapper's inputs reach the towers and the language model only through these calls: a keyword the "
        "upstream call passes (`feature_lens=` to the audio tower, `visual_pos_masks=` with the deepstack "
        "features to the language model, `grid_thw=` to the vision tower) that the patched call leaves out "
        "takes the callee's default. The default is usually `None`, which the callee reads as 'absent': audio is "
        "not chunked per sample, deepstack features are added times zero, every image is treated as one grid: "
        "training runs and learns the wrong thing, on GPU and NPU alike. The upstream method is read from the "
        "installed transformers source; output switches and generation caches (`return_dict`, `use_cache`, "
        "`past_key_values`, ...) may be dropped, and a keyword the patched call may still carry through its "
        "`**kwargs` (not a local or parameter of the patched method) is not reported. The method's own "
        "`**kwargs` are an input too: where the upstream method hands them on to the submodule and another "
        "patched method of the file does so for the same submodule (the image features beside the video "
        "features), a patched method that takes `**kwargs`, reads them nowhere and calls the submodule without "
        "them drops what its callers send (the collator's precomputed vision metadata, attention arguments)."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLModel.get_image_features")
            def image_features(self, pixel_values, image_grid_thw=None, **kwargs):
                return self.visual(pixel_values, grid_thw=image_grid_thw, return_dict=True, **kwargs)


            @config.override_method("Qwen2VLModel.get_video_features")
            def video_features(self, pixel_values_videos, video_grid_thw=None, **kwargs):
                return self.visual(pixel_values_videos, grid_thw=video_grid_thw, return_dict=True)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the video features swallow the keywords the image features hand to the tower",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py"
            )


            @config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features")
            def omni_audio_features(self, input_features, feature_attention_mask=None, audio_feature_lengths=None):
                lengths = audio_feature_lengths
                out = self.audio_tower(input_features, aftercnn_lens=lengths)
                return out.last_hidden_state
            """,
            path="veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py",
            title="the audio tower no longer gets the per-audio `feature_lens`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeModel.forward")
            def vl_moe_forward(self, input_ids=None, inputs_embeds=None, pixel_values=None, image_grid_thw=None, **kwargs):
                image_mask = input_ids == self.config.image_token_id
                embeds, deepstack = self.get_image_features(pixel_values, image_grid_thw)
                inputs_embeds = inputs_embeds.masked_scatter(image_mask.unsqueeze(-1), embeds)
                visual_pos_masks = image_mask
                return self.language_model(
                    input_ids=None, inputs_embeds=inputs_embeds, deepstack_visual_embeds=deepstack, **kwargs
                )
            """,
            path="veomni/models/transformers/qwen3_vl_moe/qwen3_vl_moe_gpu_patch_gen_config.py",
            title="deepstack features handed on without the positions they belong to (`visual_pos_masks`)",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py"
            )


            @config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features")
            def omni_audio_features(self, input_features, feature_attention_mask=None, audio_feature_lengths=None):
                out = self.audio_tower(
                    input_features, feature_lens=audio_feature_lengths, aftercnn_lens=audio_feature_lengths
                )
                return out.last_hidden_state
            """,
            path="veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeModel.forward")
            def vl_moe_forward(self, input_ids=None, inputs_embeds=None, pixel_values=None, **kwargs):
                # `visual_pos_masks` is not a local here: it may still arrive through **kwargs
                return self.language_model(inputs_embeds=inputs_embeds, use_cache=False, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl_moe/qwen3_vl_moe_gpu_patch_gen_config.py",
            title="dropped generation cache; a keyword carried by `**kwargs`",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def vl_forward(self, input_ids=None, inputs_embeds=None, **kwargs):
                visual_pos_masks, deepstack = self.media(input_ids)
                extra = {"visual_pos_masks": visual_pos_masks, "deepstack_visual_embeds": deepstack}
                return self.language_model(inputs_embeds=inputs_embeds, **extra, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="handed on through a dict of keywords",
        ),
    )
    fix_safety = "No fix: the value to pass depends on how the patched method prepares its inputs."

    requires = ("self.", ("override_method", "Source:"))

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        kind = ctx.source.kind
        return kind.spec or kind.generated

    def finish(self) -> None:
        ctx = self.ctx
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        if module is None or not module.startswith("transformers."):
            return
        text = ctx.source.text
        targets = _targets(ctx.tree)
        own = {(cls, method): func for cls, method, func in targets}
        if ctx.source.kind.generated:
            # the patched methods the banner lists (the rest is the upstream code, copied; a hand edit of it
            # is NPU505's): a generated module holds hundreds of methods
            listed = {
                target
                for kind, target, _ in generated_banner(ctx.source.path, text).banner_patches
                if kind == "method_override"
            }
            if listed:
                targets = [t for t in targets if f"{t[0]}.{t[1]}" in listed]
        splatting = _splatting(targets)
        for cls, method, func in targets:
            upstream = upstream_class_method(module, cls, method)
            if upstream is None:
                continue
            before = _self_calls(upstream)
            if not before:
                continue
            after = _self_calls(func)
            bound: set[str] | None = None
            for attr, calls in after.items():
                originals = before.get(attr)
                if not originals or _resigned(module, cls, attr, own.get((cls, attr))):
                    continue
                if (cls, attr) not in own and f'"{cls}.{attr}"' in text:
                    continue  # re-defined by a `replacement=` function this file imports: signature unknown
                if attr in splatting and any(f is not func for f in splatting[attr]):
                    self._splat_dropped(cls, method, attr, upstream, func, originals, calls, splatting[attr])
                # what every upstream call of the submodule passes by keyword
                wanted = set.intersection(
                    *({k.arg for k in c.keywords if k.arg and not _none(k.value)} for c in originals)
                )
                wanted -= _OPTIONAL
                if not wanted:
                    continue
                positional = max(len(c.args) for c in originals)
                for call in calls:
                    if len(call.args) > positional or any(isinstance(a, ast.Starred) for a in call.args):
                        continue  # the keyword may be passed by position
                    given = {k.arg for k in call.keywords if k.arg}
                    splat = False
                    opaque = False
                    own_kwargs = func.args.kwarg.arg if func.args.kwarg is not None else None
                    for k in call.keywords:
                        if k.arg is not None:
                            continue
                        value = k.value
                        if isinstance(value, ast.Name) and value.id != own_kwargs:
                            value = _dict_literal(func, value.id) or value
                        if isinstance(value, ast.Dict) and all(
                            isinstance(key, ast.Constant) and isinstance(key.value, str) for key in value.keys
                        ):
                            given.update(key.value for key in value.keys)  # type: ignore[union-attr]
                        elif isinstance(value, ast.Name) and value.id == own_kwargs:
                            splat = True
                        else:
                            opaque = True  # a mapping built elsewhere may carry any keyword
                    if opaque:
                        continue
                    missing = sorted(wanted - given)
                    if splat and missing:
                        # `**kwargs` may carry it, unless the value is a local or parameter here (by the
                        # keyword's name, or the name the upstream call passes: `grid_thw=image_grid_thw`)
                        bound = _bound(func) if bound is None else bound
                        values = {
                            k.arg: k.value.id
                            for c in originals
                            for k in c.keywords
                            if k.arg and isinstance(k.value, ast.Name)
                        }
                        missing = [m for m in missing if m in bound or values.get(m) in bound]
                    if not missing:
                        continue
                    last = [*call.args, *(k.value for k in call.keywords)]
                    at = max(last, key=lambda n: (n.lineno, n.col_offset)) if last else call.func
                    self.report(
                        at,
                        f"`{cls}.{method}` calls `self.{attr}(...)` without "
                        f"{', '.join(f'`{m}=`' for m in missing)}, which the upstream `{cls}.{method}` passes: "
                        f"`self.{attr}` falls back to its default for {'it' if len(missing) == 1 else 'them'}",
                    )

    def _splat_dropped(
        self,
        cls: str,
        method: str,
        attr: str,
        upstream: ast.FunctionDef,
        func: ast.FunctionDef,
        originals: list[ast.Call],
        calls: list[ast.Call],
        twins: list[ast.FunctionDef],
    ) -> None:
        """Every upstream call of the submodule hands on the method's own ``**kwargs`` and the patched method,
        which takes ``**kwargs`` too, calls it with no ``**`` mapping and reads its keywords nowhere: whatever the caller sends through
        the keywords (the collator's precomputed metadata, attention arguments) stops here."""
        theirs = upstream.args.kwarg.arg if upstream.args.kwarg is not None else None
        mine = func.args.kwarg.arg if func.args.kwarg is not None else None
        if theirs is None or mine is None or mine.startswith("_"):
            return  # `**_unused`: the keywords are named as dropped on purpose
        if any(
            isinstance(n, ast.Name) and n.id == mine and isinstance(n.ctx, (ast.Load, ast.Del))
            for n in nodes_of(func, ast.Name)
        ):
            return  # the method reads (or `del`s) its keywords: hands them elsewhere, picks some out, drops them
        if not all(
            any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == theirs for k in c.keywords)
            for c in originals
        ):
            return
        twin = next(f.name for f in twins if f is not func)
        for call in calls:
            if any(k.arg is None for k in call.keywords) or any(
                isinstance(a, ast.Starred) for a in call.args
            ):
                continue
            last = [*call.args, *(k.value for k in call.keywords)]
            at = max(last, key=lambda n: (n.lineno, n.col_offset)) if last else call.func
            self.report(
                at,
                f"`{cls}.{method}` takes `**{mine}` but calls `self.{attr}(...)` without it, while the upstream "
                f"`{cls}.{method}` hands `**{theirs}` on to `self.{attr}`: the keywords its callers send (precomputed "
                f"metadata, attention arguments) never reach the submodule, as they do from `{twin}` beside it",
            )
