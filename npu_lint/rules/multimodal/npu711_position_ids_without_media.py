"""NPU711 position-ids-without-media."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._modality import modality

# the model's position-id function, by the called name's last component
_POSITION_FUNC = re.compile(r"^(get_)?(\w+_)?rope_index$|^(get_)?position_id(s)?_(func|fn)$")
# names that carry a sample's media layout (grids, per-medium configs, feature lengths)
_LAYOUT = re.compile(r"grid|multimodal|mm_config|media|feature_lengths|seqlens|second_per")
_TEXT_ONLY = frozenset({"input_ids", "attention_mask", "position_ids", "cache_position", "mm_token_type_ids"})


def _layout_name(name: str) -> bool:
    low = name.lower()
    return _LAYOUT.search(low) is not None or (modality(name) is not None and "mask" not in low)


class PositionIdsWithoutMedia(Rule):
    code = "NPU711"
    name = "position-ids-without-media"
    summary = (
        "The model's position-id function (`get_rope_index`, a data transform's `position_id_func`) is called "
        "with the text inputs only, while the calling function holds the sample's media layout (grids, "
        "per-medium configs): the media placeholders get text positions."
    )
    why = (
        "Multimodal RoPE (M-RoPE and its relatives) gives every image, video and audio placeholder a position "
        "computed from the medium's grid (`image_grid_thw`, `video_grid_thw`, the audio feature lengths). The "
        "position-id function only knows the grids it is given: called with `input_ids` and `attention_mask` "
        "alone it falls back to the 1-D text layout for the whole sample, the data transform writes those "
        "positions into the batch, and training runs without an error on positions that disagree with the "
        "media tokens (the model was pretrained on the 3-D layout). The check looks at each call of a "
        "position-id function in a function (a data transform, a collator, a model forward) that has a "
        "parameter or local holding media layout: the call must pass some of it (by keyword, positionally "
        "beyond the text inputs, or through `**`)."
    )
    bad = (
        Example(
            """
            def encode_sample(sample, processor, position_id_func):
                grids = processor.media_grids(sample)
                input_ids, attention_mask = processor.encode(sample["text"], **grids)
                position_ids = position_id_func(input_ids=input_ids, attention_mask=attention_mask)["position_ids"]
                return {"input_ids": input_ids, "position_ids": position_ids, **grids}
            """,
            path="veomni/data/multimodal/toy_transform.py",
            title="a data transform that builds the grids but hands them only to the tokenizer",
        ),
        Example(
            """
            class ToyCollator:
                def __init__(self, model):
                    self.model = model

                def __call__(self, features):
                    batch = self.stack(features)
                    image_grid_thw = batch.get("image_grid_thw")
                    batch["position_ids"], _ = self.model.get_rope_index(batch["input_ids"], batch["attention_mask"])
                    batch["image_grid_thw"] = image_grid_thw
                    return batch
            """,
            path="veomni/data/toy_collator.py",
            title="a collator with the image grids in hand, positions computed without them",
        ),
    )
    good = (
        Example(
            """
            def encode_sample(sample, processor, position_id_func, model):
                grids = processor.media_grids(sample)
                input_ids, attention_mask = processor.encode(sample["text"], **grids)
                position_ids = position_id_func(input_ids=input_ids, attention_mask=attention_mask, **grids)
                text_only = model.get_rope_index(input_ids, None, None, attention_mask)
                return {"input_ids": input_ids, "position_ids": position_ids, "text": text_only}


            def text_positions(input_ids, attention_mask, position_id_func):
                return position_id_func(input_ids=input_ids, attention_mask=attention_mask)
            """,
            path="veomni/data/multimodal/toy_transform.py",
            title="the grids passed on; a text-only function; media slots given explicitly",
        ),
    )
    fix_safety = "No fix: which layout argument the position-id function takes depends on the model."
    requires = (("rope_index", "position_id_func", "position_ids_func", "position_id_fn"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            calls = [
                n
                for n in nodes_of(func, ast.Call)
                if isinstance(n, ast.Call) and _POSITION_FUNC.match(_last(n.func)) is not None
            ]
            if not calls:
                continue
            layout = self._layout(func)
            if not layout:
                continue
            for call in calls:
                if self._own(call, func) and not self._passes_layout(call, layout):
                    name, line = min(
                        layout.items(),
                        key=lambda kv: (_LAYOUT.search(kv[0].lower()) is None, "mask" in kv[0], kv[1]),
                    )
                    self.report(
                        call,
                        f"`{ast.unparse(call.func)}(...)` gets only the text inputs, while `{func.name}` holds the "
                        f"media layout `{name}` (line {line}): every media placeholder gets a text position "
                        "instead of the model's multimodal layout (pass the grids on)",
                    )

    @staticmethod
    def _own(call: ast.Call, func: ast.AST) -> bool:
        """Whether ``call`` belongs to ``func`` and not to a function nested in it."""
        for node in _walk(func):
            if node is not func and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if any(sub is call for sub in _walk(node)):
                    return False
        return True

    @staticmethod
    def _layout(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int]:
        """Parameters and locals of ``func`` holding media layout, with the line they are bound at."""
        out: dict[str, int] = {}
        args = func.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if _layout_name(a.arg):
                out.setdefault(a.arg, func.lineno)
        for node in _walk(func):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for n in _walk(target):
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and _layout_name(n.id):
                            out.setdefault(n.id, node.lineno)
        return out

    @staticmethod
    def _passes_layout(call: ast.Call, layout: dict[str, int]) -> bool:
        if len(call.args) > 2 or any(isinstance(a, ast.Starred) for a in call.args):
            return True
        for kw in call.keywords:
            if kw.arg is None or kw.arg not in _TEXT_ONLY:
                return True
        values = [*call.args, *(kw.value for kw in call.keywords)]
        return any(isinstance(n, ast.Name) and n.id in layout for v in values for n in _walk(v))


def _last(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""
