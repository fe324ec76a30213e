"""Round 13 dispatch/vendor checks that compare code with a reference: transformers' attention-name tests
(NPU229), the file's own calls of an implementation reader (NPU225), the file's lazy loads (NPU308), the tree's
other calls of a torch_npu kernel (NPU311), the function's own preparation and annotation (NPU312, NPU313), the
tree's registry rows (NPU221, NPU231) and loop-bound closures (NPU230). Each defect is paired with the
near-identical correct code."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from tests.rules.snippets import write_file


def _lines(source: str, code: str, path: str) -> list[int]:
    found = lint_source(SourceFile.from_text(path, textwrap.dedent(source).lstrip()), [code], Settings())
    return [d.line for d in found if d.code == code]


def _tree_lines(root: Path, path: Path, code: str) -> list[int]:
    project = load_project([str(root)])
    found = lint_source(
        SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project
    )
    return [d.line for d in found if d.code == code]


# -- NPU229 ------------------------------------------------------------------------------------------------------

_GATE = """
def forward(self, hidden_states):
    if {test}:
        return self.veomni_attn(hidden_states)
    return eager_attention_forward(self, hidden_states)
"""
_MODEL = "veomni/models/transformers/toy/modeling_toy.py"


def test_npu229_transformers_kernel_name_gate() -> None:
    for bad in (
        'self.config._attn_implementation == "flash_attention_2"',
        '"flash_attention_2" == self.config._attn_implementation',
        'self.config._attn_implementation in ("flash_attention_2", "flash_attention_3")',
        'self.config._attn_implementation != "flex_attention"',
    ):
        assert _lines(_GATE.format(test=bad), "NPU229", _MODEL) == [2], bad
    for good in (
        'self.config._attn_implementation != "eager"',
        'self.config._attn_implementation not in ("eager",)',
        'self.config._attn_implementation == "sdpa"',  # transformers' own forwards test sdpa
        'self.config._attn_implementation in ("flash_attention_2", "veomni_flash_attention_2_with_sp")',
        "self.config._attn_implementation in VARLEN_ATTENTION_TYPES",
        '"flash" in self.config._attn_implementation',
    ):
        assert _lines(_GATE.format(test=good), "NPU229", _MODEL) == [], good


def test_npu229_name_mapping_and_framework_code_are_quiet() -> None:
    mapping = """
    class ToyArguments:
        def __post_init__(self):
            if self.attn_implementation == "flash_attention_2":
                self.attn_implementation = "veomni_flash_attention_2_with_sp"
    """
    # mapping transformers' name onto VeOmni's is the point, in model code too
    assert _lines(mapping, "NPU229", _MODEL) == []
    # framework code (the arguments) is not model code
    gate = _GATE.format(test='self.config._attn_implementation == "flash_attention_2"')
    assert _lines(gate, "NPU229", "veomni/arguments/toy_args.py") == []
    assert _lines(gate, "NPU229", _MODEL) == [2]  # the model's gate is still found
    # a branch assigning something else is still a gate
    other = mapping.replace('"veomni_flash_attention_2_with_sp"', '"eager"')
    assert _lines(other, "NPU229", _MODEL) == [3]


# -- NPU225: a missing-field fallback keyed by a parameter --------------------------------------------------------

_READER = """
def resolve_op_impl(field, *, npu_as=None):
    cfg = get_ops_config()
    return "eager" if cfg is None else getattr(cfg, field, {default})


def attention_op():
    return VeomniOp("attention", "standard", resolve_op_impl("attn_implementation"))
"""


def test_npu225_parameter_field_falls_back_to_gpu_kernel() -> None:
    path = "veomni/models_kernel/utils/op_utils.py"
    assert _lines(_READER.format(default='"liger_kernel"'), "NPU225", path) == [3]
    assert _lines(_READER.format(default='"eager"'), "NPU225", path) == []
    # a getattr keyed by a parameter nobody passes an implementation field for is not a config read
    other = _READER.format(default='"liger_kernel"').replace('"attn_implementation"', '"name"')
    assert _lines(other, "NPU225", path) == []


# -- NPU308: a module-level dynamic import of a package the file loads lazily ---------------------------------------

_LAZY = """
import importlib

fused_layer_norm_cuda = {top}


def norm(x):
    global fused_layer_norm_cuda
    if fused_layer_norm_cuda is None:
        fused_layer_norm_cuda = importlib.import_module("fused_layer_norm_cuda")
    return fused_layer_norm_cuda.rms_forward_affine(x)
"""


def test_npu308_dynamic_import_hoisted() -> None:
    path = "veomni/distributed/sequence_parallel/toy_ulysses.py"
    assert _lines(_LAZY.format(top='importlib.import_module("fused_layer_norm_cuda")'), "NPU308", path) == [3]
    assert _lines(_LAZY.format(top="None"), "NPU308", path) == []
    # loaded at the top and nowhere lazily: nothing in the file says it is optional
    only_top = 'import importlib\n\nnumpy_mod = importlib.import_module("numpy")\n'
    assert _lines(only_top, "NPU308", path) == []


# -- NPU311 ------------------------------------------------------------------------------------------------------

_KERNELS = "veomni/ops/kernels/toy_moe/npu.py"


def test_npu311_data_keyword_dropped_but_literal_option_is_not() -> None:
    source = """
    import torch_npu


    def a(output, row_ids_map, weights, x):
        y = torch_npu.npu_swiglu(x, dim=-1)
        return torch_npu.npu_moe_token_unpermute(output, row_ids_map, probs=weights), y


    def b(output, row_ids_map, weights, x):
        y = torch_npu.npu_swiglu(x)
        return torch_npu.npu_moe_token_unpermute(output, row_ids_map{probs}), y
    """
    assert _lines(source.format(probs=""), "NPU311", _KERNELS) == [11]  # not the swiglu without `dim=-1`
    assert _lines(source.format(probs=", probs=weights"), "NPU311", _KERNELS) == []


def test_npu311_argument_order_and_int32_cast() -> None:
    order = """
    import torch_npu


    def backward(dy, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
        gk, wk = torch_npu.npu_rms_norm_backward(dy, k, norm_k_weight, invvar_k)
        gq, wq = torch_npu.npu_rms_norm_backward({args})
        return gq, gk, wq, wk
    """
    assert _lines(order.format(args="dy, invvar_q, q, norm_q_weight"), "NPU311", _KERNELS) == [6]
    assert _lines(order.format(args="dy, q, norm_q_weight, invvar_q"), "NPU311", _KERNELS) == []
    cast = """
    import torch
    import torch_npu


    def a(x, experts):
        return torch_npu.npu_moe_token_permute(x, experts.to(torch.int32))


    def b(x, experts):
        {line}
        return torch_npu.npu_moe_token_permute(x, experts)
    """
    assert _lines(cast.format(line="pass"), "NPU311", _KERNELS) == [11]
    assert _lines(cast.format(line="experts = experts.to(torch.int32)"), "NPU311", _KERNELS) == []


def test_npu311_compares_with_calls_in_other_files(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "veomni/ops/kernels/moe/npu_group_gemm.py",
        """
        import torch_npu


        def combine(output, row_ids_map, routing_weights):
            return torch_npu.npu_moe_token_unpermute(output, row_ids_map, probs=routing_weights)
        """,
    )
    lora = write_file(
        tmp_path,
        "veomni/lora/ops/npu_moe.py",
        """
        import torch_npu


        def combine(output, row_ids_map, routing_weights):
            return torch_npu.npu_moe_token_unpermute(output, row_ids_map)
        """,
    )
    assert _tree_lines(tmp_path, lora, "NPU311") == [5]
    lora.write_text(lora.read_text().replace("row_ids_map)", "row_ids_map, probs=routing_weights)"))
    assert _tree_lines(tmp_path, lora, "NPU311") == []


def test_npu311_mode_choosing_keyword_is_optional() -> None:
    # a masked causal call next to a mask-free bidirectional one: the mask chooses the mode, it is no slip
    source = """
    import torch_npu


    def causal(q, k, v, mask, head_num, scale, weights, output, row_ids_map):
        torch_npu.npu_moe_token_unpermute(output, row_ids_map, probs=weights)
        return torch_npu.npu_fusion_attention(q, k, v, head_num, input_layout="BSND", atten_mask=mask, scale=scale)


    def vision(q, k, v, head_num, scale, output, row_ids_map):
        torch_npu.npu_moe_token_unpermute(output, row_ids_map)
        return torch_npu.npu_fusion_attention(q, k, v, head_num, input_layout="BSND", scale=scale)
    """
    assert _lines(source, "NPU311", _KERNELS) == [10]  # the dropped probs is still found


# -- NPU312 / NPU313 -----------------------------------------------------------------------------------------------

_ROPE = """
import torch_npu
from torch import Tensor


def forward(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> tuple[tuple[Tensor, Tensor], SavedState]:
    cos_u = cos.unsqueeze(unsqueeze_dim)
    sin_u = sin.unsqueeze(unsqueeze_dim)
    q_embed = torch_npu.npu_rotary_mul(q, {cos}, {sin})
    k_embed = torch_npu.npu_rotary_mul(k, {cos}, {sin})
    return {result}
"""
_SAVED = "(q_embed, k_embed), SavedState((cos, sin))"


def test_npu312_prepared_input_never_read() -> None:
    assert _lines(_ROPE.format(cos="cos", sin="sin", result=_SAVED), "NPU312", _KERNELS) == [8]
    assert _lines(_ROPE.format(cos="cos_u", sin="sin_u", result=_SAVED), "NPU312", _KERNELS) == []
    # the unread `sin_u` is reported even when `cos_u` is used
    assert _lines(_ROPE.format(cos="cos_u", sin="sin", result=_SAVED), "NPU312", _KERNELS) == [8]
    # a preparation that is read (by another call) is not this rule's business
    read = _ROPE.format(cos="cos", sin="sin", result=_SAVED).replace(
        "return ", "log(cos_u, sin_u)\n    return "
    )
    assert _lines(read, "NPU312", _KERNELS) == []


def test_npu312_closure_reported_once() -> None:
    source = """
    import torch_npu


    def make_rope(unsqueeze_dim=1):
        def rope(q, cos, sin):
            cos_u = cos.unsqueeze(unsqueeze_dim)
            sin_u = sin.unsqueeze(unsqueeze_dim)
            return torch_npu.npu_rotary_mul(q, {cos}, sin_u)

        return rope
    """
    assert _lines(source.format(cos="cos"), "NPU312", _KERNELS) == [8]
    assert _lines(source.format(cos="cos_u"), "NPU312", _KERNELS) == []


def test_npu313_return_unlike_annotation() -> None:
    good = _ROPE.format(cos="cos_u", sin="sin_u", result=_SAVED)
    assert _lines(good, "NPU313", _KERNELS) == []
    assert _lines(_ROPE.format(cos="cos_u", sin="sin_u", result="q_embed, k_embed"), "NPU313", _KERNELS) == [
        10
    ]
    three = _ROPE.format(cos="cos_u", sin="sin_u", result="q_embed, k_embed, None")
    assert _lines(three, "NPU313", _KERNELS) == [10]
    open_ended = good.replace("tuple[tuple[Tensor, Tensor], SavedState]", "tuple[Tensor, ...]")
    assert _lines(open_ended.replace(_SAVED, "q_embed, k_embed, cos"), "NPU313", _KERNELS) == []


def test_npu314_documented_per_head_output_is_quiet() -> None:
    path = "veomni/ops/kernels/qk_norm_npu.py"
    source = """
    import torch_npu
    from einops import rearrange


    def npu_head_rms_norm(q, weight, head_dim, eps=1e-6){returns}:
        {doc}
        q = rearrange(q, "b s (n d) -> b s n d", d=head_dim)
        return torch_npu.npu_rms_norm(q, weight, epsilon=eps)[0]
    """
    per_head = '"""[b, s, n*d] projections in, per-head [b, s, n, d] normalised queries out."""'
    assert _lines(source.format(returns="", doc=per_head), "NPU314", path) == []
    annotated = source.format(returns=' -> Float[Tensor, "b s n d"]', doc="pass")
    assert _lines(annotated, "NPU314", path) == []
    # undocumented, or documented as the fused layout: still reported
    assert _lines(source.format(returns="", doc="pass"), "NPU314", path) == [8]
    fused = '"""[b, s, n*d] in, [b, s, n*d] out."""'
    assert _lines(source.format(returns="", doc=fused), "NPU314", path) == [8]


def test_row_declaring_calls_are_veomni_knowledge() -> None:
    # NPU230 (rows keeping a callable) and NPU225 (declarations are not selections) ask the semantic model
    from npu_lint.rules.dispatch import npu225_gpu_selection_on_npu_path as npu225
    from npu_lint.rules.dispatch import npu230_late_bound_row_callable as npu230
    from npu_lint.veomni import registry

    assert set(registry.REGISTER_CALLS) <= registry.ROW_DECLARATIONS
    assert {"KernelSpec", "BackendSpec", "OpSpec"} <= registry.ROW_DECLARATIONS
    assert not hasattr(npu230, "_KEEPERS") and not hasattr(npu225, "_DECLARATIONS")


# -- NPU230 ------------------------------------------------------------------------------------------------------


def test_npu230_loop_closure() -> None:
    source = """
    from veomni.ops.registry import register_op

    for impl in ("eager", "sdpa"):
        register_op("attention", "standard", impl, wrapper={wrapper})
    """
    path = "veomni/ops/kernels/attention/__init__.py"
    assert _lines(source.format(wrapper="lambda *a: lookup(impl)(*a)"), "NPU230", path) == [4]
    assert _lines(source.format(wrapper="lambda *a, impl=impl: lookup(impl)(*a)"), "NPU230", path) == []
    assert _lines(source.format(wrapper="lookup(impl)"), "NPU230", path) == []
    table = "TABLE = {{}}\nfor impl in ('eager', 'npu'):\n    TABLE[impl] = {value}\n"
    assert _lines(table.format(value="lambda *a: lookup(impl)(*a)"), "NPU230", path) == [3]
    assert _lines(table.format(value="lambda *a, impl=impl: lookup(impl)(*a)"), "NPU230", path) == []
    # a lambda called at once (a sort key) keeps nothing for later
    assert _lines("for i in range(3):\n    xs.sort(key=lambda x: x[i])\n", "NPU230", path) == []


# -- NPU221: an OpSpec entry and a KernelSpec row of different ops --------------------------------------------------

_ROTARY = """
from ...config.registry import BackendSpec, OpScope, OpSpec, register_op
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

register_op(
    OpSpec(
        name="rotary_pos_emb",
        config_field="rotary_pos_emb_implementation",
        scope=OpScope.PER_MODEL,
        default="eager",
        backends={{"npu": BackendSpec(entry="veomni.ops.kernels.rotary.npu:{entry}", requires=("torch_npu",))}},
    )
)


def _vision_factory():
    from .npu import apply_rotary_pos_emb_vision_npu

    return apply_rotary_pos_emb_vision_npu


KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="rotary_pos_emb_vision",
        variant="full",
        factory=_vision_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)
"""


def test_npu221_backend_entry_binds_another_ops_kernel() -> None:
    path = "veomni/ops/kernels/rotary/__init__.py"
    assert _lines(_ROTARY.format(entry="apply_rotary_pos_emb_vision_npu"), "NPU221", path) == [10]
    assert _lines(_ROTARY.format(entry="apply_rotary_pos_emb_npu"), "NPU221", path) == []


# -- NPU231 ------------------------------------------------------------------------------------------------------


def test_npu231_reads_the_trees_own_rows(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "veomni/ops/kernels/moe_experts/__init__.py",
        """
        from ...registry import register_op

        register_op("moe_experts", "standard", "eager", wrapper=None)
        register_op("moe_experts", "gpt_oss", "eager", wrapper=None)
        """,
    )
    spec = write_file(
        tmp_path,
        "veomni/models/transformers/gpt_oss/modeling_experts.py",
        """
        from veomni.ops import VeomniOp


        class Experts:
            def __init__(self, config):
                self.veomni_moe = VeomniOp("moe_experts", "standard", "eager")
                self.veomni_norm = VeomniOp("rms_norm", "standard", "eager")
        """,
    )
    assert _tree_lines(tmp_path, spec, "NPU231") == [6]
    # the built-in catalog's `rms_norm/deepseek_v4` is not this tree's row: a deepseek_v4 package is left alone
    norm = write_file(
        tmp_path,
        "veomni/models/transformers/deepseek_v4/modeling_norm.py",
        """
        from veomni.ops import VeomniOp


        class Norm:
            def __init__(self, config):
                self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "eager")
        """,
    )
    assert _tree_lines(tmp_path, norm, "NPU231") == []
    # a file that binds the model's variant too uses the generic one on purpose
    spec.write_text(spec.read_text().replace('"rms_norm", "standard"', '"moe_experts", "gpt_oss"'))
    assert _tree_lines(tmp_path, spec, "NPU231") == []


# -- NPU232 ------------------------------------------------------------------------------------------------------

_HANDLE = """
class Handle:
    _intern = {{}}

    def __new__(cls, op, variant, impl="eager", label=None):
        cached = cls._intern.get({key})
        return cached if cached is not None else super().__new__(cls)

    def __init__(self, op, variant, impl="eager", label=None):
        self._entry = resolve_op(op, variant, impl)
        self.label = label
        type(self)._intern[{key}] = self
"""


def test_npu232_intern_key_leaves_out_a_resolved_parameter() -> None:
    path = "veomni/ops/registry.py"
    assert _lines(_HANDLE.format(key="(op, variant)"), "NPU232", path) == [5]
    assert _lines(_HANDLE.format(key="(op, variant, impl)"), "NPU232", path) == []  # `label` is not resolved


# -- NPU309: rotary mode vs the cos/sin layout; NPU314 ---------------------------------------------------------------

_WAN = """
import torch
import torch_npu
from einops import rearrange


def rope_apply_fused(x, freqs, head_dim):
    cos = freqs.real.to(torch.float32).{layout}.contiguous()
    sin = freqs.imag.to(torch.float32).{layout}.contiguous()
    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = torch_npu.npu_rotary_mul(x, cos, sin{mode}){merge}
    return x_out.to(x.dtype)
"""
_INTERLEAVED = "repeat_interleave(2, dim=-1)"
_HALVES = "unsqueeze(0)"


def test_npu309_rotary_mode_against_the_tables_layout() -> None:
    path = "veomni/models/transformers/wan/npu_patch.py"
    fine = {"merge": ".flatten(-2)"}
    assert _lines(_WAN.format(layout=_INTERLEAVED, mode="", **fine), "NPU309", path) == [10]
    assert (
        _lines(_WAN.format(layout=_INTERLEAVED, mode=', rotary_mode="interleave"', **fine), "NPU309", path)
        == []
    )
    assert _lines(_WAN.format(layout=_HALVES, mode="", **fine), "NPU309", path) == []  # no layout to compare


def test_npu309_layout_needs_the_last_axis() -> None:
    path = "veomni/models/transformers/wan/npu_patch.py"
    fine = {"merge": ".flatten(-2)", "mode": ""}
    # per-frame tiling along the token axis is no pair layout
    for tiling in ("repeat_interleave(frames, dim=0)", "repeat_interleave(2, dim=0)"):
        assert (
            _lines(
                _WAN.format(layout=tiling, **fine).replace("head_dim)", "head_dim, frames=1)"), "NPU309", path
            )
            == []
        )
    # halves concatenated on the last axis are the rotate-half layout "half" expects; on the token axis no layout
    cat = _WAN.format(layout=_INTERLEAVED, mode=', rotary_mode="interleave"', merge=".flatten(-2)")
    cat = cat.replace(
        "cos = freqs.real.to(torch.float32).repeat_interleave(2, dim=-1).contiguous()",
        "cos = torch.cat((freqs.real, freqs.real), dim={dim})",
    )
    assert _lines(cat.format(dim="-1"), "NPU309", path) == [10]
    assert _lines(cat.format(dim="0"), "NPU309", path) == []
    assert _lines(_WAN.format(layout=_INTERLEAVED, **fine), "NPU309", path) == [10]  # the true positive kept


def test_npu314_split_input_returned_unmerged() -> None:
    path = "veomni/models/transformers/wan/npu_patch.py"
    mode = ', rotary_mode="interleave"'
    assert _lines(_WAN.format(layout=_INTERLEAVED, mode=mode, merge=""), "NPU314", path) == [11]
    assert _lines(_WAN.format(layout=_INTERLEAVED, mode=mode, merge=".flatten(-2)"), "NPU314", path) == []
