"""NPU308 gpu-import-on-npu-path."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_lint.core.astutil import absolute_module, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.registry import npu_file
from npu_lint.veomni.resolution import MARKERS, module_of
from npu_lint.veomni.vendor_map import GPU_ATTENTION, GPU_KERNEL, VENDOR_PACKAGES

_BRANCH_WORDS = ("use_non_eager_impl", "is_bound", "bound_kernel", "impl", "available", "cuda", "CUDA")
_GUARD_WORDS = ("available", "TYPE_CHECKING", "is_cuda", "IS_CUDA", "version")


def _gpu_package(module: str | None) -> str | None:
    if not module:
        return None
    top = module.split(".", 1)[0]
    return top if VENDOR_PACKAGES.get(top) in (GPU_KERNEL, GPU_ATTENTION) else None


def _unguarded_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs when it loads: top level and plain ``if`` blocks, not under a
    ``try`` (an ImportError fallback) nor an availability / ``TYPE_CHECKING`` test."""
    out: list[ast.Import | ast.ImportFrom] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif isinstance(stmt, ast.If) and not any(w in ast.unparse(stmt.test) for w in _GUARD_WORDS):
            out.extend(_unguarded_imports(stmt.body))
            out.extend(_unguarded_imports(stmt.orelse))
    return out


class GpuImportOnNpuPath(Rule):
    code = "NPU308"
    name = "gpu-import-on-npu-path"
    summary = (
        "A registration module imports GPU-only kernel code when it loads (a GPU vendor package, or a tree "
        "module that imports one at its top), or NPU-targeted model code imports a GPU vendor package."
    )
    why = (
        "Registration modules (`KernelSpec`, `register_op`, `OpSpec` tables and the kernel packages' "
        "`__init__`) are imported on every host to register their rows before any backend is chosen; that is "
        "why their GPU kernels are imported lazily, inside the factory or wrapper that the selected backend "
        "runs. A module-level import of `fla`, `liger_kernel`, `quack`, `tilelang`... -- written directly, or "
        "through a module of the tree that imports one at its top -- makes importing the registry fail on an "
        "Ascend host, which has none of them, before the NPU rows can be chosen. The same holds for code that "
        "only runs on NPU (an NPU patch spec, a generated `_npu` modeling file): a GPU vendor import there, "
        "even inside a function, is reached on Ascend only. The rule reads the imported tree modules' top-level "
        "imports statically (one level), and leaves imports under `try`, availability or `TYPE_CHECKING` "
        "tests alone."
    )
    bad = (
        Example(
            """
            from cutile_kernels.norm import fused_norm  # noqa: F401
            from flash_attn.ops.layer_norm import dropout_add_layer_norm

            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="a GPU vendor package imported when the registration module loads",
        ),
        Example(
            """
            def toy_attention_forward_npu(self, hidden_states):
                from liger_kernel.transformers.rope import liger_rotary_pos_emb as apply_rope_npu

                return apply_rope_npu(hidden_states, hidden_states, self.cos, self.sin)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an NPU spec importing Liger under an NPU name",
        ),
    )
    good = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
            from ...utils.import_utils import is_package_available

            if is_package_available("flash_attn"):
                from flash_attn.ops.layer_norm import dropout_add_layer_norm  # noqa: F401


            def _gpu_factory():
                from flash_attn.ops.layer_norm import dropout_add_layer_norm

                return dropout_add_layer_norm
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
        ),
    )
    fix_safety = "No fix: moving the import into the backend's factory is a refactor left to the author."
    requires = ("import",)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        path = self.ctx.source.path
        norm = "/" + path.replace("\\", "/").lstrip("/")
        if npu_file(Path(path)):
            self._npu_code()
            return
        text = self.ctx.source.text
        registry = any(m in text for m in MARKERS) or (
            norm.endswith("/__init__.py") and ("/veomni/ops/kernels/" in norm or "/veomni/kernels/" in norm)
        )
        if registry:
            self._registry()

    def _npu_code(self) -> None:
        found: list[tuple[ast.AST, str, str]] = []  # (import, module, its GPU package), in walk order
        for node in nodes_of(self.ctx.tree, ast.Import, ast.ImportFrom):
            if isinstance(node, ast.ImportFrom):
                if node.level != 0:
                    continue
                names = [node.module or ""]
            else:
                names = [a.name for a in node.names]  # type: ignore[attr-defined]
            for name in names:
                top = _gpu_package(name)
                if top is not None:
                    found.append((node, name, top))
                    break
        if not found:
            return  # no GPU import: no guard to look for
        guarded: set[int] = set()
        for node in ast.walk(self.ctx.tree):
            # a backend branch (a dispatch guard, an availability or implementation-name test) or an ImportError
            # fallback: the import runs only where its backend was chosen
            if isinstance(node, ast.If) and any(w in ast.unparse(node.test) for w in _BRANCH_WORDS):
                guarded.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
            elif isinstance(node, ast.Try):
                guarded.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
        for node, name, top in found:
            if id(node) in guarded:
                continue
            self.report(
                node,
                f"`{name}` is GPU-only (`{top}`) but this file runs only on Ascend (an NPU patch spec or "
                "generated `_npu` file): the import fails there, or binds a CUDA kernel to NPU tensors; "
                "use the op's NPU kernel",
            )

    def _registry(self) -> None:
        module, is_package = module_of(self.ctx.source.path)
        root = self.ctx.project.root
        for stmt in _unguarded_imports(self.ctx.tree.body):
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                base = absolute_module(module, is_package, stmt.level, stmt.module)
                targets = [base] if base else []
                if base and stmt.level:
                    targets += [f"{base}.{a.name}" for a in stmt.names]
            for target in targets:
                top = _gpu_package(target)
                via = None
                if top is None and root:
                    via, top = self._through_tree(str(root), target)
                if top is None:
                    continue
                how = f"through `{via}`, which imports `{top}` when it loads" if via else f"`{top}`"
                self.report(
                    stmt,
                    f"this registration module imports GPU-only kernel code when it loads ({how}): the registry "
                    "is imported on every host before a backend is chosen, so on Ascend (no such package) the "
                    "import fails before the NPU rows can be selected; import it inside the backend's factory",
                )
                break

    @staticmethod
    def _through_tree(root: str, module: str, depth: int = 3) -> tuple[str | None, str | None]:
        """A tree module (``veomni.ops.kernels.x.quack_gemm``) that imports a GPU vendor package when it loads,
        itself or through the tree modules it imports at its top (a few levels)."""
        parts = module.split(".")
        if parts[0] != "veomni" or depth <= 0:
            return None, None
        base = Path(root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if not candidate.is_file():
                continue
            parsed = load_file(str(candidate))  # the run's one store of parsed files
            tree = parsed.tree if parsed is not None else None
            if tree is None:
                return None, None
            is_package = candidate.name == "__init__.py"
            inner: list[str] = []
            for stmt in _unguarded_imports(tree.body):
                if isinstance(stmt, ast.Import):
                    names = [a.name for a in stmt.names]
                else:
                    resolved = absolute_module(module, is_package, stmt.level, stmt.module)
                    names = [resolved] if resolved else []
                for name in names:
                    top = _gpu_package(name)
                    if top is not None:
                        return module, top
                    if name.startswith("veomni.") and not is_package:
                        inner.append(name)
            for name in inner:
                _via, top = GpuImportOnNpuPath._through_tree(root, name, depth - 1)
                if top is not None:
                    return module, top
            return None, None
        return None, None
