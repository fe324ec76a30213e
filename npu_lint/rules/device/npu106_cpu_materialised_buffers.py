"""NPU106 cpu-materialised-buffers."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, str_value
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Context, Example, Rule


def _cpu_choice(value: ast.AST) -> bool:
    """``"cpu" if offload else get_device_type()``: one branch is the CPU, the other is not."""
    if not isinstance(value, ast.IfExp):
        return False
    sides = [str_value(value.body), str_value(value.orelse)]
    cpu = [s is not None and s.startswith("cpu") for s in sides]
    return cpu.count(True) == 1


def _passes(call: ast.Call, name: str) -> bool:
    return any(
        isinstance(a, ast.Name) and a.id == name for a in [*call.args, *(k.value for k in call.keywords)]
    )


class CpuMaterialisedBuffers(Rule):
    code = "NPU106"
    name = "cpu-materialised-buffers"
    summary = (
        "A function materialises a model on a device that is the CPU under CPU offload (`to_empty(device=d)`, "
        '`d = "cpu" if offload else <accelerator>`) and never moves its buffers to the accelerator.'
    )
    why = (
        "With FSDP2 CPU offload a meta-initialised model is materialised on the CPU. `CPUOffloadPolicy` only "
        "manages parameters, gradients and optimizer states: buffers (rotary `inv_freq`, router lookup tables, "
        "position ids) stay where `to_empty` put them, on the CPU, while the activations are on the NPU, and "
        "the first forward fails with a device mismatch (or silently computes on the host). The function that "
        "chooses the CPU for materialisation owns the move: after materialising, put the buffers on "
        "`get_device_type()` (a helper moving `module._buffers`, or `model.to(...)` when nothing is offloaded). "
        "A function that receives the materialisation device as a parameter leaves it to its caller and is "
        "not reported."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import get_device_type


            def materialize(model, offload_to_cpu):
                target = "cpu" if offload_to_cpu else get_device_type()
                model.to_empty(device=target)
                model.init_weights()
                return model
            """,
            path="veomni/distributed/toy_materialize.py",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import get_device_type


            def _buffers_to(model, device):
                for module in model.modules():
                    for key, buf in module._buffers.items():
                        if buf is not None:
                            module._buffers[key] = buf.to(device)


            def materialize(model, offload_to_cpu):
                target = "cpu" if offload_to_cpu else get_device_type()
                model.to_empty(device=target)
                model.init_weights()
                if target == "cpu":
                    _buffers_to(model, get_device_type())
                return model


            def load_into(model, init_device):
                model.to_empty(device=init_device)  # the caller chose the device and moves the buffers
                return model
            """,
            path="veomni/distributed/toy_materialize.py",
        ),
    )
    fix_safety = "No fix: where the buffers go depends on the offload setup."
    requires = ("to_empty", "cpu")
    node_types = (ast.FunctionDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        # module-level helpers that materialise their argument (``def _empty(model, device): model.to_empty(device=device)``)
        self.materialisers = {
            s.name
            for s in ctx.tree.body
            if isinstance(s, ast.FunctionDef)
            and any(isinstance(c, ast.Call) and call_name(c) == "to_empty" for c in _walk(s))
        }

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.FunctionDef)
        if self.ctx.function is not None and self.ctx.function is not node:
            return  # nested functions are read with their outer one
        choices = {
            t.id
            for s in _walk(node)
            if isinstance(s, ast.Assign) and _cpu_choice(s.value)
            for t in s.targets
            if isinstance(t, ast.Name)
        }
        if not choices:
            return
        calls = sorted(
            (c for c in _walk(node) if isinstance(c, ast.Call)), key=lambda c: (c.lineno, c.col_offset)
        )
        made: list[tuple[ast.Call, str, str]] = []  # (call, device name, materialised object)
        for call in calls:
            name = call_name(call)
            for device in choices:
                if not _passes(call, device):
                    continue
                if name == "to_empty" and isinstance(call.func, ast.Attribute):
                    made.append((call, device, self.ctx.source.segment(call.func.value)))
                elif name in self.materialisers and call.args:
                    made.append((call, device, self.ctx.source.segment(call.args[0])))
        if not made:
            return
        last = made[-1][0]
        objects = {obj for _c, _d, obj in made}
        for call in calls:
            if (call.lineno, call.col_offset) <= (last.lineno, last.col_offset):
                continue
            name = call_name(call)
            if "buffer" in name.lower() and name not in self.materialisers:
                return  # a buffer move after the materialisation
            if (
                name in ("to", "cuda", "npu")
                and isinstance(call.func, ast.Attribute)
                and self.ctx.source.segment(call.func.value) in objects
            ):
                return  # the whole model moved
        device = made[-1][1]
        at: ast.AST = last
        for stmt in node.body:  # where the move belongs: the statement after the materialisation
            if stmt.lineno > (last.end_lineno or last.lineno) and not any(sub is last for sub in _walk(stmt)):
                at = stmt
                break
        obj = made[-1][2]
        self.report(
            at,
            f"`{obj}` is materialised on `{device}`, which is the CPU when CPU offload is on, and this function "
            "never moves its buffers to the accelerator: CPU offload manages parameters, gradients and optimizer "
            "states only, so buffers (rotary `inv_freq`, lookup tables) stay on the CPU while activations are on "
            "the NPU; move them to `get_device_type()` after materialising",
        )
