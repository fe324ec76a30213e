"""NPU209 npu-row-missing."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_lint.core.memo import Bounded
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import scanstore
from npu_lint.veomni.catalog import ANY, BUILTIN_ROWS, NPU, OpRow
from npu_lint.veomni.layout import find_veomni_root
from npu_lint.veomni.project import Project, load_project
from npu_lint.veomni.registry import read_registry_rows

_MARKERS = ("register_op", "register_kernel", "KernelSpec")
# the examples' tree (a toy model whose generated NPU file constructs `swiglu_mlp/gated`)
_FIXTURE = "tests/fixtures/trees/npu_row_missing/veomni/ops/kernels/swiglu/__init__.py"
# (root, the stat keys of its `veomni/**/*.py`) -> its project: an edited tree gets a new one; bounded
_PROJECTS: Bounded[tuple[str, str], Project] = Bounded(4)


def _project_of(path: str) -> Project | None:
    """The project of the tree holding a file linted without one (a single file, the rule's examples)."""
    root = find_veomni_root(Path(path))
    if root is None:
        return None
    key = (str(root), scanstore.stat_key(root, [p for p, _parts in scanstore.list_tree(root).files])[0])
    hit = _PROJECTS.get(key)
    if hit is None:
        hit = _PROJECTS[key] = load_project([str(root)])
    return hit


def _npu_capable(row: OpRow) -> bool:
    """A row an NPU host can bind to a kernel: an NPU row, or a device-agnostic one other than eager."""
    return row.requirement == NPU or (row.requirement == ANY and row.impl != "eager")


class NpuRowMissing(Rule):
    code = "NPU209"
    name = "npu-row-missing"
    summary = (
        "A registry module gives NPU rows to some variants of an op but not to one that the tree's NPU model "
        "code selects."
    )
    why = (
        "On an NPU host the ops config selects the same NPU implementation of an op for every model (`npu`, "
        "`fused_npu`, ...), and each handle (`OpSlot(op, variant)`, `VeomniOp(op, variant, impl)`) looks up "
        "its own `op/variant` row of that implementation. When the registry module registers the NPU kernel "
        "for some variants of the op but not for a variant an NPU spec or generated NPU file constructs, that "
        "model's lookup raises KeyError at build time (or, through an eager fallback, silently runs the slow "
        "path) although its siblings work. Rows are read from the tree's registration modules (every "
        "generation: `register_op` / `register_kernel` rows, `KernelSpec` rows), the selections from the "
        "model packages' NPU specs and generated NPU files (`*_npu_patch_gen_config.py`, "
        "`generated/*_npu.py`), so the message names what this tree registers and where it is selected. The "
        "finding sits on the last row of the variant in this module (or, when the module has none, on the "
        "op's first NPU row here)."
    )
    bad = (
        Example(
            """
            from veomni.ops.registry import register_op
            from veomni.ops.requirement import NpuKernelRequirement

            from . import eager, ascend

            register_op("swiglu_mlp", "standard", "eager", eager.swiglu)
            register_op("swiglu_mlp", "standard", "npu", ascend.swiglu, requirement=NpuKernelRequirement())
            register_op("swiglu_mlp", "gated", "eager", eager.gated_swiglu)
            """,
            path=_FIXTURE,
            title="a variant an NPU model constructs has only its eager row",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.registry import register_op
            from veomni.ops.requirement import NpuKernelRequirement

            from . import eager, ascend

            for variant in ("standard", "gated"):
                register_op("swiglu_mlp", variant, "eager", eager.swiglu)
                register_op("swiglu_mlp", variant, "npu", ascend.swiglu, requirement=NpuKernelRequirement())
            """,
            path=_FIXTURE,
        ),
    )
    fix_safety = "No fix: the NPU kernel of the variant has to be written or registered by hand."
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return any(word in ctx.source.text for word in _MARKERS)

    def finish(self) -> None:
        ctx = self.ctx
        project: Project | None = ctx.project
        if project is not None and project.root is None:
            project = _project_of(ctx.source.path)
        register_rows, _slots, where, spec_where = read_registry_rows(ctx.tree)
        if register_rows and where:
            self._catalog_rows_missing(where, project)
        if project is None or not project.npu_selections:
            return
        slot_tree = not register_rows and bool(spec_where)
        if slot_tree:
            local = spec_where
            table = set(project.slot_rows) | {row for row, _line in spec_where}
            kind = "KernelSpec"
        else:
            local = where
            table = set(project.live_rows if project.live_rows is not None else project.registered) | set(
                register_rows
            )
            kind = project.api.register_function or "register_op"
        if not local:
            return
        selected: dict[tuple[str, str], str] = {}
        for op, variant, at in project.npu_selections:
            selected.setdefault((op, variant), at)
        reported: set[tuple[str, str]] = set()
        for op in sorted({row.op for row, _line in local}):
            capable = sorted({r.variant for r in table if r.op == op and _npu_capable(r)})
            if not capable:
                continue  # the op has no NPU kernel at all: the ops config's NPU handling picks eager for it
            for (sel_op, variant), at in sorted(selected.items()):
                if sel_op != op or variant in capable or (op, variant) in reported:
                    continue
                own = [line for row, line in local if (row.op, row.variant) == (op, variant)]
                npu_here = [line for row, line in local if row.op == op and _npu_capable(row)]
                # an NPU row of this module under a variant no NPU-targeted code selects: likely the one meant
                orphans = sorted(
                    {
                        (line, row.variant)
                        for row, line in local
                        if row.op == op and _npu_capable(row) and (op, row.variant) not in selected
                    }
                )
                stray = ""
                if not own and len(orphans) == 1:
                    line = orphans[0][0]
                    stray = (
                        f"; the NPU row here is registered as `{op}/{orphans[0][1]}`, which no NPU-targeted code "
                        "of this tree selects"
                    )
                elif own:
                    line = max(own)
                elif npu_here:
                    line = min(npu_here)
                else:
                    continue  # another module holds the op's NPU rows: reported there
                reported.add((op, variant))
                rows = sorted(
                    {f"{r.impl} ({r.requirement})" for r in table if (r.op, r.variant) == (op, variant)}
                )
                has = f"its rows: {', '.join(rows)}" if rows else "it has no row at all"
                at_node = self._statement_at(line)
                if stray and isinstance(at_node, ast.Call):
                    # the misnamed variant itself
                    positional = at_node.args[1] if len(at_node.args) > 1 else at_node
                    at_node = next((k.value for k in at_node.keywords if k.arg == "variant"), positional)
                self.report(
                    at_node,
                    f"no NPU {kind} row for `{op}/{variant}` ({has}) although `{op}` has NPU rows for "
                    f"{', '.join(f'`{v}`' for v in capable)} and NPU-targeted code selects `{op}/{variant}` "
                    f"({at}): when the ops config picks the NPU implementation of `{op}` there, the lookup "
                    f"raises KeyError; register the variant's NPU row{stray}",
                )
        self._npu_impl_coverage(local, table, selected, reported, kind)

    def _npu_impl_coverage(
        self,
        local: list[tuple[OpRow, int]],
        table: set[OpRow],
        selected: dict[tuple[str, str], str],
        reported: set[tuple[str, str]],
        kind: str,
    ) -> None:
        """An implementation registered only for NPU (the name an NPU ops config selects for the op) that this
        module registers for some variants of the op but not for one that NPU-targeted code selects."""
        for op in sorted({row.op for row, _line in local}):
            by_impl: dict[str, set[str]] = {}
            for r in table:
                if r.op == op:
                    by_impl.setdefault(r.impl, set()).add(r.requirement)
            npu_impls = sorted(impl for impl, reqs in by_impl.items() if reqs == {NPU})
            for impl in npu_impls:
                here = [line for row, line in local if row.op == op and row.impl == impl]
                if not here:
                    continue  # another module registers this implementation: reported there
                covered = sorted({r.variant for r in table if r.op == op and r.impl == impl})
                for (sel_op, variant), at in sorted(selected.items()):
                    if sel_op != op or variant in covered or (op, variant) in reported:
                        continue
                    reported.add((op, variant))
                    own = [line for row, line in local if (row.op, row.variant) == (op, variant)]
                    line = max(own) if own else min(here)
                    others = sorted({r.impl for r in table if (r.op, r.variant) == (op, variant)})
                    has = f"its rows: {', '.join(f'`{i}`' for i in others)}" if others else "it has no row"
                    self.report(
                        self._statement_at(line),
                        f"`{impl}`, the `{op}` implementation this tree registers only for NPU, has {kind} rows "
                        f"for {', '.join(f'`{v}`' for v in covered)} but not for `{variant}` ({has}), which "
                        f"NPU-targeted code selects ({at}): an ops config choosing `{impl}` makes that lookup "
                        f"raise KeyError at model build; register `{op}/{variant}` under `{impl}` as well",
                    )

    def _catalog_rows_missing(self, local: list[tuple[OpRow, int]], project: Project | None) -> None:
        """A row an Ascend run selects by name (the contract catalog's device-agnostic or NPU rows of an
        op/variant, e.g. `attention/standard/veomni_flash_attention_2`, the SP-aware attention the NPU models
        use) that this module no longer registers while it registers the op/variant's other rows, and no other
        module of the tree registers either."""
        table = {(r.op, r.variant, r.impl) for r, _line in local}
        if project is not None and project.root is not None:
            table |= {(r.op, r.variant, r.impl) for r in project.registered}
        for op, variant in sorted({(r.op, r.variant) for r, _line in local}):
            catalog = [
                r for r in BUILTIN_ROWS if (r.op, r.variant) == (op, variant) and r.requirement in (ANY, NPU)
            ]
            here = {r.impl for r, _line in local if (r.op, r.variant) == (op, variant)}
            known = [r for r in catalog if r.impl in here]
            if len(known) < 2:
                continue  # this module is not the op/variant's row table
            for row in catalog:
                if (op, variant, row.impl) in table:
                    continue
                line = max(line for r, line in local if (r.op, r.variant) == (op, variant))
                self.report(
                    self._statement_at(line),
                    f"`{op}/{variant}` has no `{row.impl}` row ({row.requirement}) in this tree although this "
                    f"module registers its other rows ({', '.join(f'`{i}`' for i in sorted(here))}): models "
                    f"select `{row.impl}` by name (an ops-config value, the NPU default), and their lookup raises "
                    f"KeyError; register `{op}/{variant}/{row.impl}` again",
                )

    def _statement_at(self, line: int) -> ast.AST:
        """The top-level statement holding ``line`` (the registration call's statement)."""
        for stmt in self.ctx.tree.body:
            if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Call) and node.lineno == line:
                        return node
                return stmt
        return self.ctx.tree.body[0]
