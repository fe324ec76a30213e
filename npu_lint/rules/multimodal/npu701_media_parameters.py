"""NPU701 media-parameters."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Example
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
from npu_lint.veomni.upstream import patched_methods


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


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
            low = _callee(node).lower()
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
        if isinstance(node, ast.Call) and _callee(node):
            out.setdefault(_callee(node), []).append(node)
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
        if not isinstance(up, ast.Call) or not mine.get(_callee(up)):
            continue
        callee = _callee(up)
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


class MediaParameters(WrapperRule):
    code = "NPU701"
    name = "media-parameters"
    summary = "A patched multimodal forward drops an upstream media parameter, or accepts it and never passes it on."
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
    )
    bad = (
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
    )
    good = (
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
    )
    fix_safety = "No fix: where a media input goes depends on the patch."

    def finish(self) -> None:
        super().finish()
        ctx = self.ctx
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

    def _reordered(self, func: ast.FunctionDef, upstream: ast.FunctionDef) -> None:
        """Media inputs passed positionally in another order than the upstream forward passes them to the same
        callee (`get_rope_index(input_ids, video_grid_thw, image_grid_thw, ...)`)."""
        mine = {p for p in params_of(func) if MEDIA.match(p)}
        calls = _calls_by_name(func)
        for up in _walk(upstream):
            if not isinstance(up, ast.Call) or not calls.get(_callee(up)):
                continue
            want = [a.id if isinstance(a, ast.Name) and a.id in mine else None for a in up.args]
            if sum(1 for w in want if w) < 2:
                continue
            for call in calls[_callee(up)]:
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
