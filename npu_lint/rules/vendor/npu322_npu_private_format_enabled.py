"""NPU322 npu-private-format-enabled."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix

_SETTING = "allow_internal_format"
_CONFIGS = ("torch.npu.config", "torch_npu.npu.config")


def _truthy(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is not None and bool(node.value) and node.value != ""


class NpuPrivateFormatEnabled(Rule):
    code = "NPU322"
    name = "npu-private-format-enabled"
    summary = (
        "Ascend's private tensor formats are switched on (`torch.npu.config.allow_internal_format = True`): "
        "kernels may hand back tensors in a hardware layout (NZ) that views, DTensor sharding and checkpoints "
        "do not understand."
    )
    why = (
        "With `allow_internal_format` on, torch_npu lets operators keep their outputs in Ascend's private layouts "
        "(FRACTAL_NZ and friends) instead of the ND layout every other device uses. The tensor's shape still "
        "looks right, but `view`/`as_strided`, FSDP2 and DTensor shard slicing, `torch.save` / DCP checkpoints "
        "and cross-device copies read its storage as if it were ND: wrong values or shape errors on the Ascend "
        "path only, often several steps later. VeOmni switches the setting off where it detects the NPU "
        "(`veomni/utils/device.py`); code anywhere in the tree (a trainer, a kernel adapter, a launcher, a test "
        "helper imported by production code) that switches it on undoes that for the whole process. Read from "
        "assignments to the setting on `torch.npu.config` / `torch_npu.npu.config` (also through `setattr`) "
        "given a true literal."
    )
    bad = (
        Example(
            """
            import torch

            IS_NPU_AVAILABLE = torch.npu.is_available()

            if IS_NPU_AVAILABLE:
                torch.npu.config.allow_internal_format = True
            """,
            path="veomni/utils/device.py",
            title="private formats switched on where the tree detects the NPU",
            fixed="""
            import torch

            IS_NPU_AVAILABLE = torch.npu.is_available()

            if IS_NPU_AVAILABLE:
                torch.npu.config.allow_internal_format = False
            """,
        ),
        Example(
            """
            import torch_npu


            def build_trainer(args):
                setattr(torch_npu.npu.config, "allow_internal_format", True)
                return args
            """,
            path="veomni/trainer/launch.py",
            title="switched on through setattr in a trainer",
        ),
    )
    good = (
        Example(
            """
            import torch

            if torch.npu.is_available():
                torch.npu.config.allow_internal_format = False


            class Config:
                allow_internal_format = True
            """,
            path="veomni/utils/device.py",
        ),
    )
    fix_safety = (
        "Unsafe: writing `False` changes which layouts the kernels may return (slower for some operators, "
        "correct for every consumer); the setattr form has no fix."
    )
    requires = (_SETTING,)
    node_types = (ast.Assign, ast.Call)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _config(self, node: ast.AST) -> bool:
        """``node`` names torch_npu's config object (``torch.npu.config``, ``torch_npu.npu.config``, an alias)."""
        return (self.ctx.local_qualname(node) or "") in _CONFIGS

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            if not _truthy(node.value):
                return
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == _SETTING
                    and self._config(target.value)
                ):
                    self._report(target, node.value)
            return
        assert isinstance(node, ast.Call)
        if not (isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) == 3):
            return
        owner, attr, value = node.args
        if (
            isinstance(attr, ast.Constant)
            and attr.value == _SETTING
            and _truthy(value)
            and self._config(owner)
        ):
            self._report(node, None)

    def _report(self, at: ast.AST, value: ast.expr | None) -> None:
        fix = None
        if value is not None and value.end_lineno == value.lineno and value.end_col_offset is not None:
            source = self.ctx.source
            start = source.offset(value.lineno, source.char_col(value.lineno, value.col_offset))
            end = source.offset(value.lineno, source.char_col(value.lineno, value.end_col_offset))
            fix = make_fix(
                "Keep Ascend's private formats off",
                [Edit(start, end, "False")],
                Applicability.UNSAFE,
                "some operators run slower in ND layout",
            )
        self.report(
            at,
            "`allow_internal_format` is switched on: torch_npu may return tensors in Ascend's private layouts "
            "(NZ), which views, DTensor/FSDP sharding and checkpoint saves read as ND, giving wrong values or "
            "shape errors on the Ascend path only; keep it `False`",
            fix,
        )
