"""Issue 20 device recall beyond the documented examples: a configured device tested against CUDA alone where
the NPU branch only rejects the run (NPU102), and CUDA tests around instance-local handle calls (NPU105)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

TRAINER = "veomni/trainer/toy_setup.py"
MODEL = "veomni/models_kernel/transformers/toy/modeling_toy.py"


def lint(code: str, codes: list[str], path: str):
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings())


GATES = """
from veomni.utils.device import get_device_type


def check_options(options, accelerator_device: str):
    if accelerator_device != "cuda":
        raise NotImplementedError("graph capture")
    if options["device"] == "cuda":
        pass
    else:
        raise ValueError("unsupported")
    if not options.pop("offload_device", "cpu") in ["cuda", "cpu"]:
        raise ValueError("offload target")
    if options.get("init_device") not in ("cuda", "npu", "meta"):
        raise ValueError("fine: NPU is accepted")
    if accelerator_device == "cuda":
        return "fused"
    if get_device_type() != "cuda":
        raise NotImplementedError("the device API itself: an explicit dispatch")
    return "generic"
"""


def test_npu102_configured_device_gates() -> None:
    diags = lint(GATES, ["NPU102"], TRAINER)
    assert [d.line for d in diags] == [5, 7, 11]
    assert '`accelerator_device != "cuda"` accepts the configured device as `"cuda"` but not as `"npu"`' in (
        diags[0].message
    )
    assert "`get_device_type()` or `IS_CUDA_AVAILABLE` (veomni.utils.device)" in diags[0].message


def test_npu102_configured_device_gate_outside_veomni_names_torch_accelerator() -> None:
    code = """
    def setup(device_type):
        if device_type != "cuda":
            raise RuntimeError("needs CUDA")
    """
    (diag,) = lint(code, ["NPU102"], "/elsewhere/train.py")
    assert "torch.accelerator" in diag.message


INSTANCE_GATES = """
import functools

from torch import nn
from veomni.ops import VeomniOp


def toy_moe_loss(logits, op=None):
    return op(logits)


class ToyBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.veomni_norm = VeomniOp("rms_norm", "standard", config.ops_config.rms_norm_implementation)
        self.aux = functools.partial(toy_moe_loss, op=self.veomni_norm)
        self.proj = nn.Linear(4, 4)

    def forward(self, x, logits):
        if x.device.type == "cuda":
            x = self.veomni_norm(x, self.weight)
        on_gpu = logits.is_cuda
        if on_gpu:
            return self.aux(logits)
        if x.is_cuda:
            return self.proj(x)  # not a dispatch handle
        return x
"""


def test_npu105_cuda_test_around_an_instance_handle() -> None:
    diags = lint(INSTANCE_GATES, ["NPU105"], MODEL)
    assert [d.line for d in diags] == [19]
    assert "the dispatch handle `self.veomni_norm`" in diags[0].message
