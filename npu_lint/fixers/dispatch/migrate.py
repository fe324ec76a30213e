"""The entry points: :func:`migrate_source` (pure: text in, :class:`MigrationResult` out) and
:func:`build_migration_fix` (the fix builder the engine calls with a file's SourceFile and Project).

They choose the target profile (the tree's, or ``target-api``), run the migration of one text, add the sibling
registrations and the rewording, and decide the applicability (safe, unsafe, display-only with the reason).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.fixers.dispatch.assemble import migrate_cached
from npu_lint.fixers.dispatch.plan import MigrationResult, Names
from npu_lint.fixers.dispatch.siblings import sibling_registrations, spec_dependents
from npu_lint.fixers.dispatch.spec import is_spec, remember_original
from npu_lint.fixers.dispatch.wording import refresh_wording
from npu_lint.veomni.profile import ApiProfile, Generation, builtin_profile, detect_profile

if TYPE_CHECKING:  # pragma: no cover
    from npu_lint.core.source import SourceFile
    from npu_lint.veomni.project import Project

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
    result = migrate_cached(text, path, names, transformers_root())
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
    if is_spec(text, path) and result.handles and os.path.isfile(runtime_patch):
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
        remember_original(path, result.text, text)
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
    if (
        not ops and "OpSlot" not in source.text
    ):  # an NPU spec that only re-registers the GPU `__init__`s (NPU208)
        title = f"Re-register the GPU spec's `__init__` overrides that build the {api.handle} handles"
    elif ops:
        title += f" ({', '.join(ops)}) owned by {len(classes)} class(es)"
    return Fix(title, edits, result.applicability, (), "; ".join(result.reasons))
