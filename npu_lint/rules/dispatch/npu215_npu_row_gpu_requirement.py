"""NPU215 npu-row-gpu-requirement."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import ANY, CONFIG_FIELD_TO_OP, NPU, OpRow
from npu_lint.veomni.registry import module_constants, read_registry_rows
from npu_lint.veomni.vendor_map import NPU_VENDOR, VENDOR_PACKAGES

_ROW_MARKERS = ("register_op", "register_kernel", "KernelSpec")


def _names_npu(name: str | None) -> bool:
    """``npu``, ``fused_npu``, ``npu-fast``: "npu" as a word of the name (not ``inputs``)."""
    return name is not None and "npu" in re.split(r"[^a-z0-9]+", name.lower())


def _requires(call: ast.Call, constants: dict[str, ast.expr] | None = None) -> list[ast.expr]:
    """The package names of ``BackendSpec(..., requires=("pkg", ...))`` (string constants, also through a
    module-level name bound to the tuple)."""
    for kw in call.keywords:
        if kw.arg == "requires":
            value = kw.value
            if isinstance(value, ast.Name) and constants and value.id in constants:
                value = constants[value.id]
            items = value.elts if isinstance(value, (ast.Tuple, ast.List, ast.Set)) else [value]
            return [item for item in items if str_value(item) is not None]
    return []


def _npu_package(name: str) -> bool:
    return VENDOR_PACKAGES.get(name.split(".")[0]) == NPU_VENDOR


def _gpu_package(name: str) -> bool:
    family = VENDOR_PACKAGES.get(name.split(".")[0])
    return family is not None and family != NPU_VENDOR


class NpuRowGpuRequirement(Rule):
    code = "NPU215"
    name = "npu-row-gpu-requirement"
    summary = (
        "An NPU entry of an op table is gated on a GPU requirement (an NPU backend requiring a GPU vendor "
        "package or its GPU sibling's package, an NPU-named row with CUDA hardware), or the row the NPU path "
        "remaps to is registered for CUDA only."
    )
    why = (
        "Every op VeOmni dispatches on Ascend resolves to a row (a `register_op` / `KernelSpec` row, or a "
        "`BackendSpec` of an ops table) whose requirement an NPU host meets: `torch_npu`, "
        "`NpuKernelRequirement`, `HardwareRequirement(device_type='npu')`, or no device at all. An NPU backend "
        "whose `requires=` names the GPU sibling's package (a `liger_kernel` entry copied and half edited) or "
        "another GPU vendor library raises 'not installed' on every Ascend host (and, where that package "
        "happens to be present, drops the torch_npu check); an NPU-named row declared for CUDA hardware is "
        "filed under the CUDA device key. The same holds for the row the NPU path reads under another name: "
        "when the tree's specs remap the NPU name (`resolve_op_impl(field, npu_as='chunk_loss')`), that row "
        "must be registered for the NPU (or any device); registered under a CUDA requirement it is keyed to "
        "`cuda`, and every model build on Ascend raises 'not registered for device npu'. The sibling entries, "
        "the remaps and the rows are this tree's own."
    )
    bad = (
        Example(
            """
            from ...config.registry import BackendSpec, OpSpec, register_op

            register_op(
                OpSpec(
                    name="layer_norm",
                    config_field="layer_norm_implementation",
                    backends={
                        "apex": BackendSpec(entry="apex.normalization:FusedLayerNorm", requires=("apex",)),
                        "npu": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:forward", requires=("apex",)),
                        "npu_fused": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:fused", requires=("triton",)),
                    },
                )
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="NPU backends requiring the GPU sibling's package, or another GPU library",
        ),
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

            KERNEL_REGISTRY.register(
                KernelSpec(
                    name="npu",
                    op_name="token_mixer",
                    variant="standard",
                    factory=lambda: None,
                    hardware=HardwareRequirement(device_type="gpu"),
                )
            )
            """,
            path="veomni/ops/kernels/token_mixer/__init__.py",
            title="an NPU-named KernelSpec declared for GPU hardware",
        ),
    )
    good = (
        Example(
            """
            from ...config.registry import BackendSpec, OpSpec, register_op
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

            register_op(
                OpSpec(
                    name="layer_norm",
                    config_field="layer_norm_implementation",
                    backends={
                        "apex": BackendSpec(entry="apex.normalization:FusedLayerNorm", requires=("apex",)),
                        "npu": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:forward", requires=("torch_npu",)),
                    },
                )
            )
            KERNEL_REGISTRY.register(
                KernelSpec(name="npu", op_name="token_mixer", variant="standard", factory=lambda: None,
                           hardware=HardwareRequirement(device_type="npu"))
            )
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
        ),
    )
    fix_safety = "No fix: the NPU entry's requirement (or the row's device) is chosen by hand."
    requires = (("npu", "Npu", "NPU", *_ROW_MARKERS),)
    node_types = (ast.Dict,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._constants: dict[str, ast.expr] | None = None

    @property
    def constants(self) -> dict[str, ast.expr]:
        """Module-level ``NAME = <expr>`` bindings (read once, when a backend table is met)."""
        if self._constants is None:
            self._constants = module_constants(self.ctx.tree)
        return self._constants

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Dict)
        entries: list[tuple[str, ast.Call]] = []
        for key, value in zip(node.keys, node.values, strict=False):
            name = str_value(key) if key is not None else None
            if name is not None and isinstance(value, ast.Call) and _requires(value, self.constants):
                entries.append((name, value))
        if not any(_names_npu(name) for name, _call in entries):
            return
        sibling: dict[str, str] = {}  # package -> the non-NPU entry requiring it
        for name, call in entries:
            if not _names_npu(name):
                for item in _requires(call, self.constants):
                    sibling.setdefault(str_value(item) or "", name)
        for name, call in entries:
            if not _names_npu(name):
                continue
            requires = _requires(call, self.constants)
            # an entry that requires the NPU runtime itself shares the rest with its siblings legitimately
            # (`einops`, `torch`): only a GPU vendor package beside it is wrong
            own_runtime = any(_npu_package(str_value(item) or "") for item in requires)
            for item in requires:
                package = str_value(item) or ""
                if package in sibling and not own_runtime:
                    why = f"the package the `{sibling[package]}` entry of the same table requires"
                elif _gpu_package(package):
                    why = "a GPU-only vendor package"
                else:
                    continue
                inside = call.lineno <= item.lineno <= (call.end_lineno or call.lineno)
                self.report(
                    item if inside else call,  # a module constant's item: reported on the backend
                    f'the NPU backend "{name}" requires `{package}`, {why}: on an Ascend host without it the '
                    f"backend raises 'not installed' (and where it is installed the torch_npu check is lost); "
                    "require `torch_npu`",
                )

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        if not ctx.source.kind.kernel or not any(marker in text for marker in _ROW_MARKERS):
            return
        _ops, _slots, where, slot_where = read_registry_rows(ctx.tree)
        local = where + slot_where
        if not local:
            return
        project = ctx.project
        table: set[OpRow] = set(project.registered) | set(project.slot_rows) | {row for row, _line in local}
        capable = {row.triple for row in table if row.requirement in (NPU, ANY)}
        remapped: dict[tuple[str, str], str] = {}
        for resolver, field, value, at in project.npu_remaps:
            op = CONFIG_FIELD_TO_OP.get(field, field.removesuffix("_implementation"))
            remapped.setdefault((op, value), f'`{resolver}("{field}", npu_as="{value}")` ({at})')
        seen: set[tuple[str, str, str]] = set()
        for row, line in sorted(local, key=lambda item: item[1]):
            if row.requirement in (NPU, ANY) or row.triple in seen:
                continue
            op, variant, impl = row.triple
            if _names_npu(impl) and row.triple not in capable:
                seen.add(row.triple)
                self.report(
                    self._line_node(line),
                    f"`{op}/{variant}/{impl}` is an NPU-named row registered for {row.requirement}: it is filed "
                    "under that device key, so on an Ascend host the NPU name has no row (KeyError / 'not "
                    "registered for device npu' at model build); give it the NPU requirement",
                )
                continue
            read = remapped.get((op, impl))
            if read is not None and row.triple not in capable:
                seen.add(row.triple)
                self.report(
                    self._line_node(line),
                    f"`{op}/{variant}/{impl}` is the row the NPU path reads ({read} maps the NPU name to it) "
                    f"but it is registered for {row.requirement} only: on an Ascend host the lookup by device "
                    "finds no row and every model build raises; register it for any device (or for npu too)",
                )

    def _line_node(self, line: int) -> ast.AST:
        """The row's call at ``line``, narrowed to its device gate (``hardware=`` / ``requirement=``) when it
        spells one, so the finding lands on the requirement that files the row under the wrong device."""
        for node in ast.walk(self.ctx.tree):
            if isinstance(node, ast.Call) and node.lineno == line:
                for kw in node.keywords:
                    if kw.arg in ("hardware", "requirement"):
                        return kw.value
                return node
        return self.ctx.tree
