"""The model types a package serves and registers, read from its ``__init__.py`` and its generated module.

Registration is keyed by ``config.json``'s ``model_type``. A vision-language (or omni) package serves several model
types: the multimodal wrapper (``...ForConditionalGeneration``, e.g. ``qwen3_5``) and its sub-models (the text
backbone, ``...ForCausalLM``, e.g. ``qwen3_5_text``). The classes a generated module defines are read textually
(``class X(...)``), the model type of a class from its config annotation (``config: Qwen3_5TextConfig``) and the
installed transformers configuration source (never imported); without a transformers source for the model,
VeOmni's convention (``<m>`` and ``<m>_text``) stands in.

:func:`registrations` reads a package's registered loaders (any spelling: decorator, call, subscript, loop);
:func:`sibling_types` says whether two model types belong to one VLM (one is the other's sub-model,
``<m>_<part>``); :func:`unregistered_vlm_types` is the gap between the types the generated module serves and the
types the package registers (NPU732). :func:`unresolved_text_configs` reads the config registry: a package that
registers the config of a VLM type must resolve the model type of that config's text sub-config too (NPU732).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npu_lint.core.astutil import last_name, transformers_dir
from npu_lint.veomni import patchgen
from npu_lint.veomni.registration import explicit_registrations, registered_types

if TYPE_CHECKING:
    from npu_lint.veomni.project import Project

_CLASS = re.compile(r"^class\s+(\w+)\s*[(:]", re.MULTILINE)
_CONFIG_ATTR = re.compile(
    r"^\s{4}config(?:_class)?\s*[:=]\s*\"?(\w+)|^\s{4}def __init__\(\s*self,\s*config:\s*\"?(\w+)",
    re.MULTILINE,
)
_MODEL_TYPE = re.compile(r"^\s+model_type\s*[:=][^\"'\n]*[\"'](\w+)[\"']", re.MULTILINE)


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
    out = []
    explicit = explicit_registrations(tree)
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        types = registered_types(stmt, explicit)
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
        lines = [d.lineno for d in stmt.decorator_list] + [at for _, at in explicit.get(stmt.name, [])]
        line = min(lines) if stmt.decorator_list else stmt.lineno
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


def sibling_types(a: str, b: str) -> bool:
    """Whether two distinct model types are the wrapper and a sub-model of one VLM (``gemma3``/``gemma3_text``,
    ``qwen2_5_omni``/``qwen2_5_omni_thinker``): one is the other followed by ``_<part>``."""
    return a != b and (a.startswith(b + "_") or b.startswith(a + "_"))


def type_of(text: str, cls: str, source_module: str | None) -> str | None:
    """The model type of a class a generated module defines (its config annotation's ``model_type``)."""
    block = _class_block(text, cls)
    match = _CONFIG_ATTR.search(block or "")
    if match is None:
        return None
    return _model_type(source_module, match.group(1) or match.group(2))


@dataclass(frozen=True)
class TypeGap:
    """Model types the generated module serves that no loader of the package registers."""

    module: str  # the generated module's basename
    missing: tuple[str, ...]  # "the text-backbone model type `t` (`Cls`)"
    classes: frozenset[str]


def unregistered_vlm_types(
    regs: list[Registration],
    by_module: dict[str, str],
    init: str | None = None,
    project: Project | None = None,
) -> TypeGap | None:
    """The multimodal / text-backbone pair of a VLM's generated module (``<P>ForConditionalGeneration`` and
    ``<P>ForCausalLM``) against the model types the package registers (with ``init``, the package's
    `__init__.py`: or a sibling package registers as modeling keys)."""
    registered = {t for r in regs for t in r.types}
    siblings: set[str] | None = None  # the sibling packages' keys: read only for a type the package lacks

    def unregistered(model_type: str) -> bool:
        nonlocal siblings
        if model_type in registered or init is None:
            return model_type not in registered
        if siblings is None:
            siblings = sibling_modeling_types(init, project)
        return model_type not in siblings

    used = {m for r in regs for m, _, _ in r.imports}
    gpu_modules = sorted(m for m in used if m in by_module and m.endswith("_gpu")) or sorted(
        m for m in used if m in by_module
    )
    if not gpu_modules:
        return None
    gen_path = by_module[gpu_modules[0]]
    gen_file = patchgen.load_file(gen_path)
    if gen_file is None:
        return None
    text = gen_file.text
    classes = set(_CLASS.findall(text))
    banner = patchgen.generated_banner(gen_path, text)
    prefixes = sorted(
        c[: -len("ForConditionalGeneration")] for c in classes if c.endswith("ForConditionalGeneration")
    )
    main = [p for p in prefixes if p and not any(q != p and p.startswith(q) for q in prefixes)]
    missing: list[str] = []
    missing_classes: set[str] = set()
    source_known = _model_dir(banner.source_module) is not None
    for prefix in main:
        fcg, clm = f"{prefix}ForConditionalGeneration", f"{prefix}ForCausalLM"
        mm_type = type_of(text, fcg, banner.source_module)
        text_type = type_of(text, clm, banner.source_module) if clm in classes else None
        if not source_known and clm in classes:
            # no transformers source for this model: VeOmni's convention, `<m>` and `<m>_text`
            if mm_type is None:
                text_types = [t for r in regs if _imports(r, clm) for t in r.types if t.endswith("_text")]
                mm_type = text_types[0][: -len("_text")] if text_types else None
            if text_type is None:
                mm_types = [mm_type] if mm_type else [t for r in regs if _imports(r, fcg) for t in r.types]
                text_type = f"{mm_types[0]}_text" if mm_types else None
        if mm_type is not None and unregistered(mm_type):
            missing.append(f"the multimodal model type `{mm_type}` (`{fcg}`)")
            missing_classes.add(fcg)
        if text_type is not None and unregistered(text_type):
            missing.append(f"the text-backbone model type `{text_type}` (`{clm}`)")
            missing_classes.add(clm)
    if not missing:
        return None
    return TypeGap(gpu_modules[0], tuple(missing), frozenset(missing_classes))


def foreign_returns(
    reg: Registration, by_module: dict[str, str], every_branch: bool = False
) -> list[tuple[ast.Return, str, str]]:
    """Classes a loader returns whose config's model type (read from the transformers source) is none of the types
    it is registered for: (the return, class, the class's type). Judged when the loader returns them whatever the
    architecture (it has no `architecture` test), when it is registered for text types only (a text config builds
    no multimodal class), or, with ``every_branch``, when every class it returns is of another type."""
    func = reg.function
    text_only = all(t.endswith("_text") for t in reg.types)
    dispatches = any(isinstance(n, ast.Name) and n.id == "architecture" for n in ast.walk(func))
    origin = {name: module for module, name, _ in reg.imports}
    out: list[tuple[ast.Return, str, str]] = []
    returns = 0
    for node in ast.walk(func):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        returns += 1
        if not isinstance(node.value, ast.Name):
            continue
        name = node.value.id
        gen_path = by_module.get(origin.get(name, ""))
        if gen_path is None:
            continue
        gen_file = patchgen.load_file(gen_path)
        if gen_file is None:
            continue
        banner = patchgen.generated_banner(gen_path, gen_file.text)
        own_type = type_of(gen_file.text, name, banner.source_module)
        if (
            own_type is None
            and text_only
            and name.endswith("ForConditionalGeneration")
            and _model_dir(banner.source_module) is None
        ):
            own_type = reg.types[0][: -len("_text")]  # no transformers source: VeOmni's `<m>` / `<m>_text`
        if own_type is not None and own_type not in reg.types:
            out.append((node, name, own_type))
    if not dispatches or text_only:
        return out
    if every_branch and out and len(out) == returns:
        return out
    return []


def unregistered_helper(tree: ast.Module, classes: set[str]) -> ast.FunctionDef | None:
    """A module-level function that imports one of ``classes`` from a generated module but is registered under
    no model type (the helper whose registration is missing)."""
    explicit = explicit_registrations(tree)
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef) or registered_types(stmt, explicit):
            continue
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").rsplit(".", 1)[-1].startswith("patched_modeling_")
                and any(a.name in classes for a in node.names)
            ):
                return stmt
    return None


# -- the config registry: a VLM config's text sub-config type must resolve too -----------------------------------

CONFIG_REGISTRY = "MODEL_CONFIG_REGISTRY"


@dataclass(frozen=True)
class ConfigRegistration:
    """A loader registered in the config registry: the model types it is registered under, the config class it
    returns and the file that defines that class (the installed transformers source or the tree's own module)."""

    function: ast.FunctionDef
    types: tuple[str, ...]
    line: int  # the first registration (decorator or module-level statement)
    config_class: str
    config_file: str | None


def _import_file(node: ast.ImportFrom, init: str) -> str | None:
    """The file an import of a configuration class reads: `transformers.models.<m>.configuration_<m>` in the
    installed transformers source, a relative module of the tree's package; None for anything else."""
    module = node.module or ""
    if node.level:
        base = os.path.dirname(init)
        for _ in range(node.level - 1):
            base = os.path.dirname(base)
        path = os.path.join(base, *module.split(".")) + ".py" if module else None
    elif module.startswith("transformers.models."):
        root = _transformers_dir()
        path = os.path.join(root, *module.split(".")[1:]) + ".py" if root else None
    else:
        return None
    return path if path is not None and os.path.isfile(path) else None


def config_registrations(tree: ast.Module, init: str) -> list[ConfigRegistration]:
    """The package's config loaders (`@MODEL_CONFIG_REGISTRY.register("t")`, any spelling :func:`registrations`
    reads) and the config class each returns (`return Qwen2VLConfig`, imported in the loader or the module)."""
    explicit = explicit_registrations(tree, CONFIG_REGISTRY)
    module_imports = {
        (alias.asname or alias.name): (stmt, alias.name)
        for stmt in tree.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    out: list[ConfigRegistration] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        types = registered_types(stmt, explicit, CONFIG_REGISTRY)
        if not types:
            continue
        returned = [
            n.value.id for n in ast.walk(stmt) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
        ]
        if len(set(returned)) != 1:
            continue  # no single config class
        local = {
            (alias.asname or alias.name): (node, alias.name)
            for node in ast.walk(stmt)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        found = local.get(returned[0]) or module_imports.get(returned[0])
        if found is None:
            continue
        lines = [d.lineno for d in stmt.decorator_list] + [at for _, at in explicit.get(stmt.name, [])]
        out.append(
            ConfigRegistration(
                stmt, types, min(lines) if lines else stmt.lineno, found[1], _import_file(found[0], init)
            )
        )
    return out


def _classes(path: str) -> dict[str, ast.ClassDef]:
    parsed = patchgen.load_file(path)
    if parsed is None or parsed.tree is None:
        return {}
    return {n.name: n for n in parsed.tree.body if isinstance(n, ast.ClassDef)}


def _class_attr(classes: dict[str, ast.ClassDef], name: str, attr: str, depth: int = 0) -> ast.expr | None:
    """The value a class of one module (or a base class of the same module) assigns to ``attr`` in its body."""
    node = classes.get(name)
    if node is None or depth > 4:
        return None
    for stmt in node.body:
        target = (
            stmt.targets[0]
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            else getattr(stmt, "target", None)
        )
        if isinstance(target, ast.Name) and target.id == attr and getattr(stmt, "value", None) is not None:
            return stmt.value  # type: ignore[attr-defined]
    for base in node.bases:
        base_name = last_name(base)
        if base_name is not None:
            found = _class_attr(classes, base_name, attr, depth + 1)
            if found is not None:
                return found
    return None


def text_subconfig(config_file: str, config_class: str) -> tuple[str, str] | None:
    """The text sub-config of a composite config class (`sub_configs = {"text_config": Qwen2VLTextConfig, ...}`)
    and its model type (`model_type = "qwen2_vl_text"`), both read from the module that defines the class; None
    when the class has no such sub-config, or it is generic (`AutoConfig`) or defined elsewhere."""
    classes = _classes(config_file)
    subs = _class_attr(classes, config_class, "sub_configs")
    if not isinstance(subs, ast.Dict):
        return None
    text_cls = next(
        (
            v.id
            for k, v in zip(subs.keys, subs.values)
            if isinstance(k, ast.Constant) and k.value == "text_config" and isinstance(v, ast.Name)
        ),
        None,
    )
    if text_cls is None:
        return None
    model_type = _class_attr(classes, text_cls, "model_type")
    if not (isinstance(model_type, ast.Constant) and isinstance(model_type.value, str) and model_type.value):
        return None
    return text_cls, model_type.value


@dataclass(frozen=True)
class PackageKeys:
    """What one model package's ``__init__.py`` says about registration: its text (for a key named in any
    registry, modeling or config) and the model types it registers as modeling keys."""

    text: str
    modeling: frozenset[str]


def _package_keys(parent: str) -> dict[str, PackageKeys]:
    """Each package directory under ``parent`` whose ``__init__.py`` mentions a registry -> its keys."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return {}
    out: dict[str, PackageKeys] = {}
    for name in names:
        package = os.path.join(parent, name)
        init = os.path.join(package, "__init__.py")
        if not os.path.isfile(init):
            continue
        parsed = patchgen.load_file(init)
        if parsed is None or "REGISTRY" not in parsed.text:
            continue
        modeling = (
            frozenset(t for r in _registrations(parsed.tree) for t in r.types) if parsed.tree else frozenset()
        )
        out[package] = PackageKeys(parsed.text, modeling)
    return out


def sibling_packages(project: Project | None, init: str) -> list[PackageKeys]:
    """The registration keys of the packages beside ``init``'s package (not its own), read once per project
    (the project's memo dies when a registration file changes) and only when a rule asks."""
    package = os.path.dirname(os.path.abspath(init))
    parent = os.path.dirname(package)
    if project is None:
        table = _package_keys(parent)
    else:
        table = project.remember(("vlmtypes.package_keys", parent), lambda: _package_keys(parent))
    return [keys for other, keys in table.items() if other != package]


def resolved_in_tree(init: str, tree: ast.Module, model_type: str, project: Project | None = None) -> bool:
    """Whether a checkpoint of ``model_type`` resolves through VeOmni's registries: the package registers it
    (modeling or config registry), or a sibling package's `__init__.py` names it as a key."""
    if model_type in {t for r in _registrations(tree) for t in r.types}:
        return True
    explicit = explicit_registrations(tree, CONFIG_REGISTRY)
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and model_type in registered_types(
            stmt, explicit, CONFIG_REGISTRY
        ):
            return True
    quoted = (f'"{model_type}"', f"'{model_type}'")
    return any(q in keys.text for keys in sibling_packages(project, init) for q in quoted)


def sibling_modeling_types(init: str, project: Project | None = None) -> set[str]:
    """The model types the sibling packages of ``init``'s package register as modeling keys (a package that
    registers the multimodal type of another package's generated module)."""
    return {t for keys in sibling_packages(project, init) for t in keys.modeling}


@dataclass(frozen=True)
class TextConfigGap:
    registration: ConfigRegistration
    text_class: str
    text_type: str


def unresolved_text_configs(
    tree: ast.Module, init: str, project: Project | None = None
) -> list[TextConfigGap]:
    """Config loaders of a VLM type whose config's text sub-config is of a model type no registry resolves: the
    package takes over the VLM's config resolution but a checkpoint whose `config.json` names the text type gets
    the stock config and no VeOmni model."""
    out: list[TextConfigGap] = []
    for reg in config_registrations(tree, init):
        if reg.config_file is None:
            continue
        found = text_subconfig(reg.config_file, reg.config_class)
        if found is None:
            continue
        text_class, text_type = found
        if text_type in reg.types or not any(sibling_types(text_type, t) for t in reg.types):
            continue
        if not resolved_in_tree(init, tree, text_type, project):
            out.append(TextConfigGap(reg, text_class, text_type))
    return out
