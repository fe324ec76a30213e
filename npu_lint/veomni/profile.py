"""The API profile of a VeOmni tree: its dispatch generation and where every name a message or fix uses lives.

Three generations exist (see /work/shared/veomni-contract.md): ``OpSlot`` (module-level slots, veomni 0.1.12),
``VeomniOp`` (handles owned by model classes; ``veomni.ops``) and ``VeomniKernel`` (``veomni.kernels``).
:func:`detect_profile` reads the generation and the modules that actually define each name from the tree's
own sources, statically (``ast``; the tree is never imported). Files outside any tree get the built-in
profile of the generation (:data:`BUILTIN_PROFILES`), answered from its own tables.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from npu_lint.core.safeio import read_regular
from npu_lint.veomni import scanstore
from npu_lint.veomni.catalog import BUILTIN_ROWS, OpRow, catalog_rows
from npu_lint.veomni.imports import ModuleIndex
from npu_lint.veomni.layout import SKIP_DIRS, find_model_packages, layouts_of


class Generation(str, Enum):
    """A dispatch API generation. A ``str`` so it compares equal to its config spelling."""

    OP_SLOT = "op-slot"
    VEOMNI_OP = "veomni-op"
    VEOMNI_KERNEL = "veomni-kernel"

    def __str__(self) -> str:
        return self.value


TARGET_APIS = ("auto", *(g.value for g in Generation))
DEVICE_MODULE = "veomni.utils.device"
DEVICE_HELPERS = (  # the helpers of veomni.utils.device that rules and fixes name (0.1.12's module has them all)
    "IS_CUDA_AVAILABLE",
    "IS_NPU_AVAILABLE",
    "IS_MLU_AVAILABLE",
    "get_device_type",
    "get_device_name",
    "get_torch_device",
    "get_device_id",
    "get_dist_comm_backend",
    "synchronize",
    "stream_synchronize",
    "empty_cache",
    "set_device",
    "create_stream",
    "create_event",
    "get_current_stream",
    "switch_to_specified_stream",
)
OFFSET_RMS_VARIANTS = ("offset", "qwen3_5")  # the Gemma-style (1 + weight) RMSNorm, by preference
VISION_ROPE_OPS = ("rope_vision", "rotary_pos_emb_vision")

Variants = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class ApiProfile:
    """For one generation, every name a rule message or a fix writes, and the module that defines it."""

    generation: Generation
    handle: str  # OpSlot / VeomniOp / VeomniKernel
    handle_module: str
    resolver: str | None  # resolve_op_impl / resolve_kernel_impl (None: OpSlot's build-time binder)
    resolver_module: str | None
    resolver_options: tuple[str, ...]  # keyword options of the resolver ("npu_as",)
    attention_helper: str | None  # attention_op / attention_kernel
    attention_module: str | None
    loss_helpers: tuple[str, ...]  # ForCausalLMLoss, ForSequenceClassificationLoss, ...
    loss_module: str | None
    loss_handle_keyword: str | None  # "op" / "kernel"; None when the helpers take no handle
    bias_helpers: tuple[str, ...]  # linear_bias, empty_bias
    bias_module: str | None
    register_function: str | None  # register_op / register_kernel (KernelSpec for OpSlot)
    registry_object: str | None  # OP_REGISTRY / KERNEL_REGISTRY
    resolve_function: str | None  # resolve_op / resolve_kernel
    registry_module: str | None
    requirement_classes: tuple[str, ...]
    requirement_module: str | None
    device_module: str
    device_helpers: tuple[str, ...]
    layouts: tuple[str, ...]  # model layouts present: "veomni/models", "veomni/models_kernel"
    variants: Variants  # registered variants per op, sorted
    offset_rms_variant: str  # the Gemma-style (1 + weight) RMSNorm variant ("qwen3_5" / "offset")
    vision_rope: tuple[str, str]  # (op, variant) of the vision RoPE
    root: str | None = None  # the tree this was read from; None for a built-in profile
    detected: Generation | None = None  # the generation the tree itself has (None: unknown / no tree)
    notes: tuple[str, ...] = ()  # said once per run (e.g. target-api forces an API the tree lacks)
    # what the tree's own docstrings say about building handles per call (read by `handle_docs`): where the
    # handle documents interning ("`VeomniOp` (`veomni.ops.registry`)"; None: not documented or no tree), the
    # helpers whose docstring allows a call in `forward` (interned), and a docstring that forbids one
    interned_by: str | None = None
    per_call_helpers: tuple[str, ...] = ()
    forward_forbidden: str | None = None
    # ops-config fields the tree's ops config declares (`*_implementation`), and the module declaring them
    config_fields: tuple[str, ...] = ()
    config_module: str | None = None
    # attention implementations registered through transformers' `ALL_ATTENTION_FUNCTIONS` by the tree, and
    # where (the OpSlot generation has no attention op: attention is chosen by `attn_implementation`)
    attention_functions: tuple[str, ...] = ()
    attention_functions_module: str | None = None
    index: ModuleIndex | None = field(default=None, repr=False, compare=False, hash=False)

    # -- questions -------------------------------------------------------------------------------------
    @property
    def builtin(self) -> bool:
        return self.index is None

    @property
    def has_handle(self) -> bool:
        """Whether the tree (or, for a built-in profile, the generation) has this profile's handle."""
        return self.defines(self.handle_module, self.handle)

    @property
    def instance_local(self) -> bool:
        """Whether the tree has an instance-local handle API (VeomniOp / VeomniKernel) to dispatch through."""
        return self.generation is not Generation.OP_SLOT and self.has_handle

    def registers(self, op: str, variant: str | None = None) -> bool:
        """Whether the profile's registry (the tree's rows; a built-in profile's own table) has ``op`` (and
        ``variant``)."""
        variants = self.variants_of(op)
        return bool(variants) and (variant is None or variant in variants)

    def tree_op(self, op: str, variant: str | None) -> tuple[str, str | None] | None:
        """The (op, variant) this tree registers for a catalog (VeomniOp-generation) ``op/variant``, in the
        tree's own names: the offset RMSNorm under the tree's variant name, an OpSlot tree's slot names
        (``rope`` -> ``rotary_pos_emb``); None when the tree registers nothing for it."""
        from npu_lint.veomni.catalog import CATALOG_OFFSET_VARIANT, OPSLOT_TO_VEOMNIOP

        if (op, variant) == ("rms_norm", CATALOG_OFFSET_VARIANT):
            variant = self.offset_rms_variant
        if self.registers(op, variant):
            return op, variant
        if variant is None:
            return None
        candidates = sorted(
            slot
            for slot, target in OPSLOT_TO_VEOMNIOP.items()
            if target == (op, variant) and self.registers(*slot)
        )
        if candidates:
            return candidates[0]
        return None

    def config_field(self, op: str) -> str | None:
        """The ops-config field that chooses ``op``'s implementation in this tree (``<op>_implementation``, or
        the catalog's field for the op), when the tree's ops config declares it."""
        from npu_lint.veomni.catalog import CONFIG_FIELD_TO_OP

        if f"{op}_implementation" in self.config_fields:
            return f"{op}_implementation"
        for field_name, target in CONFIG_FIELD_TO_OP.items():
            if target == op and field_name in self.config_fields:
                return field_name
        return None

    def variants_of(self, op: str) -> tuple[str, ...]:
        for name, variants in self.variants:
            if name == op:
                return variants
        return ()

    def module_of(self, name: str) -> str | None:
        """The module this profile imports ``name`` from (None when the profile does not name it)."""
        for module, names in self._table():
            if name in names:
                return module
        return None

    def defines(self, module: str, name: str) -> bool:
        """Whether ``from module import name`` resolves: in the tree (statically), or, for a built-in
        profile, in the profile's own tables."""
        if self.index is not None:
            return self.index.defines(module, name)
        return any(m == module and name in names for m, names in self._table())

    def can_import(self, module: str, names: list[str] | tuple[str, ...]) -> bool:
        return all(self.defines(module, n) for n in names)

    def import_problem(self, module: str, name: str) -> str | None:
        """Why ``from module import name`` (``name`` empty: ``import module``) must not be written into this
        tree, or None when it may. In a tree: when it does not resolve statically. Outside any tree (a
        built-in profile, which knows only its own tables): when ``name`` belongs to another generation's API
        and not to this one's."""
        if self.index is not None:
            ok = self.index.has_module(module) if not name else self.index.defines(module, name)
            if ok or self._generated_later(module):
                return None
            what = f"`{module}`" if not name else f"`{name}` from `{module}`"
            return f"it would import {what}, which this VeOmni tree does not define"
        if not name or self.module_of(name) is not None:
            return None
        for other in BUILTIN_PROFILES.values():
            if other.generation is not self.generation and other.module_of(name) is not None:
                return (
                    f"it would import `{name}` ({other.handle} API), which the {self.generation.value} "
                    "API does not have"
                )
        return None

    def _generated_later(self, module: str) -> bool:
        """``<package>.generated.<stem>``: patchgen output of one of the package's specs, not yet generated (the
        NPU switch NPU502 writes imports the `_npu` module NPU501's spec will produce)."""
        parts = module.split(".")
        if self.root is None or len(parts) < 3 or parts[-2] != "generated":
            return False
        from npu_lint.veomni.patchgen import produced_by_spec

        return produced_by_spec(os.path.join(self.root, *parts[:-2]), parts[-1])

    def _table(self) -> list[tuple[str, tuple[str, ...]]]:
        rows: list[tuple[str | None, tuple[str | None, ...]]] = [
            (self.handle_module, (self.handle,)),
            (self.resolver_module, (self.resolver,)),
            (self.attention_module, (self.attention_helper,)),
            (self.loss_module, self.loss_helpers),
            (self.bias_module, self.bias_helpers),
            (self.registry_module, (self.register_function, self.registry_object, self.resolve_function)),
            (self.requirement_module, self.requirement_classes),
            (self.device_module, self.device_helpers),
        ]
        return [(m, tuple(n for n in names if n)) for m, names in rows if m]


def _variants(rows: tuple[OpRow, ...] | list[OpRow]) -> Variants:
    table: dict[str, set[str]] = {}
    for row in rows:
        table.setdefault(row.op, set()).add(row.variant)
    return tuple((op, tuple(sorted(v))) for op, v in sorted(table.items()))


_OPSLOT_SLOTS: Variants = (
    ("cross_entropy_loss", ("causal", "seq_cls")),
    ("moe_experts", ("standard",)),
    ("rms_norm", ("qwen3_5", "standard", "unweighted")),
    ("rotary_pos_emb", ("full", "partial")),
    ("rotary_pos_emb_vision", ("full",)),
    ("swiglu_mlp", ("standard",)),
)
_CATALOG_VARIANTS = _variants(BUILTIN_ROWS)
_KERNEL_VARIANTS = _variants([*catalog_rows("qwen3_5"), OpRow("rope_vision", "full", "eager")])

BUILTIN_PROFILES: dict[Generation, ApiProfile] = {
    Generation.OP_SLOT: ApiProfile(
        generation=Generation.OP_SLOT,
        handle="OpSlot",
        handle_module="veomni.ops.dispatch",
        resolver=None,
        resolver_module=None,
        resolver_options=(),
        attention_helper=None,
        attention_module=None,
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss"),
        loss_module="veomni.ops.kernels.cross_entropy",
        loss_handle_keyword=None,
        bias_helpers=(),
        bias_module=None,
        register_function="KernelSpec",
        registry_object="KERNEL_REGISTRY",
        resolve_function=None,
        registry_module="veomni.ops.kernel_registry",
        requirement_classes=("HardwareRequirement",),
        requirement_module="veomni.ops.kernel_registry",
        device_module=DEVICE_MODULE,
        device_helpers=DEVICE_HELPERS,
        layouts=("veomni/models",),
        variants=_OPSLOT_SLOTS,
        offset_rms_variant="qwen3_5",
        vision_rope=("rotary_pos_emb_vision", "full"),
    ),
    Generation.VEOMNI_OP: ApiProfile(
        generation=Generation.VEOMNI_OP,
        handle="VeomniOp",
        handle_module="veomni.ops",
        resolver="resolve_op_impl",
        resolver_module="veomni.models_kernel.utils.op_utils",
        resolver_options=("npu_as",),
        attention_helper="attention_op",
        attention_module="veomni.models_kernel.utils.op_utils",
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss"),
        loss_module="veomni.models_kernel.loss_utils",
        loss_handle_keyword="op",
        bias_helpers=("empty_bias", "linear_bias"),
        bias_module="veomni.models_kernel.utils.op_utils",
        register_function="register_op",
        registry_object="OP_REGISTRY",
        resolve_function="resolve_op",
        registry_module="veomni.ops",
        requirement_classes=("CudaKernelRequirement", "MluKernelRequirement", "NpuKernelRequirement"),
        requirement_module="veomni.ops.requirement",
        device_module=DEVICE_MODULE,
        device_helpers=DEVICE_HELPERS,
        layouts=("veomni/models_kernel",),
        variants=_CATALOG_VARIANTS,  # the built-in catalog names the offset RMSNorm "offset"
        offset_rms_variant="offset",
        vision_rope=("rope", "full"),
    ),
    Generation.VEOMNI_KERNEL: ApiProfile(
        generation=Generation.VEOMNI_KERNEL,
        handle="VeomniKernel",
        handle_module="veomni.kernels",
        resolver="resolve_kernel_impl",
        resolver_module="veomni.models_kernel.utils.kernel_utils",
        resolver_options=("npu_as",),
        attention_helper="attention_kernel",
        attention_module="veomni.models_kernel.utils.kernel_utils",
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss"),
        loss_module="veomni.models_kernel.utils.loss_utils",
        loss_handle_keyword="kernel",
        bias_helpers=("empty_bias", "linear_bias"),
        bias_module="veomni.models_kernel.utils.kernel_utils",
        register_function="register_kernel",
        registry_object="KERNEL_REGISTRY",
        resolve_function="resolve_kernel",
        registry_module="veomni.kernels",
        requirement_classes=("CudaKernelRequirement", "MluKernelRequirement", "NpuKernelRequirement"),
        requirement_module="veomni.kernels.requirement",
        device_module=DEVICE_MODULE,
        device_helpers=DEVICE_HELPERS,
        layouts=("veomni/models_kernel",),
        variants=_KERNEL_VARIANTS,
        offset_rms_variant="qwen3_5",
        vision_rope=("rope_vision", "full"),
    ),
}
DEFAULT_GENERATION = Generation.VEOMNI_OP  # out of any tree: the catalog's generation (the migration target)
_HANDLES = {g: p.handle for g, p in BUILTIN_PROFILES.items()}


def builtin_profile(generation: Generation | str | None = None) -> ApiProfile:
    """The built-in profile of ``generation`` (default: the catalog's, VeomniOp)."""
    if generation is None or generation == "auto":
        return BUILTIN_PROFILES[DEFAULT_GENERATION]
    return BUILTIN_PROFILES[Generation(generation)]


# -- reading a tree -------------------------------------------------------------------------------------

_REQUIREMENT = re.compile(r"^\w*KernelRequirement$|^HardwareRequirement$")
_LOSS = re.compile(r"^For[A-Z]\w*$")  # loss helpers: ForCausalLMLoss, ForTokenClassification, ...
_INTEREST = {
    *_HANDLES.values(),
    *(n for p in BUILTIN_PROFILES.values() for n in (p.resolver, p.attention_helper, p.register_function)),
    *(n for p in BUILTIN_PROFILES.values() for n in (p.registry_object, p.resolve_function)),
    "linear_bias",
    "empty_bias",
} - {None}
_TOP_DEF = re.compile(rb"^(?:async\s+def|def|class)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


def _interesting(name: str) -> bool:
    return name in _INTEREST or bool(_LOSS.match(name) or _REQUIREMENT.match(name))


# the byte pre-filter in one search: a top-level definition of an interesting name (``_TOP_DEF`` whose name
# passes ``_interesting``), without collecting every top-level name of every file
_NAMES = (
    rb"(?:"
    + b"|".join(re.escape(n.encode()) for n in sorted(_INTEREST))
    + rb"|For[A-Z]\w*|\w*KernelRequirement|HardwareRequirement)(?!\w)"
)
_INTERESTING_DEF = re.compile(
    rb"^(?:async\s+def|def|class)\s+" + _NAMES + rb"|^" + _NAMES + rb"\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE
)


def scan_definitions(
    root: Path, index: ModuleIndex, listing: scanstore.TreeListing | None = None
) -> dict[str, list[str]]:
    """name -> modules whose top level defines it (def / class / assignment), for the names a profile
    needs; files (selected from ``listing``, the tree's one walk, or walked here) are pre-filtered by a byte
    scan, then read with ``ast`` through ``index``. With a store (``scanstore.use_store``) the result is reused
    while no file's stat key (size, mtime, ctime, inode) changed."""
    files = (listing or scanstore.list_tree(root)).select(SKIP_DIRS)

    def compute() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for path in files:
            try:
                data = read_regular(path)[0]
            except OSError:
                continue
            if not _INTERESTING_DEF.search(data):
                continue
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            module = ".".join(parts)
            info = index.info(module)
            if info is None:
                continue
            for name in sorted(info.local):
                if _interesting(name):
                    found.setdefault(name, []).append(module)
        return found

    def decode(hit: Any) -> dict[str, list[str]] | None:
        if isinstance(hit, dict) and all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(m, str) for m in v)
            for k, v in hit.items()
        ):
            return {k: list(v) for k, v in hit.items()}
        return None

    return scanstore.stored("scan", root, files, compute, lambda found: found, decode)


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _public_module(index: ModuleIndex, name: str, modules: list[str], preferred: str | None) -> str | None:
    """Where to import ``name`` from: the built-in module when the tree defines it there, else the shortest
    package re-exporting it, else the defining module."""
    if preferred and index.defines(preferred, name):
        return preferred
    for module in modules:
        for ancestor in _ancestors(module):
            if ancestor.count(".") >= 1 and index.defines(ancestor, name):
                return ancestor
    return modules[0] if modules else None


def _loss_keyword(params: tuple[str, ...]) -> str | None:
    for keyword in ("kernel", "op"):
        if keyword in params:
            return keyword
    return None


def detect_generation(root: Path, defs: dict[str, list[str]] | None = None) -> Generation | None:
    """The generation a tree has, from which handle class its sources define (newest first)."""
    if defs is None:
        defs = scan_definitions(root, ModuleIndex(root))
    for generation in (Generation.VEOMNI_KERNEL, Generation.VEOMNI_OP, Generation.OP_SLOT):
        if any(defs.get(_HANDLES[generation], ())):
            return generation
    return None


_FORBID = re.compile(r"(?:do not|don't|never)\s+(?:call|build|construct)[^.]*\bforward\b", re.IGNORECASE)


def _docstring_of(index: ModuleIndex, module: str, name: str) -> tuple[str, bool] | None:
    """(docstring, interning ``__new__``) of the top-level def/class ``name`` in ``module``, read statically."""
    found = index.module_path(module)
    if found is None or found[0].is_dir():
        return None
    import ast

    from npu_lint.veomni.imports import module_tree

    tree = module_tree(found[0])
    if tree is None:
        return None
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            doc = ast.get_docstring(stmt) or ""
            interns = False
            if isinstance(stmt, ast.ClassDef):
                new = next(
                    (s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__new__"), None
                )
                class_dict = any(
                    isinstance(s, (ast.Assign, ast.AnnAssign))
                    and isinstance(s.value, (ast.Dict, ast.Call))
                    and "intern" in ast.unparse(s).lower()
                    for s in stmt.body
                )
                interns = new is not None and class_dict
                if new is not None:
                    doc += "\n" + (ast.get_docstring(new) or "")
            return doc, interns
    return None


def handle_docs(
    index: ModuleIndex, defs: dict[str, list[str]], handle: str, helpers: tuple[str | None, ...]
) -> tuple[str | None, tuple[str, ...], str | None]:
    """What the tree's docstrings say about per-call handles: (where the handle class documents interning,
    helpers documented as interned or callable from ``forward``, a docstring forbidding a call from ``forward``)."""
    interned_by: str | None = None
    forbidden: str | None = None
    for module in defs.get(handle, []):
        found = _docstring_of(index, module, handle)
        if found is None:
            continue
        doc, interns = found
        if interns or re.search(r"\bintern", doc, re.IGNORECASE):
            interned_by = f"`{handle}` (`{module}`)"
        match = _FORBID.search(doc)
        if match:
            forbidden = f'`{handle}` (`{module}`): "{" ".join(match.group(0).split())}"'
        break
    per_call: list[str] = []
    for helper in helpers:
        if helper is None:
            continue
        for module in defs.get(helper, []):
            found = _docstring_of(index, module, helper)
            if found is None:
                continue
            doc = found[0]
            match = _FORBID.search(doc)
            if match:
                forbidden = forbidden or f'`{helper}` (`{module}`): "{" ".join(match.group(0).split())}"'
            elif re.search(r"\bintern|\bin ``?forward", doc, re.IGNORECASE):
                per_call.append(helper)
            break
    return interned_by, tuple(per_call), forbidden


_CONFIG_MARK = re.compile(rb"^\s+\w+_implementation\s*:", re.MULTILINE)
_ATTENTION_MARK = b"ALL_ATTENTION_FUNCTIONS.register("


ConfigFields = tuple[tuple[str, ...], str | None, tuple[str, ...], str | None]


def _valid_config_fields(value: Any) -> bool:
    def names(x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(n, str) for n in x)

    def module(x: Any) -> bool:
        return x is None or isinstance(x, str)

    return (
        isinstance(value, list)
        and len(value) == 4
        and names(value[0])
        and module(value[1])
        and names(value[2])
        and module(value[3])
    )


def read_config_fields(root: Path, listing: scanstore.TreeListing | None = None) -> ConfigFields:
    """(ops-config fields, their module, attention implementations registered through
    ``ALL_ATTENTION_FUNCTIONS``, their module) of a tree, read statically: the class (under ``veomni/``, outside
    ``models`` directories) that declares the most ``*_implementation`` fields is the ops config. Files are
    selected from ``listing`` (the tree's one walk) or walked here. With a store (``scanstore.use_store``) the
    result is reused while no file's stat key changed (a warm run parsed about 20 files for it)."""
    files = (listing or scanstore.list_tree(root)).select({*SKIP_DIRS, "models"})
    return scanstore.stored(
        "config",
        root,
        files,
        lambda: _read_config_fields(root, files),
        lambda found: [list(found[0]), found[1], list(found[2]), found[3]],
        lambda hit: (tuple(hit[0]), hit[1], tuple(hit[2]), hit[3]) if _valid_config_fields(hit) else None,
    )


def _read_config_fields(root: Path, files: list[Path]) -> ConfigFields:
    import ast

    best: tuple[int, tuple[str, ...], str | None] = (0, (), None)
    attention: list[str] = []
    attention_module: str | None = None
    for path in files:
        try:
            data = read_regular(path)[0]
        except OSError:
            continue
        has_config = b"_implementation" in data and _CONFIG_MARK.search(data) is not None
        has_attention = _ATTENTION_MARK in data
        if not (has_config or has_attention):
            continue
        from npu_lint.veomni.patchgen import load_file  # the run's one store: the module index reads it too

        parsed = load_file(str(path))
        tree = parsed.tree if parsed is not None else None
        if tree is None:  # unreadable, undecodable or not parsable
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        nodes = ast.walk(tree) if has_attention else (n for n in tree.body if isinstance(n, ast.ClassDef))
        for node in nodes:
            if has_config and isinstance(node, ast.ClassDef):
                fields = tuple(
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign)
                    and isinstance(s.target, ast.Name)
                    and s.target.id.endswith("_implementation")
                )
                if len(fields) > best[0]:
                    best = (len(fields), fields, module)
            elif (
                has_attention
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ALL_ATTENTION_FUNCTIONS"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                attention.append(node.args[0].value)
                attention_module = attention_module or module
    return tuple(sorted(best[1])), best[2], tuple(sorted(set(attention))), attention_module


def detect_profile(
    root: Path | str | None,
    target_api: str = "auto",
    *,
    rows: tuple[OpRow, ...] | None = None,
    packages: list[str] | tuple[str, ...] | None = None,
    listing: scanstore.TreeListing | None = None,
) -> ApiProfile:
    """The profile of the tree at ``root`` (its generation and names read from its sources), or the built-in
    profile when there is no tree. ``target_api`` ("auto" | "op-slot" | "veomni-op" | "veomni-kernel")
    overrides the generation; forcing one the tree lacks adds a note. ``rows`` are the tree's registry rows
    (read when omitted); ``packages`` its model packages (found when omitted); ``listing`` the tree's one walk
    (``scanstore.list_tree``; walked here when omitted)."""
    if target_api not in TARGET_APIS:
        raise ValueError(f"target-api must be one of {', '.join(TARGET_APIS)}, got {target_api!r}")
    if root is None:
        return builtin_profile(target_api)
    root = Path(root)
    index = ModuleIndex(root)
    defs = scan_definitions(root, index, listing)
    detected = detect_generation(root, defs)
    generation = Generation(target_api) if target_api != "auto" else (detected or DEFAULT_GENERATION)
    base = BUILTIN_PROFILES[generation]
    notes: list[str] = []
    has_handle = bool(defs.get(base.handle))
    if target_api != "auto" and not has_handle:
        notes.append(
            f"target-api = {generation.value!r}, but this VeOmni tree ({root}) does not define {base.handle}"
            f" (it is of the {detected.value if detected else 'unknown'} generation): findings name the "
            f"{base.handle} API, and fixes that would import it are not offered"
        )
    elif target_api == "auto" and generation is Generation.OP_SLOT and has_handle:
        notes.append(
            f"this VeOmni tree ({root}) is of the OpSlot generation, which has no instance-local handle API "
            "(VeomniOp / VeomniKernel): module-global dispatch is reported once per file (NPU201) and cannot be "
            'fixed until the tree moves to a handle generation; target-api = "veomni-op" reports each slot, '
            "guard and OpsConfigSlot"
        )

    def where(name: str | None, preferred: str | None) -> str | None:
        """The module to import ``name`` from; None when a tree that has this API does not define it."""
        if name is None:
            return None
        found = _public_module(index, name, defs.get(name, []), preferred)
        if found is None and not has_handle:
            return preferred  # the API is absent altogether: keep the generation's names (see notes)
        return found

    def named(name: str | None, module: str | None) -> str | None:
        return name if module is not None else None

    handle_module = where(base.handle, base.handle_module) or base.handle_module
    resolver_module = where(base.resolver, base.resolver_module)
    attention_module = where(base.attention_helper, resolver_module or base.attention_module)
    bias_module = (
        where(base.bias_helpers[0], resolver_module or base.bias_module) if base.bias_helpers else None
    )
    registry_module = where(base.register_function, base.registry_module)

    def beside(name: str | None) -> str | None:  # a registry name importable from the registry module
        if name is None or not has_handle:
            return name
        return name if registry_module and index.defines(registry_module, name) else None

    registry_object = beside(base.registry_object)
    resolve_function = beside(base.resolve_function)

    # loss helpers: the module whose ForCausalLMLoss takes this generation's handle keyword
    loss_module, loss_helpers, loss_keyword = base.loss_module, base.loss_helpers, base.loss_handle_keyword
    candidates = defs.get("ForCausalLMLoss", [])
    if candidates:

        def score(module: str) -> tuple[int, int, str]:
            info = index.info(module)
            keyword = _loss_keyword(info.functions.get("ForCausalLMLoss", ())) if info else None
            return (
                0 if keyword == base.loss_handle_keyword else 1,
                0 if module == base.loss_module else 1,
                module,
            )

        best = min(candidates, key=score)
        info = index.info(best)
        if info is not None and score(best)[0] == 0:
            loss_module = where("ForCausalLMLoss", best)
            loss_keyword = _loss_keyword(info.functions.get("ForCausalLMLoss", ()))
            loss_helpers = tuple(
                sorted(
                    n
                    for n, params in info.functions.items()
                    if n.startswith("For") and (loss_keyword is None or loss_keyword in params)
                )
            )

    # requirement classes: the module (near the registry) that defines them
    requirement_module, requirement_classes = base.requirement_module, base.requirement_classes
    req_modules = sorted({m for n, ms in defs.items() if _REQUIREMENT.match(n) for m in ms})
    if req_modules:
        family = ".".join((registry_module or base.handle_module).split(".")[:2])
        req_modules.sort(key=lambda m: (m != base.requirement_module, not m.startswith(family), m))
        requirement_module = req_modules[0]
        info = index.info(requirement_module)
        if info is not None:
            requirement_classes = tuple(sorted(n for n in info.local if _REQUIREMENT.match(n)))

    device_helpers = base.device_helpers
    if index.has_module(DEVICE_MODULE):
        device_helpers = tuple(n for n in DEVICE_HELPERS if index.defines(DEVICE_MODULE, n))

    if packages is None:
        packages = find_model_packages(root / "veomni")
    layouts = layouts_of(root, packages) or base.layouts

    if rows is None:
        from npu_lint.veomni.registry import read_registry

        registered, slot_rows, _ = read_registry(root)
        rows = registered or slot_rows
    variants = _variants(rows) if rows and has_handle else base.variants
    rms = dict(variants).get("rms_norm", ())
    offset = next((v for v in OFFSET_RMS_VARIANTS if v in rms), base.offset_rms_variant)
    vision = base.vision_rope
    table = dict(variants)
    for op in VISION_ROPE_OPS:
        if op in table:
            vision = (op, "full" if "full" in table[op] else table[op][0])
            break

    interned_by, per_call_helpers, forward_forbidden = handle_docs(
        index, defs, base.handle, (base.attention_helper,)
    )
    config_fields, config_module, attention_functions, attention_functions_module = read_config_fields(
        root, listing
    )

    return replace(
        base,
        interned_by=interned_by,
        per_call_helpers=per_call_helpers,
        forward_forbidden=forward_forbidden,
        config_fields=config_fields,
        config_module=config_module,
        attention_functions=attention_functions,
        attention_functions_module=attention_functions_module,
        handle_module=handle_module,
        resolver_module=resolver_module,
        attention_module=attention_module,
        loss_helpers=loss_helpers,
        loss_module=loss_module,
        loss_handle_keyword=loss_keyword,
        bias_module=bias_module,
        registry_module=registry_module,
        resolver=named(base.resolver, resolver_module),
        attention_helper=named(base.attention_helper, attention_module),
        bias_helpers=base.bias_helpers if bias_module else (),
        register_function=named(base.register_function, registry_module),
        registry_object=registry_object,
        resolve_function=resolve_function,
        requirement_classes=requirement_classes,
        requirement_module=requirement_module,
        device_helpers=device_helpers,
        layouts=layouts,
        variants=variants,
        offset_rms_variant=offset,
        vision_rope=vision,
        root=str(root),
        detected=detected,
        notes=tuple(notes),
        index=index,
    )
