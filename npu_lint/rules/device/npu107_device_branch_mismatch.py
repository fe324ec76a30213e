"""NPU107 device-branch-mismatch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import str_value
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule

# the device a literal device name selects ("gpu" is how VeOmni's hardware requirements spell CUDA)
_LITERAL_DEVICE = {"npu": "npu", "cuda": "cuda", "gpu": "cuda", "mlu": "mlu"}
_API_DEVICE = {"cuda": "cuda", "npu": "npu", "mlu": "mlu"}  # torch.<module>.* runtime APIs
_DEVICE_FIELDS = ("device", "device_type", "device_key")


def _identifier(node: ast.AST) -> str:
    """The dotted spelling of a name, attribute chain or the callee of a call, lower-cased."""
    if isinstance(node, ast.Call):
        node = node.func
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)).lower()


def _availability_device(node: ast.AST) -> str | None:
    """``IS_NPU_AVAILABLE`` / ``is_torch_npu_available()`` / ``torch.npu.is_available()`` / ``IS_CUDA_AVAILABLE``
    / ``torch.cuda.is_available()``: the device whose presence the expression tests."""
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
        return None
    text = _identifier(node)
    if "available" not in text and not text.rsplit(".", 1)[-1].startswith("is_"):
        return None
    found = {device for word, device in _API_DEVICE.items() if word in text.replace(".", "_").split("_")}
    return found.pop() if len(found) == 1 else None


def test_device(test: ast.AST) -> str | None:
    """The one device a branch condition selects when it holds (None when it names none, or several)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        found = {d for d in (test_device(v) for v in test.values) if d is not None}
        return found.pop() if len(found) == 1 else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        for literal, other in ((left, right), (right, left)):
            device = _LITERAL_DEVICE.get(str_value(literal) or "")
            if device is not None and not isinstance(other, ast.Constant):
                return (
                    device  # `device_type == "npu"`, `host == "cuda"`, `impl == "npu"`: that device's branch
                )
        return None
    return _availability_device(test)


def branch_device(ctx: Context, node: ast.AST) -> tuple[str, ast.AST] | None:
    """(device, condition) of the innermost ``if`` / conditional expression whose taken branch holds ``node``
    and whose condition selects one device (``if IS_NPU_AVAILABLE:`` body, ``if not IS_NPU_AVAILABLE:`` else)."""
    chain = [*ctx.parents, node]
    for i in range(len(chain) - 2, -1, -1):
        parent, child = chain[i], chain[i + 1]
        if not isinstance(parent, (ast.If, ast.IfExp)) or child is parent.test:
            continue
        test = parent.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if negated:
            test = test.operand  # type: ignore[attr-defined]
        in_body = child is parent.body or (isinstance(parent.body, list) and child in parent.body)
        device = test_device(test)
        if device is None:
            continue
        if in_body != negated:
            return device, parent.test
        continue  # the else branch of a one-device test: no single device follows from it
    return None


def _class_device(name: str) -> str | None:
    """``NpuKernelRequirement`` -> npu, ``CudaKernelRequirement`` / ``GpuHardware`` -> cuda."""
    lowered = name.lower().lstrip("_")
    for word, device in _LITERAL_DEVICE.items():
        if lowered.startswith(word):
            return device
    return None


class DeviceBranchMismatch(Rule):
    code = "NPU107"
    name = "device-branch-mismatch"
    summary = (
        "Code declared for one device uses another device's API or key: a `torch.cuda.*` call in a branch taken "
        "only on NPU (or `torch.npu.*` on CUDA), a device-named class (`NpuKernelRequirement`) whose device key "
        "names another device, or a registry lookup keyed by a hard-coded CUDA device."
    )
    why = (
        "VeOmni's device layer and its kernel registries branch per backend: `if IS_CUDA_AVAILABLE: ... elif "
        "IS_NPU_AVAILABLE: ...` in the device helpers, and requirement classes whose `device` attribute is the "
        "fourth key of the registry (`(op, variant, impl, device)`), looked up with the host's device type. A "
        "branch that only runs on Ascend but calls the CUDA runtime (`torch.cuda.current_stream()`, "
        "`torch.cuda.synchronize()`) raises there, or waits on nothing, exactly where the NPU kernel needed it. "
        "A requirement class named for (and checking) the NPU whose device key says `cuda` files every NPU row "
        "under CUDA: on an Ascend host the registry finds no NPU row, and on a GPU host the rows collide. The "
        "rule compares each branch's condition with the API its body calls, and each device-named class with "
        "the device key it declares (also for classes named after no device, with the availability flag its "
        "methods test). It runs on every file, the device helpers and the registries under `veomni/ops` "
        "included."
    )
    bad = (
        Example(
            """
            import torch

            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


            def wait_for_streams():
                if IS_NPU_AVAILABLE:
                    torch.cuda.synchronize()
                elif IS_CUDA_AVAILABLE:
                    torch.cuda.synchronize()
            """,
            path="veomni/utils/streams.py",
            title="the NPU branch of a device helper calls the CUDA runtime",
        ),
        Example(
            """
            import torch


            def barrier(device_type: str) -> None:
                torch.cuda.current_stream().synchronize() if "npu" == device_type else torch.cuda.synchronize()
            """,
            path="veomni/utils/barrier.py",
            title="a device-type comparison selects the NPU, the conditional expression calls CUDA",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE


            def select_scan_kernel(backend: str):
                if backend == "npu":
                    if not IS_CUDA_AVAILABLE:
                        raise RuntimeError("the scan kernel needs an accelerator")
                    from .ascend_scan import scan

                    return scan
                return None
            """,
            path="veomni/ops/kernels/scan/select.py",
            title="the NPU branch of a backend selector tests CUDA availability",
        ),
        Example(
            """
            from typing import ClassVar

            from ..utils.import_utils import is_torch_npu_available


            class AscendRequirement:
                device: ClassVar[str] = "cuda"

                def is_available(self) -> bool:
                    return is_torch_npu_available()


            class NpuFusedRequirement:
                device_type = "gpu"
            """,
            path="veomni/ops/requirements.py",
            title="requirement classes whose device key names another device than the one they check",
        ),
        Example(
            """
            class KernelTable:
                def lookup(self, op: str, impl: str):
                    host_device = "cuda"
                    return self._rows[op, impl, host_device]
            """,
            path="veomni/ops/kernel_table.py",
            title="a registry lookup keyed by a hard-coded CUDA device (the kernel layer; model code is NPU102's)",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


            class AscendGate:
                device = "npu"

                def ready(self) -> bool:
                    return IS_CUDA_AVAILABLE


            class ScanTable:
                def __init__(self):
                    self._rows = {}

                def find(self, op: str, impl: str):
                    device = get_device_type()
                    return self._rows.get((op, impl, device)) or self._rows.get((op, impl, "cuda"))
            """,
            path="veomni/ops/scan_table.py",
            title="an NPU-named class answering with CUDA; a lookup falling back to the CUDA key",
        ),
    )
    good = (
        Example(
            """
            from typing import ClassVar

            import torch

            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


            def wait_for_streams():
                if IS_CUDA_AVAILABLE:
                    torch.cuda.current_stream().synchronize()
                elif IS_NPU_AVAILABLE:
                    torch.npu.current_stream().synchronize()
                if not IS_NPU_AVAILABLE:
                    torch.cuda.synchronize()


            class NpuRequirement:
                device: ClassVar[str] = "npu"


            class CudaRequirement:
                device: ClassVar[str] = "cuda"

                def is_available(self) -> bool:
                    return torch.cuda.is_available()
            """,
            path="veomni/utils/streams.py",
        ),
    )
    fix_safety = (
        "No fix: which side (the condition or the call, the class or its key) is wrong is decided by hand."
    )
    requires = (("npu", "Npu", "NPU", "device"),)
    node_types = (ast.Attribute, ast.ClassDef, ast.Assign)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(word in text for word in ("npu", "Npu", "NPU")):
            # no NPU branch or NPU-named class: only the kernel layer's hard-coded lookup device is left
            self.node_types = (
                (ast.Assign, ast.Call, ast.Compare)
                if ctx.source.kind.kernel and ("cuda" in text or '"gpu"' in text)
                else ()
            )
            return
        types: list[type[ast.AST]] = [ast.ClassDef]
        if any(
            w in text
            for w in (
                "torch.cuda",
                "torch.npu",
                "torch.mlu",
                "CUDA_AVAILABLE",
                "cuda_available",
                "npu_available",
            )
        ):
            types.extend((ast.If, ast.IfExp))  # the branches, then the runtime calls in them
        if ctx.source.kind.kernel and ("cuda" in text or '"gpu"' in text):
            types.extend((ast.Assign, ast.Call, ast.Compare))
        self.node_types = tuple(types)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            self._class(node)
            return
        if isinstance(node, ast.Assign):
            self._lookup_key(node)
            return
        if isinstance(node, (ast.Call, ast.Compare)):
            self._literal_key(node)
            return
        if isinstance(node, (ast.If, ast.IfExp)):
            self._branch(node)
            return

    def _branch(self, node: ast.If | ast.IfExp) -> None:
        """The runtime calls of the branch a one-device condition selects (``if IS_NPU_AVAILABLE:`` body, ``if
        not IS_NPU_AVAILABLE:`` else); a nested one-device condition judges its own branches."""
        test = node.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        device = test_device(test.operand if negated else test)  # type: ignore[attr-defined]
        if device is None:
            return
        taken = node.orelse if negated else node.body
        stack: list[tuple[ast.AST, ast.AST | None]] = [
            (child, None) for child in (taken if isinstance(taken, list) else [taken])
        ]
        while stack:
            sub, parent = stack.pop()
            if isinstance(sub, (ast.If, ast.IfExp)):
                inner = sub.test
                inner_test = (
                    inner.operand
                    if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not)
                    else inner
                )  # type: ignore[attr-defined]
                if test_device(inner_test) is not None:
                    if (
                        device == "npu"
                        and inner_test is inner
                        and isinstance(sub, ast.If)
                        and _availability_device(inner) == "npu"
                        and sub.body
                        and isinstance(sub.body[0], ast.Raise)
                    ):
                        shown = self.ctx.source.segment(test)
                        self.report(
                            inner,
                            f"`{self.ctx.source.segment(inner)}` raises when an NPU is available, inside a branch "
                            f"taken only on NPU (`{shown}`): the NPU path refuses every Ascend host; raise when "
                            "the NPU is missing (`if not ...`)",
                        )
                    stack.append((sub.test, sub))
                    continue  # its branches are judged when it is visited
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if (
                device == "npu"
                and isinstance(sub, (ast.Call, ast.Name))
                and _availability_device(sub) == "cuda"
            ):
                shown = self.ctx.source.segment(test)
                self.report(
                    sub,
                    f"`{self.ctx.source.segment(sub)}` tests CUDA availability in a branch taken only on NPU "
                    f"(`{shown}`): it is False on every Ascend host, so the NPU path decides as if no device "
                    "were there (refuses its own kernel, or reports its requirement unmet); test the NPU there",
                )
                continue
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(parent, ast.Attribute)
                and parent.value is sub
                and sub.attr in _API_DEVICE
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "torch"
            ):
                api = _API_DEVICE[sub.attr]
                if api != device and parent.attr not in ("is_available", "device_count"):
                    shown = self.ctx.source.segment(test)
                    self.report(
                        parent,
                        f"`torch.{api}.{parent.attr}` runs in a branch taken only on {device.upper()} (`{shown}`): "
                        f"the {device.upper()} path calls the {api.upper()} runtime, which raises there (or acts on "
                        f"no stream); use the `torch.{device}` API (or the tree's device helper) in this branch",
                    )
            stack.extend((child, sub) for child in ast.iter_child_nodes(sub))

    def _lookup_key(self, node: ast.Assign) -> None:
        """``device = "cuda"`` in a function of the kernel/registry layer (model code is NPU102's), outside any
        device branch, then used in a lookup key (``table.get((op, impl, device))``, ``table[op, device]``): the
        lookup meant for the host's device always reads the CUDA rows."""
        ctx = self.ctx
        function = ctx.function
        if function is None or not ctx.source.kind.kernel or len(node.targets) != 1:
            return
        target = node.targets[0]
        literal = str_value(node.value)
        if not isinstance(target, ast.Name) or "device" not in target.id.lower():
            return
        if _LITERAL_DEVICE.get(literal or "") != "cuda" or branch_device(ctx, node) is not None:
            return
        for sub in _walk(function):
            keys: list[ast.AST] = []
            if isinstance(sub, ast.Subscript):
                keys.append(sub.slice)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get":
                keys.extend(sub.args[:1])
            for key in keys:
                parts = key.elts if isinstance(key, ast.Tuple) else [key]
                if any(isinstance(p, ast.Name) and p.id == target.id for p in parts):
                    self.report(
                        node.value,
                        f'`{target.id} = "{literal}"` in `{function.name}` is used as the device of a lookup key '
                        f"(line {sub.lineno}) on every host: on an NPU host the lookup reads the CUDA rows (or "
                        "none); use the host's device type (the tree's `get_device_type()`)",
                    )
                    return

    def _host_device_names(self, function: ast.AST) -> set[str]:
        """Local names of ``function`` holding the host's device, read at run time (``device =
        get_device_type()``, ``device_type = self._device()``): a name with "device" assigned from a call."""
        names: set[str] = set()
        for sub in _walk(function):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.value, ast.Call):
                target = sub.targets[0]
                if isinstance(target, ast.Name) and "device" in target.id.lower():
                    names.add(target.id)
        return names

    def _literal_key(self, node: ast.Call | ast.Compare) -> None:
        """A function of the kernel/registry layer that reads the host's device and then looks rows up (or
        filters them) with a literal CUDA device beside it: ``table.get((op, impl, "cuda"))``, ``entry_device
        in (device, ANY_DEVICE, "cuda")``: on an NPU host the CUDA rows are read (or admitted) as its own."""
        ctx = self.ctx
        function = ctx.function
        if function is None or not ctx.source.kind.kernel:
            return
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args):
                return
            key = node.args[0]
            if not isinstance(key, ast.Tuple):
                return
            parts, shape = key.elts, "the lookup key"
        else:
            if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.In, ast.NotIn)):
                return
            right = node.comparators[0]
            if not isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                return
            parts, shape = right.elts, "the admitted devices"
        literal = next((p for p in parts if _LITERAL_DEVICE.get(str_value(p) or "") == "cuda"), None)
        if literal is None or branch_device(ctx, node) is not None:
            return
        host = self._host_device_names(function)
        if not host:
            return
        if isinstance(node, ast.Compare) and not any(isinstance(p, ast.Name) and p.id in host for p in parts):
            return
        shown = sorted(host)[0]
        self.report(
            literal,
            f'`"{str_value(literal)}"` in {shape} of `{function.name}`, which reads the host\'s device into '
            f"`{shown}`: on every host, an NPU one included, the CUDA rows are read as the host's own; use "
            f"`{shown}` (or drop the literal)",
        )

    def _class_answers(self, node: ast.ClassDef, declared: str) -> None:
        """A device-named class (``NpuKernelRequirement``) whose methods answer with another device's
        availability (``return IS_CUDA_AVAILABLE``): its check is false on every host of its own device."""
        for sub in _walk(node):
            if not isinstance(sub, ast.Return) or sub.value is None:
                continue
            value = sub.value
            other = _availability_device(value)
            if other is None or other == declared:
                continue
            self.report(
                value,
                f"`{node.name}` is named for {declared.upper()} but answers with "
                f"`{self.ctx.source.segment(value)}`, {other.upper()} availability: on every {declared.upper()} "
                f"host the check fails (and on a {other.upper()} host it passes); test {declared.upper()} "
                "availability",
            )

    def _class(self, node: ast.ClassDef) -> None:
        if not any(
            isinstance(t, ast.Name) and t.id in _DEVICE_FIELDS
            for stmt in node.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign))
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        ):
            return  # the cheap test first: most classes declare no device key
        declared = _class_device(node.name)
        source = f"is named for {declared.upper()}" if declared else ""
        if declared is None:
            probes = {
                d
                for sub in _walk(node)
                if isinstance(sub, (ast.Name, ast.Attribute, ast.Call))
                for d in [_availability_device(sub)]
                if d is not None
            }
            if len(probes) != 1:
                return
            declared = probes.pop()
            source = f"tests {declared.upper()} availability"
        else:
            self._class_answers(node, declared)
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            else:
                continue
            if not (isinstance(target, ast.Name) and target.id in _DEVICE_FIELDS):
                continue
            literal = str_value(value)
            key = _LITERAL_DEVICE.get(literal or "")
            if key is None or key == declared:
                continue
            self.report(
                value,
                f'`{node.name}` {source} but declares `{target.id} = "{literal}"`: rows or checks keyed by this '
                f"class are filed under {key.upper()}, so on an {declared.upper()} host the lookup by the host's "
                f'device type finds nothing (and on a {key.upper()} host they collide); use "{declared}"',
            )
