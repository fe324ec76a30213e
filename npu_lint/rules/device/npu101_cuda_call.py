"""NPU101 cuda-call."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    ACCELERATOR_DEVICE,
    ACCELERATOR_NOTE,
    accelerator_available,
    device_neutral_scope,
    device_source,
    helper_edits,
    in_cuda_dispatch,
    native_api,
    outside_veomni,
    root_name,
)


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
        Example(
            """
            from veomni.utils.device import get_device_type


            def place(x):
                if get_device_type() == "cuda":  # explicit dispatch: the CUDA branch is deliberate
                    x = x.cuda(non_blocking=True)
                return x
            """
        ),
    )
    fix_safety = (
        "Safe: `.to(<device>)` moves to the device the surrounding data already lives on (a tensor "
        'parameter, else a parameter of the module), or to `get_device_type()`, which is `"cuda"` on a GPU '
        "host: behaviour on GPUs is unchanged. `non_blocking=` and other keywords are kept. The device the caller "
        'asks for is kept: `.cuda(1)` becomes `.to(f"{get_device_type()}:1")` (safe); `.cuda(device)` becomes '
        "`.to(device)`, unsafe: a CUDA device passed in still names CUDA. A new call in a default value or at "
        "module level (evaluated on import) makes the fix unsafe. Outside any VeOmni tree (a training script, "
        "a pre-commit hook's environment without veomni) the device is torch's own: "
        '`.to(torch.accelerator.current_accelerator() or "cpu")` (torch >= 2.6; `current_accelerator()` is None '
        'on a CPU-only host, hence `"cpu"`), never a veomni import; no fix there when `torch` is not imported '
        "as `torch` or the nearest pyproject.toml / requirements.txt pins torch below 2.6."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and kernel code that is not a CUDA kernel (``veomni.backends``: Ascend adapters, eager
        fallbacks, registries and helpers under ``veomni/ops`` run on NPU hosts too)."""
        return device_neutral_scope(ctx)

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
        if any(k.arg not in ("device", "non_blocking", "memory_format") for k in node.keywords):
            return  # not Tensor.cuda / Module.cuda (a quantizer's own ``cuda(t, meta=...)``, ``**kwargs``)
        if any(isinstance(a, ast.Starred) for a in node.args):
            return
        enclosing = self.ctx.function
        if enclosing is not None and enclosing.name == "cuda":
            return  # an override of ``Module.cuda`` implements the API it calls
        if in_cuda_dispatch(self.ctx, node):
            return  # ``if get_device_type() == "cuda": x = x.cuda()`` is deliberate
        ctx = self.ctx
        if len(node.args) > 1:
            return  # not a real .cuda() signature; leave it alone
        requested = (
            node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "device"), None)
        )
        edits: list[Edit] = []
        applicability = Applicability.SAFE
        reason = ""
        if requested is not None:
            # ``.cuda(device)``: keep the device the caller asked for
            index = requested.value if isinstance(requested, ast.Constant) else None
            if isinstance(index, int) and not isinstance(index, bool):
                source = f'f"{{get_device_type()}}:{index}"'
                helper = None if outside_veomni(ctx) else helper_edits(ctx, "get_device_type")
                if helper is None:
                    self._report_no_fix(node, func)
                    return
                edits.extend(helper)
            else:
                source = ctx.source.segment(requested)
                applicability = Applicability.UNSAFE
                reason = (
                    f"keeps the requested device `{source}` as given: check what callers pass (a CUDA device "
                    "or a bare ordinal still names CUDA)"
                )
        else:
            avoid = root_name(receiver)
            source = device_source(ctx, avoid=avoid)
            if source is None and accelerator_available(ctx):
                source = ACCELERATOR_DEVICE  # outside VeOmni: torch's own accelerator, no import
            elif source is None:
                source = "get_device_type()"
                helper = helper_edits(ctx, "get_device_type")
                if helper is None:
                    self._report_no_fix(node, func)
                    return
                edits.extend(helper)
        args = [source]
        for kw in node.keywords:
            if kw.arg == "device":
                continue
            args.append(ctx.source.segment(kw))
        start = ctx.source.node_range(receiver)[1]
        end = ctx.source.node_range(node)[1]
        edits.append(Edit(start, end, f".to({', '.join(args)})"))
        title = f"Replace `.cuda()` with `.to({source})`"
        if source == ACCELERATOR_DEVICE:
            title += f" ({ACCELERATOR_NOTE})"
        fix = make_fix(title, edits, applicability, reason)
        self.report(
            self._where(node, func), f"`.cuda()` hard-codes the CUDA backend; use `.to({source})`", fix
        )

    def _where(self, node: ast.Call, func: ast.Attribute) -> tuple[int, int, int, int]:
        src = self.ctx.source
        line = func.end_lineno or node.lineno
        col = src.char_col(line, func.end_col_offset or 0) - len("cuda")
        end_line = node.end_lineno or line
        return (line, col, end_line, src.char_col(end_line, node.end_col_offset or 0))

    def _report_no_fix(self, node: ast.Call, func: ast.Attribute) -> None:
        suggestion = (
            f"`.to({ACCELERATOR_DEVICE})` ({ACCELERATOR_NOTE})"
            if native_api(self.ctx, "get_device_type")
            else "`.to(get_device_type())` (veomni.utils.device)"
        )
        self.report(self._where(node, func), f"`.cuda()` hard-codes the CUDA backend; use {suggestion}")
