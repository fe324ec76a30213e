"""The migration plan: what the analysis decides and the rewrite carries out.

:class:`Names` holds every name the migration writes, taken from the target ApiProfile; :class:`Plan` is one
file's decisions (its slots, the functions that use them, the handles each class owns as :class:`HandleSpec`, the
new overrides and imports, and why the result is display-only); :class:`MigrationResult` is what
:func:`~npu_lint.fixers.dispatch.migrate_source` returns. The call-contract tables (slot op -> ops-config field,
kernel and MoE contracts, attention names) live here beside them.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field

from npu_lint.core.diagnostics import Applicability
from npu_lint.veomni.catalog import BUILTIN_ROWS, OPSLOT_TO_VEOMNIOP, slot_target
from npu_lint.veomni.profile import ApiProfile

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
BUILTIN_NAMES = set(dir(builtins)) | {"None", "True", "False"}


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
    deferred_imports: list[str] = field(default_factory=list)  # of those, the ones placed on the final text
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


CONFIG_SLOT = "__ops_config__"  # the op of an OpsConfigSlot("<field>") (its variant is the field)
SLOT_CLASSES = ("OpSlot", "OpsConfigSlot")
