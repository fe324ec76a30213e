"""Which variant an implementation row's callable is written for, read from the tree (NPU221).

A registry row names an op and a variant (``rotary_pos_emb/partial``, ``rope/full``, ``rms_norm/qwen3_5``); the
callable it binds is written for one variant, and the tree says which in three ways, none of them a built-in list:

* the package it lives in: ``rope/full/npu.py`` is the ``full`` variant's module when the same registration module
  registers ``full`` and ``partial`` (a path component equal to a variant of the op registered beside it);
* its own name: ``partial_apply_rotary_pos_emb_npu`` spells the ``partial`` variant, ``apply_rotary_pos_emb_vision_npu``
  the op ``rotary_pos_emb_vision`` (another op of the same file whose name extends the row's op);
* its siblings: a module that defines ``apply_rotary_pos_emb_npu`` and ``partial_apply_rotary_pos_emb_npu`` keeps a
  distinct implementation for the ``partial`` variant, so a ``partial`` row binding the first binds the wrong one.

:func:`misbound` answers, for one row, the evidence that its callable belongs to another variant (or op), or None.
"""

from __future__ import annotations

from dataclasses import dataclass

_NOISE = frozenset({"", "fn", "func", "impl", "kernel", "forward", "backward", "wrapper", "op"})
_BACKENDS = frozenset({"npu", "ascend", "cuda", "gpu", "triton", "eager", "torch", "liger", "fused"})


def _words(name: str) -> tuple[str, ...]:
    return tuple(w for w in name.lower().split("_") if w)


def _contains(have: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return n > 0 and any(have[i : i + n] == needle for i in range(len(have) - n + 1))


@dataclass(frozen=True)
class Misbinding:
    """Why a row's callable belongs elsewhere: ``what`` is the variant (or op) the callable is written for,
    ``evidence`` a short phrase naming where the tree says so."""

    what: str
    evidence: str


def _path_variant(
    registry: str, module: str, variant: str, variants: frozenset[str], own_package: bool
) -> Misbinding | None:
    """A component of the callable's module below the registration package that is another variant of the op,
    while no component is the row's own variant (``rope.full.npu`` bound by the ``partial`` row) and the tree has
    a package of the row's own variant (else the reuse is the tree's choice: it wrote nothing else)."""
    if not own_package:
        return None
    reg, mod = registry.split("."), module.split(".")
    common = 0
    while common < min(len(reg), len(mod)) and reg[common] == mod[common]:
        common += 1
    below = mod[common:]
    if not below or variant in below:
        return None
    others = [p for p in below if p in variants and p != variant]
    if len(others) != 1:
        return None
    return Misbinding(others[0], f"its module `{module}` is the `{others[0]}` variant's package")


def _parallel(name: str, attr: str, variant: str) -> bool:
    """``name`` spells ``variant`` and is the same kind of function as ``attr``: beyond the variant words they
    share a word that is not a backend or filler word (``whole_spin_npu`` beside ``band_spin_npu``; a helper
    ``_pad_to_full`` or ``text_position_ids`` is no implementation of the ``full`` / ``text`` variant)."""
    theirs = _words(name)
    if not _contains(theirs, _words(variant)):
        return False
    skip = _NOISE | _BACKENDS | set(_words(variant))
    return bool((set(theirs) - skip) & (set(_words(attr)) - skip))


def _name_variant(
    attr: str, op: str, variant: str, variants: frozenset[str], functions: tuple[str, ...]
) -> Misbinding | None:
    """The callable's name spells one other variant of the op as whole words and not the row's own, while its
    module defines a function that spells the row's own variant (a partial kernel serving the full row is a
    choice when nothing in the module is named for the full one: it rotates a prefix as long as the head)."""
    have = _words(attr)
    if _contains(have, _words(variant)):
        return None
    if not any(_parallel(f, attr, variant) for f in functions if f != attr):
        return None
    others = [
        v
        for v in sorted(variants - {variant})
        if _contains(have, _words(v))
        and not _contains(_words(op), _words(v))
        and not _contains(_words(variant), _words(v))
    ]
    if len(others) != 1:
        return None
    return Misbinding(others[0], f"its name `{attr}` spells the `{others[0]}` variant")


def _name_op(attr: str, op: str, ops: frozenset[str]) -> Misbinding | None:
    """The callable's name spells another op of the registration that extends the row's op
    (``apply_rotary_pos_emb_vision_npu`` bound to ``rotary_pos_emb``)."""
    have = _words(attr)
    own = _words(op)
    others = [
        o
        for o in sorted(ops - {op})
        if len(_words(o)) > len(own) and _contains(_words(o), own) and _contains(have, _words(o))
    ]
    if len(others) != 1:
        return None
    return Misbinding(others[0], f"its name `{attr}` spells the op `{others[0]}`")


def _sibling(
    attr: str, op: str, variant: str, functions: tuple[str, ...], variants: frozenset[str] = frozenset()
) -> Misbinding | None:
    """The callable's module also defines a function named like it plus words of the row's own op or variant
    (``partial_apply_rotary_pos_emb_npu`` beside ``apply_rotary_pos_emb_npu`` for the ``partial`` row): the tree
    keeps a distinct implementation for the row, and the row binds the generic one."""
    have = set(_words(attr)) - _NOISE
    own = set(_words(op)) | set(_words(variant))
    if not have:
        return None  # ``forward``: the name says nothing to extend
    found = []
    for name in functions:
        if name == attr or name.startswith("_") != attr.startswith("_"):
            continue
        theirs = set(_words(name)) - _NOISE
        extra = theirs - have
        if not have < theirs or not extra <= own:
            continue
        if len(variants) > 1 and not extra & set(_words(variant)):
            continue  # named for the op only, among several variants: the generic (full) kernel, no variant's
        found.append(name)
    if len(found) != 1:
        return None
    return Misbinding(variant, f"its module also defines `{found[0]}`, named for `{op}/{variant}`")


def misbound(
    registry: str,
    op: str,
    variant: str,
    module: str,
    attr: str,
    variants: frozenset[str],
    ops: frozenset[str],
    functions: tuple[str, ...],
    own_package: bool = True,
) -> Misbinding | None:
    """The evidence that the callable ``module:attr`` bound by the row ``op/variant`` of the registration module
    ``registry`` is written for another variant or op: ``variants`` are the op's variants registered beside the
    row, ``ops`` the ops registered there, ``functions`` the top-level functions of ``module``, ``own_package``
    whether the tree has a package of the row's own variant (a row binds into it, or the module exists)."""
    return (
        _path_variant(registry, module, variant, variants, own_package)
        or (_name_variant(attr, op, variant, variants, functions) if attr else None)
        or (_name_op(attr, op, ops) if attr else None)
        or (_sibling(attr, op, variant, functions, variants) if attr else None)
    )
