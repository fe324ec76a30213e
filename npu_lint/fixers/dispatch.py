"""The dispatch-migration codemod: OpSlot-era dispatch -> handles owned by the model classes.

Offered as the fix of NPU201/NPU202/NPU203, NPU207 (``OpsConfigSlot``) and NPU303 (vendor classes swapped in by
``create_patch_from_external``) through ``build_migration_fix``; ``migrate_source`` is the pure entry point.
Every name it writes comes from the target :class:`~npu_lint.veomni.profile.ApiProfile` (:class:`Names`): the
handle class and its module (``VeomniOp`` / ``VeomniKernel``), the resolver (``resolve_op_impl`` /
``resolve_kernel_impl``, with ``npu_as=`` when it takes it), the bias and loss helpers, their modules and the
loss keyword (``op=`` / ``kernel=``), the offset RMSNorm variant and the vision RoPE. Every import it adds must be
confirmed by ``profile.defines``; otherwise the result is display-only, naming what is missing. On an OpSlot
profile (an OpSlot-era tree under ``target-api = auto``) nothing is migrated: there is no handle API.

1. declarations: ``OpSlot`` / ``OpsConfigSlot`` assignments (module level, or inside
   ``config.add_post_import_block``) and their import go; the handle API names are imported
   (``config.add_import`` in a spec, ordinary imports in a module);
2. handles: every class whose methods used a slot builds ``self.<slot> = <Handle>(op, variant,
   <resolver>("<field>"))`` in its ``__init__`` (in a spec: an ``override_method("Cls.__init__")`` whose body is
   the upstream ``__init__``, read with astroid), before a final ``self.post_init()``; an ``OpsConfigSlot``
   becomes ``self.<slot> = <resolver>("<field>")`` and its ``.value`` reads ``self.<slot>``;
3. guarded bodies become unconditional handle calls with the call contract translated (RMSNorm ``eps=``;
   ``rotary_pos_emb`` -> ``rope``; vision RoPE -> the profile's vision op; SwiGLU ``(self, x)`` -> weights +
   ``linear_bias``; cross-entropy through ``self.loss_function = partial(<Loss>, <keyword>=...)``;
   ``rms_norm/qwen3_5`` and the Gemma ``1 + w`` idiom -> the offset variant with the raw weight); a fused
   branch that refuses a case (``if C: raise``) hands case C to the eager branch (gemma3's soft-capping);
4. a replaced free function that used a slot keeps its eager body; its slot call is inlined, through ``self``,
   into the methods that call it (the spec's overrides, ``self``-taking helpers, and upstream methods, which
   are then overridden with their upstream source);
5. vendor patches (``create_patch_from_external`` of a Liger RMSNorm / SwiGLU MLP, a replaced
   ``apply_rotary_pos_emb`` calling Liger) are first restated as slot dispatch (:func:`vendor_prepass`);
6. an NPU sibling spec that re-registers the GPU spec's functions also re-registers the GPU spec's new
   ``__init__`` overrides and handle-calling overrides (:func:`sibling_registrations`); comments, banners,
   descriptions and the docstring that still describe the OpSlot mechanism are reworded (:func:`refresh_wording`).

Anything that cannot be migrated exactly makes the fix ``display`` with the reason; outside any VeOmni tree the
built-in profile's names are used and the fix is ``unsafe``.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.core.safeio import read_text
from npu_lint.veomni.catalog import BUILTIN_ROWS, OPSLOT_TO_VEOMNIOP, slot_target
from npu_lint.veomni.profile import ApiProfile, Generation, builtin_profile, detect_profile

if TYPE_CHECKING:  # pragma: no cover
    from npu_lint.core.source import SourceFile
    from npu_lint.veomni.project import Project

__all__ = ["MigrationResult", "HandleSpec", "migrate_source", "build_migration_fix", "edits_between"]

# OpSlot op -> ops-config field (the contract's config-field -> op table, keyed by the slot's op name)
SLOT_FIELD: dict[str, str] = {
    "rms_norm": "rms_norm_implementation",
    "rotary_pos_emb": "rotary_pos_emb_implementation",
    "rotary_pos_emb_vision": "rotary_pos_emb_vision_implementation",
    "swiglu_mlp": "swiglu_mlp_implementation",
    "cross_entropy_loss": "cross_entropy_loss_implementation",
    "moe_experts": "moe_implementation",
    "load_balancing_loss": "load_balancing_loss_implementation",
    "rms_norm_gated": "rms_norm_gated_implementation",
    "causal_conv1d": "causal_conv1d_implementation",
    "chunk_gated_delta_rule": "chunk_gated_delta_rule_implementation",
}
CE_LOSS = {"causal": "ForCausalLMLoss", "seq_cls": "ForSequenceClassificationLoss"}
# kernels an OpSlot hands out with ``.bound_kernel()`` (called with keywords) -> the handle's call contract:
# the keywords passed positionally, in this order (a missing one is None), and whether the kernel's result was a
# tuple whose first item the caller took (``[0]``) while the op returns the tensor itself (VeOmni @5d90dd16)
KERNEL_CONTRACTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], bool]] = {
    # op: (positional keywords, aliases of the positional names by position, op returns the first item)
    "causal_conv1d": (("x", "weight", "bias", "cu_seqlens"), (), True),
    "chunk_gated_delta_rule": (("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens"), (), False),
}
# MoE experts and the load-balancing loss (names looked up in the tree, used only when it defines them)
MOE_RESOLVER = "resolve_moe_impl"
EMPTY_BIAS = "empty_bias"
LB_HELPER = "load_balancing_loss"
# the moe_experts ops' call contracts (VeOmni @5d90dd16): positional names, then keywords; a fused MoE function
# called with these keywords in the OpSlot era (``fused_moe_forward(hidden_states=..., ...)``) becomes the handle
# called positionally (a None weight becomes the empty-bias sentinel)
MOE_CONTRACTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "standard": (
        (
            "hidden_states",
            "routing_weights",
            "selected_experts",
            "fc1_1_weight",
            "fc1_2_weight",
            "fc2_weight",
            "fc1_1_2_weight",
        ),
        ("num_experts",),
    ),
}
# OpSlot MoE kernels that took the experts module itself: slot(self, <args>) -> the handle with the module's
# tensors (VeOmni main's OpSlot adapters read them off the module; the ops take them positionally). variant: (the
# slot's arguments after the module, the op's positional arguments (a slot argument's name, ``self.<attr>``, or
# ``empty:self.<attr>`` for the empty-bias sentinel of that weight), the op's keywords as ``self.<attr>``)
MOE_MODULE_CONTRACTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "standard": (
        ("hidden_states", "top_k_index", "top_k_weights"),
        (
            "hidden_states",
            "top_k_weights",
            "top_k_index",
            "empty:self.gate_up_proj",
            "empty:self.gate_up_proj",
            "self.down_proj",
            "self.gate_up_proj",
        ),
        ("num_experts",),
    ),
    "gpt_oss": (
        ("hidden_states", "router_indices", "routing_weights"),
        (
            "hidden_states",
            "routing_weights",
            "router_indices",
            "self.gate_up_proj",
            "self.gate_up_proj_bias",
            "self.down_proj",
            "self.down_proj_bias",
        ),
        ("num_experts", "alpha", "limit"),
    ),
}
# attention: upstream forwards pick ``attention_interface`` from ``ALL_ATTENTION_FUNCTIONS.get_interface(...)``; on a
# tree with an attention helper (``attention_op()`` / ``attention_kernel()``) the class builds that handle instead
ATTENTION_OP = "attention"
ATTENTION_ATTR = "veomni_attn"
ATTENTION_VAR = "attention_interface"
ATTENTION_FIELD = "attn_implementation"
POST_INIT = re.compile(r"^\s*self\.post_init\(\s*\)\s*$")  # handles are built before it, as upstream does
GUARD_ATTR = "use_non_eager_impl"
_CATALOG_PAIRS = {(r.op, r.variant) for r in BUILTIN_ROWS}
_BUILTINS = set(dir(builtins)) | {"None", "True", "False"}


# ----------------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """Every name the migration writes, taken from the target :class:`ApiProfile` (never hard-coded)."""

    generation: str  # "veomni-op" / "veomni-kernel"
    handle: str  # VeomniOp / VeomniKernel
    handle_module: str
    resolver: str  # resolve_op_impl / resolve_kernel_impl
    resolver_module: str
    npu_as: bool  # the resolver takes ``npu_as=`` (cross-entropy's NPU impl is ``chunk_loss``)
    loss_module: str
    loss_keyword: str | None  # "op" / "kernel": how a loss helper is bound to its handle
    loss_helpers: tuple[str, ...]
    bias_module: str
    linear_bias: str
    offset_variant: str  # the (1 + weight) RMSNorm variant ("qwen3_5" / "offset")
    vision_rope: tuple[str, str]  # (op, variant) of the vision RoPE
    attention_helper: str | None
    attention_module: str | None
    moe_resolver: str | None = None  # resolve_moe_impl (beside the resolver), when the tree defines it
    empty_bias: str | None = None  # the empty-bias sentinel helper (beside linear_bias), when defined
    lb_helper: str | None = None  # load_balancing_loss in the loss module, when it takes the handle keyword
    pairs: frozenset[tuple[str, str]] = frozenset()  # (op, variant) the tree registers

    @classmethod
    def of(cls, api: ApiProfile) -> Names:
        """The names of ``api``; a name the profile lacks keeps its generation's built-in spelling (the
        import check then makes the fix display-only, naming it)."""
        from npu_lint.veomni.profile import builtin_profile

        base = builtin_profile(api.generation)
        return cls(
            generation=str(api.generation),
            handle=api.handle,
            handle_module=api.handle_module,
            resolver=api.resolver or base.resolver or "resolve_op_impl",
            resolver_module=api.resolver_module or base.resolver_module or "",
            npu_as="npu_as" in (api.resolver_options or base.resolver_options),
            loss_module=api.loss_module or base.loss_module or "",
            loss_keyword=api.loss_handle_keyword,
            loss_helpers=tuple(api.loss_helpers),
            bias_module=api.bias_module or base.bias_module or "",
            linear_bias="linear_bias",  # the only bias helper a migration writes (checked by can_import)
            offset_variant=api.offset_rms_variant,
            vision_rope=tuple(api.vision_rope),  # type: ignore[arg-type]
            attention_helper=api.attention_helper,
            attention_module=api.attention_module,
            moe_resolver=_defined(api, api.resolver_module or base.resolver_module, MOE_RESOLVER),
            empty_bias=_defined(api, api.bias_module or base.bias_module, EMPTY_BIAS),
            lb_helper=_defined(api, api.loss_module or base.loss_module, LB_HELPER),
            pairs=frozenset((op, v) for op, variants in api.variants for v in variants),
        )


def _defined(api: ApiProfile, module: str | None, name: str) -> str | None:
    return name if module and api.defines(module, name) else None


@dataclass(frozen=True)
class HandleSpec:
    cls: str
    attr: str
    op: str
    variant: str
    field: str
    loss: str | None = None  # loss helper bound through self.<loss_attr> (cross-entropy, load balancing)
    loss_attr: str = "loss_function"

    @property
    def is_config(self) -> bool:
        """An OpsConfigSlot: the instance keeps the implementation name its config selects."""
        return self.op == CONFIG_SLOT

    def construction(self, names: Names) -> str:
        if self.is_config:
            return f'self.{self.attr} = {names.resolver}("{self.field}")'
        if self.op == ATTENTION_OP and names.attention_helper:
            return f"self.{self.attr} = {names.attention_helper}()"
        if self.op == "moe_experts" and names.moe_resolver:
            return f'self.{self.attr} = {names.handle}("{self.op}", "{self.variant}", {names.moe_resolver}())'
        npu_as = ', npu_as="chunk_loss"' if self.op == "cross_entropy_loss" and names.npu_as else ""
        args = f'"{self.op}", "{self.variant}", {names.resolver}("{self.field}"{npu_as})'
        line = f"self.{self.attr} = {names.handle}({args})"
        if len(line) <= 102:  # fits in 110 columns at a method body's indentation
            return line
        return f"self.{self.attr} = {names.handle}(\n    {args}\n)"

    def lines(self, names: Names) -> list[str]:
        out = [self.construction(names)]
        if self.loss:
            keyword = names.loss_keyword or "op"
            out.append(f"self.{self.loss_attr} = partial({self.loss}, {keyword}=self.{self.attr})")
        return out


@dataclass(frozen=True)
class MigrationResult:
    text: str
    applicability: Applicability
    reasons: tuple[str, ...] = ()
    handles: tuple[HandleSpec, ...] = ()
    imports: tuple[tuple[str, str], ...] = ()  # (module, name) the migrated text imports
    registrations: tuple[tuple[str, str], ...] = ()  # NPU sibling: (GPU function, target) re-registered

    @property
    def changed(self) -> bool:
        return bool(self.handles) or bool(self.reasons) or bool(self.registrations)


# ----------------------------------------------------------------------------------------------------
# analysis (stdlib ast over the original text)
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    name: str
    op: str
    variant: str

    @property
    def target(self) -> tuple[str, str] | None:
        if self.op == CONFIG_SLOT:
            return (self.op, self.variant)
        mapped = OPSLOT_TO_VEOMNIOP.get((self.op, self.variant))
        if mapped is None and (self.op, self.variant) in _CATALOG_PAIRS:
            mapped = (self.op, self.variant)
        return mapped


@dataclass
class FnInfo:
    key: str  # top-level def name, or "Cls.meth" for a method inside a class
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: str | None  # the class whose instance ``self`` is
    kind: str  # method | free | helper
    target: str | None = None  # spec decorator target ("Cls.meth" / "func")
    upstream: str | None = None  # for free functions: the name the function has in the generated module


@dataclass
class FreeFn:
    """A replaced free function whose body starts with ``if S.use_non_eager_impl: return S(...)``."""

    name: str  # upstream name (what callers call)
    key: str
    slot: Slot


@dataclass
class Plan:
    spec: bool
    names: Names
    config_name: str = "config"
    source_module: str | None = None
    slots: dict[str, Slot] = field(default_factory=dict)
    functions: dict[str, FnInfo] = field(default_factory=dict)
    free: dict[str, FreeFn] = field(default_factory=dict)
    handles: dict[str, dict[str, HandleSpec]] = field(default_factory=dict)
    owners: dict[str, set[str]] = field(default_factory=dict)  # fn key -> classes (helpers may have several)
    reasons: list[str] = field(default_factory=list)
    display: bool = False
    # new top-level statements (spec): anchor key -> texts to insert before / after it
    before: dict[str, list[str]] = field(default_factory=dict)
    after: dict[str, list[str]] = field(default_factory=dict)
    tail: list[str] = field(default_factory=list)
    extra_imports: list[str] = field(default_factory=list)  # plain import lines (names of copied signatures)
    init_keys: dict[str, str] = field(default_factory=dict)  # class -> key of the existing __init__ to extend
    delegating_inits: dict[str, str] = field(default_factory=dict)  # plain module: class -> init text
    new_fn_names: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)  # function keys the rewrite has to visit
    guarded: set[str] = field(default_factory=set)  # slots whose use_non_eager_impl some function tests
    free_callers: dict[str, int] = field(default_factory=dict)  # free function -> methods that call it
    # (class, attr) -> slot: `self.attr = slot.bound_kernel() [or fallback]` in __init__ (the attr goes; its calls
    # and None / fallback tests are rewritten to the handle)
    kernel_attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    # (class, attr) -> (slot, eps source, activation source): a gated-norm module built from the slot in __init__
    # (the eager module stays; its calls become handle calls with its weight)
    module_attrs: dict[tuple[str, str], tuple[str, str, str]] = field(default_factory=dict)
    # function key -> class: forwards whose ``attention_interface`` becomes the class's attention handle
    attention: dict[str, str] = field(default_factory=dict)
    # (function key, callee) -> slot: a fused MoE function the guarded branch called with the op's keywords
    moe_calls: dict[tuple[str, str], str] = field(default_factory=dict)
    moe_fns: set[str] = field(default_factory=set)  # functions whose MoE path became the handle call
    # NPU sibling: class -> handle attrs its GPU spec's migrated __init__ (registered here) builds
    gpu_inits: dict[str, set[str]] = field(default_factory=dict)
    gpu_slot_users: set[str] = field(default_factory=set)  # slots only the GPU spec's functions use
    empty_bias_used: bool = False

    def fail(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)
        self.display = True

    def note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def target(self, slot: Slot) -> tuple[str, str] | None:
        """The handle (op, variant) of ``slot`` in the target profile's names."""
        if (slot.op, slot.variant) not in OPSLOT_TO_VEOMNIOP:
            if slot.target is None and (slot.op, slot.variant) in self.names.pairs:
                return (slot.op, slot.variant)  # the tree registers the slot's own (op, variant)
            return slot.target
        return slot_target(slot.op, slot.variant, self.names.offset_variant, self.names.vision_rope)

    def add_handle(self, cls: str, slot: Slot, variant: str | None = None) -> HandleSpec | None:
        target = self.target(slot)
        if target is None:
            self.fail(
                f"`{slot.name}` is OpSlot({slot.op!r}, {slot.variant!r}): no {self.names.handle} row is known "
                "for it"
            )
            return None
        op, var = target
        if variant is not None:
            var = variant
        loss = None
        loss_attr = "loss_function"
        if slot.op == "cross_entropy_loss":
            loss = CE_LOSS.get(slot.variant)
        elif slot.op == "load_balancing_loss" and self.names.lb_helper and self.names.loss_keyword:
            loss, loss_attr = self.names.lb_helper, LB_HELPER
        field_name = (
            slot.variant if slot.op == CONFIG_SLOT else SLOT_FIELD.get(slot.op, f"{slot.op}_implementation")
        )
        spec = HandleSpec(cls, slot.name, op, var, field_name, loss, loss_attr)
        existing = self.handles.setdefault(cls, {}).get(slot.name)
        if existing is not None and existing != spec:
            self.fail(
                f"`{cls}` would need `{slot.name}` as both {existing.op}/{existing.variant} and {op}/{var}"
            )
            return existing
        self.handles[cls][slot.name] = spec
        return spec


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


CONFIG_SLOT = "__ops_config__"  # the op of an OpsConfigSlot("<field>") (its variant is the field)
SLOT_CLASSES = ("OpSlot", "OpsConfigSlot")


def _opslot_call(node: ast.AST) -> tuple[str, str] | None:
    if isinstance(node, ast.Call) and _dotted(node.func) in ("OpsConfigSlot", "dispatch.OpsConfigSlot"):
        field_name = _const_str(node.args[0]) if node.args else None
        if field_name is None:
            field_name = next(
                (_const_str(k.value) for k in node.keywords if k.arg in ("field", "name")), None
            )
        return (CONFIG_SLOT, field_name) if field_name else None
    if not isinstance(node, ast.Call) or _dotted(node.func) not in ("OpSlot", "dispatch.OpSlot"):
        return None
    args = [_const_str(a) for a in node.args[:2]]
    kw = {k.arg: _const_str(k.value) for k in node.keywords}
    op = args[0] if args else kw.get("op") or kw.get("op_name")
    variant = args[1] if len(args) > 1 else kw.get("variant")
    if op is None or variant is None:
        return None
    return op, variant


def _slots_in(body: Iterable[ast.stmt]) -> list[Slot]:
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            found = _opslot_call(stmt.value)
            if found:
                out.append(Slot(stmt.targets[0].id, *found))
    return out


def _post_import_block_text(stmt: ast.stmt, config_name: str) -> str | None:
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and _dotted(stmt.value.func) == f"{config_name}.add_post_import_block"
        and stmt.value.args
    ):
        return _const_str(stmt.value.args[0])
    return None


def _decorator_target(
    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, config_name: str
) -> tuple[str, str] | None:
    for dec in fn.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        name = _dotted(call.func if call else dec)
        if not name or not name.startswith(config_name + "."):
            continue
        method = name.split(".", 1)[1]
        target = None
        if call is not None:
            target = _const_str(call.args[0]) if call.args else None
            if target is None:
                for kw in call.keywords:
                    if kw.arg in (
                        "target",
                        "target_method",
                        "target_func",
                        "target_class",
                        "target_function",
                    ):
                        target = _const_str(kw.value)
        return method, target or ""
    return None


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return s.lower()


def _guard_slot(test: ast.expr, slots: dict[str, Slot]) -> tuple[Slot, bool] | None:
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if (
        isinstance(test, ast.Attribute)
        and test.attr == GUARD_ATTR
        and isinstance(test.value, ast.Name)
        and test.value.id in slots
    ):
        return slots[test.value.id], negated
    return None


def _unsupported_case(stmt: ast.stmt) -> bool:
    """``if <condition>: raise ...`` (no else): the fused path refuses a case the eager path handles."""
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Raise)
    )


def _is_offset_weight(node: ast.expr) -> ast.expr | None:
    """``1 + w`` / ``1.0 + w`` / ``w + 1.0`` -> ``w``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        for const, other in ((node.left, node.right), (node.right, node.left)):
            if (
                isinstance(const, ast.Constant)
                and const.value in (1, 1.0)
                and not isinstance(const.value, bool)
            ):
                return other
    return None


def _walk_fn(fn: ast.AST) -> Iterable[ast.AST]:
    """Nodes of a function body (nested defs included: a slot used there is still this method's)."""
    return ast.walk(fn)


class _Analyzer:
    def __init__(self, tree: ast.Module, text: str, path: str, spec: bool, names: Names) -> None:
        self.tree = tree
        self.text = text
        self.path = path
        self.base_migrated = False  # the spec whose functions this one reuses no longer has OpSlot dispatch
        self.plan = Plan(spec=spec, names=names)

    # -- collection ---------------------------------------------------------------------------------
    def run(self) -> Plan:
        plan = self.plan
        tree = self.tree
        if plan.spec:
            for stmt in tree.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Call)
                    and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
                    and isinstance(stmt.targets[0], ast.Name)
                ):
                    plan.config_name = stmt.targets[0].id
                    for kw in stmt.value.keywords:
                        if kw.arg == "source_module":
                            plan.source_module = _const_str(kw.value)
        for slot in _slots_in(tree.body):
            plan.slots[slot.name] = slot
        for stmt in tree.body:
            block = _post_import_block_text(stmt, plan.config_name)
            if block is not None and ("OpSlot" in block or "OpsConfigSlot" in block):
                try:
                    inner = ast.parse(textwrap.dedent(block))
                except SyntaxError:
                    plan.fail("a post-import block with OpSlot declarations does not parse")
                    continue
                for slot in _slots_in(inner.body):
                    plan.slots[slot.name] = slot
        if not plan.slots:
            return plan
        self._collect_functions()
        self._inherit_from_gpu_sibling()
        self._analyse_free_functions()
        self._analyse_uses()
        self._kernel_and_module_users()
        self._plan_attention()
        self._plan_inits()
        for name, free in plan.free.items():
            if not plan.free_callers.get(name):
                where = "upstream or in this spec" if plan.spec else "in this module (callers elsewhere?)"
                plan.fail(
                    f"`{free.key}` uses `{free.slot.name}` but no method calls `{name}` {where}: "
                    "there is no class to own the handle"
                )
        used = {h.attr for per in plan.handles.values() for h in per.values()} | {
            f.slot.name for f in plan.free.values()
        }
        unused = sorted(set(plan.slots) - used - plan.guarded)
        served = sorted(set(unused) & plan.gpu_slot_users)
        if served:
            # an NPU sibling declares slots for the GPU spec's patch functions it re-registers: the declarations go,
            # and the GPU spec's new __init__ overrides are re-registered here (sibling_registrations)
            plan.note(
                f"slot(s) {', '.join(served)} were declared here for the GPU spec's patch functions this spec "
                "re-registers: the declarations go, the GPU spec's handle-building __init__ overrides are re-registered"
            )
            unused = sorted(set(unused) - set(served))
        if unused and self.base_migrated:
            plan.fail(
                f"slot(s) {', '.join(unused)} serve the patch functions this spec reuses from a spec that was migrated "
                "without it: migrate both from their OpSlot-era text in the same change (one `check --fix` run, or "
                "`migrate`)"
            )
        elif unused:
            plan.fail(
                f"slot(s) {', '.join(unused)} are declared here but no function of this file uses them (patch "
                "functions imported from another spec?): migrate the spec that uses them and re-register its new "
                "__init__ overrides here"
            )
        return plan

    def _collect_functions(self) -> None:
        plan = self.plan
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dec = _decorator_target(stmt, plan.config_name) if plan.spec else None
                params = [a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args)]
                if dec and dec[0] == "override_method" and "." in dec[1]:
                    owner = dec[1].split(".")[0]
                    plan.functions[stmt.name] = FnInfo(stmt.name, stmt, owner, "method", dec[1])
                elif dec and dec[0] == "replace_function":
                    plan.functions[stmt.name] = FnInfo(
                        stmt.name, stmt, None, "free", dec[1], dec[1] or stmt.name
                    )
                elif params[:1] == ["self"]:
                    plan.functions[stmt.name] = FnInfo(
                        stmt.name, stmt, None, "helper", dec[1] if dec else None
                    )
                else:
                    plan.functions[stmt.name] = FnInfo(stmt.name, stmt, None, "free", None, stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                dec = _decorator_target(stmt, plan.config_name) if plan.spec else None
                cls_name = dec[1] if dec and dec[0] == "replace_class" and dec[1] else stmt.name
                for item in stmt.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        key = f"{stmt.name}.{item.name}"
                        plan.functions[key] = FnInfo(key, item, cls_name, "method", None)

    def _inherit_from_gpu_sibling(self) -> None:
        """An NPU sibling that imports its GPU spec's patch functions: the GPU spec's migration builds the handles
        of the classes whose ``__init__`` this spec registers from it, and its kernel / gated-norm attributes become
        handles, so this spec's own methods that call those attributes are rewritten the same way."""
        plan = self.plan
        if not plan.spec:
            return
        found_base = base_spec_import(self.tree, self.path)
        if found_base is None:
            return
        gpu, gpu_path = found_base
        try:
            gpu_text = _base_original(gpu_path, read_text(gpu_path))
        except (OSError, ValueError):
            return
        self.base_migrated = not re.search(r"\bOpSlot\(", gpu_text)
        try:
            gpu_text, _, _ = vendor_prepass(gpu_text, gpu_path)
            gpu_plan = _Analyzer(ast.parse(gpu_text), gpu_text, gpu_path, True, plan.names).run()
        except Exception:  # noqa: BLE001 - the sibling is then analysed on its own
            return
        if gpu_plan.display:
            return
        imported = {a.asname or a.name: a.name for a in gpu.names}
        registered = _registered(self.tree, plan.config_name)
        init_owner = {
            key: cls for cls, key in gpu_plan.init_keys.items()
        }  # base spec __init__ fn -> its class
        class_map: dict[str, str] = {}  # the base spec's class -> this spec's class
        for local, target in registered.items():
            cls, _, meth = target.partition(".")
            base_cls = init_owner.get(imported.get(local, ""))
            if meth == "__init__" and local in imported and (base_cls or cls) in gpu_plan.handles:
                base_cls = base_cls or cls
                plan.gpu_inits[cls] = set(gpu_plan.handles[base_cls])
                class_map[base_cls] = cls
        gpu_users = {imported.get(local, local) for local in registered if local in imported}
        for fn in gpu_plan.functions.values():
            if fn.key in gpu_users:
                plan.gpu_slot_users |= {n.id for n in ast.walk(fn.node) if isinstance(n, ast.Name)} & set(
                    plan.slots
                )
        for per in gpu_plan.handles.values():
            plan.gpu_slot_users |= set(per) & set(plan.slots)
        for (base_cls, attr), slot in gpu_plan.kernel_attrs.items():
            cls = class_map.get(base_cls)
            if cls is not None and slot in plan.slots:
                plan.kernel_attrs[(cls, attr)] = slot
                plan.add_handle(cls, plan.slots[slot])
        for (base_cls, attr), found in gpu_plan.module_attrs.items():
            cls = class_map.get(base_cls)
            if cls is not None and found[0] in plan.slots:
                plan.module_attrs[(cls, attr)] = found
                plan.add_handle(cls, plan.slots[found[0]])

    def _uses(self, fn: FnInfo) -> list[ast.Name]:
        return [n for n in _walk_fn(fn.node) if isinstance(n, ast.Name) and n.id in self.plan.slots]

    def _analyse_free_functions(self) -> None:
        plan = self.plan
        for fn in plan.functions.values():
            if fn.kind != "free" or not self._uses(fn):
                continue
            body = list(fn.node.body)
            if body and isinstance(body[0], ast.Expr) and _const_str(body[0].value) is not None:
                body = body[1:]
            first = body[0] if body else None
            guard = _guard_slot(first.test, plan.slots) if isinstance(first, ast.If) else None
            ok = (
                guard is not None
                and not guard[1]
                and not first.orelse  # type: ignore[union-attr]
                and len(first.body) == 1  # type: ignore[union-attr]
                and isinstance(first.body[0], ast.Return)  # type: ignore[union-attr]
                and isinstance(first.body[0].value, ast.Call)  # type: ignore[union-attr]
                and isinstance(first.body[0].value.func, ast.Name)  # type: ignore[union-attr]
                and first.body[0].value.func.id == guard[0].name  # type: ignore[union-attr]
            )
            rest_uses = [
                n for s in body[1:] for n in ast.walk(s) if isinstance(n, ast.Name) and n.id in plan.slots
            ]
            if not ok or rest_uses:
                plan.fail(
                    f"`{fn.key}` uses a slot in a free function in a shape other than "
                    "`if slot.use_non_eager_impl: return slot(...)` at its top; its callers cannot be rewritten exactly"
                )
                continue
            assert guard is not None
            plan.free[fn.upstream or fn.key] = FreeFn(fn.upstream or fn.key, fn.key, guard[0])
            plan.touched.add(fn.key)

    def _calls_to(self, node: ast.AST, name: str) -> list[ast.Call]:
        return [
            c
            for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name
        ]

    def _helper_owners(self, helper: FnInfo) -> set[str] | None:
        owners: set[str] = set()
        for fn in self.plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            for call in self._calls_to(fn.node, helper.key):
                if not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"):
                    return None
                owners.add(fn.owner)
        return owners or None

    def _fn_owners(self, fn: FnInfo) -> set[str]:
        if fn.key in self.plan.owners:
            return self.plan.owners[fn.key]
        if fn.kind == "method" and fn.owner:
            owners = {fn.owner}
        elif fn.kind == "helper":
            owners = self._helper_owners(fn) or set()
        else:
            owners = set()
        self.plan.owners[fn.key] = owners
        return owners

    def _analyse_uses(self) -> None:
        plan = self.plan
        for fn in plan.functions.values():
            if fn.kind == "free":
                for name, free in plan.free.items():
                    if free.key != fn.key and self._calls_to(fn.node, name):
                        plan.fail(
                            f"module-level function `{fn.key}` calls `{name}`: it has no `self` for the handle"
                        )
                continue  # its own slot use is handled through its callers
            uses = self._uses(fn)
            free_calls = [c for name in plan.free for c in self._calls_to(fn.node, name)]
            if not uses and not free_calls:
                continue
            plan.touched.add(fn.key)
            owners = self._fn_owners(fn)
            if not owners:
                plan.fail(
                    f"`{fn.key}` uses a slot but is neither a method nor a helper called as `helper(self, ...)` "
                    "from methods: there is no `self` to own the handle"
                )
                continue
            for owner in sorted(owners):
                self._record_uses(fn, owner)
        self._upstream_callers()

    def _record_uses(self, fn: FnInfo, owner: str) -> None:
        plan = self.plan
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(fn.node):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(fn.node):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in plan.free:
                plan.free_callers[node.func.id] = plan.free_callers.get(node.func.id, 0) + 1
                plan.add_handle(owner, plan.free[node.func.id].slot)
                if any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                ):
                    plan.fail(
                        f"`{fn.key}` calls `{node.func.id}` with *args/**kwargs: cannot inline the op call"
                    )
            if not (isinstance(node, ast.Name) and node.id in plan.slots):
                continue
            slot = plan.slots[node.id]
            parent = parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr == GUARD_ATTR:
                continue  # a guard; handled by the rewrite
            if (
                isinstance(parent, ast.Attribute)
                and parent.attr == "use_eager_impl"
                and slot.op == "moe_experts"
                and plan.names.moe_resolver
            ):
                continue  # `if not slot.use_eager_impl: raise`: a handle always has a row; goes with the fallback
            if isinstance(parent, ast.Call) and parent.func is node:
                self._record_call(fn, owner, slot, parent)
                continue
            if slot.op == CONFIG_SLOT:
                if isinstance(parent, ast.Attribute) and parent.attr == "value":
                    plan.add_handle(owner, slot)
                else:
                    plan.add_handle(owner, slot)
                    plan.fail(f"`{fn.key}` uses the OpsConfigSlot `{slot.name}` other than through `.value`")
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "bound_kernel":
                attr = self._kernel_alias(fn, parents, parent)
                if attr is not None and slot.op in KERNEL_CONTRACTS:
                    plan.add_handle(owner, slot)
                    plan.kernel_attrs[(owner, attr)] = slot.name
                    continue
                plan.add_handle(owner, slot)
                plan.fail(
                    f"`{fn.key}` freezes `{slot.name}.bound_kernel()` (None for eager); a VeomniOp handle is always "
                    "callable, so code that tests the kernel for None changes behaviour: review by hand"
                )
                continue
            plan.add_handle(owner, slot)
            plan.fail(
                f"`{fn.key}` uses `{slot.name}` as a value, not in a call or guard: cannot translate it"
            )
        for node in ast.walk(fn.node):
            guard = _guard_slot(node.test, plan.slots) if isinstance(node, ast.If) else None
            if guard is not None:
                plan.guarded.add(guard[0].name)
                fused = node.orelse if guard[1] else node.body
                calls = {
                    c.func.id
                    for stmt in fused
                    for c in ast.walk(stmt)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                }
                if (
                    guard[0].name not in calls
                    and not any(plan.free[f].slot == guard[0] for f in calls if f in plan.free)
                    and not self._moe_keyword_call(fn, owner, guard[0], fused, guard[1])
                ):
                    plan.fail(
                        f"`{fn.key}` tests `{guard[0].name}.{GUARD_ATTR}` but its branch does not call the slot; "
                        "a VeomniOp handle has no such flag: choose the implementation by hand"
                    )
            if isinstance(node, ast.If) and _guard_slot(node.test, plan.slots):
                guard_info = _guard_slot(node.test, plan.slots)
                body = list(node.body)
                if guard_info and not guard_info[1] and node.orelse and _unsupported_case(body[0]):
                    # `if slot: if C: raise ...` with an eager else: C takes the eager path (upstream's shape)
                    body = body[1:]
                for stmt in body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Raise):
                            plan.fail(
                                f"`{fn.key}`: the guarded branch of `{_guard_slot(node.test, plan.slots)[0].name}` "  # type: ignore[index]
                                "raises where the eager fallback did not; made unconditional, that error would "
                                "hit every implementation"
                            )

    def _moe_keyword_call(
        self, fn: FnInfo, owner: str, slot: Slot, fused: list[ast.stmt], negated: bool
    ) -> bool:
        """``if slot.use_non_eager_impl: return fused_fn(<the op's keywords>)``: the handle, called with them."""
        plan = self.plan
        if (
            negated
            or slot.op != "moe_experts"
            or not plan.names.moe_resolver
            or slot.variant not in MOE_CONTRACTS
        ):
            return False
        positional, keywords = MOE_CONTRACTS[slot.variant]
        if not (
            len(fused) == 1 and isinstance(fused[0], ast.Return) and isinstance(fused[0].value, ast.Call)
        ):
            return False
        call = fused[0].value
        if not isinstance(call.func, ast.Name) or call.args:
            return False
        given = {k.arg for k in call.keywords}
        if None in given or not given <= {*positional, *keywords} or positional[0] not in given:
            return False
        if any(
            isinstance(k.value, ast.Constant) and k.value.value is None and k.arg in keywords
            for k in call.keywords
        ):
            return False
        if any(isinstance(k.value, ast.Constant) and k.value.value is None for k in call.keywords):
            if not plan.names.empty_bias:
                return False
            weights = [
                k
                for k in call.keywords
                if k.arg.endswith("_weight") and not isinstance(k.value, ast.Constant)
            ]
            if not weights:
                return False
        plan.moe_calls[(fn.key, call.func.id)] = slot.name
        plan.moe_fns.add(fn.key)
        plan.add_handle(owner, slot)
        return True

    def _kernel_and_module_users(self) -> None:
        """Methods of a class whose bound-kernel / gated-norm attributes became handles are rewritten too."""
        plan = self.plan
        attrs = {*plan.kernel_attrs, *plan.module_attrs}
        if not attrs:
            return
        for fn in plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            used = {
                n.attr
                for n in ast.walk(fn.node)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            if any(owner == fn.owner and attr in used for owner, attr in attrs):
                plan.touched.add(fn.key)
                plan.owners.setdefault(fn.key, set()).add(fn.owner)

    def _kernel_alias(
        self, fn: FnInfo, parents: dict[ast.AST, ast.AST], attribute: ast.Attribute
    ) -> str | None:
        """``self.<attr> = slot.bound_kernel() [or fallback]`` in an ``__init__``: the attr."""
        if not (fn.node.name == "__init__" or (fn.target or "").endswith(".__init__")):
            return None
        call = parents.get(attribute)
        node = parents.get(call) if isinstance(call, ast.Call) else None
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and node.values[0] is call:
            node = parents.get(node)
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.targets[0].value, ast.Name)
            and node.targets[0].value.id == "self"
        ):
            return node.targets[0].attr
        return None

    def _gated_norm_module(self, fn: FnInfo, slot: Slot, call: ast.Call) -> str | None:
        """``if slot.use_non_eager_impl: self.<a> = slot(dim, eps=E, activation=A, ...) else: self.<a> =
        Eager(dim, eps=E)`` in an ``__init__`` (a gated RMSNorm module): the attr, recorded with E and A."""
        if slot.op != "rms_norm_gated":
            return None
        for node in ast.walk(fn.node):
            if not (isinstance(node, ast.If) and _guard_slot(node.test, self.plan.slots)):
                continue
            body, orelse = node.body, node.orelse
            if not (len(body) == 1 and len(orelse) == 1):
                continue
            fused, eager = body[0], orelse[0]
            if not (isinstance(fused, ast.Assign) and fused.value is call and isinstance(eager, ast.Assign)):
                continue
            t1, t2 = fused.targets[0], eager.targets[0]
            if not (
                isinstance(t1, ast.Attribute)
                and isinstance(t2, ast.Attribute)
                and t1.attr == t2.attr
                and isinstance(t1.value, ast.Name)
                and t1.value.id == "self"
            ):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            if "eps" not in keywords or "activation" not in keywords:
                return None
            eps = ast.get_source_segment(self.text, keywords["eps"])
            activation = ast.get_source_segment(self.text, keywords["activation"])
            if eps is None or activation is None:
                return None
            self.plan.module_attrs[(fn.owner or "", t1.attr)] = (slot.name, eps, activation)
            return t1.attr
        return None

    def _record_call(self, fn: FnInfo, owner: str, slot: Slot, call: ast.Call) -> None:
        plan = self.plan
        if (
            fn.node.name == "__init__" or (fn.target or "").endswith(".__init__")
        ) and self._gated_norm_module(fn, slot, call):
            plan.add_handle(owner, slot)
            return
        variant = None
        if slot.op == "rms_norm":
            weight = (
                call.args[1]
                if len(call.args) > 1
                else next((k.value for k in call.keywords if k.arg in ("weight", "w")), None)
            )
            if weight is not None and _is_offset_weight(weight) is not None:
                if slot.variant == "standard":
                    # Gemma: norm(x) * (1 + w) through a standard slot is the offset norm
                    variant = plan.names.offset_variant
                else:
                    plan.fail(f"`{fn.key}` passes `1 + weight` to the {slot.variant} slot `{slot.name}`")
            elif weight is not None and isinstance(weight, ast.Name) and slot.variant == "standard":
                plan.note(
                    f"`{fn.key}` passes the variable `{weight.id}` as the RMSNorm weight of `{slot.name}`; "
                    "kept as the standard variant"
                )
        if slot.op == "swiglu_mlp":
            if not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"):
                plan.fail(f"`{fn.key}` calls the SwiGLU slot without the module as first argument")
            elif not self._has_projections(owner):
                plan.fail(
                    f"`{owner}` has no gate_proj/up_proj/down_proj linears (checked in its __init__): "
                    "cannot spell the VeomniOp swiglu_mlp call"
                )
        if slot.op == "rms_norm":
            positional = [a for a in call.args if not isinstance(a, ast.Starred)]
            if len(positional) > 3 or any(isinstance(a, ast.Starred) for a in call.args):
                plan.fail(f"`{fn.key}` calls the RMSNorm slot `{slot.name}` with an unexpected argument list")
        if slot.op == "moe_experts" and self._moe_module_call(fn, owner, slot, call):
            plan.add_handle(owner, slot)
            return
        if (
            slot.op not in ("swiglu_mlp", "cross_entropy_loss")
            and call.args
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == "self"
        ):
            plan.fail(
                f"`{fn.key}` passes the module itself to `{slot.name}` ({slot.op}); the VeomniOp call contract for "
                f"{slot.op} with a module argument is not known: migrate that call by hand"
            )
        if slot.op == "cross_entropy_loss" and slot.variant not in CE_LOSS:
            plan.fail(f"cross_entropy_loss variant {slot.variant!r} has no loss helper")
        if fn.node.name == "__init__" or (fn.target or "").endswith(".__init__"):
            plan.fail(
                f"`{fn.key}` calls `{slot.name}` inside __init__ (the slot builds a module there); the VeomniOp "
                "handle is a per-tensor op: migrate the module's forward by hand"
            )
        plan.add_handle(owner, slot, variant)

    def _moe_module_call(self, fn: FnInfo, owner: str, slot: Slot, call: ast.Call) -> bool:
        """``slot(self, a, b, c)`` of a MoE kernel that read the module's tensors: the op's contract is known and
        the class builds every attribute it names."""
        plan = self.plan
        contract = MOE_MODULE_CONTRACTS.get(slot.variant)
        if contract is None or not plan.names.moe_resolver or call.keywords:
            return False
        params, positional, keywords = contract
        if not (
            len(call.args) == len(params) + 1
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == "self"
            and not any(isinstance(a, ast.Starred) for a in call.args)
        ):
            return False
        attrs = {p.split("self.", 1)[1] for p in positional if "self." in p} | set(keywords)
        if any(p.startswith("empty:") for p in positional) and not plan.names.empty_bias:
            return False
        if self._has_attrs(owner, {"limit"}) and "limit" not in keywords:
            plan.fail(
                f"`{owner}` has a `limit` (clamped SwiGLU): the moe_experts/{slot.variant} call contract known here "
                "has no place for it; migrate that call by hand"
            )
            return True
        if not self._has_attrs(owner, attrs):
            plan.fail(
                f"`{owner}` does not build {', '.join(sorted(attrs))} in its __init__: cannot spell the "
                f"moe_experts/{slot.variant} call"
            )
            return True
        plan.moe_fns.add(fn.key)
        return True

    def _has_attrs(self, owner: str, needed: set[str]) -> bool:
        init = self.plan.functions.get(f"{owner}.__init__")
        if init is None:
            local = self._local_class(owner)
            init = self.plan.functions.get(f"{local.name}.__init__") if local is not None else None
        if init is None:
            init_key = self._spec_init_key(owner)
            init = self.plan.functions.get(init_key) if init_key else None
        if init is None:
            return False
        attrs = {
            t.attr
            for t in ast.walk(init.node)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        }
        return needed <= attrs

    def _has_projections(self, owner: str) -> bool:
        needed = {"gate_proj", "up_proj", "down_proj"}
        init = self.plan.functions.get(f"{owner}.__init__")
        if init is None:
            init_key = self._spec_init_key(owner)
            init = self.plan.functions.get(init_key) if init_key else None
        if init is not None:
            attrs = {
                t.attr
                for t in ast.walk(init.node)
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            }
            return needed <= attrs
        if self.plan.spec and self.plan.source_module:
            from npu_lint.veomni import upstream

            attrs_up = upstream.self_attributes(self.plan.source_module, owner)
            return attrs_up is not None and needed <= attrs_up
        return False

    def _spec_init_key(self, cls: str) -> str | None:
        for fn in self.plan.functions.values():
            if fn.kind == "method" and fn.target == f"{cls}.__init__":
                return fn.key
        return None

    # -- free-function callers upstream ---------------------------------------------------------------
    def _upstream_callers(self) -> None:
        plan = self.plan
        if not plan.free:
            return
        if not plan.spec:
            return
        if not plan.source_module:
            plan.fail(
                "the spec names no source_module: cannot find the upstream callers of replaced functions"
            )
            return
        from npu_lint.veomni import upstream

        overridden = {fn.target for fn in plan.functions.values() if fn.kind == "method" and fn.target}
        replaced = {fn.upstream for fn in plan.functions.values() if fn.kind == "free" and fn.target}
        for name, free in plan.free.items():
            found = upstream.callers_of(plan.source_module, name)
            if found is None:
                plan.fail(f"cannot read upstream `{plan.source_module}` (transformers not installed?)")
                return
            methods, functions = found
            for func in functions:
                if func not in replaced:
                    plan.fail(
                        f"upstream function `{func}` calls `{name}`; it has no `self` for the handle "
                        "(it keeps the eager body)"
                    )
            for cls, meth in methods:
                target = f"{cls}.{meth}"
                if target in overridden:
                    continue
                src = upstream.method_source(plan.source_module, cls, meth)
                if src is None:
                    plan.fail(f"cannot read upstream `{target}`")
                    continue
                fname = self._fresh_name(f"{_snake(cls)}_{meth.strip('_')}_patched")
                text = _rename_def(src.text, meth, fname)
                self._signature_imports(text)
                op_name = (plan.target(free.slot) or (free.slot.op,))[0]
                desc = f"Call the {op_name} op through self.{free.slot.name}"
                deco = (
                    f'@{plan.config_name}.override_method(\n    "{target}",\n    description="{desc}",\n)\n'
                )
                plan.after.setdefault(free.key, []).append(deco + text)
                key = fname
                plan.functions[key] = FnInfo(key, ast.parse(text).body[0], cls, "method", target)  # type: ignore[arg-type]
                plan.owners[key] = {cls}
                plan.touched.add(key)
                plan.free_callers[name] = plan.free_callers.get(name, 0) + 1
                plan.add_handle(cls, free.slot)

    # -- attention through the tree's helper ------------------------------------------------------------
    def _attention_shape(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """``attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(...)`` (or the older
        ``= eager_attention_forward; if ...: = ALL_ATTENTION_FUNCTIONS[...]``) then exactly one
        ``attention_interface(self, ...)`` call, and no other use of the name."""
        assigned = 0
        calls = 0
        loads = 0
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == ATTENTION_VAR for t in targets):
                    source = ast.unparse(node.value) if node.value is not None else ""
                    if "ALL_ATTENTION_FUNCTIONS" not in source and "eager_attention_forward" not in source:
                        return False
                    assigned += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == ATTENTION_VAR
            ):
                if not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                    return False
                calls += 1
            elif isinstance(node, ast.Name) and node.id == ATTENTION_VAR and isinstance(node.ctx, ast.Load):
                loads += 1
        return assigned >= 1 and calls == 1 and loads == 1

    def _plan_attention(self) -> None:
        """Each attention class's forward calls the tree's attention handle, built in its ``__init__``."""
        plan = self.plan
        names = plan.names
        if not (plan.spec and names.attention_helper and names.attention_module and plan.source_module):
            return
        forwards: dict[str, FnInfo] = {}
        for fn in plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            meth = (fn.target or "").split(".")[-1] if fn.target else fn.node.name
            if meth == "forward" and any(
                isinstance(n, ast.Name) and n.id == ATTENTION_VAR for n in ast.walk(fn.node)
            ):
                forwards[fn.owner] = fn
        from npu_lint.veomni import upstream

        found = upstream.callers_of(plan.source_module, ATTENTION_VAR)
        replaced = {fn.owner for fn in plan.functions.values() if fn.kind == "method" and fn.target is None}
        # methods this spec registers with a function of another spec (``replacement=``): that function decides
        registered = set(_registered(self.tree, plan.config_name).values())
        for cls, meth in found[0] if found else []:
            if meth != "forward" or cls in forwards or cls in replaced or f"{cls}.forward" in registered:
                continue
            src = upstream.method_source(plan.source_module, cls, meth)
            if src is None:
                plan.note(
                    f"cannot read upstream `{cls}.forward`: its attention stays on ALL_ATTENTION_FUNCTIONS"
                )
                continue
            node = ast.parse(src.text).body[0]
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not self._attention_shape(
                node
            ):
                plan.note(
                    f"`{cls}.forward` picks its attention function in a shape the codemod does not rewrite: it "
                    f"stays on ALL_ATTENTION_FUNCTIONS (call `{names.attention_helper}()` there by hand)"
                )
                continue
            fname = self._fresh_name(f"{_snake(cls)}_forward_patched")
            text = _rename_def(src.text, meth, fname)
            self._signature_imports(text)
            desc = f"Call the attention op through self.{ATTENTION_ATTR}"
            deco = (
                f'@{plan.config_name}.override_method(\n    "{cls}.forward",\n    description="{desc}",\n)\n'
            )
            plan.tail.append(deco + text)
            info = FnInfo(fname, ast.parse(text).body[0], cls, "method", f"{cls}.forward")  # type: ignore[arg-type]
            plan.functions[fname] = info
            forwards[cls] = info
        for cls, fn in sorted(forwards.items()):
            if not self._attention_shape(fn.node):
                plan.note(
                    f"`{fn.key}` picks its attention function in a shape the codemod does not rewrite: it stays "
                    f"on ALL_ATTENTION_FUNCTIONS (call `{names.attention_helper}()` there by hand)"
                )
                continue
            attrs = {
                n.attr
                for f in plan.functions.values()
                if f.owner == cls
                for n in ast.walk(f.node)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            if ATTENTION_ATTR in attrs:
                plan.note(
                    f"`{cls}` already has an attribute `{ATTENTION_ATTR}`: its attention is left as it is"
                )
                continue
            plan.attention[fn.key] = cls
            plan.touched.add(fn.key)
            plan.owners.setdefault(fn.key, set()).add(cls)
            plan.handles.setdefault(cls, {})[ATTENTION_ATTR] = HandleSpec(
                cls, ATTENTION_ATTR, ATTENTION_OP, "standard", ATTENTION_FIELD
            )

    def _fresh_name(self, base: str) -> str:
        taken = {
            s.name
            for s in self.tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        taken |= self.plan.new_fn_names
        name, i = base, 2
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        self.plan.new_fn_names.add(name)
        return name

    def _bound_names(self) -> set[str]:
        names: set[str] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.add(stmt.target.id)
        return names

    def _signature_imports(self, fn_text: str) -> None:
        """Names evaluated when the spec defines a copied function (annotations, defaults) must be bound there."""
        plan = self.plan
        fn = ast.parse(fn_text).body[0]
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        evaluated: list[ast.AST] = [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]
        if fn.returns is not None:
            evaluated.append(fn.returns)
        for arg in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg):
            if arg is not None and arg.annotation is not None:
                evaluated.append(arg.annotation)
        names = {n.id for e in evaluated for n in ast.walk(e) if isinstance(n, ast.Name)}
        bound = self._bound_names() | _BUILTINS
        added = {line.split(" import ")[-1].split(" as ")[-1] for line in plan.extra_imports}
        from npu_lint.veomni import upstream

        for name in sorted(names - bound - added):
            line = upstream.resolve_name_import(plan.source_module or "", name)
            if line is None:
                plan.fail(
                    f"a copied upstream signature uses `{name}`, which the upstream module does not bind"
                )
            else:
                plan.extra_imports.append(line)

    # -- __init__ plans -------------------------------------------------------------------------------
    def _plan_inits(self) -> None:
        plan = self.plan
        for cls in sorted(plan.handles):
            if cls in plan.gpu_inits:
                missing = sorted(set(plan.handles[cls]) - plan.gpu_inits[cls])
                if missing:
                    plan.fail(
                        f"`{cls}.__init__` is the GPU spec's, which does not build {', '.join(missing)}: "
                        "cannot build those handles here"
                    )
                continue
            if plan.spec and not self._is_spec_class(cls):
                existing = self._spec_init_key(cls)
                if existing:
                    plan.init_keys[cls] = existing
                    continue
                self._plan_upstream_init(cls)
            else:
                local = self._local_class(cls)
                if local is None:
                    plan.fail(f"class `{cls}` is not defined in this module: cannot construct its handles")
                    continue
                if f"{local.name}.__init__" in plan.functions:
                    plan.init_keys[cls] = f"{local.name}.__init__"
                else:
                    plan.delegating_inits[local.name] = _delegating_init(
                        "__init__",
                        (("args", None, "vararg"), ("kwargs", None, "kwarg")),
                        plan.handles[cls],
                        plan.names,
                    )

    def _local_class(self, cls: str) -> ast.ClassDef | None:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                dec = _decorator_target(stmt, self.plan.config_name) if self.plan.spec else None
                target = dec[1] if dec and dec[0] == "replace_class" and dec[1] else stmt.name
                if target == cls:
                    return stmt
        return None

    def _is_spec_class(self, cls: str) -> bool:
        return self._local_class(cls) is not None

    def _plan_upstream_init(self, cls: str) -> None:
        plan = self.plan
        if not plan.source_module:
            plan.fail(f"the spec names no source_module: cannot read `{cls}.__init__` upstream")
            return
        from npu_lint.veomni import upstream

        init = upstream.class_init(plan.source_module, cls)
        if init is None:
            plan.fail(f"upstream `{plan.source_module}` has no class `{cls}` (or it cannot be read)")
            return
        fname = self._fresh_name(f"{_snake(cls)}_init_patched")
        handles = plan.handles[cls]
        if isinstance(init, upstream.MethodSource):
            text = _rename_def(init.text, "__init__", fname)
            self._signature_imports(text)
            text = _append_lines(text, [line for h in handles.values() for line in h.lines(plan.names)])
        else:
            text = _delegating_init(fname, init.params, handles, plan.names)
        desc = f"Construct the {plan.names.handle} handles of {cls} in __init__"
        deco = f'@{plan.config_name}.override_method(\n    "{cls}.__init__",\n    description="{desc}",\n)\n'
        anchor = next(
            (
                fn.key
                for fn in self._spec_order()
                if fn.kind == "method" and (fn.target or "").startswith(cls + ".")
            ),
            None,
        )
        if anchor is not None and anchor in {
            s.name for s in self.tree.body if isinstance(s, ast.FunctionDef)
        }:
            plan.before.setdefault(anchor, []).append(deco + text)
        elif anchor is not None:
            # the anchor is itself a new override (copied from upstream): put the __init__ just before it
            for texts in (*plan.after.values(), plan.tail):
                for i, t in enumerate(texts):
                    if f"def {anchor}(" in t:
                        texts.insert(i, deco + text)
                        break
                else:
                    continue
                break
            else:
                plan.tail.append(deco + text)
        else:
            plan.tail.append(deco + text)

    def _spec_order(self) -> list[FnInfo]:
        order = {
            s.name: i
            for i, s in enumerate(self.tree.body)
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        fns = list(self.plan.functions.values())
        return sorted(fns, key=lambda f: order.get(f.key, 10**9))


def _drop_comment_runs(lines: Sequence[Any], pattern: str) -> list[Any]:
    """Leading lines without the comment runs (consecutive comment lines) that mention ``pattern``."""
    runs: list[list[Any]] = []
    for line in lines:
        if line.comment is not None and runs and runs[-1] and runs[-1][-1].comment is not None:
            runs[-1].append(line)
        else:
            runs.append([line])
    out: list[Any] = []
    for run in runs:
        if any(line.comment is not None and re.search(pattern, line.comment.value) for line in run):
            continue
        out.extend(run)
    return out


def _rename_def(text: str, old: str, new: str) -> str:
    return re.sub(rf"\bdef {re.escape(old)}\(", f"def {new}(", text, count=1)


def _append_lines(fn_text: str, lines: list[str]) -> str:
    """``lines`` at the end of the function's body, or just before its last ``self.post_init()``."""
    fn = ast.parse(fn_text).body[0]
    body_line = fn.body[0].lineno if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else 2
    first = fn_text.splitlines()[body_line - 1]
    indent = first[: len(first) - len(first.lstrip())] or "    "
    text_lines = fn_text.rstrip("\n").split("\n")
    last = fn.body[-1] if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if (
        last is not None
        and last.lineno == last.end_lineno
        and POST_INIT.match(text_lines[last.lineno - 1])
        and last.col_offset == len(indent)
    ):
        at = last.lineno - 1
        return (
            "\n".join(text_lines[:at])
            + "\n"
            + _indent_lines(lines, indent)
            + "\n".join(text_lines[at:])
            + "\n"
        )
    return fn_text.rstrip("\n") + "\n" + _indent_lines(lines, indent)


def _indent_lines(lines: Sequence[str], indent: str) -> str:
    parts = [part for line in lines for part in line.rstrip("\n").split("\n")]
    return "".join(f"{indent}{part}\n" if part.strip() else "\n" for part in parts)


def _delegating_init(
    name: str, params: Sequence[tuple[str, str | None, str]], handles: dict[str, HandleSpec], names: Names
) -> str:
    sig = ["self"]
    call: list[str] = []
    star = False
    for pname, default, kind in params:
        if kind == "positional":
            sig.append(f"{pname}={default}" if default is not None else pname)
            call.append(pname)
        elif kind == "vararg":
            sig.append(f"*{pname}")
            call.append(f"*{pname}")
            star = True
        elif kind == "kwonly":
            if not star:
                sig.append("*")
                star = True
            sig.append(f"{pname}={default}" if default is not None else pname)
            call.append(f"{pname}={pname}")
        elif kind == "kwarg":
            sig.append(f"**{pname}")
            call.append(f"**{pname}")
    lines = [f"def {name}({', '.join(sig)}):", f"    super().__init__({', '.join(call)})"]
    return (
        "\n".join(lines)
        + "\n"
        + _indent_lines([line for h in handles.values() for line in h.lines(names)], "    ")
    )


# ----------------------------------------------------------------------------------------------------
# rewriting (libcst)
# ----------------------------------------------------------------------------------------------------
def _cst() -> Any:
    import libcst

    return libcst


class _Rewriter:
    """Builds the libcst transformers lazily (libcst is imported only when a fix is built)."""

    def __init__(self, plan: Plan, text: str) -> None:
        self.plan = plan
        self.text = text
        self.cst = _cst()
        self.templates: dict[str, tuple[Any, Any]] = {}  # free fn name -> (cst Call template, cst Parameters)

    # -- small helpers ------------------------------------------------------------------------------
    def stmts(self, code: str) -> list[Any]:
        return list(self.cst.parse_module(code).body)

    def block_stmts(self, lines: Sequence[str]) -> list[Any]:
        """Statements parsed inside a function body, so continuation lines keep a relative indentation."""
        fn = self.cst.parse_module("def _npu_lint_block():\n" + _indent_lines(lines, "    ")).body[0]
        return list(fn.body.body)

    def expr(self, code: str) -> Any:
        return self.cst.parse_expression(code)

    def is_slot_guard(self, test: Any) -> tuple[Slot, bool] | None:
        cst = self.cst
        negated = False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if (
            isinstance(test, cst.Attribute)
            and test.attr.value == GUARD_ATTR
            and isinstance(test.value, cst.Name)
            and test.value.value in self.plan.slots
        ):
            return self.plan.slots[test.value.value], negated
        return None

    # -- the function-level transformer ---------------------------------------------------------------
    def rewrite_function(
        self, fn: Any, key: str, owner_handles: dict[str, HandleSpec] | None, free: bool
    ) -> Any:
        rewriter = self
        cst = self.cst
        info = self.plan.functions.get(key)
        in_init = info is not None and (
            info.node.name == "__init__" or (info.target or "").endswith(".__init__")
        )

        class Transformer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
            def leave_IndentedBlock(self, original: Any, updated: Any) -> Any:
                return updated.with_changes(
                    body=rewriter.rewrite_block(list(updated.body), key, free, in_init)
                )

            def leave_Call(self, original: Any, updated: Any) -> Any:
                if free:
                    return updated
                module_call = rewriter.module_call(updated, key)
                if module_call is not None:
                    return module_call
                kernel_call = rewriter.kernel_call(updated, key)
                if kernel_call is not None:
                    return kernel_call
                return rewriter.rewrite_call(updated, key, owner_handles or {})

            def leave_Subscript(self, original: Any, updated: Any) -> Any:
                # `self.<kernel>(...)[0]` where the op returns the first item itself
                if free or not isinstance(original.value, cst.Call):
                    return updated
                slot_name = rewriter.kernel_attr(original.value.func, key)
                if slot_name is None:
                    return updated
                op = rewriter.plan.slots[slot_name].op
                index = updated.slice[0].slice if len(updated.slice) == 1 else None
                if (
                    KERNEL_CONTRACTS[op][2]
                    and isinstance(index, cst.Index)
                    and isinstance(index.value, cst.Integer)
                    and index.value.value == "0"
                ):
                    return updated.value
                return updated

            def leave_Attribute(self, original: Any, updated: Any) -> Any:
                value = updated.value
                if (
                    not free
                    and updated.attr.value == "value"
                    and isinstance(value, cst.Name)
                    and value.value in rewriter.plan.slots
                    and rewriter.plan.slots[value.value].op == CONFIG_SLOT
                ):
                    return rewriter.expr(f"self.{value.value}")
                return updated

        new = fn.visit(Transformer())
        if key in self.plan.moe_fns and not free:
            new = self._drop_dead_locals(new)
        return new

    def _drop_dead_locals(self, fn: Any) -> Any:
        """``name = <call>`` at the top of a body whose name nothing reads any more (the eager MoE loop's
        accumulator, once the handle call replaced the loop)."""
        cst = self.cst
        body = list(fn.body.body)
        kept = []
        for i, stmt in enumerate(body):
            if (
                isinstance(stmt, cst.SimpleStatementLine)
                and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)
                and len(stmt.body[0].targets) == 1
                and isinstance(stmt.body[0].targets[0].target, cst.Name)
                and isinstance(stmt.body[0].value, cst.Call)
            ):
                name = stmt.body[0].targets[0].target.value
                rest = "\n".join(self.module_code(s) for s in body[i + 1 :])
                if not re.search(rf"\b{re.escape(name)}\b", rest):
                    continue
            kept.append(stmt)
        if len(kept) == len(body) or not kept:
            return fn
        first = kept[0]
        kept[0] = first.with_changes(
            leading_lines=[ln for ln in first.leading_lines if ln.comment is not None]
        )
        return fn.with_changes(body=fn.body.with_changes(body=kept))

    def _owners(self, key: str) -> set[str]:
        return self.plan.owners.get(key) or set()

    def kernel_attr(self, node: Any, key: str) -> str | None:
        """``self.<attr>`` that aliased a slot's bound kernel in this function's class: the slot name."""
        cst = self.cst
        if (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
        ):
            for owner in self._owners(key):
                slot = self.plan.kernel_attrs.get((owner, node.attr.value))
                if slot is not None:
                    return slot
        return None

    def _kernel_test(self, test: Any, key: str) -> str | None:
        """``self.<kernel attr> is [not] <x>``: "is-not-none" / "is-none" / "is-fallback" (None: another test)."""
        cst = self.cst
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            return None
        if self.kernel_attr(test.left, key) is None:
            return None
        target = test.comparisons[0]
        right = target.comparator
        if isinstance(target.operator, cst.IsNot) and isinstance(right, cst.Name) and right.value == "None":
            return "is-not-none"
        if isinstance(target.operator, cst.Is) and isinstance(right, cst.Name):
            return "is-none" if right.value == "None" else "is-fallback"
        return None

    def _kernel_alias_stmt(self, stmt: Any, key: str) -> bool:
        cst = self.cst
        if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)):
            return False
        assign = stmt.body[0]
        return len(assign.targets) == 1 and self.kernel_attr(assign.targets[0].target, key) is not None

    def _attention_pick(self, stmt: Any, key: str) -> bool:
        """``attention_interface[: Callable] = ...`` or ``if ...: attention_interface = ...`` in an attention
        forward whose attention goes through the class's handle."""
        cst = self.cst
        if key not in self.plan.attention:
            return False
        if isinstance(stmt, cst.If) and stmt.orelse is None:
            return all(self._attention_pick(s, key) for s in stmt.body.body)
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return False
        small = stmt.body[0]
        if isinstance(small, cst.AnnAssign):
            target = small.target
        elif isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
        else:
            return False
        return isinstance(target, cst.Name) and target.value == ATTENTION_VAR

    def rewrite_block(self, body: list[Any], key: str, free: bool, in_init: bool = False) -> list[Any]:
        cst = self.cst
        out: list[Any] = []
        for i, stmt in enumerate(body):
            if not free and self._attention_pick(stmt, key):
                continue  # the class's attention handle replaces the pick
            if not free and self._kernel_alias_stmt(stmt, key):
                continue  # `self.<attr> = slot.bound_kernel()`: the handle replaces it
            kernel_test = self._kernel_test(stmt.test, key) if isinstance(stmt, cst.If) and not free else None
            if kernel_test is not None:
                # a handle is always callable (its eager row is the fallback): keep the kernel path only
                orelse = stmt.orelse
                else_body = list(orelse.body.body) if isinstance(orelse, cst.Else) else []
                kept = list(stmt.body.body) if kernel_test == "is-not-none" else else_body
                if kept:
                    out.extend(self._carry_comments(stmt, kept))
                    continue
            guard = self.is_slot_guard(stmt.test) if isinstance(stmt, cst.If) else None
            if guard is None:
                out.append(stmt)
                continue
            slot, negated = guard
            fused: list[Any] | None
            eager: list[Any] | None
            fused = list(stmt.body.body) if not negated else None
            orelse = stmt.orelse
            else_body = list(orelse.body.body) if isinstance(orelse, cst.Else) else None
            if negated:
                fused, eager = else_body, list(stmt.body.body)
            else:
                eager = else_body if orelse is not None else None
                if isinstance(orelse, cst.If):
                    eager = [orelse]
            if free:
                # the free function keeps its eager body; its op call moved to the callers
                if eager is not None:
                    out.extend(self._carry_comments(stmt, eager))
                    continue
                rest = body[i + 1 :]
                if rest:
                    rest = self._carry_comments(stmt, rest)
                    out.extend(rest)
                    return out
                continue
            if (
                in_init
                and eager is not None
                and any(s == slot.name for s, _, _ in self.plan.module_attrs.values())
            ):
                # a gated-norm module: the eager module stays (its weight feeds the handle)
                out.extend(self._carry_comments(stmt, eager))
                continue
            if in_init and eager is not None:
                # the slot built a module in __init__: keep the eager module, flag the manual step
                note = self.cst.EmptyLine(
                    comment=self.cst.Comment(
                        f"# npu-lint: manual step: `{slot.name}` built a module here; "
                        "call its VeomniOp handle in that module's forward"
                    )
                )
                eager = self._carry_comments(stmt, eager)
                eager[0] = eager[0].with_changes(leading_lines=[*eager[0].leading_lines, note])
                out.extend(eager)
                continue
            if fused is None:
                self.plan.fail(
                    f"`{key}`: `if not {slot.name}.{GUARD_ATTR}` without else: cannot find the op path"
                )
                out.append(stmt)
                continue
            if (
                eager is not None
                and not negated
                and fused
                and isinstance(fused[0], cst.If)
                and fused[0].orelse is None
                and len(fused[0].body.body) == 1
                and isinstance(fused[0].body.body[0], cst.SimpleStatementLine)
                and isinstance(fused[0].body.body[0].body[0], cst.Raise)
            ):
                # the fused path refused case C: C takes the eager path (with the handle-bound loss function,
                # given logits only), every other case the fused path
                case = fused[0]
                eager_body = [s.visit(_LogitsOnlyLoss(cst)) for s in eager]
                new_if = case.with_changes(
                    body=case.body.with_changes(body=eager_body),
                    orelse=cst.Else(body=cst.IndentedBlock(body=fused[1:])),
                    leading_lines=case.leading_lines,
                )
                out.extend(self._carry_comments(stmt, [new_if]))
                continue
            out.extend(self._carry_comments(stmt, fused))
            if orelse is None and fused and self._terminates(fused[-1]):
                # everything after `if slot...: return slot(...)` is the eager fallback: it goes
                return out
        return out

    def _terminates(self, stmt: Any) -> bool:
        cst = self.cst
        return isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[-1], (cst.Return, cst.Raise)
        )

    def _carry_comments(self, guard: Any, stmts: list[Any]) -> list[Any]:
        """The guard's leading comments (minus the ones about OpSlot) go to the first new statement."""
        if not stmts:
            return stmts
        kept = _drop_comment_runs(guard.leading_lines, r"OpSlot|use_non_eager_impl|Original HF code")
        first = stmts[0]
        own = _drop_comment_runs(first.leading_lines, r"OpSlot|use_non_eager_impl|Original HF code below")
        while own and own[0].comment is None and (not kept or kept[-1].comment is None):
            own = own[1:]
        return [first.with_changes(leading_lines=[*kept, *own]), *stmts[1:]]

    def module_call(self, call: Any, key: str) -> Any | None:
        """``self.<gated norm>(x, z)`` -> ``self.<handle>(x, z, self.<gated norm>.weight, eps=E, activation=A)``."""
        cst = self.cst
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            return None
        for owner in self._owners(key):
            found = self.plan.module_attrs.get((owner, func.attr.value))
            if found is None:
                continue
            slot_name, eps, activation = found
            if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args):
                self.plan.fail(f"`{key}` calls `self.{func.attr.value}` with other than (x, gate)")
                return None
            x, z = (a.value for a in call.args)
            args = ", ".join(
                [
                    self.module_code(x),
                    self.module_code(z),
                    f"self.{func.attr.value}.weight",
                    f"eps={eps}",
                    f"activation={activation}",
                ]
            )
            built = self.expr(f"self.{slot_name}({args})")
            return self._multiline(built, list(built.args))
        return None

    def module_code(self, node: Any) -> str:
        return self.cst.Module(body=[]).code_for_node(node)

    def kernel_call(self, call: Any, key: str) -> Any | None:
        """``self.<kernel attr>(...)`` -> the handle with the op's call contract: the contract's keywords passed
        positionally (in order; a missing one is None), the other keywords kept."""
        slot_name = self.kernel_attr(call.func, key)
        if slot_name is None:
            return None
        op = self.plan.slots[slot_name].op
        names, _, _ = KERNEL_CONTRACTS[op]
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) > len(names):
            self.plan.fail(f"`{key}`: the `{op}` kernel call has arguments its handle contract cannot bind")
            return None
        bound: dict[str, str] = {
            n: self.module_code(a.value) for n, a in zip(names, positional, strict=False)
        }
        rest: list[str] = []
        for a in call.args:
            if a.keyword is None:
                continue
            name = a.keyword.value
            if name in names:
                bound[name] = self.module_code(a.value)
            else:
                rest.append(f"{name}={self.module_code(a.value)}")
        last = max((i for i, n in enumerate(names) if n in bound), default=-1)
        args = [bound.get(n, "None") for n in names[: last + 1]] + rest
        built = self.expr(f"self.{slot_name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def rewrite_call(self, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        cst = self.cst
        func = call.func
        if isinstance(func, cst.Name) and func.value == ATTENTION_VAR and key in self.plan.attention:
            return call.with_changes(func=self.expr(f"self.{ATTENTION_ATTR}"))
        if isinstance(func, cst.Name) and (key, func.value) in self.plan.moe_calls:
            return self.moe_keyword_call(call, self.plan.slots[self.plan.moe_calls[(key, func.value)]])
        if isinstance(func, cst.Name) and func.value in self.plan.slots:
            return self.translate(self.plan.slots[func.value], call, key, handles)
        if isinstance(func, cst.Name) and func.value in self.plan.free and func.value in self.templates:
            return self.inline(func.value, call, key, handles)
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "bound_kernel"
            and isinstance(func.value, cst.Name)
            and func.value.value in self.plan.slots
        ):
            return self.expr(f"self.{func.value.value}")
        return call

    def moe_keyword_call(self, call: Any, slot: Slot) -> Any:
        """``fused(hidden_states=h, ..., fc1_1_weight=None, ...)`` -> ``self.<slot>(h, ..., empty_bias(w), ...)``."""
        positional, keywords = MOE_CONTRACTS[slot.variant]
        given = {a.keyword.value: self.module_code(a.value) for a in call.args}
        weight = next((v for k, v in given.items() if k.endswith("_weight") and v != "None"), "hidden_states")
        last = max(i for i, n in enumerate(positional) if n in given)
        args = []
        for name in positional[: last + 1]:
            value = given.get(name, "None")
            if value == "None":
                value = f"{self.plan.names.empty_bias}({weight})"
                self.plan.empty_bias_used = True
            args.append(value)
        args += [f"{k}={given[k]}" for k in keywords if k in given]
        built = self.expr(f"self.{slot.name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def moe_module_call(self, call: Any, slot: Slot) -> Any:
        """``slot(self, a, b, c)`` -> ``self.<slot>(<the op's arguments>, <keywords>=self.<attr>)``."""
        params, positional, keywords = MOE_MODULE_CONTRACTS[slot.variant]
        bound = {p: self.module_code(a.value) for p, a in zip(params, call.args[1:], strict=True)}
        args = []
        for p in positional:
            if p.startswith("empty:"):
                args.append(f"{self.plan.names.empty_bias}({p[len('empty:') :]})")
                self.plan.empty_bias_used = True
            else:
                args.append(bound.get(p, p))
        args += [f"{k}=self.{k}" for k in keywords]
        built = self.expr(f"self.{slot.name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def translate(self, slot: Slot, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        """``slot(args)`` -> the VeomniOp call of the owner's handle, per the call contract."""
        cst = self.cst
        handle = handles.get(slot.name)
        args = list(call.args)
        positional = [a for a in args if a.keyword is None and not a.star]
        if slot.op == "cross_entropy_loss":
            return call.with_changes(func=self.expr("self.loss_function"))
        if slot.op == "load_balancing_loss" and handle is not None and handle.loss:
            return call.with_changes(func=self.expr(f"self.{handle.loss_attr}"))
        if slot.op == "moe_experts" and slot.variant in MOE_MODULE_CONTRACTS and key in self.plan.moe_fns:
            return self.moe_module_call(call, slot)
        new_func = self.expr(f"self.{slot.name}")
        if slot.op == "rms_norm":
            if len(positional) >= 2:
                weight = positional[1]
                stripped = self._strip_offset(weight.value)
                if (
                    stripped is not None
                    and handle is not None
                    and handle.variant == self.plan.names.offset_variant
                ):
                    args[args.index(weight)] = weight.with_changes(value=stripped)
            eps_index = 1 if (slot.variant == "unweighted" and len(positional) == 2) else 2
            if len(positional) == eps_index + 1:
                eps = positional[eps_index]
                args[args.index(eps)] = eps.with_changes(
                    keyword=cst.Name("eps"),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                    ),
                )
            return call.with_changes(func=new_func, args=self._fix_commas(args))
        if slot.op == "swiglu_mlp":
            rest = [a for a in args[1:]]
            if not rest:
                return call.with_changes(func=new_func)
            x = rest[0].value
            parts = [x]
            for proj in ("gate_proj", "up_proj", "down_proj"):
                parts += [
                    self.expr(f"self.{proj}.weight"),
                    self.expr(f"{self.plan.names.linear_bias}(self.{proj})"),
                ]
            return self._multiline(call.with_changes(func=new_func), [cst.Arg(p) for p in parts])
        return call.with_changes(func=new_func)

    def _multiline(self, call: Any, args: list[Any]) -> Any:
        """One argument per line, closing parenthesis on its own line (ruff-format's shape)."""
        cst = self.cst

        def ws(extra: str) -> Any:
            return cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(),
                empty_lines=[],
                indent=True,
                last_line=cst.SimpleWhitespace(extra),
            )

        new = [
            a.with_changes(comma=cst.Comma(whitespace_after=ws("    " if i < len(args) - 1 else "")))
            for i, a in enumerate(args)
        ]
        return call.with_changes(args=new, whitespace_before_args=ws("    "))

    def _fix_commas(self, args: list[Any]) -> list[Any]:
        cst = self.cst
        out = []
        for i, a in enumerate(args):
            if i < len(args) - 1 and a.comma is cst.MaybeSentinel.DEFAULT:
                a = a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            out.append(a)
        return out

    def _strip_offset(self, node: Any) -> Any | None:
        cst = self.cst
        while isinstance(node, cst.BaseExpression) and node.lpar and isinstance(node, cst.BinaryOperation):
            node = node.with_changes(lpar=[], rpar=[])
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for const, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(const, (cst.Integer, cst.Float)) and const.evaluated_value in (1, 1.0):
                    return other.with_changes(lpar=[], rpar=[]) if hasattr(other, "lpar") else other
        return None

    def prepare_templates(self, module: Any) -> None:
        """The ``return slot(...)`` call at the top of each replaced free function, with its parameters."""
        cst = self.cst
        for stmt in module.body:
            if not isinstance(stmt, cst.FunctionDef):
                continue
            for name, free in self.plan.free.items():
                if free.key != stmt.name.value:
                    continue
                for inner in stmt.body.body:
                    if isinstance(inner, cst.If) and self.is_slot_guard(inner.test):
                        ret = inner.body.body[0].body[0]
                        self.templates[name] = (ret.value, stmt.params)
                        break

    def inline(self, name: str, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        cst = self.cst
        template, params = self.templates[name]
        binding: dict[str, Any] = {}
        names = [p.name.value for p in (*params.posonly_params, *params.params)]
        pos = [a for a in call.args if a.keyword is None]
        if len(pos) > len(names) or any(a.star for a in call.args):
            self.plan.fail(f"`{key}`: `{name}(...)` is called with arguments its signature cannot bind")
        for pname, arg in zip(names, pos, strict=False):
            binding[pname] = arg.value
        for a in call.args:
            if a.keyword is not None:
                binding[a.keyword.value] = a.value
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            if p.name.value not in binding and p.default is not None:
                binding[p.name.value] = p.default
        missing = []

        class Subst(cst.CSTTransformer):  # type: ignore[misc, name-defined]
            def leave_Name(self, original: Any, updated: Any) -> Any:
                if updated.value in binding:
                    return binding[updated.value]
                if updated.value in names:
                    missing.append(updated.value)
                return updated

            def leave_Arg(self, original: Any, updated: Any) -> Any:
                return updated  # keyword names are Names too but stay (handled in leave_Name below)

        new_args = []
        for arg in template.args:
            value = arg.value.visit(Subst())
            new_args.append(arg.with_changes(value=value))
        if missing:
            self.plan.fail(f"`{key}`: `{name}(...)` does not bind {sorted(set(missing))}")
        inlined = template.with_changes(args=new_args)
        slot = self.plan.free[name].slot
        result = self.translate(slot, inlined, key, handles)
        return result.with_changes(lpar=call.lpar, rpar=call.rpar)


# ----------------------------------------------------------------------------------------------------
# module-level transformation
# ----------------------------------------------------------------------------------------------------
def _needed_imports(plan: Plan) -> list[tuple[str, str]]:
    handles = [h for per in plan.handles.values() for h in per.values()]
    if not handles:
        return []
    names = plan.names
    need: list[tuple[str, str]] = []
    if any(not h.is_config and h.op != ATTENTION_OP for h in handles):
        need.append((names.handle_module, names.handle))
    # the resolver builds every handle but attention (its helper) and MoE experts (their own resolver)
    own_builder = {ATTENTION_OP, "moe_experts"} if names.moe_resolver else {ATTENTION_OP}
    if any(h.op not in own_builder for h in handles):
        need.append((names.resolver_module, names.resolver))
    if any(h.op == "swiglu_mlp" for h in handles):
        need.append((names.bias_module, names.linear_bias))
    if any(h.op == ATTENTION_OP for h in handles) and names.attention_helper and names.attention_module:
        need.append((names.attention_module, names.attention_helper))
    if any(h.op == "moe_experts" for h in handles) and names.moe_resolver:
        need.append((names.resolver_module, names.moe_resolver))
    if plan.empty_bias_used and names.empty_bias:
        need.append((names.bias_module, names.empty_bias))
    losses = sorted({h.loss for h in handles if h.loss})
    if losses:
        need.append(("functools", "partial"))
        need += [(names.loss_module, loss) for loss in losses]
    return need


def _apply(plan: Plan, text: str) -> str:
    rw = _Rewriter(plan, text)
    cst = rw.cst
    module = cst.parse_module(text)
    rw.prepare_templates(module)
    slots = plan.slots

    def process_fn(stmt: Any, key: str) -> Any:
        info = plan.functions.get(key)
        if info is None or key not in plan.touched:
            return stmt
        if info.kind == "free":
            if key in {f.key for f in plan.free.values()}:
                return rw.rewrite_function(stmt, key, None, free=True)
            return stmt
        owners = plan.owners.get(key) or set()
        handles: dict[str, HandleSpec] = {}
        for owner in sorted(owners):
            for attr, h in plan.handles.get(owner, {}).items():
                handles.setdefault(attr, h)
        new = rw.rewrite_function(stmt, key, handles, free=False)
        return new

    def extend_init(stmt: Any, cls: str) -> Any:
        lines = [line for h in plan.handles[cls].values() for line in h.lines(plan.names)]
        new_stmts = rw.block_stmts(lines)
        body = list(stmt.body.body)
        attrs = [f"self.{h.attr}" for h in plan.handles[cls].values()]
        index = len(body)
        for i, s in enumerate(body):
            code = module.code_for_node(s)
            if any(re.search(rf"{re.escape(a)}\b(?!\s*=[^=])", code) for a in attrs) or any(
                POST_INIT.match(line) for line in code.strip().splitlines()[-1:]
            ):
                index = i
                break
        body[index:index] = new_stmts
        return stmt.with_changes(body=stmt.body.with_changes(body=body))

    init_by_key = {key: cls for cls, key in plan.init_keys.items()}

    def new_defs(texts: list[str]) -> list[Any]:
        out = []
        for t in texts:
            for s in rw.stmts(t):
                if isinstance(s, cst.FunctionDef):
                    key = s.name.value
                    s = process_fn(s, key)
                    s = s.with_changes(
                        leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
                    )
                out.append(s)
        return out

    new_body: list[Any] = []
    pending_blank = 0
    import_anchor: tuple[int, list[Any]] | None = None

    def drop(stmt: Any) -> None:
        nonlocal pending_blank
        blanks = 0
        for line in stmt.leading_lines:
            if line.comment is not None:
                break
            blanks += 1
        pending_blank = max(pending_blank, blanks)

    def emit(stmt: Any) -> None:
        nonlocal pending_blank
        if pending_blank and new_body and hasattr(stmt, "leading_lines"):
            lead = list(stmt.leading_lines)
            if not lead or lead[0].comment is not None:
                stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * pending_blank + lead)
        pending_blank = 0
        new_body.append(stmt)

    for stmt in module.body:
        # declarations -----------------------------------------------------------------------------
        if isinstance(stmt, cst.SimpleStatementLine):
            small = stmt.body[0]
            if isinstance(small, cst.ImportFrom) and _cst_dotted(cst, small.module) == "veomni.ops.dispatch":
                if isinstance(small.names, Sequence):
                    names = [a for a in small.names if a.name.value not in SLOT_CLASSES]
                    if names:
                        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                        emit(stmt.with_changes(body=[small.with_changes(names=names)]))
                    else:
                        if import_anchor is None:
                            import_anchor = (len(new_body), list(stmt.leading_lines))
                        drop(stmt)
                else:
                    emit(stmt)
                continue
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name) and target.value in slots:
                    value = small.value
                    if (
                        isinstance(value, cst.Call)
                        and _cst_dotted(cst, value.func)
                        in ("OpSlot", "dispatch.OpSlot", "OpsConfigSlot", "dispatch.OpsConfigSlot")
                    ) or (isinstance(value, cst.Name) and value.value == "None"):
                        drop(stmt)
                        continue
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                fname = _cst_dotted(cst, small.value.func)
                if fname == f"{plan.config_name}.add_post_import_block":
                    replaced = _rewrite_block_call(cst, stmt, small.value, plan)
                    if replaced is not None:
                        emit(replaced)
                    else:
                        drop(stmt)
                    continue
            emit(_rename_descriptions(cst, stmt, plan.names.handle))
            continue
        if isinstance(stmt, cst.FunctionDef):
            key = stmt.name.value
            if key in plan.before:
                for d in new_defs(plan.before[key]):
                    emit(d)
            new = process_fn(stmt, key)
            if key in init_by_key:
                new = extend_init(new, init_by_key[key])
            if new is not stmt:
                new = new.with_changes(
                    decorators=[_rename_descriptions(cst, d, plan.names.handle) for d in new.decorators]
                )
            emit(new)
            if key in plan.after:
                for d in new_defs(plan.after[key]):
                    emit(d)
            continue
        if isinstance(stmt, cst.ClassDef):
            emit(_process_class(cst, rw, stmt, plan, process_fn, extend_init, init_by_key))
            continue
        emit(stmt)
    if plan.tail:
        new_body.extend(new_defs(plan.tail))
    module = module.with_changes(body=new_body)
    module = _add_imports(cst, module, plan, _needed_imports(plan), import_anchor, text)
    code = module.code
    replaced = sorted({callee for _, callee in plan.moe_calls})
    return _drop_unused_imports(code, replaced, plan.config_name) if replaced else code


def _drop_unused_imports(code: str, names: Sequence[str], config_name: str) -> str:
    """``names`` no code reads any more leave the file's imports and its ``config.add_import(names=[...])``."""
    cst = _cst()
    tree = ast.parse(code)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    dead = {n for n in names if n not in read}
    if not dead:
        return code
    module = cst.parse_module(code)
    body = []
    for stmt in module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.ImportFrom) and isinstance(small.names, Sequence):
            kept = [a for a in small.names if not (isinstance(a.name, cst.Name) and a.name.value in dead)]
            if len(kept) != len(small.names):
                if not kept:
                    continue
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                stmt = stmt.with_changes(body=[small.with_changes(names=kept)])
        elif (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and _cst_dotted(cst, small.value.func) == f"{config_name}.add_import"
        ):
            call = small.value
            names_arg = next((a for a in call.args if a.keyword and a.keyword.value == "names"), None)
            if names_arg is not None and isinstance(names_arg.value, cst.List):
                elements = names_arg.value.elements
                kept_el = [
                    e
                    for e in elements
                    if not (isinstance(e.value, cst.SimpleString) and e.value.evaluated_value in dead)
                ]
                if len(kept_el) != len(elements):
                    if not kept_el:
                        continue
                    kept_el[-1] = kept_el[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    new_list = names_arg.value.with_changes(elements=kept_el)
                    args = [a.with_changes(value=new_list) if a is names_arg else a for a in call.args]
                    stmt = stmt.with_changes(body=[small.with_changes(value=call.with_changes(args=args))])
        body.append(stmt)
    return module.with_changes(body=body).code


def _process_class(
    cst: Any,
    rw: _Rewriter,
    cls: Any,
    plan: Plan,
    process_fn: Any,
    extend_init: Any,
    init_by_key: dict[str, str],
) -> Any:
    if not isinstance(cls.body, cst.IndentedBlock):
        return cls
    body = []
    changed = False
    delegating = plan.delegating_inits.get(cls.name.value)
    for item in cls.body.body:
        if delegating and isinstance(item, cst.FunctionDef):
            init = rw.block_stmts([delegating])[0].with_changes(leading_lines=item.leading_lines)
            body.append(init)
            lead = list(item.leading_lines)
            while lead and lead[0].comment is None:
                lead = lead[1:]
            item = item.with_changes(leading_lines=[cst.EmptyLine(indent=False), *lead])
            delegating = None
            changed = True
        if isinstance(item, cst.FunctionDef):
            key = f"{cls.name.value}.{item.name.value}"
            new = process_fn(item, key)
            if key in init_by_key:
                new = extend_init(new, init_by_key[key])
            changed |= new is not item
            body.append(new)
        else:
            body.append(item)
    if delegating:
        body.append(rw.block_stmts([delegating])[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
        changed = True
    if not changed:
        return cls
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _cst_dotted(cst: Any, node: Any) -> str | None:
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _rename_descriptions(cst: Any, node: Any, handle: str) -> Any:
    """``description="OpSlot guard for ..."`` -> ``"<handle> dispatch for ..."`` (strings in patch calls)."""

    class Renamer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        def leave_Arg(self, original: Any, updated: Any) -> Any:
            if (
                updated.keyword is not None
                and updated.keyword.value == "description"
                and isinstance(updated.value, cst.SimpleString)
                and "OpSlot" in updated.value.value
            ):
                value = updated.value.value.replace("OpSlot guard", f"{handle} dispatch")
                value = value.replace("OpSlot-based", f"{handle}-based").replace("OpSlot", handle)
                return updated.with_changes(value=updated.value.with_changes(value=value))
            return updated

    return node.visit(Renamer())


def _rewrite_block_call(cst: Any, stmt: Any, call: Any, plan: Plan) -> Any | None:
    """Drop the OpSlot import and slot assignments from a post-import block; None when nothing is left."""
    if not call.args or not isinstance(call.args[0].value, cst.SimpleString):
        if re.search(r"\bOps?(Config)?Slot\b", cst.Module(body=[]).code_for_node(call)):
            plan.fail(
                "a post-import block with OpSlot declarations is not a plain string literal: edit it by hand"
            )
        return stmt
    literal = call.args[0].value
    value = literal.evaluated_value
    if not isinstance(value, str) or ("OpSlot" not in value and "OpsConfigSlot" not in value):
        return stmt
    raw = literal.raw_value
    if raw.count("\n") != value.count("\n"):
        plan.fail("a post-import block with OpSlot declarations uses escaped newlines: edit it by hand")
        return stmt
    tree = ast.parse(textwrap.dedent(value))
    drop: set[int] = set()
    partial_imports: dict[int, list[ast.alias]] = {}
    for node in tree.body:
        is_import = isinstance(node, ast.ImportFrom) and node.module == "veomni.ops.dispatch"
        is_slot = (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in plan.slots
            and _opslot_call(node.value) is not None
        )
        if is_import and any(a.name not in SLOT_CLASSES for a in node.names):
            if node.lineno == node.end_lineno:
                partial_imports[node.lineno] = [a for a in node.names if a.name not in SLOT_CLASSES]
            else:
                plan.fail("the post-import block imports more than OpSlot from veomni.ops.dispatch")
            continue
        if is_import or is_slot:
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = raw.splitlines(keepends=True)
    for lineno, names in partial_imports.items():
        line = lines[lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        spelled = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in names)
        lines[lineno - 1] = f"{indent}from veomni.ops.dispatch import {spelled}\n"
    # comment lines right above a dropped statement describe it: they go too
    for lineno in sorted(drop):
        j = lineno - 1
        while j >= 1 and j not in drop and lines[j - 1].strip().startswith("#"):
            drop.add(j)
            j -= 1
    kept = [line for i, line in enumerate(lines, start=1) if i not in drop]
    remaining = "".join(kept)
    try:
        left = ast.parse(textwrap.dedent(remaining))
    except SyntaxError:
        plan.fail("the post-import block would not parse after removing the OpSlot declarations")
        return stmt
    if not left.body:
        return None
    new_literal = literal.with_changes(value=f"{literal.prefix}{literal.quote}{remaining}{literal.quote}")
    new_args = [call.args[0].with_changes(value=new_literal), *call.args[1:]]
    return stmt.with_changes(body=[stmt.body[0].with_changes(value=call.with_changes(args=new_args))])


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for mod, name in pairs:
        if name not in grouped.setdefault(mod, []):
            grouped[mod].append(name)
    return grouped


def _add_imports(
    cst: Any,
    module: Any,
    plan: Plan,
    need: list[tuple[str, str]],
    anchor_at: tuple[int, list[Any]] | None,
    original: str,
) -> Any:
    body = list(module.body)
    code = original  # the statements these checks look for are never removed by the migration
    plain_lines: list[str] = []
    if plan.spec:
        missing = [
            (mod, name)
            for mod, name in need
            if not re.search(rf'add_import\(\s*"{re.escape(mod)}"[^)]*"{re.escape(name)}"', code)
        ]
        lines = [
            f'{plan.config_name}.add_import("{mod}", names=[{", ".join(repr(n).replace(chr(39), chr(34)) for n in names)}])'
            for mod, names in _group(missing).items()
        ]
        anchor = None
        after_config = False
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                small = stmt.body[0]
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    if _cst_dotted(cst, small.value.func) == f"{plan.config_name}.add_import":
                        anchor, after_config = i, False
                elif isinstance(small, cst.Assign) and anchor is None:
                    if isinstance(small.value, cst.Call) and _cst_dotted(cst, small.value.func) in (
                        "PatchConfig",
                        "deepcopy",
                        "copy.deepcopy",
                    ):
                        anchor, after_config = i, True
        if lines:
            new = list(cst.parse_module("\n".join(lines) + "\n").body)
            if after_config:
                new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            at = (anchor + 1) if anchor is not None else len(body)
            body[at:at] = new
            if anchor_at is not None and anchor_at[0] >= at:
                anchor_at = (anchor_at[0] + len(new), anchor_at[1])
        plain_lines = sorted({line for line in plan.extra_imports if line not in code})
    else:
        missing = [
            (mod, name)
            for mod, name in need
            if not re.search(rf"^from {re.escape(mod)} import .*\b{name}\b", code, re.M)
        ]
        plain_lines = [
            f"from {mod} import {', '.join(sorted(names))}" for mod, names in _group(missing).items()
        ]
        plain_lines += sorted({line for line in plan.extra_imports if line not in code})
    if plain_lines:
        new = list(cst.parse_module("\n".join(dict.fromkeys(plain_lines)) + "\n").body)
        if anchor_at is not None and not plan.spec:
            at = anchor_at[0]
            new[0] = new[0].with_changes(leading_lines=anchor_at[1])
        else:
            last_import = None
            for i, stmt in enumerate(body):
                if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                    stmt.body[0], (cst.Import, cst.ImportFrom)
                ):
                    last_import = i
                elif last_import is not None and not _is_docstring(cst, stmt):
                    break
            at = (last_import + 1) if last_import is not None else _after_docstring(cst, body)
            if last_import is None and at < len(body):
                new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body[at:at] = new
    return module.with_changes(body=body)


def _is_docstring(cst: Any, stmt: Any) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _after_docstring(cst: Any, body: list[Any]) -> int:
    return 1 if body and _is_docstring(cst, body[0]) else 0


# ----------------------------------------------------------------------------------------------------
# entry points
# ----------------------------------------------------------------------------------------------------
# the OpSlot-era text of specs this process migrated, keyed by (real path, migrated text): a sibling or dependent
# migrated afterwards (``check --fix`` writes the GPU spec before its NPU sibling) still learns what the base
# spec's migration did (its kernel attributes, its retired imports)
_ORIGINALS: dict[tuple[str, str], str] = {}


def _remember_original(path: str, migrated: str, original: str) -> None:
    if len(_ORIGINALS) >= 64:
        _ORIGINALS.pop(next(iter(_ORIGINALS)))
    _ORIGINALS[(os.path.realpath(path), migrated)] = original


def _base_original(path: str, text: str) -> str:
    """The OpSlot-era text of the spec at ``path`` whose current text is ``text`` (``text`` when unknown)."""
    return _ORIGINALS.get((os.path.realpath(path), text), text)


def _is_spec(text: str, path: str) -> bool:
    return path.endswith("_patch_gen_config.py") or bool(re.search(r"^\w+\s*=\s*PatchConfig\(", text, re.M))


@functools.lru_cache(maxsize=64)
def _migrate_cached(text: str, path: str, names: Names, upstream_root: str | None) -> MigrationResult:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return MigrationResult(text, Applicability.DISPLAY, ("the file does not parse",))
    spec = _is_spec(text, path)
    original = text
    vendor_notes: tuple[str, ...] = ()
    if spec:
        try:
            text, vendor_notes, restated = vendor_prepass(text, path)
        except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
            text, vendor_notes, restated = original, (f"restating the vendor patches failed: {exc!r}",), False
        if restated:
            tree = ast.parse(text)
    analyzer = _Analyzer(tree, text, path, spec, names)
    try:
        plan = analyzer.run()
    except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
        return MigrationResult(original, Applicability.DISPLAY, (f"the codemod's analysis failed: {exc!r}",))
    for note in vendor_notes:
        plan.note(note)
    if not plan.slots:  # nothing to migrate; a vendor patch that could not be restated says why
        applicability = Applicability.DISPLAY if plan.reasons else Applicability.SAFE
        return MigrationResult(original, applicability, tuple(plan.reasons))
    try:
        new_text = _apply(plan, text)
    except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
        return MigrationResult(
            original, Applicability.DISPLAY, (*plan.reasons, f"the codemod failed: {exc!r}")
        )
    # verify: parses, no slot left
    try:
        out_tree = ast.parse(new_text)
    except SyntaxError as exc:
        return MigrationResult(
            original, Applicability.DISPLAY, (*plan.reasons, f"the migrated text does not parse: {exc}")
        )
    left = sorted(
        {n.id for n in ast.walk(out_tree) if isinstance(n, ast.Name) and n.id in plan.slots}
        | {n.attr for n in ast.walk(out_tree) if isinstance(n, ast.Attribute) and n.attr == GUARD_ATTR}
    )
    if left:
        plan.fail(f"left untranslated: {', '.join(left)}")
    if any(h.loss for per in plan.handles.values() for h in per.values()) and not names.loss_keyword:
        plan.fail(
            f"the loss helpers of {names.loss_module} take no {names.handle} keyword: cannot bind the "
            "cross-entropy handle to them"
        )
    handles = tuple(h for cls in sorted(plan.handles) for h in plan.handles[cls].values())
    applicability = Applicability.DISPLAY if plan.display else Applicability.SAFE
    imports = tuple(_needed_imports(plan))
    return MigrationResult(new_text, applicability, tuple(plan.reasons), handles, imports)


_SPELLINGS = {
    "opslot": Generation.OP_SLOT,
    "veomniop": Generation.VEOMNI_OP,
    "veomnikernel": Generation.VEOMNI_KERNEL,
}


def normalize_generation(generation: str | None) -> Generation | None:
    """The :class:`Generation` from any spelling ("op-slot", "OpSlot", "veomni-op", "VeomniKernel", ...)."""
    if not generation:
        return None
    key = re.sub(r"[^a-z]", "", str(generation).lower())
    return _SPELLINGS.get(key)


@functools.lru_cache(maxsize=8)
def _tree_profile(root: str) -> ApiProfile:
    return detect_profile(root)


def target_profile(
    profile: ApiProfile | None = None, generation: str | None = None, root: str | None = None
) -> ApiProfile:
    """The profile the migration writes names from: ``profile``; else the tree's at ``root`` (its generation,
    or ``generation`` when given and the tree has it); else the built-in profile of ``generation``."""
    if profile is not None:
        return profile
    wanted = normalize_generation(generation)
    if root:
        found = _tree_profile(str(root))
        if wanted is None or found.generation == wanted:
            return found
    return builtin_profile(wanted)


def opslot_reason(api: ApiProfile) -> str:
    return (
        f"this tree is of the OpSlot generation ({api.root or 'no tree'}): it has no handle API to migrate to "
        "(set target-api to the VeOmni API you migrate to, in a tree that has it)"
    )


def migrate_source(
    text: str,
    path: str,
    *,
    profile: ApiProfile | None = None,
    generation: str | None = None,
    root: str | None = None,
    pairs: frozenset[tuple[str, str]] | None = None,
) -> MigrationResult:
    """Migrate OpSlot dispatch in one file (a patch spec or a plain model module) to instance-local handles.

    Every name written (handle class, resolver, loss / bias helpers and their modules, loss keyword, offset
    RMSNorm and vision RoPE variants) comes from the target profile (:func:`target_profile`); every import the
    result adds must be confirmed by ``profile.can_import``, else the result is display-only with the reason.
    On an OpSlot profile nothing is migrated (there is no handle API). ``pairs``: the (op, variant) pairs of
    the tree's registry (default: not checked). Pure and cached.
    """
    from npu_lint.veomni.upstream import transformers_root

    api = target_profile(profile, generation, root)
    if api.generation == Generation.OP_SLOT:
        return MigrationResult(text, Applicability.DISPLAY, (opslot_reason(api),))
    names = Names.of(api)
    result = _migrate_cached(text, path, names, transformers_root())
    if result.applicability is not Applicability.DISPLAY and path.endswith("_patch_gen_config.py"):
        sibling = sibling_registrations(result.text, path, names)
        if sibling.added or sibling.reasons:
            result = MigrationResult(
                sibling.text,
                Applicability.DISPLAY if sibling.reasons else result.applicability,
                (*result.reasons, *sibling.reasons),
                result.handles,
                result.imports,
                registrations=sibling.added,
            )
    runtime_patch = os.path.join(os.path.dirname(os.path.abspath(path)), "device_patch.py")
    if _is_spec(text, path) and result.handles and os.path.isfile(runtime_patch):
        result = replace(
            result,
            reasons=(
                *result.reasons,
                "this package also swaps kernels at runtime (device_patch.py, applied from its __init__): that is "
                "not OpSlot dispatch in the spec, so the classes it patches get no handle here; migrate them to "
                f"{names.handle} handles by hand and drop the runtime patch",
            ),
        )
    if result.text != text and result.applicability is not Applicability.DISPLAY:
        dependents = spec_dependents(path)
        if dependents:
            result = replace(
                result,
                applicability=Applicability.UNSAFE,
                reasons=(
                    *result.reasons,
                    "specs of other models import this spec's patch functions ("
                    + ", ".join(dependents)
                    + "): after this migration those functions call handles their classes do not build "
                    "and use names those specs do not import; migrate them in the same change",
                ),
            )
    if result.text != text:
        reworded = refresh_wording(result.text, names.handle)
        if reworded != result.text:
            result = replace(result, text=reworded)
    if result.text != text and result.applicability is not Applicability.DISPLAY:
        _remember_original(path, result.text, text)
    if not result.handles and not result.reasons and not result.registrations:
        return result
    reasons = list(result.reasons)
    applicability = result.applicability
    missing = [(m, n) for m, n in result.imports if m != "functools" and not api.defines(m, n)]
    if missing:
        where = f"the VeOmni tree at {api.root}" if api.root else f"the built-in {api.handle} profile"
        reasons.append(
            "not importable in "
            + where
            + ": "
            + ", ".join(f"`{n}` from {m}" for m, n in missing)
            + " (a fix never imports a name the tree does not define)"
        )
        applicability = Applicability.DISPLAY
    if pairs is not None and result.handles:
        absent = sorted({(h.op, h.variant) for h in result.handles if not h.is_config} - set(pairs))
        if absent:
            reasons.append("the tree's registry has no row for " + ", ".join(f"{o}/{v}" for o, v in absent))
            applicability = Applicability.DISPLAY
    if applicability is Applicability.SAFE and api.builtin:
        applicability = Applicability.UNSAFE
        reasons.insert(
            0,
            f"no VeOmni tree was found: the names are the built-in {api.handle} profile's; check that your "
            "VeOmni defines them",
        )
    if applicability is result.applicability and reasons == list(result.reasons):
        return result
    return replace(result, applicability=applicability, reasons=tuple(reasons))


def edits_between(old: str, new: str) -> tuple[Edit, ...]:
    """Minimal line-level edits turning ``old`` into ``new`` (code-point offsets)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    offsets = [0]
    for line in a:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            edits.append(Edit(offsets[i1], offsets[i2], "".join(b[j1:j2])))
    return tuple(edits)


def build_migration_fix(source: SourceFile, project: Project) -> Fix | None:
    """The dispatch-migration fix for a file (the same Fix for every NPU201/202/203 diagnostic in it); None on
    an OpSlot profile (no handle API to migrate to) and in generated files (the spec is fixed instead)."""
    if source.kind.generated:
        return None
    api = project.api
    if api.generation == Generation.OP_SLOT:
        return None
    rows = project.rows if api.has_handle and not api.builtin else None
    pairs = frozenset((r.op, r.variant) for r in rows) if rows else None
    result = migrate_source(source.text, source.path, profile=api, pairs=pairs)
    if not result.changed:
        return None
    edits = edits_between(source.text, result.text)
    if not edits and result.applicability is not Applicability.DISPLAY:
        return None
    ops = sorted({f"{h.op}/{h.variant}" if not h.is_config else h.field for h in result.handles})
    classes = sorted({h.cls for h in result.handles})
    title = f"Migrate OpSlot dispatch to {api.handle} handles"
    if ops:
        title += f" ({', '.join(ops)}) owned by {len(classes)} class(es)"
    return Fix(title, edits, result.applicability, (), "; ".join(result.reasons))


# ----------------------------------------------------------------------------------------------------
# the NPU sibling that re-registers the GPU spec's patch functions
# ----------------------------------------------------------------------------------------------------
_WORDING = (
    ("via the OpSlot guard", "via its {handle} handle"),
    ("an OpSlot guard", "a {handle} dispatch"),
    ("OpSlot guards", "{handle} handles"),
    ("OpSlot-based", "{handle}-based"),
    ("OpSlot guard for", "{handle} dispatch for"),
    ("OpSlot guard", "{handle} dispatch"),
    ("via OpSlot", "via {handle}"),
    ("with OpSlot", "with {handle}"),
    ("OpSlot factory wrappers", "{handle} wrappers"),
    ("at OpSlot.bind() time", "when its {handle} is built"),  # a handle resolves its row at construction
    ("`` OpSlot;", "`` {handle} handle;"),
)
# whole sentences (in docstrings, across lines) about when the OpSlot was bound: the handle is built in __init__
_SENTENCES = (
    (
        re.compile(
            r"The OpSlot is bound by\s+``_bind_veomni_ops``\s+after\s+model\s+construction;\s+eager\s+mode\s+falls"
            r"\s+through\s+to\s+the\s+standard\s+expert\s+loop\s+below\."
        ),
        "The handle is built in ``__init__``; its eager row is the standard expert loop.",
    ),
)


def refresh_wording(text: str, handle: str) -> str:
    """Comments, section banners and the module docstring that still describe the OpSlot mechanism, reworded
    for ``handle`` (a banner ``# ── title ───`` keeps its width)."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    lines = text.splitlines(keepends=True)
    first_stmt = next(
        (t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)), None
    )
    significant = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    descriptions = {
        id(significant[i])
        for i in range(2, len(significant))
        if significant[i].type == tokenize.STRING
        and (
            (significant[i - 1].string == "=" and significant[i - 2].string == "description")
            or (significant[i - 1].string == "(" and significant[i - 2].string == "add_post_import_block")
        )
    }
    try:
        doc_rows = {
            node.body[0].lineno
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and _const_str(node.body[0].value) is not None
        }
    except SyntaxError:
        doc_rows = set()
    for tok in tokens:
        is_doc = (
            (tok is first_stmt and tok.type == tokenize.STRING)
            or id(tok) in descriptions
            or (tok.type == tokenize.STRING and tok.start[0] in doc_rows)
        )
        if tok.type != tokenize.COMMENT and not is_doc:
            continue
        if tok.type == tokenize.STRING and any(p.search(tok.string) for p, _ in _SENTENCES):
            (srow, scol), (erow, ecol) = tok.start, tok.end
            new_tok = tok.string
            for pattern, repl in _SENTENCES:
                new_tok = pattern.sub(repl, new_tok)
            for old, repl in _WORDING:
                new_tok = new_tok.replace(old, repl.format(handle=handle))
            head, tail = lines[srow - 1][:scol], lines[erow - 1][ecol:]
            replaced = (head + new_tok + tail).splitlines(keepends=True)
            lines[srow - 1 : erow] = replaced + [""] * (erow - srow + 1 - len(replaced))
            continue
        (srow, scol), (erow, ecol) = tok.start, tok.end
        for row in range(srow, erow + 1):
            line = lines[row - 1]
            start = scol if row == srow else 0
            end = ecol if row == erow else len(line.rstrip("\r\n"))
            segment = line[start:end]
            new = segment
            for old, repl in _WORDING:
                new = new.replace(old, repl.format(handle=handle))
            if new == segment:
                continue
            banner = re.match(r"(#\s*─+ .*? )(─+)$", segment)
            if banner and tok.type == tokenize.COMMENT:
                head = re.match(r"(#\s*─+ .*? )(─+)$", new)
                if head:
                    fill = max(2, len(segment) - len(head.group(1)))
                    new = head.group(1) + "─" * fill
            lines[row - 1] = line[:start] + new + line[end:]
    return "".join(lines)


def _registered(tree: ast.Module, config_name: str) -> dict[str, str]:
    """``config.override_method("T", replacement=fn)`` / ``replace_function`` calls: fn -> target."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        name = _dotted(call.func) or ""
        if name not in (f"{config_name}.override_method", f"{config_name}.replace_function"):
            continue
        target = _const_str(call.args[0]) if call.args else None
        repl = next((k.value for k in call.keywords if k.arg == "replacement"), None)
        if target and isinstance(repl, ast.Name):
            out[repl.id] = target
    return out


def base_spec_import(tree: ast.Module, path: str) -> tuple[ast.ImportFrom, str] | None:
    """The ``from <...>_patch_gen_config import ...`` of another spec (its GPU sibling, or another model's spec
    whose patch functions this one reuses) that brings patch functions, and that spec's file path."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and (stmt.module or "").endswith("_patch_gen_config")):
            continue
        if all(a.name == "config" for a in stmt.names):
            continue
        parts = (stmt.module or "").split(".")
        here = os.path.dirname(os.path.abspath(path))
        if stmt.level or len(parts) < 2 or parts[-2] == os.path.basename(here):
            base = os.path.join(here, parts[-1] + ".py")
        else:
            base = os.path.join(os.path.dirname(here), parts[-2], parts[-1] + ".py")
        if os.path.abspath(base) == os.path.abspath(path):
            continue
        return stmt, base
    return None


def _registrations(tree: ast.Module, text: str, config_name: str) -> dict[str, tuple[str, str | None]]:
    """``config.override_method("T", replacement=fn[, name_map=M])`` calls: fn -> (target, source of M)."""
    out: dict[str, tuple[str, str | None]] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        if (_dotted(call.func) or "") not in (
            f"{config_name}.override_method",
            f"{config_name}.replace_function",
        ):
            continue
        target = _const_str(call.args[0]) if call.args else None
        repl = next((k.value for k in call.keywords if k.arg == "replacement"), None)
        name_map = next((k.value for k in call.keywords if k.arg == "name_map"), None)
        if target and isinstance(repl, ast.Name):
            source = ast.get_source_segment(text, name_map) if name_map is not None else None
            out[repl.id] = (target, source)
    return out


def _added_imports(tree: ast.Module, config_name: str) -> dict[str, str]:
    """``config.add_import(module, names=[...])`` calls of a spec: name -> module."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (
            isinstance(call, ast.Call) and _dotted(call.func) == f"{config_name}.add_import" and call.args
        ):
            continue
        module = _const_str(call.args[0])
        names_kw = next((k.value for k in call.keywords if k.arg == "names"), None)
        if module and isinstance(names_kw, (ast.List, ast.Tuple)):
            for element in names_kw.elts:
                name = _const_str(element)
                if name:
                    out[name] = module
    return out


def _spec_functions(tree: ast.Module, config_name: str) -> dict[str, tuple[str, str]]:
    """Top-level patch functions of a spec: name -> (decorator kind, target)."""
    out: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dec = _decorator_target(stmt, config_name)
            if dec and dec[0] in ("override_method", "replace_function") and dec[1]:
                out[stmt.name] = dec
    return out


def _builds_handle(fn: ast.AST, names: Names) -> bool:
    builders = {names.handle, names.attention_helper}
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in builders
        for n in ast.walk(fn)
    )


@dataclass(frozen=True)
class SiblingResult:
    text: str
    added: tuple[tuple[str, str], ...] = ()  # (function, target) re-registered from the GPU spec
    reasons: tuple[str, ...] = ()


def sibling_registrations(text: str, path: str, names: Names, gpu_text: str | None = None) -> SiblingResult:
    """For an NPU spec of the sibling shape (a fresh ``PatchConfig`` that imports the GPU spec's patch functions
    and registers them with ``replacement=``): the GPU spec's migrated patch functions this spec must also
    register - the ``__init__`` overrides that build the handles its registered methods call, and the
    overrides that call a handle in place of a replaced function it registers. ``gpu_text`` is the GPU spec's
    text (read beside ``path`` when omitted); it is migrated first when it still has OpSlot dispatch."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return SiblingResult(text)
    gpu_module = None
    gpu_level = 0
    gpu_path = ""
    imported: dict[str, str] = {}  # local name -> GPU function name
    found_base = base_spec_import(tree, path)
    if found_base is not None:
        stmt, gpu_path = found_base
        gpu_module = stmt.module
        gpu_level = stmt.level
        for alias in stmt.names:
            imported[alias.asname or alias.name] = alias.name
    config_name = "config"
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
            and isinstance(stmt.targets[0], ast.Name)
        ):
            config_name = stmt.targets[0].id
    registered = _registered(tree, config_name)
    if gpu_module is None or not registered:
        return SiblingResult(text)
    if gpu_text is None:
        try:
            gpu_text = read_text(gpu_path)
        except (OSError, UnicodeDecodeError):
            return SiblingResult(text)
    original_gpu = _base_original(gpu_path, gpu_text) if gpu_path else gpu_text
    if re.search(r"\bOpSlot\(", gpu_text):
        migrated = _migrate_cached(gpu_text, gpu_module.replace(".", "/") + ".py", names, _upstream_key())
        if migrated.applicability is Applicability.DISPLAY:
            return SiblingResult(
                text,
                reasons=(
                    f"the GPU spec {gpu_module} cannot be migrated exactly, so the {names.handle} "
                    "registrations this spec re-uses are not known yet: migrate the GPU spec first",
                ),
            )
        gpu_text = migrated.text
    if original_gpu != gpu_text:
        try:
            before = _added_imports(ast.parse(original_gpu), "config")
            after = _added_imports(ast.parse(gpu_text), "config")
        except SyntaxError:
            before = after = {}
        retired = sorted(set(before) - set(after))
        if retired:
            dropped = _drop_unused_imports(text, retired, config_name)
            if dropped != text:
                text, tree = dropped, ast.parse(dropped)
    try:
        gpu_tree = ast.parse(gpu_text)
    except SyntaxError:
        return SiblingResult(text)
    gpu_cfg = "config"
    gpu_fns = _spec_functions(gpu_tree, gpu_cfg)
    fn_nodes = {s.name: s for s in gpu_tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    targets_here = set(registered.values())
    # targets this spec patches with its own functions or classes: never re-registered from the GPU spec
    targets_here |= {target for _, target in _spec_functions(tree, config_name).values()}
    targets_here |= {
        dec[1]
        for s in tree.body
        if isinstance(s, ast.ClassDef)
        and (dec := _decorator_target(s, config_name))
        and dec[0] == "replace_class"
    }
    bound_here = {
        s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    used = {imported.get(local, local) for local in registered}
    # the base spec's class -> (this spec's class, name_map source): a dependent model registers the base model's
    # functions for its own classes, renaming with ``name_map=``; an NPU sibling uses the same classes
    class_map: dict[str, tuple[str, str | None]] = {}
    for local, (target, name_map) in _registrations(tree, text, config_name).items():
        base = gpu_fns.get(imported.get(local, local))
        if base is not None and "." in base[1] and "." in target:
            class_map.setdefault(base[1].split(".")[0], (target.split(".")[0], name_map))
    same_package = os.path.dirname(os.path.abspath(gpu_path)) == os.path.dirname(os.path.abspath(path))

    def here(target: str) -> tuple[str, str | None] | None:
        """``target`` of the base spec as this spec names it (and the name_map to register it with)."""
        cls, _, meth = target.partition(".")
        if cls in class_map:
            mapped, name_map = class_map[cls]
            return f"{mapped}.{meth}", name_map
        return (target, None) if same_package else None

    classes = {gpu_fns[f][1].split(".")[0] for f in used if f in gpu_fns and "." in gpu_fns[f][1]}
    # overrides the migration added in place of a replaced function this spec registers
    replaced_here = {gpu_fns[f][1] for f in used if f in gpu_fns and gpu_fns[f][0] == "replace_function"}
    handle_attrs = {
        t.attr
        for node in fn_nodes.values()
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id == names.handle
        for t in n.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    add: list[tuple[str, str, str, str | None]] = []
    for fname, (kind, base_target) in gpu_fns.items():
        mapped = here(base_target) if "." in base_target else None
        if mapped is None or mapped[0] in targets_here or fname in used or kind != "override_method":
            continue
        target, name_map = mapped
        cls, meth = base_target.split(".", 1)
        if meth == "__init__":
            continue  # decided below, once the classes are known
        calls_handle = any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in handle_attrs
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
            for n in ast.walk(fn_nodes[fname])
        )
        if calls_handle and (cls in classes or replaced_here):
            add.append((fname, target, kind, name_map))
            classes.add(cls)
    for fname, (kind, base_target) in gpu_fns.items():
        mapped = here(base_target) if "." in base_target else None
        if mapped is None or mapped[0] in targets_here or fname in used or kind != "override_method":
            continue
        target, name_map = mapped
        cls, _, meth = base_target.partition(".")
        if meth == "__init__" and cls in classes and _builds_handle(fn_nodes[fname], names):
            add.append((fname, target, kind, name_map))
    if not same_package:
        # a dependent model reuses the base model's new __init__ overrides only where the two upstream classes
        # build the same thing once renamed: otherwise it would get another model's attributes
        differ = [
            target
            for fname, target, kind, name_map in add
            if target.endswith(".__init__")
            and not _same_upstream_init(gpu_tree, tree, gpu_fns[fname][1], target, name_map, path)
        ]
        if differ:
            return SiblingResult(
                text,
                reasons=(
                    f"{', '.join(differ)} would reuse the base spec's __init__ override ({gpu_module}), but the "
                    "upstream classes differ beyond their name_map: build these handles here by hand",
                ),
            )
    clash = sorted(f for f, *_ in add if f in bound_here)
    if clash:
        return SiblingResult(
            text,
            reasons=(
                f"the GPU spec's {', '.join(clash)} would be re-registered here, but this spec defines the same "
                "name(s): rename one before migrating",
            ),
        )
    # the names the re-registered functions read that the GPU spec adds to its generated module must be added to
    # this one's too (the loss helpers, ``partial``)
    gpu_adds = _added_imports(gpu_tree, gpu_cfg)
    here_adds = _added_imports(tree, config_name)
    gpu_defs = {
        s.name: s
        for s in gpu_tree.body
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    reused = [fn_nodes[f] for f, *_ in add] + [gpu_defs[n] for n in set(imported.values()) if n in gpu_defs]
    read = {n.id for node in reused for n in ast.walk(node) if isinstance(n, ast.Name)}
    wanted: dict[str, list[str]] = {}
    inherits = re.search(rf"^{re.escape(config_name)}\.additional_imports\.extend\(", text, re.M)
    for name in sorted(read) if not inherits else ():  # a spec that extends the base's imports has them
        module = gpu_adds.get(name)
        if module is not None and name not in here_adds:
            wanted.setdefault(module, []).append(name)
    import_lines = "".join(
        f"{config_name}.add_import({module!r}, names={names_!r})\n".replace("'", '"')
        for module, names_ in sorted(wanted.items())
    )
    if not add and not wanted:
        return SiblingResult(text)
    add.sort(key=lambda a: list(gpu_fns).index(a[0]))
    lines = text.splitlines(keepends=True)
    # import the functions from the GPU spec (a new import statement after the last one from it)
    last_import = (
        max(
            s.end_lineno or s.lineno
            for s in tree.body
            if isinstance(s, ast.ImportFrom)
            and s.module == gpu_module
            and all(a.name != "config" for a in s.names)
        )
        if any(
            isinstance(s, ast.ImportFrom)
            and s.module == gpu_module
            and all(a.name != "config" for a in s.names)
            for s in tree.body
        )
        else None
    )
    import_text = (
        f"from {'.' * gpu_level}{gpu_module} import (\n" + "".join(f"    {f},\n" for f, *_ in add) + ")\n"
    )
    registrations = ("\n\n" + import_lines if import_lines else "") + "".join(
        f"\n\n{config_name}.{kind}(\n"
        f'    "{target}",\n'
        f"    replacement={fname},\n"
        + (f"    name_map={name_map},\n" if name_map else "")
        + f'    description="{_registration_description(target, names)}",\n'
        ")\n"
        for fname, target, kind, name_map in add
    )
    body = "".join(lines)
    if not body.endswith("\n"):
        body += "\n"
    body += registrations
    out_lines = body.splitlines(keepends=True)
    at = last_import if last_import is not None else 0
    if add:
        out_lines[at:at] = [import_text]
    return SiblingResult("".join(out_lines), tuple((f, t) for f, t, *_ in add))


def _same_upstream_init(
    base_tree: ast.Module, tree: ast.Module, base_target: str, target: str, name_map: str | None, path: str
) -> bool:
    """Whether upstream ``base_target``'s ``__init__`` equals ``target``'s once ``name_map`` renames it."""
    from npu_lint.veomni import upstream

    def source_module(t: ast.Module) -> str | None:
        for stmt in t.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                for kw in stmt.value.keywords:
                    if kw.arg == "source_module":
                        return _const_str(kw.value)
        return None

    renames: dict[str, str] = {}
    if name_map:
        value: ast.expr | None = ast.parse(name_map, mode="eval").body
        if isinstance(value, ast.Name):
            value = next(
                (
                    s.value
                    for s in tree.body
                    if isinstance(s, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in s.targets)  # type: ignore[union-attr]
                ),
                None,
            )
        try:
            renames = dict(ast.literal_eval(value)) if value is not None else {}
        except ValueError:
            return False
    base_module, module = source_module(base_tree), source_module(tree)
    if not base_module or not module:
        return False
    base = upstream.class_init(base_module, base_target.split(".")[0])
    mine = upstream.class_init(module, target.split(".")[0])
    if not isinstance(base, upstream.MethodSource) or not isinstance(mine, upstream.MethodSource):
        return False
    text = base.text
    for old, new in renames.items():
        text = text.replace(old, new)
    try:
        return ast.dump(ast.parse(textwrap.dedent(text))) == ast.dump(ast.parse(textwrap.dedent(mine.text)))
    except SyntaxError:
        return False


def _registration_description(target: str, names: Names) -> str:
    if target.endswith(".__init__"):
        return f"Construct the {names.handle} handles of {target.split('.')[0]} in __init__"
    return f"Call the {names.handle} handle of {target.split('.')[0]}"


def _upstream_key() -> str | None:
    from npu_lint.veomni.upstream import transformers_root

    return transformers_root()


# ----------------------------------------------------------------------------------------------------
# vendor classes / functions named by a spec (create_patch_from_external, a vendor-calling replace_function)
# ----------------------------------------------------------------------------------------------------
_VENDOR_SLOT = {  # registry op -> (OpSlot op, variant, slot name) the pre-pass declares for the main migration
    ("rms_norm", "standard"): ("rms_norm", "standard", "veomni_rms_norm"),
    ("swiglu_mlp", "standard"): ("swiglu_mlp", "standard", "veomni_swiglu_mlp"),
    ("rope", "full"): ("rotary_pos_emb", "full", "veomni_apply_rotary_pos_emb"),
}
_SWIGLU_EXPR = re.compile(
    r"self\.down_proj\(\s*self\.act_fn\(\s*self\.gate_proj\((\w+)\)\s*\)\s*\*\s*self\.up_proj\(\1\)\s*\)"
)


def external_patch_target(call: ast.Call) -> tuple[str, str, str] | None:
    """``create_patch_from_external(target=..., replacement_module=..., replacement_name=...)``: the three
    strings (positional or keyword), None when any is not a literal."""
    keys = ("target", "replacement_module", "replacement_name")
    values = {k: _const_str(a) for k, a in zip(keys, call.args, strict=False)}
    for kw in call.keywords:
        if kw.arg in keys:
            values[kw.arg] = _const_str(kw.value)
    if all(values.get(k) for k in keys):
        return values["target"], values["replacement_module"], values["replacement_name"]  # type: ignore[return-value]
    return None


def _vendor_op(module: str, name: str) -> tuple[str, str] | None:
    from npu_lint.veomni import vendor_map

    found = vendor_map.lookup(f"{module}.{name}") or vendor_map.lookup(module)
    if found is None or found.op is None:
        return None
    return found.op, found.variant or "standard"


def vendor_prepass(text: str, path: str) -> tuple[str, tuple[str, ...], bool]:
    """Spec patches that swap a model class or function for a vendor kernel, restated as OpSlot dispatch that
    the migration then turns into handles: ``create_patch_from_external`` of a vendor RMSNorm / SwiGLU MLP
    class -> a ``forward`` override calling the op through a slot (the upstream ``forward`` with its eager
    formula replaced, so the rest of it - e.g. a dropout - stays); a replaced ``apply_rotary_pos_emb`` whose
    body calls a vendor kernel -> the upstream body behind a slot guard. Returns (text, reasons, changed);
    a patch that cannot be restated exactly is left as is, with the reason."""
    if "create_patch_from_external" not in text and "replace_function" not in text:
        return text, (), False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text, (), False
    config_name, source_module = "config", None
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
            and isinstance(stmt.targets[0], ast.Name)
        ):
            config_name = stmt.targets[0].id
            for kw in stmt.value.keywords:
                if kw.arg == "source_module":
                    source_module = _const_str(kw.value)
    if source_module is None:
        return text, (), False
    from npu_lint.veomni import upstream
    from npu_lint.veomni.vendor_map import is_vendor

    lines = text.splitlines(keepends=True)
    replacements: list[tuple[int, int, str]] = []  # (first line, last line) 1-based inclusive -> text
    reasons: list[str] = []
    declared: set[str] = set()
    bound = {
        t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
    }

    def declare(op: str, variant: str, slot: str) -> str:
        if slot in declared or slot in bound:
            return ""
        declared.add(slot)
        return f'{slot} = OpSlot("{op}", "{variant}")\n\n\n'

    for stmt in tree.body:
        call = next(
            (
                c
                for c in ast.walk(stmt)
                if isinstance(c, ast.Call) and (_dotted(c.func) or "").endswith("create_patch_from_external")
            ),
            None,
        )
        if isinstance(stmt, ast.Expr) and call is not None:
            found = external_patch_target(call)
            if found is None:
                continue
            target, module, name = found
            if not is_vendor(module):
                continue
            op = _vendor_op(module, name)
            slot = _VENDOR_SLOT.get(op) if op else None
            if slot is None or "." in target:
                reasons.append(
                    f"`{target}` is replaced by the vendor class {module}.{name}, which no handle migration "
                    "covers: migrate it by hand"
                )
                continue
            forward = upstream.method_source(source_module, target, "forward")
            attrs = upstream.self_attributes(source_module, target) or set()
            if forward is None:
                reasons.append(f"cannot read upstream `{target}.forward` to restate the {name} patch")
                continue
            fn_name = f"{_snake(target)}_forward_patched"
            fn = ast.parse(forward.text).body[0]
            assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            params = [a.arg for a in fn.args.args]
            if slot[0] == "rms_norm":
                eps = next((e for e in ("variance_epsilon", "eps") if e in attrs), None)
                src = forward.text
                standard = (
                    "rsqrt" in src
                    and "self.weight" in src
                    and not re.search(r"1(\.0)?\s*\+\s*self\.weight", src)
                )
                if eps is None or len(params) != 2 or not standard:
                    reasons.append(
                        f"upstream `{target}.forward` is not the standard RMSNorm formula: the {name} patch "
                        "cannot be restated exactly"
                    )
                    continue
                x = params[1]
                body = (
                    f"def {fn_name}(self, {x}):\n"
                    f"    if {slot[2]}.use_non_eager_impl:\n"
                    f"        return {slot[2]}({x}, self.weight, self.{eps})\n"
                    + "".join(
                        "    " + line + "\n" if line.strip() else "\n" for line in _body_lines(forward.text)
                    )
                )
            else:
                src = _rename_def(forward.text, "forward", fn_name)
                match = _SWIGLU_EXPR.search(src)
                if match is None:
                    reasons.append(
                        f"upstream `{target}.forward` has no `down_proj(act_fn(gate_proj(x)) * up_proj(x))`: "
                        f"the {name} patch cannot be restated exactly"
                    )
                    continue
                body = src[: match.start()] + f"{slot[2]}(self, {match.group(1)})" + src[match.end() :]
            desc = f"{slot[0]} op in place of the vendor class {name}"
            new = (
                declare(*slot)
                + f'@{config_name}.override_method("{target}.forward", description="{desc}")\n'
                + body
            )
            replacements.append((_first_line(stmt), stmt.end_lineno or stmt.lineno, new))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dec = _decorator_target(stmt, config_name)
            if not dec or dec[0] != "replace_function" or dec[1] != "apply_rotary_pos_emb":
                continue
            vendor = [
                n
                for n in ast.walk(stmt)
                if isinstance(n, ast.ImportFrom) and n.module and is_vendor(n.module)
            ]
            if not vendor:
                continue
            slot = _VENDOR_SLOT[("rope", "full")]
            upstream_fn = _function_source(source_module, "apply_rotary_pos_emb")
            if upstream_fn is None:
                reasons.append(f"cannot read upstream `apply_rotary_pos_emb` to restate `{stmt.name}`")
                continue
            up = ast.parse(upstream_fn).body[0]
            assert isinstance(up, ast.FunctionDef)
            up_params = [a.arg for a in up.args.args]
            mine = [a.arg for a in stmt.args.args]
            if up_params[:4] != mine[:4] or not set(up_params) <= set(mine):
                reasons.append(f"`{stmt.name}` and upstream `apply_rotary_pos_emb` take different parameters")
                continue
            keyword = ", unsqueeze_dim=unsqueeze_dim" if "unsqueeze_dim" in mine else ""
            head_end = stmt.body[0].lineno - 1  # the def line(s) stay
            doc = (
                stmt.body[0]
                if isinstance(stmt.body[0], ast.Expr) and _const_str(stmt.body[0].value)
                else None
            )
            keep_to = (doc.end_lineno or doc.lineno) if doc else head_end
            new_body = (
                f"    if {slot[2]}.use_non_eager_impl:\n"
                f"        return {slot[2]}({', '.join(mine[:4])}{keyword})\n"
                + "".join("    " + line + "\n" if line.strip() else "\n" for line in _body_lines(upstream_fn))
            )
            text_head = "".join(lines[_first_line(stmt) - 1 : keep_to])
            new = declare(*slot) + text_head + new_body
            new = new.replace(
                'description="Use LigerKernel rotary embedding"',
                'description="Rotary embedding through the rope op"',
            )
            replacements.append((_first_line(stmt), stmt.end_lineno or stmt.lineno, new))
    if not replacements:
        return text, tuple(reasons), False
    for first, last, new in sorted(replacements, reverse=True):
        lines[first - 1 : last] = [new]
    out = "".join(lines)
    if "create_patch_from_external(" not in out.replace("def create_patch_from_external(", ""):
        out = re.sub(r",\s*create_patch_from_external\b", "", out)
        out = re.sub(r"\bcreate_patch_from_external,\s*", "", out)
    try:
        ast.parse(out)
    except SyntaxError:
        return text, (*reasons, "restating the vendor patches did not parse"), False
    return out, tuple(reasons), True


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _body_lines(fn_text: str) -> list[str]:
    """The body of a function's source (docstring dropped), dedented."""
    fn = ast.parse(fn_text).body[0]
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and _const_str(body[0].value) is not None:
        body = body[1:]
    src = fn_text.splitlines()
    chunk = src[body[0].lineno - 1 : (body[-1].end_lineno or body[-1].lineno)]
    return textwrap.dedent("\n".join(chunk)).splitlines()


def _function_source(module: str, name: str) -> str | None:
    """The source of the module-level function ``name`` of the upstream (transformers) ``module``."""
    from npu_lint.veomni import upstream

    path = upstream.module_path(module)
    if path is None:
        return None
    try:
        text = read_text(path)
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return ast.get_source_segment(text, stmt)
    return None


def _LogitsOnlyLoss(cst: Any) -> Any:  # noqa: N802 - a transformer class built lazily (libcst)
    """``self.loss_function(logits=<x>, ..., hidden_states=..., weights=...)`` -> the logits path only: a loss
    function given computed logits gets neither the hidden states nor the head weight (upstream's shape)."""

    class Transformer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        def leave_Call(self, original: Any, updated: Any) -> Any:
            func = updated.func
            if not (
                isinstance(func, cst.Attribute)
                and func.attr.value == "loss_function"
                and isinstance(func.value, cst.Name)
                and func.value.value == "self"
            ):
                return updated
            keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
            logits = keywords.get("logits")
            if logits is None or (isinstance(logits.value, cst.Name) and logits.value.value == "None"):
                return updated
            args = [
                a
                for a in updated.args
                if a.keyword is None or a.keyword.value not in ("hidden_states", "weights")
            ]
            if len(args) == len(updated.args):
                return updated
            last = args[-1]
            if updated.args[-1] is not last:
                args[-1] = last.with_changes(comma=updated.args[-1].comma)
            return updated.with_changes(args=args)

    return Transformer()


def spec_dependents(path: str) -> tuple[str, ...]:
    """Patch specs of *other* model packages that import from the spec at ``path`` (its own package's NPU
    sibling is handled by :func:`sibling_registrations`), as ``<package>/<file>``."""
    spec = os.path.abspath(path)
    if not spec.endswith("_patch_gen_config.py") or not os.path.isfile(spec):
        return ()
    package_dir = os.path.dirname(spec)
    models_dir = os.path.dirname(package_dir)
    parts = spec[:-3].split(os.sep)
    if "veomni" not in parts:
        return ()
    module = ".".join(parts[len(parts) - 1 - parts[::-1].index("veomni") :])
    pattern = re.compile(rf"^\s*from\s+{re.escape(module)}\s+import\b", re.M)
    found = []
    try:
        packages = sorted(os.listdir(models_dir))
    except OSError:
        return ()
    for name in packages:
        other = os.path.join(models_dir, name)
        if other == package_dir or not os.path.isdir(other):
            continue
        for filename in sorted(os.listdir(other)):
            if not filename.endswith("_patch_gen_config.py"):
                continue
            try:
                if pattern.search(read_text(os.path.join(other, filename))):
                    found.append(f"{name}/{filename}")
            except (OSError, UnicodeDecodeError):
                continue
    return tuple(found)
