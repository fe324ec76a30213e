"""NPU1xx: device neutrality. Model code must not name CUDA; the device comes from data in scope."""

from __future__ import annotations

import ast

from npu_lint.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix

DEVICE_MODULE = "veomni.utils.device"

_TENSOR_ANNOTATIONS = {
    "Tensor",
    "FloatTensor",
    "LongTensor",
    "BoolTensor",
    "IntTensor",
    "HalfTensor",
    "BFloat16Tensor",
}
_PREFERRED_PARAMS = ("hidden_states", "inputs_embeds", "x", "input", "inputs", "query", "q")


def _is_tensor_annotation(ctx: Context, ann: ast.expr | None) -> bool:
    """``torch.Tensor`` / ``Tensor`` / ``torch.FloatTensor``... (not Optional: it may be None)."""
    if ann is None:
        return False
    dotted = ctx.dotted(ann)
    return dotted is not None and dotted.split(".")[-1] in _TENSOR_ANNOTATIONS


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _self_parameters(cls: ast.ClassDef) -> list[str]:
    """Attributes assigned ``nn.Parameter(...)`` in the class's ``__init__`` (``self.weight``...)."""
    out: list[str] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, (ast.Name, ast.Attribute))
                    and (
                        node.value.func.attr
                        if isinstance(node.value.func, ast.Attribute)
                        else node.value.func.id
                    )
                    == "Parameter"
                ):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            out.append(target.attr)
    return out


def device_source(ctx: Context, avoid: str | None = None) -> str | None:
    """An expression naming the training device from data in scope, e.g. ``hidden_states.device``.

    Candidates, nearest first: required parameters of the enclosing function annotated as tensors (a
    conventional name such as ``hidden_states`` preferred), then ``self.<p>.device`` for a parameter the
    enclosing class creates in ``__init__``. ``avoid`` is a root name that must not be used (the receiver
    of ``.cuda()``: its own device would make the move a no-op). None when nothing in scope qualifies.
    """
    func = ctx.function
    if func is not None:
        args = func.args
        positional = [*args.posonlyargs, *args.args]
        n_defaults = len(args.defaults)
        required = positional[: len(positional) - n_defaults] if n_defaults else positional
        required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
        tensors = [a.arg for a in required if a.arg != avoid and _is_tensor_annotation(ctx, a.annotation)]
        for name in _PREFERRED_PARAMS:
            if name in tensors:
                return f"{name}.device"
        if tensors:
            return f"{tensors[0]}.device"
        is_method = positional and positional[0].arg == "self"
        cls = ctx.class_
        if is_method and cls is not None and avoid != "self":
            params = _self_parameters(cls)
            if params:
                name = "weight" if "weight" in params else params[0]
                return f"self.{name}.device"
    return None


class CudaCall(Rule):
    code = "NPU101"
    name = "cuda-call"
    summary = "`.cuda()` moves a tensor or module to a CUDA device, which does not exist on an Ascend NPU."
    why = (
        "`x.cuda()` is bound to the CUDA backend: on an NPU host it raises (or silently targets the wrong "
        "device through a compatibility shim). Device-neutral code moves data to the device of the data it "
        "meets (`.to(hidden_states.device)`), or to VeOmni's current device type "
        "(`.to(get_device_type())` from `veomni.utils.device`)."
    )
    bad = (
        Example(
            """
            import torch


            def rotate(hidden_states: torch.Tensor, inv_freq):
                return hidden_states * inv_freq.cuda(non_blocking=True)
            """,
            fixed="""
            import torch


            def rotate(hidden_states: torch.Tensor, inv_freq):
                return hidden_states * inv_freq.to(hidden_states.device, non_blocking=True)
            """,
            title="a tensor parameter in scope gives the device",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyNorm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, hidden_states):
                    scale = torch.tensor(2.0).cuda()
                    return hidden_states * self.weight * scale
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyNorm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, hidden_states):
                    scale = torch.tensor(2.0).to(self.weight.device)
                    return hidden_states * self.weight * scale
            """,
            title="the module's own parameter gives the device",
        ),
        Example(
            """
            import torch


            def build(model):
                model = model.cuda()
                return model
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type


            def build(model):
                model = model.to(get_device_type())
                return model
            """,
            title="no device in scope: VeOmni's device helper",
        ),
    )
    good = (
        Example(
            """
            def rotate(hidden_states, inv_freq):
                return hidden_states * inv_freq.to(hidden_states.device)
            """
        ),
        Example(
            """
            import torch

            # torch.cuda is a module, and is_available() is not a device move
            ok = torch.cuda.is_available()
            """
        ),
    )
    fix_safety = (
        "Safe: `.to(<device>)` moves to the device the surrounding data already lives on (a tensor "
        'parameter, else a parameter of the module), or to `get_device_type()`, which is `"cuda"` on a GPU '
        "host: behaviour on GPUs is unchanged. `non_blocking=` and other keywords are kept. When `.cuda(i)` "
        "names an explicit device index the fix is unsafe: the index is dropped in favour of the current device."
    )
    node_types = (ast.Call,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "cuda"):
            return
        receiver = func.value
        dotted = self.ctx.qualname(receiver)
        if dotted == "torch":  # torch.cuda(...) is not a thing; be conservative
            return
        ctx = self.ctx
        avoid = _root_name(receiver)
        source = device_source(ctx, avoid=avoid)
        edits = []
        if source is None:
            source = "get_device_type()"
            edits.extend(ctx.import_edits(DEVICE_MODULE, "get_device_type"))
        args = [source]
        applicability = Applicability.SAFE
        reason = ""
        if node.args:
            applicability = Applicability.UNSAFE
            reason = "drops the explicit device index passed to .cuda()"
            if len(node.args) > 1:
                return  # not a real .cuda() signature; leave it alone
        for kw in node.keywords:
            if kw.arg == "device":
                applicability = Applicability.UNSAFE
                reason = "drops the explicit device passed to .cuda()"
                continue
            args.append(ctx.source.segment(kw))
        start = ctx.source.node_range(receiver)[1]
        end = ctx.source.node_range(node)[1]
        edits.append(Edit(start, end, f".to({', '.join(args)})"))
        fix = make_fix(f"Replace `.cuda()` with `.to({source})`", edits, applicability, reason)
        src = ctx.source
        line = func.end_lineno or node.lineno
        col = src.char_col(line, func.end_col_offset or 0) - len("cuda")
        end_line = node.end_lineno or line
        where = (line, col, end_line, src.char_col(end_line, node.end_col_offset or 0))
        self.report(where, f"`.cuda()` hard-codes the CUDA backend; use `.to({source})`", fix)
