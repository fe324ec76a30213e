"""NPU221 npu-rows-share-kernel."""

from __future__ import annotations

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import NPU
from npu_lint.veomni.imports import ModuleIndex
from npu_lint.veomni.resolution import MARKERS, Binding, default_backends, file_bindings, module_of
from npu_lint.veomni.rowvariants import misbound


def _apart(first: Binding, row: Binding) -> bool:
    """Whether two rows binding one callable are rows the tree keeps apart: another op or variant of the same kind
    of row (an op's per-model table and its registry row binding one kernel are the same op)."""
    if first.kind == row.kind:
        return (first.op, first.variant) != (row.op, row.variant)
    return first.op != row.op


def _fit(row: Binding, attr: str) -> int:
    """How many words of the row's op (and variant) the kernel's name spells (``rotary_pos_emb_vision`` in
    ``apply_rotary_pos_emb_vision_npu``: 4)."""
    words = set(attr.lower().split("_"))
    return sum(w in words for w in {*row.op.lower().split("_"), *row.variant.lower().split("_")})


class NpuRowsShareKernel(Rule):
    code = "NPU221"
    name = "npu-rows-share-kernel"
    summary = (
        "Two NPU rows the tree keeps apart resolve to one callable: two variants (or ops) of one registration "
        "module bind the same NPU kernel, or a model's NPU override re-binds the registry default's kernel."
    )
    why = (
        "A variant exists because its call contract differs (a partial rotary rotates a prefix of each head, a "
        "`1 + weight` RMSNorm offsets its weight, a vision RoPE takes another layout), and a model's "
        "`extra_backends` entry exists because its patched target is not the one the registry default was "
        "written for. When the NPU rows of two variants resolve to the same function, or the model's NPU "
        "override names the default's own entry, one of them runs the other's contract on Ascend: wrong "
        "numerics or a signature error, while the GPU rows stay distinct. The rule resolves every row to the "
        "callable it binds (factories followed through their imports) and compares the NPU rows of a module "
        "with each other (each row with every earlier one), and a model's NPU overrides with the tree's registry "
        "defaults. A single NPU row is held to its variant too, read from the tree (`veomni/rowvariants.py`): "
        "its callable lives in another variant's package (`rope/full/npu.py` for the `partial` row), its name "
        "spells another variant or a longer op of the registration (`apply_rotary_pos_emb_vision_npu` for "
        "`rotary_pos_emb`), or its module also defines the same name plus the row's own variant words "
        "(`partial_apply_rotary_pos_emb_npu` beside the `apply_rotary_pos_emb_npu` a partial row binds), always "
        "provided the tree has an implementation of the row's own variant (its package, a function named like the kernel for it): "
        "reusing another variant's kernel where the tree wrote none is its choice."
    )
    bad = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _npu_dense_factory():
                from .npu import scale_shift_npu

                return scale_shift_npu


            def _npu_gated_factory():
                from .npu import scale_shift_npu as gated_kernel

                return gated_kernel


            KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="adanorm", variant="dense",
                                                factory=_npu_dense_factory, hardware=HardwareRequirement(device_type="npu")))
            KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="adanorm", variant="gated",
                                                factory=_npu_gated_factory, hardware=HardwareRequirement(device_type="npu")))
            """,
            path="veomni/ops/kernels/adanorm/__init__.py",
            title="the gated variant's NPU factory returns the dense kernel",
        ),
        Example(
            """
            from ...registry import register_op
            from ...requirement import NpuKernelRequirement
            from .dense import npu as dense_npu
            from .gated import npu as gated_npu

            register_op("adanorm", "dense", "npu", dense_npu.forward, requirement=NpuKernelRequirement())
            register_op("adanorm", "gated", "npu", dense_npu.forward, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/adanorm/__init__.py",
            title="a VeomniOp row registering another variant's NPU forward",
        ),
        Example(
            """
            from ...registry import register_kernel
            from ...requirement import NpuKernelRequirement
            from .banded import eager as banded_eager
            from .plain import eager as plain_eager
            from .plain import npu as plain_npu

            register_kernel("twist", "plain", "eager", plain_eager.forward, plain_eager.backward)
            register_kernel("twist", "banded", "eager", banded_eager.forward, banded_eager.backward)
            register_kernel("twist", "banded", "npu", plain_npu.forward, banded_eager.backward,
                            requirement=NpuKernelRequirement())
            """,
            path="veomni/kernels/_kernels/twist/__init__.py",
            title="the only NPU row of the banded variant binds the plain variant's package",
        ),
    )
    good = (
        Example(
            """
            from ...registry import register_op
            from ...requirement import NpuKernelRequirement
            from .dense import npu as dense_npu
            from .gated import npu as gated_npu

            register_op("adanorm", "dense", "npu", dense_npu.forward, requirement=NpuKernelRequirement())
            register_op("adanorm", "gated", "npu", gated_npu.forward, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/adanorm/__init__.py",
        ),
    )
    fix_safety = "No fix: which of the rows binds the wrong kernel is decided by hand."
    requires = (MARKERS, ("npu", "NPU", "Npu"))
    node_types = ()

    _index: ModuleIndex | None = None

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        module, is_package = module_of(self.ctx.source.path)
        every = file_bindings(self.ctx.tree, module, is_package)
        rows = [r for r in every if r.device == NPU]
        seen: dict[tuple[str, str], list[Binding]] = {}
        reported: set[int] = set()
        for row in rows:
            if row.target is None or not row.target.attr or row.per_model:
                continue
            key = (row.target.module, row.target.attr)
            earlier = seen.setdefault(key, [])
            clash = next((first for first in earlier if _apart(first, row)), None)
            earlier.append(row)
            if clash is None:
                continue
            first = clash
            if _fit(first, row.target.attr) < _fit(row, row.target.attr):
                first, row = row, first  # the kernel's name spells the other row's op: report the misfit
            reported.add(id(row))
            self.report(
                row.node,
                f"the NPU row `{row.impl}` of `{row.op}/{row.variant}` binds `{row.target.dotted}`, the kernel "
                f"the NPU row `{first.impl}` of `{first.op}/{first.variant}` binds (line "
                f"{getattr(first.node, 'lineno', '?')}): the tree keeps the two apart (their call contracts "
                "differ), so on Ascend one of them runs the other's kernel; bind each its own NPU kernel",
            )
        self._misbound([r for r in rows if id(r) not in reported and not r.per_model], every, module)
        self._overrides([r for r in rows if r.per_model and r.target is not None])

    def _misbound(self, rows: list[Binding], every: list[Binding], module: str) -> None:
        """An NPU row whose callable the tree writes for another variant (or op) of the registration."""
        variants: dict[str, set[str]] = {}
        for r in every:
            if r.kind != "backend":
                variants.setdefault(r.op, set()).add(r.variant)
        ops = frozenset(r.op for r in every)
        packaged = {
            (r.op, part)
            for r in every
            for _, t in (r.parts or ((("kernel", r.target),) if r.target is not None else ()))
            for part in t.module.split(".")
        }
        for row in rows:
            for role, target in row.parts or ((("kernel", row.target),) if row.target is not None else ()):
                found = misbound(
                    module,
                    row.op,
                    row.variant,
                    target.module,
                    target.attr,
                    frozenset(variants.get(row.op, ())),
                    ops,
                    self._functions(target.module),
                    (row.op, row.variant) in packaged or self._has_module(f"{module}.{row.variant}"),
                )
                if found is None:
                    continue
                self.report(
                    row.node,
                    f"the NPU row `{row.impl}` of `{row.op}/{row.variant}` binds `{target.dotted}` as its "
                    f"{role}, which the tree writes for `{found.what}` ({found.evidence}): on Ascend the "
                    f"`{row.variant}` variant runs another variant's kernel (a partial rotary rotating every "
                    "channel, a vision table applied in the text layout); bind the row's own NPU kernel",
                )
                break

    def _has_module(self, module: str) -> bool:
        index = self._module_index()
        return index is not None and index.has_module(module)

    def _module_index(self) -> ModuleIndex | None:
        root = self.ctx.project.root
        if not root:
            return None
        if self._index is None:
            api_index = self.ctx.project.api.index
            self._index = api_index if api_index is not None else ModuleIndex(root)
        return self._index

    def _functions(self, module: str) -> tuple[str, ...]:
        index = self._module_index()
        info = index.info(module) if index is not None else None
        return tuple(info.functions) if info is not None else ()

    def _overrides(self, rows: list[Binding]) -> None:
        root = self.ctx.project.root
        if not rows or not root:
            return
        defaults = default_backends(str(root))
        for row in rows:
            hit = defaults.get((row.op, row.impl))
            if hit is None or row.target is None or hit[0] != row.target.dotted:
                continue
            self.report(
                row.node,
                f"this model's `{row.impl}` backend of `{row.op}` re-binds `{row.target.dotted}`, the registry "
                f"default's own kernel for `{row.impl}`: the override replaces nothing, so on Ascend the model's "
                "target runs the generic kernel written for the registry's signature; bind the model's own NPU "
                "kernel (or drop the override)",
            )
