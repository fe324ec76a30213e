"""NPU618 checkpoint-dtype-collective."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule

_MOVES = frozenset(
    {"broadcast", "all_gather", "all_gather_into_tensor", "scatter", "send", "recv", "isend", "irecv"}
)
_ALLOC = frozenset({"empty", "zeros", "ones", "full", "empty_strided"})
_HANDLED = ("float8", "uint8", "byte", "bytes")
# adapters (LoRA) hold trained parameters, saved in the training dtype (bf16/fp32), never FP8: their broadcasts are not
# checkpoint-dtype collectives (an independent review found veomni-main's `lora/weight_loading.py` reported wrongly)
_NOT_FP8 = ("adapter", "lora")
_META_WORDS = ("meta", "info", "spec", "header", "entry", "record")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class CheckpointDtypeCollective(Rule):
    code = "NPU618"
    name = "checkpoint-dtype-collective"
    summary = (
        "A checkpoint tensor is sent through a collective (`broadcast`, `all_gather`, `send`) in the dtype read "
        "from the checkpoint, with no path for FP8 dtypes: FP8 weights and scales reach the collective backend "
        "as float8 tensors."
    )
    why = (
        "Rank-0 loading reads each checkpoint tensor on one rank and moves it to the others: the receivers "
        "allocate a buffer from the tensor's metadata (`torch.empty(shape, dtype=meta.dtype)`) and the "
        "collective fills it. The dtype is whatever the checkpoint holds, and FP8 checkpoints (DeepSeek-V3/V4 "
        "style `float8_e4m3fn` weights, `float8_e8m0fnu` scales) hold dtypes that the collective backends do not "
        "move (older HCCL / torch_npu builds on Ascend, and older NCCL builds): the load fails across ranks for exactly those models. "
        "Move such tensors as bytes (`t.view(torch.uint8)`, receive into a `uint8` buffer of the same storage "
        "size and view it back). The check looks for a collective whose tensor is allocated in the function "
        "from a dtype that is a parameter or a metadata field, in a function that never names an FP8 or byte "
        "dtype and is not about adapters (LoRA weights are trained parameters, never FP8); when the file defines a "
        "byte-view helper the message names it."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def load_and_share(reader, device, rank):
                for meta in reader.entries():
                    buf = reader.read(meta.key).to(device) if rank == 0 else None
                    if rank != 0:
                        buf = torch.empty(meta.shape, dtype=meta.dtype, device=device)
                    dist.broadcast(buf, src=0)
                    yield meta.key, buf
            """,
            path="veomni/checkpoint/toy_loader.py",
            title="receivers allocate in the checkpoint's dtype and broadcast it",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            def _as_bytes(t):
                return t.contiguous().view(torch.uint8)


            def share_one(name, shape, dtype, tensor, device, group):
                if tensor is None:
                    tensor = torch.zeros(shape, dtype=dtype, device=device)
                dist.broadcast(tensor, src=0, group=group)
                return name, tensor
            """,
            path="veomni/models/toy_module_utils.py",
            title="a helper with the dtype as a parameter, next to an unused byte view",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist

            _FP8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}


            def share_one(name, shape, dtype, tensor, device):
                as_bytes = dtype in _FP8
                if tensor is None:
                    tensor = torch.empty(shape, dtype=dtype, device=device)
                wire = tensor.view(torch.uint8) if as_bytes else tensor
                dist.broadcast(wire, src=0)
                counts = torch.zeros(4, dtype=torch.long, device=device)
                dist.broadcast(counts, src=0)
                return name, tensor
            """,
            path="veomni/models/toy_module_utils.py",
            title="FP8 moved as bytes; a count tensor of a fixed dtype",
        ),
    )
    fix_safety = "No fix: the byte path needs the receiver's buffer and view-back changed together."
    requires = (
        "dtype",
        ("broadcast(", "all_gather(", "all_gather_into_tensor(", "send(", "recv(", "scatter("),
    )
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        moves = [n for n in _walk(node) if type(n) is ast.Call and call_name(n) in _MOVES and n.args]
        if not moves:
            return
        lines = self.ctx.source.lines
        text = "\n".join(lines[node.lineno - 1 : node.end_lineno]).lower()
        if any(w in text for w in _HANDLED) or any(w in text for w in _NOT_FP8):
            return
        args = node.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        allocs: dict[str, ast.Call] = {}
        for n in _walk(node):
            if (
                isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Call)
                and call_name(n.value) in _ALLOC
            ):
                dtype = next((k.value for k in n.value.keywords if k.arg == "dtype"), None)
                if dtype is not None and self._from_checkpoint(dtype, params, node):
                    allocs[n.targets[0].id] = n.value
        for call in moves:
            first = call.args[0]
            if isinstance(first, ast.Name) and first.id in allocs:
                helper = self._byte_helper()
                hint = f" (this file's `{helper}` does it)" if helper else ""
                self.report(
                    call,
                    f"`{first.id}` is allocated in the dtype read from the checkpoint "
                    f"(`{ast.unparse(next(k.value for k in allocs[first.id].keywords if k.arg == 'dtype'))}`) "
                    f"and moved by `{ast.unparse(call.func)}` as is: an FP8 checkpoint reaches the collective "
                    f"backend as a float8 tensor, which HCCL does not move; send FP8 tensors as bytes{hint}",
                )
                return

    @staticmethod
    def _from_checkpoint(dtype: ast.AST, params: set[str], func: ast.AST) -> bool:
        if isinstance(dtype, ast.Name):
            if dtype.id in params:
                return True
            for n in _walk(func):
                if isinstance(n, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == dtype.id for tg in n.targets for t in _walk(tg)
                ):
                    return _metadata_field(n.value)
            return False
        return _metadata_field(dtype)

    def _byte_helper(self) -> str | None:
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, _FUNCS) and "byte" in stmt.name.lower():
                return stmt.name
        return None


def _metadata_field(value: ast.AST) -> bool:
    """``meta.dtype`` / ``info["dtype"]``: a dtype field of a metadata record."""
    if isinstance(value, ast.Attribute) and value.attr == "dtype" and isinstance(value.value, ast.Name):
        return any(w in value.value.id.lower() for w in _META_WORDS)
    if (
        isinstance(value, ast.Subscript)
        and isinstance(value.slice, ast.Constant)
        and value.slice.value == "dtype"
    ):
        return True
    return False
