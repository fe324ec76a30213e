"""Review 22 (precision): correct variants of the RMSNorm rules (NPU409, NPU430, NPU401, NPU403, NPU404, NPU444)
that a maintainer would write and that the rules reported, each paired with a still-reported true positive of
the same shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rules.snippets import lint_in_tree, lint_snippet, ops_tree

# --- NPU409 ---------------------------------------------------------------------------------------------------

KERNELS = "veomni/ops/kernels/rms_norm"


def _factory_init(rows: dict[str, str]) -> str:
    """A main-layout registering module: one KernelSpec row per variant, its factory importing ``npu.<fn>``."""
    out = ["from ...kernel_registry import KERNEL_REGISTRY, KernelSpec\n"]
    for variant, fn in rows.items():
        out.append(
            f"\n\ndef _npu_{variant}_rms_norm_factory():\n    from .npu import {fn}\n\n    return {fn}\n\n\n"
            f'KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant="{variant}", '
            f"factory=_npu_{variant}_rms_norm_factory))\n"
        )
    return "".join(out)


def _npu409(tmp_path: Path, rows: dict[str, str], npu: str) -> list[tuple[str, int]]:
    root = ops_tree(tmp_path, {f"{KERNELS}/__init__.py": _factory_init(rows), f"{KERNELS}/npu.py": npu})
    return [
        (rel.rpartition("/")[2], d.line)
        for rel in (f"{KERNELS}/__init__.py", f"{KERNELS}/npu.py")
        for d in lint_in_tree(root, rel, ["NPU409"])
    ]


GUARDED = '''
"""rms_norm NPU kernels."""
import torch_npu


def standard_rms_norm_forward_npu(hidden_states, weight, eps):
    if weight is None:
        raise ValueError("standard RMSNorm needs a weight")
    return torch_npu.npu_rms_norm(hidden_states, weight, eps)[0]


def unweighted_rms_norm_forward_npu(hidden_states, weight, eps):
    assert weight is None, "Unweighted RMSNorm expects weight=None."
    variance = hidden_states.float().square().mean(-1, keepdim=True)
    return hidden_states * (variance + eps).rsqrt().to(hidden_states.dtype)


def dropping_rms_norm_forward_npu(hidden_states, weight, eps):
    del weight  # always called with weight=None
    variance = hidden_states.float().square().mean(-1, keepdim=True)
    return hidden_states * (variance + eps).rsqrt().to(hidden_states.dtype)
'''


@pytest.mark.parametrize("unweighted", ["unweighted_rms_norm_forward_npu", "dropping_rms_norm_forward_npu"])
def test_npu409_quiet_on_weight_guards(tmp_path: Path, unweighted: str) -> None:
    # `if weight is None: raise` guards a standard kernel; `assert weight is None` / `del weight` an unweighted one
    rows = {"standard": "standard_rms_norm_forward_npu", "unweighted": unweighted}
    assert _npu409(tmp_path, rows, GUARDED) == []


def test_npu409_still_reports_an_unweighted_kernel_on_the_standard_row(tmp_path: Path) -> None:
    rows = {"standard": "unweighted_rms_norm_forward_npu", "unweighted": "standard_rms_norm_forward_npu"}
    assert len(_npu409(tmp_path, rows, GUARDED)) == 4


OFFSET_BY_VALUE = '''
"""rms_norm NPU kernels."""
import torch_npu

_zero_centered = lambda w: (1.0 + w.float())  # noqa: E731


def _npu_rms_norm(hidden_states, weight, eps, offset=0.0):
    if offset:
        weight = weight.float() + offset
    return torch_npu.npu_rms_norm(hidden_states, weight.to(hidden_states.dtype), eps)[0]


def standard_rms_norm_forward_npu(hidden_states, weight, eps):
    return _npu_rms_norm(hidden_states, weight, eps)


def helper_rms_norm_forward_npu(hidden_states, weight, eps):
    return _npu_rms_norm(hidden_states, weight, eps, offset=1.0)


def lambda_rms_norm_forward_npu(hidden_states, weight, eps):
    return torch_npu.npu_rms_norm(hidden_states, _zero_centered(weight).to(hidden_states.dtype), eps)[0]


def flag_rms_norm_forward_npu(hidden_states, weight, eps, zero_centered=True):
    offset = 1.0 if zero_centered else 0.0
    return torch_npu.npu_rms_norm(hidden_states, weight + offset, eps)[0]


def unflagged_rms_norm_forward_npu(hidden_states, weight, eps, zero_centered=False):
    offset = 1.0 if zero_centered else 0.0
    return torch_npu.npu_rms_norm(hidden_states, weight + offset, eps)[0]
'''


@pytest.mark.parametrize(
    "offset",
    ["helper_rms_norm_forward_npu", "lambda_rms_norm_forward_npu", "flag_rms_norm_forward_npu"],
)
def test_npu409_quiet_on_an_offset_added_by_value(tmp_path: Path, offset: str) -> None:
    # the 1 comes from a helper's `offset=1.0`, a module-level lambda, or a local fixed by a flag's default
    rows = {"standard": "standard_rms_norm_forward_npu", "qwen3_5": offset}
    assert _npu409(tmp_path, rows, OFFSET_BY_VALUE) == []


@pytest.mark.parametrize("plain", ["standard_rms_norm_forward_npu", "unflagged_rms_norm_forward_npu"])
def test_npu409_still_reports_an_offset_row_without_it(tmp_path: Path, plain: str) -> None:
    rows = {"standard": "standard_rms_norm_forward_npu", "qwen3_5": plain}
    assert len(_npu409(tmp_path, rows, OFFSET_BY_VALUE)) == 2


LEGACY_INIT = """
from ...registry import register_op
from .qwen3_5 import npu as qwen3_5_npu
from .unweighted import npu as unweighted_npu

register_op("rms_norm", "qwen3_5", "npu", qwen3_5_npu.forward, qwen3_5_npu.backward)
register_op("rms_norm", "unweighted", "npu", unweighted_npu.forward, unweighted_npu.backward)
"""

QWEN35_RAW = '''
"""qwen3_5 rms_norm NPU kernel (raw forward/backward pair)."""
import torch_npu

from ....registry import SavedState


def forward(hidden_states, weight, *, eps):
    out, rstd = torch_npu.npu_rms_norm(hidden_states, (1.0 + weight.float()).to(hidden_states.dtype), eps)
    return out, SavedState((hidden_states, weight, rstd))


def backward(grad_output, saved):
    x, weight, rstd = saved.tensors
    scale = {scale}
    return torch_npu.npu_rms_norm_backward(grad_output, x, scale.to(x.dtype), rstd)
'''

UNWEIGHTED_RAW = '''
"""unweighted rms_norm kernel (raw forward/backward pair)."""
import torch

from ....registry import SavedState


def forward(hidden_states, *, eps):
    rstd = torch.rsqrt(hidden_states.float().pow(2).mean(-1, keepdim=True) + eps)
    return (hidden_states.float() * rstd).to(hidden_states.dtype), SavedState((hidden_states, rstd))


def backward(grad_output, saved):
    x, rstd = saved.tensors
    xhat = x.float() * rstd
    dx = rstd * (grad_output.float() - xhat * (grad_output.float() * xhat).mean(-1, keepdim=True))
    return (dx.to(x.dtype),)
'''


def _legacy(tmp_path: Path, scale: str) -> list[tuple[str, int]]:
    files = {
        f"{KERNELS}/__init__.py": LEGACY_INIT,
        f"{KERNELS}/qwen3_5/__init__.py": "",
        f"{KERNELS}/qwen3_5/npu.py": QWEN35_RAW.replace("{scale}", scale),
        f"{KERNELS}/unweighted/__init__.py": "",
        f"{KERNELS}/unweighted/npu.py": UNWEIGHTED_RAW,
    }
    root = ops_tree(tmp_path, files)
    return [
        (rel, d.line)
        for rel in (f"{KERNELS}/__init__.py", f"{KERNELS}/qwen3_5/npu.py", f"{KERNELS}/unweighted/npu.py")
        for d in lint_in_tree(root, rel, ["NPU409"])
    ]


def test_npu409_quiet_on_raw_backwards_of_the_legacy_layout(tmp_path: Path) -> None:
    # a raw backward `(grad_output, saved)` takes no weight parameter: it unpacks the weight from `saved`
    assert _legacy(tmp_path, "1.0 + weight.float()") == []


def test_npu409_still_reports_a_raw_backward_dropping_the_offset(tmp_path: Path) -> None:
    assert [rel.rpartition("/")[0] for rel, _ in _legacy(tmp_path, "weight.float()")] == [
        KERNELS,
        f"{KERNELS}/qwen3_5",
    ]


# --- NPU430 ---------------------------------------------------------------------------------------------------

KERNEL_MODEL = "veomni/models_kernel/transformers/toy/modeling_toy.py"

REDECLARED_LOCAL = """
from veomni.ops import VeomniOp


def rmsnorm_forward_patched(self, x, impl):
    op = VeomniOp("rms_norm", "standard", impl)
    if self.weight is None:
        op = VeomniOp("rms_norm", "unweighted", impl)
        return op(x, None, eps=self.eps)
    return op(x, {weight}, eps=self.eps)
"""


def test_npu430_quiet_on_a_local_redeclared_in_a_branch() -> None:
    # the unweighted binding inside the `if` is not the one the call after the `if` sees
    text = REDECLARED_LOCAL.format(weight="self.weight")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == []


def test_npu430_still_reports_the_standard_local_called_without_a_weight() -> None:
    text = REDECLARED_LOCAL.format(weight="None")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == [5]


NONE_BOUND = """
from torch import nn
from veomni.ops import VeomniOp
from veomni.ops.dispatch import OpSlot

veomni_unweighted_rms_norm = OpSlot("rms_norm", "unweighted")


class ToyUnweightedRMSNorm(nn.Module):
    def __init__(self, impl, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = {attr}
        self.kernel = VeomniOp("rms_norm", "unweighted", impl)

    def forward(self, x):
        return self.kernel(x, self.weight, eps=self.eps)


def unweighted_rmsnorm_forward_patched(self, x):
    weight = {local}  # this layout has no affine weight
    return veomni_unweighted_rms_norm(x, weight, self.eps)
"""


def test_npu430_quiet_on_a_weight_bound_to_none() -> None:
    text = NONE_BOUND.format(attr="None", local="None")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == []


def test_npu430_still_reports_a_trained_weight_given_to_the_unweighted_row() -> None:
    text = NONE_BOUND.format(attr="nn.Parameter(torch.ones(8))", local="self.scale")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == [5, 13]


# --- NPU401 ---------------------------------------------------------------------------------------------------

FLAG_KERNEL = """
import torch
import torch_npu
from torch import nn


def rms_norm_npu(x, weight, eps, zero_centered=False):
    if zero_centered:
        weight = 1.0 + weight.float()
    return torch_npu.npu_rms_norm(x, weight.to(x.dtype), eps)[0]


class ToyGemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return rms_norm_npu(x, 1.0 + self.weight.float(), self.eps{flag})
"""


def test_npu401_quiet_on_a_flagged_kernel_called_without_its_flag() -> None:
    # `zero_centered` left at its default (False): the kernel uses the weight as given, `1 + w` is the offset once
    assert [d.line for d in lint_snippet(KERNEL_MODEL, FLAG_KERNEL.format(flag=""), ["NPU401"])] == []


@pytest.mark.parametrize("flag", [", zero_centered=True", ", True"])
def test_npu401_still_reports_the_flagged_kernel_given_its_flag(flag: str) -> None:
    assert [d.line for d in lint_snippet(KERNEL_MODEL, FLAG_KERNEL.format(flag=flag), ["NPU401"])] == [19]


# --- NPU403 ---------------------------------------------------------------------------------------------------

REFILLED = """
import torch
from torch import nn
from veomni.ops import VeomniOp


class ToyGemmaRMSNorm(nn.Module):
    def __init__(self, dim, impl, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        {refill}
        self.kernel = VeomniOp("rms_norm", "qwen3_5", impl)

    def reset_parameters(self):
        {reset}

    def forward(self, x):
        return self.kernel(x, self.weight, eps=self.eps)
"""


@pytest.mark.parametrize(
    ("refill", "reset"),
    [("self.weight.data.zero_()", "pass"), ("self.reset_parameters()", "nn.init.zeros_(self.weight)")],
)
def test_npu403_quiet_on_a_weight_refilled_with_zeros(refill: str, reset: str) -> None:
    # made with ones, then zeroed in place (in `__init__`, or by `reset_parameters`): a Gemma-style weight
    text = REFILLED.format(refill=refill, reset=reset)
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU403"])] == []


def test_npu403_still_reports_a_weight_left_at_ones() -> None:
    text = REFILLED.format(refill="self.reset_parameters()", reset="nn.init.ones_(self.weight)")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU403"])] == [12]


FLAGGED_TREE_KERNEL = '''
"""rms_norm NPU kernels."""
import torch_npu


def rms_norm_npu(hidden_states, weight, eps, zero_centered=False):
    if zero_centered:
        weight = 1.0 + weight.float()
    return torch_npu.npu_rms_norm(hidden_states, weight.to(hidden_states.dtype), eps)[0]
'''

WAN_NORM = """
import torch
from torch import nn

from veomni.ops.kernels.rms_norm.npu import rms_norm_npu


class WanRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm_npu(x, self.weight, self.eps{flag})
"""


@pytest.mark.parametrize(("flag", "lines"), [("", []), (", zero_centered=True", [14])])
def test_npu403_reads_a_tree_kernel_under_the_call_flags(tmp_path: Path, flag: str, lines: list[int]) -> None:
    # an in-tree model's norm calling the tree's flagged kernel without the flag: the standard path
    rel = "veomni/models/transformers/wan/modeling_wan.py"
    files = {
        f"{KERNELS}/__init__.py": "",
        f"{KERNELS}/npu.py": FLAGGED_TREE_KERNEL,
        rel: WAN_NORM.format(flag=flag),
    }
    root = ops_tree(tmp_path, files)
    assert [d.line for d in lint_in_tree(root, rel, ["NPU403"])] == lines


# --- NPU404 ---------------------------------------------------------------------------------------------------

SUBCLASS_ZEROED = """
import torch_npu
from transformers.models.llama.modeling_llama import LlamaRMSNorm


class ToyGemmaRMSNorm(LlamaRMSNorm):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__(hidden_size, eps)
        {refill}

    def forward(self, x):
        return torch_npu.npu_rms_norm(x, 1.0 + self.weight.float(), self.variance_epsilon)[0]
"""


def test_npu404_quiet_on_an_upstream_ones_weight_zeroed_by_the_subclass() -> None:
    text = SUBCLASS_ZEROED.format(refill="self.weight.data.zero_()  # Gemma-style")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU404"])] == []


def test_npu404_still_reports_the_subclass_left_at_ones() -> None:
    text = SUBCLASS_ZEROED.format(refill="self.weight.data.fill_(1.0)")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU404"])] == [11]


INIT_WEIGHTS_ZEROED = """
import torch
import torch_npu
from torch import nn
from transformers import PreTrainedModel


class ToyGemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch_npu.npu_rms_norm(x, 1.0 + self.weight.float(), self.eps)[0]


class ToyPreTrainedModel(PreTrainedModel):
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, ToyGemmaRMSNorm):
            nn.init.{fill}(module.weight)
"""


def test_npu404_quiet_when_init_weights_zeroes_the_norm() -> None:
    text = INIT_WEIGHTS_ZEROED.format(fill="zeros_")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU404"])] == []


def test_npu404_still_reports_when_init_weights_keeps_ones() -> None:
    text = INIT_WEIGHTS_ZEROED.format(fill="ones_")  # the call, and the fill (ones into an offset norm)
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU404"])] == [14, 21]


# --- NPU444 ---------------------------------------------------------------------------------------------------

LOSS_KERNEL = "veomni/ops/kernels/cross_entropy/chunk_loss.py"

HELPER_BACKWARD = """
import torch


def _chunk_loss_backward(ctx, grad_output):
    grad_input, grad_weight = ctx.saved_tensors
    scale = grad_output / ctx.num_tokens
    return grad_input * scale, grad_weight * scale, None, None


class ChunkLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_states, weight, labels, num_tokens):
        ctx.save_for_backward(torch.zeros_like(hidden_states), torch.zeros_like(weight))
        ctx.num_tokens = num_tokens
        return hidden_states.sum() / num_tokens

    @staticmethod
    def backward(ctx, grad_output):
        {body}
"""


@pytest.mark.parametrize(
    "body",
    [
        "return _chunk_loss_backward(ctx, grad_output)",
        'return grad_output * getattr(ctx, "num_tokens", 1), None, None, None',
    ],
)
def test_npu444_quiet_on_a_context_read_by_a_helper_or_getattr(body: str) -> None:
    text = HELPER_BACKWARD.format(body=body)
    assert [d.line for d in lint_snippet(LOSS_KERNEL, text, ["NPU444"])] == []


def test_npu444_still_reports_a_context_attribute_never_read() -> None:
    text = HELPER_BACKWARD.format(body="return grad_output, None, None, None")
    assert [d.line for d in lint_snippet(LOSS_KERNEL, text, ["NPU444"])] == [19]


INHERITED_ATTR = """
from torch import nn
from veomni.models_kernel.transformers.toy.modeling_base import ToyRMSNorm
from veomni.ops import VeomniOp


class ToyPlainNorm(nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.kernel = VeomniOp("rms_norm", "unweighted", impl)

    def forward(self, x):
        return self.kernel(x, None, eps=1e-6)


class ToyQKNorm({base}):
    def forward(self, x):
        return self.kernel(x, self.weight, eps=self.eps)
"""


def test_npu430_quiet_on_an_attribute_of_a_base_defined_elsewhere() -> None:
    # `ToyQKNorm.kernel` comes from the imported `ToyRMSNorm`, not from the file's unrelated `ToyPlainNorm`
    text = INHERITED_ATTR.format(base="ToyRMSNorm")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == []


def test_npu430_still_reports_the_attribute_inherited_from_the_file() -> None:
    text = INHERITED_ATTR.format(base="ToyPlainNorm")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == [17]


INHERITED_OFFSET_ATTR = """
import torch
from torch import nn
from veomni.models_kernel.transformers.toy.modeling_base import ToyRMSNorm
from veomni.ops import VeomniOp


class ToyGemmaRMSNorm(nn.Module):
    def __init__(self, dim, impl, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))
        self.kernel = VeomniOp("rms_norm", "qwen3_5", impl)

    def forward(self, x):
        return self.kernel(x, self.weight, eps=self.eps)


class ToyQKNorm({base}):
    def __init__(self, dim, impl, eps=1e-6):
        super().__init__(dim, impl, eps)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.kernel(x, self.weight, eps=self.eps)
"""


def test_npu403_quiet_on_an_attribute_of_a_base_defined_elsewhere() -> None:
    text = INHERITED_OFFSET_ATTR.format(base="ToyRMSNorm")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU403"])] == []


def test_npu403_still_reports_the_offset_attribute_inherited_from_the_file() -> None:
    text = INHERITED_OFFSET_ATTR.format(base="ToyGemmaRMSNorm")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU403"])] == [24]


KERNEL_PACKAGE_FORWARD = '''
"""rms_norm NPU forward replacements."""
import torch_npu


def gemma_rms_norm_forward_npu(self, x):
    """Forward replacement for Gemma-style norms (weights start at zero)."""
    return torch_npu.npu_rms_norm(x, 1.0 + self.weight.float(), self.variance_epsilon)[0]
'''

ONES_NORM_CLASS = '''
"""Batch-invariant rms_norm."""
import torch
from torch import nn


class BatchInvariantRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight
'''


@pytest.mark.parametrize(("package", "lines"), [(KERNELS, []), ("veomni/models/transformers/toy", [7])])
def test_npu404_a_kernel_package_forward_is_not_its_sibling_class(
    tmp_path: Path, package: str, lines: list[int]
) -> None:
    # a kernel package serves every model: its one norm class does not own a forward written for Gemma-style norms
    # (in a model package, the package's one norm class does)
    files = {
        f"{package}/__init__.py": "",
        f"{package}/npu.py": KERNEL_PACKAGE_FORWARD,
        f"{package}/bi.py": ONES_NORM_CLASS,
    }
    root = ops_tree(tmp_path, files)
    assert [d.line for d in lint_in_tree(root, f"{package}/npu.py", ["NPU404"])] == lines


REBOUND_LATER = """
from veomni.ops import VeomniOp


def weighted_norm(x, w, eps):
    fn = VeomniOp("rms_norm", "unweighted", "npu")
    for _ in range(1):
        y = fn(x, {first}, eps=eps)
    fn = VeomniOp("rms_norm", "standard", "npu")
    return fn(y, w, eps=eps)
"""


def test_npu430_quiet_on_a_call_before_the_local_is_rebound() -> None:
    # the call on line 7 sees the unweighted binding above it, not the standard one below
    text = REBOUND_LATER.format(first="None")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == []


def test_npu430_still_reports_the_weight_given_to_the_earlier_binding() -> None:
    text = REBOUND_LATER.format(first="w")
    assert [d.line for d in lint_snippet(KERNEL_MODEL, text, ["NPU430"])] == [5]


SHARED_INIT = """
import functools

from ...registry import register_op
from .shared import npu as shared_npu

register_op("rms_norm", "standard", "npu", shared_npu.forward, shared_npu.backward)
register_op(
    "rms_norm",
    "qwen3_5",
    "npu",
    functools.partial(shared_npu.forward, offset={offset}),
    functools.partial(shared_npu.backward, offset={offset}),
)
"""

SHARED_NPU = '''
"""rms_norm NPU kernels shared by the standard and qwen3_5 rows (the offset bound per row)."""
import torch_npu

from ....registry import SavedState


def forward(hidden_states, weight, *, eps, offset=0.0):
    w = weight.float() + offset
    out, rstd = torch_npu.npu_rms_norm(hidden_states, w.to(hidden_states.dtype), eps)
    return out, SavedState((hidden_states, weight, rstd))


def backward(grad_output, saved, offset=0.0):
    x, weight, rstd = saved.tensors
    w = weight.float() + offset
    return torch_npu.npu_rms_norm_backward(grad_output, x, w.to(x.dtype), rstd)
'''


@pytest.mark.parametrize(("offset", "count"), [("1.0", 0), ("0.0", 4)])
def test_npu409_reads_an_offset_bound_by_partial_per_row(tmp_path: Path, offset: str, count: int) -> None:
    # one kernel pair for both rows, `functools.partial(..., offset=1.0)` on the qwen3_5 row: quiet; 0.0 is reported
    files = {
        f"{KERNELS}/__init__.py": SHARED_INIT.format(offset=offset),
        f"{KERNELS}/shared/__init__.py": "",
        f"{KERNELS}/shared/npu.py": SHARED_NPU,
    }
    root = ops_tree(tmp_path, files)
    found = [
        d
        for rel in (f"{KERNELS}/__init__.py", f"{KERNELS}/shared/npu.py")
        for d in lint_in_tree(root, rel, ["NPU409"])
    ]
    assert len(found) == count
