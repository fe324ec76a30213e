"""A minimal VeOmni checkout for tests: the packages and the device helpers that fixes import (a fix never
imports a name the tree does not define)."""

from __future__ import annotations

from pathlib import Path

DEVICE_HELPERS = (
    "IS_CUDA_AVAILABLE = False\nIS_NPU_AVAILABLE = False\n\n\n"
    "def get_device_type():\n    return 'cpu'\n\n\n"
    "def get_torch_device():\n    return None\n\n\n"
    "def get_device_id():\n    return 0\n\n\n"
    "def get_dist_comm_backend():\n    return 'gloo'\n\n\n"
    "def synchronize():\n    pass\n\n\n"
    "def empty_cache():\n    pass\n"
)


def make_veomni_stub(root: Path) -> Path:
    """``root/veomni`` with ``ops/`` and ``utils/device.py`` (the helpers' names only)."""
    for sub in ("veomni", "veomni/ops", "veomni/utils"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        init = root / sub / "__init__.py"
        if not init.exists():
            init.write_text("")
    (root / "veomni" / "utils" / "device.py").write_text(DEVICE_HELPERS)
    return root
