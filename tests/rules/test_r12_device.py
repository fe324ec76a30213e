"""Round 12, device family: methods of plain classes in the framework's device-side code are on the device path
(NPU103), a device-less allocation returned by a method on ``self`` reaches its forward-path caller (NPU103), an
allocation copying a tensor's dtype takes that tensor's device in its fix (NPU103), and
``torch.cuda.is_available()`` guarding an NPU path is a CUDA gate (NPU105, not NPU102)."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(path: str, text: str, codes: list[str]) -> list:
    source = SourceFile.from_text(path, textwrap.dedent(text).lstrip())
    return lint_source(source, codes, Settings())


_BALANCER = """
import torch
import torch.distributed as dist


class Balancer:
    def __init__(self, group):
        self.group = group

    def redistribute(self, data_lengths: torch.Tensor, num_replicas: int, rank: int):
        table = self.sorting_algo(data_lengths, num_replicas)
        counts = torch.empty(num_replicas, 2, dtype=table[rank].dtype)
        counts[:, 0].index_add_(0, table[rank][:, 0], table[rank][:, 2])
        return counts.tolist()
"""


def test_plain_class_method_in_framework_code_is_on_the_device_path() -> None:
    found = _lint("veomni/utils/balance/balancer.py", _BALANCER, ["NPU103"])
    assert [d.line for d in found] == [11]
    # the dtype is copied from `table[rank]`, which the allocation also meets: its device, safely
    fix = found[0].fix
    assert fix is not None and fix.applicability.name == "SAFE"
    assert "device=table[rank].device" in fix.title


@pytest.mark.parametrize(
    "path",
    [
        "veomni/data/balance/balancer.py",  # the data pipeline builds host tensors on purpose
        "veomni/models/transformers/toy/patchifier.py",  # a plain class in model code is a host-side helper
    ],
)
def test_plain_class_methods_outside_framework_device_code_are_not_roots(path: str) -> None:
    assert _lint(path, _BALANCER, ["NPU103"]) == []


_SELF_HELPER = """
import torch
from torch import nn


class Toy(nn.Module):
    def _positions(self, n):
        return torch.arange(n)

    def forward(self, hidden_states):
        pos = self._positions(hidden_states.shape[1]){move}
        return hidden_states + pos
"""


def test_host_allocation_returned_by_a_method_reaches_forward() -> None:
    found = _lint("veomni/models/transformers/toy/modeling_toy.py", _SELF_HELPER.format(move=""), ["NPU103"])
    assert [d.line for d in found] == [7]
    assert "`self._positions`" in found[0].message


def test_method_result_moved_at_the_call_site_is_quiet() -> None:
    text = _SELF_HELPER.format(move=".to(hidden_states.device)")
    assert _lint("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == []


def test_method_called_only_from_init_is_not_reported() -> None:
    text = """
    import torch
    from torch import nn


    class Toy(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.register_buffer("pos", self._positions(n), persistent=False)

        def _positions(self, n):
            return torch.arange(n)

        def forward(self, hidden_states):
            return hidden_states + self.pos
    """
    assert _lint("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == []


_GATE = """
import torch
from veomni.ops.dispatch import OpSlot

veomni_rope = OpSlot("rotary_pos_emb", "full")


def apply_rope(q, k, cos, sin):
    if {condition}:
        return veomni_rope(q, k, cos, sin)
    return q * cos, k * cos
"""


@pytest.mark.parametrize(
    ("condition", "npu105", "npu102"),
    [
        ("veomni_rope.use_non_eager_impl and torch.cuda.is_available()", 1, 0),
        ("torch.cuda.is_available() and veomni_rope.use_non_eager_impl", 1, 0),
        ("veomni_rope.use_non_eager_impl", 0, 0),
    ],
)
def test_cuda_availability_in_a_dispatch_guard_is_npu105(condition: str, npu105: int, npu102: int) -> None:
    found = _lint(
        "veomni/models/transformers/toy/modeling_toy.py",
        _GATE.format(condition=condition),
        ["NPU102", "NPU105"],
    )
    assert sum(d.code == "NPU105" for d in found) == npu105
    assert sum(d.code == "NPU102" for d in found) == npu102
    if npu105:
        fix = next(d for d in found if d.code == "NPU105").fix
        assert fix is not None and "torch.cuda.is_available()" in fix.title


def test_cuda_availability_off_the_npu_path_stays_npu102() -> None:
    text = """
    import torch


    def pick_device():
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        return torch.device("cpu")
    """
    found = _lint("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU102", "NPU105"])
    assert "NPU105" not in {d.code for d in found}
    assert any(d.code == "NPU102" and "is_available" in d.message for d in found)


def test_method_result_collected_into_host_position_ids_is_quiet() -> None:
    """``get_rope_index`` shape: a helper method's host position ids are appended to a list the caller builds on
    the host and moves to the device once (upstream Qwen-Omni)."""
    text = """
    import torch
    from torch import nn


    class Toy(nn.Module):
        def pos_ids_for_vision(self, start, grid_h, grid_w):
            h_index = torch.arange(grid_h).view(1, -1, 1).flatten()
            w_index = torch.arange(grid_w).view(1, 1, -1).flatten()
            return torch.stack([h_index, w_index]) + start

        def get_rope_index(self, input_ids, grid_thw):
            pos_list = []
            for h, w in grid_thw.tolist():
                pos = self.pos_ids_for_vision(0, h, w)
                pos_list.append(pos)
            return torch.cat(pos_list, dim=1).to(input_ids.device)
    """
    assert _lint("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == []


def test_plain_class_returning_an_empty_host_tensor_is_quiet() -> None:
    """``MoEMonitor._stack_and_reduce`` shape: with nothing recorded a plain class returns an empty CPU tensor on
    purpose; its caller is not known to be device code."""
    text = """
    import torch


    class Monitor:
        def stacked(self, counts: torch.Tensor):
            if not self.seen:
                return torch.zeros(0, self.num_experts, dtype=torch.long)
            return counts.sum(0)
    """
    assert _lint("veomni/utils/monitor.py", text, ["NPU103"]) == []


_ADAPTER = """
import torch
from torch import nn


class Adapter(nn.Module):
    def add_adapter(self, name, r):
        ref = self.base_layer.weight
        {body}
"""


@pytest.mark.parametrize(
    ("body", "found", "fixed"),
    [
        (
            'kw = {"dtype": ref.dtype}\n        self.a[name] = nn.Linear(self.in_features, r, bias=False, **kw)'
            "\n        self.b[name] = nn.Linear(r, self.out_features, bias=False, **kw)",  # one finding, at the dict
            1,
            'kw = {"dtype": ref.dtype, "device": ref.device}',
        ),
        (
            "self.a[name] = nn.Linear(self.in_features, r, bias=False, dtype=ref.dtype)",
            1,
            "dtype=ref.dtype, device=ref.device)",
        ),
        (
            'kw = {"dtype": ref.dtype, "device": ref.device}\n        self.a[name] = nn.Linear(4, r, **kw)',
            0,
            "",
        ),
        ("self.a[name] = nn.Linear(4, r, dtype=ref.dtype, device=ref.device)", 0, ""),
        ("self.a[name] = nn.Linear(4, r, dtype=ref.dtype, **self.factory_kwargs)", 0, ""),  # unread mapping
        ("self.a[name] = nn.Linear(4, r, dtype=torch.bfloat16)", 0, ""),  # no live tensor to match
    ],
)
def test_module_built_with_a_tensors_dtype_but_not_its_device(body: str, found: int, fixed: str) -> None:
    text = _ADAPTER.format(body=body)
    diags = _lint("veomni/lora/layers.py", text, ["NPU103"])
    assert len(diags) == found
    if found:
        fix = diags[0].fix
        assert fix is not None and fix.applicability.name == "SAFE"
        edit = fix.edits[0]
        src = textwrap.dedent(text).lstrip()
        assert fixed in src[: edit.start] + edit.content + src[edit.end :]


@pytest.mark.parametrize(
    "line",
    [
        "self.proj = nn.Linear(4, 8, dtype=config.dtype)",  # a settings object's dtype: it has no device
        "self.norm = nn.LayerNorm(4, dtype=self.dtype)",
        'kw = {"dtype": args.dtype}\n        self.emb = nn.Embedding(8, 4, **kw)',
    ],
)
def test_module_built_with_a_settings_dtype_is_not_a_tensor_reference(line: str) -> None:
    text = f"""
    import torch
    from torch import nn


    class Head(nn.Module):
        def __init__(self, config, args):
            super().__init__()
            {line}
    """
    assert _lint("veomni/lora/layers.py", text, ["NPU103"]) == []


def test_allocation_copying_a_settings_dtype_takes_the_device_of_the_data_it_meets() -> None:
    text = """
    import torch
    from torch import nn


    class Block(nn.Module):
        def forward(self, hidden_states, config):
            pad = torch.zeros(4, dtype=config.dtype)
            return hidden_states + pad
    """
    found = _lint("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"])
    assert found and all("config.device" not in (d.fix.title if d.fix else "") + d.message for d in found)
