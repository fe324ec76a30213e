"""NPU319 device-probe-import-unused."""

from __future__ import annotations

import ast
import os
import re

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import patchgen
from npu_lint.veomni.imports import veomni_imports
from npu_lint.veomni.vendor_map import VENDOR_PACKAGES

_PROBE = re.compile(r"^(?:is_|IS_|has_|HAS_)?(?P<stem>\w+?)(?:_available|_AVAILABLE|_is_available)$")
_DEVICE_WORDS = ("npu", "cuda", "gpu", "ascend", "triton", "sm90", "hopper")


def device_probe(name: str) -> bool:
    """A name that tests a device or a vendor kernel package: ``IS_CUDA_AVAILABLE``, ``is_torch_npu_available``,
    ``is_liger_kernel_available``, ``HAS_TRITON_AVAILABLE``; not ``is_package_available`` nor
    ``is_transformers_version_available``."""
    m = _PROBE.match(name)
    if m is None:
        return False
    stem = m.group("stem").lower()
    words = stem.split("_")
    if any(w in words for w in _DEVICE_WORDS):
        return True
    return any(stem == p or stem.startswith(p + "_") for p in VENDOR_PACKAGES)


_DEVICE_ATTRS = frozenset({"is_cuda", "is_npu", "device_type"})
_DEVICE_CALLS = frozenset({"get_device_type", "get_device_name", "get_torch_device"})


def _device_gates(tree: ast.Module) -> list[ast.expr]:
    """The tests (`if`, conditional expression, `assert`) that read a device: a tensor's `.device` /
    `.device.type` / `.is_cuda`, or the current device type (`get_device_type()`)."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        test = node.test if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)) else None
        if test is None:
            continue
        for sub in ast.walk(test):
            if (isinstance(sub, ast.Attribute) and (sub.attr in _DEVICE_ATTRS or sub.attr == "device")) or (
                isinstance(sub, ast.Call) and call_name(sub) in _DEVICE_CALLS
            ):
                out.append(test)
                break
    return out


class DeviceProbeImportUnused(Rule):
    code = "NPU319"
    name = "device-probe-import-unused"
    summary = (
        "A device or vendor-kernel availability probe (`IS_CUDA_AVAILABLE`, `is_torch_npu_available`, "
        "`is_liger_kernel_available`) is imported and never read: the gate that tested it was dropped."
    )
    why = (
        "VeOmni gates every vendor-kernel path on the device it needs: the Triton group-gemm import under "
        "`if not is_torch_npu_available():`, Muon's quack kernels behind `if not IS_CUDA_AVAILABLE or ...: "
        "return <fallback reason>`, batch-invariant mode's Triton aten overrides under `if enabled and "
        "IS_CUDA_AVAILABLE:`. A file imports such a probe only to test it, and the tree is kept free of unused "
        "imports by its linter, so a probe imported and never read is what remains when an edit (a refactor, "
        "a simplified condition, a hoisted import) dropped the test: the guarded path now runs on every host, "
        "a CUDA kernel on Ascend or a `torch_npu` import on a GPU host. Re-exports (a name listed in `__all__`, a module "
        "without code of its own, `# noqa`, a name another module of the tree imports from this one) are left alone. "
        "When the file holds exactly one device test (an `if` / `assert` / conditional expression reading a "
        "tensor's `.device` or `.is_cuda`, or `get_device_type()`), the finding sits there, where the dropped "
        "test most likely stood; otherwise on the import."
    )
    bad = (
        Example(
            """
            from ...utils.device import IS_CUDA_AVAILABLE


            def set_fused_softmax(enabled: bool = True):
                if enabled:
                    from .triton_softmax import register_softmax_override

                    register_softmax_override()
            """,
            path="veomni/ops/fused_softmax/__init__.py",
            title="the CUDA test of a Triton override dropped",
        ),
        Example(
            """
            from ..utils.import_utils import is_torch_npu_available
            from ..ops.kernels.loss.triton_ce import fused_cross_entropy


            def loss_fn(logits, labels):
                return fused_cross_entropy(logits, labels)
            """,
            path="veomni/trainer/loss.py",
            title="the NPU guard of a Triton kernel import dropped",
        ),
    )
    good = (
        Example(
            """
            from ...utils.device import IS_CUDA_AVAILABLE


            def set_fused_softmax(enabled: bool = True):
                if enabled and IS_CUDA_AVAILABLE:
                    from .triton_softmax import register_softmax_override

                    register_softmax_override()
            """,
            path="veomni/ops/fused_softmax/__init__.py",
        ),
        Example(
            """
            from .device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE

            __all__ = ["IS_CUDA_AVAILABLE", "IS_NPU_AVAILABLE"]
            """,
            path="veomni/utils/__init__.py",
        ),
    )
    fix_safety = "No fix: restore the device test the edit dropped (or drop the import if no gate needs it)."
    node_types = ()
    requires = (("_available", "_AVAILABLE"),)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        probes: list[tuple[ast.stmt, str]] = []
        for stmt in nodes_of(tree, ast.ImportFrom):
            if stmt.module == "__future__":
                continue
            for alias in stmt.names:
                bound = alias.asname or alias.name
                if alias.asname is not None and alias.asname == alias.name:
                    continue  # ``import x as x``: an explicit re-export
                if device_probe(alias.name) and device_probe(bound):
                    probes.append((stmt, bound))
        if not probes:
            return
        if self._reexports(tree):
            return
        lines = self.ctx.source.text.splitlines()
        used = {n.id for n in nodes_of(tree, ast.Name)}
        strings = {n.value for n in nodes_of(tree, ast.Constant) if isinstance(n.value, str)}
        unread = [(stmt, bound) for stmt, bound in probes if bound not in used and bound not in strings]
        imported_from_here = self._imported_from_here({bound for _stmt, bound in unread}) if unread else set()
        for stmt, bound in unread:
            if any("noqa" in lines[i - 1] for i in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)):
                continue
            if bound in imported_from_here:
                continue  # re-exported: another module of the tree imports it from this one
            gates = _device_gates(tree)
            if len(gates) == 1:
                self.report(
                    gates[0],
                    f"`{bound}` (imported at line {stmt.lineno}) is never read, and this is the file's one device "
                    "test, where the dropped test most likely stood: without it the path it guards runs on every "
                    "host (a tensor's device compared with the current device type holds on Ascend too, both "
                    f"'npu'); restore the test on `{bound}` here",
                )
                continue
            self.report(
                stmt,
                f"`{bound}` is imported but never read: the device gate that tested it is gone, so the path it "
                "guarded (a vendor kernel, a CUDA- or NPU-only import or probe) now runs on every host; restore "
                f"the test on `{bound}` (or drop the import if no gate needs it)",
            )

    def _imported_from_here(self, names: set[str]) -> set[str]:
        """Which of ``names`` another module of the tree imports from this module (``from .compat import
        is_torch_npu_available``): dropping the import here would break that importer."""
        module = patchgen.module_of(os.path.abspath(self.ctx.source.path))
        if module is None:
            return set()
        here = os.path.realpath(self.ctx.source.path)
        out: set[str] = set()
        for file in self.ctx.project.tree_files:
            if os.path.realpath(file) == here:
                continue
            try:
                text = read_text(file, limit=MAX_SMALL_BYTES)
            except (OSError, UnicodeDecodeError):
                continue
            if "import" not in text or not any(name in text for name in names - out):
                continue
            parsed = patchgen.load_file(file)
            if parsed is None or parsed.tree is None:
                continue
            out.update(
                name for mod, name in veomni_imports(parsed.tree, file) if mod == module and name in names
            )
            if out == names:
                break
        return out

    @staticmethod
    def _reexports(tree: ast.Module) -> bool:
        """A module that only re-exports names: no function or class of its own (names it lists in ``__all__``
        are read as strings)."""
        return not any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(tree)
        )
