"""NPU320 op-registration-import-missing."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import dotted_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import patchgen
from npu_lint.veomni.opdefs import file_op_definitions, import_closure, tree_op_definitions


def _op_of(node: ast.Attribute) -> tuple[str, str] | None:
    """``torch.ops.<namespace>.<op>`` -> (namespace, op)."""
    name = dotted_name(node)
    if name is None:
        return None
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops":
        return parts[2], parts[3]
    return None


class OpRegistrationImportMissing(Rule):
    code = "NPU320"
    name = "op-registration-import-missing"
    summary = (
        "A module calls `torch.ops.<ns>.<op>` for an operator the tree itself defines (a `torch.library` "
        "custom op, `define`, a `Library(...).define`), but nothing it imports loads the defining module: the "
        "side-effect import (`from . import _ops  # noqa: F401`) was pruned."
    )
    why = (
        "A custom operator reaches PyTorch through the dispatcher: running the module that defines it "
        '(`@torch.library.custom_op("veomni::fused_add")`, `torch.library.define(...)`, '
        '`Library("veomni", "DEF").define(...)`) registers `torch.ops.veomni.fused_add`, and the kernel '
        "modules call it through `torch.ops`, never through the defining module's names. The import is "
        "therefore unused to every linter and kept with a `# noqa: F401`; a cleanup that drops it leaves a "
        "module that imports fine and fails at its first call (`torch.ops.veomni has no attribute ...`), or works "
        "only while some unrelated import happens to load the definition first. The rule reads the operators "
        "the tree defines (never a built-in list) and reports a call of one when the calling module's import "
        "closure (its packages' `__init__`, its imports and theirs, transitively) does not load a defining "
        "module. Operators the tree does not define (torch's, torch_npu's, an extension package's) are not its "
        "business."
    )
    bad = (
        Example(
            """
            import torch


            def chunk_fwd_o(q, k, v, h, g, scale):
                return torch.ops.veomni_gdr.chunk_fwd_o(q, k, v, h, g, scale)
            """,
            path="veomni/ops/kernels/gated_delta_rule/_ascend/chunk_o.py",
            title="the import of the module defining the operator pruned",
        ),
    )
    good = (
        Example(
            """
            import torch

            from . import _ops  # noqa: F401  (defines torch.ops.veomni_gdr.chunk_fwd_o)


            def chunk_fwd_o(q, k, v, h, g, scale):
                return torch.ops.veomni_gdr.chunk_fwd_o(q, k, v, h, g, scale)
            """,
            path="veomni/ops/kernels/gated_delta_rule/_ascend/chunk_o.py",
        ),
        Example(
            """
            import torch


            def rms_norm(x, weight, eps):
                return torch.ops.npu.npu_rms_norm(x, weight, epsilon=eps)[0]
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
            title="an operator the tree does not define (torch_npu's) is not this rule's business",
        ),
    )
    fix_safety = "No fix: restore the import of the module that defines the operator (`from . import _ops  # noqa: F401`)."
    node_types = ()
    requires = ("torch.ops.",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        root = self.ctx.project.root
        files = self.ctx.project.tree_files
        if root is None or not files:
            return
        calls: list[tuple[ast.Attribute, str, str]] = []
        for node in ast.walk(self.ctx.tree):
            if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "ctx", None), ast.Store):
                op = _op_of(node)
                if op is not None and not (
                    isinstance(node.value, ast.Attribute) and _op_of(node.value) is not None
                ):  # the outermost `torch.ops.ns.op`, not its `.default`
                    calls.append((node, *op))
        if not calls:
            return
        defined = self.ctx.project.remember("opdefs.definitions", lambda: tree_op_definitions(files))
        own = {(ns, op) for ns, op, _line in file_op_definitions(self.ctx.tree)}
        wanted = [(node, ns, op) for node, ns, op in calls if (ns, op) in defined and (ns, op) not in own]
        if not wanted:
            return
        path = os.path.abspath(self.ctx.source.path)
        closure = import_closure(path, root, self.ctx.tree)
        reported: set[tuple[str, str]] = set()
        for node, ns, op in sorted(wanted, key=lambda c: (c[0].lineno, c[0].col_offset)):
            where = defined[(ns, op)]
            if (ns, op) in reported or any(os.path.realpath(file) in closure for file, _line in where):
                continue
            reported.add((ns, op))
            file, line = where[0]
            module = patchgen.module_of(file) or os.path.relpath(file, root)
            package, _dot, name = module.rpartition(".")
            if package and package == (patchgen.module_of(path) or "").rpartition(".")[0]:
                package = "."
            self.report(
                node,
                f"`torch.ops.{ns}.{op}` is defined by `{module}` (line {line}) in this tree, and nothing this "
                f"module imports loads that module: the call fails (`torch.ops.{ns} has no attribute ...`) unless "
                f"something else happened to import it first; import it here for its side effect "
                f"(`from {package} import {name}  # noqa: F401`)",
            )
