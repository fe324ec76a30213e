"""NPU508-NPU512: contracts checked against the tree being linted, each in a small tree built in tmp_path.

Each test writes its own variants of a defect (renamed, moved into a helper, another file or package, the
condition inverted, keyword vs positional) and the controls that must stay quiet."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project

BASE = {
    "pyproject.toml": "[project]\nname = 'veomni'\n",
    "veomni/__init__.py": "",
    "veomni/utils/__init__.py": "",
    "veomni/ops/__init__.py": "",
    "veomni/utils/device.py": """
        IS_NPU_AVAILABLE = False
        IS_CUDA_AVAILABLE = True


        def get_device_type():
            return "cpu"
    """,
    "veomni/distributed/__init__.py": "from .comm import gather_parts\n",
    "veomni/distributed/comm.py": """
        import torch


        def gather_parts(x, group=None):
            parts = [torch.empty_like(x)]
            return parts, [p.shape for p in parts]


        def gather_flat(x, group=None):
            return x


        def shard_sizes(total, world_size, *, pad_to_multiple=1):
            return [total // world_size] * world_size


        def loss_triple(logits, labels):
            return logits.sum(), logits, None
    """,
    "veomni/models/__init__.py": "",
    "veomni/models/transformers/__init__.py": "",
    "veomni/models/transformers/mini/__init__.py": "",
    "veomni/models/transformers/mini/helpers.py": "def mini_rope(x):\n    return x\n",
    "veomni/models/transformers/mini/generated/__init__.py": "",
    "veomni/models/transformers/mini/generated/patched_modeling_mini_gpu.py": "class MiniModel:\n    pass\n",
    "veomni/models/transformers/mini/generated/patched_modeling_mini_npu.py": "class MiniModel:\n    pass\n",
    "veomni/models/transformers/mini/mini_gpu_patch_gen_config.py": """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.mini.modeling_mini", target_file="patched_modeling_mini_gpu.py")
    """,
    "veomni/patchgen/__init__.py": "",
    "veomni/patchgen/patch_spec.py": """
        from dataclasses import dataclass


        @dataclass
        class PatchConfig:
            source_module: str
            target_file: str
            description: str = ""

            def add_import(self, module, names=None):
                pass
    """,
}


def _tree(tmp_path: Path, extra: dict[str, str] | None = None, partial: bool = False) -> Path:
    for rel, text in {**BASE, **(extra or {})}.items():
        if partial and (rel.endswith("__init__.py") or rel == "pyproject.toml"):
            continue
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return tmp_path


def _lint(tmp_path: Path, rel: str, text: str, code: str, partial: bool = False) -> list[str]:
    root = _tree(tmp_path, {rel: text}, partial)
    path = root / rel
    project = load_project([str(path)])
    src = SourceFile.from_text(str(path), path.read_text())
    return [f"{d.line}:{d.message}" for d in lint_source(src, [code], Settings(), project)]


INIT = "veomni/models/transformers/mini/__init__.py"
MOD = "veomni/models/transformers/mini/modeling_extra.py"


# -- NPU508 -------------------------------------------------------------------------------------------------


def test_npu508_inverted_switch_variants(tmp_path: Path) -> None:
    negated = """
        from ....utils.device import IS_NPU_AVAILABLE

        def register(arch):
            if not IS_NPU_AVAILABLE:
                from .generated.patched_modeling_mini_npu import MiniModel
            else:
                from .generated.patched_modeling_mini_gpu import MiniModel
            return MiniModel
    """
    assert _lint(tmp_path / "a", INIT, negated, "NPU508")
    compared = """
        from veomni.utils.device import get_device_type

        if get_device_type() != "npu":
            from .generated import patched_modeling_mini_npu as impl
        else:
            from .generated import patched_modeling_mini_gpu as impl
    """
    assert _lint(tmp_path / "b", INIT, compared, "NPU508")
    ternary = """
        import importlib

        from veomni.utils.device import IS_NPU_AVAILABLE

        def load():
            return importlib.import_module(
                "veomni.models.transformers.mini.generated."
                + ("patched_modeling_mini_gpu" if IS_NPU_AVAILABLE else "patched_modeling_mini_npu")
            )
    """
    assert _lint(tmp_path / "c", MOD, ternary, "NPU508")
    cuda_flag = """
        from veomni.utils.device import IS_CUDA_AVAILABLE

        if IS_CUDA_AVAILABLE:
            from .generated.patched_modeling_mini_npu import MiniModel
        else:
            from .generated.patched_modeling_mini_gpu import MiniModel
    """
    assert _lint(tmp_path / "d", INIT, cuda_flag, "NPU508")


def test_npu508_quiet_on_correct_switches(tmp_path: Path) -> None:
    right = """
        from ....utils.device import IS_NPU_AVAILABLE

        def register(arch):
            if IS_NPU_AVAILABLE:
                from .generated.patched_modeling_mini_npu import MiniModel
            else:
                from .generated.patched_modeling_mini_gpu import MiniModel
            return MiniModel
    """
    assert not _lint(tmp_path / "a", INIT, right, "NPU508")
    chain = """
        from veomni.utils.device import get_device_type

        if get_device_type() == "cuda":
            from .generated.patched_modeling_mini_gpu import MiniModel
        elif get_device_type() == "npu":
            from .generated.patched_modeling_mini_npu import MiniModel
    """
    assert not _lint(tmp_path / "b", INIT, chain, "NPU508")


# -- NPU509 -------------------------------------------------------------------------------------------------


def test_npu509_missing_module_and_name(tmp_path: Path) -> None:
    text = """
        from veomni.utils.device import get_device_type, get_device_name
        from ..mini.rope_kernels import fused_rope
    """
    found = _lint(tmp_path, MOD, text, "NPU509")
    assert any("get_device_name" in f for f in found)
    assert any("rope_kernels" in f for f in found)
    assert not any("get_device_type`" in f for f in found)


def test_npu509_patch_function_imports_resolve_from_generated(tmp_path: Path) -> None:
    spec = "veomni/models/transformers/mini/mini_npu_patch_gen_config.py"
    good = """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="m", target_file="patched_modeling_mini_npu.py")


        def mini_forward_patched(self, x):
            from ..helpers import mini_rope

            return mini_rope(x)
    """
    assert not _lint(tmp_path / "a", spec, good, "NPU509")
    # written as if the code stayed beside the spec: in generated/ it names generated/helpers.py
    bad = good.replace("from ..helpers", "from .helpers")
    found = _lint(tmp_path / "b", spec, bad, "NPU509")
    assert found and "generated.helpers" in found[0]
    added = """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="m", target_file="patched_modeling_mini_npu.py")
        config.add_import("veomni.utils.device", names=["IS_NPU_AVAILABLE", "npu_synchronize"])
    """
    found = _lint(tmp_path / "c", spec, added, "NPU509")
    assert len(found) == 1 and "npu_synchronize" in found[0]


def test_npu509_quiet_for_optional_and_partial_trees(tmp_path: Path) -> None:
    optional = """
        try:
            from veomni.utils.fused import fast_path
        except ImportError:
            fast_path = None
    """
    assert not _lint(tmp_path / "a", MOD, optional, "NPU509")
    missing = "from veomni.utils.fused import fast_path\n"
    assert _lint(tmp_path / "b", MOD, missing, "NPU509")
    assert not _lint(tmp_path / "c", MOD, missing, "NPU509", partial=True)


# -- NPU510 -------------------------------------------------------------------------------------------------


def test_npu510_keyword_and_arity_variants(tmp_path: Path) -> None:
    direct = """
        from veomni.distributed.comm import shard_sizes

        def plan(n, w):
            return shard_sizes(n, w, pad_multiple=8)
    """
    assert _lint(tmp_path / "a", MOD, direct, "NPU510")
    through_package = """
        from veomni import distributed

        def plan(n, w):
            return distributed.gather_parts(n, w, 0)
    """
    assert _lint(tmp_path / "b", MOD, through_package, "NPU510")
    dataclass_field = """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="m", target="patched_modeling_mini_gpu.py")
    """
    found = _lint(tmp_path / "c", MOD, dataclass_field, "NPU510")
    assert found and "`target`" in found[0]
    base_init = """
        class Norm:
            def __init__(self, dim, eps=1e-6):
                self.dim = dim


        class ScaledNorm(Norm):
            def __init__(self, dim):
                super().__init__(dim, epsilon=1e-5)
    """
    assert _lint(tmp_path / "d", MOD, base_init, "NPU510")


def test_npu510_quiet_when_signature_accepts(tmp_path: Path) -> None:
    text = """
        import functools

        from veomni.distributed.comm import shard_sizes


        def wrapped(f):
            @functools.wraps(f)
            def inner(*a, **k):
                return f(*a, **k)
            return inner


        @wrapped
        def helper(x):
            return x


        def spread(**options):
            return options


        def plan(n, w, extra):
            helper(n, w, scale=2)  # an unknown decorator: not judged
            spread(anything=1)
            return shard_sizes(n, w, pad_to_multiple=8, *extra)
    """
    assert not _lint(tmp_path, MOD, text, "NPU510")


ULYSSES = {
    "veomni/distributed/sequence_parallel/__init__.py": "",
    "veomni/distributed/sequence_parallel/ulysses.py": """
        def all_to_all_tensor(x, scatter_dim, gather_dim, group, async_op=False):
            return x
    """,
}


def _lint_with(tmp_path: Path, extra: dict[str, str], rel: str, text: str, code: str) -> list[str]:
    _tree(tmp_path, extra)
    return _lint(tmp_path, rel, text, code)


def test_npu510_required_argument_dropped(tmp_path: Path) -> None:
    # mutants of veomni/data/multimodal/multimodal_transform.py (an argument dropped from a helper of the file)
    transform = """
        def mask_input_ids(modality_info, input_ids):
            return input_ids


        def process(modality_info, model_inputs):
            return mask_input_ids(modality_info)
    """
    found = _lint(tmp_path / "a", "veomni/data/multimodal/multimodal_transform.py", transform, "NPU510")
    assert found and "`input_ids`" in found[0] and found[0].startswith("6:")
    # veomni/distributed/chunk_mbs.py: the axis of a slice helper dropped
    chunk = """
        def _slice_tensor(tensor, seq_range, dim):
            slices = [slice(None)] * tensor.ndim
            return tensor[tuple(slices)]


        def slice_batch(data, seq_range, dim=1):
            return _slice_tensor(data, seq_range)
    """
    found = _lint(tmp_path / "b", "veomni/distributed/chunk_mbs.py", chunk, "NPU510")
    assert found and "`dim`" in found[0]
    # veomni/distributed/sequence_parallel/async_ulysses.py: a keyword without default dropped from an import
    ulysses = """
        from veomni.distributed.sequence_parallel.ulysses import all_to_all_tensor


        def backward_step(grad_o, seq_dimension, head_dimension, sp_group):
            return all_to_all_tensor(grad_o, gather_dim=seq_dimension, group=sp_group, async_op=True)
    """
    rel = "veomni/distributed/sequence_parallel/async_ulysses.py"
    found = _lint_with(tmp_path / "c", ULYSSES, rel, ulysses, "NPU510")
    assert found and "`scatter_dim`" in found[0] and "`gather_dim`" not in found[0]
    # a method of the same class, by self.
    dataset = """
        class Mixed:
            def _attach_meta(self, sample, ds_idx):
                return sample

            def __getitem__(self, i):
                return self._attach_meta(i)
    """
    assert _lint(tmp_path / "d", "veomni/data/dataset.py", dataset, "NPU510")


def test_swapped_named_arguments_are_reported_by_npu459(tmp_path: Path) -> None:
    # two values named for each other's parameters: NPU459's check since the merge of mutA and mutC
    transform = """
        def keep_input_only(multimodal_config, multimodal_output_mask):
            return multimodal_config


        def process(multimodal_config, multimodal_output_mask):
            return keep_input_only(multimodal_output_mask, multimodal_config)
    """
    found = _lint(tmp_path / "a", "veomni/data/multimodal/multimodal_transform.py", transform, "NPU459")
    assert len(found) == 1 and "multimodal_output_mask" in found[0]
    clip = """
        def fsdp2_clip_grad_norm(model, max_norm, norm_type=2.0):
            return max_norm


        def veomni_clip_grad_norm(model, max_norm, norm_type=2.0):
            return fsdp2_clip_grad_norm(max_norm, model, norm_type)
    """
    assert _lint(tmp_path / "b", "veomni/distributed/clip_grad_norm.py", clip, "NPU459")
    dims = """
        from veomni.distributed.sequence_parallel.ulysses import all_to_all_tensor


        def to_heads(x, scatter_dim, gather_dim, group):
            return all_to_all_tensor(x, gather_dim, scatter_dim, group)
    """
    assert _lint_with(tmp_path / "c", ULYSSES, "veomni/distributed/sequence_parallel/sp.py", dims, "NPU459")


def test_npu510_quiet_on_complete_and_deliberate_calls(tmp_path: Path) -> None:
    text = """
        from veomni.distributed.sequence_parallel.ulysses import all_to_all_tensor


        def mask_input_ids(modality_info, input_ids, *, strict=False):
            return input_ids


        def gcd(a, b):
            return a if b == 0 else gcd(b, a % b)  # recursion: the reversal is the algorithm


        class Norm:
            def __init__(self, in_channels, out_channels):
                self.out_channels = out_channels


        class Block:
            def __init__(self, quant_channels, in_channels):
                self.norm = Norm(quant_channels, in_channels)  # one name where another parameter is meant


        class AllToAll:
            @staticmethod
            def forward(ctx, x, scatter_dim, gather_dim, group):
                return all_to_all_tensor(x, scatter_dim, gather_dim, group)

            @staticmethod
            def backward(ctx, grad, scatter_dim, gather_dim, group):
                return all_to_all_tensor(grad, gather_dim, scatter_dim, group)  # the adjoint reverses them


        def process(modality_info, model_inputs, args, options):
            mask_input_ids(modality_info, input_ids=model_inputs)
            mask_input_ids(*args)
            mask_input_ids(modality_info, **options)
            return all_to_all_tensor(model_inputs, scatter_dim=1, gather_dim=2, group=None)
    """
    rel = "veomni/distributed/sequence_parallel/sp.py"
    assert not _lint_with(tmp_path, ULYSSES, rel, text, "NPU510")


# -- NPU511 -------------------------------------------------------------------------------------------------


def test_npu511_tuple_return_variants(tmp_path: Path) -> None:
    used_as_tensor = """
        from veomni.distributed.comm import gather_parts

        def backward(grad, n):
            out = gather_parts(grad)
            if n:
                out = out / n
            return out
    """
    assert _lint(tmp_path / "a", MOD, used_as_tensor, "NPU511")
    attribute = """
        from veomni.distributed import gather_parts

        def backward(grad):
            return gather_parts(grad).split(2)
    """
    assert _lint(tmp_path / "b", MOD, attribute, "NPU511")
    unpack = """
        from veomni.distributed.comm import loss_triple

        def step(logits, labels):
            loss, logits, _, _ = loss_triple(logits, labels)
            return loss
    """
    assert _lint(tmp_path / "c", MOD, unpack, "NPU511")


def test_npu511_quiet_on_tuple_uses(tmp_path: Path) -> None:
    text = """
        from veomni.distributed.comm import gather_flat, gather_parts, loss_triple

        def step(grad, logits, labels):
            parts, sizes = gather_parts(grad)
            pair = gather_parts(grad)
            first = pair[0]
            loss, *_ = loss_triple(logits, labels)
            flat = gather_flat(grad)
            return parts, sizes, first, len(pair), loss, flat.view(-1), pair + pair
    """
    assert not _lint(tmp_path, MOD, text, "NPU511")


# -- NPU512 -------------------------------------------------------------------------------------------------


def test_npu512_two_operand_variants(tmp_path: Path) -> None:
    text = """
        import torch
        from torch import hypot


        def worst(a, groups, b, c):
            x = torch.logical_or(a, *groups)
            y = hypot(a, b, c)
            z = torch.logical_or(*[a, b])  # one spread of exactly the operands: left alone
            w = torch.maximum(a, *groups)  # NPU615's (the distributed family), not reported twice
            return x, y, z, w
    """
    found = _lint(tmp_path, MOD, text, "NPU512")
    assert [f.split(":")[0] for f in found] == ["6", "7"]


# -- NPU513 -------------------------------------------------------------------------------------------------


def _check_tree(root: Path, code: str) -> list[str]:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--exit-zero", "--select", code]
        + ["--output-format", "concise", "veomni"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [line for line in proc.stdout.splitlines() if f" {code} " in line]


PKG = "veomni/models/transformers/mini"


def test_npu513_spec_target_variants(tmp_path: Path) -> None:
    own_target = """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.mini.modeling_mini", target_file="patched_modeling_mini_gpu.py")
    """
    root = _tree(tmp_path / "a", {f"{PKG}/mini_npu_patch_gen_config.py": own_target})
    found = _check_tree(root, "NPU513")
    assert len(found) == 1 and "mini_npu_patch_gen_config.py" in found[0] and "its own" in found[0]
    # the GPU spec pointed at the NPU file; the NPU spec (a deepcopy) inherits it: both reported
    gpu_on_npu = """
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.mini.modeling_mini")
        config.target_file = "patched_modeling_mini_npu.py"
    """
    root = _tree(tmp_path / "b", {f"{PKG}/mini_gpu_patch_gen_config.py": gpu_on_npu})
    assert len(_check_tree(root, "NPU513")) == 1
    twin = """
        from copy import deepcopy

        from veomni.models.transformers.mini.mini_gpu_patch_gen_config import config as base

        config = deepcopy(base)
        config.target_file = "patched_modeling_mini_npu.py"
    """
    root = _tree(
        tmp_path / "c",
        {f"{PKG}/mini_npu_patch_gen_config.py": twin, f"{PKG}/mini_fast_npu_patch_gen_config.py": twin},
    )
    found = _check_tree(root, "NPU513")
    assert len(found) == 2 and all("both generate" in f for f in found)


def test_npu513_quiet_on_sibling_targets(tmp_path: Path) -> None:
    right = """
        from copy import deepcopy

        from veomni.models.transformers.mini.mini_gpu_patch_gen_config import config as gpu_config

        config = deepcopy(gpu_config)
        config.target_file = "patched_modeling_mini_npu.py"
    """
    root = _tree(tmp_path, {f"{PKG}/mini_npu_patch_gen_config.py": right})
    assert not _check_tree(root, "NPU513")


# -- NPU516 -------------------------------------------------------------------------------------------------


def test_npu516_dropped_binding_variants(tmp_path: Path) -> None:
    # veomni/distributed/sequence_parallel/utils.py: `padding_size = ...` dropped before its use
    pad = """
        from torch import Tensor


        def pad_tensor(x, dim, padding_size):
            return x


        def pad_for_sp(x: Tensor, dim: int, sp_world: int) -> Tensor:
            dim_size = x.shape[dim]
            if dim_size % sp_world:
                x = pad_tensor(x, dim, padding_size)
            return x
    """
    found = _lint(tmp_path / "a", "veomni/distributed/sequence_parallel/utils.py", pad, "NPU516")
    assert [f.split(":")[0] for f in found] == ["11"] and "`padding_size`" in found[0]
    # the same file: the list and the counter of a loop never created (`+=` alone does not bind)
    split = """
        def media_splits(image_lens, sp_size):
            for image_len in image_lens:
                for rank in range(sp_size):
                    tokens_split.append(image_len // sp_size)
                num_tokens += image_len
            return tokens_split, num_tokens
    """
    found = _lint(tmp_path / "b", "veomni/distributed/sequence_parallel/utils.py", split, "NPU516")
    assert len(found) == 2 and "`tokens_split`" in found[0] and "`num_tokens`" in found[1]
    # veomni/models/seed_omni/modeling_seed_omni.py: a method's dict dropped
    wrapper = """
        class SeedOmniModel:
            def forward(self, **kwargs):
                for key, value in kwargs.items():
                    encoder_decoder_inputs[key] = value
                return self.decoder(**encoder_decoder_inputs)
    """
    assert _lint(tmp_path / "c", "veomni/models/seed_omni/modeling_seed_omni.py", wrapper, "NPU516")
    # veomni/data/dataset.py: a buffer of indices dropped
    buffer = """
        class PackingDataset:
            def _fill(self, buffer):
                for i, sample in enumerate(buffer):
                    if sample is None:
                        indices_to_remove_from_buffer.append(i)
                return indices_to_remove_from_buffer
    """
    assert _lint(tmp_path / "d", "veomni/data/dataset.py", buffer, "NPU516")


def test_npu516_quiet_on_bound_names(tmp_path: Path) -> None:
    text = """
        from __future__ import annotations

        try:
            from torch_npu import npu_format_cast
        except ImportError:
            npu_format_cast = None

        if npu_format_cast is None:
            CAST_FORMAT = 2
        else:
            CAST_FORMAT = 29


        def set_cache(value):
            global _CACHE
            _CACHE = value


        def read_cache() -> ProcessGroup:  # an annotation only: never evaluated
            return _CACHE


        def media_splits(image_lens, sp_size, *rest, **options):
            tokens_split = []
            num_tokens = 0
            for image_len in image_lens:
                tokens_split.append(image_len // sp_size)
                num_tokens += image_len
            squares = [n * n for n in tokens_split if (m := n)]
            try:
                pass
            except ValueError as err:
                raise RuntimeError(str(err)) from err
            with open(__file__) as handle:
                handle.read()
            return tokens_split, num_tokens, squares, m, rest, options, CAST_FORMAT


        class Tower:
            kind = "image"

            def dummy(self):
                def inner():
                    return helper_defined_later()

                return inner, __class__
    """
    later = "\n\ndef helper_defined_later():\n    return 1\n"
    assert not _lint(
        tmp_path / "a", "veomni/distributed/comm_extra.py", textwrap.dedent(text) + later, "NPU516"
    )
    star = """
        from torch.nn.functional import *


        def act(x):
            return silu(x)
    """
    assert not _lint(tmp_path / "b", "veomni/ops/act.py", star, "NPU516")
    rehomed = """
        import types


        def _process(path):
            return _read_tensor_data_mmap(path)


        def apply(module):
            module._process = types.FunctionType(_process.__code__, module.__dict__)
    """
    assert not _lint(tmp_path / "c", "veomni/checkpoint/dcp_patch.py", rehomed, "NPU516")
