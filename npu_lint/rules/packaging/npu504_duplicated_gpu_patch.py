"""NPU504 duplicated-gpu-patch."""

from __future__ import annotations

import ast
import os
import textwrap
from collections.abc import Iterable

from npu_lint.core.astutil import parse_snippet
from npu_lint.core.diagnostics import Applicability, Diagnostic, Fix
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import _diag, _guarded, _linted, packages
from npu_lint.veomni import patchgen
from npu_lint.veomni.profile import Generation
from npu_lint.veomni.project import Project


def _slot_names(spec: patchgen.Spec) -> set[str]:
    """Names a spec binds to a module-global ``OpSlot(...)`` / ``OpsConfigSlot(...)``, at module level or in a
    post-import block."""
    names: set[str] = set()
    bodies: list[list[ast.stmt]] = []
    parsed = patchgen.load_file(spec.path)  # the run's tree of the spec, when it still holds the spec's text
    if parsed is not None and (parsed.text is spec.text or parsed.text == spec.text):
        tree = parsed.tree
    else:
        tree = parse_snippet(spec.text)
    if tree is not None:
        bodies.append(tree.body)
    for _line, code in spec.post_blocks:
        block = parse_snippet(textwrap.dedent(code))
        if block is not None:
            bodies.append(block.body)
    for body in bodies:
        for stmt in body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, (ast.Name, ast.Attribute))
                and (getattr(stmt.value.func, "id", None) or getattr(stmt.value.func, "attr", None))
                in ("OpSlot", "OpsConfigSlot")
            ):
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def _uses(node: ast.AST, names: set[str]) -> bool:
    return bool(names) and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


class DuplicatedGpuPatch(ProjectRule):
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    code = "NPU504"
    name = "duplicated-gpu-patch"
    summary = "An NPU spec re-defines a patch function that the GPU spec already has, with the same body."
    why = (
        "A copied patch drifts: the next fix to the GPU function does not reach the NPU module. When the bodies "
        "are equal (after the `name_map` renames), the NPU spec should reuse the GPU function "
        "(`replacement=` with the function imported from the GPU spec, or the `deepcopy(gpu_config)` shape, which "
        "keeps every GPU patch)."
    )
    bad = (
        Example(
            """
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_npu.py",
            )


            @config.override_method("ToyModel.forward", description="Embed then normalise")
            def toy_model_forward_npu(self, input_ids):
                hidden_states = self.embed_tokens(input_ids)
                return self.norm(hidden_states)
            """,
            fixed="""
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import (
                toy_model_forward_patched,
            )
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_npu.py",
            )


            config.override_method(
                "ToyModel.forward",
                replacement=toy_model_forward_patched,
                description="Embed then normalise",
            )
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the GPU spec's `toy_model_forward_patched` has the same body for `ToyModel.forward`",
        ),
    )
    good = (
        Example(
            """
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import toy_model_forward_patched
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_npu.py",
            )
            config.override_method("ToyModel.forward", replacement=toy_model_forward_patched)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "Unsafe: when the copy is registered with a decorator and used nowhere else, the fix deletes it, imports the "
        "GPU function from the GPU spec and registers it with `replacement=` (same target, description and "
        "`name_map`). The regenerated NPU file then carries the GPU function's docstring and comments, and imports "
        "that only the copy used become unused. Otherwise no fix (the message names both functions)."
    )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        reuse_gpu_patch_edits = self.fixer("npu_lint.fixers.npu_spec:reuse_gpu_patch_edits")
        linted = _linted(paths)
        for pkg in packages(paths):
            for npu_path in pkg.npu_specs:
                if os.path.normpath(npu_path) not in linted:
                    continue
                spec = patchgen.load_spec(npu_path)
                if spec is None or not spec.parsed:
                    continue
                gpu_path = npu_path[: -len(patchgen.NPU_SPEC_SUFFIX)] + patchgen.GPU_SPEC_SUFFIX
                gpu = patchgen.base_spec(spec) or (
                    patchgen.load_spec(gpu_path) if os.path.isfile(gpu_path) else None
                )
                if gpu is None:
                    continue
                # On a handle-generation tree the dispatch migration rewrites a body that calls a module-global
                # OpSlot, in both specs at once; reusing the GPU function first would leave the NPU spec with a
                # migrated body and none of the `__init__` overrides that build its handles (NPU208).
                slots = (
                    _slot_names(spec) | _slot_names(gpu)
                    if project.generation is not Generation.OP_SLOT
                    else set()
                )
                gpu_patches = {
                    (p.kind, p.target): p for p in patchgen.effective_patches(gpu) if p.kind != "helper"
                }
                for patch in spec.patches:
                    if patch.replacement is None or patch.replacement not in spec.defs:
                        continue
                    other = gpu_patches.get((patch.kind, patch.target))
                    if other is None or other.replacement is None:
                        continue
                    ref = spec.resolve(patch.replacement)
                    other_owner = patchgen.load_spec(other.spec_path)
                    other_ref = other_owner.resolve(other.replacement) if other_owner else None
                    if ref is None or other_ref is None or other_ref.path == ref.path:
                        continue
                    mine = patchgen.replacement_node(ref, patch.name_map)
                    theirs = patchgen.replacement_node(other_ref, other.name_map)
                    if mine is None or theirs is None:
                        continue
                    if not isinstance(mine[0], type(theirs[0])):
                        continue
                    args_equal = ast.dump(getattr(mine[0], "args", ast.arguments())) == ast.dump(
                        getattr(theirs[0], "args", ast.arguments())
                    )
                    if args_equal and patchgen.same_body(mine[0], mine[1], theirs[0], theirs[1]):
                        node = ref.node
                        fix = None
                        gpu_module = patchgen.module_of(other_ref.path)
                        if (
                            gpu_module is not None
                            and patch.name_map == other.name_map
                            and not _uses(other_ref.node, slots)
                        ):
                            edits = reuse_gpu_patch_edits(spec, patch, gpu_module, other_ref.node.name)
                            if edits:
                                fix = Fix(
                                    f"Register `{other_ref.node.name}` from {os.path.basename(other_ref.path)} "
                                    "instead of the copy",
                                    tuple(edits),
                                    Applicability.UNSAFE,
                                    reason="the NPU generated file then takes the GPU function's docstring and "
                                    "comments (regenerate it); imports only the copy used become unused",
                                )
                        yield _diag(
                            self,
                            npu_path,
                            node.lineno,
                            f"`{node.name}` repeats `{other_ref.node.name}` "
                            f"({os.path.basename(other_ref.path)}:{other_ref.line}, same body for `{patch.target}`): "
                            "import and reuse it instead of a copy",
                            col=node.col_offset,
                            fix=fix,
                            basis=spec.text,
                        )
