"""NPU308: a module named for no device imports ``torch_npu`` (an NPU vendor package) when it loads, unguarded,
or a module imports at its top a package that the same file imports lazily and the tree treats as optional (the
pyproject lists it only as an extra, or the tree imports it only lazily). Regions other than the dev cases
(``utils/helper.py``'s profiler import, ``data/multimodal/video_utils.py``'s torchcodec); correct code stays
quiet."""

from __future__ import annotations

from tests.rules.snippets import lint_in_tree, ops_tree

_PYPROJECT = """
[project]
name = "veomni"
dependencies = ["wandb", "psutil"]

[project.optional-dependencies]
gpu = ["librosa>=0.11", "soundfile", "megatron-energon>=7"]
npu = ["torch-npu==2.10.0", "librosa>=0.11"]
"""


def _lines(tmp_path, files: dict[str, str], target: str) -> list[int]:  # noqa: ANN001
    root = ops_tree(tmp_path, files, pyproject=_PYPROJECT)
    return sorted(d.line for d in lint_in_tree(root, target, ["NPU308"]) if d.code == "NPU308")


_USER = """
from veomni.data.data_collator import collate
from veomni.trainer.base import Trainer
"""


def test_torch_npu_at_the_top_of_a_data_collator(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/data/__init__.py": "",
        "veomni/data/data_collator.py": "import torch\nimport torch_npu\n\n\ndef collate(batch):\n    return batch\n",
        "veomni/trainer/__init__.py": "",
        "veomni/trainer/base.py": "class Trainer:\n    pass\n",
        "veomni/train.py": _USER,
    }
    assert _lines(tmp_path, files, "veomni/data/data_collator.py") == [2]


def test_torch_npu_contrib_in_a_trainer_and_a_package_init(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/trainer/__init__.py": "from torch_npu.contrib import transfer_to_npu  # noqa: F401\n",
        "veomni/trainer/base.py": "import os\n\nfrom torch_npu.contrib import transfer_to_npu  # noqa: F401\n",
        "veomni/checkpoint/__init__.py": (
            'import os\n\nif os.environ.get("VEOMNI_PROFILE") == "1":\n    import torch_npu\n'
        ),
    }
    assert _lines(tmp_path, files, "veomni/trainer/base.py") == [3]
    assert _lines(tmp_path, files, "veomni/trainer/__init__.py") == [1]
    assert _lines(tmp_path, files, "veomni/checkpoint/__init__.py") == [4]


def test_guarded_npu_named_or_on_demand_modules_stay_quiet(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/utils/__init__.py": "",
        "veomni/utils/device.py": "IS_NPU_AVAILABLE = False\n",
        "veomni/utils/helper.py": (
            "from .device import IS_NPU_AVAILABLE\n\nif IS_NPU_AVAILABLE:\n    import torch_npu\n"
        ),
        "veomni/utils/profiling.py": (
            "try:\n    import torch_npu\nexcept ImportError:\n    torch_npu = None\n"
        ),
        "veomni/utils/npu_profiler.py": "import torch_npu\n",
        "veomni/optim/__init__.py": (
            "from ..utils.device import IS_NPU_AVAILABLE\n\nif IS_NPU_AVAILABLE:\n"
            "    from .fused_adam import FusedAdam\n"
        ),
        "veomni/optim/fused_adam.py": "import torch_npu\n\n\nclass FusedAdam:\n    pass\n",
    }
    for rel in ("utils/helper.py", "utils/profiling.py", "utils/npu_profiler.py", "optim/fused_adam.py"):
        assert _lines(tmp_path, files, f"veomni/{rel}") == [], rel


_AUDIO = """
import numpy as np
{top}


def load_audio(path, sr):
    import librosa

    return librosa.load(path, sr=sr)[0]
"""


def test_optional_extra_hoisted_in_data_checkpoint_and_trainer(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/data/audio_utils.py": _AUDIO.format(top="import librosa"),
        "veomni/checkpoint/energon_reader.py": (
            "from megatron.energon import get_loader\n\n\ndef build(path):\n"
            "    from megatron.energon import get_loader\n\n    return get_loader(path)\n"
        ),
        "veomni/trainer/audio_eval.py": (
            "import soundfile as sf\n\n\ndef write(path, wav, sr):\n    if sr:\n        import soundfile as sf\n\n"
            "        sf.write(path, wav, sr)\n"
        ),
    }
    assert _lines(tmp_path, files, "veomni/data/audio_utils.py") == [2]
    assert _lines(tmp_path, files, "veomni/checkpoint/energon_reader.py") == [1]
    assert _lines(tmp_path, files, "veomni/trainer/audio_eval.py") == [1]


def test_required_loaded_elsewhere_or_only_top_level_stay_quiet(tmp_path) -> None:  # noqa: ANN001
    files = {
        # required by the pyproject
        "veomni/trainer/logger.py": "import wandb\n\n\ndef log(x):\n    import wandb\n\n    wandb.log(x)\n",
        # the tree imports it when another module loads: not treated as optional
        "veomni/data/audio_utils.py": _AUDIO.format(top="import librosa"),
        "veomni/data/audio_features.py": "import librosa\n",
        # an extra imported at the top only (a module loaded for that feature): no lazy import says otherwise
        "veomni/data/video_reader.py": "import soundfile\n\n\ndef read(p):\n    return soundfile.read(p)\n",
    }
    for rel in ("trainer/logger.py", "data/audio_utils.py", "data/video_reader.py"):
        assert _lines(tmp_path, files, f"veomni/{rel}") == [], rel


def test_torch_npu_imported_on_the_non_npu_side_of_a_device_test(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/utils/device.py": "IS_NPU_AVAILABLE = False\n",
        "veomni/ops/kernel_registry.py": (
            "from ..utils.device import IS_NPU_AVAILABLE\n\nif not IS_NPU_AVAILABLE:\n    import torch_npu\n"
        ),
        "veomni/distributed/sequence_parallel/fused_norm.py": (
            "from transformers.utils import is_torch_npu_available\n\n\ndef norm(x, w, eps):\n"
            "    if is_torch_npu_available():\n        return x\n    else:\n        import torch_npu\n\n"
            "        return torch_npu.npu_rms_norm(x, w, eps)[0]\n"
        ),
        "veomni/trainer/setup.py": (
            "import torch\n\nfrom ..utils.device import get_device_type\n\n"
            'if get_device_type() != "npu":\n    from torch_npu.contrib import transfer_to_npu  # noqa: F401\n'
            "if torch.cuda.is_available():\n    import torch_npu  # noqa: F401\n"
        ),
    }
    assert _lines(tmp_path, files, "veomni/ops/kernel_registry.py") == [4]
    assert _lines(tmp_path, files, "veomni/distributed/sequence_parallel/fused_norm.py") == [8]
    assert _lines(tmp_path, files, "veomni/trainer/setup.py") == [6, 8]


def test_torch_npu_on_the_npu_side_stays_quiet(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/utils/device.py": "IS_NPU_AVAILABLE = False\n",
        "veomni/trainer/setup.py": (
            "import torch\n\nfrom ..utils.device import IS_NPU_AVAILABLE, get_device_type\n\n"
            "if IS_NPU_AVAILABLE:\n    import torch_npu  # noqa: F401\nelse:\n    import flash_attn  # noqa: F401\n"
            'if get_device_type() == "npu":\n    from torch_npu.contrib import transfer_to_npu  # noqa: F401\n'
            "if not torch.cuda.is_available():\n    import torch_npu  # noqa: F401\n\n\ndef f():\n"
            "    if not IS_NPU_AVAILABLE:\n        return None\n    import torch_npu\n\n    return torch_npu\n"
        ),
    }
    assert _lines(tmp_path, files, "veomni/trainer/setup.py") == []


def test_availability_function_tested_without_a_call(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/utils/import_utils.py": "def is_liger_kernel_available():\n    return False\n",
        "veomni/data/collate_npu_free.py": (
            "from transformers.utils import is_torch_npu_available\n\nif is_torch_npu_available:\n"
            "    import torch_npu  # noqa: F401\n"
        ),
        "veomni/optim/fused.py": (
            "from veomni.utils import import_utils\n\n\ndef build():\n    if import_utils.is_liger_kernel_available:\n"
            "        from liger_kernel.ops import fused_adam\n\n        return fused_adam\n"
            "    if import_utils.is_liger_kernel_available():\n        from liger_kernel.ops import fused_adam\n\n"
            "        return fused_adam\n    return None\n"
        ),
    }
    assert _lines(tmp_path, files, "veomni/data/collate_npu_free.py") == [4]
    assert _lines(tmp_path, files, "veomni/optim/fused.py") == [6]
