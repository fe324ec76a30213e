"""The names under which a tree binds its kernels, and what a binding's own name says it binds.

A dispatch binding carries two descriptions of one choice: the name it is stored under
(``veomni_causal_lm_loss``, ``self.veomni_rms_norm_offset``, ``veomni_dsa_attention_implementation``) and the
arguments that make the choice (``OpSlot("cross_entropy_loss", "causal")``, ``VeomniOp("rms_norm", "offset",
impl)``, ``OpsConfigSlot("dsa_attention_implementation")``). Names are written from the arguments, so when an
edit (a copy-paste, a rename of one side) leaves them naming different things, it is the arguments that changed
what runs, silently: the slot still binds, to a row of another variant or to another config field.

``Vocabulary``: per tree, the variants each op is registered with (OpSlot rows of an OpSlot tree, registry rows
otherwise; the built-in catalog outside a tree) and the ops-config fields. ``spoken(name, candidates)``: the
candidates a binding name spells (as whole ``_``-separated words, in order).
"""

from __future__ import annotations

from dataclasses import dataclass

from npu_lint.veomni.catalog import CONFIG_FIELD_TO_OP, OPSLOT_TO_VEOMNIOP

_NOISE = frozenset({"veomni", "self", "impl", "implementation", "op", "slot", "kernel", "handle", ""})
FIELD_SUFFIX = "_implementation"


def words(name: str) -> tuple[str, ...]:
    """A binding name's words: lower case, split on ``_``, without the generic ones (``veomni``, ``impl``)."""
    return tuple(w for w in name.lower().split("_") if w not in _NOISE)


def _contains(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def spoken(name: str, candidates: tuple[str, ...] | frozenset[str]) -> list[str]:
    """The candidates (ops, variants, field stems) whose words appear, in order and whole, in ``name``."""
    have = words(name)
    return sorted(c for c in candidates if _contains(have, tuple(c.lower().split("_"))))


def says(name: str, candidate: str) -> bool:
    return _contains(words(name), tuple(candidate.lower().split("_")))


@dataclass(frozen=True)
class Vocabulary:
    slot_variants: dict[str, frozenset[str]]  # OpSlot op -> its variants
    op_variants: dict[str, frozenset[str]]  # VeomniOp / VeomniKernel op -> its variants
    fields: tuple[str, ...]  # ops-config fields


def vocabulary(project: object) -> Vocabulary:
    """The tree's vocabulary (``Project``): slot rows, registry rows, ops-config fields; built-in ones where the
    tree has none."""
    slot: dict[str, set[str]] = {}
    for row in getattr(project, "slot_rows", ()) or ():
        slot.setdefault(row.op, set()).add(row.variant)
    if not slot:
        for op, variant in OPSLOT_TO_VEOMNIOP:
            slot.setdefault(op, set()).add(variant)
    ops: dict[str, set[str]] = {}
    for row in getattr(project, "rows", ()) or ():
        ops.setdefault(row.op, set()).add(row.variant)
    api = getattr(project, "api", None)
    fields = tuple(getattr(api, "config_fields", ()) or ()) or tuple(CONFIG_FIELD_TO_OP)
    return Vocabulary(
        {k: frozenset(v) for k, v in slot.items()}, {k: frozenset(v) for k, v in ops.items()}, fields
    )


def variant_contradiction(name: str, op: str, variant: str, variants: frozenset[str]) -> str | None:
    """Another variant of ``op`` that ``name`` spells while it does not spell the bound ``variant`` (words of
    the op's own name left aside): what the name says the binding is."""
    if says(name, variant):
        return None
    op_words = tuple(op.lower().split("_"))
    rest = words(name)
    n = len(op_words)
    for i in range(len(rest) - n + 1):
        if rest[i : i + n] == op_words:
            rest = rest[:i] + rest[i + n :]
            break
    others = [
        v
        for v in sorted(variants - {variant})
        if _contains(rest, tuple(v.lower().split("_")))
        and not _contains(tuple(variant.split("_")), tuple(v.split("_")))
    ]
    if others:
        return others[0] if len(others) == 1 else None
    # a near miss: the name spells another variant with its underscores dropped or one letter off
    # (``rms_norm_qwen35`` for ``qwen3_5``, ``rms_norm_gate`` for ``gated``), and not the bound one
    if _near(rest, variant):
        return None
    near = [v for v in sorted(variants - {variant}) if _near(rest, v)]
    return near[0] if len(near) == 1 else None


def _near(rest: tuple[str, ...], variant: str) -> bool:
    """Whether a window of 1-3 consecutive words of ``rest``, joined, is ``variant`` without its underscores
    or (both at least 5 letters long) one edit away from it."""
    target = variant.lower().replace("_", "")
    for size in (1, 2, 3):
        for i in range(len(rest) - size + 1):
            joined = "".join(rest[i : i + size])
            if joined == target:
                return True
            if min(len(joined), len(target)) >= 5 and _one_edit(joined, target):
                return True
    return False


def _one_edit(a: str, b: str) -> bool:
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if b[i].isdigit() or (len(a) == len(b) and a[i].isdigit()):
        return False  # `llama4` against `llama3`: another version, not a typo
    return a[i + (len(a) == len(b)) :] == b[i + 1 :]


def field_contradiction(name: str, field: str, fields: tuple[str, ...]) -> str | None:
    """Another ops-config field whose stem (``dsa_attention``) ``name`` spells while it does not spell the bound
    field's stem: what the name says the binding reads."""
    stem = field[: -len(FIELD_SUFFIX)] if field.endswith(FIELD_SUFFIX) else field
    if says(name, stem):
        return None
    bound = tuple(stem.split("_"))
    others = []
    for other in fields:
        if other == field or not other.endswith(FIELD_SUFFIX):
            continue
        other_stem = other[: -len(FIELD_SUFFIX)]
        if says(name, other_stem) and not _contains(bound, tuple(other_stem.split("_"))):
            others.append(other)
    # the longest spelled stem (``dsa_attention`` over ``attn``): one answer or none
    others.sort(key=lambda f: -len(f))
    if not others or (
        len(others) > 1 and not _contains(tuple(others[0].split("_")), tuple(others[1].split("_")))
    ):
        return None
    return others[0]


_REPLACEMENT_SUFFIXES = ("_patched", "_replacement", "_npu", "_gpu")


def replacement_stem(name: str) -> str:
    """What a spec's replacement function is named for: ``apply_rotary_pos_emb_patched`` ->
    ``apply_rotary_pos_emb`` (the suffixes specs add, any number of them)."""
    changed = True
    while changed:
        changed = False
        for suffix in _REPLACEMENT_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                changed = True
    return name
