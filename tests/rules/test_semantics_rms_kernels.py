"""RMSNorm rules (NPU401-406) on defects written through the tree's own kernel functions, fixed epsilons, a
forward reused from another model's spec, and the order of the cast back around the weight (issue 20, point 4).

Every tree here is written in tmp_path with its own kernel names: the contracts are read from their sources."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.norms import kernel_function
from npu_lint.veomni.project import Project
from tests.rules.snippets import write_file

RMS = ["NPU401", "NPU402", "NPU403", "NPU404", "NPU405", "NPU406"]

KERNELS = """
import torch_npu


def plain_norm_npu(x, norm_weight, eps):
    return torch_npu.npu_rms_norm(x, norm_weight, eps)[0]


def shifted_norm_npu(x, norm_weight, eps):
    return torch_npu.npu_rms_norm(x, norm_weight.float() + 1, eps)[0]


def module_norm_npu(mod, x):
    return torch_npu.npu_rms_norm(x.to(mod.weight.dtype), mod.weight, epsilon=mod.variance_epsilon)[0]


def no_weight_norm_npu(x, norm_weight, eps):
    if norm_weight is not None:
        raise ValueError("no weight")
    return x * (x.float().square().mean(-1, keepdim=True) + eps).rsqrt().to(x.dtype)
"""


def _codes(path: Path, root: Path) -> list[tuple[int, str]]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    return sorted((d.line, d.code) for d in lint_source(src, RMS, Settings(), Project(root=str(root))))


def _tree(tmp_path: Path) -> Path:
    write_file(tmp_path, "veomni/__init__.py", "")
    write_file(tmp_path, "veomni/ops/kernels/norm_npu.py", KERNELS)
    return tmp_path


FORWARD_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{module}", target_file="x.py")


@config.override_method("{cls}.forward")
def patched_norm_forward(self, x):
    from veomni.ops.kernels.norm_npu import {kernel}

    return {kernel}({args})
"""


def _spec(tmp_path: Path, model: str, cls: str, kernel: str, args: str) -> Path:
    rel = f"veomni/models/transformers/{model}/{model}_npu_patch_gen_config.py"
    text = FORWARD_SPEC.format(module=f"{model}.modeling_{model}", cls=cls, kernel=kernel, args=args)
    return write_file(tmp_path, rel, text)


def test_kernel_contracts_are_read_from_the_tree(tmp_path: Path) -> None:
    anchor = str(_tree(tmp_path) / "veomni/models/x.py")
    got = {
        name: kernel_function(f"veomni.ops.kernels.norm_npu.{name}", anchor)
        for name in ("plain_norm_npu", "shifted_norm_npu", "module_norm_npu", "no_weight_norm_npu")
    }
    assert {n: (k.contract, k.method_style) for n, k in got.items() if k} == {
        "plain_norm_npu": ("standard", False),
        "shifted_norm_npu": ("offset", False),
        "module_norm_npu": ("standard", True),
        "no_weight_norm_npu": ("unweighted", False),
    }
    assert got["module_norm_npu"].eps_attrs == ("variance_epsilon",)  # type: ignore[union-attr]


def test_lazily_imported_standard_kernel_given_a_zero_initialised_weight(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    spec = _spec(root, "gemma2", "Gemma2RMSNorm", "plain_norm_npu", "x, self.weight, self.eps")
    assert _codes(spec, root) == [(10, "NPU402")]
    spec = _spec(root, "gemma2", "Gemma2RMSNorm", "shifted_norm_npu", "x, self.weight, self.eps")
    assert _codes(spec, root) == []  # the kernel adds the 1 itself


def test_offset_kernel_given_a_ones_initialised_weight_or_one_plus_weight(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    spec = _spec(
        root, "mistral", "MistralRMSNorm", "shifted_norm_npu", "x, self.weight, self.variance_epsilon"
    )
    assert _codes(spec, root) == [(10, "NPU403")]
    spec = _spec(root, "gemma2", "Gemma2RMSNorm", "shifted_norm_npu", "x, 1.0 + self.weight, self.eps")
    assert _codes(spec, root) == [(10, "NPU401")]
    spec = _spec(root, "mistral", "MistralRMSNorm", "plain_norm_npu", "x, self.weight, self.variance_epsilon")
    assert _codes(spec, root) == []


def test_functional_kernel_given_an_eps_attribute_the_class_never_sets(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    spec = _spec(root, "mistral", "MistralRMSNorm", "plain_norm_npu", "x, self.weight, eps=self.eps")
    assert _codes(spec, root) == [(10, "NPU405")]


def test_method_style_kernel_checked_against_the_class_it_is_given(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    spec = _spec(root, "gemma2", "Gemma2RMSNorm", "module_norm_npu", "self, x")
    # reads variance_epsilon (Gemma2RMSNorm keeps `eps`) and multiplies by the raw zero-initialised weight
    assert _codes(spec, root) == [(10, "NPU402"), (10, "NPU405")]
    spec = _spec(root, "mistral", "MistralRMSNorm", "module_norm_npu", "self, x")
    assert _codes(spec, root) == []


IN_TREE = """
import torch
from torch import nn

from veomni.ops import VeomniOp

_FIXED = 1e-5


class ToyNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "eager")

    def forward(self, x):
        return self.veomni_rms_norm(x, self.weight, {eps})


class ToyAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q_weight = nn.Parameter(torch.ones(dim))
        self.q_norm = VeomniOp("rms_norm", "standard", "eager")

    def forward(self, q):
        return self.q_norm(q, self.q_weight, 1e-6)
"""


def test_fixed_eps_given_to_the_kernel_of_a_norm_that_keeps_its_own(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/toy/modeling_toy.py"
    for eps in ("1e-6", "eps=_FIXED"):
        path = write_file(root, rel, IN_TREE.format(eps=eps))
        assert _codes(path, root) == [(17, "NPU405")], eps
    path = write_file(root, rel, IN_TREE.format(eps="eps=self.variance_epsilon"))
    assert _codes(path, root) == []  # and the attention's own literal is not a norm class's


OWNER = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


@config.override_method("Gemma2RMSNorm.forward")
def gemma2_norm_forward_patched(self, x):
    if fused is not None:
        return fused(x, self.weight, self.eps)
    out = self._norm(x.float())
    return (out * (1.0 + self.weight.float())).type_as(x)
"""

REUSER = """
from veomni.models.transformers.gemma2.gemma2_gpu_patch_gen_config import gemma2_norm_forward_patched
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="x.py")
config.override_method("{cls}.forward", replacement=gemma2_norm_forward_patched)
"""


def test_forward_reused_from_another_model_for_a_standard_norm(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    write_file(root, "veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py", OWNER)
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    spec = write_file(root, rel, REUSER.format(model="mistral", cls="MistralRMSNorm"))
    assert _codes(spec, root) == [(5, "NPU404"), (5, "NPU405")]
    rel = "veomni/models/transformers/gemma/gemma_gpu_patch_gen_config.py"
    spec = write_file(root, rel, REUSER.format(model="gemma", cls="GemmaRMSNorm"))
    assert _codes(spec, root) == []  # Gemma's norm has the same contract: zeros, `1 + w`, `self.eps`


CAST = """
# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.{model}.modeling_{model}
# ======================================================================
import torch
from torch import nn


class {cls}(nn.Module):
    def forward(self, x):
{body}
"""


def _generated(root: Path, model: str, cls: str, body: str) -> Path:
    rel = f"veomni/models/transformers/{model}/generated/patched_modeling_{model}_gpu.py"
    text = CAST.format(model=model, cls=cls, body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8))
    return write_file(root, rel, text)


def test_weight_applied_after_the_cast_back_where_upstream_scales_in_fp32(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    late = """
    normed = self._norm(x.float()).to(x.dtype)
    return normed * (1 + self.weight)
    """
    assert _codes(_generated(root, "gemma2", "Gemma2RMSNorm", late), root) == [(12, "NPU406")]
    kept = """
    normed = self._norm(x.float())
    return (normed * (1 + self.weight.float())).type_as(x)
    """
    assert _codes(_generated(root, "gemma2", "Gemma2RMSNorm", kept), root) == []
    # scaling in fp32 where upstream (Mistral) scales after the cast back keeps more precision: not reported
    fp32 = """
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return (self.weight.float() * h).to(dtype)
    """
    assert _codes(_generated(root, "mistral", "MistralRMSNorm", fp32), root) == []


HELPER_SPEC = """
import torch_npu
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


def _npu_norm(x, scale, eps):
    return torch_npu.npu_rms_norm(x, scale, epsilon=eps)[0]


def _npu_module_norm(norm, x):
    return torch_npu.npu_rms_norm(x, gamma=norm.weight, epsilon=norm.variance_epsilon)[0]


@config.override_method("Gemma2RMSNorm.forward")
def gemma2_norm_forward_npu(self, hidden):
    return {call}
"""


def test_vendor_kernel_reached_through_a_local_helper_or_by_keyword(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py"
    cases = {
        "_npu_norm(hidden, self.weight, self.eps)": [(17, "NPU402")],
        "_npu_norm(hidden, 1.0 + self.weight, self.eps)": [],
        "_npu_module_norm(self, hidden)": [(17, "NPU402"), (17, "NPU405")],
        "torch_npu.npu_rms_norm(hidden, gamma=self.weight, epsilon=self.eps)[0]": [(17, "NPU402")],
    }
    for call, expected in cases.items():
        spec = write_file(root, rel, HELPER_SPEC.format(call=call))
        assert _codes(spec, root) == expected, call


EAGER_EPS = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


@config.override_method("MistralRMSNorm.forward")
def mistral_norm_forward_patched(self, h):
    dtype = h.dtype
    h = h.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + {eps})
    return self.weight * h.to(dtype)
"""


def test_literal_epsilon_in_the_eager_math_of_a_patched_norm(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    spec = write_file(root, rel, EAGER_EPS.format(eps="1e-5"))
    assert _codes(spec, root) == [(11, "NPU405")]
    spec = write_file(root, rel, EAGER_EPS.format(eps="self.variance_epsilon"))
    assert _codes(spec, root) == []


FILLED = """
import torch
from torch import nn
from veomni.ops import VeomniOp


class ToyShiftedNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.fused = VeomniOp("rms_norm", "standard", "eager")
        self.reset_parameters()

    def reset_parameters(self):
        {fill}

    def forward(self, x):
        return self.fused(x, self.weight, eps=self.eps)
"""


def test_weight_created_empty_and_filled_by_another_method(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/toy/modeling_toy.py"
    for fill in (
        "nn.init.zeros_(self.weight)",
        "self.weight.data.zero_()",
        "nn.init.constant_(self.weight, 0.0)",
    ):
        path = write_file(root, rel, FILLED.format(fill=fill))
        assert _codes(path, root) == [(11, "NPU402")], fill
    for fill in ("nn.init.ones_(self.weight)", "self.weight.data.fill_(1.0)"):
        path = write_file(root, rel, FILLED.format(fill=fill))
        assert _codes(path, root) == [], fill


def test_kernel_module_imported_inside_the_forward_under_an_alias(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


    @config.override_method("MistralRMSNorm.forward")
    def mistral_norm_forward_npu(self, x):
        from veomni.ops.kernels import norm_npu as kernels

        return kernels.{kernel}(x, self.weight, self.variance_epsilon)
    """
    rel = "veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py"
    assert _codes(write_file(root, rel, text.format(kernel="shifted_norm_npu")), root) == [(10, "NPU403")]
    assert _codes(write_file(root, rel, text.format(kernel="plain_norm_npu")), root) == []


def test_method_style_kernel_registered_as_the_forward(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
    from veomni.ops.kernels.norm_npu import module_norm_npu
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="x.py")
    config.override_method("{cls}.forward", replacement=module_norm_npu)
    """
    rel = "veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py"
    spec = write_file(root, rel, text.format(model="gemma2", cls="Gemma2RMSNorm"))
    assert _codes(spec, root) == [(5, "NPU402"), (5, "NPU405")]
    rel = "veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py"
    assert _codes(write_file(root, rel, text.format(model="mistral", cls="MistralRMSNorm")), root) == []


CTOR = """
from torch import nn
from transformers.models.mistral.modeling_mistral import MistralRMSNorm
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


@config.override_method("MistralDecoderLayer.__init__")
def mistral_layer_init_patched(self, config, layer_idx):
    nn.Module.__init__(self)
    self.hidden_size = config.hidden_size
    self.input_layernorm = MistralRMSNorm(config.hidden_size{eps})
"""


def test_norm_built_without_the_configured_eps_in_a_patched_init(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    for eps in (", eps=1e-5", "", ", eps=config.layer_norm_eps"):
        spec = write_file(root, rel, CTOR.format(eps=eps))
        assert _codes(spec, root) == [(12, "NPU405")], eps
    spec = write_file(root, rel, CTOR.format(eps=", eps=config.rms_norm_eps"))
    assert _codes(spec, root) == []


TORCH_FN = """
import torch.nn.functional as F
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


@config.override_method("Gemma2RMSNorm.forward")
def gemma2_norm_forward_patched(self, hidden):
    out = F.rms_norm(hidden.float(), hidden.shape[-1:], {weight}, {eps})
    return out.type_as(hidden)
"""


def test_torch_functional_rms_norm_is_a_standard_kernel(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    rel = "veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py"
    cases = {
        ("self.weight.float()", "self.eps"): [(9, "NPU402")],
        ("1.0 + self.weight.float()", "1e-6"): [(9, "NPU405")],
        ("1.0 + self.weight.float()", "self.variance_epsilon"): [(9, "NPU405")],
        ("1.0 + self.weight.float()", "self.eps"): [],
    }
    for (weight, eps), expected in cases.items():
        spec = write_file(root, rel, TORCH_FN.format(weight=weight, eps=eps))
        assert _codes(spec, root) == expected, (weight, eps)


EXTERNAL = """
from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="x.py")
config.patches.append(
    create_patch_from_external(
        target="{cls}",
        replacement_module="{module}",
        replacement_name="{name}",
    )
)
"""


def test_norm_class_replaced_by_another_models_norm(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    write_file(
        root,
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        class ToyShiftedRMSNorm(nn.Module):
            def __init__(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.zeros(dim))

            def forward(self, x):
                return x * (1 + self.weight)
        """,
    )
    rel = "veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py"
    for module, name in (
        ("transformers.models.gemma2.modeling_gemma2", "Gemma2RMSNorm"),
        ("veomni.models.transformers.toy.modeling_toy", "ToyShiftedRMSNorm"),
    ):
        text = EXTERNAL.format(model="mistral", cls="MistralRMSNorm", module=module, name=name)
        assert _codes(write_file(root, rel, text), root) == [(8, "NPU403")], name
    text = EXTERNAL.format(
        model="mistral",
        cls="MistralRMSNorm",
        module="transformers.models.qwen2.modeling_qwen2",
        name="Qwen2RMSNorm",
    )
    assert _codes(write_file(root, rel, text), root) == []
    rel = "veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py"
    text = EXTERNAL.format(
        model="gemma2",
        cls="Gemma2RMSNorm",
        module="transformers.models.qwen2.modeling_qwen2",
        name="Qwen2RMSNorm",
    )
    assert _codes(write_file(root, rel, text), root) == [(8, "NPU402")]


DEVICE_PATCH = """
from ....ops.config.registry import BackendSpec, apply_per_model_patches


def _make_fused_norm_forward():
    from ....ops.kernels.norm_npu import plain_norm_npu

    def _fused_forward(self, hidden):
        return plain_norm_npu(hidden, {weight}, {eps})

    return _fused_forward


_NORM_BACKEND = BackendSpec(entry="{factory}", entry_is_factory=True, replace_forward=True)


def apply_device_patch(gen_module):
    apply_per_model_patches(
        hf_module=gen_module,
        model_name="Toy",
        targets={{"rms_norm": "{cls}"}},
        extra_backends={{
            "rms_norm": {{
                "triton": _NORM_BACKEND,
                "npu": BackendSpec(entry="{entry}", requires=("torch_npu",), replace_forward=True),
            }},
        }},
    )
"""


def _device_patch(root: Path, model: str, cls: str, weight: str, eps: str, entry: str) -> Path:
    rel = f"veomni/models/transformers/{model}/device_patch.py"
    factory = f"veomni.models.transformers.{model}.device_patch:_make_fused_norm_forward"
    text = DEVICE_PATCH.format(cls=cls, weight=weight, eps=eps, entry=entry, factory=factory)
    return write_file(root, rel, text)


def test_forward_built_by_a_device_patch_factory_for_its_target_norm(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    ok_entry = "veomni.ops.kernels.norm_npu:module_norm_npu"  # reads variance_epsilon: Mistral's
    good = _device_patch(root, "mistral", "MistralRMSNorm", "self.weight", "self.variance_epsilon", ok_entry)
    assert _codes(good, root) == []
    offset = _device_patch(
        root, "mistral", "MistralRMSNorm", "1 + self.weight", "self.variance_epsilon", ok_entry
    )
    assert _codes(offset, root) == [(8, "NPU404")]
    eps = _device_patch(root, "mistral", "MistralRMSNorm", "self.weight", "self.eps", ok_entry)
    assert _codes(eps, root) == [(8, "NPU405")]


def test_forward_replacing_backend_entry_checked_against_the_target_norm(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    entry = "veomni.ops.kernels.norm_npu:module_norm_npu"  # reads variance_epsilon, raw weight
    patch = _device_patch(root, "gemma2", "Gemma2RMSNorm", "1 + self.weight", "self.eps", entry)
    assert _codes(patch, root) == [(24, "NPU402"), (24, "NPU405")]


LIGER = """
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="x.py")


@config.override_method("{cls}.forward")
def patched_norm_forward(self, hidden):
    return LigerRMSNormFunction.apply(hidden, self.weight, self.{eps}, {offset}, "{mode}", False, None)
"""


def test_liger_functional_norm_offset_and_casting_mode(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    gemma = {"model": "gemma2", "cls": "Gemma2RMSNorm", "eps": "eps"}
    mistral = {"model": "mistral", "cls": "MistralRMSNorm", "eps": "variance_epsilon"}
    cases = [
        (gemma, "1.0", "gemma", []),
        (gemma, "0.0", "gemma", [(9, "NPU402")]),
        (gemma, "1.0", "llama", [(9, "NPU406")]),
        (mistral, "0.0", "llama", []),
        (mistral, "1.0", "llama", [(9, "NPU403")]),
    ]
    for args, offset, mode, expected in cases:
        rel = f"veomni/models/transformers/{args['model']}/{args['model']}_gpu_patch_gen_config.py"
        spec = write_file(root, rel, LIGER.format(offset=offset, mode=mode, **args))
        assert _codes(spec, root) == expected, (args["cls"], offset, mode)


def test_one_plus_weight_held_in_a_local_given_to_an_offset_kernel(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


    @config.override_method("Gemma2RMSNorm.forward")
    def gemma2_norm_forward_npu(self, x):
        from veomni.ops.kernels.norm_npu import shifted_norm_npu

        scale = {scale}
        return shifted_norm_npu(x, scale, self.eps)
    """
    rel = "veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py"
    assert _codes(write_file(root, rel, text.format(scale="1.0 + self.weight.float()")), root) == [
        (11, "NPU401")
    ]
    assert _codes(write_file(root, rel, text.format(scale="self.weight.float()")), root) == []
