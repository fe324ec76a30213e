"""NPU726 mrope-rows."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.upcalls import is_position_id_function


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _position_source(call: ast.AST) -> bool:
    """A call of the model's position-id function (``position_id_func(...)``, ``get_rope_index(...)``)."""
    if not isinstance(call, ast.Call):
        return False
    name = call_name(call)
    return is_position_id_function(name)


class MropeRows(Rule):
    code = "NPU726"
    name = "mrope-rows"
    summary = (
        "Multimodal rotary (M-RoPE) position ids lose rows: the position-id function's `(3, L)` ids cut to one "
        "row, or the text row split off a 4-row layout kept among the rotary rows."
    )
    why = (
        "Qwen-VL-style models give every token three rotary positions (temporal, height, width): the model's "
        "position-id function (`get_rope_index`) returns `(3, batch, L)` ids and the patched forward feeds all "
        "three rows to the rotary embedding; the omni models prepend a fourth, text row (`[text, t, h, w]`) that "
        "feeds the causal mask and is split off (`text = position_ids[0]`, `position_ids = position_ids[1:]`). "
        "Indexing the function's result with one row (`ids[0]`) keeps only the temporal positions, so image "
        "and video tokens lose their spatial positions; slicing the rotary rows from the start after splitting "
        "the text row off (`position_ids[:3]`) feeds `[text, t, h]` to a rotary embedding that reads `[t, h, "
        "w]`. Both shapes still run. The references are the function's own result (all its rows) and the split "
        "the same function makes (the rows after the text row)."
    )
    bad = (
        Example(
            """
            def process_sample_vl(sample, processor, position_id_func):
                model_inputs = processor(text=sample["text"], images=sample["images"], return_tensors="pt")
                returns = position_id_func(input_ids=model_inputs["input_ids"], image_grid_thw=model_inputs["image_grid_thw"])
                model_inputs["position_ids"] = returns["position_ids"][0].squeeze().clone()
                return [model_inputs]
            """,
            path="veomni/data/toy_transform.py",
            title="only the temporal row of the M-RoPE ids kept",
        ),
        Example(
            """
            def text_model_forward(self, inputs_embeds, position_ids):
                if position_ids.ndim == 3 and position_ids.shape[0] == 4:
                    text_position_ids = position_ids[0]
                    position_ids = position_ids[:3]
                position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
                return self.layers(inputs_embeds, text_position_ids, position_embeddings)
            """,
            title="the text row split off and kept among the rotary rows",
        ),
    )
    good = (
        Example(
            """
            def text_model_forward(self, inputs_embeds, position_ids, position_id_func, grid):
                returns = position_id_func(grid=grid)
                full = returns["position_ids"].squeeze(1)
                if position_ids.ndim == 3 and position_ids.shape[0] == 4:
                    text_position_ids = position_ids[0]
                    position_ids = position_ids[1:]
                return self.rotary_emb(inputs_embeds, position_ids), text_position_ids, full
            """
        ),
    )
    fix_safety = "No fix: which rows the consumer reads is for the author to confirm."

    requires = ("position",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if self.ctx.function is not None:
            return  # a nested function: the enclosing function's walk covers it (once)
        results: set[str] = set()  # locals holding a position-id function's result
        text_rows: dict[str, int] = {}  # position-id local -> line its row 0 was split off
        for n in nodes_of(node, ast.Assign):
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                target = n.targets[0]
                if isinstance(target, ast.Name) and _position_source(n.value):
                    results.add(target.id)
                elif isinstance(target, ast.Tuple) and _position_source(n.value) and target.elts:
                    first = target.elts[0]
                    if isinstance(first, ast.Name):
                        results.add(first.id)
                value = n.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Subscript)
                    and isinstance(value.value, ast.Name)
                    and "position" in value.value.id
                    and _int(value.slice) == 0
                ):
                    text_rows.setdefault(value.value.id, n.lineno)
        if not results and not text_rows:
            return
        for n in nodes_of(node, ast.Subscript):
            if not isinstance(n, ast.Subscript) or not isinstance(n.ctx, ast.Load):
                continue
            base = n.value
            if results and _int(n.slice) is not None:
                inner = base
                if (
                    isinstance(inner, ast.Subscript)
                    and isinstance(inner.slice, ast.Constant)
                    and inner.slice.value == "position_ids"
                ):
                    inner = inner.value
                elif not (isinstance(inner, ast.Name) and inner.id in results):
                    inner = None
                if (
                    isinstance(inner, ast.Name)
                    and inner.id in results
                    and inner is not base
                    or (isinstance(base, ast.Name) and base.id in results)
                ):
                    self.report(
                        n,
                        f"`{self.ctx.source.segment(n)}` keeps one row of the position-id function's M-RoPE ids "
                        "(temporal, height, width): image and video tokens lose their spatial positions; keep "
                        "every row (squeeze the batch axis only)",
                    )
                    continue
            if (
                isinstance(base, ast.Name)
                and base.id in text_rows
                and n.lineno > text_rows[base.id]
                and isinstance(n.slice, ast.Slice)
                and n.slice.upper is not None
                and (n.slice.lower is None or _int(n.slice.lower) == 0)
                and n.slice.step is None
            ):
                self.report(
                    n,
                    f"row 0 of `{base.id}` was split off as the text positions (line {text_rows[base.id]}), yet "
                    f"`{self.ctx.source.segment(n)}` keeps it among the rotary rows and drops the last one: the "
                    f"rotary embedding reads `[text, t, h]` for `[t, h, w]`; take the rows after it "
                    f"(`{base.id}[1:]`)",
                )
