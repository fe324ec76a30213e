"""NPU701 media-parameters."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.core.memo import by_content
from npu_lint.rules._handles import spec_target
from npu_lint.rules.base import Example
from npu_lint.rules.multimodal._modality import (
    crossings,
    keyed_crossings,
    media_named,
    modality,
    one_sided_sp,
    unused_media_mappings,
)
from npu_lint.rules.multimodal._shared import (
    MEDIA,
    WRAPPERS,
    PatchedMethod,
    WrapperRule,
    body_names,
    def_span,
    overwritten_before_read,
    params_of,
    passed_on,
)
from npu_lint.veomni.upstream import (
    file_source_module,
    patched_methods,
    same_node,
    upstream_class_method,
)

_CASTS = {
    "type",
    "to",
    "float",
    "contiguous",
    "view",
    "reshape",
    "dtype",
    "tolist",
    "prod",
    "item",
    "sum",
    "size",
}
_CASTS |= {"numel", "len", "list", "tuple", "int", "unsqueeze", "squeeze", "isinstance", "super", "getattr"}


def _kwargs_names(func: ast.FunctionDef) -> set[str]:
    """`**kwargs` and the locals that copy it (`dict(kwargs)`, `kwargs.copy()`, `{**kwargs}`, a comprehension
    over `kwargs.items()`), through a few steps."""
    if func.args.kwarg is None:
        return set()
    names = {func.args.kwarg.arg}
    for _ in range(3):
        before = len(names)
        for node in _walk(func):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                continue
            value = node.value
            copies = (
                isinstance(value, ast.DictComp)
                or isinstance(value, ast.Dict)
                and any(k is None for k in value.keys)
                or isinstance(value, ast.Call)
                and (
                    isinstance(value.func, ast.Name)
                    and value.func.id == "dict"
                    or isinstance(value.func, ast.Attribute)
                    and value.func.attr == "copy"
                )
            )
            if copies and any(isinstance(n, ast.Name) and n.id in names for n in _walk(value)):
                names.add(node.targets[0].id)
        if len(names) == before:
            break
    return names


def _splatted(func: ast.FunctionDef) -> bool:
    """`**kwargs` (or a copy of it) is passed on to some call."""
    names = _kwargs_names(func)
    return any(
        isinstance(node, ast.Call)
        and any(
            kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id in names for kw in node.keywords
        )
        for node in _walk(func)
    )


def _kwargs_reach_model(func: ast.FunctionDef) -> bool:
    """`**kwargs` (or a copy) is passed on to a call that is not the loss (the inner model, a tower,
    `super().forward`)."""
    names = _kwargs_names(func)
    for node in _walk(func):
        if isinstance(node, ast.Call) and any(
            kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id in names for kw in node.keywords
        ):
            low = call_name(node).lower()
            if "loss" not in low and "entropy" not in low:
                return True
    return False


def _store_names(node: ast.Assign) -> set[str]:
    return {t.id for t in node.targets if isinstance(t, ast.Name)}


def _excluded_keys(cond: ast.AST) -> list[str]:
    """The literal keys a dict-comprehension filter leaves out: `k != "a"`, `k not in ("a", "b")`."""
    if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1):
        return []
    op, right = cond.ops[0], cond.comparators[0]
    if isinstance(op, ast.NotEq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return [right.value]
    if isinstance(op, ast.NotIn) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _kwargs_removed(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """Keys removed from `**kwargs` and discarded: `kwargs.pop("k")` as a statement, `del kwargs["k"]`."""
    names = _kwargs_names(func)
    splatted = {
        kw.value.id
        for node in _walk(func)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg is None and isinstance(kw.value, ast.Name)
    }
    out: list[tuple[ast.AST, str]] = []
    for node in _walk(func):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "pop"
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id in names
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            out.append((node, str(node.value.args[0].value)))
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "pop"
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id in names
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
            and isinstance(node.targets[0], ast.Name)
            and not passed_on(func, node.targets[0].id)
        ):
            out.append((node, str(node.value.args[0].value)))  # popped into a local nobody hands on
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and isinstance(node.targets[0].value, ast.Name)
            and node.targets[0].value.id in names
            and isinstance(node.targets[0].slice, ast.Constant)
            and isinstance(node.value, ast.Constant)
            and node.value.value is None
        ):
            out.append((node, str(node.targets[0].slice.value)))  # `kwargs["k"] = None`
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.DictComp)
            and any(isinstance(t, ast.Name) and t.id in splatted for t in node.targets)
            and not any(
                isinstance(n, ast.Name) and n.id in splatted and n.id not in _store_names(node)
                for n in _walk(node.value)
            )
            and any(isinstance(n, ast.Name) and n.id in names for n in _walk(node.value))
        ):
            for cond in (c for gen in node.value.generators for c in gen.ifs):
                for key in _excluded_keys(cond):
                    out.append((node, key))  # `kwargs = {k: v for k, v in kwargs.items() if k not in (...)}`
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in names
                    and isinstance(target.slice, ast.Constant)
                ):
                    out.append((node, str(target.slice.value)))
    return out


def _calls_by_name(func: ast.AST) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for node in _walk(func):
        if isinstance(node, ast.Call) and call_name(node):
            out.setdefault(call_name(node), []).append(node)
    return out


def _is(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _where_dropped(
    func: ast.FunctionDef, upstream: ast.FunctionDef, name: str, media: list[str]
) -> tuple[ast.AST | None, str]:
    """Where the patch stops handing ``name`` on: in the call the upstream forward passes it to (same callee),
    the argument that replaced it or the keyword it used to follow; else the call that receives the other media
    inputs. (None, "") when there is no such call."""
    mine = _calls_by_name(func)
    for up in _walk(upstream):
        if not isinstance(up, ast.Call) or not mine.get(call_name(up)):
            continue
        callee = call_name(up)
        for i, a in enumerate(up.args):
            if _is(a, name):
                for call in mine[callee]:
                    # align on the nearest earlier argument both calls pass by the same name (the patch may
                    # drop an argument before it), else on the position
                    names = [x.id if isinstance(x, ast.Name) else None for x in call.args]
                    k = next(
                        (
                            names.index(p.id) + 1
                            for p in reversed(up.args[:i])
                            if isinstance(p, ast.Name) and p.id in names
                        ),
                        i,
                    )
                    if k < len(call.args) and not isinstance(call.args[k], ast.Starred):
                        return call.args[k], (
                            f" (`{ast.unparse(call.func)}` gets `{ast.unparse(call.args[k])}` in its place)"
                        )
                    if k == len(call.args) and call.args and not call.keywords:
                        return call.args[-1], (
                            f" (`{ast.unparse(call.func)}` ends at `{ast.unparse(call.args[-1])}`, where the upstream "
                            "call passes it next)"
                        )
        for j, kw in enumerate(up.keywords):
            if kw.arg is None or not _is(kw.value, name):
                continue
            before = [k.arg for k in up.keywords[:j] if k.arg][::-1]
            for call in mine[callee]:
                given = {k.arg: k for k in call.keywords if k.arg}
                if kw.arg in given:
                    return given[
                        kw.arg
                    ].value, f" (`{callee}` gets `{kw.arg}={ast.unparse(given[kw.arg].value)}`)"
                near = next((given[b] for b in before if b in given), None)
                if near is not None or call.keywords:
                    return near or call.keywords[-1], f" (not in the `{ast.unparse(call.func)}(...)` call)"
    removed = _where_removed(func, upstream, name)
    if removed is not None:
        return removed
    # the call that receives the most of the other media inputs
    best: tuple[int, ast.Call] | None = None
    for calls in mine.values():
        for call in calls:
            got = sum(1 for k in call.keywords if k.arg in media and k.arg != name)
            if got and (best is None or got > best[0]):
                best = (got, call)
    if best is None:
        return None, ""
    call = best[1]
    order = [m for m in media if m != name]
    earlier = order[: media.index(name)] if name in media else order
    given = {k.arg: k for k in call.keywords if k.arg}
    near = next((given[m] for m in reversed(earlier) if m in given), None)
    return near or call.keywords[
        -1
    ], f" (not in the `{ast.unparse(call.func)}(...)` call with the other media inputs)"


def _where_removed(func: ast.FunctionDef, upstream: ast.FunctionDef, name: str) -> tuple[ast.AST, str] | None:
    """Where the copy dropped the upstream statement that consumed ``name`` (its consuming call gone with it):
    the copy's statement that follows it in upstream (the first later sibling the copy still has, verbatim),
    for the innermost such statement."""
    own = [n for n in _walk(func) if isinstance(n, ast.stmt)]
    found: list[tuple[int, ast.stmt, ast.stmt]] = []
    for block in _walk(upstream):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(block, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if not isinstance(stmt, ast.stmt) or not any(_is(n, name) for n in _walk(stmt)):
                    continue
                if any(same_node(stmt, mine) for mine in own):
                    continue  # the copy still has it
                for later in stmts[i + 1 :]:
                    twin = next((mine for mine in own if same_node(later, mine)), None)
                    if twin is not None:
                        found.append((len(_walk(stmt)), stmt, twin))
                        break
    if not found:
        return None
    _size, stmt, twin = min(found, key=lambda f: f[0])
    text = " ".join(ast.unparse(stmt).split())
    text = text if len(text) <= 70 else text[:67] + "..."
    return twin, f" (upstream's `{text}` stood before this statement)"


def _self_method(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        return f.attr
    return None


def _local_method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    """The file's own version of ``cls.name``: a spec override, or the method of a class the file holds."""
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and spec_target(stmt) == (cls, name):
            return stmt
        if isinstance(stmt, ast.ClassDef) and stmt.name == cls:
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _derived_names(func: ast.FunctionDef, name: str) -> set[str]:
    """``name`` and the locals computed from it (a few steps)."""
    names = {name}
    assigns = nodes_of(func, ast.Assign)  # read only
    for _ in range(3):
        before = len(names)
        for node in assigns:
            if any(isinstance(n, ast.Name) and n.id in names for n in _walk(node.value)):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(names) == before:
            break
    return names


_SIBLING = {"image": ("video",), "video": ("image",), "images": ("videos",), "videos": ("images",)}
_SP_CALL = ("gather", "slice", "scatter", "all_to_all", "sp_pad", "split_sp", "sp_split")


def _siblings(method: str) -> list[str]:
    """The same method for the other visual medium (`get_image_features` -> `get_video_features`)."""
    parts = method.split("_")
    out = []
    for i, part in enumerate(parts):
        for other in _SIBLING.get(part, ()):
            out.append("_".join([*parts[:i], other, *parts[i + 1 :]]))
    return out


def _callees(func: ast.AST) -> dict[str, ast.Call]:
    out: dict[str, ast.Call] = {}
    for node in (n for stmt in getattr(func, "body", []) for n in _walk(stmt)):
        if isinstance(node, ast.Call) and call_name(node):
            out.setdefault(call_name(node), node)
    return out


class MediaParameters(WrapperRule):
    code = "NPU701"
    name = "media-parameters"
    summary = (
        "A patched multimodal forward drops an upstream media parameter, or accepts it and never passes it on; "
        "or one medium's data is handed to another medium's mask, metadata or method."
    )
    why = (
        "A vision-language wrapper's forward receives the media inputs (`pixel_values`, `pixel_values_videos`, "
        "`image_grid_thw`, `video_grid_thw`, `token_type_ids`, ...) and hands them to the inner model or the "
        "tower. A patched `ForConditionalGeneration.forward` / `Model.forward` that leaves one out of its "
        "signature (without forwarding `**kwargs`), accepts it and never passes it on, or overwrites it before "
        "reading it, trains without that input: images are silently ignored or recomputed. The parameters are "
        "compared with the upstream forward's (and `prepare_inputs_for_generation`'s)."
        " An input accepted and never passed on is reported where the patch stops handing it on: in the call the "
        "upstream forward passes it to, at the value that took its place (`get_rope_index(..., None)`) or the "
        "argument it used to follow. A media input handed on under another media input's name "
        "(`video_grid_thw=image_grid_thw`), or passed positionally in another order than the upstream forward "
        "passes them to the same callee, is reported too, and so is a media input that rides in `**kwargs` "
        "and is removed from them: popped as a statement or into a local nobody hands on, deleted, set to `None`, "
        "or filtered out by a dict comprehension."
        " A media input (or its lengths or mask) that the forward has and hands on elsewhere but leaves out of "
        "its call of the method the upstream forward hands it to, though that method (the file's version, else "
        "upstream's) takes it, is reported at that call. In any function, one medium's data meeting another "
        "medium's is reported: features scattered into another medium's placeholder mask (`masked_scatter`, `torch.where`, "
        "the mask followed through locals), values written at another medium's positions (`x[mask, :] = v`; values "
        "computed from rows picked with that same mask are paired whatever their names), a "
        'metadata key of one medium read for another (`video_kwargs = {...: md.get("vit_image_...")}`, the holder '
        "being the dict key, keyword, call or local it goes to), and a mapping of one medium's arguments "
        "splatted into another's method. Media are read from the spelling (`image`/`img`, `video`/`vid`, "
        "`audio`); plain `pixel_values`, which carries video frames in many models, names none. A spec that patches "
        "one medium's method (`get_image_features`) to stop a step its upstream sibling (`get_video_features`) "
        "also takes (a `torch.split`), or to add a sequence-parallel step, while leaving the sibling unpatched is "
        "reported at the end of the patched method (unless the sibling delegates to it). Inside a function, a "
        "sequence-parallel step (`gather_outputs`, `slice_input_tensor`, ...) applied to one visual medium's tensor "
        "(`image_embeds`, also element-wise in a comprehension) while its sibling (`video_embeds`, assigned in the "
        "same function) never goes through it is reported at the sibling's first assignment; so is a mapping built "
        "for one medium (`video_vit_kwargs = {...}`) that the function never reads."
    )
    bad = (
        Example(
            """
            def rope_kwargs(input_ids, layouts=None, **kwargs):
                layouts = layouts or {}
                out = {"input_ids": input_ids}
                if "image" in layouts:
                    out["image_grid_thw"] = layouts["image"]
                if "video" in layouts:
                    out["video_grid_thw"] = layouts.get("image")
                return out
            """,
            path="veomni/models/seed_omni/foundation/toy_vl_foundation/modeling_toy_vl_foundation.py",
            title="a per-medium mapping read under another medium's key",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(
                self, input_ids=None, attention_mask=None, labels=None, pixel_values=None, pixel_values_videos=None,
                image_grid_thw=None, video_grid_thw=None, logits_to_keep=0, **kwargs
            ):
                outputs = self.model(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    pixel_values=pixel_values,
                    image_grid_thw=image_grid_thw,
                    **kwargs,
                )
                return outputs
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="video inputs accepted, never passed on",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.forward")
            def qwen3_vl_model_forward_patched(self, input_ids=None, pixel_values=None, mm_token_type_ids=None, **kwargs):
                mm_token_type_ids = kwargs.pop("mm_token_type_ids", None)
                position_ids = self.compute_3d_position_ids(input_ids=input_ids, mm_token_type_ids=mm_token_type_ids)
                return self.language_model(input_ids=input_ids, position_ids=position_ids, pixel_values=pixel_values)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a parameter overwritten from kwargs before it is read",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLForConditionalGeneration.forward")
            def wrapper(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
                        video_grid_thw=None, **kwargs):
                return self.model(input_ids=input_ids, pixel_values=pixel_values, pixel_values_videos=pixel_values_videos,
                                  image_grid_thw=video_grid_thw, video_grid_thw=image_grid_thw, **kwargs)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the image and video grids handed on under each other's names",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLForConditionalGeneration.forward")
            def wrapper(self, input_ids=None, labels=None, **kwargs):
                extra = {key: val for key, val in kwargs.items() if key not in ("video_grid_thw", "return_dict")}
                return self.model(input_ids=input_ids, **extra)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="a media input filtered out of `**kwargs` by a dict comprehension",
        ),
        Example(
            """
            import torch


            def merge_media(self, embeds, token_ids, img_feats, vid_feats):
                img_sel = token_ids == self.config.image_token_id
                vid_sel = token_ids == self.config.video_token_id
                sel = vid_sel[..., None].expand_as(embeds)
                embeds = embeds.masked_scatter(sel, img_feats)
                joint = torch.zeros_like(embeds[..., 0])
                joint[img_sel] = vid_feats.sum(-1)
                return embeds, joint
            """,
            path="veomni/models/transformers/toy_vl/modeling_toy_vl.py",
            title="image features scattered through a local mask built from the video tokens, video values at image positions",
        ),
        Example(
            """
            def encode_clips(self, clips, side_info, **kwargs):
                video_args = {"lengths": side_info.get("audio_clip_lengths"), "offsets": side_info["video_clip_offsets"]}
                return self.encode_video_clips(clips, **video_args), self.encode_audio_stream(clips, **kwargs)
            """,
            path="veomni/models/transformers/toy_av/modeling_toy_av.py",
            title="the video encoder's arguments read from the audio lengths key",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLModel.get_video_features")
            def video_feats(self, pixel_values_videos, video_grid_thw=None, **kwargs):
                out = self.visual(pixel_values_videos.type(self.visual.dtype), grid_thw=video_grid_thw, **kwargs)
                return out
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the video features stop splitting the pooled output, the image features still split it upstream",
        ),
    )
    good = (
        Example(
            """
            def rope_kwargs(input_ids, layouts=None, **kwargs):
                layouts = layouts or {}
                out = {"input_ids": input_ids, "image_grid_thw": layouts.get("image")}
                if "video" in layouts:
                    out["video_grid_thw"] = layouts["video"]
                return out
            """,
            path="veomni/models/seed_omni/foundation/toy_vl_foundation/modeling_toy_vl_foundation.py",
            title="each medium's slot read under its own key",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                # media parameters travel in **kwargs to the inner model
                return self.model(input_ids=input_ids, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            def merge_media(self, embeds, token_ids, img_feats, vid_feats):
                vid_sel = token_ids == self.config.video_token_id
                sel = vid_sel[..., None].expand_as(embeds)
                embeds = embeds.masked_scatter(sel, vid_feats)
                lookups = {"image_grid": self.meta.get("image_grid"), "video_grid": self.meta.get("video_grid")}
                return embeds, lookups
            """,
            path="veomni/models/transformers/toy_vl/modeling_toy_vl.py",
            title="each medium on its own mask; a mapping that is for both media",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLModel.get_image_features")
            def image_feats(self, pixel_values, image_grid_thw=None, **kwargs):
                return self.visual(pixel_values.type(self.visual.dtype), grid_thw=image_grid_thw, **kwargs)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="upstream's video features call the image features: patching one patches both",
        ),
    )
    fix_safety = "No fix: where a media input goes depends on the patch."

    def finish(self) -> None:
        super().finish()
        ctx = self.ctx
        text = ctx.source.text
        if "override_method" in text and ("_image_" in text or "_video_" in text):
            self._unpatched_siblings()
        if ("image" in text or "img" in text) + ("video" in text or "vid" in text) + ("audio" in text) >= 2:
            seen: set[int] = set()
            lines = ctx.source.lines
            for node in nodes_of(ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                media = media_named("\n".join(lines[first - 1 : node.end_lineno]).lower())
                if not media:
                    continue  # every check below needs a medium's name in the function
                # what each check finds reads the function's subtree alone (shared with its verbatim copies)
                found = by_content(_media_findings, node, lines, media >= 2)
                for at, message in found:
                    if id(at) not in seen:
                        seen.add(id(at))
                        self.report(at, message)
        if "prepare_inputs_for_generation" in ctx.source.text:
            for patched in patched_methods(
                ctx.tree, ctx.source.text, "prepare_inputs_for_generation", WRAPPERS, path=ctx.source.path
            ):
                self.check(patched)

    def _swapped(self, func: ast.FunctionDef) -> None:
        """A media parameter handed on under another media input's name (`video_grid_thw=image_grid_thw`): the
        callee reads one modality's tensor as another's."""
        mine = {p for p in params_of(func) if MEDIA.match(p)}
        for node in _walk(func):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if (
                    kw.arg in mine
                    and isinstance(kw.value, ast.Name)
                    and kw.value.id in mine
                    and kw.value.id != kw.arg
                ):
                    self.report(
                        kw.value,
                        f"`{ast.unparse(node.func)}` gets `{kw.arg}={kw.value.id}`: the forward's own `{kw.value.id}` "
                        f"is handed on as `{kw.arg}`, so the callee reads one input as another",
                    )

    def _unpatched_siblings(self) -> None:
        """A spec that patches one medium's method (`get_image_features`) to stop doing something (a
        `torch.split` of a sequence-parallel output) or to add a sequence-parallel step, while the other medium's
        method of the same class (`get_video_features`), which upstream does the same thing, is left unpatched."""
        ctx = self.ctx
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        if module is None or not module.startswith("transformers."):
            return
        for stmt in ctx.tree.body:
            if not isinstance(stmt, ast.FunctionDef):
                continue
            cls, method = spec_target(stmt)
            if cls is None or method is None or modality(method) is None:
                continue
            for sibling in _siblings(method):
                if _local_method(ctx.tree, cls, sibling) is not None:
                    continue
                theirs = upstream_class_method(module, cls, sibling)
                original = upstream_class_method(module, cls, method)
                if theirs is None or original is None:
                    continue
                sib_calls = _callees(theirs)
                if method in sib_calls:
                    continue  # the sibling delegates to the patched method
                up_calls, my_calls = _callees(original), _callees(stmt)
                dropped = [c for c in up_calls if c not in my_calls and c in sib_calls and c not in _CASTS]
                added = [
                    c
                    for c in my_calls
                    if c not in up_calls and c not in sib_calls and any(w in c.lower() for w in _SP_CALL)
                ]
                if not dropped and not added:
                    continue
                what = (
                    f"no longer calls `{ast.unparse(sib_calls[dropped[0]].func)}`"
                    if dropped
                    else f"adds `{ast.unparse(my_calls[added[0]].func)}`"
                )
                self.report(
                    stmt.body[-1],
                    f"the patched `{cls}.{method}` {what}, but `{cls}.{sibling}` is not patched and upstream "
                    f"{'still does' if dropped else 'does not'}: the {modality(sibling)} inputs take the unpatched path",
                )

    def _withheld(self, patched: PatchedMethod) -> None:
        """A media input (or its lengths / mask) the upstream forward hands to `self.<method>(...)`, that the patch
        has and passes elsewhere, but leaves out of its own call of that method, though the method (the file's
        version, else upstream's) takes it: `self.get_audio_features(input_features)` without the lengths."""
        func, upstream = patched.func, patched.upstream
        mine = set(params_of(func))
        calls: dict[str, list[ast.Call]] = {}
        for node in _walk(func):
            if isinstance(node, ast.Call) and _self_method(node):
                calls.setdefault(_self_method(node), []).append(node)  # type: ignore[arg-type]
        done: set[tuple[int, str]] = set()
        for up in _walk(upstream):
            if not isinstance(up, ast.Call) or not calls.get(_self_method(up) or ""):
                continue
            method = _self_method(up) or ""
            given: list[tuple[str, str | int]] = [
                (a.id, i) for i, a in enumerate(up.args) if isinstance(a, ast.Name)
            ] + [(k.value.id, k.arg) for k in up.keywords if k.arg and isinstance(k.value, ast.Name)]
            for name, slot in given:
                if name not in mine or not (MEDIA.match(name) or modality(name)):
                    continue
                if not passed_on(func, name):
                    continue  # reported as never passed on
                target = _local_method(self.ctx.tree, patched.cls, method) or upstream_class_method(
                    patched.module, patched.cls, method
                )
                if target is None:
                    continue
                params = params_of(target)
                if isinstance(slot, int):
                    original = upstream_class_method(patched.module, patched.cls, method)
                    spelled = params_of(original) if original is not None else []
                    offset = 1 if spelled[:1] == ["self"] else 0
                    if slot + offset >= len(spelled):
                        continue
                    slot = spelled[slot + offset]
                if slot not in params:
                    continue
                derived = _derived_names(func, name)
                for call in calls[method]:
                    if any(k.arg is None for k in call.keywords):
                        continue  # a `**` mapping may carry it
                    if any(isinstance(n, ast.Name) and n.id in derived for n in _walk(call)):
                        continue
                    if (id(call), name) in done:
                        continue
                    done.add((id(call), name))
                    self.report(
                        call,
                        f"`{ast.unparse(call.func)}(...)` does not get `{name}`: the upstream forward hands it "
                        f"over as `{slot}`, this forward has it, and `{method}` takes it, so the callee runs "
                        "without it",
                    )

    def _reordered(self, func: ast.FunctionDef, upstream: ast.FunctionDef) -> None:
        """Media inputs passed positionally in another order than the upstream forward passes them to the same
        callee (`get_rope_index(input_ids, video_grid_thw, image_grid_thw, ...)`)."""
        mine = {p for p in params_of(func) if MEDIA.match(p)}
        calls = _calls_by_name(func)
        for up in _walk(upstream):
            if not isinstance(up, ast.Call) or not calls.get(call_name(up)):
                continue
            want = [a.id if isinstance(a, ast.Name) and a.id in mine else None for a in up.args]
            if sum(1 for w in want if w) < 2:
                continue
            for call in calls[call_name(up)]:
                got = [a.id if isinstance(a, ast.Name) and a.id in mine else None for a in call.args]
                media_want = [w for w in want if w]
                media_got = [g for g in got if g]
                if sorted(media_want) != sorted(media_got) or media_want == media_got:
                    continue
                at = next(
                    (a for a, g, w in zip(call.args, got, want) if g and w and g != w),
                    call,
                )
                self.report(
                    at,
                    f"`{ast.unparse(call.func)}` gets the media inputs in the order {', '.join(media_got)}; the "
                    f"upstream forward passes them as {', '.join(media_want)}: the callee reads one as another",
                )
                return

    def check(self, patched: PatchedMethod) -> None:
        media = [p for p in params_of(patched.upstream) if MEDIA.match(p)]
        if not media:
            return
        func = patched.func
        mine = params_of(func)
        used = body_names(func)
        missing = [m for m in media if m not in mine]
        if missing and not (_splatted(func) and _kwargs_reach_model(func)):
            self.report(
                def_span(self.ctx, func),
                f"`{patched.cls}.{patched.name}` drops the upstream media parameter(s) {', '.join(f'`{m}`' for m in missing)}"
                + (" (its `**kwargs` reach only the loss)" if _splatted(func) else ""),
            )
        elif missing:
            for node, key in _kwargs_removed(func):
                if key in missing:
                    self.report(
                        node,
                        f"`{key}` rides in `**kwargs` (the patch does not name it) and is removed from them here: "
                        "that input never reaches the model",
                    )
        self._swapped(func)
        self._reordered(func, patched.upstream)
        self._withheld(patched)
        for arg in [*func.args.args, *func.args.kwonlyargs]:
            if arg.arg not in media:
                continue
            store = overwritten_before_read(func, arg.arg)
            if store is not None:
                self.report(
                    store,
                    f"`{arg.arg}` is overwritten before it is read: the caller's value is dropped",
                )
                continue
            if arg.arg not in used or not passed_on(func, arg.arg):
                at, where = _where_dropped(func, patched.upstream, arg.arg, media)
                self.report(
                    at or arg,
                    f"`{arg.arg}` is accepted but never passed on{where}: that input is silently ignored",
                )


def _media_findings(node: ast.FunctionDef, several: bool) -> list[tuple[ast.AST, str]]:
    """The media findings of one function (``several``: it names two media or more), from its subtree alone."""
    found = unused_media_mappings(node)
    if several:  # one medium meeting another's data needs both named in the function
        found = [*crossings(node), *keyed_crossings(node), *one_sided_sp(node), *found]
    return found
