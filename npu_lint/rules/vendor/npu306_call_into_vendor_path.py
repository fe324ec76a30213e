"""NPU306 call-into-vendor-path."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.vendor._shared import from_module, in_model_scope
from npu_lint.veomni.vendor_map import NPU_VENDOR, VENDOR_PACKAGES

# a condition that selects a device, a backend or a package's availability (data conditions are not guards)
_GUARD_WORDS = re.compile(r"available|npu|cuda|device|impl|backend|use_|enable|xformers|flash|triton", re.I)
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_GPU_PACKAGES = tuple(sorted(p for p, family in VENDOR_PACKAGES.items() if family != NPU_VENDOR))

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for t in types:
            name = last_name(t) or ""
            if name in _IMPORT_ERRORS:
                return True
    return False


def _unguarded(body: list[ast.stmt], visit) -> None:  # type: ignore[no-untyped-def]
    """Call ``visit(node)`` for every node of ``body`` reached without a device / availability guard (an ``if``
    whose test names one, or a ``try`` catching ImportError); nested functions and classes are skipped."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Try) and _catches_import_error(node):
            stack.extend(node.handlers)
            stack.extend(node.orelse)
            stack.extend(node.finalbody)
            continue
        if isinstance(node, (ast.If, ast.IfExp)) and _GUARD_WORDS.search(ast.unparse(node.test)):
            stack.append(node.test)
            continue
        visit(node)
        stack.extend(ast.iter_child_nodes(node))


class CallIntoVendorPath(Rule):
    code = "NPU306"
    name = "call-into-vendor-path"
    summary = (
        "Model code calls a helper of its own module (`self.xformers_forward(...)`, `fused_path(...)`) whose "
        "body imports a GPU-only vendor kernel without an availability guard, and the call is not behind a "
        "device or availability test either."
    )
    why = (
        "Model files adapted from GPU code bases often keep a vendor-backed variant next to the portable one "
        "(`xformers_forward` beside `torch_forward`, a `flash_attn` path beside SDPA). The variant is harmless "
        "while nothing calls it; a call path that reaches it on an ordinary condition (no mask, no adapter, a "
        "shape) runs the vendor import on every host, and on Ascend the model's forward fails with "
        "ModuleNotFoundError (xFormers, FlashAttention, Liger, Triton and the like have no NPU build). NPU301 "
        "reports the vendor import itself; this rule reports the call that makes it reachable, so a finding "
        "appears when a route into the vendor path is added. A call or an import under a device / availability "
        "/ implementation test, or an import inside `try: ... except ImportError`, is guarded and not reported."
    )
    bad = (
        Example(
            """
            import torch


            class ToyAttention(torch.nn.Module):
                def fused_forward(self, q, k, v):
                    from flash_attn import flash_attn_func

                    return flash_attn_func(q, k, v)

                def eager_forward(self, q, k, v):
                    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v

                def forward(self, q, k, v, mask=None):
                    if mask is None:
                        return self.fused_forward(q, k, v)
                    return self.eager_forward(q, k, v)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the maskless path is routed into a FlashAttention-only method",
        ),
        Example(
            """
            def _xformers_attention(q, k, v):
                import xformers.ops as xops

                return xops.memory_efficient_attention(q, k, v)


            def attend(q, k, v, training):
                out = _xformers_attention(q, k, v) if not training else None
                return out
            """,
            path="veomni/models/transformers/toy/attention_utils.py",
            title="a module-level helper reached from a conditional expression on a data flag",
        ),
    )
    good = (
        Example(
            """
            import torch

            from veomni.utils.import_utils import is_flash_attn_2_available


            class ToyAttention(torch.nn.Module):
                def fused_forward(self, q, k, v):
                    from flash_attn import flash_attn_func

                    return flash_attn_func(q, k, v)

                def guarded_forward(self, q, k, v):
                    try:
                        from xformers.ops import memory_efficient_attention
                    except ImportError:
                        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v
                    return memory_efficient_attention(q, k, v)

                def forward(self, q, k, v, mask=None):
                    if is_flash_attn_2_available() and mask is None:
                        return self.fused_forward(q, k, v)
                    return self.guarded_forward(q, k, v)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
    )
    fix_safety = "No fix: route the call through the registry or guard it by hand."
    requires = ("import", _GPU_PACKAGES)
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        if not in_model_scope(self.ctx):
            return
        # (class or None, function name) -> the vendor module it imports unguarded
        vendor: dict[tuple[str | None, str], str] = {}
        functions: list[tuple[str | None, Function]] = []
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((None, stmt))
            elif isinstance(stmt, ast.ClassDef):
                functions.extend(
                    (stmt.name, sub)
                    for sub in stmt.body
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
        for owner, func in functions:
            if not nodes_of(func, ast.Import, ast.ImportFrom):
                continue  # the cheap test first: most functions import nothing
            found: list[str] = []

            def imports(sub: ast.AST, found: list[str] = found) -> None:
                if isinstance(sub, ast.Import):
                    found.extend(a.name for a in sub.names if self._gpu(a.name))
                elif isinstance(sub, ast.ImportFrom) and not sub.level:
                    module = from_module(self.ctx.source.path, sub)
                    if self._gpu(module):
                        found.append(module)

            _unguarded(func.body, imports)
            if found:
                vendor[(owner, func.name)] = found[0]
        if not vendor:
            return
        for owner, func in functions:
            calls: list[ast.Call] = []
            _unguarded(
                func.body, lambda sub, calls=calls: calls.append(sub) if isinstance(sub, ast.Call) else None
            )
            for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
                target = self._callee(call, owner)
                if target is None or target not in vendor or target[1] == func.name:
                    continue
                shown = self.ctx.source.segment(call.func)
                self.report(
                    call,
                    f"`{shown}(...)` routes into `{target[1]}`, which imports `{vendor[target]}` (a GPU-only "
                    f"vendor kernel) without an availability check, and this call in `{func.name}` is not behind "
                    "a device or availability test: on Ascend it raises ModuleNotFoundError; keep the portable "
                    "path, or dispatch through the registry",
                )

    @staticmethod
    def _gpu(module: str) -> bool:
        top = module.split(".")[0]
        return top in VENDOR_PACKAGES and VENDOR_PACKAGES[top] != NPU_VENDOR

    @staticmethod
    def _callee(call: ast.Call, owner: str | None) -> tuple[str | None, str] | None:
        func = call.func
        if isinstance(func, ast.Name):
            return (None, func.id)
        if (
            owner is not None
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            return (owner, func.attr)
        return None
