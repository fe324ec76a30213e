"""Which accelerator backend a piece of kernel code is written for, read statically.

VeOmni's ``veomni/ops`` tree holds three kinds of files side by side: CUDA kernels (Triton, TileLang, QuACK,
cuDNN/FlashMLA, FA4 ...) that only ever run on NVIDIA hosts, Ascend adapters (``npu*.py``, ``_ascend/``,
``torch_npu`` callers) that only ever run on NPU hosts, and device-neutral code (eager fallbacks, chunked
losses, scatter helpers, the registries, benchmark and device utilities) that runs on both. A file's backend
decides what CUDA names mean in it: inside a CUDA kernel file ``torch.cuda.*`` is the point; in an Ascend adapter
it is a crash; in neutral code it is a crash on one of the two hosts. The device rules ask this model instead of
treating all of ``veomni/ops`` as out of scope.

The answer comes from the path (directory and file names) and the file's own imports, never by importing.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import PurePath

from npu_lint.core.safeio import read_regular

CUDA = "cuda"
NPU = "npu"
ANY = "any"

# libraries and words that exist only on NVIDIA hosts (a module named after one is a CUDA kernel)
_CUDA_LIBS = (
    "triton", "tilelang", "cutlass", "quack", "flash_attn", "flashmla", "flash_mla", "deep_gemm", "deepgemm",
    "liger", "cudnn", "mamba_ssm", "causal_conv1d", "transformer_engine", "apex", "cuda", "cupy", "fa3", "fa4",
    "sageattention", "nvtx", "pynvml", "tile_kernels", "magi",
)  # fmt: skip
# "gpu" is not a CUDA word: VeOmni says "gpu" for any accelerator (``load_model_to_gpu``, the ``*_gpu`` generated
# builds that NPU hosts also run)
_CUDA_WORD = re.compile(r"(^|[_/.])(" + "|".join(_CUDA_LIBS) + r")($|[_/.\d])")
_NPU_WORD = re.compile(r"(^|[_/.])(npu|ascend|ascendc|hccl|torch_npu)($|[_/.\d])")


def path_backend(path: str) -> str:
    """The backend a path names: an ``npu``/``ascend`` file or directory is NPU code, a ``triton``/``tilelang``/
    ``cuda``/``gpu``... one is CUDA code (the NPU word wins: ``_ascend/triton/`` is Triton for Ascend)."""
    parts = PurePath(path.replace("\\", "/")).parts
    try:  # only the part under veomni/ops (or the last three components) speaks for the code
        start = max(i for i, p in enumerate(parts) if p == "ops") + 1
    except ValueError:
        start = max(0, len(parts) - 3)
    tail = "/".join(parts[start:]).lower().removesuffix(".py")
    if _NPU_WORD.search(tail):
        return NPU
    if _CUDA_WORD.search(tail):
        return CUDA
    return ANY


def name_backend(name: str) -> str:
    """The backend a class or function name declares (``CudaKernelRequirement``, ``triton_rope``,
    ``NpuKernelRequirement``, ``npu_fused_moe_forward``), else ANY."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    if _NPU_WORD.search(snake):
        return NPU
    if _CUDA_WORD.search(snake):
        return CUDA
    return ANY


def import_backend(tree: ast.Module) -> str:
    """What the module-level imports commit the file to: ``torch_npu`` -> NPU; a CUDA-only library (``triton``,
    ``tilelang``, ``quack``...) or a sibling module named after one -> CUDA; both (a dispatcher) or neither -> ANY. Imports under a guard
    (``if IS_CUDA_AVAILABLE:``, ``try:``) do not commit the file."""
    npu = cuda = False
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            names = [a.name for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            names = [stmt.module or ""] + [f"{stmt.module or ''}.{a.name}" for a in stmt.names]
        else:
            continue
        for name in names:
            low = name.lower()
            if _NPU_WORD.search(low):
                npu = True
            elif (
                _CUDA_WORD.search(low) and "device" not in low
            ):  # `utils.device` is the neutral helper module
                cuda = True
    if npu and cuda:
        return ANY  # a dispatcher importing both backends' kernels (a registration ``__init__``)
    if npu:
        return NPU
    return CUDA if cuda else ANY


_IMPORT_LINE = re.compile(r"^(?:from|import)[ \t]+([\w.]+)", re.M)


def _text_backend(name: str, text: str) -> str:
    """A sibling's backend from its name and its unindented import lines (no parse)."""
    by_path = path_backend(name)
    if by_path != ANY:
        return by_path
    modules = [m.lower() for m in _IMPORT_LINE.findall(text)]
    npu = any(_NPU_WORD.search(m) for m in modules)
    cuda = any(_CUDA_WORD.search(m) and "device" not in m for m in modules)
    if npu:
        return ANY if cuda else NPU
    return CUDA if cuda else ANY


def directory_backend(directory: str) -> str:
    """The backend of a kernel package: CUDA when some of its modules are CUDA kernels and none is an Ascend
    adapter (``deepseek_v4/``: TileLang kernels and their helpers; ``_kernels/utils/``: Triton tuning and
    benchmark helpers), NPU in the mirror case, else ANY (a mixed package, such as one holding both the Triton
    and the NPU grouped GEMM). Remembered per state of the directory's modules (names, sizes, mtimes), so a
    long-lived process (the language server) sees an edited or a new module."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ANY
    state: list[tuple[str, int, int]] = []
    for name in names[:200]:
        if name.endswith(".py") and name != "__init__.py":
            try:
                st = os.stat(os.path.join(directory, name))
            except OSError:
                continue
            state.append((name, st.st_size, st.st_mtime_ns))
    return _directory_backend_at(directory, tuple(state))


@functools.lru_cache(maxsize=256)
def _directory_backend_at(directory: str, state: tuple[tuple[str, int, int], ...]) -> str:
    seen: set[str] = set()
    for name, _size, _mtime in state:
        if not name.endswith(".py") or name == "__init__.py":
            continue
        try:
            text = read_regular(os.path.join(directory, name), limit=1 << 20)[0][:8192].decode(
                "utf-8", "replace"
            )
        except OSError:
            continue
        seen.add(_text_backend(name, text))
    if CUDA in seen and NPU not in seen:
        return CUDA
    if NPU in seen and CUDA not in seen:
        return NPU
    return ANY


def file_backend(path: str, tree: ast.Module) -> str:
    """The backend of a file of kernel code: NPU (an Ascend adapter), CUDA (a CUDA kernel) or ANY (neutral):
    its path, else its own imports, else its package's (a helper module of a CUDA kernel package is CUDA code),
    unless it imports the tree's device-neutral helpers (then it is neutral: written for any accelerator).
    """
    by_path = path_backend(path)
    if by_path != ANY:
        return by_path
    by_imports = import_backend(tree)
    if by_imports != ANY or not path or path.startswith("<") or imports_device_helpers(tree):
        return by_imports
    return directory_backend(os.path.dirname(os.path.abspath(path)))


# the tree's device-neutral helpers (``veomni.utils.device``): a file that imports one is written for any accelerator
_DEVICE_HELPERS = frozenset(
    {
        "get_torch_device",
        "get_device_type",
        "get_device_id",
        "synchronize",
        "empty_cache",
        "create_stream",
        "create_event",
    }
)


DEVICE_HELPERS = _DEVICE_HELPERS  # what rules ask: a call of one of these is device-neutral code


def imports_device_helpers(tree: ast.Module) -> bool:
    """Whether the module imports the tree's device-neutral helpers at its top (``from ...utils.device import
    get_torch_device``): its author wrote it to run on any accelerator, whatever its package holds."""
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.ImportFrom)
            and (stmt.module or "").rsplit(".", 1)[-1] == "device"
            and any(a.name in _DEVICE_HELPERS for a in stmt.names)
        ):
            return True
    return False
