"""NPU319: a device or vendor-kernel availability probe imported and never read (its gate was dropped), in
regions other than the dev cases (Muon's quack gate, batch-invariant mode, the MoE layer's Triton import)."""

from __future__ import annotations

from npu_lint.rules.vendor.npu319_device_probe_import_unused import device_probe
from tests.rules.snippets import lint_snippet


def _lines(text: str, path: str) -> list[int]:
    return sorted(d.line for d in lint_snippet(path, text, ["NPU319"]))


def test_probe_names() -> None:
    for name in (
        "IS_CUDA_AVAILABLE",
        "IS_NPU_AVAILABLE",
        "is_torch_npu_available",
        "is_liger_kernel_available",
    ):
        assert device_probe(name), name
    for name in ("is_flash_attn_2_available", "is_triton_available", "HAS_QUACK_AVAILABLE"):
        assert device_probe(name), name
    for name in ("is_package_available", "is_transformers_version_greater_or_equal_to", "get_device_type"):
        assert not device_probe(name), name


def test_collator_liger_probe_left_unread() -> None:
    assert _lines(
        """
        import torch

        from ..utils.import_utils import is_liger_kernel_available


        def fused_collate(batch):
            from liger_kernel.ops.utils import ensure_contiguous

            return ensure_contiguous(torch.stack(batch))
        """,
        "veomni/data/collators/fused.py",
    ) == [3]


def test_checkpoint_npu_probe_left_unread() -> None:
    assert _lines(
        """
        import torch

        from veomni.utils.device import IS_NPU_AVAILABLE, get_device_type


        def to_storage(t: torch.Tensor) -> torch.Tensor:
            import torch_npu

            return torch_npu.npu_format_cast(t, 2).to(get_device_type())
        """,
        "veomni/checkpoint/format.py",
    ) == [3]


def test_spec_flash_attention_probe_left_unread() -> None:
    assert _lines(
        """
        from ....utils.import_utils import is_flash_attn_2_available
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


        @config.replace_function("toy_attention")
        def toy_attention(q, k, v):
            from flash_attn import flash_attn_func

            return flash_attn_func(q, k, v)
        """,
        "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
    ) == [1]


def test_registration_init_cuda_probe_left_unread() -> None:
    assert _lines(
        """
        from ...utils.device import IS_CUDA_AVAILABLE


        def set_fused_softmax(enabled: bool = True):
            if enabled:
                from .triton_softmax import register_softmax_override

                register_softmax_override()
        """,
        "veomni/ops/fused_softmax/__init__.py",
    ) == [1]


def test_read_listed_reexported_or_kept_stay_quiet() -> None:
    read = """
        from ...utils.device import IS_CUDA_AVAILABLE


        def set_fused_softmax(enabled: bool = True):
            if enabled and IS_CUDA_AVAILABLE:
                from .triton_softmax import register_softmax_override

                register_softmax_override()
        """
    assert _lines(read, "veomni/ops/fused_softmax/__init__.py") == []
    listed = """
        from .device import IS_NPU_AVAILABLE, get_device_type

        __all__ = ["IS_NPU_AVAILABLE", "get_device_type", "helper"]


        def helper():
            return get_device_type()
        """
    assert _lines(listed, "veomni/utils/helpers.py") == []
    reexport = "from .import_utils import is_liger_kernel_available, is_torch_npu_available\n"
    assert _lines(reexport, "veomni/utils/__init__.py") == []
    kept = """
        from ..utils.device import IS_CUDA_AVAILABLE  # noqa: F401
        from ..utils.import_utils import is_package_available
        from ..utils.device import IS_NPU_AVAILABLE as IS_NPU_AVAILABLE


        def f():
            return 1
        """
    assert _lines(kept, "veomni/optim/misc.py") == []
