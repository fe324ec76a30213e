"""Requirement checks of the demo's kernel backends, run before a backend is bound."""

import importlib.util


def check_backend_requires(requires: tuple[str, ...]) -> None:
    for pkg in requires:
        if pkg == "liger_kernel":
            if importlib.util.find_spec("liger_kernel") is None:
                raise RuntimeError("the liger_kernel backend needs liger-kernel")
        elif pkg == "torch_npu":
            # NPU226: the torch_npu requirement is probed with the Liger package
            if importlib.util.find_spec("liger_kernel") is None:
                raise RuntimeError("the npu backend needs torch_npu")
