"""NPU208 sibling-missing-handle-init."""

from __future__ import annotations

import ast
import os
import re

from npu_lint.rules._handles import migration_fix
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.dispatch._shared import summarised
from npu_lint.veomni.patchgen import load_file

_SLOT_DECL = re.compile(r"\b(?:OpSlot|OpsConfigSlot)\(")


def _spec_targets(tree: ast.Module) -> tuple[dict[str, str], dict[str, str]]:
    """(decorated function -> target, ``replacement=`` function -> target) of a spec's registrations."""
    decorated: dict[str, str] = {}
    registered: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            for dec in stmt.decorator_list:
                if (
                    isinstance(dec, ast.Call)
                    and isinstance(dec.func, ast.Attribute)
                    and dec.func.attr in ("override_method", "replace_function")
                    and dec.args
                    and isinstance(dec.args[0], ast.Constant)
                    and isinstance(dec.args[0].value, str)
                ):
                    decorated[stmt.name] = dec.args[0].value
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in ("override_method", "replace_function")
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            repl = next((k.value for k in call.keywords if k.arg == "replacement"), None)
            if isinstance(repl, ast.Name):
                registered[repl.id] = call.args[0].value
    return decorated, registered


def _builds_handle(fn: ast.FunctionDef, handles: tuple[str, ...]) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in handles
        for n in ast.walk(fn)
    )


class SiblingMissingHandleInit(Rule):
    code = "NPU208"
    name = "sibling-missing-handle-init"
    summary = (
        "An NPU spec re-registers the GPU spec's patches of a class but not the `__init__` override that builds "
        "the handles they call (or the GPU spec still has OpSlot dispatch whose migration adds such overrides)."
    )
    why = (
        "An NPU sibling spec of the re-registering shape (a fresh `PatchConfig` that imports the GPU spec's patch "
        "functions and registers them with `replacement=`) only gets the patches it names. When the GPU spec "
        'builds handles in `override_method("<Cls>.__init__")` and calls them in `<Cls>.forward`, an NPU spec '
        "that re-registers the forward but not the `__init__` generates a module that calls `self.veomni_*` "
        "attributes nothing builds: it fails at the first forward. The same happens to every such sibling the "
        "moment its GPU spec is migrated from OpSlot dispatch, which is why a GPU spec that still has OpSlot "
        "declarations is reported here too. VeOmni's maintainers re-register the `__init__` overrides in their "
        "NPU siblings (qwen3, qwen3_vl, seed_oss, qwen3_moe @5d90dd16). A spec in the `deepcopy(gpu_config)` "
        "shape inherits every patch and is never reported. On an OpSlot-generation tree under "
        '`target-api = "auto"` the GPU spec cannot be migrated, so only a missing `__init__` re-registration is '
        "reported (NPU201's per-file summary covers the OpSlot dispatch). A missing `__init__` is reported at "
        "this spec's first registration of a patch of its class, where its own registration belongs."
    )
    bad = (
        Example(
            """
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import toy_rmsnorm_forward_patched
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x_npu.py")
            config.override_method("ToyRMSNorm.forward", replacement=toy_rmsnorm_forward_patched)
            """,
            fixed="""
            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import (
                toy_rmsnorm_forward_patched,
                toy_rmsnorm_init_patched,
            )
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x_npu.py")
            config.override_method("ToyRMSNorm.forward", replacement=toy_rmsnorm_forward_patched)


            config.add_import("veomni.models_kernel.utils.op_utils", names=["resolve_op_impl"])
            config.add_import("veomni.ops", names=["VeomniOp"])


            config.override_method(
                "ToyRMSNorm.__init__",
                replacement=toy_rmsnorm_init_patched,
                description="Construct the VeomniOp handles of ToyRMSNorm in __init__",
            )
            """,
            path="tests/fixtures/sibling/veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the GPU sibling (tests/fixtures/sibling/...) builds ToyRMSNorm's handle in an `__init__` override",
        ),
    )
    good = (
        Example(
            """
            from copy import deepcopy

            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config

            config = deepcopy(gpu_config)
            config.target_file = "patched_modeling_toy_npu.py"
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`): it imports the GPU spec's `__init__` "
        "overrides of the classes this spec re-registers (and the overrides that call a handle in place of a "
        "replaced function it re-registers) and registers them with `replacement=`; when the GPU spec still has "
        "OpSlot dispatch, the registrations are those its migration will add (the same function names). "
        "Display-only, with the reason, while the GPU spec cannot be migrated exactly."
    )
    requires = ("_gpu_patch_gen_config",)  # it compares the spec with the GPU spec it imports
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """NPU patch specs, wherever they live (the file name says what it is)."""
        return ctx.source.path.endswith("_npu_patch_gen_config.py") and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        gpu_import = next(
            (
                s
                for s in node.body
                if isinstance(s, ast.ImportFrom)
                and (s.module or "").endswith("_gpu_patch_gen_config")
                and any(a.name != "config" for a in s.names)
            ),
            None,
        )
        if gpu_import is None:
            return
        _, registered = _spec_targets(node)
        if not registered:
            return
        gpu_path = os.path.join(
            os.path.dirname(self.ctx.source.path), (gpu_import.module or "").rsplit(".", 1)[-1] + ".py"
        )
        parsed = load_file(gpu_path)  # the run's one tree of the file (shared with the file pass)
        if parsed is None or parsed.tree is None:
            return
        gpu_text, gpu_tree = parsed.text, parsed.tree
        api = getattr(getattr(self.ctx, "project", None), "api", None)
        handles = tuple({getattr(api, "handle", None) or "VeomniOp", "VeomniOp", "VeomniKernel"})
        decorated, _ = _spec_targets(gpu_tree)
        targets_here = set(registered.values())
        classes = {t.split(".")[0] for t in targets_here if "." in t}
        fns = {s.name: s for s in gpu_tree.body if isinstance(s, ast.FunctionDef)}
        missing = sorted(
            target
            for name, target in decorated.items()
            if target.endswith(".__init__")
            and target.split(".")[0] in classes
            and target not in targets_here
            and _builds_handle(fns[name], handles)
        )
        if missing:
            # each at this spec's first registration of a patch of that class (where the re-registration
            # belongs), else at the import of the GPU spec's patches
            first: dict[str, ast.Call] = {}
            for stmt in node.body:
                call = stmt.value if isinstance(stmt, ast.Expr) else None
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "override_method"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                    and any(k.arg == "replacement" for k in call.keywords)
                ):
                    first.setdefault(call.args[0].value.split(".")[0], call)
            by_anchor: dict[int, tuple[ast.AST, list[str]]] = {}
            for target in missing:
                anchor: ast.AST = first.get(target.split(".")[0], gpu_import)
                by_anchor.setdefault(id(anchor), (anchor, []))[1].append(target)
            for anchor, targets in sorted(by_anchor.values(), key=lambda a: a[0].lineno):  # type: ignore[attr-defined]
                self.report(
                    anchor,
                    f"this NPU spec re-registers GPU patches but not {', '.join(f'`{m}`' for m in targets)}, "
                    "which build the handles those patches call: the generated NPU module would call attributes "
                    "nothing builds",
                    migration_fix(self.ctx),
                )
            return
        elif summarised(self.ctx.project.api):
            return  # an OpSlot-generation tree: the GPU spec cannot be migrated there (NPU201 says so per file)
        elif _SLOT_DECL.search(gpu_text) and any(decorated.get(fn) for fn in registered if fn in decorated):
            message = (
                "this NPU spec re-registers patches of a GPU spec that still uses OpSlot dispatch: migrating the "
                "GPU spec adds `__init__` overrides that build the handles, which this spec must re-register too"
            )
        else:
            return
        self.report(gpu_import, message, migration_fix(self.ctx))
