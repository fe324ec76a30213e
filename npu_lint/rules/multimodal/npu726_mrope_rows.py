"""NPU726 mrope-rows."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name, nodes_of
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.ropelayout import uses_mrope
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


# calls that keep the rows of the ids on axis 0 (a batch axis squeezed, a copy, a cast, a move)
_KEEP_ROWS = frozenset(
    {"squeeze", "clone", "contiguous", "long", "int", "to", "cpu", "cuda", "detach", "type"}
)


def _strip(expr: ast.AST) -> ast.AST:
    """``expr`` without the row-keeping calls applied to it (`ids.squeeze(1).clone()` -> `ids`)."""
    while (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEP_ROWS
    ):
        expr = expr.func.value
    return expr


def _ids_key(expr: ast.AST, source, results: set[str] | None = None) -> bool:
    """`<result>["position_ids"]`: of a position-id function's call (``source``), or of a local holding its
    result (``results``)."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant)):
        return False
    if expr.slice.value != "position_ids":
        return False
    inner = _strip(expr.value)
    return source(inner) or (results is not None and isinstance(inner, ast.Name) and inner.id in results)


def _one_row(index: ast.AST) -> bool:
    """An index keeping one row of axis 0: `[0]`, `[2]`, `[0, :, :]`, `[:1]`, `[1:2]`."""
    if isinstance(index, ast.Tuple):
        if not index.elts:
            return False
        index = index.elts[0]
    if _int(index) is not None:
        return True
    if isinstance(index, ast.Slice) and index.step is None and index.upper is not None:
        lower = 0 if index.lower is None else _int(index.lower)
        upper = _int(index.upper)
        return lower is not None and upper is not None and upper - lower == 1
    return False


def _position_row(expr: ast.AST) -> bool:
    """One row of position ids: `position_ids[0]`, `position_ids.squeeze(1)[0]`, `position_ids.select(0, 0)`."""
    if isinstance(expr, ast.Subscript) and _one_row(expr.slice):
        base = _strip(expr.value)
    elif (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "select"
        and len(expr.args) == 2
        and _int(expr.args[0]) == 0
    ):
        base = _strip(expr.func.value)
    else:
        return False
    name = last_name(base)
    return name is not None and "position" in name and "text" not in name


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
        " The function's result is followed wherever it goes: a callable parameter `functools.partial` binds to "
        "it (VeOmni's `get_position_id(main_func, self, **kw)`, `partial(get_position_id, X.get_rope_index, ...)`), "
        'the ids taken out of its dict result (`position_id_func(...)["position_ids"]`), a cut after calls '
        "that keep the rows (`.squeeze(1)[0]`, `.clone()[:1]`), `.select(0, k)` and `.narrow(0, k, 1)`."
        " In a module whose rotary embedding is M-RoPE (the module, or the upstream transformers module it "
        "patches, spells `mrope_section`), the rotary handed one row of the position ids (`self.rotary_emb(h, "
        "position_ids[0])`, or a local assigned one) is reported too, unless the same function hands that rotary "
        "the whole ids in another branch (a model serving both a 3-D and a 1-D rope type)."
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
        Example(
            """
            from functools import partial


            def get_position_id(main_func, self, **kwargs):
                position_ids, rope_deltas = main_func(self, **kwargs)
                return {"position_ids": position_ids.squeeze(1)[0], "rope_deltas": rope_deltas.squeeze(0)}


            def get_position_id_func(self):
                return partial(get_position_id, Qwen2VLModel.get_rope_index, self)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the temporal row kept by a wrapper partial-bound to the rope index",
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
        Example(
            """
            from functools import partial


            def get_position_id(main_func, self, **kwargs):
                position_ids, rope_deltas = main_func(self, **kwargs)
                return {"position_ids": position_ids.squeeze(1), "rope_deltas": rope_deltas.squeeze(0)}


            def get_position_id_func(self):
                return partial(get_position_id, Qwen2VLModel.get_rope_index, self)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: which rows the consumer reads is for the author to confirm."

    requires = ("position",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def _bound_sources(self) -> dict[str, set[int]]:
        """Functions of the file given a position-id function by `functools.partial` (`partial(get_position_id,
        Qwen2VLModel.get_rope_index, fake_model)`): function name -> indexes of the parameters it binds so."""
        memo = self.ctx.memo.get("npu726_bound")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out: dict[str, set[int]] = {}
        for call in nodes_of(self.ctx.tree, ast.Call):
            if not (isinstance(call, ast.Call) and call_name(call) == "partial" and call.args):
                continue
            target = call.args[0]
            if not isinstance(target, ast.Name):
                continue
            for i, arg in enumerate(call.args[1:]):
                if is_position_id_function(last_name(arg) or ""):
                    out.setdefault(target.id, set()).add(i)
        self.ctx.memo["npu726_bound"] = out
        return out

    def _rotary_cut(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """In a module whose rotary embedding is M-RoPE: the rotary handed one row of the position ids
        (`self.rotary_emb(h, position_ids[0])`, or a local assigned one before the call)."""
        calls = [
            n
            for n in nodes_of(func, ast.Call)
            if isinstance(n, ast.Call) and "rotary" in call_name(n).lower() and (n.args or n.keywords)
        ]
        if not calls:
            return
        if not uses_mrope(self.ctx.source.text, self._module()):
            return
        assigns = [
            a
            for a in nodes_of(func, ast.Assign)
            if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
        ]

        def resolved(call: ast.Call) -> list[tuple[ast.AST, ast.AST]]:
            """(argument, what it holds) for the position arguments of a rotary call."""
            out = []
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if isinstance(arg, ast.Name) and "position" in arg.id:
                    before = [a for a in assigns if a.targets[0].id == arg.id and a.lineno < call.lineno]
                    out.append((arg, max(before, key=lambda a: a.lineno).value if before else arg))
                elif _position_row(arg):
                    out.append((arg, arg))
            return out

        # a rotary handed the whole ids elsewhere in the function: a branch per rope type (`3d_rope` or 1-D)
        full = {ast.unparse(c.func) for c in calls for _, v in resolved(c) if not _position_row(v)}
        for call in calls:
            if ast.unparse(call.func) in full:
                continue
            for _, cut in resolved(call):
                if _position_row(cut):
                    self.report(
                        cut,
                        f"`{self.ctx.source.segment(cut)}` hands the M-RoPE rotary embedding (`{call_name(call)}`) "
                        "one row of the position ids: it reads three rows (temporal, height, width, split by "
                        "`mrope_section`), so image and video tokens lose their spatial positions; pass every "
                        "rotary row",
                    )

    def _module(self) -> str | None:
        from npu_lint.veomni.upstream import file_source_module

        return file_source_module(self.ctx.tree, self.ctx.source.text, self.ctx.source.path)

    def _report_cut(self, n: ast.AST) -> None:
        self.report(
            n,
            f"`{self.ctx.source.segment(n)}` keeps one row of the position-id function's M-RoPE ids "
            "(temporal, height, width): image and video tokens lose their spatial positions; keep "
            "every row (squeeze the batch axis only)",
        )

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if self.ctx.function is not None:
            return  # a nested function: the enclosing function's walk covers it (once)
        bound = self._bound_sources()
        sources = {  # callable parameters a `partial(f, X.get_rope_index, ...)` binds to a position-id function
            f.args.args[i].arg
            for f in [*nodes_of(node, ast.FunctionDef), *nodes_of(node, ast.AsyncFunctionDef)]
            for i in bound.get(f.name, ())
            if i < len(f.args.args)
        }

        def source(call: ast.AST) -> bool:
            return _position_source(call) or (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in sources
            )

        results: set[str] = set()  # locals holding a position-id function's result
        ids: set[str] = set()  # locals holding its M-RoPE ids (`position_id_func(...)["position_ids"]`)
        text_rows: dict[str, int] = {}  # position-id local -> line its row 0 was split off
        for n in nodes_of(node, ast.Assign):
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                target = n.targets[0]
                if isinstance(target, ast.Name) and source(n.value):
                    results.add(target.id)
                elif isinstance(target, ast.Tuple) and source(n.value) and target.elts:
                    first = target.elts[0]
                    if isinstance(first, ast.Name):
                        results.add(first.id)
                elif isinstance(target, ast.Name) and _ids_key(_strip(n.value), source):
                    ids.add(target.id)
                value = n.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Subscript)
                    and isinstance(value.value, ast.Name)
                    and "position" in value.value.id
                    and _int(value.slice) == 0
                ):
                    text_rows.setdefault(value.value.id, n.lineno)
        self._rotary_cut(node)
        if not results and not text_rows and not ids:
            return

        def holds_ids(expr: ast.AST) -> bool:
            expr = _strip(expr)
            if isinstance(expr, ast.Name):
                return expr.id in results or expr.id in ids
            return _ids_key(expr, source, results)

        for n in nodes_of(node, ast.Call):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)) or n.func.attr not in (
                "select",
                "narrow",
            ):
                continue
            args = n.args
            one_row = _int(args[0]) == 0 if args else False
            if n.func.attr == "narrow":
                one_row = one_row and len(args) == 3 and _int(args[2]) == 1
            elif one_row:
                one_row = len(args) == 2 and _int(args[1]) is not None
            if one_row and holds_ids(n.func.value):
                self._report_cut(n)
        for n in nodes_of(node, ast.Subscript):
            if not isinstance(n, ast.Subscript) or not isinstance(n.ctx, ast.Load):
                continue
            base = n.value
            if (results or ids) and _one_row(n.slice) and holds_ids(base):
                self._report_cut(n)
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
