"""NPU627 group-accessor-alias."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.collectives import accessor_dimensions


def _returned_dim(func: ast.FunctionDef) -> tuple[str, ast.Call] | None:
    """The mesh dimension ``<mesh>.get_group("<dim>")`` the accessor returns (its first such return)."""
    for stmt in walk(func):
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            if (
                isinstance(call.func, ast.Attribute)
                and call.func.attr == "get_group"
                and len(call.args) == 1
                and not call.keywords
                and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)
            ):
                return call.args[0].value, call
    return None


class GroupAccessorAlias(Rule):
    code = "NPU627"
    name = "group-accessor-alias"
    summary = (
        "A parallel-state group accessor (`fsdp_group`) returns the process group of a mesh dimension that a "
        "sibling accessor named for that dimension (`dp_group`) already returns."
    )
    why = (
        "A parallel state hands out one process group per parallel dimension: `dp_group` is the `dp` mesh "
        "dimension's group, `sp_group` the `sp` one's, and an accessor named for a combined or derived group "
        "(`fsdp_group`: FSDP shards over the flattened `dp_sp` dimension) returns that dimension's group. When "
        "such an accessor returns the group of another dimension that its own accessor already hands out, every "
        "caller reduces over the wrong ranks: gradient-norm clipping and metric all-reduces run on the data-"
        "parallel ranks alone while FSDP sharded over data and sequence parallel ranks, so with Ulysses on, the "
        "global norm and the logged metrics are wrong without any error. The accessors of one class are "
        "compared with each other: a dimension returned by the accessor named after it and by a differently "
        "named one is reported at the latter, unless it is the dimension VeOmni's accessor of that name returns "
        "(`fsdp_group` is the `dp_sp` group, so a `dp_sp_group` next to it is a synonym)."
    )
    bad = (
        Example(
            """
            class ParallelState:
                @property
                def dp_group(self):
                    return self.device_mesh.get_group("dp")

                @property
                def fsdp_group(self):
                    return self.device_mesh.get_group("dp")

                @property
                def sp_group(self):
                    return self.device_mesh.get_group("sp")
            """,
            path="veomni/distributed/parallel_state.py",
            title="the FSDP group accessor hands out the data-parallel group (FSDP shards over dp x sp)",
        ),
    )
    good = (
        Example(
            """
            class ParallelState:
                @property
                def dp_group(self):
                    return self.device_mesh.get_group("dp")

                @property
                def fsdp_group(self):
                    return self.device_mesh.get_group("dp_sp")
            """,
            path="veomni/distributed/parallel_state.py",
        ),
    )
    fix_safety = "No fix: which mesh dimension the accessor should return is for the author to name."

    requires = ("get_group(",)
    node_types = (ast.ClassDef,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        by_dim: dict[str, list[tuple[str, ast.Call]]] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name.endswith("_group"):
                found = _returned_dim(stmt)
                if found is not None:
                    by_dim.setdefault(found[0], []).append((stmt.name, found[1]))
        for dim, accessors in by_dim.items():
            names = {name for name, _ in accessors}
            own = f"{dim}_group"
            if own not in names or len(names) < 2:
                continue
            for name, call in accessors:
                if name == own or dim in accessor_dimensions(name):
                    continue  # its own dimension, or the one VeOmni's accessor of that name returns (a synonym)
                self.report(
                    call,
                    f"`{name}` returns the `{dim}` mesh dimension's group, which `{own}` already hands out: an "
                    f"accessor named for another group that aliases `{own}` makes its callers reduce over the "
                    f"`{dim}` ranks only",
                )
