"""NPU212 npu-fallback-incomplete."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch.npu210_npu_fallback_not_applied import _impl_defaults
from npu_lint.rules.dispatch.npu211_npu_required_table import _field_tables

_ALWAYS_ALLOWED = "eager"  # the ops config accepts eager on every host without listing it


def _is_allowed_table(name: str, table: ast.Dict) -> bool:
    """An NPU table of implementation sets (``"x_implementation": frozenset({...})``), not the required one."""
    low = name.lower()
    if "npu" not in low or "requir" in low:
        return False
    return all(not (isinstance(v, ast.Constant) and isinstance(v.value, str)) for v in table.values)


def _is_fallback_table(name: str, table: ast.Dict) -> bool:
    """An NPU table of single implementation names (``"x_implementation": "npu"``)."""
    return "npu" in name.lower() and all(
        isinstance(v, ast.Constant) and isinstance(v.value, str) for v in table.values
    )


def _later_entries(tree: ast.Module, name: str) -> dict[str, set[str]]:
    """Entries a module-level statement adds to the table ``name`` after its literal: ``NAME["f"] = "v"``,
    ``NAME.update({"f": "v"})`` / ``NAME.update(f="v")``, ``NAME.setdefault("f", "v")``, ``NAME |= {...}``."""
    out: dict[str, set[str]] = {}

    def add(key: ast.expr | str | None, value: ast.expr) -> None:
        field = key if isinstance(key, str) else key.value if isinstance(key, ast.Constant) else None
        if isinstance(field, str) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            out.setdefault(field, set()).add(value.value)

    def add_dict(value: ast.expr) -> None:
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=False):
                add(key, item)

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == name
            ):
                add(target.slice, stmt.value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            add_dict(stmt.value)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if not (
                isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name
            ):
                continue
            call = stmt.value
            if func.attr == "update":
                for arg in call.args:
                    add_dict(arg)
                for kw in call.keywords:
                    add(kw.arg, kw.value)
            elif func.attr == "setdefault" and len(call.args) == 2:
                add(call.args[0], call.args[1])
    return out


class NpuFallbackIncomplete(Rule):
    code = "NPU212"
    name = "npu-fallback-incomplete"
    summary = (
        "The ops config's NPU default table leaves out a field whose GPU default the NPU allow-list rejects "
        "(or maps a field to a value the allow-list rejects)."
    )
    why = (
        "VeOmni's ops config keeps GPU-optimal defaults (`moe_implementation='fused_triton'`, "
        "`rms_norm_implementation='liger_kernel'`, ...) and, on an Ascend host, first swaps every field still "
        "at its default for the NPU value of a fallback table, then validates each field against an NPU "
        "allow-list (eager is always accepted). Every field whose dataclass default is not on the allow-list "
        "therefore needs a fallback entry, and every fallback value must itself be allowed: otherwise an NPU "
        "run with a default ops config is rejected at config parse, or binds a CUDA-only kernel. The rule "
        "reads the three tables of the module itself (the dataclass's `<op>_implementation` defaults, the "
        "module-level dicts named for NPU that map each field to a set of implementations, and to one "
        "implementation), so the message names this tree's fields and values."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass, field

            _NPU_OK = {
                "norm_implementation": frozenset({"npu"}),
                "experts_implementation": frozenset({"fused_npu"}),
            }
            _NPU_DEFAULTS = {
                "norm_implementation": "npu",
            }


            @dataclass
            class KernelChoices:
                norm_implementation: str = "liger_kernel"
                experts_implementation: str = field(default="fused_triton")
            """,
            path="veomni/arguments/toy_choices.py",
            title="the experts default (a Triton kernel) is neither allowed on NPU nor swapped for an NPU one",
        ),
        Example(
            """
            from dataclasses import dataclass

            NPU_SUPPORTED_IMPLS = {"rope_implementation": ("npu",), "loss_implementation": ("chunk_loss",)}
            NPU_FALLBACK_IMPLS = {"rope_implementation": "npu", "loss_implementation": "liger_kernel"}


            @dataclass
            class Ops:
                rope_implementation: str = "liger_kernel"
                loss_implementation: str = "liger_kernel"
            """,
            path="veomni/arguments/toy_ops.py",
            title="the fallback value itself is not allowed on NPU",
        ),
    )
    good = (
        Example(
            """
            from dataclasses import dataclass, field

            _NPU_OK = {
                "norm_implementation": frozenset({"npu"}),
                "experts_implementation": frozenset({"fused_npu"}),
                "mlp_implementation": frozenset(),
            }
            _NPU_DEFAULTS = {
                "norm_implementation": "npu",
                "experts_implementation": "fused_npu",
                "mlp_implementation": "eager",
            }


            @dataclass
            class KernelChoices:
                norm_implementation: str = "liger_kernel"
                experts_implementation: str = field(default="fused_triton")
                mlp_implementation: str = "liger_kernel"
                vision_rope_implementation: str = "eager"
            """,
            path="veomni/arguments/toy_choices.py",
        ),
    )
    fix_safety = "No fix: choose the NPU value of the field by hand."
    requires = ("_implementation", ("NPU", "Npu", "npu"))
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        tables = _field_tables(node)
        allowed = [t for t in tables if _is_allowed_table(t[0], t[2])]
        fallback = [t for t in tables if _is_fallback_table(t[0], t[2])]
        if len(allowed) != 1 or len(fallback) != 1:
            return
        allowed_name, _a_stmt, a_dict, allow = allowed[0]
        fb_name, fb_stmt, fb_dict, fb = fallback[0]
        fb = {**fb, **{k: fb.get(k, set()) | v for k, v in _later_entries(node, fb_name).items()}}
        defaults: dict[str, str] = {}
        for stmt in ast.walk(node):
            if isinstance(stmt, ast.ClassDef):
                for field, value in _impl_defaults(stmt):
                    defaults.setdefault(field, value)
        if not defaults:
            return
        # a fallback value the allow-list rejects: reported on the entry itself
        for key, value in zip(fb_dict.keys, fb_dict.values, strict=False):
            field = key.value if isinstance(key, ast.Constant) else None
            if not isinstance(field, str) or field not in allow:
                continue
            bad = sorted(v for v in fb.get(field, set()) if v != _ALWAYS_ALLOWED and v not in allow[field])
            if bad:
                self.report(
                    value,
                    f'`{fb_name}` maps `{field}` to "{bad[0]}" on NPU, but `{allowed_name}` allows only '
                    f"{self._shown(allow[field])} there: an NPU run with the default ops config is rejected at "
                    "validation",
                )
        missing = [
            (field, default)
            for field, default in defaults.items()
            if field in allow
            and default != _ALWAYS_ALLOWED
            and default not in allow[field]
            and field not in fb
        ]
        if not missing:
            return
        at = self._slot(fb_dict, a_dict, defaults, missing[0][0]) or (
            fb_dict.values[-1] if fb_dict.values else fb_stmt
        )
        shown = ", ".join(f'`{field}` (default "{default}")' for field, default in missing)
        self.report(
            at,
            f"`{fb_name}` has no NPU value for {shown}, whose GPU default `{allowed_name}` does not allow on "
            "NPU: on an Ascend host the default stays, so a default ops config is rejected at validation (or "
            "binds a CUDA-only kernel); add the field's NPU (or eager) value",
        )

    @staticmethod
    def _slot(
        fb_dict: ast.Dict, allow_dict: ast.Dict, defaults: dict[str, str], field: str
    ) -> ast.AST | None:
        """The fallback entry the missing ``field`` belongs before, in the order the allow-list (else the
        dataclass) lists the fields: where the entry was lost or is to be written."""
        order = [k.value for k in allow_dict.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if field not in order:
            order = list(defaults)
        if field not in order:
            return None
        rank = {name: i for i, name in enumerate(order)}
        for key in fb_dict.keys:
            name = key.value if isinstance(key, ast.Constant) else None
            if isinstance(name, str) and rank.get(name, -1) > rank[field]:
                return key
        return None

    @staticmethod
    def _shown(values: set[str]) -> str:
        listed = ", ".join(f'"{v}"' for v in sorted(values))
        return f"{listed} (and eager)" if listed else "eager"
