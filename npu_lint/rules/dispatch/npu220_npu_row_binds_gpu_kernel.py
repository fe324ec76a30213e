"""NPU220 npu-row-binds-gpu-kernel."""

from __future__ import annotations

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import NPU
from npu_lint.veomni.resolution import MARKERS, binding_gpu_reason, file_bindings, module_of


def _culprit_argument(row, reason: str, tree):  # noqa: ANN001, ANN202
    """Where a register_op row names the GPU callable (its backward, forward or wrapper argument); the row's call
    for the other kinds."""
    import ast

    if row.kind != "register_op" or not isinstance(row.node, ast.Call):
        return _factory_site(row, tree) or row.node
    call = row.node
    by_role = dict(zip(("forward", "backward"), call.args[3:5], strict=False))
    by_role.update({k.arg: k.value for k in call.keywords if k.arg in ("forward", "backward", "wrapper")})
    for role in ("backward", "forward", "wrapper"):
        if reason.startswith(f"its {role} ") and role in by_role:
            return by_role[role]
    return by_role.get("wrapper") or by_role.get("forward") or call


def _factory_site(row, tree):  # noqa: ANN001, ANN202
    """Where a row's factory, defined in this file, takes in the GPU callable it builds (the import of it, else
    the factory's return): the line a reader changes; None when the factory is not a function of this file."""
    import ast

    call = row.node
    factory = next((k.value for k in getattr(call, "keywords", []) if k.arg == "factory"), None)
    if not isinstance(factory, ast.Name) or row.target is None:
        return None
    func = next(
        (
            s
            for s in tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == factory.id
        ),
        None,
    )
    if func is None:
        return None
    for node in ast.walk(func):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            a.name == row.target.attr or (a.asname or a.name) == row.target.attr for a in node.names
        ):
            return node
    return next((n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None), None)


class NpuRowBindsGpuKernel(Rule):
    code = "NPU220"
    name = "npu-row-binds-gpu-kernel"
    summary = (
        "An implementation row that serves Ascend (an `npu` name, an NPU hardware requirement, `requires` "
        "torch_npu) binds a GPU-only callable: its factory, entry or wrapper resolves to a GPU kernel module, "
        "or to the kernel of the same op's GPU-only row."
    )
    why = (
        "What an NPU host runs for an op is what the tree's tables resolve its NPU implementation name to: the "
        "object a `KernelSpec` factory returns, the `module:attr` of a `BackendSpec` entry (or what its factory "
        "entry builds), the forward or wrapper of a `register_op` row. When that object is a Triton/CUDA kernel "
        "(a VeOmni `triton_*` module, `fla`, `liger_kernel`, `quack`...) or the same kernel the op's GPU-only row "
        "binds, the row's name and requirement say Ascend but the resolution lands on GPU code: the NPU build "
        "imports a package Ascend hosts do not have, or launches a CUDA kernel, as soon as the op binds. The "
        "rule follows the row to its callable statically (factory returns through local imports, aliases, "
        "module attributes and adapter calls; module-level backend names; imported kernel modules) and compares "
        "it with the tree's own GPU rows."
    )
    bad = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _npu_layer_norm_factory():
                from .triton_fused import fused_layer_norm as kernel

                return kernel


            KERNEL_REGISTRY.register(
                KernelSpec(
                    name="npu",
                    op_name="layer_norm",
                    variant="standard",
                    factory=_npu_layer_norm_factory,
                    hardware=HardwareRequirement(device_type="npu"),
                )
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="an NPU factory returning a Triton kernel through an alias",
        ),
        Example(
            """
            from ...registry import register_op
            from ...requirement import CudaKernelRequirement, NpuKernelRequirement
            from .standard import ascend as std_ascend
            from .standard import cuda_graph as std_cuda

            register_op("gelu_mlp", "standard", "fast", std_cuda.run, requirement=CudaKernelRequirement())
            register_op("gelu_mlp", "standard", "npu", std_cuda.run, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/gelu_mlp/__init__.py",
            title="the NPU row registers the GPU row's kernel",
        ),
        Example(
            """
            from veomni.ops.config.registry import BackendSpec, apply_per_model_patches

            _FAST_NORM = BackendSpec(entry="veomni.models.toy.device_patch:_make_fast_norm", entry_is_factory=True)


            def _make_fast_norm():
                from veomni.ops.kernels.layer_norm.triton_persistent import persistent_norm

                def forward(self, x):
                    return persistent_norm(x, self.weight)

                return forward


            def apply_toy_device_patch(module):
                apply_per_model_patches(
                    hf_module=module,
                    model_name="Toy",
                    targets={"layer_norm": "ToyNorm"},
                    extra_backends={"layer_norm": {"triton": _FAST_NORM, "npu": _FAST_NORM}},
                )
            """,
            path="veomni/models/toy/device_patch.py",
            title="a model's NPU backend built by a factory that imports a Triton kernel",
        ),
    )
    good = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _npu_layer_norm_factory():
                from . import npu as npu_kernels

                return npu_kernels.layer_norm_npu


            def _triton_layer_norm_factory():
                from .triton_fused import fused_layer_norm

                return fused_layer_norm


            KERNEL_REGISTRY.register(
                KernelSpec(name="npu", op_name="layer_norm", variant="standard", factory=_npu_layer_norm_factory,
                           hardware=HardwareRequirement(device_type="npu"))
            )
            KERNEL_REGISTRY.register(
                KernelSpec(name="triton", op_name="layer_norm", variant="standard", factory=_triton_layer_norm_factory,
                           hardware=HardwareRequirement(device_type="gpu"))
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
        ),
    )
    fix_safety = "No fix: which NPU kernel the row should bind is decided by hand."
    requires = (MARKERS, ("npu", "NPU", "Npu"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        module, is_package = module_of(self.ctx.source.path)
        rows = file_bindings(self.ctx.tree, module, is_package)
        for row in rows:
            if row.device != NPU:
                continue
            reason = binding_gpu_reason(row, rows)
            if reason is None:
                continue
            what = f"`{row.target.dotted}`" if row.target is not None else "what its factory builds"
            where = f"`{row.op}/{row.variant}`" if row.variant != row.op else f"`{row.op}`"
            self.report(
                _culprit_argument(row, reason, self.ctx.tree),
                f"{where} binds its NPU implementation `{row.impl}` to {what}, {reason}: an Ascend host that "
                f"resolves `{row.impl}` gets GPU-only code (an import Ascend lacks, or a CUDA kernel) when the op "
                "binds; bind the op's NPU kernel",
            )
