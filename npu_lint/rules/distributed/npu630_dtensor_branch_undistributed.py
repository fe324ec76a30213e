"""NPU630 dtensor-branch-undistributed."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.parallelgate import (
    branch_calls,
    branch_reads,
    distributes_with,
    dtensor_subject,
    layout_reads,
)


class DTensorBranchUndistributed(Rule):
    code = "NPU630"
    name = "dtensor-branch-undistributed"
    summary = (
        "In a branch for a DTensor placeholder (`if hasattr(t, 'device_mesh'):`), the value that replaces it is "
        "a plain tensor: `full.to(t)`, or the mesh and placements are read and never used."
    )
    why = (
        "Weight loading, checkpoint restore and buffer dispatch under FSDP2 / expert parallelism replace a "
        "parameter or buffer whose placeholder is a DTensor. The replacement must be distributed the same way: "
        "built from the placeholder's `device_mesh` and `placements` (`distribute_tensor`, `DTensor.from_local`, "
        "the loader's `dtensor_factory`), as the sibling branch for parameters does. `full.to(t)` only takes "
        "`t`'s dtype and device: the result is the whole unsharded tensor, which either fails on the mixed "
        "Tensor/DTensor call or leaves a full local tensor next to DTensor parameters, and the first forward "
        "or the optimizer step breaks (or each rank holds a full copy). A branch that reads the mesh and the "
        "placements into names and never uses them is the same slip seen from the other side. The check reads "
        "every `if` branch whose test says its subject is a DTensor (`hasattr(t, 'device_mesh')`, "
        "`isinstance(t, DTensor)`)."
    )
    bad = (
        Example(
            """
            def dispatch_buffer(module, name, buffer, dtensor_factory):
                orig = module._buffers[name]
                if hasattr(orig, "device_mesh"):
                    device_mesh = orig.device_mesh
                    placements = orig.placements
                    module._buffers[name] = buffer.to(orig)
                else:
                    module._buffers[name].copy_(buffer.to(orig.device))
            """,
            path="veomni/models/module_utils.py",
            title="a DTensor buffer replaced by the full tensor",
        ),
    )
    good = (
        Example(
            """
            def dispatch_buffer(module, name, buffer, dtensor_factory):
                orig = module._buffers[name]
                if hasattr(orig, "device_mesh"):
                    device_mesh = orig.device_mesh
                    placements = orig.placements
                    module._buffers[name] = dtensor_factory(buffer.to(dtype=orig.dtype), device_mesh, placements)
                else:
                    module._buffers[name].copy_(buffer.to(orig))
            """,
            path="veomni/models/module_utils.py",
        ),
    )
    fix_safety = (
        "No fix: how to distribute the value (factory, `distribute_tensor`, `from_local`) is the author's."
    )

    requires = (("device_mesh", "DTensor"),)
    node_types = (ast.If,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.If)
        subject = dtensor_subject(node.test)
        if subject is None or distributes_with(node.body, subject):
            return
        reported = False
        for call in branch_calls(node.body):
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "to"
                and len(call.args) == 1
                and isinstance(call.args[0], ast.Name)
                and call.args[0].id == subject
                and not (isinstance(func.value, ast.Name) and func.value.id == subject)
            ):
                self.report(
                    call,
                    f"`{ast.unparse(call)}` in the branch for the DTensor `{subject}` takes only its dtype and "
                    "device: the result is the whole unsharded tensor, not one distributed with "
                    f"`{subject}.device_mesh` / `{subject}.placements`",
                )
                reported = True
        if reported:
            return
        read = branch_reads(node.body)
        for name, stmt in layout_reads(node.body, subject):
            if name not in read:
                self.report(
                    stmt,
                    f"`{name}` is read from the DTensor `{subject}` and never used: the value this branch stores "
                    f"is not distributed with `{subject}`'s mesh and placements",
                )
                return
