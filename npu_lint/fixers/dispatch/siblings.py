"""Edits outside the file being migrated: NPU sibling specs and the files that depend on a spec.

:func:`sibling_registrations` makes an NPU sibling spec that re-registers its GPU spec's functions also
re-register the GPU spec's new ``__init__`` overrides and handle-calling overrides; :func:`spec_dependents` lists
the patch specs of other model packages that import from a spec (their presence makes the migration unsafe).
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from dataclasses import dataclass

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.diagnostics import Applicability
from npu_lint.core.safeio import read_text
from npu_lint.fixers.dispatch.assemble import drop_unused_imports, migrate_cached
from npu_lint.fixers.dispatch.plan import Names
from npu_lint.fixers.dispatch.spec import (
    added_imports,
    base_original,
    base_spec_import,
    const_str,
    decorator_target,
    registered_functions,
    spec_functions,
    spec_registrations,
)


def _builds_handle(fn: ast.AST, names: Names) -> bool:
    builders = {names.handle, names.attention_helper}
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in builders
        for n in ast.walk(fn)
    )


@dataclass(frozen=True)
class SiblingResult:
    text: str
    added: tuple[tuple[str, str], ...] = ()  # (function, target) re-registered from the GPU spec
    reasons: tuple[str, ...] = ()


def sibling_registrations(text: str, path: str, names: Names, gpu_text: str | None = None) -> SiblingResult:
    """For an NPU spec of the sibling shape (a fresh ``PatchConfig`` that imports the GPU spec's patch functions
    and registers them with ``replacement=``): the GPU spec's migrated patch functions this spec must also
    register - the ``__init__`` overrides that build the handles its registered methods call, and the
    overrides that call a handle in place of a replaced function it registers. ``gpu_text`` is the GPU spec's
    text (read beside ``path`` when omitted); it is migrated first when it still has OpSlot dispatch."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return SiblingResult(text)
    gpu_module = None
    gpu_level = 0
    gpu_path = ""
    imported: dict[str, str] = {}  # local name -> GPU function name
    found_base = base_spec_import(tree, path)
    if found_base is not None:
        stmt, gpu_path = found_base
        gpu_module = stmt.module
        gpu_level = stmt.level
        for alias in stmt.names:
            imported[alias.asname or alias.name] = alias.name
    config_name = "config"
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
            and isinstance(stmt.targets[0], ast.Name)
        ):
            config_name = stmt.targets[0].id
    registered = registered_functions(tree, config_name)
    if gpu_module is None or not registered:
        return SiblingResult(text)
    if gpu_text is None:
        try:
            gpu_text = read_text(gpu_path)
        except (OSError, UnicodeDecodeError):
            return SiblingResult(text)
    original_gpu = base_original(gpu_path, gpu_text) if gpu_path else gpu_text
    if re.search(r"\bOpSlot\(", gpu_text):
        migrated = migrate_cached(gpu_text, gpu_module.replace(".", "/") + ".py", names, _upstream_key())
        if migrated.applicability is Applicability.DISPLAY:
            return SiblingResult(
                text,
                reasons=(
                    f"the GPU spec {gpu_module} cannot be migrated exactly, so the {names.handle} "
                    "registrations this spec re-uses are not known yet: migrate the GPU spec first",
                ),
            )
        gpu_text = migrated.text
    if original_gpu != gpu_text:
        try:
            before = added_imports(ast.parse(original_gpu), "config")
            after = added_imports(ast.parse(gpu_text), "config")
        except SyntaxError:
            before = after = {}
        retired = sorted(set(before) - set(after))
        if retired:
            dropped = drop_unused_imports(text, retired, config_name)
            if dropped != text:
                text, tree = dropped, ast.parse(dropped)
    try:
        gpu_tree = ast.parse(gpu_text)
    except SyntaxError:
        return SiblingResult(text)
    gpu_cfg = "config"
    gpu_fns = spec_functions(gpu_tree, gpu_cfg)
    fn_nodes = {s.name: s for s in gpu_tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    targets_here = set(registered.values())
    # targets this spec patches with its own functions or classes: never re-registered from the GPU spec
    targets_here |= {target for _, target in spec_functions(tree, config_name).values()}
    targets_here |= {
        dec[1]
        for s in tree.body
        if isinstance(s, ast.ClassDef)
        and (dec := decorator_target(s, config_name))
        and dec[0] == "replace_class"
    }
    bound_here = {
        s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    used = {imported.get(local, local) for local in registered}
    # the base spec's class -> (this spec's class, name_map source): a dependent model registers the base model's
    # functions for its own classes, renaming with ``name_map=``; an NPU sibling uses the same classes
    class_map: dict[str, tuple[str, str | None]] = {}
    for local, (target, name_map) in spec_registrations(tree, text, config_name).items():
        base = gpu_fns.get(imported.get(local, local))
        if base is not None and "." in base[1] and "." in target:
            class_map.setdefault(base[1].split(".")[0], (target.split(".")[0], name_map))
    same_package = os.path.dirname(os.path.abspath(gpu_path)) == os.path.dirname(os.path.abspath(path))

    def here(target: str) -> tuple[str, str | None] | None:
        """``target`` of the base spec as this spec names it (and the name_map to register it with)."""
        cls, _, meth = target.partition(".")
        if cls in class_map:
            mapped, name_map = class_map[cls]
            return f"{mapped}.{meth}", name_map
        return (target, None) if same_package else None

    classes = {gpu_fns[f][1].split(".")[0] for f in used if f in gpu_fns and "." in gpu_fns[f][1]}
    # overrides the migration added in place of a replaced function this spec registers
    replaced_here = {gpu_fns[f][1] for f in used if f in gpu_fns and gpu_fns[f][0] == "replace_function"}
    handle_attrs = {
        t.attr
        for node in fn_nodes.values()
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id == names.handle
        for t in n.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    add: list[tuple[str, str, str, str | None]] = []
    for fname, (kind, base_target) in gpu_fns.items():
        mapped = here(base_target) if "." in base_target else None
        if mapped is None or mapped[0] in targets_here or fname in used or kind != "override_method":
            continue
        target, name_map = mapped
        cls, meth = base_target.split(".", 1)
        if meth == "__init__":
            continue  # decided below, once the classes are known
        calls_handle = any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in handle_attrs
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
            for n in ast.walk(fn_nodes[fname])
        )
        if calls_handle and (cls in classes or replaced_here):
            add.append((fname, target, kind, name_map))
            classes.add(cls)
    for fname, (kind, base_target) in gpu_fns.items():
        mapped = here(base_target) if "." in base_target else None
        if mapped is None or mapped[0] in targets_here or fname in used or kind != "override_method":
            continue
        target, name_map = mapped
        cls, _, meth = base_target.partition(".")
        if meth == "__init__" and cls in classes and _builds_handle(fn_nodes[fname], names):
            add.append((fname, target, kind, name_map))
    if not same_package:
        # a dependent model reuses the base model's new __init__ overrides only where the two upstream classes
        # build the same thing once renamed: otherwise it would get another model's attributes
        differ = [
            target
            for fname, target, kind, name_map in add
            if target.endswith(".__init__")
            and not _same_upstream_init(gpu_tree, tree, gpu_fns[fname][1], target, name_map, path)
        ]
        if differ:
            return SiblingResult(
                text,
                reasons=(
                    f"{', '.join(differ)} would reuse the base spec's __init__ override ({gpu_module}), but the "
                    "upstream classes differ beyond their name_map: build these handles here by hand",
                ),
            )
    clash = sorted(f for f, *_ in add if f in bound_here)
    if clash:
        return SiblingResult(
            text,
            reasons=(
                f"the GPU spec's {', '.join(clash)} would be re-registered here, but this spec defines the same "
                "name(s): rename one before migrating",
            ),
        )
    # the names the re-registered functions read that the GPU spec adds to its generated module must be added to
    # this one's too (the loss helpers, ``partial``)
    gpu_adds = added_imports(gpu_tree, gpu_cfg)
    here_adds = added_imports(tree, config_name)
    gpu_defs = {
        s.name: s
        for s in gpu_tree.body
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    reused = [fn_nodes[f] for f, *_ in add] + [gpu_defs[n] for n in set(imported.values()) if n in gpu_defs]
    read = {n.id for node in reused for n in ast.walk(node) if isinstance(n, ast.Name)}
    wanted: dict[str, list[str]] = {}
    inherits = re.search(rf"^{re.escape(config_name)}\.additional_imports\.extend\(", text, re.M)
    for name in sorted(read) if not inherits else ():  # a spec that extends the base's imports has them
        module = gpu_adds.get(name)
        if module is not None and name not in here_adds:
            wanted.setdefault(module, []).append(name)
    import_lines = "".join(
        f"{config_name}.add_import({module!r}, names={names_!r})\n".replace("'", '"')
        for module, names_ in sorted(wanted.items())
    )
    if not add and not wanted:
        return SiblingResult(text)
    add.sort(key=lambda a: list(gpu_fns).index(a[0]))
    lines = text.splitlines(keepends=True)
    registrations = ("\n\n" + import_lines if import_lines else "") + "".join(
        f"\n\n{config_name}.{kind}(\n"
        f'    "{target}",\n'
        f"    replacement={fname},\n"
        + (f"    name_map={name_map},\n" if name_map else "")
        + f'    description="{_registration_description(target, names)}",\n'
        ")\n"
        for fname, target, kind, name_map in add
    )
    body = "".join(lines)
    if not body.endswith("\n"):
        body += "\n"
    body += registrations
    if add:
        # merged into the file's import from the GPU spec, or placed in its isort section, as the tree's ruff
        # (I001) has it: a second `from <gpu spec> import (...)` with unsorted members failed the tree's gate
        from npu_lint.core.imports import add_import_edit
        from npu_lint.core.source import SourceFile

        for fname, *_ in add:
            edit = add_import_edit(
                SourceFile.from_text(path, body), ast.parse(body), "." * gpu_level + gpu_module, fname
            )
            body = body[: edit.start] + edit.content + body[edit.end :]
    return SiblingResult(body, tuple((f, t) for f, t, *_ in add))


def _same_upstream_init(
    base_tree: ast.Module, tree: ast.Module, base_target: str, target: str, name_map: str | None, path: str
) -> bool:
    """Whether upstream ``base_target``'s ``__init__`` equals ``target``'s once ``name_map`` renames it."""
    from npu_lint.veomni import upstream

    def source_module(t: ast.Module) -> str | None:
        for stmt in t.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                for kw in stmt.value.keywords:
                    if kw.arg == "source_module":
                        return const_str(kw.value)
        return None

    renames: dict[str, str] = {}
    if name_map:
        value: ast.expr | None = ast.parse(name_map, mode="eval").body
        if isinstance(value, ast.Name):
            value = next(
                (
                    s.value
                    for s in tree.body
                    if isinstance(s, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in s.targets)  # type: ignore[union-attr]
                ),
                None,
            )
        try:
            renames = dict(ast.literal_eval(value)) if value is not None else {}
        except ValueError:
            return False
    base_module, module = source_module(base_tree), source_module(tree)
    if not base_module or not module:
        return False
    base = upstream.class_init(base_module, base_target.split(".")[0])
    mine = upstream.class_init(module, target.split(".")[0])
    if not isinstance(base, upstream.MethodSource) or not isinstance(mine, upstream.MethodSource):
        return False
    text = base.text
    for old, new in renames.items():
        text = text.replace(old, new)
    try:
        return ast.dump(ast.parse(textwrap.dedent(text))) == ast.dump(ast.parse(textwrap.dedent(mine.text)))
    except SyntaxError:
        return False


def _registration_description(target: str, names: Names) -> str:
    if target.endswith(".__init__"):
        return f"Construct the {names.handle} handles of {target.split('.')[0]} in __init__"
    return f"Call the {names.handle} handle of {target.split('.')[0]}"


def _upstream_key() -> str | None:
    from npu_lint.veomni.upstream import transformers_root

    return transformers_root()


def spec_dependents(path: str) -> tuple[str, ...]:
    """Patch specs of *other* model packages that import from the spec at ``path`` (its own package's NPU
    sibling is handled by :func:`sibling_registrations`), as ``<package>/<file>``."""
    spec = os.path.abspath(path)
    if not spec.endswith("_patch_gen_config.py") or not os.path.isfile(spec):
        return ()
    package_dir = os.path.dirname(spec)
    models_dir = os.path.dirname(package_dir)
    parts = spec[:-3].split(os.sep)
    if "veomni" not in parts:
        return ()
    module = ".".join(parts[len(parts) - 1 - parts[::-1].index("veomni") :])
    pattern = re.compile(rf"^\s*from\s+{re.escape(module)}\s+import\b", re.M)
    found = []
    try:
        packages = sorted(os.listdir(models_dir))
    except OSError:
        return ()
    for name in packages:
        other = os.path.join(models_dir, name)
        if other == package_dir or not os.path.isdir(other):
            continue
        for filename in sorted(os.listdir(other)):
            if not filename.endswith("_patch_gen_config.py"):
                continue
            try:
                if pattern.search(read_text(os.path.join(other, filename))):
                    found.append(f"{name}/{filename}")
            except (OSError, UnicodeDecodeError):
                continue
    return tuple(found)
