"""NPU406 through a norm helper: the RMS statistic computed by a method or module function that squares its
argument without casting it (Wan's `self.norm(x)`, Gemma's `self._norm(x)`, a module's `_rms(x, eps)`) is
followed to its callers, in any region (diffusers / seed_omni models, ops, a spec's replacement of an upstream
forward); a caller handing it the activations uncast is reported, an fp32 argument or a helper that upcasts
itself is not."""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.snippets import write_file


def _lines(path: Path) -> list[int]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    return sorted(d.line for d in lint_source(src, ["NPU406"], Settings()) if d.code == "NPU406")


DIFFUSERS = """
import torch
from torch import nn


class WanRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, hidden):
        return hidden * torch.rsqrt(hidden.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def forward(self, hidden_states):
        {body}
"""


def test_diffusers_norm_helper_given_uncast_activations(tmp_path: Path) -> None:
    rel = "veomni/models/diffusers/wan_t2v/wan_transformer/modeling_wan_transformer.py"
    bad = write_file(
        tmp_path,
        "a/" + rel,
        DIFFUSERS.format(body="return self._norm(hidden_states).type_as(hidden_states) * self.weight"),
    )
    assert _lines(bad) == [15]
    good = write_file(
        tmp_path,
        "b/" + rel,
        DIFFUSERS.format(
            body="return self._norm(hidden_states.float()).type_as(hidden_states) * self.weight"
        ),
    )
    assert _lines(good) == []
    # the upcast through a local is fp32 too; cast back before the helper is not
    local = "xf = hidden_states.to(torch.float32)\n        return self._norm(xf).type_as(hidden_states) * self.weight"
    assert _lines(write_file(tmp_path, "c/" + rel, DIFFUSERS.format(body=local))) == []
    back = "xf = hidden_states.float().to(hidden_states.dtype)\n        return self._norm(xf) * self.weight"
    assert _lines(write_file(tmp_path, "d/" + rel, DIFFUSERS.format(body=back))) == [16]


SEED_OMNI = """
import torch


class QKRMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def rms(self, t, scale=None):
        ms = torch.mean(t.square(), dim=-1, keepdim=True)
        return t * torch.rsqrt(ms + self.variance_epsilon)

    def forward(self, q):
        dtype = q.dtype
        return self.weight * self.rms(t={arg}).to(dtype)
"""


def test_seed_omni_helper_called_by_keyword(tmp_path: Path) -> None:
    rel = "veomni/models/seed_omni/encoder/toy/modeling_toy.py"
    assert _lines(write_file(tmp_path, "a/" + rel, SEED_OMNI.format(arg="q"))) == [16]
    assert _lines(write_file(tmp_path, "b/" + rel, SEED_OMNI.format(arg="q.to(torch.float32)"))) == []


def test_helper_that_upcasts_itself_is_quiet(tmp_path: Path) -> None:
    text = """
    import torch


    class HeadRMSNorm(torch.nn.Module):
        def norm(self, x):
            x = x.float()
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            return self.norm(x).type_as(x) * self.weight
    """
    assert _lines(write_file(tmp_path, "veomni/models/transformers/toy/modeling_toy.py", text)) == []


MODULE_HELPER = """
import torch


def _rms_stat(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _outer(x, eps):
    return _rms_stat(x, eps)


class FallbackNorm(torch.nn.Module):
    def forward(self, hidden):
        return (_rms_stat({arg}, self.eps) * self.weight).to(hidden.dtype)


def loss_like(pred, target):
    err = pred - target
    return err.pow(2).mean()


def reduce_metric(pred, target):
    return loss_like(pred, target)
"""


def test_module_level_helper_callers(tmp_path: Path) -> None:
    rel = "veomni/ops/kernels/norm_fallback/eager_norm.py"
    # the private chain (`_outer`) is given its tensor by its caller; a mean of squares without a root is a
    # statistic (a loss), not a normaliser
    assert _lines(write_file(tmp_path, "a/" + rel, MODULE_HELPER.format(arg="hidden"))) == [14]
    assert _lines(write_file(tmp_path, "b/" + rel, MODULE_HELPER.format(arg="hidden.float()"))) == []


SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


@config.override_method("Gemma3RMSNorm.forward")
def gemma3_rmsnorm_forward_patched(self, x):
    output = self._norm({arg})
    output = output * (1.0 + self.weight.float())
    return output.type_as(x)
"""


def test_spec_forward_hands_the_upstream_helper_uncast_activations(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/gemma3/gemma3_npu_patch_gen_config.py"
    assert _lines(write_file(tmp_path, "a/" + rel, SPEC.format(arg="x"))) == [8]
    assert _lines(write_file(tmp_path, "b/" + rel, SPEC.format(arg="x.float()"))) == []


NESTED = """
import torch


class ToyModel(torch.nn.Module):
    def offload(self):
        class RMSNorm(torch.nn.Module):
            def forward(self, hidden_states):
                input_dtype = hidden_states.dtype
                variance = {stat}.square().mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.module.eps)
                return hidden_states.to(input_dtype) * self.module.weight

        return RMSNorm
"""


def test_rmsnorm_class_nested_in_a_method(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/toy/modeling_toy.py"
    assert _lines(write_file(tmp_path, "a/" + rel, NESTED.format(stat="hidden_states"))) != []
    assert (
        _lines(write_file(tmp_path, "b/" + rel, NESTED.format(stat="hidden_states.to(torch.float32)"))) == []
    )


SPELLINGS = """
import torch


class T5StyleRMSNorm(torch.nn.Module):
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        variance = {stat}.mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)
"""


def test_square_spellings(tmp_path: Path) -> None:
    rel = "veomni/models/diffusers/toy/modeling_toy.py"
    bad = (
        "(hidden_states * hidden_states)",
        "torch.pow(hidden_states, 2)",
        "(hidden_states**2)",
        "torch.square(hidden_states)",
    )
    good = (
        "(hidden_states.float() * hidden_states.float())",
        "torch.pow(hidden_states.float(), 2)",
        "(hidden_states.to(torch.float32) ** 2)",
        "torch.square(hidden_states.float())",
    )
    for i, stat in enumerate(bad):
        assert _lines(write_file(tmp_path, f"b{i}/" + rel, SPELLINGS.format(stat=stat))) != [], stat
    for i, stat in enumerate(good):
        assert _lines(write_file(tmp_path, f"g{i}/" + rel, SPELLINGS.format(stat=stat))) == [], stat


PATCH_FORWARD = """
import torch


def rms_norm_forward_eager(self, x):
    return x * torch.rsqrt({stat}.pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


def rms_norm_forward_npu(self, x):
    return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]
"""


def test_module_function_bound_as_an_rmsnorm_forward(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/wan/npu_patch.py"
    assert _lines(write_file(tmp_path, "a/" + rel, PATCH_FORWARD.format(stat="x"))) == [5]
    assert _lines(write_file(tmp_path, "b/" + rel, PATCH_FORWARD.format(stat="x.float()"))) == []
