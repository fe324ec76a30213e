"""NPU210 npu-fallback-not-applied."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.resolution import NpuHost

_SUFFIX = "_implementation"


def _impl_defaults(cls: ast.ClassDef) -> list[tuple[str, str]]:
    """(field, default) of the class's ``<op>_implementation`` fields with a literal default (``= "x"`` or
    ``= field(default="x")``)."""
    out: list[tuple[str, str]] = []
    for stmt in cls.body:
        if not (
            isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None
        ):
            continue
        name = stmt.target.id
        if not name.endswith(_SUFFIX):
            continue
        value: ast.expr | None = stmt.value
        if isinstance(value, ast.Call):
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out.append((name, value.value))
    return out


class NpuFallbackNotApplied(Rule):
    code = "NPU210"
    name = "npu-fallback-not-applied"
    summary = (
        "An ops-implementation config defines its NPU fallback (a private method named for NPU) but nothing "
        "calls it (or calls it after validating), so NPU hosts keep the GPU defaults."
    )
    why = (
        "VeOmni's ops config (`OpsImplementationConfig`) defaults every `<op>_implementation` field to the "
        "GPU-optimal kernel (`liger_kernel`, `fused_triton`, `triton`, ...). On an NPU host those defaults must "
        "be mapped to the NPU rows or to eager before validation and binding (`_apply_npu_default_fallback` "
        "in `__post_init__`); a mapping method that is defined but never called leaves the GPU names "
        "selected, so validation rejects them or the binder resolves a CUDA-only kernel. The rule reports a "
        "private method whose name mentions NPU, in a class with `*_implementation` fields, that the module "
        "never references (a call, a `getattr` by name or a stored reference all count), or calls only after "
        "the method's call that validates the implementations (`self._validate_...()` / `self._check_...()`)."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass, field

            _ASCEND_DEFAULTS = {"norm_implementation": "npu", "mlp_implementation": "eager"}


            @dataclass
            class ToyOpsConfig:
                norm_implementation: str = field(default="liger_kernel")
                mlp_implementation: str = "fused_triton"

                def __post_init__(self):
                    self._check_names()

                def _map_defaults_for_npu(self):
                    for name, value in _ASCEND_DEFAULTS.items():
                        setattr(self, name, value)

                def _check_names(self):
                    pass
            """,
            path="veomni/arguments/toy_arguments.py",
        ),
        Example(
            """
            from dataclasses import dataclass


            @dataclass
            class ToyKernels:
                scan_implementation: str = "triton"

                def __post_init__(self):
                    self._validate_choices()
                    self._use_npu_names()

                def _use_npu_names(self):
                    self.scan_implementation = "eager"

                def _validate_choices(self):
                    pass
            """,
            path="veomni/arguments/toy_kernels.py",
            title="the fallback runs after the validation",
        ),
        Example(
            """
            from dataclasses import dataclass, fields

            from veomni.utils.import_utils import is_torch_npu_available

            _ASCEND = {"scan_implementation": "npu"}


            @dataclass
            class ScanKernels:
                scan_implementation: str = "triton"

                def __post_init__(self):
                    self._npu_names()

                def _npu_names(self):
                    if is_torch_npu_available():
                        return
                    initial = {f.name: f.default for f in fields(self)}
                    for name, value in _ASCEND.items():
                        if getattr(self, name) != initial[name] and name in initial:
                            setattr(self, name, value)
            """,
            path="veomni/arguments/scan_kernels.py",
            title="the fallback returns on NPU hosts",
        ),
    )
    good = (
        Example(
            """
            from dataclasses import dataclass, field


            @dataclass
            class ToyOpsConfig:
                norm_implementation: str = field(default="liger_kernel")

                def __post_init__(self):
                    fallback = getattr(self, "_npu_fallback")
                    fallback()

                def _npu_fallback(self):
                    self.norm_implementation = "npu"
            """,
            path="veomni/arguments/toy_arguments.py",
        ),
    )
    fix_safety = (
        "No fix: where the fallback runs (before validation, on NPU hosts only) is the config's choice."
    )
    node_types = (ast.ClassDef,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if _SUFFIX not in text or "npu" not in text.lower():
            self.node_types = ()

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        defaults = _impl_defaults(node)
        if not defaults:
            return
        used = self._referenced_names()
        for stmt in node.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            name = stmt.name
            if not name.startswith("_") or name.startswith("__") or "npu" not in name.lower():
                continue
            if name in used:
                self._after_validation(node, name)
                self._conditional(node, name)
                self._fallback_body(node, stmt)
                continue
            gpu = sorted({value for _field, value in defaults if value != "eager"})
            shown = ", ".join(f"`{v}`" for v in gpu) or "their non-NPU values"
            self.report(
                stmt,
                f"`{node.name}.{name}` (the config's NPU fallback) is never called: on an NPU host the "
                f"`*{_SUFFIX}` fields keep their defaults ({shown}); call it from `__post_init__` before the "
                "implementations are validated",
            )

    def _after_validation(self, cls: ast.ClassDef, fallback: str) -> None:
        """The fallback is called, but in the same method after the call that validates the implementations:
        validation sees the GPU defaults on an NPU host and rejects them."""
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef):
                continue
            order: list[tuple[int, int, str, ast.Call]] = []
            for sub in ast.walk(method):
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and isinstance(sub.func.value, ast.Name)
                    and sub.func.value.id == "self"
                ):
                    order.append((sub.lineno, sub.col_offset, sub.func.attr, sub))
            order.sort(key=lambda item: item[:2])
            names = [name for _l, _c, name, _call in order]
            if fallback not in names:
                continue
            at = names.index(fallback)
            checks = [name for name in names[:at] if "validat" in name.lower() or "check" in name.lower()]
            if checks:
                self.report(
                    order[at][3],
                    f"`{cls.name}.{fallback}` (the config's NPU fallback) runs after `self.{checks[0]}()` in "
                    f"`{method.name}`: on an NPU host the implementations are validated while they still hold "
                    "the GPU defaults; apply the fallback first",
                )

    def _conditional(self, cls: ast.ClassDef, fallback: str) -> None:
        """The fallback is called only under a condition that is not about the host (``if self.x == "fused":
        ...; self._npu_fallback()``) while the validation in the same method runs every time: on an NPU host
        whose config does not meet the condition the defaults stay and are validated."""
        host = NpuHost()
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef):
                continue
            calls = [
                sub
                for sub in ast.walk(method)
                if isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
            ]
            mine = [c for c in calls if c.func.attr == fallback]  # type: ignore[attr-defined]
            checks = [c for c in calls if any(w in c.func.attr.lower() for w in ("validat", "check"))]  # type: ignore[attr-defined]
            if len(mine) != 1 or not checks:
                continue
            top = {id(s) for s in method.body}
            if any(
                id(s) in top and isinstance(s, ast.Expr) and s.value is c for s in method.body for c in checks
            ):
                pass
            else:
                continue  # the validation is itself conditional
            for stmt in method.body:
                if not isinstance(stmt, ast.If) or not any(n is mine[0] for n in ast.walk(stmt)):
                    continue
                decided, dependent = host.test(stmt.test, {})
                if dependent or "npu" in ast.unparse(stmt.test).lower():
                    break  # an NPU test: the fallback's own guard
                self.report(
                    mine[0],
                    f"`{cls.name}.{fallback}` (the config's NPU fallback) runs only when "
                    f"`{self.ctx.source.segment(stmt.test)}` holds, but `{method.name}` validates the "
                    "implementations every time: an NPU host whose config does not meet that condition keeps the "
                    "GPU defaults and is rejected; call the fallback unconditionally",
                )
                break

    def _fallback_body(self, cls: ast.ClassDef, method: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """The fallback itself, as an NPU host runs it: a leading ``if <test>: return`` the NPU host takes
        (``if is_torch_npu_available(): return``) skips every assignment; an assignment made only when the
        field differs from its default (``if current != defaults[name]:``) rewrites the user's explicit choices
        and leaves the GPU defaults in place."""
        host = NpuHost()
        for stmt in method.body:
            if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[0], ast.Return):
                decided, dependent = host.test(stmt.test, {})
                if decided is True and dependent:
                    self.report(
                        stmt.test,
                        f"`{cls.name}.{method.name}` (the config's NPU fallback) returns when "
                        f"`{self.ctx.source.segment(stmt.test)}` holds, which is true on every NPU host: the "
                        "fallback never applies where it is needed; return when the host is not an NPU",
                    )
                    return
        for sub in ast.walk(method):
            if not isinstance(sub, ast.If) or not isinstance(sub.test, ast.Compare) or len(sub.test.ops) != 1:
                continue
            if not isinstance(sub.test.ops[0], (ast.NotEq, ast.IsNot)):
                continue
            sides = [sub.test.left, sub.test.comparators[0]]
            if not any("default" in ast.unparse(side).lower() for side in sides):
                continue
            writes = any(
                (isinstance(w, ast.Call) and isinstance(w.func, ast.Name) and w.func.id == "setattr")
                or (
                    isinstance(w, (ast.Assign, ast.AugAssign))
                    and any(
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        for t in (w.targets if isinstance(w, ast.Assign) else [w.target])
                    )
                )
                for part in sub.body
                for w in ast.walk(part)
            )
            if writes:
                self.report(
                    sub.test,
                    f"`{cls.name}.{method.name}` (the config's NPU fallback) rewrites a field only when "
                    f"`{self.ctx.source.segment(sub.test)}`: it replaces the values a user chose and keeps the "
                    "GPU defaults on NPU hosts; rewrite the fields that still hold their default",
                )
                return

    def _referenced_names(self) -> set[str]:
        """Every attribute name read, every bare name read, and every string constant of the module (a
        ``getattr(self, "_name")`` reference)."""
        cached = self.ctx.memo.get("npu210-refs")
        if cached is None:
            refs: set[str] = set()
            for sub in ast.walk(self.ctx.tree):
                if isinstance(sub, ast.Attribute):
                    refs.add(sub.attr)
                elif isinstance(sub, ast.Name):
                    refs.add(sub.id)
                elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) < 80:
                    refs.add(sub.value)
            cached = self.ctx.memo["npu210-refs"] = refs
        return cached  # type: ignore[return-value]
