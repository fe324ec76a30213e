"""NPU224 gpu-row-any-device."""

from __future__ import annotations

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import ANY
from npu_lint.veomni.resolution import MARKERS, binding_gpu_reason, file_bindings, module_of, names_gpu


class GpuRowAnyDevice(Rule):
    code = "NPU224"
    name = "gpu-row-any-device"
    summary = (
        "A kernel row that binds GPU-only code (a Triton / Liger / TileLang / CUDA kernel, by its implementation "
        'name or by the callables it binds) is declared hardware-agnostic (`device_type="any"`, or a '
        "`register_op` row without a requirement): its selection passes the hardware gate on Ascend."
    )
    why = (
        "The hardware requirement of a row is what makes a GPU selection fail early and clearly on an NPU host "
        "(`RuntimeError` at bind time, or the config's NPU fallback choosing another row). A row declared for "
        "any device (VeOmni keeps `any` for pure-PyTorch kernels such as `chunk_loss`) is bound wherever it is "
        "selected: when it binds a GPU kernel, an Ascend run that selects it imports a package Ascend lacks or "
        "launches a CUDA kernel in the middle of the forward (or of the first backward). The rule reads every "
        "row of the module statically (rows registered in loops over literals included), with every callable "
        "it binds (a raw forward/backward pair, a factory's adapter and the kernel handed to it)."
    )
    bad = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _triton_norm_factory():
                from .triton_fused import fused_norm

                return fused_norm


            KERNEL_REGISTRY.register(
                KernelSpec(
                    name="triton",
                    op_name="layer_norm",
                    variant="standard",
                    factory=_triton_norm_factory,
                    hardware=HardwareRequirement(device_type="any"),
                )
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="a Triton row declared hardware-agnostic",
        ),
        Example(
            """
            from ...registry import register_op
            from .standard import chunked as ce_chunk
            from .standard import liger_kernel as ce_liger

            register_op("token_loss", "standard", "chunked", ce_chunk.forward, ce_liger.backward)
            """,
            path="veomni/ops/kernels/token_loss/__init__.py",
            title="a device-agnostic row whose backward is the Liger kernel",
        ),
    )
    good = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _chunked_factory():
                from .chunked import chunked_norm

                return chunked_norm


            KERNEL_REGISTRY.register(
                KernelSpec(
                    name="chunked",
                    op_name="layer_norm",
                    variant="standard",
                    factory=_chunked_factory,
                    hardware=HardwareRequirement(device_type="any"),
                )
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="a pure-PyTorch row for any device",
        ),
    )
    fix_safety = (
        'No fix: the row\'s requirement (`device_type="gpu"`, `CudaKernelRequirement()`) is written by hand.'
    )
    requires = (MARKERS,)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        module, is_package = module_of(self.ctx.source.path)
        rows = file_bindings(self.ctx.tree, module, is_package)
        seen: set[int] = set()
        for row in rows:
            if row.device != ANY or row.kind not in ("kernel_spec", "register_op"):
                continue
            gpu_name = names_gpu(row.impl)
            reason = (
                f"its implementation name `{row.impl}` names {gpu_name}"
                if gpu_name is not None
                else binding_gpu_reason(row, rows)
            )
            if reason is None:
                continue
            where = row.hardware_node if row.hardware_node is not None else row.node
            if id(where) in seen:
                continue
            seen.add(id(where))
            declared = (
                "is declared for any device"
                if row.hardware_node is not None
                else "has no requirement (selectable on every device)"
            )
            self.report(
                where,
                f"`{row.op}/{row.variant}/{row.impl}` {declared} but runs GPU-only code ({reason}): on an Ascend "
                "host a selection of it passes the hardware gate and fails inside the kernel; give it the GPU "
                "requirement",
            )
