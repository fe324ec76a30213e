"""The HCCL reduce-op workarounds of a VeOmni tree, found statically (never imported).

HCCL, the collective backend on Ascend NPUs, lacks ``ReduceOp.PREMUL_SUM``, which FSDP2 uses for its
reduce-scatter as soon as a module is given a gradient divide factor other than its group size. NPU ports
install a patch that rewrites those collectives (``torch.distributed.reduce_scatter_tensor = wrapper(...)``,
SUM then a scale). :func:`read_premul_patches` finds, outside the model packages, each module-level function
that installs such a patch (a file that names ``PREMUL_SUM`` and assigns a ``torch.distributed`` collective
inside a top-level ``def``) and the files that call it, reading bytes only.

:func:`host_meant_argument` names the collective arguments that belong on the host: VeOmni's expert-parallel
all-to-all (``_AllToAll.apply(group, tokens, input_splits, output_splits)``) reads its split sizes as Python
integers, so a host copy handed there is intended.

:func:`accessor_dimensions` names the mesh dimensions a parallel-state group accessor of VeOmni is meant to
return when its name is not the dimension's (``fsdp_group`` is the ``dp_sp`` group: FSDP shards over data x
sequence parallel ranks), so an accessor that returns the same group under its own name is a synonym.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from npu_lint.core.safeio import read_regular

_SKIP = {".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist", "generated"}
_MODEL_DIRS = {"models", "models_kernel"}  # model packages never install process-wide patches
_ASSIGN = re.compile(
    rb"^[ \t]+(?:torch\.distributed|dist)\.(?:all_reduce|reduce_scatter\w*|all_gather\w*)\s*=", re.M
)
_DEF = re.compile(rb"^def (\w+)\(", re.M)
# Keywords of the collectives and `torch.split` whose value is a list of Python ints (host values): a tensor
# handed there is copied to the host first.
SPLIT_SIZE_KEYWORDS = frozenset(
    {"input_split_sizes", "output_split_sizes", "split_size_or_sections", "split_sizes"}
)
_HOST_ARGUMENT_WORDS = ("split", "sizes")  # all-to-all split sizes: input_splits, output_split_sizes, ...


# parallel_state.py accessors whose name differs from the mesh dimension they return
_ACCESSOR_DIMENSIONS: dict[str, frozenset[str]] = {"fsdp_group": frozenset({"dp_sp"})}


def accessor_dimensions(name: str) -> frozenset[str]:
    """The mesh dimensions VeOmni's group accessor ``name`` returns (``fsdp_group`` -> ``{"dp_sp"}``); empty when
    only the accessor named after a dimension (``dp_group`` -> ``dp``) is known."""
    return _ACCESSOR_DIMENSIONS.get(name, frozenset())


def host_meant_argument(name: str) -> bool:
    """``input_splits`` / ``output_sizes``: an argument a collective reads as host integers (split sizes)."""
    lowered = name.lower()
    return any(word in lowered for word in _HOST_ARGUMENT_WORDS)


def read_premul_patches(root: Path) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(function, defining file, calling files) of every PREMUL_SUM collective patch under ``root/veomni``;
    paths relative to ``root``."""
    texts: dict[str, bytes] = {}
    base = root / "veomni"
    for dirpath, dirnames, filenames in os.walk(base):
        top = Path(dirpath) == base
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP and not d.startswith(".") and not (top and d in _MODEL_DIRS)
        )
        for name in filenames:
            if not name.endswith(".py"):
                continue
            path = Path(dirpath) / name
            try:
                texts[str(path.relative_to(root))] = read_regular(path)[0]
            except (OSError, ValueError):
                continue
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for rel, data in sorted(texts.items()):
        if b"PREMUL_SUM" not in data:
            continue
        defs = [(m.start(), m.group(1)) for m in _DEF.finditer(data)]
        found: set[str] = set()
        for assign in _ASSIGN.finditer(data):
            owner = [name for start, name in defs if start < assign.start()]
            if owner:
                found.add(owner[-1].decode())
        for function in sorted(found):
            called = function.encode() + b"("  # the literal every match holds: a byte search skips most files
            call = re.compile(rb"(?<![\w.])" + re.escape(function.encode()) + rb"\(")
            callers = tuple(
                other
                for other, text in sorted(texts.items())
                if called in text
                and any(
                    not text[max(0, m.start() - 4) : m.start()].endswith(b"def ") for m in call.finditer(text)
                )
            )
            out.append((function, rel, callers))
    return tuple(out)
