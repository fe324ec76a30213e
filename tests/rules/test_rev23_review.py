"""Review 23 (precision): correct variants of the device rules NPU105, NPU109, NPU112 and the multimodal rules
NPU703, NPU732 that a maintainer would write and that the rules reported, each paired with a still-reported true
positive of the same shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules
from tests.rules.snippets import GLM4V_VIDEO_HEAD, lint_snippet, write_file

load_rule_modules()

# --- NPU105: CUDA-only host gates that are CUDA-only by construction ------------------------------------------

UTILS = "veomni/utils/toy_helper.py"

GATE_QUIET = {
    "nvtx": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def range_push(name):
            if IS_CUDA_AVAILABLE:
                get_torch_device().nvtx.range_push(name)
        """,
    "transformer_engine": """
        import torch
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


        def maybe_enable_fp8(model, args):
            if IS_CUDA_AVAILABLE and args.enable_fp8:
                import transformer_engine.pytorch as te

                model.to(get_device_type())
                return te.fp8_autocast(enabled=True)
            return torch.autocast(get_device_type(), enabled=False)
        """,
    "capability_in_test": """
        import torch
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type, get_gpu_compute_capability


        def fp8_workspace(numel):
            if IS_CUDA_AVAILABLE and get_gpu_compute_capability() >= 90:
                return torch.empty(numel, dtype=torch.uint8, device=get_device_type())
            return None
        """,
    "not_rocm": """
        import torch
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def sync_for_timing(timing):
            if IS_CUDA_AVAILABLE and torch.version.hip is None and timing:
                get_torch_device().synchronize()
        """,
    "else_torch_npu": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def start_memory_history(profile_memory):
            if IS_CUDA_AVAILABLE and profile_memory:
                get_torch_device().memory._record_memory_history()
            else:
                import torch_npu

                torch_npu.npu.memory._record_memory_history()
        """,
    "else_says_cuda_only": """
        import logging

        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device

        logger = logging.getLogger(__name__)


        def setup_memory_profiling(profile_memory):
            if not profile_memory:
                return
            if IS_CUDA_AVAILABLE:
                get_torch_device().memory._record_memory_history(max_entries=100000)
            else:
                logger.warning("memory profiling is only supported on CUDA; skipping")
        """,
    "npu_exit_before": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def start_memory_history(profile_memory):
            if IS_NPU_AVAILABLE:
                import torch_npu

                torch_npu.npu.memory._record_memory_history()
                return
            if IS_CUDA_AVAILABLE and profile_memory:
                get_torch_device().memory._record_memory_history()
        """,
    "elif_after_npu": """
        import torch
        from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def empty_cache():
            if IS_NPU_AVAILABLE:
                torch.npu.empty_cache()
            elif IS_CUDA_AVAILABLE:
                get_torch_device().empty_cache()
        """,
    "cuda_named_class": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        class CudaGraphRunner:
            def capture(self, fn):
                if IS_CUDA_AVAILABLE:
                    stream = get_torch_device().Stream()
                    with get_torch_device().stream(stream):
                        fn()
        """,
}

GATE_REPORTED = {
    "plain": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def empty_cache():
            if IS_CUDA_AVAILABLE:
                get_torch_device().empty_cache()
        """,
    "flag_in_test": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def start_memory_history(profile_memory):
            if IS_CUDA_AVAILABLE and profile_memory:
                get_torch_device().memory._record_memory_history()
        """,
    "else_neutral_log": """
        import logging

        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device

        logger = logging.getLogger(__name__)


        def setup_memory_profiling(profile_memory):
            if IS_CUDA_AVAILABLE:
                get_torch_device().memory._record_memory_history(max_entries=100000)
            else:
                logger.info("skipping memory profiling")
        """,
    "npu_branch_no_exit": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def start_memory_history(profile_memory, log):
            if IS_NPU_AVAILABLE:
                log("npu host")
            if IS_CUDA_AVAILABLE and profile_memory:
                get_torch_device().memory._record_memory_history()
        """,
    "neutral_class": """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        class GraphRunner:
            def capture(self, fn):
                if IS_CUDA_AVAILABLE:
                    stream = get_torch_device().Stream()
                    with get_torch_device().stream(stream):
                        fn()
        """,
}


@pytest.mark.parametrize("name", sorted(GATE_QUIET))
def test_npu105_quiet_on_gates_cuda_only_by_construction(name: str) -> None:
    assert lint_snippet(UTILS, GATE_QUIET[name], ["NPU105"]) == []


@pytest.mark.parametrize("name", sorted(GATE_REPORTED))
def test_npu105_still_reports_gates_around_device_neutral_code(name: str) -> None:
    found = lint_snippet(UTILS, GATE_REPORTED[name], ["NPU105"])
    assert len(found) == 1
    assert "the code it gates is device-neutral" in found[0].message


PROBE = """
import torch


def {name}(device):
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        return f"compute capability {{major}}.{{minor}} has no TF32; matmuls run in full FP32"
    return None
"""


@pytest.mark.parametrize("name", ["tf32_warning", "tf32_hint", "precision_message"])
def test_npu105_quiet_on_a_warning_text_for_cuda_devices(name: str) -> None:
    # None means "nothing to warn about": right for every non-CUDA device
    assert lint_snippet("veomni/utils/toy_tf32.py", PROBE.format(name=name), ["NPU105"]) == []


def test_npu105_still_reports_the_same_shape_as_a_kernel_reason_probe() -> None:
    found = lint_snippet("veomni/utils/toy_tf32.py", PROBE.format(name="tf32_unavailable_reason"), ["NPU105"])
    assert len(found) == 1 and "returns no reason" in found[0].message


NPU_FIRST = """
from veomni.utils.device import IS_NPU_AVAILABLE, get_gpu_compute_capability


def fused_unavailable_reason(x):
    if IS_NPU_AVAILABLE:
        {npu}
    if x.device.type != "cuda":
        return None
    cap = get_gpu_compute_capability(x.device)
    if cap < 90:
        return f"sm{{cap}} is too old for the fused kernel"
    return None
"""


def test_npu105_quiet_on_a_probe_that_answers_for_the_npu_first() -> None:
    text = NPU_FIRST.format(npu='return "the fused kernel is CUDA-only"')
    assert lint_snippet("veomni/optim/toy_probe.py", text, ["NPU105"]) == []


def test_npu105_still_reports_a_probe_whose_npu_branch_passes_too() -> None:
    found = lint_snippet("veomni/optim/toy_probe.py", NPU_FIRST.format(npu="return None"), ["NPU105"])
    assert len(found) == 1 and "returns no reason" in found[0].message


# --- NPU112: a loader that pins on CUDA hosts only ----------------------------------------------------------

DATA = "veomni/data/toy_loader.py"

PIN_QUIET = {
    "pin_on_cuda_probe": """
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader


        def build(dataset):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=torch.cuda.is_available())
        """,
    "pin_and_cuda_flag": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_CUDA_AVAILABLE


        def build(dataset, pin_memory):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory and IS_CUDA_AVAILABLE)
        """,
    "pin_not_npu": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_NPU_AVAILABLE


        def build(dataset, pin_memory):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory and not IS_NPU_AVAILABLE)
        """,
    "after_npu_return": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_NPU_AVAILABLE, get_device_type


        def build(dataset, pin_memory):
            if IS_NPU_AVAILABLE:
                return StatefulDataLoader(
                    dataset, batch_size=4, pin_memory=pin_memory, pin_memory_device=get_device_type()
                )
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory)
        """,
    "under_cuda_gate": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


        def build(dataset, pin_memory):
            if IS_CUDA_AVAILABLE:
                return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory)
            return StatefulDataLoader(
                dataset, batch_size=4, pin_memory=pin_memory, pin_memory_device=get_device_type()
            )
        """,
    "else_of_npu": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_NPU_AVAILABLE, get_device_type


        def build(dataset, pin_memory):
            if IS_NPU_AVAILABLE:
                loader = StatefulDataLoader(
                    dataset, batch_size=4, pin_memory=pin_memory, pin_memory_device=get_device_type()
                )
            else:
                loader = StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory)
            return loader
        """,
}

PIN_QUIET["device_type_compare"] = """
    from torchdata.stateful_dataloader import StatefulDataLoader


    def build(dataset, args, device):
        return StatefulDataLoader(dataset, batch_size=4, pin_memory=args.pin_memory and device.type == "cuda")
    """
PIN_QUIET["not_npu_device_type"] = """
    from torchdata.stateful_dataloader import StatefulDataLoader
    from veomni.utils.device import get_device_type


    def build(dataset):
        return StatefulDataLoader(dataset, batch_size=4, pin_memory=get_device_type() != "npu")
    """

PIN_REPORTED = {
    "pin_setting": """
        from torchdata.stateful_dataloader import StatefulDataLoader


        def build(dataset, args):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=args.pin_memory)
        """,
    "pin_and_npu_flag": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_NPU_AVAILABLE


        def build(dataset, pin_memory):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory and IS_NPU_AVAILABLE)
        """,
    "under_negated_cuda_gate": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_CUDA_AVAILABLE


        def build(dataset, pin_memory):
            if not IS_CUDA_AVAILABLE:
                return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory)
            return None
        """,
    "npu_device_type_compare": """
        from torchdata.stateful_dataloader import StatefulDataLoader


        def build(dataset, args, device):
            return StatefulDataLoader(dataset, batch_size=4, pin_memory=args.pin_memory and device.type != "cuda")
        """,
    "npu_branch": """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from veomni.utils.device import IS_NPU_AVAILABLE


        def build(dataset, pin_memory):
            if IS_NPU_AVAILABLE:
                return StatefulDataLoader(dataset, batch_size=4, pin_memory=pin_memory)
            return None
        """,
}


@pytest.mark.parametrize("name", sorted(PIN_QUIET))
def test_npu112_quiet_when_only_cuda_hosts_pin(name: str) -> None:
    assert lint_snippet(DATA, PIN_QUIET[name], ["NPU112"]) == []


@pytest.mark.parametrize("name", sorted(PIN_REPORTED))
def test_npu112_still_reports_pinning_reachable_on_ascend(name: str) -> None:
    assert len(lint_snippet(DATA, PIN_REPORTED[name], ["NPU112"])) == 1


# --- NPU109: a gathered state-dict shard staged afterwards, or exchanged over gloo --------------------------

CKPT = "veomni/checkpoint/toy_export.py"

EXPORT = """
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from veomni.utils.device import get_device_id, get_device_type


def export_experts(model, group):
    device = torch.device(get_device_type(), get_device_id())
{setup}    for name, param in model.state_dict().items():
        full = param.full_tensor() if isinstance(param, DTensor) else param
{stage}        dist.broadcast(full, group_src=0, group={group})
        yield name, full
"""

GATHER_QUIET = {
    "staged_after": ("", "        full = full.to(device)\n", "group"),
    "staged_when_on_host": (
        "",
        '        if full.device.type == "cpu":\n            full = full.to(device, non_blocking=True)\n',
        "group",
    ),
    "gloo_group": ('    cpu_group = dist.new_group(backend="gloo")\n', "", "cpu_group"),
}
GATHER_REPORTED = {
    "unstaged": ("", "", "group"),
    "other_copy_staged": ("", "        staged = full.to(device)\n", "group"),
    "hccl_group": ('    dev_group = dist.new_group(backend="hccl")\n', "", "dev_group"),
}


@pytest.mark.parametrize("name", sorted(GATHER_QUIET))
def test_npu109_quiet_on_a_gather_staged_or_kept_on_gloo(name: str) -> None:
    setup, stage, group = GATHER_QUIET[name]
    assert lint_snippet(CKPT, EXPORT.format(setup=setup, stage=stage, group=group), ["NPU109"]) == []


@pytest.mark.parametrize("name", sorted(GATHER_REPORTED))
def test_npu109_still_reports_an_unstaged_gather_on_the_device_group(name: str) -> None:
    setup, stage, group = GATHER_REPORTED[name]
    found = lint_snippet(CKPT, EXPORT.format(setup=setup, stage=stage, group=group), ["NPU109"])
    assert len(found) == 1 and "gathers a `state_dict()` shard where it lives" in found[0].message


OBJECTS = """
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def export_on_rank0(model, world):
    gathered = [None] * world
    for name, param in model.state_dict().items():
        full = param.full_tensor() if isinstance(param, DTensor) else param
        dist.{collective}(gathered, full)
        yield name, gathered


def count_tokens(n_local, world):
    count = torch.tensor(n_local)
    out = [None] * world
    dist.{collective}(out, count)
    return out
"""


def test_npu109_quiet_on_object_collectives() -> None:
    # `all_gather_object` pickles its operand on the host: a CPU tensor is what it takes
    assert lint_snippet(CKPT, OBJECTS.format(collective="all_gather_object"), ["NPU109"]) == []


def test_npu109_still_reports_the_same_operands_of_a_tensor_collective() -> None:
    assert len(lint_snippet(CKPT, OBJECTS.format(collective="all_gather"), ["NPU109"])) == 2


# --- NPU703: dummy-data builders are not dummy passes; torch.mul(x, 0) is a zero factor ----------------------

OMNI = "veomni/models/seed_omni/toy_omni.py"

DUMMY_QUIET = {
    "vit_metadata_builder": """
        def build_vit_metadata(sp_size):
            vit_metadata = _dummy_vit_metadata(1, 4 * sp_size, 4)
            if vit_metadata is None:
                raise ValueError("no metadata")
            return None


        def _dummy_vit_metadata(t, h, w):
            return {"grid_thw_list": [(t, h, w)]}
        """,
    "batch_builder": """
        def check(model):
            sample = make_dummy_batch(model.config)
            assert sample is not None


        def make_dummy_batch(config):
            return {"input_ids": [[0] * 8]}
        """,
    "input_shapes": """
        def warmup(model, shape):
            out = model.create_dummy_inputs(shape)
            print(out.shape)
        """,
    "torch_mul_zero": """
        import torch
        from torch import nn


        class ToyOmni(nn.Module):
            def video_forward(self, inputs_embeds, video=None):
                if video is None and self.training:
                    dummy = self.video_encoder.lm_dummy_encode()
                    inputs_embeds = inputs_embeds + torch.mul(dummy.mean(), 0)
                return inputs_embeds
        """,
}

SCRATCH = """
from torch import nn


class ToyOmni(nn.Module):
    def forward(self, input_ids, pixel_values=None, videos=None):
        embeds = self.embed(input_ids)
        if pixel_values is None:
            fake = self.image_encoder.lm_dummy_encode()
            term = {first}
            embeds = embeds + term.mean() * 0.0
        if videos is None:
            fake = self.video_encoder.lm_dummy_encode()
            term = fake.mean() * 0.0
            embeds = embeds + term
        return embeds
"""
# a scratch local read off the first dummy pass, reused for the second's zero term: no stream is replaced
DUMMY_QUIET["scratch_reused"] = SCRATCH.format(first="fake.hidden")

DUMMY_REPORTED = {
    "stream_replaced": SCRATCH.format(first="self.norm(embeds)"),
    "pass_presence_only": """
        from torch import nn


        class ToyOmni(nn.Module):
            def video_forward(self, inputs_embeds, video=None):
                if video is None and self.training:
                    dummy = self.video_encoder.lm_dummy_encode()
                    assert dummy is not None
                return inputs_embeds
        """,
    "torch_mul_one": """
        import torch
        from torch import nn


        class ToyOmni(nn.Module):
            def video_forward(self, inputs_embeds, video=None):
                if video is None and self.training:
                    dummy = self.video_encoder.lm_dummy_encode()
                    inputs_embeds = inputs_embeds + torch.mul(dummy.mean(), 1)
                return inputs_embeds
        """,
}


@pytest.mark.parametrize("name", sorted(DUMMY_QUIET))
def test_npu703_quiet_on_dummy_data_and_torch_mul_zero(name: str) -> None:
    assert lint_snippet(OMNI, DUMMY_QUIET[name], ["NPU703"]) == []


@pytest.mark.parametrize("name", sorted(DUMMY_REPORTED))
def test_npu703_still_reports_a_dummy_pass_result_lost_or_added(name: str) -> None:
    expected = {
        "stream_replaced": "`term` is replaced by the dummy pass's zero term",
        "pass_presence_only": "`dummy` holds the dummy pass's output",
        "torch_mul_one": "is added to `inputs_embeds` without a zero factor",
    }[name]
    found = lint_snippet(OMNI, DUMMY_REPORTED[name], ["NPU703"])
    assert any(expected in d.message for d in found)
    assert all("{name}" not in d.message for d in found)  # the holder's name is spelled out


# --- NPU732: a text sub-config type registered by direct assignment into the registry's mapping -------------

QWEN2_VL_INIT = """
from ...loader import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY


def register_qwen2_vl_model_config():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig

    return Qwen2VLConfig


MODEL_CONFIG_REGISTRY.register("qwen2_vl")(register_qwen2_vl_model_config)
{extra}

@MODELING_REGISTRY.register("qwen2_vl")
def register_qwen2_vl_modeling(architecture: str):
    from .generated.patched_modeling_qwen2_vl_gpu import Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration
"""


def _npu732(tmp_path: Path, extra: str) -> list[int]:
    init = write_file(
        tmp_path, "veomni/models/transformers/qwen2_vl/__init__.py", QWEN2_VL_INIT.format(extra=extra)
    )
    rule = PROJECT_REGISTRY["NPU732"]()
    return [d.line for d in rule.check(None, [str(init)]) if d.path == str(init)]  # type: ignore[arg-type]


@pytest.mark.xfail(
    strict=True,
    reason="a key written into the registry's private mapping (`REGISTRY._global_mapping[t] = fn`) is not read "
    "as a registration; rare (Registry.register is the API), left for the registration reader's owner",
)
def test_npu732_quiet_on_a_text_type_written_into_the_mapping(tmp_path: Path) -> None:
    extra = 'MODEL_CONFIG_REGISTRY._global_mapping["qwen2_vl_text"] = register_qwen2_vl_model_config\n'
    assert _npu732(tmp_path, extra) == []


def test_npu732_quiet_on_a_text_type_registered_with_the_two_argument_call(tmp_path: Path) -> None:
    extra = 'MODEL_CONFIG_REGISTRY.register("qwen2_vl_text", register_qwen2_vl_model_config)\n'
    assert _npu732(tmp_path, extra) == []


def test_npu732_still_reports_the_text_type_registered_nowhere(tmp_path: Path) -> None:
    assert len(_npu732(tmp_path, "")) == 1


# --- NPU703: a dummy forward's side output read with getattr feeds the side path ----------------------------

SPEC = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"

SIDE = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


@config.override_method("Qwen3VLModel.forward")
def vl_forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None, **kwargs):
    h = self.get_input_embeddings()(input_ids)
    side = None
    if pixel_values is not None:
        feats = self.get_image_features(pixel_values, image_grid_thw)
        h = h + feats.pooler_output.mean()
        side = feats.deepstack_features
    else:
        dummy = self.visual.dummy_forward()
        h = h + dummy.pooler_output.mean() * 0.0
        side = {read}
    if pixel_values_videos is not None:
        feats = self.get_video_features(pixel_values_videos)
        h = h + feats.pooler_output.mean()
    else:
        dummy = self.visual.dummy_forward()
        h = h + dummy.pooler_output.mean() * 0.0
        side = dummy.deepstack_features if side is None else side
    return self.language_model(inputs_embeds=h, deepstack_visual_embeds=side, **kwargs)
"""


def test_npu703_quiet_on_a_side_output_read_with_getattr() -> None:
    text = SIDE.format(read='getattr(dummy, "deepstack_features", None)')
    assert lint_snippet(SPEC, text, ["NPU703"]) == []


def test_npu703_still_reports_a_side_output_the_dummy_does_not_feed() -> None:
    found = lint_snippet(SPEC, SIDE.format(read='getattr(dummy, "pooler_output", None)'), ["NPU703"])
    assert any("reads `deepstack_features` from the tower" in d.message for d in found)


# --- NPU732: the multimodal type of a package's generated module registered by a sibling package -------------

QWEN3_VL_TEXT_INIT = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("qwen3_vl_text")
def register_qwen3_vl_text_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForCausalLM

    return Qwen3VLForCausalLM
"""

QWEN3_VL_MM_INIT = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("{key}")
def register_qwen3_vl_modeling(architecture: str):
    from ..qwen3_vl.generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration
"""


def _npu732_sibling(tmp_path: Path, key: str) -> list[str]:
    from tests.rules.test_npu732_vlm_model_types import GENERATED_QWEN3_VL

    base = "veomni/models/transformers"
    write_file(tmp_path, f"{base}/qwen3_vl/generated/patched_modeling_qwen3_vl_gpu.py", GENERATED_QWEN3_VL)
    init = write_file(tmp_path, f"{base}/qwen3_vl/__init__.py", QWEN3_VL_TEXT_INIT)
    write_file(tmp_path, f"{base}/qwen3_vl_mm/__init__.py", QWEN3_VL_MM_INIT.format(key=key))
    rule = PROJECT_REGISTRY["NPU732"]()
    return [d.message for d in rule.check(None, [str(init)]) if d.path == str(init)]  # type: ignore[arg-type]


def test_npu732_quiet_when_a_sibling_package_registers_the_multimodal_type(tmp_path: Path) -> None:
    assert _npu732_sibling(tmp_path, "qwen3_vl") == []


def test_npu732_still_reports_when_the_sibling_registers_another_type(tmp_path: Path) -> None:
    found = _npu732_sibling(tmp_path, "qwen3_vl_mm")
    assert len(found) == 1 and "the multimodal model type `qwen3_vl`" in found[0]


# --- NPU703: a rebinding in an `except` handler or a loop body does not always run ---------------------------

GLM4V = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
GLM4V_FORWARD = (
    GLM4V_VIDEO_HEAD
    + """{hold}
    if pixel_values_videos is not None:
        routed = stack_feats
    else:
        routed = placeholder_feats
    return self.language_model(inputs_embeds=embeds, multiscale=routed, **kwargs)
"""
)

REBIND_QUIET = {
    "except_handler": (
        "        try:\n            placeholder_feats = ghost.multiscale_features\n"
        "        except AttributeError:\n            placeholder_feats = None\n"
    ),
    "loop_body": (
        "        placeholder_feats = ghost.multiscale_features\n"
        "        for feat in ghost.extra_features or ():\n            placeholder_feats = None\n"
    ),
}
REBIND_REPORTED = {
    "after_try": (
        "        try:\n            placeholder_feats = ghost.multiscale_features\n"
        "        except AttributeError:\n            raise\n        placeholder_feats = None\n"
    ),
    "plain": "        placeholder_feats = ghost.multiscale_features\n        placeholder_feats = None\n",
}


@pytest.mark.parametrize("name", sorted(REBIND_QUIET))
def test_npu703_quiet_on_a_rebinding_that_may_not_run(name: str) -> None:
    text = GLM4V_FORWARD.format(hold=REBIND_QUIET[name].rstrip("\n"))
    assert lint_snippet(GLM4V, text, ["NPU703"]) == []


@pytest.mark.parametrize("name", sorted(REBIND_REPORTED))
def test_npu703_still_reports_a_rebinding_that_always_runs(name: str) -> None:
    text = GLM4V_FORWARD.format(hold=REBIND_REPORTED[name].rstrip("\n"))
    found = lint_snippet(GLM4V, text, ["NPU703"])
    assert any("is bound again here before" in d.message for d in found)
