"""NPU205 unknown-op-row."""

from __future__ import annotations

import ast
import difflib

from npu_lint.core.astutil import nodes_of
from npu_lint.rules._handles import (
    IMPL_RESOLVERS,
    INSTANCE_HANDLES,
    ROW_RESOLVERS,
    Block,
    block_of,
    call_arg,
    call_name,
    describe,
    handle_name,
    impl_argument,
    npu_capable,
    npu_targeted,
    op_variant,
    str_value,
)
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.catalog import ANY, GPU, MLU, NPU, OPSLOT_TO_VEOMNIOP, OpRow
from npu_lint.veomni.resolution import npu_selection

_CHECKED = INSTANCE_HANDLES | ROW_RESOLVERS  # VeomniOp(...), VeomniKernel(...), resolve_op(...), ...


class UnknownOpRow(Rule):
    code = "NPU205"
    name = "unknown-op-row"
    summary = "A VeomniOp names a row nobody registered, or an NPU spec selects an op with no NPU row."
    why = (
        "`VeomniOp(op, variant, impl)` resolves its row at construction: an unknown triple raises KeyError, and "
        "on an NPU host a selection without an NPU (or device-agnostic) row raises RuntimeError. There is no "
        "silent eager fallback. Rows come from the tree's `register_op` calls (read statically), from "
        "`OP_REGISTRY` with `--live-registry`, or from the built-in catalog for out-of-tree models. In an "
        "NPU-targeted spec a hard-coded implementation of an op without an NPU row (e.g. `swiglu_mlp`) raises; a "
        "row selected through the ops-config resolver is left to the config, whose NPU handling picks eager."
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyRMSNorm:
                def __init__(self, impl):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", impl)
            """,
            title="an OpSlot-era variant that VeomniOp does not register (it is `offset` now)",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_mlp_init_patched(self, config):
                self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", "liger_kernel")
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an NPU spec hard-coding an implementation of an op without an NPU row",
        ),
        Example(
            """
            from veomni.ops import VeomniOp

            def build():
                return VeomniOp("rope", "full", "flash_rope")
            """,
            title="an implementation nobody registered",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_init_patched(self, config):
                self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", "eager")
                self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))
                self.veomni_ce = VeomniOp(
                    "cross_entropy_loss", "standard",
                    resolve_op_impl("cross_entropy_loss_implementation", npu_as="chunk_loss"),
                )
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            def toy_mlp_init_patched(self, config):
                self.veomni_swiglu_mlp = VeomniOp("swiglu_mlp", "standard", resolve_op_impl("swiglu_mlp_implementation"))
            """,
            path="veomni/models_kernel/transformers/toy/toy_npu_patch_gen_config.py",
            title="the ops config selects the row: its NPU handling picks eager (the maintainers' migrated code)",
        ),
    )
    fix_safety = (
        "No fix: the right row depends on what the op should do; the message lists the registered rows."
    )
    requires = ((*sorted(_CHECKED), "OpSlot"),)  # only handle constructors (VeomniOp(...), OpSlot(...), ...)
    node_types = (ast.Call,)

    _block: Block | None = None

    def _report(self, node: ast.AST, message: str) -> None:
        """Report at ``node``, mapped into the spec file when it is code of a post-import block."""
        if self._block is not None:
            self.report(self._block.position(node), message)
        else:
            self.report(node, message)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block":
            # the block is code of the generated module: its slot and handle declarations bind like the file's
            block = block_of(self.ctx, node)
            if block is not None and self._block is None:
                self._block = block
                try:
                    for sub in ast.walk(block.tree):
                        if isinstance(sub, ast.Call):
                            self.visit(sub)
                finally:
                    self._block = None
            return
        kind = call_name(node, self.ctx)
        if kind == "OpSlot":
            self._opslot(node)
            return
        if kind not in _CHECKED:
            return
        op = str_value(call_arg(node, 0, "op"))
        variant = str_value(call_arg(node, 1, "variant"))
        if op is None or variant is None:
            return
        project = self.ctx.project
        handle = handle_name(project.api)
        origin = project.rows_origin
        op_rows = project.rows_for(op)
        if not op_rows:
            known = ", ".join(sorted({r.op for r in project.rows}))
            renamed_ops = sorted(
                {new[0] for (old, _v), new in OPSLOT_TO_VEOMNIOP.items() if old == op and new[0] != op}
            )
            hint = f"; the OpSlot op `{op}` is `{renamed_ops[0]}` in {handle}" if renamed_ops else ""
            self._report(node, f"no registered row has op `{op}` (per {origin}); known ops: {known}{hint}")
            return
        rows = [r for r in op_rows if r.variant == variant]
        if not rows:
            variants = ", ".join(sorted({r.variant for r in op_rows}))
            hint = ""
            renamed = OPSLOT_TO_VEOMNIOP.get((op, variant))
            if renamed is not None and renamed != (op, variant):
                hint = f"; the OpSlot variant `{op}/{variant}` is `{renamed[0]}/{renamed[1]}` in {handle}"
            self._report(
                node,
                f"no registered row has op `{op}` variant `{variant}` (per {origin}); variants of `{op}`: "
                f"{variants}{hint}",
            )
            return
        impl_node = impl_argument(node)
        impl = str_value(impl_node) if impl_node is not None else "eager"
        if impl is not None and not any(r.impl == impl for r in rows):
            self._report(
                node,
                f"no registered row `{op}/{variant}/{impl}` (per {origin}); implementations: {describe(rows)}",
            )
            return
        if impl is None and self._npu_selection(node, op, variant, rows, impl_node):
            return
        if not npu_targeted(self.ctx) or impl == "eager":
            return
        if npu_capable(rows):
            if impl is not None and impl not in {r.impl for r in rows if r.requirement in (NPU, ANY)}:
                self._report(
                    node,
                    f"NPU-targeted code selects `{op}/{variant}/{impl}`, which has no NPU row; implementations: "
                    f"{describe(rows)}",
                )
            return
        siblings = sorted({r.variant for r in npu_capable(op_rows) if r.variant != variant})
        from_tree = project.live_rows is not None or bool(project.root and project.registered)
        if (
            siblings
            and from_tree  # the built-in catalog is not this tree's registry
            and isinstance(impl_node, ast.Call)
            and call_name(impl_node) in IMPL_RESOLVERS
            and not any(
                k.arg == "npu_as" for k in impl_node.keywords
            )  # the NPU name is remapped: judged below
        ):
            # the op has NPU kernels (for other variants): the config's NPU handling selects the op's NPU
            # implementation, which this variant does not have
            self._report(
                node,
                f"NPU-targeted code: `{op}/{variant}` has no NPU row ({describe(rows)}) while "
                f"{', '.join(f'`{v}`' for v in siblings)} of `{op}` have one (per {origin}): when the ops "
                f"config picks the NPU implementation of `{op}` on an NPU host, construction raises; register "
                'the variant\'s NPU row or pass "eager"',
            )
            return
        if isinstance(impl_node, ast.Call) and call_name(impl_node) in IMPL_RESOLVERS:
            # The ops config chooses this row. For an op whose only device-agnostic row is eager, the config's NPU
            # handling is what picks eager (or rejects another value) on an NPU host: a raise on a misconfiguration
            # is the intended "no silent fallback", and an `npu_as="eager"` remap would add exactly that fallback.
            return
        self._report(
            node,
            f"NPU-targeted code: op `{op}/{variant}` has no NPU row ({describe(rows)}), so {f'`{impl}`' if impl else 'a non-eager selection'} raises at "
            'construction on an NPU host; pass "eager" or select it through the ops config',
        )

    def _npu_selection(
        self, node: ast.Call, op: str, variant: str, rows: list[OpRow], impl_node: ast.expr | None
    ) -> bool:
        """The ``npu_as`` remap of a handle's ops-config read as an NPU host evaluates it (directly, or through a
        local assigned once from the read): the name the host asks for must be a registered row of the handle's
        op and variant that runs there. (A read without the remap is NPU204's.) True when reported."""
        if isinstance(impl_node, ast.Name):
            impl_node = self._assigned_once(impl_node.id)
        sel = npu_selection(impl_node, IMPL_RESOLVERS)
        if sel is None or sel.npu_as is None or sel.asked is None or sel.asked == "eager":
            return False
        if sel.field_op is not None and sel.field_op != op:
            return False  # a field of another op: NPU204's
        asked = sel.asked
        match = [r for r in rows if r.impl == asked]
        at = impl_node if impl_node is not None else node
        if not match:
            device_free = [r.impl for r in rows if r.requirement == ANY]
            self._report(
                at,
                f'on an NPU host `{sel.field}` holds the NPU name `npu` and `npu_as="{sel.npu_as}"` makes this '
                f"handle ask for `{op}/{variant}/{asked}`, which is not registered (per "
                f"{self.ctx.project.rows_origin}): construction raises KeyError on Ascend; implementations: "
                f"{describe(rows)}"
                + (f" (device-agnostic: {', '.join(device_free)})" if device_free else ""),
            )
            return True
        if all(r.requirement in (GPU, MLU) for r in match):
            self._report(
                at,
                f'`npu_as="{sel.npu_as}"` remaps the NPU name to `{op}/{variant}/{asked}`, a row that only runs on '
                f"{'/'.join(sorted({r.requirement for r in match}))}: construction raises on Ascend; remap it to a "
                "row that runs there",
            )
            return True
        return False

    def _assigned_once(self, name: str) -> ast.expr | None:
        scope = self.ctx.function
        if scope is None:
            return None
        values = [
            a.value
            for a in nodes_of(scope, ast.Assign)
            if any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
        ]
        return values[0] if len(values) == 1 else None

    def _opslot(self, node: ast.Call) -> None:
        """``OpSlot(op, variant)`` whose variant no row of a known op has (its binder raises at build time)."""
        raw_op = str_value(call_arg(node, 0, "op_name"))
        raw_variant = str_value(call_arg(node, 1, "variant"))
        if raw_op is None or raw_variant is None:
            return
        project = self.ctx.project
        if project.slot_rows and not any(r.op == raw_op for r in project.slot_rows):
            # the tree's KernelSpec table is the registry the slot binds against: an op it lacks never gets a
            # kernel (its binder asks the ops config for `<op>_implementation` and resolves to eager at best)
            ops = sorted({r.op for r in project.slot_rows})
            close = difflib.get_close_matches(raw_op, ops, n=1, cutoff=0.75)
            hint = f"; did you mean `{close[0]}`?" if close else f"; ops with kernels: {', '.join(ops)}"
            self._report(
                node,
                f"no KernelSpec row has op `{raw_op}` (per the tree's KernelSpec rows): the slot can never bind "
                f"a kernel{hint}",
            )
            return
        if project.slot_rows:
            # an OpSlot-generation tree: its KernelSpec table is the registry the slot binds against, with the
            # OpSlot names themselves (no mapping to the handle generation's)
            slot_variants = sorted({r.variant for r in project.slot_rows if r.op == raw_op})
            npu_variants = sorted(
                {r.variant for r in project.slot_rows if r.op == raw_op and r.requirement in (NPU, ANY)}
            )
            if raw_variant in slot_variants and npu_targeted(self.ctx) and npu_variants:
                if raw_variant not in npu_variants:
                    kernels = ", ".join(
                        sorted(
                            f"{r.impl} ({r.requirement})"
                            for r in project.slot_rows
                            if (r.op, r.variant) == (raw_op, raw_variant)
                        )
                    )
                    self._report(
                        node,
                        f"NPU-targeted code: `{raw_op}/{raw_variant}` has no NPU KernelSpec row ({kernels}) while "
                        f"{', '.join(f'`{v}`' for v in npu_variants)} of `{raw_op}` have one (per the tree's "
                        f"KernelSpec rows): when the ops config picks the NPU implementation of `{raw_op}`, "
                        "binding raises KeyError",
                    )
                return
            if raw_variant not in slot_variants:
                self._report(
                    node,
                    f"no KernelSpec row has op `{raw_op}` variant `{raw_variant}` (per the tree's KernelSpec "
                    f"rows): binding the slot to any implementation but eager raises KeyError; variants of "
                    f"`{raw_op}`: {', '.join(f'`{v}`' for v in slot_variants)}",
                )
            return
        op, variant = op_variant(node, "OpSlot")
        op_rows = project.rows_for(op or "")
        if not op_rows or any(r.variant == variant for r in op_rows):
            return  # unknown ops are left alone: OpSlot-generation trees register more ops than the catalog
        if any(old == raw_op and old_variant == raw_variant for old, old_variant in OPSLOT_TO_VEOMNIOP):
            return
        known = sorted({r.variant for r in op_rows})
        if project.live_rows is None and not project.registered:
            # the built-in catalog is not the tree's whole registry: only a near miss of a known variant (a typo)
            close = difflib.get_close_matches(variant or "", known, n=1, cutoff=0.75)
            if not close:
                return
            known = close
        self._report(
            node,
            f"no registered row has op `{op}` variant `{variant}` (per {project.rows_origin}); did you mean "
            f"{', '.join(f'`{v}`' for v in known)}?",
        )
