"""NPU503 incomplete-registration."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import (
    _CLASS,
    _CONFIG_ATTR,
    Registration,
    _class_block,
    _defines,
    _diag,
    _first_line_range,
    _guarded,
    _imports,
    _linted,
    _model_dir,
    _model_type,
    _registrations,
    _top_level_names,
    packages,
)
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project


class IncompleteRegistration(ProjectRule):
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    code = "NPU503"
    name = "incomplete-registration"
    summary = (
        "A vision-language package does not register both its multimodal and its text-backbone model types, "
        "registers classes its generated module lacks, or never returns a head class it imports."
    )
    why = (
        "Registration is keyed by `config.json`'s `model_type`. A VLM's generated module serves two model types: "
        "the multimodal wrapper (`...ForConditionalGeneration`, e.g. `gemma3`) and its text backbone "
        "(`...ForCausalLM`, e.g. `gemma3_text`). A type that is not registered silently falls back to the stock "
        "transformers class, without VeOmni's patches (and without the NPU kernels). A registered function "
        "that imports a class the generated module does not define fails only when that model is built. A "
        "registration that imports a head (`...ForTokenClassification`) from the generated module but whose "
        '`if "..." in architecture` dispatch never returns it builds such checkpoints as its fallback class '
        "(usually the causal LM): the wrong head trains without an error."
    )
    bad = (
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy_text")
            def register_toy_text_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM

                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the generated module defines `ToyForConditionalGeneration` (model type `toy`)",
        ),
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

                return ToyForConditionalGeneration


            @MODELING_REGISTRY.register("toy_text")
            def register_toy_text_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForTokenClassification

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                else:
                    return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="`ToyForTokenClassification` is imported, but no architecture branch returns it",
        ),
    )
    good = (
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

                return ToyForConditionalGeneration


            @MODELING_REGISTRY.register("toy_text")
            def register_toy_text_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForTokenClassification

                if "ForTokenClassification" in architecture:
                    return ToyForTokenClassification
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = (
        "No fix: which classes a new model type should return (and whether the package means to be text-only) "
        "is a decision for the author."
    )

    @staticmethod
    def _type_of(text: str, cls: str, source_module: str | None) -> str | None:
        block = _class_block(text, cls)
        match = _CONFIG_ATTR.search(block or "")
        if match is None:
            return None
        return _model_type(source_module, match.group(1) or match.group(2))

    def _unreturned_heads(
        self, init: str, reg: Registration, by_module: dict[str, str]
    ) -> Iterable[Diagnostic]:
        """``ForTokenClassification`` imported from the generated module, and an ``if "..." in architecture``
        dispatch none of whose returns gives it: that checkpoint silently builds the fallback class."""
        func = reg.function
        if not func.args.args:
            return
        arch = func.args.args[0].arg
        tests: list[ast.Compare] = []
        returned: set[str] = set()
        for node in ast.walk(func):
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Name) and c.id == arch for c in node.comparators
            ):
                tests.append(node)
            elif isinstance(node, ast.Return):
                if not isinstance(node.value, ast.Name):
                    return  # a computed return (a table, a call): not a plain dispatch
                returned.add(node.value.id)
        if not tests:
            return
        imported = {name for module, name, _ in reg.imports if module in by_module}
        if not returned <= imported:
            return  # returns a local variable: the dispatch is not read here
        fallback = None
        last = max(tests, key=lambda t: t.lineno)
        for node in ast.walk(func):
            if isinstance(node, ast.If) and node.test is last and node.orelse:
                tail = node.orelse[-1]
                if isinstance(tail, ast.Return) and isinstance(tail.value, ast.Name):
                    fallback = tail.value.id
        first = min(tests, key=lambda t: t.lineno)
        for name in sorted(imported - returned):
            head = name.find("For")
            if head <= 0:
                continue  # base models (`...Model`, `...TextModel`) are set up as parts of the heads
            gets = f"`{fallback}`" if fallback else "the fallback"
            yield _diag(
                self,
                init,
                first.lineno,
                f"`{func.name}` imports `{name}` from the generated module, but no branch of its "
                f"`{arch}` dispatch returns it: a `...{name[head:]}` checkpoint is built as {gets}",
                col=first.col_offset,
                end_line=first.end_lineno,
                end_col=first.end_col_offset,
            )

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        for pkg in packages(paths):
            if pkg.init is None or os.path.normpath(pkg.init) not in linted:
                continue
            parsed = patchgen.load_file(pkg.init)
            if parsed is None or parsed.tree is None:
                continue
            regs = _registrations(parsed.tree)
            if not regs:
                continue
            by_module = {os.path.basename(g)[:-3]: g for g in pkg.generated}
            registered = {t for r in regs for t in r.types}
            # reverse check: imported names the generated module lacks
            for reg in regs:
                for module, name, node in reg.imports:
                    gen_path = by_module.get(module)
                    if gen_path is None or name == "*":
                        continue
                    names = _top_level_names(gen_path)
                    if names is None or _defines(gen_path, name, names):
                        continue
                    yield _diag(
                        self,
                        pkg.init,
                        node.lineno,
                        f"`{reg.function.name}` imports `{name}` from `{module}`, which does not define it",
                        col=node.col_offset,
                        end_line=node.end_lineno,
                        end_col=node.end_col_offset,
                    )
            # a head class imported for the model type that no branch of the architecture dispatch returns
            for reg in regs:
                yield from self._unreturned_heads(pkg.init, reg, by_module)
            # the multimodal / text-backbone pair
            used = {m for r in regs for m, _, _ in r.imports}
            gpu_modules = sorted(m for m in used if m in by_module and m.endswith("_gpu")) or sorted(
                m for m in used if m in by_module
            )
            if not gpu_modules:
                continue
            gen_path = by_module[gpu_modules[0]]
            gen_file = patchgen.load_file(gen_path)
            if gen_file is None:
                continue
            text = gen_file.text
            classes = set(_CLASS.findall(text))
            banner = patchgen.generated_banner(gen_path, text)
            prefixes = sorted(
                c[: -len("ForConditionalGeneration")]
                for c in classes
                if c.endswith("ForConditionalGeneration")
            )
            main = [p for p in prefixes if p and not any(q != p and p.startswith(q) for q in prefixes)]
            missing: list[str] = []
            source_known = _model_dir(banner.source_module) is not None
            for prefix in main:
                fcg, clm = f"{prefix}ForConditionalGeneration", f"{prefix}ForCausalLM"
                mm_type = self._type_of(text, fcg, banner.source_module)
                text_type = self._type_of(text, clm, banner.source_module) if clm in classes else None
                if not source_known and clm in classes:
                    # no transformers source for this model: VeOmni's convention, `<m>` and `<m>_text`
                    if mm_type is None:
                        text_types = [
                            t for r in regs if _imports(r, clm) for t in r.types if t.endswith("_text")
                        ]
                        mm_type = text_types[0][: -len("_text")] if text_types else None
                    if text_type is None:
                        mm_types = (
                            [mm_type] if mm_type else [t for r in regs if _imports(r, fcg) for t in r.types]
                        )
                        text_type = f"{mm_types[0]}_text" if mm_types else None
                if mm_type is not None and mm_type not in registered:
                    missing.append(f"the multimodal model type `{mm_type}` (`{fcg}`)")
                if text_type is not None and text_type not in registered:
                    missing.append(f"the text-backbone model type `{text_type}` (`{clm}`)")
            if missing:
                first = regs[0]
                col, end = _first_line_range(pkg.init, first.decorator_line)
                have = ", ".join(f"`{t}`" for t in sorted(registered))
                yield _diag(
                    self,
                    pkg.init,
                    first.decorator_line,
                    f"`{gpu_modules[0]}` serves {' and '.join(missing)}, but `__init__.py` registers only {have}: "
                    "unregistered types load the stock transformers class",
                    col=col,
                    end_col=end,
                )
