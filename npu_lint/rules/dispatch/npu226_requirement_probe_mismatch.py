"""NPU226 requirement-probe-mismatch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, nodes_of, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.probes import (
    NPU,
    Probe,
    flag_packages,
    helper_probes,
    package_backend,
    probe_of,
    tree_module,
)
from npu_lint.veomni.resolution import names_npu
from npu_lint.veomni.vendor_map import NPU_VENDOR, VENDOR_PACKAGES


def _selections(test: ast.expr) -> list[tuple[ast.Compare, str]]:
    """The string literals a branch test selects on (``pkg == "torch_npu"``, ``"npu" == impl``), also inside an
    ``and``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    out: list[tuple[ast.Compare, str]] = []
    for part in parts:
        if isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.Eq):
            value = str_value(part.comparators[0]) or str_value(part.left)
            if value:
                out.append((part, value))
    return out


def _missing_probe(test: ast.expr, helpers: dict[str, Probe], known: frozenset[str]) -> Probe:
    """What a test asks to be missing (``not is_x_available()``, ``find_spec("x") is None``): the requirement it
    checks. A positive probe that raises (``if is_torch_npu_available(): raise``) excludes another backend's
    host and checks nothing of this one."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return probe_of(test.operand, helpers, known)
    if isinstance(test, ast.BoolOp):
        found = Probe()
        for value in test.values:
            found |= _missing_probe(value, helpers, known)
        return found
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.Eq))
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value in (None, False)
    ):
        return probe_of(test.left, helpers, known)
    return Probe()


def _rejects(body: list[ast.stmt]) -> bool:
    """A requirement check's branch: it raises."""
    return any(isinstance(n, ast.Raise) for stmt in body for n in ast.walk(stmt))


_NPU_DEVICE_NAMES = frozenset({"npu", "ascend"})


def _catches_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(k is None or (last_name(k) or "") in ("ImportError", "ModuleNotFoundError") for k in kinds):
            return True
    return False


def _imports_npu_vendor(stmt: ast.Import | ast.ImportFrom) -> bool:
    modules = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
    return any(
        VENDOR_PACKAGES.get(m.split(".", 1)[0]) == NPU_VENDOR
        for m in modules
        if not getattr(stmt, "level", 0)
    )


def _returns(body: list[ast.stmt], value: bool) -> bool:
    return any(
        isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Constant) and stmt.value.value is value
        for stmt in body
    )


class RequirementProbeMismatch(Rule):
    code = "NPU226"
    name = "requirement-probe-mismatch"
    summary = (
        "The requirement check of a backend selected by name probes another package or device than the one the "
        'backend needs (`if pkg == "torch_npu": if not is_liger_kernel_available(): raise ...`).'
    )
    why = (
        "Before a backend is bound its requirements are checked: the branch for the package or implementation "
        "name (`torch_npu`, `liger_kernel`, `triton`, `npu`) raises when the probe says it is missing. The probe "
        "must test that package: a check for `torch_npu` that asks `is_liger_kernel_available()` rejects the NPU "
        "backend on an Ascend host without Liger (where it works) and accepts it on a GPU host with Liger (where "
        "it fails later, far from the cause). The rule reads what each probe tests from the tree "
        '(`veomni/probes.py`): `find_spec("x")` / `is_package_available("x")`, a package-flags table read, '
        "the tree's `is_*_available` helpers by their bodies (their names only when the body cannot be read), "
        "and device constants (`IS_NPU_AVAILABLE`, `torch.cuda.is_available()`). It reports a branch that "
        "selects a known package (or an NPU implementation name) and raises under a probe that never tests it "
        "nor its device; a positive probe that raises (`if is_torch_npu_available(): raise ...`, a GPU-only "
        "backend refusing an Ascend host) excludes another host and is not a requirement check. The NPU branch of a "
        'hardware requirement (`if self.device_type == "npu":`) that answers with an import of `torch_npu` alone '
        "(`try: import torch_npu; return True` / `except ImportError: return False`) and probes no device is "
        "reported too: it passes on any image that ships the wheel, Ascend device or not."
    )
    bad = (
        Example(
            """
            from veomni.utils.import_utils import is_liger_kernel_available, is_torch_npu_available


            def check_requires(requires):
                for pkg in requires:
                    if pkg == "liger_kernel":
                        if not is_liger_kernel_available():
                            raise RuntimeError("liger-kernel is not installed")
                    elif pkg == "torch_npu":
                        if not is_liger_kernel_available():
                            raise RuntimeError("torch_npu is not installed")
            """,
            path="veomni/ops/config/toy_registry.py",
            title="the torch_npu requirement checked with the Liger probe",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE


            def check_backend(impl):
                if impl == "npu" and not IS_CUDA_AVAILABLE:
                    raise RuntimeError("the npu backend needs an Ascend device")
            """,
            path="veomni/ops/config/toy_check.py",
            title="an NPU backend checked against the CUDA device",
        ),
    )
    good = (
        Example(
            """
            import importlib.util

            from veomni.utils.import_utils import is_liger_kernel_available, is_torch_npu_available


            def check_requires(requires):
                for pkg in requires:
                    if pkg == "liger_kernel":
                        if not is_liger_kernel_available():
                            raise RuntimeError("liger-kernel is not installed")
                    elif pkg == "torch_npu":
                        if not is_torch_npu_available():
                            raise RuntimeError("torch_npu is not installed")
                    elif pkg == "triton":
                        if importlib.util.find_spec("triton") is None:
                            raise RuntimeError("triton is not installed")
            """,
            path="veomni/ops/config/toy_registry.py",
        ),
    )
    fix_safety = "No fix: the probe to call is the tree's own helper for the package, which the author picks."
    requires = (("available", "AVAILABLE", "find_spec", "FLAGS", "torch_npu"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test  # requirement checks live in the ops config and registries

    def finish(self) -> None:
        tree = self.ctx.tree
        known = set(VENDOR_PACKAGES) | set(flag_packages(tree))
        helpers = {}
        root = self.ctx.project.root
        modules: set[str] = set()
        for node in nodes_of(tree, ast.Name):
            assert isinstance(node, ast.Name)
            if node.id.startswith("is_") and node.id.endswith("_available"):
                qual = self.ctx.qualname(node) or ""
                if qual.startswith("veomni.") and "." in qual:
                    modules.add(qual.rsplit(".", 1)[0])
        trees = [tree]
        if root is not None:
            for module in sorted(modules):
                other = tree_module(str(root), module)
                if other is not None:
                    known |= flag_packages(other)
                    trees.append(other)
        frozen = frozenset(known)
        for source in trees:
            for name, probe in helper_probes(source, frozen).items():
                helpers.setdefault(name, probe)
        for node in nodes_of(tree, ast.If):
            assert isinstance(node, ast.If)
            for compare, value in _selections(node.test):
                if value in _NPU_DEVICE_NAMES:
                    self._package_only_gate(node, value, helpers, frozen)
                need = self._need(value, frozen)
                if need is None:
                    continue
                checks: list[ast.expr] = []
                if isinstance(node.test, ast.BoolOp) and _rejects(node.body):
                    checks += [v for v in node.test.values if v is not compare]
                for stmt in node.body:
                    if isinstance(stmt, ast.If) and _rejects(stmt.body) and not _selections(stmt.test):
                        checks.append(stmt.test)
                for check in checks:
                    probe = _missing_probe(check, helpers, frozen)
                    if probe and not self._covers(probe, value, need):
                        self.report(
                            check,
                            f'the requirement check of the `"{value}"` branch (line {node.lineno}) probes '
                            f"{probe.describe()} (`{ast.unparse(check)}`), never {self._needs_text(value, need)}: "
                            "it rejects the backend where it works and lets it through where it cannot run",
                        )

    def _package_only_gate(
        self, node: ast.If, value: str, helpers: dict[str, Probe], known: frozenset[str]
    ) -> None:
        """The device branch of a hardware requirement (`if self.device_type == "npu":`) that answers with an
        import of the vendor package alone (`try: import torch_npu; return True / except ImportError: return
        False`), with no device probe anywhere in the branch."""
        if NPU in probe_of(ast.Module(body=node.body, type_ignores=[]), helpers, known).backends:
            return
        for stmt in node.body:
            if not isinstance(stmt, ast.Try) or not _catches_import_error(stmt.handlers):
                continue
            imported = [
                n for n in stmt.body if isinstance(n, (ast.Import, ast.ImportFrom)) and _imports_npu_vendor(n)
            ]
            if not imported or not _returns(stmt.body + stmt.orelse, True):
                continue
            if not any(_returns(h.body, False) for h in stmt.handlers):
                continue
            self.report(
                imported[0],
                f'the `"{value}"` hardware requirement (line {node.lineno}) is satisfied by importing the vendor '
                "package alone: it passes on any host that has the wheel installed, with or without an Ascend "
                "device (CPU and GPU images that ship `torch_npu`), so the NPU rows are selected where they cannot "
                "run; probe the device too (the tree's `IS_NPU_AVAILABLE` / `is_torch_npu_available()`)",
            )

    @staticmethod
    def _need(value: str, known: frozenset[str]) -> str | None:
        """The package a selected name needs (the name itself when it is a package), or NPU for an NPU
        implementation name."""
        if value in known:
            return value
        if names_npu(value):
            return NPU
        return None

    @staticmethod
    def _covers(probe: Probe, value: str, need: str) -> bool:
        if need == NPU:
            return NPU in probe.backends or any(VENDOR_PACKAGES.get(p) == NPU_VENDOR for p in probe.packages)
        return need in probe.packages or package_backend(need) in probe.backends

    @staticmethod
    def _needs_text(value: str, need: str) -> str:
        return "an NPU device or `torch_npu`" if need == NPU else f"`{need}`"
