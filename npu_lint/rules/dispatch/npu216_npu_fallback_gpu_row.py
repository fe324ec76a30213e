"""NPU216 npu-fallback-gpu-row."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch.npu211_npu_required_table import _field_tables
from npu_lint.rules.dispatch.npu212_npu_fallback_incomplete import _is_fallback_table
from npu_lint.veomni.catalog import ANY, CONFIG_FIELD_TO_OP, NPU, OpRow
from npu_lint.veomni.registry import read_registry_rows

_SUFFIX = "_implementation"


def field_ops(field: str) -> set[str]:
    """The registry op names an ops-config field may select (``rms_norm_implementation`` -> ``rms_norm``; the
    tree's names first, the catalog's spelling as well: ``rotary_pos_emb`` / ``rope``)."""
    stem = field.removesuffix(_SUFFIX)
    ops = {stem, stem.removesuffix("_vision")}
    if field in CONFIG_FIELD_TO_OP:
        ops.add(CONFIG_FIELD_TO_OP[field])
    return ops


def gpu_only(rows: list[OpRow]) -> bool:
    """Rows exist and none of them is available on an NPU host."""
    return bool(rows) and not any(r.requirement in (NPU, ANY) for r in rows)


class NpuFallbackGpuRow(Rule):
    code = "NPU216"
    name = "npu-fallback-gpu-row"
    summary = (
        "The ops config's NPU default table maps a field to an implementation whose registry rows are all "
        "GPU-only (the NPU default keeps a CUDA kernel)."
    )
    why = (
        "On an Ascend host VeOmni swaps every ops-config field still at its GPU default for the value of its NPU "
        "default table, so that a default config binds kernels the NPU has. A value whose every row in the "
        "tree's registry requires a GPU (`KernelSpec(..., hardware=HardwareRequirement(device_type='gpu'))`, "
        "`requirement=CudaKernelRequirement()`) keeps the CUDA kernel on the NPU: binding it raises at model "
        "build (the hardware check) or, where an allow-list lets it through, the op runs a Triton/CUDA kernel "
        "that does not exist there. NPU212 compares this table with the NPU allow-list; this rule compares it "
        "with the registry rows of each field's op, read from the tree (names, ops and rows are the tree's)."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass

            from veomni.ops.registry import register_op
            from veomni.ops.requirement import CudaKernelRequirement

            register_op("token_mixer", "standard", "fused", None, requirement=CudaKernelRequirement())
            register_op("token_mixer", "standard", "eager", None)

            _NPU_FALLBACK = {
                "token_mixer_implementation": "fused",
                "layer_norm_implementation": "npu",
            }


            @dataclass
            class OpsChoice:
                token_mixer_implementation: str = "fused"
                layer_norm_implementation: str = "apex"
            """,
            path="veomni/arguments/toy_ops.py",
            title='the NPU default of `token_mixer` is "fused", whose only row requires CUDA (rows registered in '
            "the module itself, or anywhere in the tree)",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.registry import register_op
            from veomni.ops.requirement import CudaKernelRequirement, NpuKernelRequirement

            register_op("token_mixer", "standard", "fused", None, requirement=CudaKernelRequirement())
            register_op("token_mixer", "standard", "fused", None, requirement=NpuKernelRequirement())

            _NPU_FALLBACK = {"token_mixer_implementation": "fused", "layer_norm_implementation": "npu"}
            """,
            path="veomni/arguments/toy_ops.py",
        ),
    )
    fix_safety = "No fix: the field's NPU value (an NPU row's name, or eager) is chosen by hand."
    requires = (_SUFFIX, ("NPU", "Npu", "npu"))
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        project = self.ctx.project
        rows: tuple[OpRow, ...] = (*project.registered, *project.slot_rows)
        text = self.ctx.source.text
        if any(marker in text for marker in ("register_op", "register_kernel", "KernelSpec")):
            _ops, _slots, where, slot_where = read_registry_rows(node)  # rows this module registers itself
            rows = (*rows, *(row for row, _line in where + slot_where))
        if not rows:
            return
        for name, _stmt, table, _values in _field_tables(node):
            if not _is_fallback_table(name, table):
                continue
            for key, value in zip(table.keys, table.values, strict=False):
                field = key.value if isinstance(key, ast.Constant) else None
                impl = value.value if isinstance(value, ast.Constant) else None
                if not isinstance(field, str) or not isinstance(impl, str) or impl == "eager":
                    continue
                ops = field_ops(field)
                matching = [r for r in rows if r.op in ops and r.impl == impl]
                if not gpu_only(matching):
                    continue
                devices = ", ".join(sorted({r.requirement for r in matching}))
                shown = ", ".join(sorted({f"{r.op}/{r.variant}" for r in matching}))
                self.report(
                    value,
                    f'`{name}` maps `{field}` to "{impl}" on NPU, but every `{impl}` row of the tree ({shown}) '
                    f"requires {devices}: an Ascend run with the default ops config keeps a GPU-only kernel "
                    "(binding it raises at model build); map the field to an NPU row's name or to eager",
                )
