"""NPU5xx: packaging. NPU patch specs, registration, generated files, the transformers pin.

These are project rules (``ProjectRule.check(project, paths)``): they run once over every linted path and
look at a model package as a whole (``<m>_gpu_patch_gen_config.py``, its NPU sibling, ``__init__.py``,
``generated/``). They read files statically; nothing is imported.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from npu_lint import patchgen
from npu_lint.astutil import transformers_dir
from npu_lint.diagnostics import Applicability, CreateFile, Diagnostic, Fix, Origin
from npu_lint.rules.base import Example, ProjectRule


def _guarded(check: Callable[..., Iterable[Diagnostic]]) -> Callable[..., list[Diagnostic]]:
    """A project rule reads a whole tree: an unexpected file shape must end that rule's pass, not the run
    (``NPU_LINT_DEBUG=1`` re-raises)."""

    @functools.wraps(check)
    def wrapper(self: ProjectRule, project: object, paths: list[str]) -> list[Diagnostic]:
        out: list[Diagnostic] = []
        try:
            for diag in check(self, project, paths):
                out.append(diag)
        except Exception:
            if os.environ.get("NPU_LINT_DEBUG"):
                raise
        return out

    return wrapper


# -- the model packages among the linted paths ---------------------------------------------------------


@dataclass
class Package:
    dir: str  # in the style of the linted paths
    specs: list[str] = field(default_factory=list)
    init: str | None = None
    generated: list[str] = field(default_factory=list)  # generated/patched_modeling_*.py

    @property
    def gpu_specs(self) -> list[str]:
        return [s for s in self.specs if s.endswith(patchgen.GPU_SPEC_SUFFIX)]

    @property
    def npu_specs(self) -> list[str]:
        return [s for s in self.specs if s.endswith(patchgen.NPU_SPEC_SUFFIX)]

    def targets(self) -> set[str]:
        out = set()
        for path in self.specs:
            spec = patchgen.load_spec(path)
            if spec is not None:
                target = patchgen.effective_target_file(spec)
                if target:
                    out.add(target)
        return out


_MEMO: dict[tuple[str, ...], list[Package]] = {}


def packages(paths: list[str]) -> list[Package]:
    """Model packages (directories with a ``*_patch_gen_config.py``) holding at least one linted file."""
    key = tuple(paths)
    if key in _MEMO:
        return _MEMO[key]
    dirs: dict[str, None] = {}
    for path in paths:
        directory = os.path.dirname(path)
        if os.path.basename(directory) == "generated":
            directory = os.path.dirname(directory)
        dirs.setdefault(directory, None)
    out = []
    for directory in sorted(dirs):
        specs = patchgen.package_specs(directory or ".")
        if not specs:
            continue
        if not directory:
            specs = [os.path.basename(s) for s in specs]
        pkg = Package(directory, specs)
        init = os.path.join(directory, "__init__.py")
        pkg.init = init if os.path.isfile(init) else None
        gen_dir = os.path.join(directory, "generated")
        try:
            names = sorted(os.listdir(gen_dir))
        except OSError:
            names = []
        pkg.generated = [
            os.path.join(gen_dir, n) for n in names if n.startswith("patched_modeling_") and n.endswith(".py")
        ]
        out.append(pkg)
    _MEMO.clear()
    _MEMO[key] = out
    return out


def _linted(paths: list[str]) -> set[str]:
    return {os.path.normpath(p) for p in paths}


def _lines(path: str) -> list[str]:
    parsed = patchgen.load_file(path)
    return parsed.lines if parsed is not None else []


def _diag(
    rule: type[ProjectRule] | ProjectRule,
    path: str,
    line: int,
    message: str,
    *,
    col: int = 0,
    end_col: int | None = None,
    end_line: int | None = None,
    fix: Fix | None = None,
    origin: Origin | None = None,
) -> Diagnostic:
    lines = _lines(path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if end_col is None:
        end_col = len(text)
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=message,
        path=path,
        line=line,
        col=col,
        end_line=end_line or line,
        end_col=end_col,
        fix=fix,
        origin=origin,
        severity=rule.severity,
        source_line=text,
    )


def _first_line_range(path: str, line: int) -> tuple[int, int]:
    lines = _lines(path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text) - len(text.lstrip()), len(text.rstrip())


# -- NPU501 ------------------------------------------------------------------------------------------


class MissingNpuSpec(ProjectRule):
    code = "NPU501"
    name = "missing-npu-spec"
    summary = "A model package has a GPU patch spec but no NPU sibling spec."
    why = (
        "VeOmni generates one patched modeling file per device from a patch spec "
        "(`<m>_gpu_patch_gen_config.py` -> `generated/patched_modeling_<m>_gpu.py`). Without "
        "`<m>_npu_patch_gen_config.py` there is no NPU module to load on an Ascend host, so the model cannot be "
        "migrated by switching the import. The smallest sibling is `config = deepcopy(gpu_config)` with its own "
        "`target_file`: every device-neutral GPU patch is reused, and only what the NPU path needs is added."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_gpu.py",
                description="Toy model with VeOmni patches",
            )
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="`toy_gpu_patch_gen_config.py` with no `toy_npu_patch_gen_config.py` next to it",
        ),
    )
    good = (
        Example(
            '''
            """NPU sibling of the toy GPU spec.

            Regen command:
            patchgen veomni.models.transformers.toy.toy_npu_patch_gen_config -o veomni/models/transformers/toy/generated --diff -v
            """

            from copy import deepcopy

            from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config


            config = deepcopy(gpu_config)
            config.target_file = "patched_modeling_toy_npu.py"
            config.description = "Toy model with VeOmni patches (Ascend NPU)"
            ''',
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the sibling npu-lint creates (the GPU spec is device-neutral)",
        ),
    )
    fix_safety = (
        "Creates `<m>_npu_patch_gen_config.py` (the `deepcopy(gpu_config)` shape, with the patchgen command in "
        "its docstring; ruff-formatted when ruff is installed). Safe: nothing imports the new file until the "
        "package's `__init__.py` chooses the NPU module (NPU502) and patchgen has been run. Unsafe when the GPU "
        "spec replaces classes with GPU-only libraries (liger_kernel...): those are listed in the new file and "
        "need NPU replacements first."
    )
    precision = (
        "veomni 0.1.12 `veomni/models`: 7 findings (gemma3, gpt_oss, llama, qwen2, qwen2_5_omni, qwen2_5vl, "
        "qwen2_vl: every GPU-only package), 7 true positives: 100%."
    )

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
        from npu_lint.fixers.npu_spec import build_npu_spec, format_many, npu_spec_path, npu_target_file

        linted = _linted(paths)
        found = []
        for pkg in packages(paths):
            targets = None
            for gpu in pkg.gpu_specs:
                if os.path.normpath(gpu) not in linted:
                    continue
                npu_path = npu_spec_path(gpu)
                if os.path.exists(npu_path):
                    continue
                spec = patchgen.load_spec(gpu)
                if spec is None or not spec.parsed or spec.config_node is None:
                    continue
                if targets is None:
                    targets = pkg.targets()
                npu_target = npu_target_file(spec)
                if npu_target in targets:
                    continue  # an NPU spec under another name exists
                found.append((pkg, gpu, spec, npu_path, npu_target, build_npu_spec(gpu, format=False)))
        plans = [(plan.content, plan.path) for *_, plan in found if plan is not None]
        # formatting runs ruff in a subprocess: only worth it when the file will be written or shown
        texts = format_many(plans) if self.fix_mode else [content for content, _ in plans]
        for pkg, gpu, spec, npu_path, npu_target, plan in found:
            fix = None
            if plan is not None:
                plan.content = texts.pop(0)
                unsafe = bool(plan.gpu_only)
                fix = Fix(
                    f"Create {os.path.basename(plan.path)} (deepcopy of the GPU spec), then run "
                    f"`{plan.command}`",
                    (),
                    Applicability.UNSAFE if unsafe else Applicability.SAFE,
                    (CreateFile(plan.path, plan.content),),
                    "the GPU spec uses GPU-only replacements that the NPU path must override: "
                    + "; ".join(plan.gpu_only)
                    if unsafe
                    else "",
                )
            col, end = _first_line_range(gpu, spec.config_line)
            yield _diag(
                self,
                gpu,
                spec.config_line,
                f"model package `{os.path.basename(pkg.dir) or '.'}` has a GPU patch spec but no NPU sibling "
                f"`{os.path.basename(npu_path)}` (target `{npu_target}`)",
                col=col,
                end_col=end,
                fix=fix,
            )


# -- NPU502 ------------------------------------------------------------------------------------------


class StaticGeneratedImport(ProjectRule):
    code = "NPU502"
    name = "static-generated-import"
    summary = "`__init__.py` imports the GPU generated module without choosing by `IS_NPU_AVAILABLE`."
    why = (
        "A registered modeling function that always imports `generated.patched_modeling_<m>_gpu` gives NPU hosts "
        "the GPU module even when an NPU spec exists (or is being created): the NPU patches are never used. "
        "Migrated packages choose at import time: `if IS_NPU_AVAILABLE: from .generated.patched_modeling_<m>_npu "
        "import ...` else the `_gpu` module, in every registered function."
    )
    bad = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            fixed="""
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel

                if "ForCausalLM" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the package has `toy_gpu_patch_gen_config.py` and `toy_npu_patch_gen_config.py`",
        ),
    )
    good = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = (
        "Unsafe: NPU hosts then import `patched_modeling_<m>_npu`, which must have been generated "
        "(`patchgen <m>_npu_patch_gen_config ...`). The fix rewrites each unconditional import in place "
        "(every registered function; the architecture fallback logic is untouched) and imports "
        "`IS_NPU_AVAILABLE` the way sibling packages do (relative `....utils.device`, or `veomni.utils.device`)."
    )
    precision = (
        "veomni 0.1.12 `veomni/models`: 7 findings (the `__init__.py` of the 7 GPU-only packages, one per "
        "unconditional import), 7 true positives: 100%."
    )

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
        from npu_lint.fixers import init_switch

        linted = _linted(paths)
        for pkg in packages(paths):
            if pkg.init is None or os.path.normpath(pkg.init) not in linted:
                continue
            parsed = patchgen.load_file(pkg.init)
            if parsed is None or parsed.tree is None:
                continue
            static = init_switch.find_static_imports(parsed.tree)
            if not static:
                continue
            targets = pkg.targets()
            existing = {os.path.basename(g) for g in pkg.generated}
            flag_edit = None
            if not init_switch.flag_bound(parsed.tree):
                module = init_switch.flag_import_module(pkg.init, parsed.tree)
                flag_edit = init_switch.flag_import_edit(parsed.text, parsed.tree, module)
            for item in static:
                gpu_file, npu_file = item.gpu_module + ".py", item.npu_module + ".py"
                if not ({gpu_file, npu_file} & targets or npu_file in existing):
                    continue  # no spec produces this module: nothing to choose from
                edit = init_switch.switch_edit(parsed.text, item)
                fix = None
                if edit is not None:
                    edits = (edit,) if flag_edit is None else (flag_edit, edit)
                    fix = Fix(
                        f"Choose `{item.npu_module}` when `IS_NPU_AVAILABLE`",
                        edits,
                        Applicability.UNSAFE,
                        reason="NPU hosts import the NPU generated module, which patchgen must have generated",
                    )
                where = f"`{item.function}`" if item.function else "the module"
                types = ", ".join(f"`{t}`" for t in item.model_types)
                registers = f" (registers {types})" if types else ""
                node = item.node
                yield _diag(
                    self,
                    pkg.init,
                    node.lineno,
                    f"{where}{registers} imports `{item.gpu_module}` on every device; choose "
                    f"`{item.npu_module}` with `if IS_NPU_AVAILABLE:`",
                    col=node.col_offset,
                    end_line=node.end_lineno or node.lineno,
                    end_col=node.end_col_offset,
                    fix=fix,
                )


# -- NPU503 ------------------------------------------------------------------------------------------

_TOP_NAME = re.compile(r"^(?:class|def|async def)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=", re.MULTILINE)
_CLASS = re.compile(r"^class\s+(\w+)\s*[(:]", re.MULTILINE)
_CONFIG_ATTR = re.compile(
    r"^\s{4}config(?:_class)?\s*[:=]\s*\"?(\w+)|^\s{4}def __init__\(\s*self,\s*config:\s*\"?(\w+)",
    re.MULTILINE,
)
_MODEL_TYPE = re.compile(r"^\s+model_type\s*[:=][^\"'\n]*[\"'](\w+)[\"']", re.MULTILINE)


def _top_level_names(path: str) -> set[str] | None:
    parsed = patchgen.load_file(path)
    if parsed is None:
        return None
    names = {a or b for a, b in _TOP_NAME.findall(parsed.text)}
    return names


def _defines(path: str, name: str, names: set[str]) -> bool:
    if name in names:
        return True
    parsed = patchgen.load_file(path)  # imported names, multi-line imports: ask the tree
    if parsed is None or parsed.tree is None:
        return True
    for stmt in parsed.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return True
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for tgt in targets:
                for node in ast.walk(tgt):
                    if isinstance(node, ast.Name) and node.id == name:
                        return True
        elif isinstance(stmt, (ast.If, ast.Try)):
            for node in ast.walk(stmt):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                    return True
                if isinstance(node, ast.alias) and (node.asname or node.name) == name:
                    return True
    return False


def _class_block(text: str, name: str) -> str | None:
    """The source of a top-level class (up to the next top-level statement), found textually."""
    match = re.search(rf"^class\s+{re.escape(name)}\s*[(:]", text, re.MULTILINE)
    if not match:
        return None
    line_end = text.find("\n", match.end())
    if line_end == -1:
        return text[match.start() :]
    pos = line_end + 1
    for line in text[pos:].splitlines(keepends=True):
        if line[:1] and not line[0].isspace() and not line.startswith(("#", ")")):
            break
        pos += len(line)
    return text[match.start() : pos]


def _transformers_dir() -> str | None:
    found = transformers_dir()
    return str(found) if found is not None else None


def _model_type(source_module: str | None, config_class: str) -> str | None:
    """``model_type`` of a transformers config class, read from the installed transformers source."""
    model_dir = _model_dir(source_module)
    if model_dir is None:
        return None
    try:
        names = sorted(
            n for n in os.listdir(model_dir) if n.startswith("configuration_") and n.endswith(".py")
        )
    except OSError:
        return None
    for name in names:
        parsed = patchgen.load_file(os.path.join(model_dir, name))
        if parsed is None:
            continue
        block = _class_block(parsed.text, config_class)
        if block is None:
            continue
        match = _MODEL_TYPE.search(block)
        if match:
            return match.group(1)
    return None


@dataclass
class Registration:
    function: ast.FunctionDef
    types: tuple[str, ...]
    decorator_line: int
    imports: list[tuple[str, str, ast.AST]]  # (generated module basename, name, node)


def _registrations(tree: ast.Module) -> list[Registration]:
    from npu_lint.fixers.init_switch import registered_types

    out = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        types = registered_types(stmt)
        if not types:
            continue
        imports: list[tuple[str, str, ast.AST]] = []
        aliases: dict[str, str] = {}
        for node in ast.walk(stmt):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                last = module.rsplit(".", 1)[-1]
                if last.startswith("patched_modeling_"):
                    for alias in node.names:
                        imports.append((last, alias.name, node))
                elif last == "generated":
                    for alias in node.names:
                        if alias.name.startswith("patched_modeling_"):
                            aliases[alias.asname or alias.name] = alias.name
        if aliases:
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                ):
                    imports.append((aliases[node.value.id], node.attr, node))
        line = min(d.lineno for d in stmt.decorator_list)
        out.append(Registration(stmt, types, line, imports))
    return out


def _imports(reg: Registration, name: str) -> bool:
    return any(n == name for _, n, _ in reg.imports)


def _model_dir(source_module: str | None) -> str | None:
    if not source_module or not source_module.startswith("transformers.models."):
        return None
    base = _transformers_dir()
    if base is None:
        return None
    model_dir = os.path.join(base, *source_module.split(".")[1:-1])
    return model_dir if os.path.isdir(model_dir) else None


class IncompleteRegistration(ProjectRule):
    code = "NPU503"
    name = "incomplete-registration"
    summary = (
        "A vision-language package does not register both its multimodal and its text-backbone model types, "
        "or registers classes its generated module lacks."
    )
    why = (
        "Registration is keyed by `config.json`'s `model_type`. A VLM's generated module serves two model types: "
        "the multimodal wrapper (`...ForConditionalGeneration`, e.g. `gemma3`) and its text backbone "
        "(`...ForCausalLM`, e.g. `gemma3_text`). A type that is not registered silently falls back to the stock "
        "transformers class, without VeOmni's patches (and without the NPU kernels). A registered function "
        "that imports a class the generated module does not define fails only when that model is built."
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
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM

                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = (
        "No fix: which classes a new model type should return (and whether the package means to be text-only) "
        "is a decision for the author."
    )
    precision = (
        "veomni 0.1.12 `veomni/models`: 1 finding (gemma3 registers only `gemma3_text` while its generated module "
        "defines `Gemma3ForConditionalGeneration`), 1 true positive by the registration contract: 100%. Model "
        "types are read from the installed transformers configuration classes; when one cannot be read the check "
        "is skipped."
    )

    @staticmethod
    def _type_of(text: str, cls: str, source_module: str | None) -> str | None:
        block = _class_block(text, cls)
        match = _CONFIG_ATTR.search(block or "")
        if match is None:
            return None
        return _model_type(source_module, match.group(1) or match.group(2))

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
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
            banner = patchgen.parse_generated(gen_path, text[:4096], full=False)
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


# -- NPU504 ------------------------------------------------------------------------------------------


class DuplicatedGpuPatch(ProjectRule):
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
    precision = (
        "veomni 0.1.12 `veomni/models`: 2 findings (seed_oss and glm_moe_dsa NPU specs copy the GPU "
        "`ForCausalLM.forward` patch, 66 identical lines each), 2 true positives: 100%."
    )

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
        from npu_lint.fixers.npu_spec import reuse_gpu_patch_edits

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
                        if gpu_module is not None and patch.name_map == other.name_map:
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
                        )


# -- NPU505 ------------------------------------------------------------------------------------------


class GeneratedDrift(ProjectRule):
    code = "NPU505"
    name = "generated-drift"
    summary = "A generated file no longer matches its patch spec (edited by hand, or not regenerated)."
    why = (
        "`generated/patched_modeling_<m>_<dev>.py` is produced by patchgen from the spec and must never be edited: "
        "the next regeneration silently drops a hand edit, and a spec change that was not regenerated is not what "
        "runs. Each patched section must hold the spec function's body (compared as normalised ASTs after "
        "`name_map`, ignoring docstrings, comments and formatting), every patch in the spec must have its section, "
        "and every section its patch. A spec whose generated file does not exist yet (a new NPU sibling) is "
        "reported on the spec. This works without patchgen (VeOmni's own gate is `patchgen --check`)."
    )
    bad = (
        Example(
            """
            # ======================================================================
            # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # Source: transformers.models.toy.modeling_toy
            # Based on: transformers==5.9.0
            # ======================================================================
            import torch
            from torch import nn


            # ======================================================================
            # [MODIFIED CLASS] ToyRMSNorm
            # Methods patched: forward
            # ======================================================================
            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return self.weight * hidden_states  # edited here, not in the spec
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the spec's `ToyRMSNorm.forward` patch has a different body",
        ),
    )
    good = (
        Example(
            """
            # ======================================================================
            # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # Source: transformers.models.toy.modeling_toy
            # Based on: transformers==5.9.0
            # ======================================================================
            import torch
            from torch import nn


            # ======================================================================
            # [MODIFIED CLASS] ToyRMSNorm
            # Methods patched: forward
            # ======================================================================
            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the section holds the spec function's body",
        ),
    )
    fix_safety = (
        "Display only: the fix is to regenerate, `patchgen <spec module> -o <package>/generated --diff -v` (the "
        "message's fix title gives the exact command; run it where patchgen is installed). npu-lint never edits "
        "`generated/`."
    )
    precision = (
        "veomni 0.1.12 `veomni/models`: 0 findings over 29 generated files (345 patch/section pairs, all matching "
        "their specs). Recall by mutation: one statement inserted into each of the 328 patched methods/functions "
        "is reported 328/328."
    )

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
        from npu_lint.fixers.npu_spec import regen_command

        linted = _linted(paths)
        have_patchgen = shutil.which("patchgen") is not None
        for pkg in packages(paths):
            # a spec whose generated file does not exist yet (e.g. an NPU sibling just created by NPU501)
            for spec_path in pkg.specs:
                if os.path.normpath(spec_path) not in linted:
                    continue
                spec = patchgen.load_spec(spec_path)
                target = patchgen.effective_target_file(spec) if spec is not None and spec.parsed else None
                if (
                    spec is None
                    or not target
                    or not target.endswith(".py")
                    or os.sep in target
                    or "/" in target
                ):
                    continue
                if os.path.exists(os.path.join(pkg.dir or ".", "generated", target)):
                    continue
                command = regen_command(spec_path)
                col, end = _first_line_range(spec_path, spec.config_line)
                yield _diag(
                    self,
                    spec_path,
                    spec.config_line,
                    f"`generated/{target}` has not been generated from this spec yet: run `{command}`",
                    col=col,
                    end_col=end,
                    fix=Fix(
                        f"Generate: `{command}`",
                        (),
                        Applicability.DISPLAY,
                        reason="patchgen writes generated/",
                    ),
                )
            for gen_path in pkg.generated:
                if os.path.normpath(gen_path) not in linted:
                    continue
                parsed = patchgen.load_file(gen_path)
                if parsed is None or patchgen_banner(parsed.text) is False:
                    continue
                spec = patchgen.spec_for_generated(gen_path)
                if spec is None or not spec.parsed:
                    continue
                gen = patchgen.parse_generated(gen_path, parsed.text, None, full=False)
                command = regen_command(spec.path)
                for drift in patchgen.compare_generated(spec, gen):
                    fix = Fix(
                        f"Regenerate: `{command}`"
                        + ("" if have_patchgen else " (patchgen is not installed here)"),
                        (),
                        Applicability.DISPLAY,
                        reason="generated files are regenerated from the spec, never edited",
                    )
                    col, end = _first_line_range(gen_path, drift.line)
                    yield _diag(
                        self,
                        gen_path,
                        drift.line,
                        f"{drift.message}; regenerate from {os.path.basename(spec.path)}",
                        col=col,
                        end_col=end,
                        fix=fix,
                        origin=drift.origin,
                    )


def patchgen_banner(text: str) -> bool:
    return "AUTO-GENERATED FILE" in text[:4096] or "# [" in text


# -- NPU506 ------------------------------------------------------------------------------------------

_PIN = re.compile(r"""["']transformers\s*==\s*([\w.+-]+)\s*(?:;[^"'\n]*)?["']""")


def _installed_transformers() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _repo_pin(root: str | None) -> tuple[str, str, int] | None:
    if not root:
        return None
    path = os.path.join(root, "pyproject.toml")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    preferred: str | None = None  # the pin in [project] dependencies wins over extras
    try:
        import tomllib

        deps = tomllib.loads(text).get("project", {}).get("dependencies", [])
        for dep in deps if isinstance(deps, list) else []:
            match = re.fullmatch(r"\s*transformers\s*==\s*([\w.+-]+)\s*(;.*)?", str(dep))
            if match:
                preferred = match.group(1)
                break
    except (ImportError, ValueError):
        pass
    first: tuple[str, str, int] | None = None
    for i, line in enumerate(lines, 1):
        match = _PIN.search(line)
        if match and not line.lstrip().startswith("#"):
            if preferred is None or match.group(1) == preferred:
                return match.group(1), path, i
            first = first or (match.group(1), path, i)
    return first


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version))


class TransformersPin(ProjectRule):
    code = "NPU506"
    name = "transformers-pin"
    summary = (
        "The installed `transformers` differs from the version the repository pins (or its generated files "
        "were based on)."
    )
    why = (
        "Generated modeling files are copies of one transformers release (`Based on: transformers==X` in their "
        "banner) and VeOmni pins it (`transformers==X` in pyproject.toml). Upstream classes the patches call "
        "change between releases: running another version mixes two releases' code, and regenerating with it "
        "produces a different file. Generated files based on different versions are reported too."
    )
    bad = (
        Example(
            """
            [project]
            name = "veomni"
            dependencies = ["transformers==4.0.0"]
            """,
            path="pyproject.toml",
            title="the environment has another transformers installed",
        ),
    )
    good = (
        Example(
            """
            [project]
            name = "veomni"
            dependencies = ["transformers==5.9.0"]
            """,
            path="pyproject.toml",
            title="the pin equals the installed version",
        ),
    )
    fix_safety = (
        "No fix: install the pinned release (`pip install transformers==<pin>`), or move the pin and regenerate "
        "every generated file."
    )
    precision = (
        "veomni 0.1.12 wheel (no pyproject.toml: pin read from the 29 generated banners, all 5.9.0) with "
        "transformers 5.9.0 installed: 0 findings. Reported once per run."
    )

    @_guarded
    def check(self, project: object, paths: list[str]) -> Iterable[Diagnostic]:
        installed = _installed_transformers()
        root = getattr(project, "root", None)
        if root is None and paths:
            root = patchgen.veomni_root_of(paths[0])
        pin = _repo_pin(root)
        banners: list[tuple[str, str, int]] = []
        linted = _linted(paths)
        for pkg in packages(paths):
            for gen_path in pkg.generated:
                if os.path.normpath(gen_path) not in linted:
                    continue
                parsed = patchgen.load_file(gen_path)
                if parsed is None:
                    continue
                gen = patchgen.parse_generated(gen_path, parsed.text[:4096], full=False)
                if gen.based_on:
                    banners.append((gen.based_on, gen_path, gen.based_on_line))
        if pin is not None:
            expected, where = pin[0], (pin[1], pin[2])
            source = f"the repository pin (pyproject.toml: transformers=={expected})"
            short = "the pyproject.toml pin"
        elif banners:
            counts = Counter(v for v, _, _ in banners)
            top = max(counts.values())
            tied = [v for v, n in counts.items() if n == top]
            expected = installed if installed in tied else max(tied, key=_version_key)
            first = next(b for b in banners if b[0] == expected)
            where = (first[1], first[2])
            source = f"the generated files (`Based on: transformers=={expected}`)"
            short = "most generated files"
        else:
            return
        if installed is not None and installed != expected:
            yield _diag(
                self,
                where[0],
                where[1],
                f"installed transformers {installed} differs from {source}: install transformers=={expected}",
            )
        for version, gen_path, line in banners:
            if version != expected:
                yield _diag(
                    self,
                    gen_path,
                    line,
                    f"generated from transformers=={version}, but {short} use {expected}: regenerate it",
                )
