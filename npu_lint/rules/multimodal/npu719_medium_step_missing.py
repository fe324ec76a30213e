"""NPU719 medium-step-missing."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._twins import MEDIA, media_of, medium_words, rewrite, spellings

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _statements(func: ast.AST) -> list[ast.stmt]:
    """The function's statements at any depth of its blocks, nested scopes excluded."""
    out: list[ast.stmt] = []
    todo = list(func.body)  # type: ignore[attr-defined]
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, _SCOPES):
            continue
        out.append(stmt)
        for field in ("body", "orelse", "finalbody"):
            todo.extend(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            todo.extend(handler.body)
    return out


def _one_medium(node: ast.AST) -> str | None:
    found: set[str] = set()
    for word in spellings(node):
        found |= media_of(word)
        if len(found) > 1:
            return None
    return found.pop() if found else None


def _target(stmt: ast.stmt) -> ast.AST | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return stmt.targets[0]
    if isinstance(stmt, ast.AugAssign):
        return stmt.target
    return None


def _mask_word(node: ast.AST) -> tuple[str, str] | None:
    """The one medium mask ``node`` names (`image_mask`, `out["vid_mask"]`, `input_image_mask`): (word, medium)."""
    found: list[tuple[str, str]] = []
    for word in spellings(node):
        media = media_of(word)
        if media:
            if len(media) > 1 or "mask" not in word.lower():
                return None
            found.append((word, media.pop()))
    if len({m for _, m in found}) != 1:
        return None
    return found[0]


def _bookkeeping(stmt: ast.stmt) -> tuple[str, str, str] | None:
    """(holder, word, medium) of a per-medium bookkeeping statement: `ids[<medium mask>] = v` (holder: the
    indexed tensor), `out["<medium>_mask"] = v` (holder: the dict), `out.update(<medium>_inputs)` (holder: the
    dict and the method)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        target = stmt.targets[0]
        index = target.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, str):
            media = media_of(index.value)
            if len(media) == 1 and "mask" in index.value:
                return ast.unparse(target.value), index.value, media.pop()
            return None
        found = _mask_word(index)
        if found is not None:
            return ast.unparse(target.value), found[0], found[1]
        return None
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "update"
        and len(stmt.value.args) == 1
        and isinstance(stmt.value.args[0], ast.Name)
    ):
        name = stmt.value.args[0].id
        media = media_of(name)
        if len(media) == 1:
            return ast.unparse(stmt.value.func), name, media.pop()
    return None


_COUNT_WORDS = ("grid", "num", "len", "count", "size", "seqlen")
_SLOT = "<M>"
_IMAGE_WORD = re.compile(r"(?<![A-Za-z0-9])(image|images|img|imgs)(?![A-Za-z0-9])", re.IGNORECASE)


def _shape(text: str, medium: str) -> str:
    """A holder's spelling with its medium's words replaced by a slot (`mask["video"]` -> `mask["<M>"]`)."""
    out = rewrite(text, medium, "image") if medium != "image" else text
    return _IMAGE_WORD.sub(_SLOT, out)


def _singular(name: str) -> str:
    return re.sub(
        r"(?<![A-Za-z0-9])(image|video|audio|img|vid)s(?![A-Za-z0-9])", r"\1", name, flags=re.IGNORECASE
    )


def _respell(shape: str, medium: str) -> str:
    return (
        rewrite(shape.replace(_SLOT, "image"), "image", medium)
        if medium != "image"
        else shape.replace(_SLOT, "image")
    )


def _two_media(text: str) -> bool:
    """The cheap pre-check: the file names at least two media (a substring test per medium)."""
    found = 0
    for words in (("image", "img", "pixel_values"), ("video", "vid_"), ("audio",)):
        for word in words:
            if word in text:
                found += 1
                break
    return found >= 2


def _vocab(func: ast.AST) -> set[str]:
    """The spellings a function holds, read off the file's per-type node index."""
    out: set[str] = set()
    for n in nodes_of(func, ast.Name, ast.Attribute, ast.Constant, ast.keyword, ast.arg):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant):
            if isinstance(n.value, str) and len(n.value) < 80:
                out.add(n.value)
        elif isinstance(n, ast.keyword):
            if n.arg:
                out.add(n.arg)
        else:
            out.add(n.arg)  # type: ignore[attr-defined]
    return out


def _refusal(stmt: ast.AST) -> bool:
    """`if "pixel_values_videos" in inputs: raise ...`: a medium named only to be refused."""
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and bool(stmt.body)
        and isinstance(stmt.body[-1], ast.Raise)
    )


def _handled(func: ast.AST) -> set[str]:
    """The media a function handles: named anywhere in it but in the test of a refusal (`if videos: raise`)."""
    out: set[str] = set()
    todo = list(ast.iter_child_nodes(func))
    while todo:
        n = todo.pop()
        if _refusal(n):
            todo.extend(n.body)  # type: ignore[attr-defined]
            continue
        if isinstance(n, ast.Name):
            out |= media_of(n.id)
        elif isinstance(n, ast.Attribute):
            out |= media_of(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 80:
            out |= media_of(n.value)
        elif isinstance(n, ast.keyword) and n.arg:
            out |= media_of(n.arg)
        elif isinstance(n, ast.arg):
            out |= media_of(n.arg)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _receiver(node: ast.AST) -> tuple[str, set[str]] | None:
    """What a dict display or a call with keywords hands on: its receiver (`dict` for a dict display or `dict()`,
    else the callee's spelling) and the names of its entries."""
    if isinstance(node, ast.Dict):
        return "dict", {
            k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
    if isinstance(node, ast.Call) and node.keywords:
        return ast.unparse(node.func), {k.arg for k in node.keywords if k.arg}
    return None


def _filled(func: ast.AST) -> tuple[dict[int, str], set[tuple[str, str]]]:
    """The dicts a function builds under a name: the name each dict display / ``dict(...)`` / ``d.update(...)``
    fills (by node id), and every (name, key) put in one (``d = {...}``, ``d[key] = v``, ``d.update(key=v)``,
    ``d.setdefault(key, v)``): entries added after the display are handed on with it."""
    holders: dict[int, str] = {}
    keys: set[tuple[str, str]] = set()

    def entries(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Dict):
            return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if isinstance(node, ast.Call):
            return {k.arg for k in node.keywords if k.arg}
        return set()

    for n in nodes_of(func, ast.Assign, ast.Call):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            target, value = n.targets[0], n.value
            if isinstance(target, ast.Name) and (
                isinstance(value, ast.Dict)
                or (isinstance(value, ast.Call) and _last_word(value.func) == "dict")
            ):
                holders[id(value)] = target.id
                keys.update((target.id, k) for k in entries(value))
            elif (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
            ):
                keys.add((target.value.id, target.slice.value))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.attr in ("update", "setdefault")
        ):
            name = n.func.value.id
            holders[id(n)] = name
            keys.update((name, k) for k in entries(n))
            for arg in n.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    keys.add((name, arg.value))
                else:
                    keys.update((name, k) for k in entries(arg))
    return holders, keys


def _last_word(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _holder(value: ast.AST) -> ast.AST:
    return value.func.value if isinstance(value, ast.Call) else value.value  # type: ignore[attr-defined]


def _keyed_read(value: ast.AST, medium: str) -> bool:
    """`inputs.get("image_grid_thw")` / `inputs["image_grid_thw"]`: one medium's entry read from a container by
    its key, a container (the processor's outputs, a batch) that holds every medium's entry under its own key."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("get", "pop")
    ):
        holder, key = value.func.value, value.args[0] if value.args else None
    elif isinstance(value, ast.Subscript):
        holder, key = value.value, value.slice
    else:
        return False
    return (
        isinstance(holder, (ast.Name, ast.Attribute))
        and not media_of(ast.unparse(holder))
        and isinstance(key, ast.Constant)
        and isinstance(key.value, str)
        and media_of(key.value) == {medium}
    )


def _union_operands(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_operands(node.left) + _union_operands(node.right)
    return [node]


class MediumStepMissing(Rule):
    code = "NPU719"
    name = "medium-step-missing"
    summary = (
        "A function that holds several media (image, video, audio) does a per-medium step for one of them and "
        "not for another whose data it has: a mask stored, a placeholder reset, a token type written, processor "
        "outputs merged, a grid passed on, a placeholder union, a block reading another medium's mask."
    )
    why = (
        "Data transforms, collators and multimodal forwards repeat the same bookkeeping once per medium: store "
        "its placeholder mask, reset its placeholder ids to a valid token before the embedding lookup, write its "
        "token type for the position-id function, merge its processor outputs, hand its grid to the position-id "
        "function, scatter its features at its own mask. A step kept for one medium and lost (or written with the "
        "other medium's mask) for another that the same function handles leaves that medium's placeholders "
        "unfilled, its positions laid out as text, or its features at another medium's rows; the text-only and "
        "image-only tests still pass. The check compares the function with itself: a statement about one medium "
        "whose rewrite for another medium (`image` -> `video`, `IMAGE_INPUT_INDEX` -> `VIDEO_INPUT_INDEX`, "
        "`pixel_values` -> `pixel_values_videos`) names only things the function has, but whose target (or "
        "call) is never written for that medium; a dict display or call keyword list that passes one medium's "
        "entry but not the other's while the function holds the other's value; a union of placeholder masks used "
        "to reset ids that leaves out a medium whose mask the function builds; and, in a block guarded by one "
        "medium (`if pixel_values_videos is not None:`), a read of another medium's mask where the block's own "
        "medium has one. Two media written into one holder with the same non-zero marker (`types[image_mask] = 1`, "
        "`types[video_mask] = 1`) are reported too: the reader cannot tell them apart. Also: a dict that merges "
        "per-medium processor outputs (`{**text_inputs, **images_inputs, **videos_inputs}`) and leaves out one "
        "the function computes (`audio_inputs`); a block that appends a medium's item to one per-medium record "
        'and not to the record every other block appends beside it (`conv_audios` without `mask["audio"]`); '
        "one medium's count or layout read off another medium's grid (`image_seq_length = "
        "next(video_grid_thw)...`) or handed to its own method (`self.video_pattern(next(image_token_num_list))`) where "
        "the function has its own; and a media list tested `is not None` where the "
        "function tests its other media lists for emptiness (the data transform passes `[]` for a missing medium)."
    )
    bad = (
        Example(
            """
            def pack_sample(ids, img_inputs, vid_inputs, IMG_TOKEN, VID_TOKEN):
                out = {}
                out["img_mask"] = ids == IMG_TOKEN
                out["vid_mask"] = ids == VID_TOKEN
                out["ids"] = ids.clone()
                out["ids"][out["img_mask"]] = 0
                out.update(img_inputs)
                out.update(vid_inputs)
                return out
            """,
            path="veomni/data/toy_transform.py",
            title="video placeholders are never reset to a valid id",
        ),
        Example(
            """
            def build(input_ids, image_mask, video_mask, audio_mask, position_fn, image_grid_thw, video_grid_thw):
                input_ids[image_mask | video_mask] = 0
                return position_fn(input_ids=input_ids, image_grid_thw=image_grid_thw)
            """,
            path="veomni/data/toy_omni_transform.py",
            title="audio placeholders left in the ids; the video grid not passed on",
        ),
        Example(
            """
            def merge(embeds, image_embeds, video_embeds, image_mask, video_mask, pixel_values_videos):
                embeds = embeds.masked_scatter(image_mask, image_embeds)
                if pixel_values_videos is not None:
                    offset = image_mask.sum()
                    embeds = embeds.masked_scatter(video_mask, video_embeds[offset:])
                return embeds
            """,
            path="veomni/models/toy_vl/modeling_toy_vl.py",
            title="the video block reads the image mask",
        ),
        Example(
            """
            class ToyProcessor:
                def __call__(self, text, images=None, videos=None, audios=None):
                    audio_inputs = self.feature_extractor(audios) if audios else {}
                    images_inputs = self.image_processor(images=images) if images else {}
                    videos_inputs = self.video_processor(videos=videos) if videos else {}
                    return {**self.tokenizer(text), **images_inputs, **videos_inputs}
            """,
            path="veomni/models/transformers/toy_omni/processing_toy_omni.py",
            title="the audio processor outputs never reach the batch",
        ),
    )
    good = (
        Example(
            """
            class ToyProcessor:
                def __call__(self, text, images=None, videos=None, audios=None):
                    audio_inputs = self.feature_extractor(audios) if audios else {}
                    images_inputs = self.image_processor(images=images) if images else {}
                    videos_inputs = self.video_processor(videos=videos) if videos else {}
                    return {**self.tokenizer(text), **images_inputs, **videos_inputs, **audio_inputs}
            """,
            path="veomni/models/transformers/toy_omni/processing_toy_omni.py",
        ),
        Example(
            """
            def pack_sample(ids, img_inputs, vid_inputs, IMG_TOKEN, VID_TOKEN, vid_meta):
                out = {}
                out["img_mask"] = ids == IMG_TOKEN
                out["vid_mask"] = ids == VID_TOKEN
                out["ids"] = ids.clone()
                out["ids"][out["img_mask"] | out["vid_mask"]] = 0
                out.update(img_inputs)
                out.update(vid_inputs)
                out["vid_meta"] = vid_meta
                return out
            """,
            path="veomni/data/toy_transform.py",
        ),
        Example(
            """
            def build(input_ids, image_mask, video_mask, audio_mask, position_fn, image_grid_thw, video_grid_thw):
                input_ids[image_mask | video_mask | audio_mask] = 0
                visual_mask = image_mask | video_mask
                return position_fn(input_ids=input_ids, image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw)
            """,
            path="veomni/data/toy_omni_transform.py",
        ),
    )
    fix_safety = "No fix: the missing medium's step is the author's to write."
    requires = (_two_media,)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        vocab = _vocab(node)
        held: set[str] = set()
        for word in vocab:
            held |= media_of(word)
            if len(held) == len(MEDIA):
                break
        if len(held) < 2:
            return
        self._held = held
        stmts = _statements(node)
        self._stmts = stmts
        # (holder, medium) of each bookkeeping step the function does
        steps = {(shape[0], shape[2]) for shape in map(_bookkeeping, stmts) if shape is not None}
        markers: dict[tuple[str, str], tuple[str, ast.stmt]] = {}
        for stmt in stmts:
            self._step(stmt, vocab, held, steps)
            self._marker(stmt, markers)
            if isinstance(stmt, ast.If):
                self._block(stmt, vocab)
        self._paired_appends(node)
        self._guard_styles(node)
        assigned = {n.id for n in nodes_of(node, ast.Name) if isinstance(n.ctx, ast.Store)}
        self._func = node
        self._receivers = [r for r in map(_receiver, nodes_of(node, ast.Dict, ast.Call)) if r is not None]
        self._holders, self._filled = _filled(node)
        for sub in nodes_of(node, ast.Dict, ast.Call, ast.Assign):
            if isinstance(sub, ast.Dict):
                keys = [k for k in sub.keys if k is not None]
                self._entries(
                    sub, keys, [v for k, v in zip(sub.keys, sub.values) if k is not None], vocab, None
                )
                self._spreads(sub, held, assigned)
            elif isinstance(sub, ast.Call) and not sub.keywords:
                self._crossed_call(sub, vocab)
            elif isinstance(sub, ast.Call) and sub.keywords:
                callee = ast.unparse(sub.func)
                if media_of(callee):
                    continue  # `processor.image_processor(images=...)`: one medium's own call
                named = [k for k in sub.keywords if k.arg]
                self._entries(sub, [k for k in named], [k.value for k in named], vocab, callee)
            elif isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.BinOp):
                        self._union(target.slice, vocab)

    def _guard_styles(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Media lists a function takes tested two ways: `if images:` / `if videos:` (an empty list means no such
        medium, the data transform passes `[]`) beside `if audios is not None:` (an empty list is processed as
        input)."""
        media_params = {
            a.arg
            for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
            if len(media_of(a.arg)) == 1 and "mask" not in a.arg and "grid" not in a.arg
        }
        if len(media_params) < 2:
            return
        truthy: dict[str, ast.AST] = {}
        not_none: dict[str, ast.AST] = {}
        for test in nodes_of(func, ast.If):
            cond = test.test
            if isinstance(cond, ast.Name) and cond.id in media_params:
                truthy.setdefault(cond.id, cond)
            elif (
                isinstance(cond, ast.Compare)
                and isinstance(cond.left, ast.Name)
                and cond.left.id in media_params
                and len(cond.ops) == 1
                and isinstance(cond.ops[0], ast.IsNot)
                and isinstance(cond.comparators[0], ast.Constant)
                and cond.comparators[0].value is None
            ):
                not_none.setdefault(cond.left.id, cond)
        siblings = [p for p in truthy if p not in not_none]
        for name, cond in sorted(not_none.items()):
            if name in truthy or len([p for p in siblings if media_of(p) != media_of(name)]) >= 2:
                other = next(p for p in sorted(truthy) if p != name) if name not in truthy else name
                self.report(
                    cond,
                    f"`{ast.unparse(cond)}` lets an empty `{name}` through, where this function tests "
                    f"`if {other}:` for its media: a sample without this medium (passed as `[]`) is processed as "
                    "if it had one",
                )
                return

    def _spreads(self, node: ast.Dict, held: set[str], assigned: set[str]) -> None:
        """`{**text_inputs, **image_inputs, **video_inputs}`: per-medium processor outputs merged into one dict
        that leaves out a medium whose outputs the function computes (`audio_inputs = ...`)."""
        spread = [v.id for k, v in zip(node.keys, node.values) if k is None and isinstance(v, ast.Name)]
        per_medium: dict[str, str] = {}
        for name in spread:
            media = media_of(name)
            if len(media) == 1:
                per_medium[media.pop()] = name
        if len(per_medium) < 2:
            return
        for other in sorted(held - set(per_medium)):
            twins = {_singular(rewrite(name, medium, other)) for medium, name in per_medium.items()}
            missing = sorted(a for a in assigned if _singular(a) in twins and a not in spread)
            if missing:
                self.report(
                    node,
                    f"this dict merges the {', '.join(sorted(per_medium))} outputs but not `{missing[0]}`, which the "
                    f"function computes: the {other}'s processor outputs never reach the batch, so its placeholders "
                    "are expanded with no features behind them",
                )
                return

    def _paired_appends(self, func: ast.AST) -> None:
        """Per-medium records appended together (`conv_videos.append(v)` with `mask["video"].append(flag)`): a
        block that appends a medium's item to one record and not to the record every other block keeps beside it
        (a video's audio track added to `conv_audios` without its `mask["audio"]` entry) leaves the two records of
        that medium of different lengths, so a later zip pairs the wrong items."""
        blocks: list[list[ast.stmt]] = []
        for sub in nodes_of(func, ast.If, ast.For, ast.While):
            blocks.append(sub.body)
            if sub.orelse and not (len(sub.orelse) == 1 and isinstance(sub.orelse[0], ast.If)):
                blocks.append(sub.orelse)
        seen: list[tuple[int, str, dict[str, ast.stmt]]] = []
        for index, block in enumerate(blocks):
            shapes: dict[str, dict[str, ast.stmt]] = {}
            for stmt in block:
                call = stmt.value if isinstance(stmt, ast.Expr) else None
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in ("append", "extend")
                ):
                    continue
                holder = call.func.value
                medium = _one_medium(holder)
                if medium is None:
                    continue
                shape = _shape(ast.unparse(holder), medium)
                shapes.setdefault(medium, {})[shape] = stmt
            for medium, by_shape in shapes.items():
                seen.append((index, medium, by_shape))
        if len(seen) < 3:
            return
        for index, medium, by_shape in seen:
            for shape, stmt in by_shape.items():
                for partner in {s for _, _, other in seen for s in other} - set(by_shape):
                    together = [
                        (i, m)
                        for i, m, other in seen
                        if shape in other and partner in other and (i, m) != (index, medium)
                    ]
                    alone = [
                        (i, m)
                        for i, m, other in seen
                        if shape in other and partner not in other and (i, m) != (index, medium)
                    ]
                    if len(together) >= 2 and not alone:
                        self.report(
                            stmt,
                            f"`{ast.unparse(stmt)}` records a {medium} item without the `{_respell(partner, medium)}` "
                            f"entry every other block appends beside it: the {medium} records get different lengths "
                            "and a later zip pairs the wrong items",
                        )
                        return

    def _step(self, stmt: ast.stmt, vocab: set[str], held: set[str], steps: set[tuple[str, str]]) -> None:
        """One medium's bookkeeping step: `ids[<medium mask>] = v` (a placeholder reset, a token type),
        `out["<medium>_mask"] = ...` (a mask stored), `out.update(<medium>_inputs)` (processor outputs merged)."""
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            self._crossed(stmt, stmt.targets[0], vocab)
            self._crossed_grid(stmt, stmt.targets[0], vocab)
        shape = _bookkeeping(stmt)
        if shape is None:
            return
        holder, word, medium = shape
        for other in sorted(held - {medium}):
            twin = rewrite(word, medium, other)
            if twin == word or twin not in vocab:
                continue  # the function has nothing of the other medium for this step
            if (holder, other) in steps:
                continue
            self.report(
                stmt,
                f"`{ast.unparse(stmt)}` is done for the {medium} but not for the {other}, though this function has "
                f"the {other}'s `{twin}`: no statement does it for `{twin}`, so the {other}'s placeholders, mask "
                "or inputs miss this step",
            )
            return

    def _marker(self, stmt: ast.stmt, markers: dict[tuple[str, str], tuple[str, ast.stmt]]) -> None:
        """`types[image_mask] = 1` and `types[video_mask] = 1`: two media written into one holder with the same
        non-zero marker (a token type, a placeholder index), so the reader cannot tell them apart (a reset to 0
        is the same for every medium and is not a marker)."""
        shape = _bookkeeping(stmt)
        if shape is None or not isinstance(stmt, ast.Assign):
            return
        value = stmt.value
        if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value != 0):
            return
        holder, _, medium = shape
        key = (holder, repr(value.value))
        seen = markers.get(key)
        if seen is None:
            markers[key] = (medium, stmt)
        elif seen[0] != medium:
            self.report(
                stmt,
                f"`{ast.unparse(stmt)}` marks the {medium} with `{value.value}`, the marker line {seen[1].lineno} "
                f"already writes for the {seen[0]} into `{holder}`: the reader takes one medium's positions for the "
                "other's",
            )

    def _crossed(self, stmt: ast.Assign, target: ast.AST, vocab: set[str]) -> None:
        """`video_mask = ids == IMAGE_TOKEN`: one medium's slot computed from another medium's marker alone,
        where the function has the slot's own."""
        if not any("mask" in w.lower() for w in spellings(target)):
            return
        own = _one_medium(target)
        value = _one_medium(stmt.value)
        if own is None or value is None or own == value:
            return
        words = medium_words(stmt.value, value)
        twins = {rewrite(w, value, own) for w in words}
        spelled = ast.unparse(target)
        if any(
            other is not stmt
            and isinstance(other, ast.Assign)
            and any(ast.unparse(t) == spelled for t in other.targets)
            and _one_medium(other.value) == own
            for other in self._stmts
        ):
            return  # another branch computes it from its own medium: this one is a deliberate alternative
        if twins <= vocab | self._module_names() and twins != words:
            self.report(
                stmt.value,
                f"the {own}'s `{ast.unparse(target)}` is computed from the {value}'s "
                f"`{sorted(words)[0]}` alone, where this function has the {own}'s own `{sorted(twins)[0]}`: "
                f"the {own} entry marks the {value}'s positions",
            )

    def _crossed_call(self, call: ast.Call, vocab: set[str]) -> None:
        """`self.video_pattern(next(image_token_num_list))`: a medium's own method handed another medium's
        counts or grids alone, where the function has the method's medium's own."""
        name = call_name(call)
        own = media_of(name)
        if len(own) != 1 or not call.args:
            return
        medium = own.pop()
        words = set().union(*(spellings(a) for a in call.args))
        media = set().union(*(media_of(w) for w in words)) if words else set()
        if len(media) != 1 or medium in media:
            return
        other = media.pop()
        counted = [
            w for w in sorted(words) if other in media_of(w) and any(k in w.lower() for k in _COUNT_WORDS)
        ]
        for word in counted:
            twin = rewrite(word, other, medium)
            if twin != word and twin in vocab:
                self.report(
                    call,
                    f"`{name}` (the {medium}'s) is handed the {other}'s `{word}`, where this function has the "
                    f"{medium}'s own `{twin}`: the {medium} placeholders get another medium's count (and consume it)",
                )
                return

    def _crossed_grid(self, stmt: ast.Assign, target: ast.AST, vocab: set[str]) -> None:
        """`image_seq_length = next(video_grid_thw).prod() // merge_length_image`: one medium's token count (or
        layout) read off another medium's grid, where the function has the medium's own grid."""
        own = _one_medium(target)
        if own is None or not isinstance(target, ast.Name):
            return
        if isinstance(stmt.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return  # a table of every medium's keys, not one medium's value
        words = spellings(stmt.value)
        others = set().union(*(media_of(w) for w in words)) - {own} if words else set()
        if len(others) != 1:
            return
        grids = [
            w
            for w in spellings(stmt.value)
            if "grid" in w.lower() and (m := media_of(w)) and own not in m and len(m) == 1
        ]
        for word in grids:
            other = media_of(word).pop()
            twin = rewrite(word, other, own)
            if twin == word or twin not in vocab or twin in words:
                continue
            if any(
                s is not stmt
                and isinstance(s, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == target.id for t in s.targets)
                and word not in spellings(s.value)
                and twin in spellings(s.value)
                for s in self._stmts
            ):
                continue  # another branch computes it from its own grid: an alternative, not a slip
            self.report(
                stmt.value,
                f"the {own}'s `{target.id}` is computed from the {other}'s `{word}`, where this function has the "
                f"{own}'s own `{twin}`: the {own} placeholders get another medium's token count (and consume its "
                "grid)",
            )
            return

    def _module_names(self) -> set[str]:
        """The names the module imports or binds at its top level (`VIDEO_INPUT_INDEX` imported once)."""
        names = getattr(self, "_names", None)
        if names is None:
            names = set()
            for stmt in self.ctx.tree.body:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
                elif isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                        names.update(t.id for t in elts if isinstance(t, ast.Name))
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(stmt.name)
            self._names = names
        return names

    def _block(self, stmt: ast.If, vocab: set[str]) -> None:
        own = _one_medium(stmt.test)
        if own is None:
            return
        for inner in stmt.body:
            for sub in _walk(inner):
                if not (isinstance(sub, ast.Name) and "mask" in sub.id and isinstance(sub.ctx, ast.Load)):
                    continue
                media = media_of(sub.id)
                if len(media) != 1 or own in media:
                    continue
                other = media.pop()
                twin = rewrite(sub.id, other, own)
                if twin in vocab and twin != sub.id:
                    self.report(
                        sub,
                        f"the {own} block (`if {ast.unparse(stmt.test)}:`) reads the {other}'s `{sub.id}`, where "
                        f"this function has the {own}'s own `{twin}`: the {own} rows are placed or sliced by "
                        f"another medium's positions",
                    )
                    return

    def _entries(
        self, node: ast.AST, keys: list, values: list[ast.AST], vocab: set[str], callee: str | None
    ) -> None:
        names: list[str] = []
        for key in keys:
            if isinstance(key, ast.keyword):
                names.append(key.arg or "")
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.append(key.value)
            else:
                names.append("")
        present = set(names)
        if len([n for n in names if n]) < 2:
            return
        for key, name, value in zip(keys, names, values):
            if not any(k in name for k in ("grid", "mask", "pixel_values", "seqlen")):
                continue
            media = media_of(name) if name else set()
            if len(media) != 1:
                continue
            medium = media.pop()
            value_words = medium_words(value, medium)
            if not value_words:
                continue
            for other in MEDIA:
                if other == medium:
                    continue
                twin_key = rewrite(name, medium, other)
                if twin_key == name or twin_key in present:
                    continue
                receiver = "dict" if callee in (None, "dict") else callee
                if any(
                    r == receiver and twin_key in keys_ and name not in keys_ for r, keys_ in self._receivers
                ):
                    continue  # one call (or dict) per medium: the twin's entry goes to its own call
                if (self._holders.get(id(node)), twin_key) in self._filled:
                    continue  # the dict gets the twin's entry before or after (`d["video_grid_thw"] = ...`)
                twin_values = {rewrite(w, medium, other) for w in value_words}
                if twin_values <= vocab and twin_key in vocab | twin_values:
                    has = f"this function has `{sorted(twin_values)[0]}`"
                elif (
                    other in self._held
                    and other in _handled(self._func)
                    and (twin_key in self.ctx.source.text or {medium, other} == {"image", "video"})
                    and _keyed_read(value, medium)
                ):
                    # the entry is read off a container that holds every medium's entries by key, and the
                    # function handles the other medium: the twin is one `.get` away (images and videos have the
                    # same entries, from the same processor; audio has its own, so its twin must be one the file
                    # spells somewhere)
                    has = f"this function handles the {other} and `{ast.unparse(_holder(value))}` carries its entry"
                else:
                    continue
                where = f"`{callee}(...)`" if callee else "this dict"
                self.report(
                    key if isinstance(key, ast.keyword) else node,
                    f"{where} passes the {medium}'s `{name}` but not the {other}'s `{twin_key}`, though {has}: the "
                    f"receiver never sees the {other}'s entry",
                )
                return

    def _union(self, index: ast.BinOp, vocab: set[str]) -> None:
        operands = _union_operands(index)
        if len(operands) < 2:
            return
        covered: dict[str, str] = {}
        for op in operands:
            medium = _one_medium(op)
            if medium is None:
                return
            covered[medium] = ast.unparse(op)
        for other in MEDIA:
            if other in covered:
                continue
            for medium, text in covered.items():
                twin = rewrite(text, medium, other)
                if all(w in vocab for w in medium_words_text(twin, other)):
                    self.report(
                        index,
                        f"`{ast.unparse(index)}` resets the placeholders of {', '.join(sorted(covered))} but not the "
                        f"{other}'s (`{twin}`), which this function also builds: the {other} placeholder ids are "
                        "left in the token ids",
                    )
                    return


def medium_words_text(text: str, medium: str) -> set[str]:
    """The words of an expression's text that name ``medium``."""
    try:
        node = ast.parse(text, mode="eval")
    except SyntaxError:
        return {"\0"}
    words = medium_words(node, medium)
    return words or {"\0"}
