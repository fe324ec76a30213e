"""NPU734 sp-token-gather-axis."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, int_value, keyword_arg, nodes_of
from npu_lint.rules.base import Example, Rule

# batch-first token tensors: (batch, seq), or M-RoPE ids (3, batch, seq): the sequence axis is the last one
_TOKEN_SUFFIXES = ("input_ids", "labels", "position_ids", "attention_mask", "token_type_ids", "inputs_embeds")
_SLICES = frozenset({"slice_input_tensor", "slice_input_tensor_scale_grad", "sp_pad_and_slice"})


def _token_name(expr: ast.AST) -> str | None:
    """The token tensor ``expr`` names: a local or parameter (`input_ids`, `shift_labels`), or a batch key
    (`micro_batch["labels"]`)."""
    name: str | None = None
    if isinstance(expr, ast.Name):
        name = expr.id
    elif (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.slice, ast.Constant)
        and isinstance(expr.slice.value, str)
    ):
        name = expr.slice.value
    if name is not None and name.endswith(_TOKEN_SUFFIXES):
        return name
    return None


def _sp_group(call: ast.Call) -> bool:
    group = keyword_arg(call, "group")
    if group is None:
        return False
    text = ast.unparse(group).lower()
    return "sp_" in text or "ulysses" in text or text.startswith("sp") or "sequence" in text


def _dim(call: ast.Call, keyword: str, position: int) -> ast.AST | None:
    value = keyword_arg(call, keyword)
    if value is None and len(call.args) > position:
        value = call.args[position]
    return value


class SpTokenGatherAxis(Rule):
    code = "NPU734"
    name = "sp-token-gather-axis"
    summary = (
        "The sequence-parallel shards of a batch-first token tensor (`input_ids`, `labels`, `position_ids`) are "
        "gathered along axis 0, stacking the shards as batch rows instead of joining the sequence."
    )
    why = (
        "Under sequence parallelism each rank holds a slice of the sequence axis of the batch's token tensors: "
        "`input_ids`, `labels`, masks are `(batch, seq)`, `inputs_embeds` `(batch, seq, hidden)` and M-RoPE `position_ids` `(3, batch, seq)`, sliced on "
        "their last axis. A function that needs the whole sequence back (the image / video placeholder masks "
        "built from the gathered ids, a loss over all labels) gathers the shards from the SP group and must join "
        "them on that same axis (`torch.cat(parts, dim=1)` or `dim=-1`, `gather_outputs(x, gather_dim=-1)`). "
        "Joining on axis 0 (`torch.cat(parts, dim=0)`, `torch.cat(parts)`, `gather_dim=0`) makes `(sp * batch, "
        "seq / sp)` ids: the placeholder masks no longer line up with the gathered embeddings and the media "
        "features are scattered into the wrong tokens, or labels are matched with other tokens' logits, with no "
        "error. Slicing one of them for sequence parallelism on axis 0 (`slice_input_tensor(input_ids, dim=0)`) "
        "hands each rank other samples instead of its piece of the sequence. The tensor is recognised by its name (a batch-first token tensor of transformers' and VeOmni's "
        "forward signatures, or a batch key); the data pipeline's per-sample 1-D tensors are not judged."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state


            def model_forward(self, input_ids, inputs_embeds):
                if get_parallel_state().sp_enabled:
                    input_ids_list = [torch.zeros_like(input_ids) for _ in range(get_parallel_state().sp_size)]
                    dist.all_gather(input_ids_list, input_ids, group=get_parallel_state().sp_group)
                    input_ids = torch.cat(input_ids_list, dim=0)
                return self.get_placeholder_mask(input_ids)
            """,
            path="veomni/models/transformers/qwen3_5/qwen3_5_gpu_patch_gen_config.py",
            title="the gathered id shards stacked as batch rows",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state


            def model_forward(self, input_ids, inputs_embeds):
                if get_parallel_state().sp_enabled:
                    input_ids_list = [torch.zeros_like(input_ids) for _ in range(get_parallel_state().sp_size)]
                    dist.all_gather(input_ids_list, input_ids, group=get_parallel_state().sp_group)
                    input_ids = torch.cat(input_ids_list, dim=1)
                return self.get_placeholder_mask(input_ids)
            """,
            path="veomni/models/transformers/qwen3_5/qwen3_5_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: the sequence axis is read from a name; the author confirms the tensor's layout."

    requires = ("gather",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        """Model code, trainers and distributed helpers; not the data pipeline (per-sample 1-D tensors) or
        tests."""
        path = "/" + ctx.source.path.replace("\\", "/")
        return not ctx.source.kind.test and "/data/" not in path

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if self.ctx.function is not None:
            return  # a nested function: the enclosing function's walk covers it (once)
        gathered: dict[str, str] = {}  # list local -> the token tensor gathered into it from the SP group
        calls = [c for c in nodes_of(node, ast.Call) if isinstance(c, ast.Call)]
        for call in calls:
            name = call_name(call)
            if name == "all_gather" and len(call.args) >= 2 and _sp_group(call):
                token = _token_name(call.args[1])
                if token is not None and isinstance(call.args[0], ast.Name):
                    gathered[call.args[0].id] = token
            elif name in _SLICES and call.args:
                token = _token_name(call.args[0])
                dim = _dim(call, "dim", 1)
                if token is not None and dim is not None and int_value(dim) == 0:
                    self._report(dim, token, "sliced")
            elif name == "gather_outputs" and call.args:
                token = _token_name(call.args[0])
                dim = _dim(call, "gather_dim", 1)
                if token is not None and dim is not None and int_value(dim) == 0:
                    self._report(dim, token)
        if not gathered:
            return
        for call in calls:
            if call_name(call) not in ("cat", "concat", "concatenate") or not call.args:
                continue
            parts = call.args[0]
            if not (isinstance(parts, ast.Name) and parts.id in gathered):
                continue
            dim = _dim(call, "dim", 1)
            if dim is None or int_value(dim) == 0:
                self._report(dim if dim is not None else call, gathered[parts.id])

    def _report(self, node: ast.AST, token: str, how: str = "joined") -> None:
        if how == "sliced":
            self.report(
                node,
                f"`{token}` (batch-first) is sliced for sequence parallelism on axis 0, its batch axis: each rank "
                "gets other samples instead of its piece of the sequence; slice the sequence axis (`dim=1`)",
            )
            return
        axis = "`dim=1`" if token.endswith("inputs_embeds") else "`dim=-1`"
        self.report(
            node,
            f"the sequence-parallel shards of `{token}` (batch-first, sliced on its sequence axis) are joined on "
            "axis 0: they become batch rows instead of one sequence, so what is built from them (placeholder "
            f"masks, labels) no longer lines up with the gathered tokens; join on the sequence axis ({axis})",
        )
