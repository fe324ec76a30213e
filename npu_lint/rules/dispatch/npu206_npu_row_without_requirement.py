"""NPU206 npu-row-without-requirement."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Edit
from npu_lint.rules._handles import (
    REGISTER_FUNCTIONS,
    call_arg,
    call_name,
    npu_named,
    str_value,
    uses_torch_npu,
)
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.veomni.catalog import ANY, NPU

_ROW_CALLS = REGISTER_FUNCTIONS | {"KernelSpec"}  # register_op / register_kernel rows, OpSlot KernelSpec


class NpuRowWithoutRequirement(Rule):
    code = "NPU206"
    name = "npu-row-without-requirement"
    summary = "A `register_op` row that runs Ascend code has no `requirement=NpuKernelRequirement()`."
    why = (
        "A row registered without a requirement is device-agnostic: resolution picks it on any host, so a GPU "
        "run that selects the `npu` implementation gets the row and fails later, inside `torch_npu`, instead of "
        "failing at construction with a clear message. Rows whose implementation uses `torch_npu` (or is named "
        "`npu` / `*_npu`) must carry `requirement=NpuKernelRequirement()` (`veomni.ops.platform`). OpSlot-era "
        '`KernelSpec` rows named `npu` need `hardware=HardwareRequirement(device_type="npu")`.'
    )
    bad = (
        Example(
            """
            from veomni.ops import register_op


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            register_op("rope", "full", "npu", wrapper=_npu_rope)
            """,
            fixed="""
            from veomni.ops import register_op
            from veomni.ops.requirement import NpuKernelRequirement


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            register_op("rope", "full", "npu", wrapper=_npu_rope, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/rotary/npu.py",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import register_op
            from veomni.ops.requirement import NpuKernelRequirement


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            def _eager_rope(q, k, cos, sin):
                return q * cos, k * cos


            register_op("rope", "full", "npu", wrapper=_npu_rope, requirement=NpuKernelRequirement())
            register_op("rope", "full", "eager", wrapper=_eager_rope)
            """,
            path="veomni/ops/kernels/rotary/npu.py",
        ),
        Example(
            """
            from veomni.ops import register_op
            from veomni.ops.requirement import NpuKernelRequirement

            ON_ASCEND = NpuKernelRequirement()


            def _npu_swiglu(gate, up):
                import torch_npu

                return torch_npu.npu_swiglu(gate, up)


            register_op("swiglu_mlp", "standard", "npu", wrapper=_npu_swiglu, requirement=ON_ASCEND)
            """,
            path="veomni/ops/kernels/swiglu/npu.py",
            title="the requirement bound to a module constant",
        ),
    )
    fix_safety = (
        "Safe: adds `requirement=NpuKernelRequirement()` (imported from `veomni.ops.platform`, or the module "
        "the file already imports it from). On an NPU host resolution is unchanged; elsewhere the row is no "
        "longer selectable, which turns a late failure inside `torch_npu` into a clear error at construction."
    )
    node_types = (ast.Call, ast.FunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.kernel and not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.functions: dict[str, ast.AST] = {}
        self.rows: list[ast.Call] = []

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef):
            if self.ctx.parent is self.ctx.tree:
                self.functions[node.name] = node
            return
        assert isinstance(node, ast.Call)
        if call_name(node) in _ROW_CALLS and self.ctx.function is None:
            self.rows.append(node)

    def finish(self) -> None:
        for call in self.rows:
            if call_name(call) == "KernelSpec":
                self._kernel_spec(call)
            else:
                self._register_op(call)

    def _implementation_uses_npu(self, call: ast.Call) -> bool:
        for key, index in (("forward", 3), ("backward", 4), ("wrapper", 99)):
            ref = call_arg(call, index, key)
            if isinstance(ref, ast.Name):
                func = self.functions.get(ref.id)
                if func is not None and uses_torch_npu(func):
                    return True
                module = self.ctx.imports.get(ref.id, "")
                if any(
                    part == "npu" or part.startswith("npu_") or part.endswith("_npu")
                    for part in module.split(".")[:-1]
                ):
                    return True
            elif ref is not None and uses_torch_npu(ref):
                return True
        return False

    def _register_op(self, call: ast.Call) -> None:
        impl = str_value(call_arg(call, 2, "impl"))
        op = str_value(call_arg(call, 0, "op"))
        variant = str_value(call_arg(call, 1, "variant"))
        if impl is None or op is None or variant is None:
            return  # not the VeomniOp register_op (e.g. register_op(OpSpec(...)))
        if not (npu_named(impl) or self._implementation_uses_npu(call)):
            return
        requirement = next((k for k in call.keywords if k.arg == "requirement"), None)
        if requirement is not None:
            value = self._module_value(requirement.value)
            none = isinstance(value, ast.Constant) and value.value is None
            if not none and not isinstance(value, ast.Call):
                return  # a requirement this file does not show (an imported constant, a parameter): not judged
            name = (call_name(value) if isinstance(value, ast.Call) else None) or ""
            if name.lower().startswith("npu"):
                return
        ctx = self.ctx
        # the requirement class from the module the tree's profile found defining it
        # (or, when the file already imports a requirement class, from that module)
        module = ctx.project.api.requirement_module or ctx.project.api.registry_module or ""
        for name, qual in ctx.imports.items():
            if name.endswith("KernelRequirement") and "." in qual:
                module = qual.rsplit(".", 1)[0]
                break
        edits: list[Edit] = []
        if "NpuKernelRequirement" not in ctx.imports:
            edits.extend(ctx.import_edits(module, "NpuKernelRequirement"))
        site: ast.AST = call
        if requirement is not None:
            edits.append(ctx.replace(requirement.value, "NpuKernelRequirement()"))
            if requirement.value.lineno != call.lineno:
                site = requirement.value  # where the wrong requirement is written
        else:
            last = max(
                [*call.args, *(k.value for k in call.keywords)],
                key=lambda n: (n.end_lineno, n.end_col_offset),
            )
            end = ctx.source.node_range(last)[1]
            edits.append(Edit(end, end, ", requirement=NpuKernelRequirement()"))
            if (
                last.lineno != call.lineno
            ):  # a call over several lines: where the requirement belongs, after its
                site = last  # last argument (the line a reader adds it to)
        fix = make_fix("Add `requirement=NpuKernelRequirement()`", edits)
        self.report(
            site,
            f"row `{op}/{variant}/{impl}` runs Ascend code but has no `requirement=NpuKernelRequirement()`: "
            "it is selectable on every device",
            fix,
        )

    def _module_value(self, node: ast.expr) -> ast.expr | None:
        """The expression itself, or for a name the value the module binds it to once (``_ASCEND =
        NpuKernelRequirement()`` at module level)."""
        if not isinstance(node, ast.Name):
            return node
        values = [
            stmt.value
            for stmt in self.ctx.tree.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign))
            and stmt.value is not None
            and any(
                isinstance(t, ast.Name) and t.id == node.id
                for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            )
        ]
        return values[0] if len(values) == 1 else None

    def _kernel_spec(self, call: ast.Call) -> None:
        name = str_value(call_arg(call, 0, "name"))
        if name is None or not npu_named(name):
            return
        hardware = call_arg(call, 4, "hardware")
        from npu_lint.veomni.project import _hardware_kind

        kind = _hardware_kind(hardware) if hardware is not None else None
        if hardware is not None and kind in (None, NPU, ANY):
            return  # not a literal, or npu-capable
        self.report(
            hardware if hardware is not None else call,  # where the wrong requirement is written
            f"KernelSpec `{name}` runs Ascend code but its hardware requirement is not "
            '`HardwareRequirement(device_type="npu")`',
        )
