"""Round 16, vendor family: what a package's ``__init__`` loads at its top is imported on every host that uses the
package (NPU308): no ``torch_npu``, no GPU vendor package but bare ``triton``, no tree module of CUDA kernel code,
outside a host or backend guard. Variants in regions other than the dev cases (MoE layer, rope adapter)."""

from __future__ import annotations

from pathlib import Path

from tests.rules.snippets import lint_in_tree, ops_tree


def _lines(tmp_path: Path, files: dict[str, str], rel: str) -> list[int]:
    return sorted(d.line for d in lint_in_tree(ops_tree(tmp_path, files), rel, ["NPU308"]))


_QUACK_KERNEL = """
import torch
from quack.gemm import gemm


def gram(x):
    return gemm(x, x.mT)
"""

_TRITON_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def _ce_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass
"""


def test_data_collator_loaded_by_package_imports_flash_attn(tmp_path: Path) -> None:
    files = {
        "veomni/data/__init__.py": "from .collator import PackingCollator\n",
        "veomni/data/collator.py": """
            import torch
            from flash_attn.bert_padding import unpad_input


            class PackingCollator:
                def __call__(self, batch):
                    return unpad_input(batch["input_ids"], batch["attention_mask"])
            """,
    }
    assert _lines(tmp_path, files, "veomni/data/collator.py") == [2]


def test_checkpoint_npu_io_loaded_by_package_imports_torch_npu(tmp_path: Path) -> None:
    # an NPU-named module, but the (device-neutral) checkpoint package loads it on every host
    files = {
        "veomni/checkpoint/__init__.py": "from . import npu_io\nfrom .saver import save\n",
        "veomni/checkpoint/saver.py": "def save(x):\n    return x\n",
        "veomni/checkpoint/npu_io.py": """
            import torch
            import torch_npu


            def to_host(t):
                return torch_npu.npu_format_cast(t, 2).cpu()
            """,
    }
    assert _lines(tmp_path, files, "veomni/checkpoint/npu_io.py") == [2]


def test_optimizer_loaded_by_package_imports_quack_kernel_module(tmp_path: Path) -> None:
    files = {
        "veomni/optim/__init__.py": "from .newton import NewtonOptimizer\n",
        "veomni/optim/newton.py": """
            import torch

            from ..ops.kernels.newton.gram_fast import gram


            class NewtonOptimizer(torch.optim.Optimizer):
                def step(self):
                    return gram
            """,
        "veomni/ops/kernels/newton/__init__.py": "",
        "veomni/ops/kernels/newton/gram_fast.py": _QUACK_KERNEL,
    }
    assert _lines(tmp_path, files, "veomni/optim/newton.py") == [3]


def test_trainer_loaded_by_package_imports_triton_kernel_module(tmp_path: Path) -> None:
    # bare ``import triton`` is fine on Ascend (triton-ascend), in the module itself or one tree module away: the
    # import closure reports only what the module itself would be reported for (rev16b r308)
    files = {
        "veomni/trainer/__init__.py": "from .base import BaseTrainer\n",
        "veomni/trainer/base.py": """
            import triton

            from ..ops.kernels.loss.fused_ce import _ce_kernel


            class BaseTrainer:
                kernel = _ce_kernel
            """,
        "veomni/ops/kernels/loss/__init__.py": "",
        "veomni/ops/kernels/loss/fused_ce.py": _TRITON_KERNEL,
    }
    assert _lines(tmp_path, files, "veomni/trainer/base.py") == []
    # the kernel module importing a GPU vendor package the module itself would be reported for
    files["veomni/ops/kernels/loss/fused_ce.py"] = (
        "from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction\n"
    )
    assert _lines(tmp_path / "liger", files, "veomni/trainer/base.py") == [3]


def test_guarded_imports_stay_quiet(tmp_path: Path) -> None:
    files = {
        "veomni/data/__init__.py": "from .collator import PackingCollator\n",
        "veomni/data/collator.py": """
            import torch

            from ..utils.device import IS_NPU_AVAILABLE
            from ..utils.import_utils import is_flash_attn_available, is_torch_npu_available

            if is_flash_attn_available():
                from flash_attn.bert_padding import unpad_input
            if IS_NPU_AVAILABLE:
                import torch_npu
            if not is_torch_npu_available():
                from ..ops.kernels.loss.fused_ce import _ce_kernel
            try:
                import liger_kernel
            except ImportError:
                liger_kernel = None


            class PackingCollator:
                pass
            """,
        "veomni/ops/kernels/loss/__init__.py": "",
        "veomni/ops/kernels/loss/fused_ce.py": _TRITON_KERNEL,
    }
    assert _lines(tmp_path, files, "veomni/data/collator.py") == []


def test_device_named_package_and_npu_kernel_modules_stay_quiet(tmp_path: Path) -> None:
    files = {
        # a package named for the NPU is loaded only on the NPU path
        "veomni/ops/kernels/conv/_ascend/__init__.py": "from .fused import conv_fwd\n",
        "veomni/ops/kernels/conv/_ascend/fused.py": "import torch_npu\n\n\ndef conv_fwd(x):\n    return x\n",
        # a device-neutral module that imports an Ascend Triton kernel module (triton-ascend)
        "veomni/ops/kernels/conv/__init__.py": "from .layer import Conv\n",
        "veomni/ops/kernels/conv/layer.py": "from .npu_triton_conv import conv\n\n\nclass Conv:\n    pass\n",
        "veomni/ops/kernels/conv/npu_triton_conv.py": _TRITON_KERNEL,
    }
    assert _lines(tmp_path, files, "veomni/ops/kernels/conv/_ascend/fused.py") == []
    assert _lines(tmp_path, files, "veomni/ops/kernels/conv/layer.py") == []


def test_module_the_package_loads_lazily_stays_quiet(tmp_path: Path) -> None:
    files = {
        "veomni/checkpoint/__init__.py": """
            def load_npu_io():
                from . import npu_io

                return npu_io
            """,
        "veomni/checkpoint/npu_io.py": "import torch_npu\n",
    }
    assert _lines(tmp_path, files, "veomni/checkpoint/npu_io.py") == []
