"""NPU301 vendor-kernel-import."""

from __future__ import annotations

import ast
import re
import textwrap

from npu_lint.core.astutil import call_name, literal_import, parse_snippet
from npu_lint.core.diagnostics import Applicability, Fix
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.vendor._shared import (
    _guard,
    describe,
    from_module,
    in_model_scope,
    is_backend_module,
    kw,
    mentions_vendor,
    register_advice,
    statement_lines_edit,
    str_arg,
)
from npu_lint.veomni import vendor_map


class VendorKernelImport(Rule):
    code = "NPU301"
    name = "vendor-kernel-import"
    summary = "Model code imports a vendor kernel (torch_npu, liger_kernel, flash_attn, triton, veomni.ops.kernels)."
    why = (
        "A vendor import in model code ties the model to one device: `liger_kernel`, `flash_attn` and `triton` "
        "do not exist on an Ascend host and `torch_npu` does not exist on a GPU host. In the VeomniOp "
        "generation vendor code is imported only inside the kernel modules under `veomni/ops/kernels`, lazily; "
        "model code reaches it through an instance-local `VeomniOp(op, variant, impl)` whose implementation "
        "comes from the ops config, so one model file runs on every device. Guarding the import "
        "(`if IS_NPU_AVAILABLE:`, `try: ... except ImportError`, a lazy import inside a function) makes it "
        "importable but still bypasses the registry: the finding says so, and names the registry op that "
        "replaces the kernel when the mapping table (`npu_lint/vendor_map.py`) knows it. In a patch spec, "
        "`config.add_import(...)`, `create_patch_from_external(replacement_module=...)` and import lines in "
        "`add_post_import_block(...)` put the import into the generated file, and are reported too."
        ' Dynamic imports with a literal name count too: `importlib.import_module("torch_npu")`, '
        "`import_module(...)`, `__import__(...)`."
        " The advice is in the linted tree's own names and dispatch API (read from its registry and ops "
        "config): on a handle tree the registry op and its handle; on an OpSlot-generation tree the slot "
        '(`OpSlot("rotary_pos_emb", "full")`), its ops-config field and its registered rows; for an op '
        "the tree does not register, what it has instead (attention through transformers' "
        "`ALL_ATTENTION_FUNCTIONS`) or how to register one with the tree's registration function."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.utils.device import IS_NPU_AVAILABLE

            if IS_NPU_AVAILABLE:
                from torch_npu import npu_rms_norm


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return npu_rms_norm(hidden_states, self.weight, epsilon=1e-6)[0]
            """,
            title="a guarded import is still a direct vendor import",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
            config.add_import("torch_npu", names=["npu_rotary_mul"])


            @config.replace_function("apply_rotary_pos_emb")
            def apply_rotary_pos_emb(q, k, cos, sin):
                return npu_rotary_mul(q, cos, sin), npu_rotary_mul(k, cos, sin)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="a spec adding a vendor import to the generated file",
        ),
        Example(
            """
            import torch
            import torch_npu


            def scale(hidden_states: torch.Tensor) -> torch.Tensor:
                return hidden_states * 2
            """,
            fixed="""
            import torch


            def scale(hidden_states: torch.Tensor) -> torch.Tensor:
                return hidden_states * 2
            """,
            title="an unused vendor import is removed (unsafe: it may be imported for a side effect)",
        ),
        Example(
            """
            import importlib

            torch_npu = importlib.import_module("torch_npu")


            def rms_norm(hidden_states, weight, eps):
                return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]
            """,
            title="a vendor module loaded dynamically",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.ops.kernels.cross_entropy import ForCausalLMLoss
            """
        ),
        Example(
            """
            def _npu_rms_norm(hidden_states, weight, eps=1e-6):
                import torch_npu

                return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
            title="kernel modules under veomni/ops are where vendor imports belong",
        ),
        Example(
            """
            from ..ops.kernels.moe import apply_veomni_fused_moe_patch
            """,
            path="veomni/models/auto.py",
            title="VeOmni's model loader binds kernels for the models: framework code, not a model package",
        ),
    )
    fix_safety = (
        "Unsafe, and only for an import none of whose names is used in the file (typically after NPU302's fix "
        "replaced the last call): the statement is deleted. Unsafe because a vendor package may be imported for "
        "its side effect (`import torch_npu` registers the `npu` device; `veomni.utils.device` does that for "
        "model code). A used import has no fix: migrate its calls (NPU302) first."
    )
    node_types = (ast.Import, ast.ImportFrom, ast.Call)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not mentions_vendor(text):
            self.node_types = ()
        elif not ctx.source.kind.spec and "import_module" not in text and "__import__" not in text:
            self.node_types = (ast.Import, ast.ImportFrom)  # calls matter in specs and for dynamic imports
        # (node, statement, names it binds, message, removable) awaiting the unused-import check in finish()
        self.pending: list[tuple[ast.AST, ast.stmt | None, tuple[str, ...], str, bool]] = []
        self._backend: bool | None = None

    @property
    def backend(self) -> bool:
        if self._backend is None:
            self._backend = is_backend_module(self.ctx)
        return self._backend

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and in_model_scope(ctx)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            self._import(node)
        elif isinstance(node, ast.ImportFrom):
            self._import_from(node)
        elif isinstance(node, ast.Call):
            if self.ctx.source.kind.spec:
                self._spec_call(node)
            self._dynamic_import(node)

    # -- plain imports ------------------------------------------------------------------------------------
    def _import(self, node: ast.Import) -> None:
        entries: list[tuple[str, vendor_map.VendorKernel]] = []
        bound: list[str] = []
        for alias in node.names:
            kernel = vendor_map.lookup(alias.name)
            if kernel is not None:
                entries.append((alias.name, kernel))
                bound.append(alias.asname or alias.name.split(".")[0])
        if entries:
            text = self.ctx.source.segment(node)
            self._pending(node, node, tuple(bound), self._message(text, entries, node))

    def _import_from(self, node: ast.ImportFrom) -> None:
        module = from_module(self.ctx.source.path, node)
        if not vendor_map.is_vendor(module) and not any(
            vendor_map.is_vendor(f"{module}.{a.name}") for a in node.names
        ):
            return
        entries: list[tuple[str, vendor_map.VendorKernel]] = []
        bound: list[str] = []
        for alias in node.names:
            dotted = f"{module}.{alias.name}" if alias.name != "*" else module
            kernel = vendor_map.lookup(dotted)
            if kernel is not None:
                entries.append((alias.name, kernel))
                bound.append(alias.asname or alias.name)
        if entries and self._guarded_reimport(node, module):
            return
        if entries:
            text = self.ctx.source.segment(node)
            self._pending(
                node, node, tuple(bound), self._message(text, entries, node, module if node.level else "")
            )

    def _guarded_reimport(self, node: ast.ImportFrom, module: str) -> bool:
        """A function-local import, under an availability test or ``try/except ImportError``, of names the
        module already imports from the same vendor module at module level (reported there): it adds no
        dependency of its own and cannot fail where the module-level one does not."""
        if self.ctx.function is None:
            return False
        guard = _guard(self.ctx, node)
        if "under `if" not in guard and "try:" not in guard:
            return False
        names = {a.name for a in node.names}
        top: set[str] = set()
        stack: list[ast.stmt] = list(self.ctx.tree.body)
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, ast.ImportFrom) and from_module(self.ctx.source.path, stmt) == module:
                top.update(a.name for a in stmt.names)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                stack.extend(stmt.body)
                stack.extend(getattr(stmt, "orelse", []))
                stack.extend(getattr(stmt, "finalbody", []))
                for handler in getattr(stmt, "handlers", []):
                    stack.extend(handler.body)
        return names <= top

    def _message(
        self, text: str, entries: list[tuple[str, vendor_map.VendorKernel]], node: ast.AST, resolved: str = ""
    ) -> str:
        first = " ".join(text.replace("( ", "(").replace(" )", ")").split())
        if len(first) > 90:
            first = first[:87] + "..."
        families = {k.family for _, k in entries}
        what = "a VeOmni kernel module" if families == {vendor_map.VEOMNI_KERNEL} else "vendor kernel code"
        guard = _guard(self.ctx, node)
        where = f" ({guard}: still a direct vendor import)" if guard else ""
        shown = f"`{first}` (`{resolved}`)" if resolved else f"`{first}`"
        if self.backend:
            return (
                f"{shown} imports {what} into a registry backend that lives in the model package{where}; move the "
                f"implementation beside the tree's other kernels: {register_advice(self.ctx.project.api)}"
            )
        return f"{shown} imports {what} into model code{where}; {describe(entries, project=self.ctx.project)}"

    # -- dynamic imports: importlib.import_module("x") / import_module("x") / __import__("x") -------------------
    def _dynamic_import(self, node: ast.Call) -> None:
        module = literal_import(node)
        if module is None:
            if self.ctx.qualname(node.func) != "importlib.import_module" or not node.args:
                return
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                return
            module = first.value
        kernel = vendor_map.lookup(module)
        if kernel is None:
            return
        parent = self.ctx.parent
        stmt: ast.stmt | None = None
        bound: tuple[str, ...] = ()
        if isinstance(parent, ast.Assign) and parent.value is node:
            stmt = parent
            bound = tuple(t.id for t in parent.targets if isinstance(t, ast.Name))
        text = self.ctx.source.segment(node)
        message = self._message(text, [(module, kernel)], node)
        message = message.replace(" imports ", " loads ", 1).replace(
            " into model code", " into model code dynamically", 1
        )
        self._pending(node, stmt, bound, message)

    # -- spec calls ---------------------------------------------------------------------------------------
    def _spec_call(self, node: ast.Call) -> None:
        attr = call_name(node)
        if attr == "add_import":
            self._add_import(node)
        elif attr == "create_patch_from_external":
            self._external(node)
        elif attr == "add_post_import_block":
            self._post_import_block(node)

    def _add_import(self, node: ast.Call) -> None:
        module = str_arg(node, 0, "module")
        if module is None or not vendor_map.is_vendor(module):
            return
        names_node = kw(node, "names")
        names = (
            [e.value for e in names_node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if isinstance(names_node, (ast.List, ast.Tuple))
            else []
        )
        if names:
            entries = [(n, vendor_map.lookup(f"{module}.{n}")) for n in names]
        else:
            entries = [(module, vendor_map.lookup(module))]
        entries_ok = [(n, k) for n, k in entries if k is not None]
        text = " ".join(self.ctx.source.segment(node).replace("( ", "(").split())
        text = text if len(text) <= 90 else text[:87] + "..."
        msg = f"`{text}` adds a vendor import to the generated file; {describe(entries_ok, project=self.ctx.project)}"
        # no removal fix: the generated file (and inherited GPU patches) use the names, not the spec itself
        self.report(node, msg)

    def _external(self, node: ast.Call) -> None:
        module = str_arg(node, 99, "replacement_module")
        if module is None or not vendor_map.is_vendor(module):
            return
        name = str_arg(node, 99, "replacement_name") or ""
        target = str_arg(node, 99, "target") or "a class"
        dotted = f"{module}.{name}" if name else module
        kernel = vendor_map.lookup(dotted)
        assert kernel is not None
        self.report(
            node,
            f"`{target}` is replaced by the vendor class `{dotted}` (imported into the generated file); "
            f"keep the upstream class and {describe([(name or module, kernel)], 'call', self.ctx.project)}",
        )

    def _post_import_block(self, node: ast.Call) -> None:
        arg = node.args[0] if node.args else kw(node, "code")
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return
        block = parse_snippet(textwrap.dedent(arg.value))
        if block is None:
            return
        for stmt in ast.walk(block):
            modules: list[str] = []
            if isinstance(stmt, ast.Import):
                modules = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and not stmt.level:
                modules = [f"{stmt.module}.{a.name}" for a in stmt.names]
            entries = [(m.rsplit(".", 1)[-1], vendor_map.lookup(m)) for m in modules]
            entries_ok = [(n, k) for n, k in entries if k is not None]
            if entries_ok:
                line = ast.get_source_segment(textwrap.dedent(arg.value), stmt) or ""
                self.report(
                    arg,
                    f"the post-import block imports vendor code into the generated file (`{line.strip()[:80]}`); "
                    f"{describe(entries_ok, project=self.ctx.project)}",
                )
                return

    # -- reporting ----------------------------------------------------------------------------------------
    def _pending(self, node: ast.AST, stmt: ast.stmt | None, bound: tuple[str, ...], message: str) -> None:
        # removable: a statement outside functions (a lazy import is left to the author) whose block keeps
        # another statement after the deletion
        removable = False
        parent = self.ctx.parent
        if stmt is not None and self.ctx.function is None and parent is not None:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(parent, field, None)
                if isinstance(block, list) and stmt in block:
                    removable = len(block) > 1
        self.pending.append((node, stmt, bound, message, removable))

    def _used(self, names: tuple[str, ...], stmt: ast.stmt) -> bool:
        """Whether any name appears in the file outside ``stmt`` (a text search: a mention in a comment or a
        string counts as a use, which only ever withholds the removal fix)."""
        start, end = self.ctx.source.node_range(stmt)
        text = self.ctx.source.text
        rest = text[:start] + text[end:]
        return any(re.search(rf"(?<![\w.]){re.escape(name)}\b", rest) for name in names)

    def finish(self) -> None:
        for node, stmt, bound, message, removable in self.pending:
            fix: Fix | None = None
            unused = bool(bound) and stmt is not None and not self._used(bound, stmt)
            if unused and bound == ("torch_npu",):
                message = message.split("; its kernels", 1)[0] + (
                    "; it is imported only for its side effect (registering the `npu` device), which "
                    "`veomni.utils.device` already does"
                )
            if stmt is not None and unused and removable:
                edit = statement_lines_edit(self.ctx, stmt)
                if edit is not None:
                    fix = make_fix(
                        "Remove the unused vendor import",
                        [edit],
                        Applicability.UNSAFE,
                        "a vendor package may be imported for a side effect (torch_npu registers the `npu` device; "
                        "`veomni.utils.device` does that for model code)",
                    )
            self.report(node, message, fix)
