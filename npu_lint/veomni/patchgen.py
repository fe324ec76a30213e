"""A static model of VeOmni's patchgen: patch specs (``*_patch_gen_config.py``) and generated files.

Nothing here imports or executes the code it reads. A spec is read from its AST: the ``PatchConfig(...)``
(or ``deepcopy(gpu_config)``, or a GPU config imported and mutated in place), its fields, and every patch
registered with a decorator (``@config.override_method("Cls.meth")``) or a call with ``replacement=``.
Replacement functions imported from another spec module are resolved through the VeOmni tree.

A generated file is read from its banner (``Source:``, ``Based on: transformers==``, ``Patches applied:``)
and its fenced sections (``# [MODIFIED CLASS] X`` + ``# Methods patched: ...``, ``# [PATCHED FUNCTION] f``,
``# [PATCHED CLASS] C``, ``# [HELPERS] ...``). The body of a patched method in a generated file is the body
of the spec function that replaced it (after ``name_map`` renames and formatting), which gives

* ``origin_for_line``: the spec line a line of a generated file came from (or, for unpatched upstream
  code, the override that would change it), used by the engine to set ``Diagnostic.origin``;
* ``compare_generated``: the drift between a generated file and its spec (NPU505).
"""

from __future__ import annotations

import ast
import enum
import functools
import os
import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.astutil import absolute_module, keyword_arg, parse_snippet, str_value
from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.astutil import walk as _walk_list
from npu_lint.core.diagnostics import Diagnostic, Origin
from npu_lint.core.memo import Bounded

SPEC_SUFFIX = "_patch_gen_config.py"
GPU_SPEC_SUFFIX = "_gpu_patch_gen_config.py"
NPU_SPEC_SUFFIX = "_npu_patch_gen_config.py"


def is_npu_model_file(path: Path) -> bool:
    """An NPU-targeted model file: an NPU patch spec, or a generated NPU modeling file."""
    return path.name.endswith(NPU_SPEC_SUFFIX) or (
        path.parent.name == "generated" and path.name.endswith("_npu.py")
    )


# modules whose kernels exist only on NVIDIA GPUs (an external replacement from them is not device-neutral)
GPU_ONLY_MODULES = (
    "liger_kernel",
    "flash_attn",
    "flash_attn_interface",
    "triton",
    "apex",
    "flashinfer",
    "quack",
)


class PatchKind(str, enum.Enum):
    """What a spec patch does (patchgen's own names; a str enum, so it compares equal to them)."""

    METHOD_OVERRIDE = "method_override"
    FUNCTION_REPLACEMENT = "function_replacement"
    CLASS_REPLACEMENT = "class_replacement"
    INIT_MODIFICATION = "init_modification"
    HELPER = "helper"
    EXTERNAL = "external"

    def __str__(self) -> str:
        return self.value


_PATCH_METHODS = {
    "override_method": PatchKind.METHOD_OVERRIDE,
    "replace_function": PatchKind.FUNCTION_REPLACEMENT,
    "replace_class": PatchKind.CLASS_REPLACEMENT,
    "modify_init": PatchKind.INIT_MODIFICATION,
    "add_helper": PatchKind.HELPER,
    "add_helper_after": PatchKind.HELPER,
}
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MARKER = re.compile(r"^# \[(?P<kind>[A-Z][A-Z ]*[A-Z])\](?:\s+(?P<target>\S+))?")
_METHODS = re.compile(r"^# Methods patched:\s*(?P<methods>.*)$")
_SECTION_SOURCE = re.compile(r"^# Source:\s*(?P<module>[\w.]+)\s*$")
_BANNER_SOURCE = re.compile(r"^#\s+Source:\s*(?P<module>[\w.]+)")
_BANNER_BASED = re.compile(r"^#\s+Based on:\s*transformers==(?P<version>[\w.+-]+)")
_BANNER_PATCH = re.compile(r"^#\s+(?:-\s+)?(?P<kind>\w+):\s*(?P<target>[\w.]+)")


# -- parsed files (cached by path, mtime and size) ---------------------------------------------------


class ParsedFile:
    """A file's text, its lines and (parsed on first use) its ``ast`` tree."""

    __slots__ = ("path", "text", "_tree", "_parsed", "_lines")

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self._tree: ast.Module | None = None
        self._parsed = False
        self._lines: list[str] | None = None

    @property
    def tree(self) -> ast.Module | None:
        if not self._parsed:
            self._tree = _parse(self.text, self.path)
            self._parsed = True
        return self._tree

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = _splitlines(self.text)
        return self._lines


# every spelling of a path -> (its (mtime_ns, size), the file): bounded (a long-lived server, a huge tree); a run
# of veomni/models shares about 130 files' trees (specs, generated files, `__init__`s, RMSNorm modules)
_FILES: Bounded[str, tuple[tuple[int, int], ParsedFile]] = Bounded(2048)


def load_file(path: str) -> ParsedFile | None:
    """Read and parse ``path`` (cached while its mtime and size are unchanged); None when unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _FILES.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    absolute = os.path.abspath(path)
    # the same file under another spelling (a symlinked or resolved root), or the file pass's tree (share_tree)
    for key in (absolute, _inode_key(st)):
        hit = _FILES.get(key)
        if hit is not None and hit[0] == stamp:
            _FILES[path] = hit
            return hit[1]
    try:
        from npu_lint.core.safeio import read_regular
        from npu_lint.core.source import DecodeError, decode_source

        text, _ = decode_source(read_regular(path)[0])
    except (OSError, DecodeError):  # unreadable or undecodable: no model of this file
        return None
    parsed = ParsedFile(path, text)
    _FILES[path] = _FILES[absolute] = _FILES[_inode_key(st)] = (stamp, parsed)
    return parsed


def _inode_key(st: os.stat_result) -> str:
    """The store's key for a file whatever its path's spelling (device and inode)."""
    return f"inode:{st.st_dev}:{st.st_ino}"


def share_tree(path: str, text: str, tree: ast.Module, st: os.stat_result) -> None:
    """Offer the file pass's tree of ``path`` (``text`` as it decoded the bytes whose stat is ``st``) to the
    project rules running later in this process: ``load_file`` returns it while the file is unchanged, and
    ``parse_generated`` locates the sections in it by line range instead of parsing them again."""
    stamp = (st.st_mtime_ns, st.st_size)
    absolute, inode = os.path.abspath(path), _inode_key(st)
    hit = _FILES.get(absolute) or _FILES.get(inode)
    if hit is not None and hit[0] == stamp and hit[1].text == text:
        parsed = hit[1]  # read earlier (another file's rules): every spelling of its path gets this tree
        if not parsed._parsed:
            parsed._tree, parsed._parsed = tree, True
    else:
        parsed = ParsedFile(path, text)
        parsed._tree, parsed._parsed = tree, True
    _FILES[path] = _FILES[absolute] = _FILES[inode] = (stamp, parsed)


def shared_tree(path: str, text: str, st: os.stat_result | None = None) -> ast.Module | None:
    """The tree of ``text`` already parsed in this process (``share_tree``, ``load_file``), if any; ``st`` (the
    stat of the bytes ``text`` came from) finds it under another spelling of the path too."""
    keys = (path, os.path.abspath(path)) if st is None else (path, os.path.abspath(path), _inode_key(st))
    for key in keys:
        hit = _FILES.get(key)
        if hit is not None and hit[1]._parsed and (hit[1].text is text or hit[1].text == text):
            return hit[1]._tree
    return None


def _parse(text: str, path: str = "<spec>") -> ast.Module | None:
    try:
        return ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# -- module <-> path ------------------------------------------------------------------------------


def module_of(path: str) -> str | None:
    """Dotted module name of a file inside a ``veomni`` package (``veomni.models....``), else None."""
    return _module_of(path if os.path.isabs(path) else os.path.abspath(path))


@functools.lru_cache(maxsize=4096)
def _module_of(
    path: str,
) -> str | None:  # a function of the absolute path: remembered (asked once per finding)
    parts = list(Path(os.path.normpath(path)).with_suffix("").parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "veomni":
            rest = parts[i:]
            if rest[-1] == "__init__":
                rest = rest[:-1]
            if all(p.isidentifier() for p in rest):
                return ".".join(rest)
            return None
    return None


def veomni_root_of(path: str) -> str | None:
    """The directory holding the ``veomni`` package that contains ``path`` (kept in the path's own style)."""
    p = Path(path)
    parents = [p.parent, *p.parent.parents] if p.parent != p else []
    for directory in parents:
        if directory.name == "veomni":
            return str(directory.parent)
    return None


def path_of_module(module: str, anchor: str) -> str | None:
    """The file of a ``veomni.*`` module, found from the tree ``anchor`` lives in (None outside it)."""
    if not module.startswith("veomni."):
        return None
    root = veomni_root_of(anchor)
    if root is None:
        return None
    base = os.path.join(root, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _resolve_relative(
    module: str | None, level: int, current: str | None, is_package: bool = False
) -> str | None:
    if not level:
        return module
    return None if current is None else absolute_module(current, is_package, level, module)


# -- specs ----------------------------------------------------------------------------------------


@dataclass
class Patch:
    """One patch registered in a spec."""

    kind: PatchKind
    target: str  # "Cls.meth", "func", "Cls"
    line: int  # registration (decorator or call) line in ``spec_path``
    spec_path: str
    replacement: str | None = None  # name of the replacing def in the spec module's namespace
    name_map: dict[str, str] = field(default_factory=dict)
    description: str = ""
    external_module: str | None = None

    @property
    def cls(self) -> str:
        return self.target.split(".")[0]

    @property
    def method(self) -> str | None:
        if self.kind == "init_modification":
            return "__init__"
        if self.kind == "method_override" and "." in self.target:
            return self.target.split(".", 1)[1]
        return None


@dataclass
class DefRef:
    """A function or class definition (where a patch's replacement lives)."""

    path: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    text: str

    @property
    def line(self) -> int:
        return self.node.lineno


@dataclass
class Spec:
    path: str
    module: str | None = None
    parsed: bool = True
    config_name: str = "config"
    config_line: int = 1  # the ``config = PatchConfig(`` (or deepcopy) line
    config_node: ast.stmt | None = None
    base_module: str | None = None  # spec module this one builds on
    base_mode: str | None = None  # "deepcopy" | "shared" (imported config mutated) | "extend" (lists copied)
    source_module: str | None = None
    target_file: str | None = None
    description: str | None = None
    patches: list[Patch] = field(default_factory=list)
    defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)
    text: str = ""
    post_blocks: list[tuple[int, str]] = field(default_factory=list)  # (line of the string, code)
    added_imports: list[tuple[int, str, tuple[str, ...]]] = field(
        default_factory=list
    )  # (line, module, names)
    copies_from: list[str] = field(
        default_factory=list
    )  # spec modules whose lists are ``.extend``ed into this one
    # list attribute copied from another spec's config (``config.helpers.extend(gpu_config.helpers)``,
    # ``config.drop_imported_names.update(gpu_config.drop_imported_names)``) -> (line, that spec's module)
    mirrors: dict[str, tuple[int, str]] = field(default_factory=dict)
    dropped: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # drop_import_names(...) calls

    def resolve(self, name: str, depth: int = 0) -> DefRef | None:
        """The definition bound to ``name`` in this spec module (following imports through the tree)."""
        node = self.defs.get(name)
        if node is not None:
            return DefRef(self.path, node, self.text)
        if depth > 3 or name not in self.imports:
            return None
        module, orig = self.imports[name]
        other = spec_for_module(module, self.path)
        if other is None:
            return None
        return other.resolve(orig, depth + 1)


_str = str_value  # core.astutil's string-literal helper (concatenated literals too)
_kw = keyword_arg


def _dict_literal(node: ast.AST | None, consts: dict[str, dict[str, str]]) -> dict[str, str]:
    if isinstance(node, ast.Name):
        return dict(consts.get(node.id, {}))
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            ks, vs = _str(k), _str(v)
            if ks is not None and vs is not None:
                out[ks] = vs
        return out
    return {}


def parse_spec(path: str, text: str | None = None, tree: ast.Module | None = None) -> Spec:
    """Read a patch spec statically. ``text`` defaults to the file's content; ``tree``, when given, is
    ``text`` already parsed (the engine's tree of the linted file), read instead of parsing it again."""
    if text is None:
        parsed = load_file(path)
        text = parsed.text if parsed else ""
        tree = parsed.tree if parsed else None
    elif tree is None:
        tree = _parse(text, path)
    spec = Spec(path=path, module=module_of(path), text=text)
    if tree is None:
        spec.parsed = False
        return spec
    consts: dict[str, dict[str, str]] = {}
    imported_configs: dict[str, str] = {}  # local name -> module, for ``from M import config [as x]``
    config_names: set[str] = set()

    def patch_from_call(call: ast.Call, replacement: str | None, line: int) -> Patch | None:
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return None
        if func.value.id not in config_names or func.attr not in _PATCH_METHODS:
            return None
        kind = _PATCH_METHODS[func.attr]
        target = _str(call.args[0]) if call.args else None
        target = target or _str(_kw(call, "target")) or _str(_kw(call, "target_class")) or ""
        if kind == "helper" and func.attr == "add_helper":
            target = ""
        rep = _kw(call, "replacement")
        if rep is None and len(call.args) > 1:
            rep = call.args[1]
        if rep is None and func.attr == "add_helper" and call.args:
            rep = call.args[0]
        if isinstance(rep, ast.Name):
            replacement = rep.id
        return Patch(
            kind=kind,
            target=target,
            line=line,
            spec_path=path,
            replacement=replacement,
            name_map=_dict_literal(_kw(call, "name_map"), consts),
            description=_str(_kw(call, "description")) or "",
        )

    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            module = _resolve_relative(stmt.module, stmt.level, spec.module)
            for alias in stmt.names:
                local = alias.asname or alias.name
                if module is not None:
                    spec.imports[local] = (module, alias.name)
                if alias.name == "config" and module and module.endswith("_patch_gen_config"):
                    imported_configs[local] = module
        elif (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            name = stmt.targets[0].id
            value = stmt.value
            if isinstance(value, ast.Dict):
                consts[name] = _dict_literal(value, consts)
            if isinstance(value, ast.Call):
                callee = _dotted(value.func)
                if callee in ("PatchConfig", "patch_spec.PatchConfig"):
                    spec.config_name, spec.config_line, spec.config_node = name, stmt.lineno, stmt
                    config_names.add(name)
                    spec.source_module = _str(_kw(value, "source_module")) or spec.source_module
                    spec.target_file = _str(_kw(value, "target_file")) or spec.target_file
                    spec.description = _str(_kw(value, "description")) or spec.description
                elif callee in ("deepcopy", "copy.deepcopy", "copy") and value.args:
                    arg = value.args[0]
                    if isinstance(arg, ast.Name) and arg.id in imported_configs:
                        spec.config_name, spec.config_line, spec.config_node = name, stmt.lineno, stmt
                        config_names.add(name)
                        spec.base_module, spec.base_mode = imported_configs[arg.id], "deepcopy"
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Attribute)
        ):
            tgt = stmt.targets[0]
            if isinstance(tgt.value, ast.Name):
                owner = tgt.value.id
                if owner not in config_names and owner in imported_configs and spec.base_module is None:
                    # ``from <gpu spec> import config`` then ``config.target_file = ...``: mutated in place
                    config_names.add(owner)
                    spec.config_name, spec.config_line, spec.config_node = owner, stmt.lineno, stmt
                    spec.base_module, spec.base_mode = imported_configs[owner], "shared"
                if owner in config_names and tgt.attr in ("target_file", "description", "source_module"):
                    value_str = _str(stmt.value)
                    if value_str is not None:
                        setattr(spec, tgt.attr, value_str)
        elif isinstance(stmt, _DEF):
            spec.defs[stmt.name] = stmt
            for deco in stmt.decorator_list:
                call = deco if isinstance(deco, ast.Call) else None
                if call is None and isinstance(deco, ast.Attribute) and deco.attr == "add_helper":
                    if isinstance(deco.value, ast.Name) and deco.value.id in config_names:
                        spec.patches.append(Patch("helper", "", deco.lineno, path, stmt.name))
                    continue
                if call is not None:
                    patch = patch_from_call(call, stmt.name, deco.lineno)
                    if patch is not None:
                        patch.replacement = stmt.name
                        spec.patches.append(patch)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            patch = patch_from_call(call, None, stmt.lineno)
            if patch is None and isinstance(call.func, ast.Call) and call.args:
                # a decorator applied by hand: ``config.replace_function("f")(patched_f)``
                arg = call.args[0]
                patch = patch_from_call(call.func, arg.id if isinstance(arg, ast.Name) else None, stmt.lineno)
                if patch is not None and isinstance(arg, ast.Name):
                    patch.replacement = arg.id
            if patch is not None:
                spec.patches.append(patch)
                continue
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in config_names
            ):
                if func.attr == "add_post_import_block" and call.args:
                    code = _str(call.args[0])
                    if code is not None:
                        spec.post_blocks.append((call.args[0].lineno, code))
                elif func.attr == "drop_import_names":
                    names = tuple(v for v in (_str(a) for a in call.args) if v)
                    spec.dropped.append((stmt.lineno, names))
                elif func.attr == "add_import" and call.args:
                    module = _str(call.args[0])
                    names = _kw(call, "names")
                    if module is not None:
                        found = names.elts if isinstance(names, (ast.List, ast.Tuple)) else []
                        spec.added_imports.append(
                            (stmt.lineno, module, tuple(v for v in (_str(e) for e in found) if v))
                        )
                continue
            # config.patches.append(create_patch_from_external(target=..., replacement_module=...))
            # config.patches.extend(other.patches); config.helpers.extend(other.helpers) ...
            if isinstance(func, ast.Attribute) and func.attr in ("append", "extend", "update") and call.args:
                owner = _dotted(func.value)
                arg0 = call.args[0]
                if (
                    owner is not None
                    and owner.split(".")[0] in config_names
                    and owner.endswith(
                        (".post_import_blocks", ".additional_imports", ".helpers", ".drop_imported_names")
                    )
                ):
                    source = _dotted(arg0) or ""
                    for node in ast.walk(arg0):
                        if isinstance(node, ast.Name) and node.id in imported_configs:
                            source = node.id
                            break
                    root = source.split(".")[0]
                    if root in imported_configs:
                        spec.mirrors[owner.rsplit(".", 1)[1]] = (stmt.lineno, imported_configs[root])
                        if imported_configs[root] not in spec.copies_from:
                            spec.copies_from.append(imported_configs[root])
                    elif owner.endswith(".drop_imported_names") and isinstance(
                        arg0, (ast.Set, ast.List, ast.Tuple)
                    ):
                        spec.dropped.append(
                            (stmt.lineno, tuple(v for v in (_str(e) for e in arg0.elts) if v))
                        )
                    continue
                if owner is None or not owner.endswith(".patches"):
                    continue
                if owner.split(".")[0] not in config_names:
                    continue
                arg = call.args[0]
                if (
                    func.attr == "extend"
                    and isinstance(arg, ast.Attribute)
                    and isinstance(arg.value, ast.Name)
                ):
                    if arg.value.id in imported_configs and spec.base_module is None:
                        spec.base_module, spec.base_mode = imported_configs[arg.value.id], "extend"
                if isinstance(arg, ast.Call) and (_dotted(arg.func) or "").endswith(
                    "create_patch_from_external"
                ):
                    spec.patches.append(
                        Patch(
                            PatchKind.EXTERNAL,
                            _str(_kw(arg, "target")) or "",
                            stmt.lineno,
                            path,
                            replacement=_str(_kw(arg, "replacement_name")),
                            description=_str(_kw(arg, "description")) or "",
                            external_module=_str(_kw(arg, "replacement_module")),
                        )
                    )
    return spec


_SPECS: Bounded[str, tuple[tuple[int, int], Spec]] = Bounded(512)


def load_spec(path: str) -> Spec | None:
    """``parse_spec`` of a file on disk, cached while the file is unchanged."""
    parsed = load_file(path)
    if parsed is None:
        return None
    stamp = _FILES[path][0]
    hit = _SPECS.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    spec = parse_spec(path, parsed.text, parsed.tree)  # the file's tree, parsed once
    _SPECS[path] = (stamp, spec)
    return spec


def spec_for_module(module: str, anchor: str) -> Spec | None:
    path = path_of_module(module, anchor)
    return load_spec(path) if path else None


def base_spec(spec: Spec) -> Spec | None:
    if spec.base_module is None:
        return None
    return spec_for_module(spec.base_module, spec.path)


def effective_patches(spec: Spec, depth: int = 0) -> list[Patch]:
    """The patches a spec applies: its base's (for deepcopy / shared / patches.extend) then its own."""
    out: dict[tuple[str, str], Patch] = {}
    base = base_spec(spec) if depth < 4 else None
    if base is not None:
        for patch in effective_patches(base, depth + 1):
            out[(patch.kind, patch.target or (patch.replacement or ""))] = patch
    for patch in spec.patches:
        out[(patch.kind, patch.target or (patch.replacement or ""))] = patch
    return list(out.values())


def _sources(spec: Spec) -> list[Spec]:
    out = []
    for module in ([spec.base_module] if spec.base_module else []) + spec.copies_from:
        other = spec_for_module(module, spec.path)
        if other is not None and other.path != spec.path and other not in out:
            out.append(other)
    return out


def effective_post_blocks(spec: Spec, depth: int = 0) -> list[tuple[str, int, str]]:
    """(spec path, line, code) of every post-import block the generated file gets (inherited ones first)."""
    out = []
    if depth < 4:
        for other in _sources(spec):
            out.extend(effective_post_blocks(other, depth + 1))
    out.extend((spec.path, line, code) for line, code in spec.post_blocks)
    return out


def effective_added_imports(spec: Spec, depth: int = 0) -> list[tuple[str, int, str, tuple[str, ...]]]:
    out = []
    if depth < 4:
        for other in _sources(spec):
            out.extend(effective_added_imports(other, depth + 1))
    out.extend((spec.path, line, module, names) for line, module, names in spec.added_imports)
    return out


def effective_drops(spec: Spec, depth: int = 0) -> set[str]:
    """Names the generated file drops from the source module's imports: a deepcopied or shared base's, those
    of every spec whose ``drop_imported_names`` this one copies, and its own."""
    out: set[str] = set()
    if depth < 4:
        base = base_spec(spec) if spec.base_mode in ("deepcopy", "shared") else None
        if base is not None:
            out |= effective_drops(base, depth + 1)
        if "drop_imported_names" in spec.mirrors:
            other = spec_for_module(spec.mirrors["drop_imported_names"][1], spec.path)
            if other is not None and other.path != spec.path:
                out |= effective_drops(other, depth + 1)
    for _, names in spec.dropped:
        out.update(names)
    return out


def effective_helpers(spec: Spec, depth: int = 0) -> list[Patch]:
    out = []
    if depth < 4:
        for other in _sources(spec):
            out.extend(effective_helpers(other, depth + 1))
    out.extend(p for p in spec.patches if p.kind == "helper" and p.replacement)
    return out


def effective_target_file(spec: Spec, depth: int = 0) -> str | None:
    if spec.target_file:
        return spec.target_file
    base = base_spec(spec) if depth < 4 else None
    return effective_target_file(base, depth + 1) if base else None


def effective_description(spec: Spec, depth: int = 0) -> str | None:
    if spec.description:
        return spec.description
    base = base_spec(spec) if depth < 4 else None
    return effective_description(base, depth + 1) if base else None


def package_specs(package_dir: str | os.PathLike[str], device: str | None = None) -> list[str]:
    """The patch specs of a model package, sorted: all of them, or those for ``device`` ("gpu" or "npu"); an
    unreadable package has none."""
    suffix = {"gpu": GPU_SPEC_SUFFIX, "npu": NPU_SPEC_SUFFIX}.get(device or "", SPEC_SUFFIX)
    try:
        names = sorted(os.listdir(package_dir))
    except OSError:
        return []
    return [os.path.join(package_dir, n) for n in names if n.endswith(suffix)]


def spec_for_generated(gen_path: str) -> Spec | None:
    """The spec whose ``target_file`` is this generated file (looked up in the model package)."""
    gen_dir = os.path.dirname(gen_path)
    package_dir = os.path.dirname(gen_dir) if os.path.basename(gen_dir) == "generated" else gen_dir
    name = os.path.basename(gen_path)
    candidates = package_specs(package_dir)
    for path in candidates:
        spec = load_spec(path)
        if spec is not None and effective_target_file(spec) == name:
            return spec
    # naming convention: patched_modeling_<m>_<dev>.py <- <m>_<dev>_patch_gen_config.py
    match = re.match(r"patched_modeling_(.+)_(gpu|npu)\.py$", name)
    if match:
        for path in candidates:
            if os.path.basename(path) == f"{match.group(1)}_{match.group(2)}{SPEC_SUFFIX}":
                return load_spec(path)
    return None


# -- generated files ------------------------------------------------------------------------------


@dataclass
class Section:
    kind: str  # "MODIFIED CLASS", "PATCHED CLASS", "PATCHED FUNCTION", "HELPERS", "HELPERS AFTER"
    target: str
    marker_line: int
    methods: tuple[str, ...] = ()
    source: str | None = None  # the spec module the replacement came from (``# Source:``)
    node: ast.stmt | None = None  # the class / function the section holds

    @property
    def start(self) -> int:
        if self.node is None:
            return self.marker_line
        decos = getattr(self.node, "decorator_list", [])
        return min([self.node.lineno, *(d.lineno for d in decos)])

    @property
    def end(self) -> int:
        return (self.node.end_lineno or self.node.lineno) if self.node is not None else self.marker_line


@dataclass
class Generated:
    path: str
    source_module: str | None = None
    based_on: str | None = None
    based_on_line: int = 0
    banner_patches: list[tuple[str, str, int]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    tree: ast.Module | None = None
    text: str = ""

    def section_for(self, kind: str, target: str) -> Section | None:
        for section in self.sections:
            if section.kind == kind and section.target == target:
                return section
        return None

    def top_level(self, name: str) -> ast.stmt | None:
        if self.tree is None:
            return None
        for stmt in self.tree.body:
            if isinstance(stmt, _DEF) and stmt.name == name:
                return stmt
        return None


def _block_after(lines: list[str], marker_line: int) -> tuple[int, int] | None:
    """0-based [start, end) of the top-level def/class (with decorators) following a section marker."""
    n = len(lines)
    i = marker_line
    while i < n and (not lines[i].strip() or lines[i].startswith("#")):
        i += 1
    start = i
    while i < n and not lines[i].startswith(("def ", "class ", "async def ")):
        if lines[i] and not lines[i][0].isspace() and not lines[i].startswith(("@", ")", "]", "}", "#")):
            return None
        i += 1
    if i >= n:
        return None
    i += 1
    end = i
    while i < n:
        line = lines[i]
        if line and not line[0].isspace() and not line.startswith(("#", ")", "]", "}")):
            break
        if line.strip() and not line.startswith("#"):
            end = i + 1
        i += 1
    return start, end


def _parse_at(text: str, offset: int) -> ast.Module | None:
    """``_parse`` of a chunk whose first line is line ``offset + 1`` of its file (line numbers shifted after
    parsing: padding the chunk with newlines made the parser read the whole file's length every time)."""
    tree = _parse(text)
    if tree is not None and offset:
        _shift_lines(tree, offset)
    return tree


def _shift_lines(tree: ast.AST, offset: int) -> None:
    """``ast.increment_lineno`` over the list walk (the generator walk cost as much as the parse itself)."""
    for node in _walk_list(tree):
        if "lineno" in node._attributes:
            node.lineno = getattr(node, "lineno", 0) + offset  # type: ignore[attr-defined]
            end = getattr(node, "end_lineno", 0)
            if end is not None:
                node.end_lineno = end + offset  # type: ignore[attr-defined]


def _section_nodes(gen: Generated, lines: list[str]) -> bool:
    """Parse only the patched sections' blocks (much cheaper than the whole file). False on any doubt."""
    for section in gen.sections:
        if section.kind not in ("MODIFIED CLASS", "PATCHED CLASS", "PATCHED FUNCTION"):
            continue
        block = _block_after(lines, section.marker_line)
        if block is None:
            if section.kind == "PATCHED CLASS":
                continue  # an external replacement is an import, not a block
            return False
        start, end = block
        if section.kind == "MODIFIED CLASS" and section.methods:
            node = _patched_methods(lines, start, end, section)
            if node is None:
                return False
            section.node = node
            continue
        tree = _parse_at("\n".join(lines[start:end]), start)
        if tree is None or len(tree.body) != 1 or getattr(tree.body[0], "name", None) != section.target:
            return False
        section.node = tree.body[0]
    return True


def _patched_methods(lines: list[str], start: int, end: int, section: Section) -> ast.ClassDef | None:
    """A stand-in ``ClassDef`` holding only the patched methods of a class block, each parsed on its own at
    its own line numbers (classes are large; their patched methods are a small part)."""
    class_line = next((i for i in range(start, end) if lines[i].startswith("class ")), None)
    if class_line is None:
        return None
    methods: list[ast.stmt] = []
    for name in section.methods:
        pattern = re.compile(rf"^    (?:async )?def {re.escape(name)}\(")
        def_line = next((i for i in range(class_line + 1, end) if pattern.match(lines[i])), None)
        if def_line is None:
            return None
        first = def_line
        while first - 1 > class_line and lines[first - 1].startswith("    @"):
            first -= 1
        stop = def_line + 1
        last = def_line
        while stop < end:
            line = lines[stop]
            if line.strip() and not line.startswith("#"):
                indent = len(line) - len(line.lstrip())
                if indent <= 4 and not line.lstrip().startswith((")", "]", "}", "#")):
                    break
                last = stop
            stop += 1
        if first == 0:
            return None
        tree = _parse_at("class _:\n" + "\n".join(lines[first : last + 1]), first - 1)
        if tree is None or not isinstance(tree.body[0], ast.ClassDef) or len(tree.body[0].body) != 1:
            return None
        method = tree.body[0].body[0]
        if getattr(method, "name", None) != name:
            return None
        methods.append(method)
    cls = ast.ClassDef(name=section.target, bases=[], keywords=[], body=methods, decorator_list=[])
    cls.lineno, cls.col_offset = class_line + 1, 0
    cls.end_lineno, cls.end_col_offset = end, 0
    return cls


def _read_banner(gen: Generated, lines: list[str]) -> None:
    """The leading comment block: source module, ``Based on`` version, the patches listed."""
    in_patches = False
    for i, line in enumerate(lines, 1):
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        if gen.source_module is None and (m := _BANNER_SOURCE.match(line)):
            gen.source_module = m.group("module")
        elif gen.based_on is None and (m := _BANNER_BASED.match(line)):
            gen.based_on, gen.based_on_line = m.group("version"), i
        elif "Patches applied:" in line:
            in_patches = True
        elif in_patches and (m := _BANNER_PATCH.match(line)):
            gen.banner_patches.append((m.group("kind"), m.group("target"), i))


def generated_banner(path: str, text: str) -> Generated:
    """Only the banner of a generated file (its first 4 KB; no sections, no parse): what NPU503 and NPU506
    read, without parsing a file the file pass parses anyway."""
    gen = Generated(path=path, tree=None, text=text[:4096])
    _read_banner(gen, gen.text.splitlines())
    return gen


def parse_generated(path: str, text: str, tree: ast.Module | None = None, full: bool = True) -> Generated:
    """Banner and sections of a generated file. With ``full=False`` and no ``tree``, only the patched
    sections are parsed (``Generated.tree`` stays None) unless that fails, then the whole file is."""
    lines = _splitlines(text)
    if tree is None:
        tree = shared_tree(path, text)  # the file pass's tree: sections are located in it by line range
    gen = Generated(path=path, tree=tree, text=text)
    _read_banner(gen, lines)
    # fenced sections
    for i, line in enumerate(lines, 1):
        if not line.startswith("# ["):
            continue
        m = _MARKER.match(line)
        if not m:
            continue
        section = Section(m.group("kind"), m.group("target") or "", i)
        for follow in lines[i : i + 6]:
            if (mm := _METHODS.match(follow)) is not None:
                section.methods = tuple(x.strip() for x in mm.group("methods").split(",") if x.strip())
            elif (ms := _SECTION_SOURCE.match(follow)) is not None:
                section.source = ms.group("module")
            elif follow.startswith("# ===="):
                break
        gen.sections.append(section)
    if gen.tree is None and gen.sections and not full and _section_nodes(gen, lines):
        return gen
    if gen.tree is None:
        gen.tree = _parse(text, path)
    if gen.tree is not None and gen.sections:
        body = gen.tree.body
        for k, section in enumerate(gen.sections):
            limit = gen.sections[k + 1].marker_line if k + 1 < len(gen.sections) else 1 << 30
            for stmt in body:
                start = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
                if start <= section.marker_line:
                    continue
                if start > limit and section.kind not in ("MODIFIED CLASS",):
                    break
                named = getattr(stmt, "name", None)
                if section.kind in ("HELPERS", "HELPERS AFTER"):
                    section.node = stmt
                    break
                if named == section.target:
                    section.node = stmt
                    break
                if section.kind == "PATCHED CLASS" and isinstance(stmt, ast.ImportFrom):
                    if any((a.asname or a.name) == section.target for a in stmt.names):
                        section.node = stmt
                        break
    return gen


# -- normalised comparison --------------------------------------------------------------------------


def apply_name_map(text: str, name_map: dict[str, str]) -> str:
    """patchgen's ``name_map``: every occurrence of a key (longest first) becomes its value, in one pass."""
    if not name_map:
        return text
    keys = sorted(name_map, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return pattern.sub(lambda m: name_map[m.group(0)], text)


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def replacement_node(ref: DefRef, name_map: dict[str, str]) -> tuple[ast.stmt, str] | None:
    """The replacing def after ``name_map`` and the text its positions refer to (the renamed segment,
    re-parsed at the same line numbers, when there is a ``name_map``)."""
    if not name_map:
        return ref.node, ref.text
    lines = _splitlines(ref.text)
    node = ref.node
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    segment = "\n" * (start - 1) + apply_name_map("\n".join(lines[start - 1 : node.end_lineno]), name_map)
    tree = parse_snippet(segment)
    if tree is None or not tree.body or not isinstance(tree.body[0], _DEF):
        return None
    return tree.body[0], segment


def body_key(node: ast.stmt) -> str:
    """A formatting-, comment- and docstring-insensitive key of a def's body."""
    body = _strip_docstring(list(getattr(node, "body", [])))
    if isinstance(node, ast.ClassDef):
        body = [
            ast.FunctionDef(
                name=s.name,
                args=s.args,
                body=_strip_docstring(s.body),
                decorator_list=[],
                returns=None,
                type_comment=None,
                type_params=[],
            )
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            else s
            for s in body
        ]
    return "\n".join(ast.dump(s) for s in body)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@functools.lru_cache(maxsize=16)
def _splitlines(text: str) -> list[str]:
    """The lines ``ast`` numbers (``\n``, ``\r\n``, ``\r``): ``str.splitlines`` also breaks at form feeds,
    ``\x1c``-``\x1e`` and U+2028, and would shift every later line of a spec or generated file."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _body_text(node: ast.stmt, text: str) -> str | None:
    body = _strip_docstring(list(getattr(node, "body", [])))
    if not body:
        return None
    lines = _splitlines(text)[body[0].lineno - 1 : node.end_lineno]
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            out.append(stripped)
    return "\n".join(out)


def same_body(a: ast.stmt, a_text: str, b: ast.stmt, b_text: str) -> bool:
    """Whether two defs have the same body (ignoring docstrings, comments and formatting): a text fast
    path, then normalised ASTs; class bodies statement by statement."""
    if isinstance(a, ast.ClassDef) or isinstance(b, ast.ClassDef):
        if not (isinstance(a, ast.ClassDef) and isinstance(b, ast.ClassDef)):
            return False
        xs, ys = _strip_docstring(a.body), _strip_docstring(b.body)
        if len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys):
            if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(
                y, (ast.FunctionDef, ast.AsyncFunctionDef)
            ):
                if x.name != y.name or not same_body(x, a_text, y, b_text):
                    return False
            elif ast.dump(x) != ast.dump(y):
                return False
        return True
    ta, tb = (_body_text(a, a_text), _body_text(b, b_text)) if a_text and b_text else (None, None)
    if ta and ta == tb:
        return True
    if not (a_text and b_text):
        return body_key(a) == body_key(b)
    xs, ys = _strip_docstring(list(getattr(a, "body", []))), _strip_docstring(list(getattr(b, "body", [])))
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):  # statement by statement: text with layout removed, else the ASTs
        if _squeezed(x, a_text) != _squeezed(y, b_text) and ast.dump(x) != ast.dump(y):
            return False
    return True


_SPACE = re.compile(r"\s+")
_TRAILING_COMMA = re.compile(r",(?=[)\]}])")


def _squeezed(node: ast.stmt, text: str) -> str:
    """A statement's text without layout: comment-only lines, whitespace and magic trailing commas removed."""
    lines = _splitlines(text)[node.lineno - 1 : node.end_lineno]
    kept = "".join(line for line in lines if not line.lstrip().startswith("#"))
    return _TRAILING_COMMA.sub("", _SPACE.sub("", kept))


def find_method(cls: ast.stmt | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if not isinstance(cls, ast.ClassDef):
        return None
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


# -- patch <-> section pairing ------------------------------------------------------------------------


@dataclass
class Pair:
    patch: Patch
    ref: DefRef | None  # the replacing definition (None: external / unresolved)
    generated: ast.stmt | None  # the def in the generated file (None: no section)
    section: Section | None


def _resolve_replacement(spec: Spec, patch: Patch) -> DefRef | None:
    if patch.replacement is None or patch.kind == "external":
        return None
    owner = spec if patch.spec_path == spec.path else load_spec(patch.spec_path)
    if owner is None:
        return None
    return owner.resolve(patch.replacement)


def pair_patches(spec: Spec, gen: Generated) -> list[Pair]:
    pairs = []
    for patch in effective_patches(spec):
        if patch.kind == "helper":
            continue
        ref = _resolve_replacement(spec, patch)
        section: Section | None = None
        node: ast.stmt | None = None
        if patch.method is not None:
            section = gen.section_for("MODIFIED CLASS", patch.cls)
            if section is not None and patch.method in section.methods:
                node = find_method(section.node, patch.method)
            elif section is not None:
                section = None
        elif patch.kind == "function_replacement":
            section = gen.section_for("PATCHED FUNCTION", patch.target)
            node = section.node if section else None
        elif patch.kind in ("class_replacement", "external"):
            section = gen.section_for("PATCHED CLASS", patch.target)
            node = section.node if section else None
        pairs.append(Pair(patch, ref, node, section))
    return pairs


@dataclass
class Drift:
    kind: str  # "body" | "missing-section" | "extra-section"
    message: str
    line: int  # in the generated file
    origin: Origin | None = None


def compare_generated(spec: Spec, gen: Generated) -> list[Drift]:
    """Where a generated file no longer matches its spec (hand edits, or a spec changed without regen)."""
    out: list[Drift] = []
    pairs = pair_patches(spec, gen)
    covered: set[tuple[str, str]] = set()
    for pair in pairs:
        patch = pair.patch
        label = f"{patch.kind} `{patch.target}`"
        if patch.method is not None:
            covered.add(("MODIFIED CLASS", f"{patch.cls}.{patch.method}"))
        elif patch.kind == "function_replacement":
            covered.add(("PATCHED FUNCTION", patch.target))
        else:
            covered.add(("PATCHED CLASS", patch.target))
        origin = Origin(patch.spec_path, patch.line)
        if pair.section is None:
            out.append(
                Drift(
                    "missing-section", f"{label} in the spec has no section in the generated file", 1, origin
                )
            )
            continue
        if pair.ref is None or pair.generated is None:
            continue
        renamed = replacement_node(pair.ref, patch.name_map)
        if renamed is None:
            continue
        spec_node, spec_text = renamed
        if not same_body(spec_node, spec_text, pair.generated, gen.text):
            diff_line = _first_difference(spec_node, pair.generated)
            out.append(
                Drift(
                    "body",
                    f"the body of `{patch.target}` differs from the spec's `{pair.ref.node.name}` "
                    "(edited by hand, or the spec changed without regenerating)",
                    diff_line or pair.generated.lineno,
                    Origin(pair.ref.path, pair.ref.line),
                )
            )
    for section in gen.sections:
        if section.kind == "MODIFIED CLASS":
            for method in section.methods:
                if ("MODIFIED CLASS", f"{section.target}.{method}") not in covered:
                    out.append(
                        Drift(
                            "extra-section",
                            f"section patches `{section.target}.{method}` but the spec has no such patch",
                            section.marker_line,
                        )
                    )
        elif section.kind in ("PATCHED FUNCTION", "PATCHED CLASS"):
            if (section.kind, section.target) not in covered:
                out.append(
                    Drift(
                        "extra-section",
                        f"section `[{section.kind}] {section.target}` has no patch in the spec",
                        section.marker_line,
                    )
                )
    return out


_FIRST_DEF = re.compile(r"^(?:class |def |async def |@)", re.MULTILINE)


def generated_imports(text: str, tree: ast.Module | None = None) -> dict[str, dict[str, int]]:
    """``from M import a, b`` statements at the top of a generated file (before its first definition):
    module -> imported name -> line. ``tree``, when given, is ``text`` already parsed (the run's tree of the
    file): the header's statements are read from it when the header ends where one of its top-level statements
    starts; otherwise only the import header is parsed."""
    match = _FIRST_DEF.search(text)
    body = _header_statements(tree, text, match.start() if match else None) if tree is not None else None
    out: dict[str, dict[str, int]] = {}
    if body is None:
        header_tree = _parse(text[: match.start()] if match else text, "<generated header>")
        if header_tree is None:
            return out
        body = header_tree.body
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
            names = out.setdefault(stmt.module, {})
            for alias in stmt.names:
                names[alias.asname or alias.name] = stmt.lineno
    return out


def _header_statements(tree: ast.Module, text: str, cut: int | None) -> list[ast.stmt] | None:
    """The statements of ``text[:cut]`` read from ``tree`` (all of ``text`` parsed): exactly those before the
    top-level statement that starts on the line ``cut`` begins (the prefix then ends between two statements, so
    parsing it alone gives the same nodes); None when no statement starts there (the cut falls inside one, or
    a lone ``\r`` line break makes the lines uncertain): then the caller parses the prefix."""
    if cut is None:
        return tree.body
    if "\r" in text[:cut]:
        return None
    line = text.count("\n", 0, cut) + 1
    for i, stmt in enumerate(tree.body):
        start = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        if start == line:
            return tree.body[:i]
        if start > line:
            return None
    return None


def _block_imports(code: str) -> dict[str, set[str]]:
    tree = parse_snippet(textwrap.dedent(code))
    out: dict[str, set[str]] = {}
    for node in _walk_list(tree) if tree is not None else ():
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.setdefault(node.module, set()).update(a.asname or a.name for a in node.names)
    return out


def import_drift(spec: Spec, text: str, tree: ast.Module | None = None) -> list[tuple[str, str, int]]:
    """(module, name, line in the generated file) for each name the generated file imports from a ``veomni``
    module that the spec no longer provides (neither an ``add_import`` nor a post-import block of it or of
    the specs it copies): regenerating drops the import, and the patched code that uses the name breaks.
    ``tree``: ``text`` already parsed, if it has been."""
    provided: dict[str, set[str]] = {}
    for _path, _line, module, names in effective_added_imports(spec):
        if not names:
            return []  # ``from M import *``: what it brings is not read here
        provided.setdefault(module, set()).update(names)
    for _path, _line, code in effective_post_blocks(spec):
        for module, names in _block_imports(code).items():
            provided.setdefault(module, set()).update(names)
    emitted = _emitted_names(spec)
    out = []
    for module, names in generated_imports(text, tree).items():
        if module.split(".")[0] != "veomni":
            continue
        for name, line in names.items():
            if name not in provided.get(module, ()) and (emitted is None or name in emitted):
                out.append((module, name, line))
    return out


def _emitted_names(spec: Spec) -> set[str] | None:
    """The names the code a regeneration copies from the spec reads (its patches' and helpers' definitions,
    its post-import blocks), or None when one of those definitions cannot be found (then every name counts).
    A name only the old generated code read (a module-level slot a fix moved into ``__init__``) is dropped
    with its import, harmlessly: upstream code never reads ``veomni`` names."""
    nodes: list[ast.AST] = []
    for patch in [*effective_patches(spec), *effective_helpers(spec)]:
        if patch.external_module is not None:
            continue  # the class is imported, not copied
        owner = (
            spec
            if os.path.normpath(patch.spec_path) == os.path.normpath(spec.path)
            else load_spec(patch.spec_path)
        )
        node = owner.defs.get(patch.replacement or "") if owner is not None else None
        if node is None:
            return None
        nodes.append(node)
    for _path, _line, code in effective_post_blocks(spec):
        block = parse_snippet(code)
        if block is None:
            return None
        nodes.append(block)
    return {n.id for node in nodes for n in _walk_list(node) if isinstance(n, ast.Name)}


def _first_difference(spec_node: ast.stmt, gen_node: ast.stmt) -> int | None:
    a = _strip_docstring(list(getattr(spec_node, "body", [])))
    b = _strip_docstring(list(getattr(gen_node, "body", [])))
    for x, y in zip(a, b):
        if ast.dump(x) != ast.dump(y):
            return y.lineno
    if len(b) > len(a):
        return b[len(a)].lineno
    return getattr(gen_node, "lineno", None)


# -- origin mapping -----------------------------------------------------------------------------------


def _line_map(spec_node: ast.AST, gen_node: ast.AST) -> dict[int, int] | None:
    """Generated line -> spec line for two structurally equal trees (None when they differ).

    When only expressions differ (a spec line fixed since the file was generated), the statements still pair up."""
    exact = _node_line_map(spec_node, gen_node, lambda n: hasattr(n, "lineno"))
    if exact is not None:
        return exact
    return _node_line_map(spec_node, gen_node, lambda n: isinstance(n, (ast.stmt, ast.ExceptHandler)))


def _node_line_map(
    spec_node: ast.AST, gen_node: ast.AST, keep: Callable[[ast.AST], bool]
) -> dict[int, int] | None:
    a = [n for n in _walk_list(spec_node) if keep(n)]
    b = [n for n in _walk_list(gen_node) if keep(n)]
    if len(a) != len(b):
        return None
    out: dict[int, int] = {}
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return None
        out.setdefault(y.lineno, x.lineno)  # type: ignore[attr-defined]
    for x, y in zip(a, b):  # closing lines of multi-line nodes, where no node starts
        end_y, end_x = getattr(y, "end_lineno", None), getattr(x, "end_lineno", None)
        if end_y is not None and end_x is not None:
            out.setdefault(end_y, end_x)
    return out


@dataclass
class OriginMap:
    """Origins for lines of one generated file."""

    spec: Spec
    gen: Generated
    spans: list[tuple[int, int, Pair, dict[int, int] | None]] = field(default_factory=list)

    def origin(self, line: int) -> Origin | None:
        for i, (start, end, pair, lines) in enumerate(self.spans):
            if start <= line <= end:
                if lines is _LAZY:  # line maps are built only for sections that hold a finding
                    lines = _pair_lines(pair)
                    self.spans[i] = (start, end, pair, lines)
                ref = pair.ref
                if ref is None:  # an external replacement: the import that stands for the class
                    return Origin(pair.patch.spec_path, pair.patch.line)
                if lines:
                    best = max((g for g in lines if g <= line), default=None)
                    if best is not None:
                        return Origin(ref.path, lines[best] + (line - best))
                return Origin(ref.path, ref.line)
        return self._unpatched(line)

    def _unpatched(self, line: int) -> Origin | None:
        tree = self.gen.tree
        if tree is None:
            return None
        text = (
            _splitlines(self.gen.text)[line - 1].strip()
            if 0 < line <= len(_splitlines(self.gen.text))
            else ""
        )
        if text and not text.startswith("#"):
            code_text = _TRAILING_COMMENT.sub(
                "", text
            )  # a noqa comment added to the spec line must not move the origin
            for path, start, code in effective_post_blocks(self.spec):
                for k, block_line in enumerate(code.split("\n")):
                    if _TRAILING_COMMENT.sub("", block_line.strip()) == code_text:
                        return Origin(path, start + k)
        stmt_at = next(
            (s for s in tree.body if s.lineno <= line <= (s.end_lineno or s.lineno)),
            None,
        )
        if isinstance(stmt_at, (ast.Import, ast.ImportFrom)):
            module = stmt_at.module if isinstance(stmt_at, ast.ImportFrom) else stmt_at.names[0].name
            bound = {a.asname or a.name for a in stmt_at.names}
            for path, call_line, added, names in effective_added_imports(self.spec):
                if added == module and (not names or bound & set(names)):
                    return Origin(path, call_line)
            return None
        stmt = next(
            (
                s
                for s in tree.body
                if min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", []))])
                <= line
                <= (s.end_lineno or s.lineno)
            ),
            None,
        )
        if not isinstance(stmt, _DEF):
            return None
        spec_name = os.path.basename(self.spec.path)
        config = self.spec.config_name
        if isinstance(stmt, ast.ClassDef):
            method = next(
                (
                    s
                    for s in stmt.body
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and min([s.lineno, *(d.lineno for d in s.decorator_list)])
                    <= line
                    <= (s.end_lineno or s.lineno)
                ),
                None,
            )
            if method is not None:
                hint = f'@{config}.override_method("{stmt.name}.{method.name}")'
            else:
                hint = f'@{config}.replace_class("{stmt.name}")'
        else:
            hint = f'@{config}.replace_function("{stmt.name}")'
        return Origin(
            self.spec.path, self.spec.config_line, f"unpatched upstream code: add `{hint}` in {spec_name}"
        )


def build_origin_map(path: str, text: str, tree: ast.Module | None = None) -> OriginMap | None:
    spec = spec_for_generated(path)
    if spec is None:
        return None
    gen = parse_generated(path, text, tree)
    omap = OriginMap(spec, gen)
    for pair in [*pair_patches(spec, gen), *_helper_pairs(spec, gen)]:
        if pair.patch.kind == "external" and isinstance(pair.generated, ast.ImportFrom):
            node = pair.generated
            omap.spans.append((node.lineno, node.end_lineno or node.lineno, pair, None))
            continue
        if pair.ref is None or pair.generated is None:
            continue
        gen_node = pair.generated
        start = min([gen_node.lineno, *(d.lineno for d in getattr(gen_node, "decorator_list", []))])
        end = gen_node.end_lineno or gen_node.lineno
        omap.spans.append((start, end, pair, _LAZY))
    return omap


_LAZY: dict[int, int] = {}  # sentinel: the span's line map is not built yet


def _pair_lines(pair: Pair) -> dict[int, int] | None:
    """Generated line -> spec line inside one patched section (None when the trees differ)."""
    assert pair.ref is not None and pair.generated is not None
    gen_node = pair.generated
    start = min([gen_node.lineno, *(d.lineno for d in getattr(gen_node, "decorator_list", []))])
    renamed = replacement_node(pair.ref, pair.patch.name_map)
    lines: dict[int, int] | None = None
    if renamed is not None:
        body_a = _strip_docstring(list(getattr(renamed[0], "body", [])))
        body_b = _strip_docstring(list(getattr(gen_node, "body", [])))
        if len(body_a) == len(body_b):
            lines = {}
            for x, y in zip(body_a, body_b):
                sub = _line_map(x, y)
                if sub is None:
                    lines = None
                    break
                lines.update(sub)
    if lines is not None:
        lines.setdefault(gen_node.lineno, pair.ref.node.lineno)
        for g in range(start, gen_node.lineno):
            lines.setdefault(g, pair.ref.node.lineno)
    return lines


def _helper_pairs(spec: Spec, gen: Generated) -> list[Pair]:
    """Helpers (``add_helper``) are emitted verbatim as top-level defs of the same name."""
    if gen.tree is None:
        return []
    out = []
    for patch in effective_helpers(spec):
        owner = load_spec(patch.spec_path)
        ref = owner.resolve(patch.replacement) if owner and patch.replacement else None
        node = gen.top_level(patch.replacement or "")
        if ref is not None and node is not None:
            out.append(Pair(patch, ref, node, None))
    return out


_TRAILING_COMMENT = re.compile(
    r"\s+#[^'\"]*$"
)  # a comment after the code (no quote in it: not inside a string)


def attach_origins(
    path: str, text: str, tree: ast.Module | None, diags: Iterable[Diagnostic]
) -> list[Diagnostic]:
    """Set ``origin`` on findings in a generated file (spec line of a patched section, or the override
    that would fix unpatched upstream code). Findings that already carry an origin are kept as they are."""
    diags = list(diags)
    if not diags:
        return diags
    omap = build_origin_map(path, text, tree)  # a failure is the engine's (internal error, exit 2)
    if omap is None:
        return diags
    out = []
    for diag in diags:
        if diag.origin is None:
            origin = omap.origin(diag.line)
            if origin is not None:
                diag = diag.replace(origin=origin)
        out.append(diag)
    return out


def npu_spec_path(gpu_spec_path: str) -> str:
    directory, name = os.path.split(gpu_spec_path)
    return os.path.join(directory, name[: -len(GPU_SPEC_SUFFIX)] + NPU_SPEC_SUFFIX)


def npu_target_file(spec: Spec) -> str:
    target = effective_target_file(spec)
    if target and target.endswith("_gpu.py"):
        return target[: -len("_gpu.py")] + "_npu.py"
    stem = os.path.basename(spec.path)[: -len(GPU_SPEC_SUFFIX)]
    return f"patched_modeling_{stem}_npu.py"


def regen_command(spec_path: str) -> str:
    """``patchgen <dotted.module> -o <package>/generated --diff -v`` (paths relative to the VeOmni root)."""
    module = module_of(spec_path)
    root = veomni_root_of(spec_path)
    package = os.path.dirname(os.path.abspath(spec_path))
    if module is None or root is None:
        stem = Path(spec_path).stem
        return f"patchgen {stem} -o {os.path.join(os.path.dirname(spec_path) or '.', 'generated')} --diff -v"
    rel = Path(os.path.relpath(package, os.path.abspath(root))).as_posix()
    return f"patchgen {module} -o {rel}/generated --diff -v"


def _tree_patchgen(root: str) -> tuple[dict | None, bool]:
    """The tree's ``[tool.patchgen]`` table (None: none) and whether its Makefile has a ``patchgen:`` target."""
    from npu_lint.core.safeio import read_regular

    table = None
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(read_regular(os.path.join(root, "pyproject.toml"))[0].decode("utf-8"))
        found = data.get("tool", {}).get("patchgen")
        table = found if isinstance(found, dict) else None
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    try:
        makefile = read_regular(os.path.join(root, "Makefile"))[0].decode("utf-8", "replace")
        has_target = re.search(r"^patchgen\s*:", makefile, re.M) is not None
    except OSError:
        has_target = False
    return table, has_target


def tree_regen_command(spec_path: str) -> tuple[str, str | None, bool]:
    """(command, directory to run it from, whether ``make patchgen`` regenerates every spec) that regenerates ``spec_path``'s generated file the tree's own way.

    A tree whose ``pyproject.toml`` configures ``[tool.patchgen]`` (VeOmni's main: ``search_root``,
    ``package_prefix``) runs ``patchgen <dotted spec module> --diff`` from its root (output: the spec's sibling
    ``generated/``, ruff settings and discovery from that table; its Makefile's ``make patchgen`` regenerates
    every spec); other trees get ``regen_command``'s explicit ``-o <package>/generated`` form."""
    root = veomni_root_of(os.path.abspath(spec_path))
    module = module_of(spec_path)
    if root is not None and module is not None:
        table, make_target = _tree_patchgen(root)
        prefix = table.get("package_prefix") if table else None
        if isinstance(prefix, str) and (module == prefix or module.startswith(prefix + ".")):
            return f"patchgen {module} --diff", root, make_target
    return regen_command(spec_path), root, False


def produced_by_spec(package_dir: str, stem: str) -> bool:
    """Whether ``generated/<stem>.py`` of a model package is patchgen output of one of its specs: a spec's
    target file, or the NPU sibling a GPU spec implies (``npu_target_file``, the file NPU501 creates). Such a
    module exists once the package is regenerated (NPU505 reports when it is not)."""
    wanted = f"{stem}.py"
    try:
        names = sorted(os.listdir(package_dir))
    except OSError:
        return False
    for name in names:
        if not name.endswith("_patch_gen_config.py"):
            continue
        spec = load_spec(os.path.join(package_dir, name))
        if spec is None:
            continue
        if effective_target_file(spec) == wanted:
            return True
        if name.endswith(GPU_SPEC_SUFFIX) and npu_target_file(spec) == wanted:
            return True
    return False
