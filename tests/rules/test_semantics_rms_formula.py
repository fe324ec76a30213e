"""The RMSNorm formula at every site the tree runs one (issue 20, point 4): fp32 variance (NPU406), the cast back
to the input dtype (NPU407), eps under the root and from the config (NPU408), and the weight contract of the
kernel a registry row binds to a variant (NPU409).

Each case is written here with its own names, models and files: specs, generated copies, in-tree classes, kernel
modules' eager fallbacks and registering modules."""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import Project
from tests.rules.snippets import write_file

RMS = ["NPU401", "NPU402", "NPU403", "NPU404", "NPU405", "NPU406", "NPU407", "NPU408", "NPU409", "NPU410"]


def _codes(path: Path, root: Path) -> list[tuple[int, str]]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    return sorted((d.line, d.code) for d in lint_source(src, RMS, Settings(), Project(root=str(root))))


def _tree(tmp_path: Path) -> Path:
    write_file(tmp_path, "veomni/__init__.py", "")
    write_file(tmp_path, "veomni/ops/__init__.py", "")
    write_file(tmp_path, "veomni/ops/kernels/__init__.py", "")
    return tmp_path


# -- NPU407: the cast back ------------------------------------------------------------------------------

LLAMA_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


@config.override_method("MistralRMSNorm.forward")
def mistral_norm_forward_patched(self, hidden):
    if fused_norm is not None:
        return fused_norm(hidden, self.weight, self.variance_epsilon)
    wide = hidden.to(torch.float32)
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return {ret}
"""


def test_spec_forward_returning_fp32_where_upstream_casts_back(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    path = write_file(root, rel, LLAMA_SPEC.format(ret="self.weight * wide"))
    assert (13, "NPU407") in _codes(path, root)
    path = write_file(root, rel, LLAMA_SPEC.format(ret="self.weight * wide.to(hidden.dtype)"))
    assert _codes(path, root) == []  # and the kernel call's return is not judged


IN_TREE_NORM = """
import torch
from torch import nn


class LatentRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _rms(self, t):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        out = self._rms(x.float()) * (1 + self.weight.float())
        return {ret}
"""


def test_in_tree_class_through_its_own_helper(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/latent/modeling_latent.py"
    path = write_file(root, rel, IN_TREE_NORM.format(ret="out"))
    assert _codes(path, root) == [(16, "NPU407")]  # the helper `_rms` returns fp32 by design: not reported
    path = write_file(root, rel, IN_TREE_NORM.format(ret="out.type_as(x)"))
    assert _codes(path, root) == []


def test_kernel_fallback_returning_fp32(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/ops/kernels/rms_norm/eager_paths.py"
    text = """
    def zero_centered_fallback(states, scale, eps):
        acc = states.to(dtype=torch.float32)
        acc = acc * (acc.square().mean(dim=-1, keepdim=True) + eps).rsqrt()
        return {ret}
    """
    path = write_file(root, rel, text.format(ret="acc * (1.0 + scale.float())"))
    assert _codes(path, root) == [(4, "NPU407")]
    # the cast applied to the scale only: the product is promoted back to fp32
    path = write_file(root, rel, text.format(ret="acc * (1.0 + scale.float()).to(states.dtype)"))
    assert _codes(path, root) == [(4, "NPU407")]
    path = write_file(root, rel, text.format(ret="(acc * (1.0 + scale.float())).to(states.dtype)"))
    assert _codes(path, root) == []


# -- NPU406: fp32 variance in kernel fallbacks -------------------------------------------------------------


def test_kernel_fallback_squaring_its_argument_in_the_input_dtype(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/ops/kernels/rms_norm/fallbacks.py"
    text = """
    def scale_free_norm(states, weight, eps):
        if weight is not None:
            raise ValueError("no weight expected")
        ms = {squared}.pow(2).mean(-1, keepdim=True)
        return states * torch.rsqrt(ms + eps).to(states.dtype)


    def _inner(t, eps):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
    """
    path = write_file(root, rel, text.format(squared="states"))
    assert _codes(path, root) == [(4, "NPU406")]  # the private helper is given fp32 by its caller
    path = write_file(root, rel, text.format(squared="states.float()"))
    assert _codes(path, root) == []


# -- NPU408: eps under the root, from the config ------------------------------------------------------------

GENERATED_NORM = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen2.modeling_qwen2
#
import torch
from torch import nn


class Qwen2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = {eps}

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        rms = hidden_states.pow(2).mean(-1, keepdim=True).sqrt()
        hidden_states = hidden_states / {denominator}
        return self.weight * hidden_states.to(input_dtype)
"""


def test_generated_copy_adding_eps_after_the_root_or_ignoring_its_eps(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/qwen2/generated/patched_modeling_qwen2_gpu.py"
    path = write_file(
        root, rel, GENERATED_NORM.format(eps="eps", denominator="(rms + self.variance_epsilon)")
    )
    assert (21, "NPU408") in _codes(path, root)
    path = write_file(root, rel, GENERATED_NORM.format(eps="1e-5", denominator="rms"))
    assert (15, "NPU408") in _codes(path, root)


def test_kernel_fallback_with_eps_after_a_power_root(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/ops/kernels/rms_norm/eager.py"
    text = """
    def plain_fallback(x, weight, eps):
        x32 = x.float()
        norm = {norm}
        return weight * (x32 / norm).to(x.dtype)
    """
    path = write_file(root, rel, text.format(norm="x32.pow(2).mean(-1, keepdim=True) ** 0.5 + eps"))
    assert _codes(path, root) == [(3, "NPU408")]
    path = write_file(root, rel, text.format(norm="(x32.pow(2).mean(-1, keepdim=True) + eps) ** 0.5"))
    assert _codes(path, root) == []


MODIFY_INIT = """
import torch
from torch import nn
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


@config.modify_init("Qwen3RMSNorm")
def qwen3_norm_init(self, hidden_size, eps=1e-6):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.ones(hidden_size))
    self.variance_epsilon = {value}
"""


def test_init_patch_storing_a_literal_eps(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py"
    path = write_file(root, rel, MODIFY_INIT.format(value="1e-6"))
    assert (12, "NPU408") in _codes(path, root)
    path = write_file(root, rel, MODIFY_INIT.format(value="eps"))
    assert (12, "NPU408") not in _codes(path, root)


# -- NPU409: the kernel a registry row binds ---------------------------------------------------------------

ROWS = """
from ...registry import register_op
from .gemma import triton as gemma_triton
from .standard import triton as standard_triton

register_op("rms_norm", "standard", "triton", standard_triton.forward, standard_triton.backward)
register_op("rms_norm", "gemma", "triton", {impl}.forward, {impl}.backward)
"""

PLAIN = """
import torch_npu


def forward(x, w, eps):
    return torch_npu.npu_rms_norm(x, w, eps)[0]


def backward(grad, x, w, eps):
    return grad
"""


def test_register_op_row_bound_to_the_other_variants_kernel(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/ops/kernels/rms_norm/__init__.py"
    path = write_file(root, rel, ROWS.format(impl="standard_triton"))
    # the modules are not on disk: the variant package they are imported from says what they do
    assert _codes(path, root) == [(6, "NPU409"), (6, "NPU409")]
    path = write_file(root, rel, ROWS.format(impl="gemma_triton"))
    assert _codes(path, root) == []
    # on disk, the kernel's own source decides (the gemma package's kernel that drops the offset)
    write_file(root, "veomni/ops/kernels/rms_norm/gemma/triton.py", PLAIN)
    assert _codes(path, root) == [(6, "NPU409")]  # backward touches no weight: unread


FACTORY_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


def _zero_centered_factory():
    from .ascend import zero_centered_norm

    return zero_centered_norm


KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="rms_norm", variant="qwen3_5", factory=_zero_centered_factory)
)
"""

ASCEND = """
import torch_npu


def zero_centered_norm(x, gamma, eps):
    return torch_npu.npu_rms_norm(x, {weight}, eps)[0]
"""


def test_kernel_module_function_registered_for_the_offset_variant(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    registry = write_file(root, "veomni/ops/kernels/rms_norm/__init__.py", FACTORY_ROWS)
    kernel = write_file(root, "veomni/ops/kernels/rms_norm/ascend.py", ASCEND.format(weight="gamma"))
    assert _codes(kernel, root) == [(5, "NPU409")]
    assert _codes(registry, root) == [(11, "NPU409")]
    kernel = write_file(root, "veomni/ops/kernels/rms_norm/ascend.py", ASCEND.format(weight="gamma + 1"))
    assert _codes(kernel, root) == []
    assert _codes(registry, root) == []


# -- NPU410: the statistic; NPU408: no epsilon; NPU407: a fixed dtype ------------------------------------------

STAT_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2.modeling_qwen2", target_file="x.py")


@config.override_method("Qwen2RMSNorm.forward")
def qwen2_norm_forward_patched(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    ms = {stat}
    hidden_states = hidden_states {op} torch.{root}(ms + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)
"""


def _stat(tree: Path, **kw: str) -> list[tuple[int, str]]:
    values = {"stat": "hidden_states.pow(2).mean(-1, keepdim=True)", "op": "*", "root": "rsqrt", **kw}
    rel = "veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py"
    return _codes(write_file(tree, rel, STAT_SPEC.format(**values)), tree)


def test_spec_normalising_by_another_statistic(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert _stat(root) == []
    assert _stat(root, stat="torch.var(hidden_states, dim=-1, keepdim=True)") == [(11, "NPU410")]
    assert _stat(root, stat="(hidden_states * hidden_states).sum(-1, keepdim=True)") == [(11, "NPU410")]
    assert _stat(root, stat="hidden_states.pow(2).mean(1, keepdim=True)") == [(11, "NPU410")]
    assert _stat(root, stat="hidden_states.pow(2).mean(dim=-1)") == [(11, "NPU410")]
    assert _stat(root, stat="hidden_states.pow(2).mean(-1)[..., None]") == []
    assert _stat(root, op="*", root="sqrt") == [(12, "NPU410")]
    assert _stat(root, op="/", root="sqrt") == []
    # a sum divided by the hidden size is the mean
    assert _stat(root, stat="hidden_states.pow(2).sum(-1, keepdim=True) / hidden_states.shape[-1]") == []


def test_in_tree_class_normalising_by_a_variance_without_a_mean_of_squares(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
    import torch
    from torch import nn


    class BlockRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt({stat} + self.eps)
            return (self.weight * h).to(x.dtype)
    """
    rel = "veomni/models/transformers/block/modeling_block.py"
    path = write_file(root, rel, text.format(stat="h.var(dim=-1, keepdim=True, unbiased=False)"))
    assert _codes(path, root) == [(13, "NPU410")]
    path = write_file(root, rel, text.format(stat="h.square().mean(dim=-1, keepdim=True)"))
    assert _codes(path, root) == []


def test_root_of_the_mean_of_squares_without_epsilon(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py"
    text = STAT_SPEC.format(stat="hidden_states.pow(2).mean(-1, keepdim=True)", op="*", root="rsqrt")
    path = write_file(root, rel, text.replace("ms + self.variance_epsilon", "ms"))
    assert _codes(path, root) == [(12, "NPU408")]


def test_cast_back_to_a_fixed_dtype(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py"
    text = STAT_SPEC.format(stat="hidden_states.pow(2).mean(-1, keepdim=True)", op="*", root="rsqrt")
    for cast in ("hidden_states.half()", "hidden_states.to(dtype=torch.bfloat16)"):
        path = write_file(root, rel, text.replace("hidden_states.to(input_dtype)", cast))
        assert _codes(path, root) == [(13, "NPU407")], cast


def test_other_norms_and_metrics_taking_a_root_of_squares_are_not_rmsnorms(tmp_path: Path) -> None:
    # false positives found on transformers 5.9.0 (qwen3_next's `l2norm`) and VeOmni's gated-delta-rule kernels
    root = _tree(tmp_path)
    model = """
    import torch


    def l2norm(x, dim=-1, eps=1e-6):
        inv_norm = torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
        return x * inv_norm
    """
    path = write_file(root, "veomni/models/transformers/linear/modeling_linear.py", model)
    assert _codes(path, root) == []
    metric = """
    def get_err_ratio(x, y):
        err = (x - y).flatten().square().mean().sqrt().item()
        base = x.flatten().square().mean().sqrt().item()
        return err / (base + 1e-8)
    """
    path = write_file(root, "veomni/ops/kernels/gated_delta_rule/utils.py", metric)
    assert _codes(path, root) == []


def test_fused_kernel_left_at_its_default_epsilon(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/ops/kernels/rms_norm/ascend_norms.py"
    text = """
    import torch.nn.functional as F
    import torch_npu


    def plain(states, gamma, eps):
        return torch_npu.npu_rms_norm(states, gamma{npu})[0]


    def reference(states, gamma, eps):
        return F.rms_norm(states, (states.shape[-1],), gamma{torch})
    """
    path = write_file(root, rel, text.format(npu="", torch=""))
    assert _codes(path, root) == [(6, "NPU408"), (10, "NPU408")]
    path = write_file(root, rel, text.format(npu=", epsilon=eps", torch=", eps"))
    assert _codes(path, root) == []


def test_fused_branch_given_an_upcast_input_and_a_spec_helper(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    text = """
    import torch
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


    def _rms_norm_eager(x, w, eps):
        h = x.float()
        h = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
        return w * h{cast}


    @config.override_method("MistralRMSNorm.forward")
    def mistral_norm_forward_patched(self, hidden):
        if fused_norm is not None:
            return fused_norm({arg}, self.weight, self.variance_epsilon)
        return _rms_norm_eager(hidden, self.weight, self.variance_epsilon)
    """
    path = write_file(root, rel, text.format(cast="", arg="hidden"))
    assert (10, "NPU407") in _codes(path, root)  # the spec's own helper returns fp32
    path = write_file(root, rel, text.format(cast=".to(x.dtype)", arg="hidden.float()"))
    assert (16, "NPU407") in _codes(path, root)  # the kernel is given fp32 and returns fp32
    path = write_file(root, rel, text.format(cast=".to(x.dtype)", arg="hidden"))
    assert [c for c in _codes(path, root) if c[1] == "NPU407"] == []


def test_liger_kernel_with_a_literal_offset_is_an_offset_kernel(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
    from ...kernel_registry import KERNEL_REGISTRY, KernelSpec
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction


    def shifted_liger(x, w, eps):
        return LigerRMSNormFunction.apply(x, w, eps, {offset}, "gemma", False, None)


    def _factory():
        return shifted_liger


    KERNEL_REGISTRY.register(KernelSpec(name="liger", op_name="rms_norm", variant="gemma", factory=_factory))
    """
    path = write_file(root, "veomni/ops/kernels/rms_norm/liger_rows.py", text.format(offset="1.0"))
    assert _codes(path, root) == []
    path = write_file(root, "veomni/ops/kernels/rms_norm/liger_rows.py", text.format(offset="0.0"))
    assert _codes(path, root) == [(13, "NPU409")]
