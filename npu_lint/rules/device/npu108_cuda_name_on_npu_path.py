"""NPU108 cuda-name-on-npu-path."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.device._shared import cuda_string, is_nccl
from npu_lint.rules.device.npu107_device_branch_mismatch import branch_device

_DEVICE_WORDS = ("device", "backend", "map_location")


def _device_named(node: ast.AST) -> str | None:
    name = last_name(node)
    if name and any(word in name.lower() for word in _DEVICE_WORDS):
        return name
    return None


def _given_test(test: ast.AST) -> str | None:
    """``device`` / ``device is not None`` (the value was given): the device-named value tested, else None."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.IsNot, ast.NotEq))
    ):
        right = test.comparators[0]
        if isinstance(right, ast.Constant) and right.value is None:
            return _device_named(test.left)
        return None
    return _device_named(test)


class CudaNameOnNpuPath(Rule):
    code = "NPU108"
    name = "cuda-name-on-npu-path"
    summary = (
        'A CUDA-only name (`"nccl"`, `"cuda"`) is what a branch taken only on NPU hosts returns or assigns, or '
        'what a device/backend fallback (`device or "cuda"`) picks when the caller gave none.'
    )
    why = (
        "Device-neutral code chooses the device type and the collective backend from the host (VeOmni's "
        "`get_device_type()` and `get_dist_comm_backend()`: `cuda`/`nccl` on GPUs, `npu`/`hccl` on Ascend). A "
        'branch that only runs on NPU hosts (`elif IS_NPU_AVAILABLE:`, `if device_type == "npu":`) and still '
        'returns `"nccl"` or `"cuda"` hands every caller a backend/device that does not exist there: '
        "`init_process_group` fails, and every `is_hccl_backend()` workaround is switched off. A fallback for a "
        'missing argument (`init_device = init_device or "cuda"`, `d if d is not None else "cuda"`) does the '
        "same to every caller that relies on the default: loading a checkpoint or adapter fails on Ascend "
        "before training starts."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


            def comm_backend() -> str:
                if IS_CUDA_AVAILABLE:
                    return "nccl"
                elif IS_NPU_AVAILABLE:
                    return "nccl"
                raise RuntimeError("no backend")


            def load_adapter(path, map_device=None):
                map_device = map_device if map_device is not None else "cuda"
                return read_weights(path, map_device)
            """,
            path="veomni/utils/toy_device.py",
            title="the NPU branch names NCCL; a CUDA fallback device",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_device_type


            def comm_backend() -> str:
                if IS_CUDA_AVAILABLE:
                    return "nccl"
                elif IS_NPU_AVAILABLE:
                    return "hccl"
                raise RuntimeError("no backend")


            def load_adapter(path, map_device=None):
                map_device = map_device or get_device_type()
                return read_weights(path, map_device)
            """,
            path="veomni/utils/toy_device.py",
            title="each host's own backend; the host's device as the fallback",
        ),
    )
    fix_safety = (
        "No fix: the NPU branch's value (`hccl`, `npu`) or the tree's device helper is the author's choice."
    )
    requires = (("nccl", "cuda"),)
    node_types = (ast.Constant,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Constant)
        if not (is_nccl(node) or cuda_string(node)):
            return
        parent = self.ctx.parents[-1] if self.ctx.parents else None
        if isinstance(parent, (ast.Return, ast.Assign, ast.AnnAssign, ast.keyword, ast.Yield)):
            found = branch_device(self.ctx, node)
            if found and found[0] == "npu":
                self.report(
                    node,
                    f"`{node.value!r}` is given on a path taken only on NPU hosts (`"
                    f"{self.ctx.source.segment(found[1])}`): it names the CUDA "
                    + (
                        "collective backend; Ascend's is `hccl`"
                        if is_nccl(node)
                        else "device; Ascend's is `npu`"
                    ),
                )
                return
        # a fallback for a missing device/backend: `x or "cuda"`, `x if x is not None else "cuda"`
        fallback_of: str | None = None
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or) and parent.values[-1] is node:
            fallback_of = next((n for n in map(_device_named, parent.values[:-1]) if n), None)
        elif isinstance(parent, ast.IfExp) and parent.orelse is node:
            fallback_of = _given_test(parent.test)
        if fallback_of:
            self.report(
                node,
                f"`{fallback_of}` falls back to `{node.value!r}` when no value was given: every caller that "
                "relies on the default gets a CUDA "
                + ("backend" if is_nccl(node) else "device")
                + " on Ascend; fall back to the host's (`get_device_type()` / `get_dist_comm_backend()`)",
            )
