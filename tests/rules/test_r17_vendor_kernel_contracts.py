"""Round 17, vendor kernels and RMSNorm kernels: contracts that hold wherever a wrapper hands data to an Ascend
kernel. The weight offset of an RMSNorm kernel in any spelling (NPU409: ``w.add(1)``, ``torch.add(w, 1)``), twin
kernel calls reading one group list carried from forward to backward through ``ctx`` (NPU315), kernels imported
by a patch spec's ``add_import`` (NPU315), the halves handed to a fused SwiGLU (NPU309), the rank of a rotary
table against the tensor it rotates (NPU309) and Ascend's private tensor formats (NPU322). Every variant is
written in another file, region and naming than the dev cases; correct variants stay quiet."""

from __future__ import annotations

from pathlib import Path

from tests.rules.snippets import lint_in_tree, ops_tree


def _lines(tmp_path: Path, files: dict[str, str], rel: str, code: str) -> list[int]:
    return sorted(d.line for d in lint_in_tree(ops_tree(tmp_path, files), rel, [code]))


# -- NPU409: the offset written as a method call -------------------------------------------------------------

_REGISTER_OFFSET = """
from ....registry import register_op
from .npu import {name}

register_op("rms_norm", "qwen3_5", "npu", {name}, None)
"""


def _offset_kernel(body: str, name: str = "centered_norm_npu") -> dict[str, str]:
    return {
        "veomni/ops/kernels/norms/rms_norm/__init__.py": _REGISTER_OFFSET.format(name=name),
        "veomni/ops/kernels/norms/rms_norm/npu.py": f"import torch\nimport torch_npu\n\n\n{body}",
    }


def test_offset_added_by_a_method_call_is_an_offset_kernel(tmp_path: Path) -> None:
    for i, expr in enumerate(
        (
            "gamma.float().add(1.0).to(gamma.dtype)",
            "gamma.add(1)",
            "torch.add(gamma, 1.0)",
            "torch.add(1, gamma)",
            "gamma.clone().float().add_(1).type_as(x)",
            "gamma.add(other=1.0)",
        )
    ):
        body = f"def centered_norm_npu(x, gamma, eps):\n    g = {expr}\n    return torch_npu.npu_rms_norm(x, g, eps)[0]\n"
        assert (
            _lines(
                tmp_path / str(i), _offset_kernel(body), "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409"
            )
            == []
        ), expr


def test_weight_added_to_something_else_is_still_a_standard_kernel(tmp_path: Path) -> None:
    for i, expr in enumerate(
        ("gamma.add(0.5)", "gamma.add(1, alpha=2)", "torch.add(gamma, eps)", "gamma.add(x)")
    ):
        body = f"def centered_norm_npu(x, gamma, eps):\n    g = {expr}\n    return torch_npu.npu_rms_norm(x, g, eps)[0]\n"
        assert _lines(
            tmp_path / str(i), _offset_kernel(body), "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409"
        ) == [7], expr


def test_method_style_offset_kernel_through_add(tmp_path: Path) -> None:
    body = (
        "def shifted_forward_npu(self, x):\n"
        "    w = self.weight.float().add(1.0).to(self.weight.dtype)\n"
        "    return torch_npu.npu_rms_norm(x, w, epsilon=self.eps)[0]\n"
    )
    files = _offset_kernel(body, "shifted_forward_npu")
    assert _lines(tmp_path, files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == []
    plain = body.replace(".add(1.0)", "")
    files = _offset_kernel(plain, "shifted_forward_npu")
    assert _lines(tmp_path / "b", files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == [7]


# -- NPU315: twin calls reading data the forward hands the backward through ctx --------------------------------

_LORA_GMM = """
import torch
import torch_npu


class LoraExpertMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens, lora_b, counts):
        ctx.save_for_backward(tokens, lora_b)
        ctx.counts = counts
        return torch_npu.npu_grouped_matmul([tokens], [lora_b], group_list=counts, group_list_type={fwd})[0]

    @staticmethod
    def backward(ctx, grad):
        tokens, lora_b = ctx.saved_tensors
        counts = ctx.{attr}
        d_tokens = torch_npu.npu_grouped_matmul(
            [grad], [lora_b.transpose(1, 2)], group_list=counts, group_list_type=1
        )[0]
        return d_tokens, None, None
"""

_SAVED_GMM = """
import torch
import torch_npu


class ExpertUp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w_up, offsets):
        ctx.save_for_backward(h, w_up, offsets)
        return torch_npu.npu_grouped_matmul([h], [w_up], group_list=offsets{fwd})[0]

    @staticmethod
    def backward(ctx, dy):
        h, w_up, offsets = ctx.saved_tensors
        dh = torch_npu.npu_grouped_matmul([dy], [w_up.mT], group_list=offsets, group_list_type=0)[0]
        return dh, None, None
"""


def test_group_list_stashed_in_ctx_is_the_same_data_in_the_backward(tmp_path: Path) -> None:
    rel = "veomni/lora/ops/expert_lora.py"
    bad = _LORA_GMM.format(fwd=0, attr="counts")
    # a tie: the call that departs from the kernel's default (the backward's) is the one reported
    assert _lines(tmp_path / "a", {rel: bad}, rel, "NPU315") == [16]
    good = _LORA_GMM.format(fwd=1, attr="counts")
    assert _lines(tmp_path / "b", {rel: good}, rel, "NPU315") == []
    # the backward reads another stash: not the forward's data, the two layouts may differ
    other = _LORA_GMM.format(fwd=0, attr="cumulative").replace(
        "ctx.counts = counts", "ctx.counts = counts\n        ctx.cumulative = counts.cumsum(0)"
    )
    assert _lines(tmp_path / "c", {rel: other}, rel, "NPU315") == []


def test_group_list_saved_for_backward_is_the_same_data(tmp_path: Path) -> None:
    rel = "veomni/distributed/moe/expert_up.py"
    bad = _SAVED_GMM.format(fwd=", group_list_type=1")
    assert _lines(tmp_path / "a", {rel: bad}, rel, "NPU315") == [9]
    good = _SAVED_GMM.format(fwd="")
    assert _lines(tmp_path / "b", {rel: good}, rel, "NPU315") == []


# -- NPU315: kernels a patch spec imports into the generated module -------------------------------------------

_SPEC_ROPE = """
import torch

from veomni.models.transformers.glm4v.glm4v_gpu_patch_gen_config import config

{imports}


@config.replace_function("apply_rotary_pos_emb_vision", description="fused rope")
def apply_rotary_pos_emb_vision(q, k, cos, sin):
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    q_embed = {rot}(q.float(), cos, sin).to(q.dtype)
    k_embed = {rot}(k.float(), cos, sin, rotary_mode="{mode}").to(k.dtype)
    return q_embed, k_embed
"""


def test_rotary_mode_twins_in_a_spec_importing_the_kernel_with_add_import(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/glm4v/glm4v_npu_patch_gen_config.py"
    for i, (imports, rot) in enumerate(
        (
            ('config.add_import("torch_npu", names=["npu_rotary_mul"])', "npu_rotary_mul"),
            (
                'config.add_post_import_block("from torch_npu import npu_rotary_mul as fused_rope")',
                "fused_rope",
            ),
        )
    ):
        bad = _SPEC_ROPE.format(imports=imports, rot=rot, mode="interleave")
        assert _lines(tmp_path / f"a{i}", {rel: bad}, rel, "NPU315") == [12], imports
        good = _SPEC_ROPE.format(imports=imports, rot=rot, mode="half")
        assert _lines(tmp_path / f"b{i}", {rel: good}, rel, "NPU315") == [], imports


def test_same_name_imported_from_another_module_is_not_the_kernel(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/glm4v/glm4v_npu_patch_gen_config.py"
    imports = 'config.add_import("veomni.ops.rope_eager", names=["npu_rotary_mul"])'
    bad = _SPEC_ROPE.format(imports=imports, rot="npu_rotary_mul", mode="interleave")
    assert _lines(tmp_path, {rel: bad}, rel, "NPU315") == []


# -- NPU309: the halves handed to a fused SwiGLU ---------------------------------------------------------------


def test_swiglu_fed_the_gate_second_anywhere(tmp_path: Path) -> None:
    cases = {
        "veomni/distributed/moe/expert_mlp.py": (
            """
            import torch
            import torch_npu


            def expert_forward(up, gate, w_down):
                gate_up = torch.cat([up, gate], dim=-1)
                return torch_npu.npu_swiglu(gate_up, dim=-1) @ w_down
            """,
            [6],
        ),
        "veomni/models/transformers/toy_llm/modeling_toy_llm.py": (
            """
            import torch
            import torch_npu
            from torch import nn


            class ToyMLP(nn.Module):
                def forward(self, x):
                    return self.down_proj(torch_npu.npu_swiglu(torch.cat((self.up_proj(x), self.gate_proj(x)), dim=-1)))
            """,
            [8],
        ),
        "veomni/lora/ops/fused_glu.py": (
            """
            import torch
            from torch_npu import npu_swiglu as fused_glu


            def lora_glu(h, gate_states):
                return fused_glu(torch.concat([h.float(), gate_states.float()], -1))
            """,
            [6],
        ),
    }
    for i, (rel, (text, lines)) in enumerate(cases.items()):
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU309") == lines, rel


def test_swiglu_halves_in_the_right_order_or_not_its_halves_stay_quiet(tmp_path: Path) -> None:
    rel = "veomni/distributed/moe/expert_mlp.py"
    for i, body in enumerate(
        (
            "gate_up = torch.cat([gate, up], dim=-1)\n    return torch_npu.npu_swiglu(gate_up, dim=-1)",
            "gate_up = torch.cat([self_gate(x) * 0 + gate, up], -1)\n    return torch_npu.npu_swiglu(gate_up)",
            "both = torch.cat([up, gate], dim=0)\n    return torch_npu.npu_swiglu(both, dim=-1)",
            "both = torch.cat([up, gate_up], dim=-1)\n    return torch_npu.npu_swiglu(both, dim=-1)",
            "both = torch.cat([up, gate], dim=-1)\n    return local_swiglu(both, dim=-1)",
        )
    ):
        text = f"import torch\nimport torch_npu\n\n\ndef expert_forward(x, up, gate, gate_up, self_gate, local_swiglu):\n    {body}\n"
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU309") == [], body


# -- NPU309: the rank of a rotary table against the tensor it rotates -------------------------------------------


def test_rotary_table_one_rank_short_of_the_rotated_tensor(tmp_path: Path) -> None:
    cases = {
        "veomni/models/transformers/toy_vl/toy_vl_npu_patch_gen_config.py": """
            import torch
            import torch_npu

            from veomni.models.transformers.toy_vl.toy_vl_gpu_patch_gen_config import config


            @config.replace_function("apply_rotary_pos_emb_vision", description="fused rope")
            def apply_rotary_pos_emb_vision(q, k, cos, sin):
                q, k = q[None], k[None]
                cos, sin = cos[:, None].float(), sin[:, None].float()
                return torch_npu.npu_rotary_mul(q, cos, sin).squeeze(0), torch_npu.npu_rotary_mul(k, cos, sin).squeeze(0)
            """,
        "veomni/distributed/sequence_parallel/rope_sp.py": """
            import torch
            import torch_npu


            def rotate_local_shard(hidden, freqs_cos, freqs_sin):
                shard = torch.unsqueeze(hidden, 0)
                c = torch.unsqueeze(freqs_cos, 1)
                s = torch.unsqueeze(freqs_sin, 1)
                return torch_npu.npu_rotary_mul(shard, c, s).squeeze(0)
            """,
        "veomni/ops/kernels/video_rope/npu.py": """
            import torch_npu


            def rope_3d(x, table_c, table_s):
                table_c = table_c.unsqueeze(2)
                table_s = table_s.unsqueeze(2)
                return torch_npu.npu_rotary_mul(x.unsqueeze(0).contiguous(), table_c, table_s).squeeze(0)
            """,
    }
    expected = [[11, 11], [9], [7]]
    for i, ((rel, text), lines) in enumerate(zip(cases.items(), expected)):
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU309") == lines, rel


def test_rotary_table_shaped_to_the_rank_of_the_rotated_tensor_stays_quiet(tmp_path: Path) -> None:
    rel = "veomni/ops/kernels/video_rope/npu.py"
    for i, body in enumerate(
        (
            "x = x.unsqueeze(0)\n    c = c.unsqueeze(0).unsqueeze(2)\n    s = s[None, :, None]",
            "c = c.unsqueeze(1)\n    s = s.unsqueeze(1)",  # text rope: [B, S, D] table for [B, H, S, D]
            "x = x.unsqueeze(0)\n    c = c.view(1, -1, 1, 64)\n    s = s.view(1, -1, 1, 64)",  # rank unknown
            "x = x.unsqueeze(0)\n    c = c[None, None]\n    s = s[None, None]",  # [S, D] for [S, H, D]: 2 axes
            "pass",  # the caller shaped the table
        )
    ):
        text = f"import torch_npu\n\n\ndef rope_3d(x, c, s):\n    {body}\n    return torch_npu.npu_rotary_mul(x, c, s)\n"
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU309") == [], body


# -- NPU322: Ascend's private tensor formats switched on -----------------------------------------------------


def test_private_formats_switched_on_in_any_region(tmp_path: Path) -> None:
    cases = {
        "veomni/trainer/npu_setup.py": (
            "import torch\nimport torch_npu\n\n\ndef setup():\n    torch.npu.config.allow_internal_format = True\n",
            [6],
        ),
        "veomni/ops/kernels/moe/npu_fused.py": (
            "import torch_npu as tnpu\n\ntnpu.npu.config.allow_internal_format = 1\n",
            [3],
        ),
        "veomni/checkpoint/npu_io.py": (
            "from torch.npu import config as npu_cfg\n\n\ndef save(x):\n"
            "    setattr(npu_cfg, 'allow_internal_format', True)\n    return x\n",
            [5],
        ),
        "veomni/models/transformers/toy/toy_npu_patch_gen_config.py": (
            "import torch\n\nif torch.npu.is_available():\n    torch.npu.config.allow_internal_format = True\n",
            [4],
        ),
    }
    for i, (rel, (text, lines)) in enumerate(cases.items()):
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU322") == lines, rel


def test_private_formats_kept_off_or_other_objects_stay_quiet(tmp_path: Path) -> None:
    rel = "veomni/utils/device.py"
    for i, text in enumerate(
        (
            "import torch\n\ntorch.npu.config.allow_internal_format = False\n",
            "import torch\n\ntorch.npu.config.allow_internal_format = 0\n",
            "import torch\n\n\ndef f(flag):\n    torch.npu.config.allow_internal_format = flag\n",
            "class Opts:\n    allow_internal_format = True\n\n\nopts = Opts()\nopts.allow_internal_format = True\n",
            "import torch\n\ntorch.backends.config.allow_internal_format = True\n",
        )
    ):
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU322") == [], text


def test_rotary_table_left_unshaped_where_its_twin_call_shapes_it(tmp_path: Path) -> None:
    rel = "veomni/distributed/sequence_parallel/rope_shard.py"
    text = """
        import torch_npu


        def rotate_pair(query, key, freqs_cos, freqs_sin):
            c, s = freqs_cos[:, None], freqs_sin[:, None]
            query = torch_npu.npu_rotary_mul(query, c, s)
            key = torch_npu.npu_rotary_mul(key, {k_tables})
            return query, key
        """
    assert _lines(tmp_path / "a", {rel: text.format(k_tables="freqs_cos, freqs_sin")}, rel, "NPU309") == [7]
    assert _lines(tmp_path / "b", {rel: text.format(k_tables="c, s")}, rel, "NPU309") == []
    # neither call shapes the table: the caller did
    quiet = text.format(k_tables="freqs_cos, freqs_sin").replace("query, c, s", "query, freqs_cos, freqs_sin")
    assert _lines(tmp_path / "c", {rel: quiet}, rel, "NPU309") == []


# -- NPU317: a module-private helper that never reads what its callers hand it ---------------------------------


def test_private_helper_drops_a_value_its_callers_pass(tmp_path: Path) -> None:
    cases = {
        "veomni/ops/kernels/moe/npu_experts.py": (
            """
            import torch_npu


            def _glu(x, limit):
                return torch_npu.npu_swiglu(x, dim=-1)


            def experts(x, limit):
                return _glu(x, limit)
            """,
            [4],
        ),
        "veomni/distributed/sequence_parallel/gather.py": (
            """
            import torch.distributed as dist


            def _gather(x, group):
                out = [x] * dist.get_world_size()
                dist.all_gather(out, x)
                return out


            def gather_seq(x, sp_group):
                return _gather(x, group=sp_group)
            """,
            [4],
        ),
        "veomni/data/collate_pad.py": (
            """
            import torch


            def _pad(rows, pad_id, width):
                return torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])


            def collate(rows, pad_token_id):
                return _pad(rows, pad_token_id, max(len(r) for r in rows))
            """,
            [4],
        ),
    }
    for i, (rel, (text, lines)) in enumerate(cases.items()):
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU317") == lines, rel


def test_private_helper_reading_or_not_given_the_value_stays_quiet(tmp_path: Path) -> None:
    rel = "veomni/ops/kernels/moe/npu_experts.py"
    for i, (helper, call) in enumerate(
        (
            ("def _glu(x, limit):\n    return x.clamp(max=limit)", "_glu(x, limit)"),
            ("def _glu(x, limit=None):\n    return x", "_glu(x, None)"),
            ("def _glu(x, limit=None):\n    return x", "_glu(x)"),
            ("def _glu(x, limit):\n    del limit\n    return x", "_glu(x, limit)"),
            ("def glu(x, limit):\n    return x", "glu(x, limit)"),  # public: an interface other files call
            ("@torch.compile\ndef _glu(x, limit):\n    return x", "_glu(x, limit)"),
            (
                "def _glu(x, limit):\n    return torch.tanh(x)",
                "_glu(x, 0.5)",
            ),  # a literal: no knob passed down
            ("def _glu(x, limit):\n    return x + 1", "_glu(x, limit)"),  # no tensor work: not an adapter
        )
    ):
        text = f"import torch\n\n\n{helper}\n\n\ndef experts(x, limit):\n    return {call}\n"
        assert _lines(tmp_path / str(i), {rel: text}, rel, "NPU317") == [], helper


def test_private_helper_parameter_documented_as_unused_stays_quiet(tmp_path: Path) -> None:
    rel = "veomni/ops/kernels/segment/reduce.py"
    text = '''
        import torch


        def _segment_reduce(values, index, name):
            """Reduce segment-wise.

            Args:
                values: the values.
                name (`str`):
                    Name for the operation. {note}
            """
            return torch.zeros_like(values).index_add_(0, index, values)


        def reduce_sum(values, index, name="segmented_reduce_sum"):
            return _segment_reduce(values, index, name)
        '''
    assert _lines(tmp_path / "a", {rel: text.format(note="Currently not used")}, rel, "NPU317") == []
    assert _lines(tmp_path / "b", {rel: text.format(note="Shown in profiles.")}, rel, "NPU317") == [4]
