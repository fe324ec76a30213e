"""NPU213 npu-row-shares-device-name."""

from __future__ import annotations

import ast
from collections import Counter

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import ANY, NPU, OpRow
from npu_lint.veomni.registry import read_registry_rows

_MARKERS = ("register_op", "register_kernel", "KernelSpec")


class NpuRowSharesDeviceName(Rule):
    code = "NPU213"
    name = "npu-row-shares-device-name"
    summary = (
        "A registration row gives an Ascend kernel the implementation name that the same op/variant registers "
        "for another device (a CUDA or MLU kernel), or the reverse."
    )
    why = (
        "VeOmni's registries name implementations per backend: every row of `op/variant/impl` is the same "
        "kernel family, and the per-device requirements only pick the host's build of it (`fla` for CUDA and "
        "MLU, `npu` for Ascend). The ops config selects an implementation by name, and on Ascend it selects the "
        "NPU name (`npu`, `fused_npu`, ...). An NPU kernel registered under a name the op already uses for a "
        "CUDA/MLU kernel (a row copied from the one above and only half renamed) leaves the NPU name without a "
        "row, so `VeomniOp(op, variant, 'npu')` / the NPU slot raises KeyError at model build, while a GPU "
        "config choosing the shared name binds a different kernel per device. The rows are read from this "
        "module (loops expanded) and from the tree's other registry modules."
    )
    bad = (
        Example(
            """
            from ...registry import register_op
            from ...requirement import CudaKernelRequirement, NpuKernelRequirement
            from .scan import ascend as scan_ascend
            from .scan import triton as scan_triton

            register_op("prefix_scan", "standard", "triton", scan_triton.run, requirement=CudaKernelRequirement())
            register_op("prefix_scan", "standard", "triton", scan_ascend.run, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/prefix_scan/__init__.py",
            title="the Ascend kernel is registered under the CUDA kernel's name",
        ),
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

            for _hw in (HardwareRequirement(device_type="gpu"), HardwareRequirement(device_type="npu")):
                KERNEL_REGISTRY.register(
                    KernelSpec(
                        name="fused",
                        op_name="expert_mlp",
                        variant="standard",
                        factory=lambda: None,
                        hardware=_hw,
                    )
                )
            """,
            path="veomni/ops/kernels/expert_mlp/__init__.py",
            title="one name registered for both devices through a loop",
        ),
    )
    good = (
        Example(
            """
            from ...registry import register_op
            from ...requirement import CudaKernelRequirement, MluKernelRequirement, NpuKernelRequirement
            from .scan import ascend as scan_ascend
            from .scan import triton as scan_triton

            register_op("prefix_scan", "standard", "triton", scan_triton.run, requirement=CudaKernelRequirement())
            register_op("prefix_scan", "standard", "triton", scan_triton.run, requirement=MluKernelRequirement())
            register_op("prefix_scan", "standard", "npu", scan_ascend.run, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/prefix_scan/__init__.py",
        ),
    )
    fix_safety = "No fix: which of the two rows carries the wrong name has to be decided by hand."
    requires = (_MARKERS, ("Npu", "npu", "NPU"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.kernel and not ctx.source.kind.test

    def finish(self) -> None:
        _ops, _slots, where, slot_where = read_registry_rows(self.ctx.tree)
        local = where + slot_where
        if not local:
            return
        project = self.ctx.project
        table: set[OpRow] = set(project.registered) | set(project.slot_rows) | {row for row, _line in local}
        devices: dict[tuple[str, str, str], set[str]] = {}
        for row in table:
            devices.setdefault(row.triple, set()).add(row.requirement)
        npu_names = Counter(row.impl for row in table if row.requirement == NPU)
        seen: set[tuple[str, str, str]] = set()
        for row, line in sorted(local, key=lambda item: (item[0].requirement != NPU, item[1])):
            reqs = devices.get(row.triple, set())
            others = sorted(reqs - {NPU, ANY})
            if NPU not in reqs or not others or row.triple in seen:
                continue
            seen.add(row.triple)
            op, variant, impl = row.triple
            usual = [name for name, _n in npu_names.most_common() if name != impl]
            hint = f" (this tree's other NPU rows are named `{usual[0]}`)" if usual else ""
            self.report(
                self._name_node(line),
                f"`{op}/{variant}` registers `{impl}` for {', '.join(others)} and for npu: the Ascend kernel "
                f"shares the {'/'.join(others)} kernel's implementation name, so the NPU name the ops config "
                f"selects has no row for it (KeyError at model build) and a config choosing `{impl}` binds a "
                f"different kernel per device; register the NPU kernel under its own name{hint}",
            )

    def _name_node(self, line: int) -> ast.AST:
        """The implementation-name argument of the registration call starting at ``line`` (or the call)."""
        for node in ast.walk(self.ctx.tree):
            if isinstance(node, ast.Call) and node.lineno == line:
                for kw in node.keywords:
                    if kw.arg in ("name", "impl", "implementation", "impl_name"):
                        return kw.value
                if len(node.args) >= 3:
                    return node.args[2]
                return node
        return self.ctx.tree
