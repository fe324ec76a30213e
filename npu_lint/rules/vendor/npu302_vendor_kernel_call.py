"""NPU302 vendor-kernel-call."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.rules._handles import migration_available, migration_needs
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.vendor._shared import (
    HELPER_PREFIXES,
    RMS_NORM_FIX_REASON,
    assigns_self_attr,
    describe,
    in_model_scope,
    is_backend_module,
    kw,
    mentions_vendor,
    merge_insertions,
    op_advice,
    resolve_relative,
)
from npu_lint.veomni import vendor_map


class VendorKernelCall(Rule):
    code = "NPU302"
    name = "vendor-kernel-call"
    summary = "Model code calls a vendor kernel directly instead of an instance-local `VeomniOp`."
    why = (
        "`torch_npu.npu_rms_norm(...)`, `liger_rotary_pos_emb(...)`, `flash_attn_func(...)` bind the model to one "
        "vendor: the call fails (or was never importable) on every other device, and the ops config cannot choose "
        "an implementation. The registry op that covers the kernel (`rms_norm`, `rope`, `attention`, ...) has a "
        "row per device; model classes build their handle once in `__init__` "
        '(`self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))`) '
        "and call it in `forward`, tensors positional, other arguments keyword. Calls of `torch.ops.npu.npu_*` "
        "are the same kernels and are reported too. Calls into `triton` itself (`triton.cdiv`, `tl.load`) are "
        "not: the `import triton` (NPU301) is the finding for a hand-written kernel. Calls inside a registry "
        "backend that lives in a model package (a module that registers `BackendSpec(...)`s, or that a sibling "
        'names in `BackendSpec(entry="<module>:<function>")`) are the kernel implementation and are not '
        "reported either: NPU301 says where that backend belongs."
        " Callees are resolved through aliases, function-local and dynamic imports "
        '(`importlib.import_module("torch_npu").npu_x(...)`) and `getattr(module, "literal")`.'
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
            import torch_npu
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps

                def forward(self, hidden_states):
                    return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]
            """,
            fixed="""
            import torch
            import torch_npu
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps

                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """,
            title="an RMSNorm forward maps exactly onto the registry contract; NPU301 then offers to drop the import",
        ),
        Example(
            """
            from liger_kernel.transformers.rope import liger_rotary_pos_emb


            def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
                return liger_rotary_pos_emb(q, k, cos, sin, position_ids=position_ids, unsqueeze_dim=unsqueeze_dim)
            """,
            title="a module-level function: no `__init__` to own the handle (display-only)",
        ),
        Example(
            """
            import torch_npu


            def apply_rotary(q, cos, sin):
                return getattr(torch_npu, "npu_rotary_mul")(q, cos, sin)
            """,
            title="a kernel reached through getattr with a literal name",
        ),
        Example(
            """
            def toy_experts_forward_npu(self, hidden_states, group_list):
                from mindspeed.ops import gmm

                hidden = gmm.npu_gmm(hidden_states, self.gate_up_proj, group_list=group_list)
                return gmm.npu_gmm(self.act_fn(hidden), self.down_proj, group_list=group_list)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an Ascend library other than torch_npu (MindSpeed), imported inside an NPU spec's function",
        ),
    )
    good = (
        Example(
            """
            import torch_npu

            torch_npu.npu.set_device(0)
            """,
            title="device APIs are not kernels (NPU1xx covers them)",
        ),
        Example(
            """
            class ToyRMSNorm:
                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
    )
    fix_safety = (
        "Unsafe, only for `torch_npu.npu_rms_norm(x, w, epsilon=eps)[0]` (or `torch.ops.npu.npu_rms_norm`) inside a "
        "method of a class whose `__init__` is in the same plain model module, with a plain weight (not "
        "`1 + w`): the call becomes `self.veomni_rms_norm(x, w, eps=eps)` and `__init__` builds the handle after "
        "`super().__init__()`. Unsafe because the implementation then comes from the ops config (eager when no "
        "config is installed) instead of always being the Ascend kernel. Every other call is display-only with "
        "the reason (another kernel's arguments do not map 1:1 onto its op, a patch spec needs "
        '`override_method("Cls.__init__")`, a function outside a class has no `__init__`).'
    )
    requires = (mentions_vendor,)
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._backend: bool | None = None

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and in_model_scope(ctx)

    # -- name resolution: the Context's resolver (imports, aliases, function-local and dynamic imports,
    # getattr with a literal), then relative imports --------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        full = self.ctx.local_qualname(node)
        if full is None:
            return None
        full = resolve_relative(self.ctx.source.path, full)
        if full.startswith("torch.ops.npu."):
            full = "torch_npu." + full[len("torch.ops.npu.") :]
        return full

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        full = self.resolve(node.func)
        if full is None or not vendor_map.is_vendor(full):
            return
        if self._backend is None:
            self._backend = is_backend_module(self.ctx)
        if self._backend:
            return  # the kernel implementation of a registry backend (NPU301 reports where it lives)
        family = vendor_map.family_of(full)
        root = full.split(".", 1)[0]
        if root == "triton":
            return
        if root == "torch_npu":
            attr = full.split(".")[1] if "." in full else ""
            if not attr.startswith("npu_"):
                return  # torch_npu.npu.* device APIs, torch_npu.contrib...: not kernels
        last = full.rsplit(".", 1)[-1]
        if family == vendor_map.VEOMNI_KERNEL and last.startswith(HELPER_PREFIXES):
            return  # a predicate / metadata helper of a kernel module, not a kernel (NPU301 reports the import)
        kernel = vendor_map.lookup(full)
        assert kernel is not None
        op, variant = kernel.op, kernel.variant
        if full == "torch_npu.npu_rotary_mul":
            mode = kw(node, "rotary_mode")
            if isinstance(mode, ast.Constant) and mode.value == "interleave":
                op, variant = "rope", "wan"
        if op is not None:
            op, variant = self._vision_slot(op, variant)
        shown = self.ctx.dotted(node.func) or full
        if last[:1].isupper():
            what = "instantiates the vendor class"
        elif family == vendor_map.VEOMNI_KERNEL:
            what = "calls the VeOmni kernel function"
        else:
            what = "calls the vendor kernel"
        resolved = f" `{full}`" if shown != full else ""
        if op:
            advice, title = op_advice(self.ctx.project, op, variant, "call")
        else:
            advice, title = describe([(shown, kernel)], project=self.ctx.project), ""
        message = f"`{shown}(...)` {what}{resolved} directly; {advice}"
        fix = None
        if full == "torch_npu.npu_rms_norm":
            fix = self._rms_norm_fix(node, title)
        elif title:
            tree = self.ctx.project.api.tree_op(op, variant) if op else None
            fix = Fix(
                title,
                (),
                Applicability.DISPLAY,
                reason=self._display_reason(kernel, "/".join(p for p in tree or () if p)),
            )
        self.report(node.func, message, fix)

    def _display_reason(self, kernel: vendor_map.VendorKernel, replacement: str = "") -> str:
        if self.ctx.source.kind.spec:
            return (
                'in a patch spec the handle is built in `__init__` through `override_method("Cls.__init__")` / '
                "`modify_init`: migrate the patch by hand"
            )
        if self.ctx.source.kind.generated:
            return "generated file: fix the patch spec and regenerate"
        return (
            f"the kernel's arguments and outputs do not map 1:1 onto the `{replacement}` op "
            "contract" + (f" ({kernel.note})" if kernel.note else "") + ": rewrite the call by hand"
        )

    # -- the exact fix: torch_npu.npu_rms_norm(x, w, epsilon=eps)[0] --------------------------------------
    def _vision_slot(self, op: str, variant: str | None) -> tuple[str, str | None]:
        """In a vision tower's code (``apply_rotary_pos_emb_vision``, ``...VisionAttention``), the tree's vision
        op (``rotary_pos_emb_vision``) when it registers one for the op, else the op itself."""
        ctx = self.ctx
        names = [n.name for n in (ctx.function, ctx.class_) if n is not None]
        if not any("vision" in n.lower() or "visual" in n.lower() for n in names):
            return op, variant
        api = ctx.project.api
        found = api.tree_op(op, variant)
        if found is None:
            return op, variant
        vision = f"{found[0]}_vision"
        if api.registers(vision, found[1]):
            return vision, found[1]
        return op, variant

    def _rms_norm_fix(self, node: ast.Call, title: str) -> Fix | None:
        ctx = self.ctx
        if not title:
            return None  # the tree has no `rms_norm/standard` to call

        def display(reason: str) -> Fix:
            return Fix(
                title,
                (),
                Applicability.DISPLAY,
                reason=reason,
            )

        if ctx.source.kind.spec or ctx.source.kind.generated:
            return display(self._display_reason(vendor_map.lookup("torch_npu.npu_rms_norm")))  # type: ignore[arg-type]
        parent = ctx.parent
        if not (
            isinstance(parent, ast.Subscript)
            and parent.value is node
            and isinstance(parent.slice, ast.Constant)
            and parent.slice.value == 0
        ):
            return display(
                "the call's second output (rstd) is used, or its result is not indexed with `[0]`: "
                "the registry op returns only the normalised tensor"
            )
        func = ctx.function
        cls = ctx.class_
        if func is None or cls is None or func not in cls.body:
            return display("not inside a method: there is no `__init__` to own the handle")
        init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None or not init.body:
            return display(f"`{cls.name}` has no `__init__` in this file to build the handle in")
        if init.body[0].lineno == init.lineno:
            return display(f"`{cls.name}.__init__` is written on one line: build the handle in it by hand")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return display("starred arguments")
        args = list(node.args)
        kws = {k.arg: k.value for k in node.keywords}
        if set(kws) - {"epsilon"} or len(args) not in (2, 3) or (len(args) == 3 and "epsilon" in kws):
            return display("arguments beyond (x, gamma, epsilon)")
        eps_node = args[2] if len(args) == 3 else kws.get("epsilon")
        weight = args[1]
        if not isinstance(weight, (ast.Name, ast.Attribute)):
            offset = ctx.project.api.offset_rms_variant  # the tree's Gemma-style RMSNorm variant
            return display(
                "the weight is an expression (e.g. `1 + self.weight`, Gemma-style): choose between the `standard` and "
                f"`{offset}` variants by hand (`{offset}` adds the 1 itself)"
            )
        src = ctx.source
        x_text = src.segment(args[0])
        w_text = src.segment(weight)
        eps_text = src.segment(eps_node) if eps_node is not None else "1e-06"
        api = ctx.project.api  # the handle, the resolver and their modules, as this tree defines them
        if not migration_available(api) or not api.resolver or not api.resolver_module:
            return display(
                migration_needs(api) or f"this VeOmni tree has no implementation resolver for `{api.handle}`"
            )
        handle = "veomni_rms_norm"
        edits = [ctx.replace(parent, f"self.{handle}({x_text}, {w_text}, eps={eps_text})")]
        if not assigns_self_attr(init, handle):
            edits.append(self._init_edit(init, handle))
        import_edits = []
        if api.handle not in ctx.imports:
            import_edits += ctx.import_edits(api.handle_module, api.handle)
        if api.resolver not in ctx.imports:
            import_edits += ctx.import_edits(api.resolver_module, api.resolver)  # type: ignore[arg-type]
        edits += merge_insertions(import_edits)
        return make_fix(
            f"Replace with `self.{handle}(...)` built in `{cls.name}.__init__`",
            edits,
            Applicability.UNSAFE,
            RMS_NORM_FIX_REASON,
        )

    def _init_edit(self, init: ast.FunctionDef, handle: str) -> Edit:
        src = self.ctx.source
        body = init.body
        after: ast.stmt | None = None
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr == "__init__"
                and isinstance(stmt.value.func.value, ast.Call)
                and isinstance(stmt.value.func.value.func, ast.Name)
                and stmt.value.func.value.func.id == "super"
            ):
                after = stmt
                break
        indent = src.line_indent(body[0].lineno)
        api = self.ctx.project.api
        line = (
            f'{indent}self.{handle} = {api.handle}("rms_norm", "standard", '
            f'{api.resolver}("rms_norm_implementation"))\n'
        )
        if after is not None:
            end_line = after.end_lineno or after.lineno
        elif isinstance(body[-1], ast.Return):
            offset = src.offset(body[-1].lineno, 0)  # before a trailing `return`, where it still runs
            return Edit(offset, offset, line)
        else:
            end_line = body[-1].end_lineno or body[-1].lineno
        offset = src.offset(end_line + 1, 0) if end_line < len(src.lines) else len(src.text)
        if offset == len(src.text) and not src.text.endswith(("\n", "\r")):
            line = "\n" + line.rstrip("\n")
        return Edit(offset, offset, line)
