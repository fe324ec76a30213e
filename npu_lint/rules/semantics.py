"""NPU4xx: model semantics. Offset (Gemma-style) RMSNorm: the `offset` variant adds the 1 inside the op.

Upstream classes are read from the installed transformers source (located with ``importlib.util.find_spec``
and parsed with ``ast``; never imported).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from npu_lint.astutil import transformers_dir
from npu_lint.diagnostics import Applicability, Edit, Fix
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.dispatch import (
    Handle,
    HandleTable,
    call_arg,
    owner_class,
    spec_target,
    str_value,
)

_CASTS = {"to", "float", "type_as", "type", "half", "bfloat16", "contiguous"}
_SIMPLE = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 1


def _paren_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Extend [start, end) over one pair of parentheses around it (whitespace allowed)."""
    i, j = start - 1, end
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    if i >= 0 and j < len(text) and text[i] == "(" and text[j] == ")":
        return i, j + 1
    return start, end


def offset_raw(ctx: Context, expr: ast.AST) -> str | None:
    """For `1 + w`, `1.0 + w.float()`, `w + 1`, `(1 + w).to(x.dtype)`: the text with the offset removed."""
    src = ctx.source
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        other = expr.right if _is_one(expr.left) else expr.left if _is_one(expr.right) else None
        if other is None:
            return None
        text = src.segment(other)
        return text if isinstance(other, _SIMPLE) else f"({text})"
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in _CASTS
        and isinstance(expr.func.value, ast.BinOp)
    ):
        inner = offset_raw(ctx, expr.func.value)
        if inner is None:
            return None
        start, end = src.node_range(expr.func.value)
        _, after = _paren_span(src.text, start, end)
        call_end = src.node_range(expr)[1]
        return inner + src.text[after:call_end]
    return None


def _assigned_in(func: ast.AST | None, name: str) -> list[ast.expr]:
    if func is None:
        return []
    values: list[ast.expr] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            values.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            if node.target.id == name:
                values.append(node.value or node.target)  # type: ignore[arg-type]
    return values


def weight_argument(call: ast.Call) -> ast.expr | None:
    return call_arg(call, 1, "weight")


def raw_weight_attr(expr: ast.AST) -> str | None:
    """`self.weight`, `self.weight.float()`, `self.weight.to(x.dtype)` -> "weight"."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _CASTS:
        expr = expr.func.value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr
    return None


# -- zero-initialised weights -------------------------------------------------------------------------


def _param_init(func: ast.AST, attr: str) -> bool | None:
    """True: `self.<attr> = nn.Parameter(torch.zeros(...))`; False: another initialiser; None: not set."""
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        if not any(
            isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
            and t.attr == attr
            for t in node.targets
        ):
            continue
        value = node.value
        if isinstance(value, ast.Call) and _last(value.func) == "Parameter" and value.args:
            inner = value.args[0]
            if isinstance(inner, ast.Call) and _last(inner.func) in ("zeros", "zeros_like", "new_zeros"):
                return True
        return False
    return None


def _last(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def upstream_path(module: str) -> Path | None:
    """File of a `transformers.*` module, by path arithmetic from the installed package."""
    parts = module.split(".")
    if parts[0] != "transformers" or len(parts) < 2:
        return None
    base = transformers_dir()
    if base is None:
        return None
    path = base.joinpath(*parts[1:]).with_suffix(".py")
    if path.is_file():
        return path
    init = base.joinpath(*parts[1:], "__init__.py")
    return init if init.is_file() else None


@functools.lru_cache(maxsize=64)
def _upstream_module(module: str) -> tuple[dict[str, ast.ClassDef], dict[str, str]] | None:
    path = upstream_path(module)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    imports: dict[str, str] = {}
    package = module.rsplit(".", 1)[0]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{source}.{alias.name}"
    return classes, imports


@functools.lru_cache(maxsize=256)
def upstream_zero_init(module: str, cls: str, attr: str = "weight", depth: int = 0) -> bool | None:
    """Whether upstream ``module.cls`` initialises ``self.<attr>`` to zeros (None: unknown)."""
    found = _upstream_module(module)
    if found is None or depth > 4:
        return None
    classes, imports = found
    node = classes.get(cls)
    if node is None:
        target = imports.get(cls)
        if target and target.startswith("transformers."):
            mod, _, name = target.rpartition(".")
            return upstream_zero_init(mod, name, attr, depth + 1)
        return None
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is not None:
        result = _param_init(init, attr)
        if result is not None:
            return result
    for base in node.bases:
        name = _last(base)
        if name and name != "Module":
            if name in classes:
                result = upstream_zero_init(module, name, attr, depth + 1)
            elif name in imports and imports[name].startswith("transformers."):
                mod, _, real = imports[name].rpartition(".")
                result = upstream_zero_init(mod, real, attr, depth + 1)
            else:
                result = None
            if result is not None:
                return result
    return None


# -- the shared collector ----------------------------------------------------------------------------


class _RmsNormState:
    """What NPU401/NPU402 need from the traversal, collected once per file for both rules."""

    def __init__(self) -> None:
        self.handles = HandleTable()
        self.calls: list[tuple[ast.Call, ast.AST | None, str | None]] = []  # (call, function, class)
        self.classes: dict[str, ast.ClassDef] = {}
        self.init_patches: dict[str, ast.AST] = {}  # class -> spec function replacing its __init__
        self.source_module: str | None = None
        self.functions: list[tuple[ast.AST, str | None]] = []  # stack of (function, owning class)


class _RmsNormCalls(Rule):
    """Collects handle declarations and RMSNorm handle calls; subclasses judge them in ``finish``.

    The first of NPU401/NPU402 instantiated for a file feeds a state shared through the context; the other
    only reads it.
    """

    node_types = (ast.Assign, ast.Call, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    leave_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        state = ctx.memo.get("rms_state")
        self.feeder = state is None
        if state is None:
            state = _RmsNormState()
            ctx.memo["rms_state"] = state
        self.state = state
        if not self.feeder:  # visit/leave do nothing for the reader: the walk need not call them
            self.node_types = ()
            self.leave_types = ()
        self.handles = state.handles
        self.classes = state.classes
        self.init_patches = state.init_patches

    @property
    def source_module(self) -> str | None:
        return self.state.source_module

    def leave(self, node: ast.AST) -> None:
        if self.feeder:
            self.state.functions.pop()

    def visit(self, node: ast.AST) -> None:
        if not self.feeder:
            return
        ctx = self.ctx
        state = self.state
        if isinstance(node, ast.Call):
            if (
                state.functions
                and (len(node.args) >= 2 or any(k.arg == "weight" for k in node.keywords))
                and isinstance(node.func, (ast.Name, ast.Attribute, ast.Call))
            ):
                func, cls = state.functions[-1]
                if func is not None:
                    state.calls.append((node, func, cls))
        elif isinstance(node, ast.Assign):
            state.handles.visit_assign(ctx, node)
            value = node.value
            if isinstance(value, ast.Call) and _last(value.func) == "PatchConfig" and not state.functions:
                state.source_module = str_value(call_arg(value, 99, "source_module")) or state.source_module
        elif isinstance(node, ast.Lambda):
            state.functions.append((None, None))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            state.functions.append((node, owner_class(ctx, node)))
            if isinstance(node, ast.FunctionDef):
                cls, method = spec_target(node)
                if cls is not None and method == "__init__":
                    state.init_patches[cls] = node
        elif isinstance(node, ast.ClassDef):
            if not state.functions:
                state.classes.setdefault(node.name, node)

    def rms_calls(self) -> list[tuple[ast.Call, ast.AST | None, str | None, Handle]]:
        out = []
        for call, func, cls in self.state.calls:
            handle = self.handles.resolve(self.ctx, call.func, cls)
            if handle is not None and handle.op == "rms_norm" and weight_argument(call) is not None:
                out.append((call, func, cls, handle))
        return out

    # -- is the class's weight zero-initialised?
    def _module_of_file(self) -> str | None:
        if self.source_module:
            return self.source_module
        head = self.ctx.source.text[:4096]
        for line in head.splitlines():
            stripped = line.lstrip("# ").strip()
            if stripped.startswith("Source:"):
                return stripped.split(":", 1)[1].strip() or None
        return None

    def zero_init(self, cls: str | None, attr: str) -> bool:
        if cls is None:
            return False
        patch = self.init_patches.get(cls)
        if patch is not None:
            result = _param_init(patch, attr)
            if result is not None:
                return result
        node = self.classes.get(cls)
        if node is not None:
            init = next(
                (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
            )
            if init is not None:
                result = _param_init(init, attr)
                if result is not None:
                    return result
            for base in node.bases:
                name = _last(base)
                if name in self.classes and name != cls:
                    if self.zero_init(name, attr):
                        return True
                    continue
                target = self.ctx.imports.get(name or "", "")
                if target.startswith("transformers."):
                    mod, _, real = target.rpartition(".")
                    if upstream_zero_init(mod, real, attr):
                        return True
            if init is not None or node.bases:
                return False
        # not set in the file: a patched copy of an upstream class (spec, generated file) reads upstream
        module = self._module_of_file()
        if module and module.startswith("transformers."):
            return bool(upstream_zero_init(module, cls, attr))
        return False


# -- NPU401 -----------------------------------------------------------------------------------------


class OffsetRmsNormDoubleApplication(_RmsNormCalls):
    code = "NPU401"
    name = "offset-rmsnorm-double-application"
    summary = "`1 + weight` is passed to an `offset` RMSNorm handle, which adds the 1 itself."
    why = (
        "Gemma-style RMSNorm (Gemma 3, Qwen3.5, Qwen3-Next) computes `norm(x) * (1 + weight)` with a weight "
        "initialised to zeros. VeomniOp's `rms_norm/offset` variant (the OpSlot `qwen3_5` variant) adds the 1 "
        "inside the kernel, so the caller passes the raw weight. Passing `1 + w` (or `1.0 + w.float()`, "
        "`w + 1`, `(1 + w).to(dtype)`, or a variable holding one of those) applies the offset twice: training "
        "runs, the loss is just wrong. This happens when OpSlot-era Gemma 3 code, which passed `1.0 + w` to a "
        "`standard` slot, is moved to the `offset` variant without dropping the 1."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, 1.0 + self.weight.float(), eps=self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight.float(), eps=self.eps)
            """,
            title="the offset written at the call",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )


            @config.override_method("Qwen3_5RMSNorm.forward")
            def qwen3_5_rmsnorm_forward_patched(self, x):
                scale = (1 + self.weight).to(x.dtype)
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, scale, self.eps)
                return self._norm(x.float()).type_as(x) * scale
            ''',
            fixed='''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )


            @config.override_method("Qwen3_5RMSNorm.forward")
            def qwen3_5_rmsnorm_forward_patched(self, x):
                scale = (1 + self.weight).to(x.dtype)
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, self.weight.to(x.dtype), self.eps)
                return self._norm(x.float()).type_as(x) * scale
            ''',
            path="veomni/models/transformers/qwen3_5/qwen3_5_gpu_patch_gen_config.py",
            title="a variable holding 1 + w, passed to an OpSlot qwen3_5 slot declared in a post-import block",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyGemmaRMSNorm:
                def forward(self, x):
                    # OpSlot-era Gemma 3: 1 + w passed to a *standard* slot is correct
                    return veomni_rms_norm(x, 1.0 + self.weight, self.eps)
            """
        ),
        Example(
            """
            class ToyGemmaRMSNorm:
                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)

                def __init__(self, impl):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", impl)
            """
        ),
    )
    fix_safety = (
        "Safe: the argument becomes the raw weight (`1.0 + self.weight.float()` -> `self.weight.float()`, "
        "`(1 + w).to(d)` -> `w.to(d)`; a variable is replaced at the call by the raw expression it was built "
        "from), which is what the `offset` kernel expects. The variable itself is left for other uses."
    )
    precision = (
        "veomni 0.1.12: no findings (its `qwen3_5` slots get the raw weight; Gemma 3 has no RMSNorm slot)."
    )

    def finish(self) -> None:
        ctx = self.ctx
        for call, func, _cls, handle in self.rms_calls():
            if handle.variant != "offset":
                continue
            arg = weight_argument(call)
            assert arg is not None
            raw = offset_raw(ctx, arg)
            shown = ctx.source.segment(arg)
            if raw is None and isinstance(arg, ast.Name):
                values = _assigned_in(func, arg.id)
                raws = [offset_raw(ctx, v) for v in values]
                if not values or any(r is None for r in raws) or len(set(raws)) != 1:
                    continue
                raw = raws[0]
                shown = f"{arg.id} = {ctx.source.segment(values[0])}"
            if raw is None:
                continue
            fix = make_fix(f"Pass the raw weight `{raw}`", [ctx.replace(arg, raw)], Applicability.SAFE)
            variant = handle.raw_variant or handle.variant
            self.report(
                arg,
                f"`{shown}` passed to an offset RMSNorm handle (variant `{variant}`), which adds the 1 itself: "
                "the offset is applied twice; pass the raw weight",
                fix,
            )


# -- NPU402 -----------------------------------------------------------------------------------------


class OffsetRmsNormDropped(_RmsNormCalls):
    code = "NPU402"
    name = "offset-rmsnorm-dropped"
    summary = "A zero-initialised (Gemma-style) RMSNorm weight is passed raw to a `standard` RMSNorm handle."
    why = (
        "An RMSNorm whose weight is initialised to zeros computes `norm(x) * (1 + weight)`. The `standard` "
        "variant computes `norm(x) * weight`: with the raw weight it multiplies by roughly zero, dropping the "
        "offset. Such a norm needs the `offset` variant (which adds the 1 inside the op). The initialisation is "
        "read from the class's `__init__` in the file, from a spec's `__init__` patch, or from the upstream "
        "transformers class (read from the installed source, not imported). Passing `1 + w` to a `standard` "
        "slot (OpSlot-era Gemma 3) is correct and not reported."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            title="zeros in the class's own __init__",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.__init__")
            def gemma3_rmsnorm_init_patched(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.__init__")
            def gemma3_rmsnorm_init_patched(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="zeros in the upstream class (transformers' Gemma3RMSNorm)",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    # OpSlot-era Gemma 3: the caller adds the 1 for a standard slot
                    return veomni_rms_norm(x, 1.0 + self.weight, self.eps)
            """
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", impl)

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)
            """
        ),
    )
    fix_safety = (
        "Unsafe (changes the numerics, to the intended ones): the handle's declared variant becomes `offset` "
        "(`qwen3_5` for an OpSlot). Offered only when every call of that handle in the file passes a "
        "zero-initialised weight raw, and the declaration is a literal in this file."
    )
    precision = "veomni 0.1.12: no findings (Qwen3.5 uses the `qwen3_5` slot; Gemma 3 has no RMSNorm slot)."

    def finish(self) -> None:
        calls = self.rms_calls()
        if not calls:
            return
        findings = []
        uses: dict[int, int] = {}
        for call, _func, cls, handle in calls:
            uses[id(handle.call)] = uses.get(id(handle.call), 0) + 1
            if handle.variant != "standard":
                continue
            arg = weight_argument(call)
            attr = raw_weight_attr(arg) if arg is not None else None
            if attr is None or not self.zero_init(cls, attr):
                continue
            findings.append((call, arg, cls, handle))
        flagged: dict[int, int] = {}
        for _call, _arg, _cls, handle in findings:
            flagged[id(handle.call)] = flagged.get(id(handle.call), 0) + 1
        for _call, arg, cls, handle in findings:
            fix = None
            key = id(handle.call)
            if flagged[key] == uses[key]:
                fix = self._variant_fix(handle)
            self.report(
                arg,  # type: ignore[arg-type]
                f"`{cls}` initialises its weight to zeros (output `norm(x) * (1 + weight)`), but the raw weight is "
                "passed to a `standard` RMSNorm handle: the offset is dropped; use the `offset` variant",
                fix,
            )

    def _variant_fix(self, handle: Handle) -> Fix | None:
        ctx = self.ctx
        node = call_arg(handle.call, 1, "variant")
        if node is None or str_value(node) is None:
            return None
        new = '"qwen3_5"' if handle.kind == "OpSlot" else '"offset"'
        if handle.block is not None:
            span = handle.block.offsets(ctx, node)
            if span is None:
                return None
            edit = Edit(span[0], span[1], new)
        else:
            edit = ctx.replace(node, new)
        return make_fix(
            f"Switch the handle to the {new} variant",
            [edit],
            Applicability.UNSAFE,
            "changes the normalisation to norm(x) * (1 + weight), as the zero-initialised weight intends",
        )
