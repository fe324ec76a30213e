"""NPU104 cuda-tensor-type."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    LEGACY_STRING,
    LEGACY_TENSOR_TYPES,
    device_neutral_scope,
    device_source,
    helper_edits,
    in_annotation,
    root_name,
)


class CudaTensorType(Rule):
    code = "NPU104"
    name = "cuda-tensor-type"
    summary = "A legacy CUDA tensor type (`torch.cuda.FloatTensor`...) binds both the device and the dtype."
    why = (
        '`torch.cuda.FloatTensor(...)`, `x.type(torch.cuda.HalfTensor)` and `x.type("torch.cuda.LongTensor")` '
        "name the CUDA backend and leave the dtype implicit in a class name. They have no NPU counterpart "
        "in device-neutral code. Modern PyTorch says both explicitly: `torch.tensor(data, dtype=torch.float32, "
        "device=...)`, `torch.empty(*sizes, dtype=..., device=...)`, `x.to(device=..., dtype=...)`."
    )
    bad = (
        Example(
            """
            import torch


            def gate(hidden_states: torch.Tensor, scores):
                weights = scores.type(torch.cuda.HalfTensor)
                bias = torch.cuda.FloatTensor([0.5, 0.25])
                return hidden_states * weights + bias
            """,
            fixed="""
            import torch


            def gate(hidden_states: torch.Tensor, scores):
                weights = scores.to(device=hidden_states.device, dtype=torch.float16)
                bias = torch.tensor([0.5, 0.25], dtype=torch.float32, device=hidden_states.device)
                return hidden_states * weights + bias
            """,
            title="a tensor in scope gives the device",
        ),
        Example(
            """
            import torch


            def to_ids(values):
                return values.type("torch.cuda.LongTensor")
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type


            def to_ids(values):
                return values.to(device=get_device_type(), dtype=torch.int64)
            """,
            title="no device in scope: unsafe fix to VeOmni's device type",
        ),
    )
    good = (
        Example(
            """
            import torch


            def gate(hidden_states: torch.Tensor, scores: torch.Tensor):
                ids = scores.to(device=hidden_states.device, dtype=torch.int64)
                half = scores.type(torch.HalfTensor)  # a CPU type: not device-bound to CUDA
                return ids, half
            """
        ),
    )
    fix_safety = (
        "Safe when a tensor in scope gives the device (`hidden_states.device`, `self.weight.device`): the dtype "
        "of the legacy type is written out (`torch.cuda.HalfTensor` -> `torch.float16`). Unsafe when nothing in "
        "scope names the device: `get_device_type()` is used (the current device, as the CUDA type used), "
        "which differs on a host without an accelerator. `torch.cuda.XTensor(data)` becomes `torch.tensor(...)` "
        "for a list or tuple literal and `torch.empty(...)` for integer sizes; an ambiguous single argument, "
        "`isinstance` checks and other references get no fix."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and kernel code that is not a CUDA kernel (``veomni.backends``: Ascend adapters, eager
        fallbacks, registries and helpers under ``veomni/ops`` run on NPU hosts too)."""
        return device_neutral_scope(ctx)

    node_types = (ast.Call, ast.Attribute)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(name in text for name in LEGACY_TENSOR_TYPES):
            self.node_types = (ast.Call,)  # an attribute is reported only when it names a legacy type

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "type"
                and len(node.args) == 1
                and not node.keywords
            ):
                type_name = self._legacy_name(node.args[0])
                if type_name is not None:
                    self._report_type_call(node, func, type_name)
            return
        assert isinstance(node, ast.Attribute)
        if node.attr not in LEGACY_TENSOR_TYPES or ctx.qualname(node.value) != "torch.cuda":
            return
        if in_annotation(ctx, node):
            return
        parent = ctx.parent
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            func = parent.func
            if isinstance(func, ast.Attribute) and func.attr == "type" and len(parent.args) == 1:
                return  # reported with the .type(...) call
        if isinstance(parent, ast.Call) and parent.func is node:
            self._report_constructor(parent, node)
            return
        self.report(
            node,
            f"`torch.cuda.{node.attr}` is a CUDA-bound legacy type; check `x.dtype == "
            f"{LEGACY_TENSOR_TYPES[node.attr]}` and the device separately",
        )

    def _legacy_name(self, arg: ast.AST) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            match = LEGACY_STRING.fullmatch(arg.value)
            if match and match.group(1) in LEGACY_TENSOR_TYPES:
                return match.group(1)
            return None
        if isinstance(arg, ast.Attribute) and arg.attr in LEGACY_TENSOR_TYPES:
            if self.ctx.qualname(arg.value) == "torch.cuda":
                return arg.attr
        return None

    def _source(self, avoid: str | None) -> tuple[str, list[Edit], Applicability, str] | None:
        ctx = self.ctx
        source = device_source(ctx, avoid=avoid)
        if source is not None:
            return source, [], Applicability.SAFE, ""
        edits = helper_edits(ctx, "get_device_type")
        if edits is None:
            return None
        reason = "no tensor in scope gives the device; get_device_type() is the current device type"
        return "get_device_type()", edits, Applicability.UNSAFE, reason

    def _torch_edits(self) -> list[Edit] | None:
        bound = self.ctx.imports.get("torch")
        if bound == "torch":
            return []
        if bound is not None:
            return None
        return [self.ctx._module_import_edit("import torch\n")]

    def _report_type_call(self, call: ast.Call, func: ast.Attribute, type_name: str) -> None:
        ctx = self.ctx
        dtype = LEGACY_TENSOR_TYPES[type_name]
        message = f"`.type(torch.cuda.{type_name})` binds CUDA; use `.to(device=..., dtype={dtype})`"
        found = self._source(root_name(func.value))
        torch_edits = self._torch_edits()
        fix = None
        if found is not None and torch_edits is not None:
            source, edits, applicability, reason = found
            start = ctx.source.node_range(func.value)[1]
            end = ctx.source.node_range(call)[1]
            text = f".to(device={source}, dtype={dtype})"
            fix = make_fix(
                f"Replace with `{text}`",
                [*torch_edits, *edits, Edit(start, end, text)],
                applicability,
                reason,
            )
        self.report(call, message, fix)

    def _report_constructor(self, call: ast.Call, node: ast.Attribute) -> None:
        ctx = self.ctx
        dtype = LEGACY_TENSOR_TYPES[node.attr]
        args = call.args
        factory = None
        if call.keywords or any(isinstance(a, ast.Starred) for a in args):
            factory = None
        elif len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
            factory = "tensor"
        elif args and all(isinstance(a, ast.Constant) and type(a.value) is int for a in args):
            factory = "empty"
        message = (
            f"`torch.cuda.{node.attr}(...)` binds CUDA and hides the dtype; use `torch.tensor`/`torch.empty` "
        )
        message += f"with `dtype={dtype}` and `device=`"
        fix = None
        found = self._source(None)
        if factory is not None and found is not None:
            source, edits, applicability, reason = found
            inner = ", ".join(ctx.source.segment(a) for a in args)
            text = f"torch.{factory}({inner}, dtype={dtype}, device={source})"
            fix = make_fix(
                f"Replace with `torch.{factory}(...)`",
                [*edits, ctx.replace(call, text)],
                applicability,
                reason,
            )
        self.report(call, message, fix)
