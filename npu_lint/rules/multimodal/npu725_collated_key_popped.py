"""NPU725 collated-key-popped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.collateinfo import default_table


def _returned_names(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in walk(func):
        if isinstance(n, (ast.Return, ast.Yield)) and n.value is not None:
            value = n.value
            elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            out.update(e.id for e in elts if isinstance(e, ast.Name))
    return out


class CollatedKeyPopped(Rule):
    code = "NPU725"
    name = "collated-key-popped"
    summary = (
        "A data transform pops a field the collator and the model consume (`image_grid_thw`) out of the sample it "
        "returns, where reading it (`.get`) was meant."
    )
    why = (
        "A sample transform builds the dict the collator batches and the model receives: every field of the "
        "collator's `DEFAULT_DATA_COLLATE_INFO` (`pixel_values`, `image_grid_thw`, `video_grid_thw`, masks, "
        "position ids) is part of that contract. Handing a field to a helper with `sample.pop(key)` instead of "
        "`sample.get(key)` removes it from the returned sample: the position-id function still gets the grid, "
        "but the model then receives `pixel_values` without `image_grid_thw` (a crash in the vision tower, or "
        "the collator's ViT metadata hook silently has no grid). The reference is the tree's own collate table; "
        "a field the function stores back into the same dict after the pop (or under another collated key), a "
        "dict it rebuilds under the same name or does not return, and a pop whose value is discarded (a removal "
        "on purpose) are not reported."
    )
    bad = (
        Example(
            """
            def process_sample_omni(sample, processor, position_id_func):
                model_inputs = processor(text=sample["text"], images=sample["images"], return_tensors="pt")
                position_ids = position_id_func(
                    input_ids=model_inputs["input_ids"],
                    image_grid_thw=model_inputs.pop("image_grid_thw", None),
                )
                model_inputs["position_ids"] = position_ids
                return [model_inputs]
            """,
            path="veomni/data/toy_transform.py",
            title="the image grid popped for the position-id call: the model never receives it",
        ),
    )
    good = (
        Example(
            """
            def process_sample_omni(sample, processor, position_id_func):
                model_inputs = processor(text=sample["text"], images=sample["images"], return_tensors="pt")
                features = model_inputs.pop("input_features", None)
                position_ids = position_id_func(image_grid_thw=model_inputs.get("image_grid_thw", None))
                model_inputs["position_ids"] = position_ids
                model_inputs["input_features"] = features
                return [model_inputs]
            """,
            path="veomni/data/toy_transform.py",
        ),
    )
    fix_safety = "No fix: whether the field should leave the sample is for the author to decide."

    requires = (".pop(",)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        """The data pipeline's sample transforms (``data/``): what they return is what the collator batches.
        (A model's own input preparation, generation's ``prepare_inputs``, pops fields on purpose.)"""
        path = "/" + ctx.source.path.replace("\\", "/")
        return not ctx.source.kind.test and "/data/" in path and "/models/" not in path

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if not (
            isinstance(func, ast.Attribute)
            and func.attr == "pop"
            and isinstance(func.value, ast.Name)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return
        key, owner = node.args[0].value, func.value.id
        table = default_table(self.ctx.source.path)
        if key not in table:
            return
        parent = self.ctx.parent
        if isinstance(parent, ast.Expr):
            return  # a removal on purpose (``sample.pop("image_mask", None)``): nothing was to be read
        if isinstance(parent, ast.Assign) and any(
            isinstance(t, ast.Subscript)
            and isinstance(t.slice, ast.Constant)
            and isinstance(t.slice.value, str)
            and t.slice.value in table
            for t in parent.targets
        ):
            return  # the field moved under another collated key (``s["pixel_values"] = s.pop("pixel_values_videos")``)
        scope = self.ctx.function
        if scope is None or isinstance(scope, ast.Lambda) or owner not in _returned_names(scope):
            return
        for n in walk(scope):
            if (
                isinstance(n, (ast.Assign, ast.AnnAssign))
                and n.lineno > node.lineno
                and any(
                    isinstance(t, ast.Name) and t.id == owner
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                )
            ):
                return  # the name is rebound to a new dict: the one popped from is not what is returned
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
                if (
                    isinstance(n.value, ast.Name)
                    and n.value.id == owner
                    and isinstance(n.slice, ast.Constant)
                    and n.slice.value == key
                ):
                    return  # stored back
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("update", "setdefault")
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == owner
            ):
                return  # refilled wholesale
        self.report(
            node,
            f"`{owner}.pop({key!r})` removes `{key}` from the sample this function returns, but `{key}` is a field "
            "the collator batches and the model consumes (the collator's table names it): read it with "
            f"`{owner}.get({key!r})`",
        )
