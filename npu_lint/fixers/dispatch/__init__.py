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

Modules, in the order they depend on each other (each can be read alone):

* :mod:`.plan` - the names the migration writes, the plan (slots, functions, handles per class), the result;
* :mod:`.spec` - reading a spec or module with ``ast``: slot declarations, decorators, registrations;
* :mod:`.vendor` - vendor patches restated as slot dispatch (step 5);
* :mod:`.owners` - which classes own the handles and which ``__init__`` builds them (step 2);
* :mod:`.analysis` - what the file dispatches and where: the plan of one file (steps 1-4);
* :mod:`.rewrite` - the libcst rewrite of function bodies (steps 3-4);
* :mod:`.assemble` - the plan applied to the whole module; one text's migration end to end;
* :mod:`.wording` - comments and descriptions reworded (step 6);
* :mod:`.siblings` - NPU sibling specs and the specs that depend on a migrated one (step 6);
* :mod:`.migrate` - the entry points: ``migrate_source`` and ``build_migration_fix``.

Anything that cannot be migrated exactly makes the fix ``display`` with the reason; outside any VeOmni tree the
built-in profile's names are used and the fix is ``unsafe``.
"""

from __future__ import annotations

from npu_lint.fixers.dispatch.migrate import (
    build_migration_fix,
    edits_between,
    migrate_source,
    normalize_generation,
    opslot_reason,
    target_profile,
)
from npu_lint.fixers.dispatch.plan import HandleSpec, MigrationResult, Names
from npu_lint.fixers.dispatch.siblings import SiblingResult, sibling_registrations, spec_dependents
from npu_lint.fixers.dispatch.vendor import external_patch_target, vendor_prepass
from npu_lint.fixers.dispatch.wording import refresh_wording

__all__ = [
    "HandleSpec",
    "MigrationResult",
    "Names",
    "SiblingResult",
    "build_migration_fix",
    "edits_between",
    "external_patch_target",
    "migrate_source",
    "normalize_generation",
    "opslot_reason",
    "refresh_wording",
    "sibling_registrations",
    "spec_dependents",
    "target_profile",
    "vendor_prepass",
]
