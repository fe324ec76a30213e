"""NPU211 npu-required-table."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import CONFIG_FIELD_TO_OP, NPU, OpRow
from npu_lint.veomni.profile import Generation

_SUFFIX = "_implementation"


def _strings(node: ast.AST) -> set[str] | None:
    """The strings of ``frozenset({...})`` / ``set([...])`` / ``{...}`` / ``(...)`` / a single string; None when
    the value is not such a literal."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set", "tuple"):
        if not node.args:
            return set()
        node = node.args[0]
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        values = [str_value(e) for e in node.elts]
        return None if any(v is None for v in values) else set(values)  # type: ignore[arg-type]
    value = str_value(node)
    return None if value is None else {value}


def _field_tables(tree: ast.Module) -> list[tuple[str, ast.stmt, ast.Dict, dict[str, set[str]]]]:
    """Module-level dict literals keyed by ops-config fields (``"rms_norm_implementation": frozenset({"npu"})``
    or ``"rms_norm_implementation": "npu"``): (name, statement, dict, field -> implementation names)."""
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict) or not value.keys:
            continue
        table: dict[str, set[str]] = {}
        for key, item in zip(value.keys, value.values, strict=False):
            field = str_value(key) if key is not None else None
            names = _strings(item)
            if field is None or not field.endswith(_SUFFIX) or names is None:
                table = {}
                break
            table[field] = names
        if table:
            out.append((target.id, stmt, value, table))
    return out


class NpuRequiredTable(Rule):
    code = "NPU211"
    name = "npu-required-table"
    summary = (
        "The ops config's table of NPU-only implementations leaves out an implementation that the tree registers "
        "only for NPU and that its NPU tables select."
    )
    why = (
        "VeOmni validates the ops config per device: next to the implementations allowed on NPU and the NPU "
        "fallbacks, a table lists, per `<op>_implementation` field, the implementations that need an Ascend "
        "host, so that choosing one elsewhere fails at validation. When the registry registers an "
        "implementation only with an NPU requirement (`npu` for `rms_norm`) and the module's other NPU tables "
        "select it for a field, but the NPU-required table does not list it, a config choosing it on a GPU "
        "host passes validation and fails late, when the kernel is bound (or falls back silently); the tables "
        "also drift apart for the next reader. The table is the module-level dict keyed by ops-config fields "
        "whose name says NPU and required; the rows are the tree's own registry rows."
    )
    bad = (
        Example(
            """
            _NPU_ALLOWED = {
                "rms_norm_implementation": frozenset({"npu"}),
                "cross_entropy_loss_implementation": frozenset({"chunk_loss", "npu"}),
            }
            _NPU_FALLBACK = {
                "rms_norm_implementation": "npu",
                "cross_entropy_loss_implementation": "npu",
            }
            _NPU_REQUIRED = {
                "cross_entropy_loss_implementation": frozenset({"npu"}),
            }
            """,
            path="veomni/arguments/toy_arguments.py",
        ),
    )
    good = (
        Example(
            """
            NPU_ALLOWED = {"rms_norm_implementation": frozenset({"npu"}), "swiglu_mlp_implementation": frozenset()}
            NPU_REQUIRED = {"rms_norm_implementation": frozenset({"npu"})}
            """,
            path="veomni/arguments/toy_arguments.py",
        ),
    )
    fix_safety = "No fix: add the implementation to the table by hand (it changes what validation accepts)."
    requires = ("_implementation", ("REQUIRED", "Required", "required"))
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _rows(self) -> tuple[list[OpRow], str]:
        project = self.ctx.project
        if project.generation is Generation.OP_SLOT and project.slot_rows:
            return list(project.slot_rows), "the tree's KernelSpec rows"
        return list(project.rows), project.rows_origin

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        tables = _field_tables(node)
        required = [t for t in tables if "npu" in t[0].lower() and "requir" in t[0].lower()]
        others = [t for t in tables if "npu" in t[0].lower() and t not in required]
        if len(required) != 1 or not others:
            return
        name, stmt, _dict, listed = required[0]
        rows, origin = self._rows()
        missing: list[tuple[str, str, str]] = []  # (field, implementation, table selecting it)
        seen: set[tuple[str, str]] = set()
        for other, _stmt, _d, table in others:
            for field, impls in table.items():
                ops = {CONFIG_FIELD_TO_OP.get(field), field[: -len(_SUFFIX)]} - {None}
                for impl in sorted(impls):
                    if impl in listed.get(field, set()) or (field, impl) in seen:
                        continue
                    reqs = {r.requirement for r in rows if r.op in ops and r.impl == impl}
                    if reqs == {NPU}:  # registered, and only for NPU
                        seen.add((field, impl))
                        missing.append((field, impl, other))
        if not missing:
            return
        shown = ", ".join(f'`{field}`: "{impl}" (selected by `{other}`)' for field, impl, other in missing)
        self.report(
            stmt,
            f"`{name}` leaves out {shown}, registered only for NPU ({origin}): a config choosing it off NPU "
            f"passes validation and fails when the kernel is bound; list it in `{name}`",
        )
