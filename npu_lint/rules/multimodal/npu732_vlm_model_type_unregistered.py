"""NPU732 vlm-model-type-unregistered."""

from __future__ import annotations

import os
from collections.abc import Iterable

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules._registration import LITERAL_TYPE_LOOP, REGISTRATION_FIX_SAFETY, TWO_LOADERS
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project
from npu_lint.veomni.vlmtypes import (
    _registrations,
    foreign_returns,
    sibling_types,
    unregistered_helper,
    unregistered_vlm_types,
    unresolved_text_configs,
)


def _generated(directory: str) -> dict[str, str]:
    """The package's generated modules by basename (``patched_modeling_<m>_gpu``)."""
    gen_dir = os.path.join(directory, "generated")
    try:
        names = sorted(os.listdir(gen_dir))
    except OSError:
        return {}
    return {
        n[:-3]: os.path.join(gen_dir, n)
        for n in names
        if n.startswith("patched_modeling_") and n.endswith(".py")
    }


class VlmModelTypeUnregistered(ProjectRule):
    code = "NPU732"
    per_package = True  # findings of one model package at a time
    name = "vlm-model-type-unregistered"
    summary = (
        "A vision-language package does not register every model type of the VLM under its own key: the "
        "multimodal wrapper's (`gemma3`) and the text backbone's (`gemma3_text`) that its generated module serves, "
        "or a type's key resolves only to the classes of its sibling type, or the VLM's config is registered while "
        "its text sub-config's type resolves nowhere."
    )
    why = (
        "Registration is keyed by `config.json`'s `model_type`, and a VLM is several model types: the multimodal "
        "wrapper (`...ForConditionalGeneration`, e.g. `qwen3_5`) and its text backbone (`...ForCausalLM`, e.g. "
        "`qwen3_5_text`), both served by the package's generated module. A checkpoint of a type that is not registered "
        "finds no VeOmni model: the modeling registry's lookup raises (`Unknown Modeling name`), and the only way "
        "round it, `MODELING_BACKEND=hf`, loads the stock transformers class without VeOmni's patches or NPU "
        "kernels; a "
        "loader keyed by one type that returns only classes of its sibling (the text backbone's classes under the "
        "wrapper's key, the wrapper under `<m>_text`, whose config has no `vision_config`) cannot build that "
        "type's checkpoints, and leaves the sibling's key unregistered. The model type of each class is read from "
        "its config annotation and the installed transformers configuration source (VeOmni's `<m>` / `<m>_text` "
        "convention when transformers has no such model). Registration is read however it is written (decorators, "
        "`register(...)` calls, `REGISTRY[...] = fn`, loops over literal types; a type a sibling package "
        "registers as a modeling key counts); a helper that loads a missing "
        "type's class but is registered under no type is where the finding goes. Only modeling registrations count "
        "(a config registered alone builds nothing); the loaders' other faults are NPU503's."
        " A package that registers the config of a VLM type (`MODEL_CONFIG_REGISTRY`) takes over that VLM's config "
        'resolution, so the model type of the config\'s text sub-config (`sub_configs["text_config"]`, read from '
        "the installed transformers source or the tree's own configuration module, when it is the VLM's "
        "`<m>_<part>`) must resolve too: registered as a config key (to the VLM's config) or a modeling key, by the "
        "package or a sibling package; otherwise a checkpoint whose config.json names the text type keeps the stock "
        "config and finds no VeOmni model."
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


            def register_toy_text_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM

                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the text-backbone helper is written but never registered (reported at the helper)",
        ),
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForConditionalGeneration

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                return ToyForConditionalGeneration


            @MODELING_REGISTRY.register("toy_text")
            def register_toy_text_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

                return ToyForConditionalGeneration
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the text-backbone type resolves to the multimodal wrapper",
        ),
        Example(
            """
            from ...loader import MODEL_CONFIG_REGISTRY


            @MODEL_CONFIG_REGISTRY.register("qwen2_vl")
            def register_qwen2_vl_config():
                from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig

                return Qwen2VLConfig
            """,
            path="veomni/models/transformers/qwen2_vl/__init__.py",
            title="the VLM's config is registered, its text sub-config's type `qwen2_vl_text` nowhere",
        ),
    )
    good = (
        TWO_LOADERS,
        LITERAL_TYPE_LOOP,
        Example(
            """
            from ...loader import MODEL_CONFIG_REGISTRY


            @MODEL_CONFIG_REGISTRY.register("qwen2_vl")
            @MODEL_CONFIG_REGISTRY.register("qwen2_vl_text")
            def register_qwen2_vl_config():
                from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig

                return Qwen2VLConfig
            """,
            path="veomni/models/transformers/qwen2_vl/__init__.py",
            title="a text checkpoint's config resolves to the VLM's config",
        ),
    )
    fix_safety = REGISTRATION_FIX_SAFETY

    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        return list(self._check(project, paths))

    def _check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        for init in sorted({p for p in paths if os.path.basename(p) == "__init__.py"}):
            parsed = patchgen.load_file(init)
            if parsed is None or parsed.tree is None:
                continue
            if "MODEL_CONFIG_REGISTRY" in parsed.text:
                yield from self._text_configs(parsed, init, project)
            by_module = _generated(os.path.dirname(init))
            if not by_module:
                continue
            regs = _registrations(parsed.tree)
            if not regs:
                continue
            registered = {t for r in regs for t in r.types}
            for reg in regs:
                for node, name, own_type in foreign_returns(reg, by_module, every_branch=True):
                    if not any(sibling_types(own_type, t) for t in reg.types):
                        continue  # an unrelated type: NPU503
                    keys = " or ".join(f"`{t}`" for t in reg.types)
                    note = (
                        "" if own_type in registered else f", and `{own_type}` itself is registered nowhere"
                    )
                    yield self._diag(
                        parsed,
                        init,
                        node.lineno,
                        f"`{reg.function.name}` is registered for {keys} but returns `{name}`, a class of the "
                        f"sibling model type `{own_type}`{note}: a {keys} checkpoint is built with a class that "
                        "expects the other config (a text-only checkpoint given the multimodal wrapper has no "
                        "vision_config)",
                        node.col_offset,
                        node.end_col_offset,
                    )
            gap = unregistered_vlm_types(regs, by_module, init, project)
            if gap is None:
                continue
            line = regs[0].decorator_line
            helper = unregistered_helper(parsed.tree, set(gap.classes))
            note = ""
            if helper is not None:
                line = helper.lineno
                note = f" (`{helper.name}` loads it but is registered under no model type)"
            have = ", ".join(f"`{t}`" for t in sorted(registered))
            yield self._diag(
                parsed,
                init,
                line,
                f"`{gap.module}` serves {' and '.join(gap.missing)}, but `__init__.py` registers only {have}"
                f"{note}: a checkpoint of an unregistered type finds no VeOmni model (`MODELING_REGISTRY` raises "
                "`Unknown Modeling name`; `MODELING_BACKEND=hf` would load the stock transformers class, unpatched)",
            )

    def _text_configs(self, parsed: patchgen.ParsedFile, init: str, project: Project) -> Iterable[Diagnostic]:
        """A config loader of a VLM type whose config's text sub-config type no registry resolves."""
        assert parsed.tree is not None
        for gap in unresolved_text_configs(parsed.tree, init, project):
            reg = gap.registration
            keys = " and ".join(f"`{t}`" for t in reg.types)
            yield self._diag(
                parsed,
                init,
                reg.line,
                f"`{reg.function.name}` registers `{reg.config_class}` for {keys}, but the model type of its text "
                f"sub-config (`{gap.text_class}`), `{gap.text_type}`, is registered in no registry: a checkpoint "
                f"whose config.json names `{gap.text_type}` keeps the stock config and finds no VeOmni model "
                f"(register `{gap.text_type}` too, as a config key resolving to `{reg.config_class}` or as a "
                "modeling key)",
            )

    def _diag(
        self,
        parsed: patchgen.ParsedFile,
        path: str,
        line: int,
        message: str,
        col: int | None = None,
        end_col: int | None = None,
    ) -> Diagnostic:
        text = parsed.lines[line - 1] if 0 < line <= len(parsed.lines) else ""
        return Diagnostic(
            code=self.code,
            name=self.name,
            message=message,
            path=path,
            line=line,
            col=len(text) - len(text.lstrip()) if col is None else col,
            end_line=line,
            end_col=len(text.rstrip()) if end_col is None else end_col,
            fix=None,
            origin=None,
            severity=self.severity,
            source_line=text,
        )
