"""The inventory of one model package: its files (present, missing), their facts, the findings, what is reused.

:func:`read_package` reads the package statically (specs, generated files and their banners, the ``__init__``
switch, the tests that name it) into a :class:`Package`; :func:`build_inventory` lists the files a migration
needs; :func:`lint_package` runs every rule on the package (:class:`Lint`); :func:`build_reuse` says which files
and patch functions are reused unchanged, edited or regenerated, and why.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_lint.core.astutil import call_name, keyword_arg
from npu_lint.core.safeio import read_text
from npu_lint.veomni.layout import find_veomni_root
from npu_lint.veomni.patchgen import package_specs, veomni_root_of
from npu_lint.veomni.profile import Generation
from npu_lint.veomni.project import Project

_TEST_GLOBS = ("test_*.py", "*_test.py")


# -- small static helpers -------------------------------------------------------------------------------------


def parse_file(path: Path) -> ast.Module | None:
    try:
        return ast.parse(read_text(path), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def str_const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def embedded_trees(tree: ast.Module) -> list[ast.Module]:
    """Code strings passed to ``add_post_import_block`` / ``add_helper``: parsed (they land in generated files)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and call_name(node) in ("add_post_import_block", "add_helper"):
            code = str_const(node.args[0]) if node.args else None
            if code:
                try:
                    out.append(ast.parse(textwrap.dedent(code)))
                except SyntaxError:
                    pass
    return out


def dispatch_decls(tree: ast.Module) -> list[tuple[str, str, str, str]]:
    """(kind OpSlot/VeomniOp, op, variant, name) declared in a module (and its embedded code strings)."""
    out: list[tuple[str, str, str, str]] = []
    for t in [tree, *embedded_trees(tree)]:
        for node in ast.walk(t):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                kind = call_name(node.value)
                if kind in ("OpSlot", "VeomniOp") and len(node.value.args) >= 2:
                    op, variant = str_const(node.value.args[0]), str_const(node.value.args[1])
                    target = node.targets[0]
                    name = (
                        target.id
                        if isinstance(target, ast.Name)
                        else f"self.{target.attr}"
                        if isinstance(target, ast.Attribute)
                        else "?"
                    )
                    if op and variant:
                        out.append((kind, op, variant, name))
    return out


def _spec_info(path: Path) -> dict[str, Any]:
    tree = parse_file(path)
    info: dict[str, Any] = {
        "path": str(path),
        "parsed": tree is not None,
        "patches": [],
        "shape": None,
        "imports_gpu": [],
        "source_module": None,
        "target_file": None,
    }
    if tree is None:
        return info
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = call_name(node)
            if name == "PatchConfig":
                info["source_module"] = str_const(keyword_arg(node, "source_module"))
                info["target_file"] = str_const(keyword_arg(node, "target_file"))
            elif name in ("override_method", "replace_function", "replace_class", "modify_init"):
                target = str_const(node.args[0]) if node.args else str_const(keyword_arg(node, "target"))
                repl = keyword_arg(node, "replacement")
                info["patches"].append(
                    {
                        "kind": name,
                        "target": target,
                        "line": node.lineno,
                        "replacement": repl.id if isinstance(repl, ast.Name) else None,
                    }
                )
            elif name == "create_patch_from_external":
                info["patches"].append(
                    {
                        "kind": "external",
                        "target": str_const(keyword_arg(node, "target")),
                        "line": node.lineno,
                        "replacement": str_const(keyword_arg(node, "replacement_module")),
                    }
                )
            elif name in ("deepcopy", "adopt_init_modifications"):
                info["shape"] = "b (deepcopy of the GPU config)"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_gpu_patch_gen_config"):
            info["imports_gpu"].extend(a.asname or a.name for a in node.names if a.name != "config")
    if info["shape"] is None and info["imports_gpu"]:
        info["shape"] = "a (fresh PatchConfig re-registering GPU patch functions)"
    # the function each decorator patch covers (for reuse analysis): name and line range
    funcs = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            target = None
            for dec in stmt.decorator_list:
                if isinstance(dec, ast.Call) and call_name(dec) in (
                    "override_method",
                    "replace_function",
                    "replace_class",
                    "modify_init",
                ):
                    target = str_const(dec.args[0]) if dec.args else None
            start = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            uses = sorted({n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)})
            funcs.append(
                {
                    "name": stmt.name,
                    "target": target,
                    "start": start,
                    "end": stmt.end_lineno or stmt.lineno,
                    "uses": uses,
                }
            )
    info["functions"] = funcs
    info["dispatch"] = dispatch_decls(tree)
    return info


def _banner(path: Path) -> dict[str, Any]:
    try:
        head = read_text(path, errors="replace")[:6000]
    except OSError:
        return {}
    out: dict[str, Any] = {}
    m = re.search(r"Based on:\s*transformers==([\w.+-]+)", head)
    if m:
        out["transformers"] = m.group(1)
    m = re.search(r"Source:\s*([\w.]+)", head)
    if m:
        out["source"] = m.group(1)
    return out


def _init_info(path: Path) -> dict[str, Any]:
    tree = parse_file(path)
    info: dict[str, Any] = {"model_types": [], "modules": [], "npu_switch": False, "registry_missing": None}
    if tree is None:
        return info
    info["parent_imports"] = _parent_imports(path.parent)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and any(a.name == "MODELING_REGISTRY" for a in node.names)
            and not _module_file_exists(path, node)
        ):
            info["registry_missing"] = "." * node.level + (node.module or "")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and call_name(dec) == "register" and dec.args:
                    value = str_const(dec.args[0])
                    if value:
                        info["model_types"].append(value)
        elif isinstance(node, ast.ImportFrom) and node.module and "generated" in node.module:
            info["modules"].append(node.module.rsplit(".", 1)[-1])
        elif isinstance(node, ast.If) and "IS_NPU_AVAILABLE" in ast.dump(node.test):
            if any(
                isinstance(n, ast.ImportFrom) and (n.module or "").endswith("_npu")
                for stmt in node.body
                for n in ast.walk(stmt)
            ):
                info["npu_switch"] = True
    return info


def _parent_imports(package: Path) -> bool | None:
    """Whether the parent package's ``__init__.py`` imports ``package`` (``from . import m``, ``from .m import
    x``, ``import a.b.m``, ``from a.b import m``): a model package's registrations run only when it is
    imported. None when there is no parent ``__init__.py`` or it cannot be read."""
    parent = package.parent / "__init__.py"
    if not parent.is_file():
        return None
    tree = parse_file(parent)
    if tree is None:
        return None
    name = package.name
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")
            if node.level == 1 and module[0] == name:
                return True
            if any(a.name == name or a.name == "*" for a in node.names) and (node.level == 1 or node.module):
                return True
        elif isinstance(node, ast.Import) and any(a.name.split(".")[-1] == name for a in node.names):
            return True
    return False


def _module_file_exists(path: Path, node: ast.ImportFrom) -> bool:
    """Whether the module ``node`` imports from is a file of the tree ``path`` lives in (relative imports from
    the file's directory; ``veomni.*`` from the tree's root); True when that cannot be told."""
    parts = (node.module or "").split(".") if node.module else []
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    elif parts and parts[0] == "veomni":
        above = veomni_root_of(str(path))
        if above is None:
            return True
        base = Path(above)
    else:
        return True
    target = base.joinpath(*parts) if parts else base
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def _veomni_root(model_dir: Path) -> Path | None:
    """The directory holding the ``veomni`` package (any model layout; ``npu_lint.veomni.layout``)."""
    found = find_veomni_root(model_dir)
    if found is None:
        above = veomni_root_of(str(model_dir / "__init__.py"))
        found = Path(above) if above else None
    return found


MAX_AUDIT_FILES = 5000


class AuditError(Exception):
    """The directory cannot be audited (one line, exit code 2)."""


def _model_files(root: Path) -> list[Path]:
    """Regular files of a model package (symbolic links not followed, unreadable directories skipped), at
    most ``MAX_AUDIT_FILES``: a model package is small; anything larger is not one (``audit /``)."""
    if not any(e.name.endswith(".py") and e.is_file(follow_symlinks=False) for e in _scandir(root)):
        raise AuditError(f"{root}: not a model package (no Python file at its top level)")
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=lambda exc: None):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
        for name in filenames:
            path = Path(dirpath) / name
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            out.append(path)
            if len(out) > MAX_AUDIT_FILES:
                raise AuditError(f"{root}: more than {MAX_AUDIT_FILES} files: not a model package")
    return sorted(out)


def _scandir(root: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(root) as it:
            return list(it)
    except OSError as exc:
        raise AuditError(f"{root}: cannot read directory: {exc.strerror or exc}") from None


# -- the package -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    """What the audit reads from a model package before linting it."""

    model_dir: str  # as given on the command line
    root: Path  # resolved
    model: str
    files: list[Path]
    py_files: list[Path]
    gen_dir: Path
    gpu_specs: list[Path]
    npu_specs: list[Path]
    gpu_spec: dict[str, Any] | None
    npu_spec: dict[str, Any] | None
    gpu_target: str
    npu_target: str
    init_path: Path
    init: dict[str, Any] | None
    vroot: Path | None
    tests_dir: Path | None
    tests: list[str]

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()


def read_package(model_dir: str) -> Package:
    """The package's files, specs, ``__init__`` and tests (raises :class:`AuditError` when it is not one)."""
    root = Path(model_dir).resolve()
    model = root.name
    files = _model_files(root)
    py_files = [p for p in files if p.suffix == ".py"]
    gen_dir = root / "generated"

    gpu_specs = [Path(p) for p in package_specs(root, "gpu")]
    npu_specs = [Path(p) for p in package_specs(root, "npu")]
    gpu_spec = _spec_info(gpu_specs[0]) if gpu_specs else None
    npu_spec = _spec_info(npu_specs[0]) if npu_specs else None
    gpu_target = (gpu_spec or {}).get("target_file") or f"patched_modeling_{model}_gpu.py"
    npu_target = (npu_spec or {}).get("target_file") or gpu_target.replace("_gpu.py", "_npu.py")
    init_path = root / "__init__.py"
    init = _init_info(init_path) if init_path.is_file() else None

    # tests: files under <repo>/tests that name the package or one of its model types
    vroot = _veomni_root(root)
    tests: list[str] = []
    tests_dir = vroot / "tests" if vroot else None
    keys = {model, *((init or {}).get("model_types") or [])}
    if tests_dir and tests_dir.is_dir():
        candidates = [p for g in _TEST_GLOBS for p in tests_dir.rglob(g)][:3000]
        for p in sorted(set(candidates)):
            if p.stem in {f"test_{k}" for k in keys} | {f"{k}_test" for k in keys}:
                tests.append(str(p.relative_to(vroot)))
                continue
            try:
                from npu_lint.core.safeio import read_regular

                text = read_regular(p, limit=4 * 1024 * 1024)[0].decode("utf-8", errors="replace")
            except OSError:
                continue
            if any(f'"{k}"' in text or f"'{k}'" in text or f"transformers.{model}." in text for k in keys):
                tests.append(str(p.relative_to(vroot)))

    return Package(
        model_dir,
        root,
        model,
        files,
        py_files,
        gen_dir,
        gpu_specs,
        npu_specs,
        gpu_spec,
        npu_spec,
        gpu_target,
        npu_target,
        init_path,
        init,
        vroot,
        tests_dir,
        tests,
    )


def build_inventory(pkg: Package) -> list[dict[str, Any]]:
    """The files a migration needs (specs, generated files and diffs, the ``__init__`` switch, tests)."""
    root, model, rel = pkg.root, pkg.model, pkg.rel
    gpu_specs, npu_specs, npu_spec = pkg.gpu_specs, pkg.npu_specs, pkg.npu_spec
    gen_dir, gpu_target, npu_target = pkg.gen_dir, pkg.gpu_target, pkg.npu_target
    init, init_path, tests, tests_dir = pkg.init, pkg.init_path, pkg.tests, pkg.tests_dir
    inventory: list[dict[str, Any]] = []

    def item(role: str, path: Path | None, present: bool, note: str = "") -> None:
        inventory.append(
            {
                "role": role,
                "path": rel(path) if path and path.is_relative_to(root) else (str(path) if path else ""),
                "present": present,
                "note": note,
            }
        )

    item(
        "GPU patch spec",
        gpu_specs[0] if gpu_specs else root / f"{model}_gpu_patch_gen_config.py",
        bool(gpu_specs),
    )
    npu_path = npu_specs[0] if npu_specs else root / f"{model}_npu_patch_gen_config.py"
    item(
        "NPU patch spec",
        npu_path,
        bool(npu_specs),
        f"shape {npu_spec['shape']}"
        if npu_spec and npu_spec.get("shape")
        else ("" if npu_specs else "to create: `config = deepcopy(gpu_config)` + NPU-specific patches only"),
    )
    for label, target in (("GPU", gpu_target), ("NPU", npu_target)):
        gen = gen_dir / target
        banner = _banner(gen) if gen.is_file() else {}
        note = f"Based on transformers=={banner['transformers']}" if banner.get("transformers") else ""
        item(f"generated {label} file", gen, gen.is_file(), note)
        diff = gen.with_suffix(".diff")
        item(
            f"generated {label} diff",
            diff,
            diff.is_file(),
            "" if diff.is_file() else "produced by `patchgen ... --diff`",
        )
    switch_note = ""
    if init is not None:
        switch_note = (
            "imports the `_npu` module under `if IS_NPU_AVAILABLE:`"
            if init["npu_switch"]
            else "no `if IS_NPU_AVAILABLE:` switch to the `_npu` module"
        )
        switch_note += f"; registers {', '.join(f'`{t}`' for t in init['model_types']) or 'no model type'}"
    item("__init__ switch", init_path, init_path.is_file(), switch_note or "no `__init__.py`")
    item(
        "tests",
        Path("tests"),
        bool(tests),
        ", ".join(tests[:6]) + (" ..." if len(tests) > 6 else "")
        if tests
        else (
            "no test names the package or its model types"
            if tests_dir and tests_dir.is_dir()
            else "no tests/ directory next to the veomni package (an installed wheel ships none)"
        ),
    )
    return inventory


def _lint(files: list[str], model_dir: Path) -> tuple[list[Any], dict[str, Any], Project, list[str]]:
    from npu_lint.core.config import resolve_settings
    from npu_lint.engine import lint_paths, project_diagnostics
    from npu_lint.rules.base import all_rules
    from npu_lint.veomni.project import load_project

    rules = all_rules()
    codes = sorted(rules)
    settings = resolve_settings(model_dir)
    project = load_project([str(model_dir)], settings)
    errors: list[str] = []
    diags: list[Any] = []
    for res in lint_paths(files, codes, settings, project, None, jobs=1):
        if res.error:
            errors.append(res.error)
        diags.extend(res.diagnostics)
    diags.extend(  # a project rule failing is reported (internal error in NPUxxx), the audit goes on
        d
        for d in project_diagnostics(project, files, codes, settings, errors=errors)
        if os.path.abspath(d.path).startswith(str(model_dir))
    )
    diags.sort(key=lambda d: d.sort_key())
    return diags, rules, project, errors


@dataclass(frozen=True)
class Lint:
    """The findings of every rule on the package (generated copies of one spec finding counted once)."""

    diags: list[Any]
    rules: dict[str, Any]
    project: Project
    errors: list[str]
    opslot_tree: bool
    generated_copies: int
    by_code: Counter
    by_file: dict[str, Counter]
    findings: list[dict[str, Any]]


def lint_package(pkg: Package) -> Lint:
    rel, root, py_files = pkg.rel, pkg.root, pkg.py_files
    diags, rules, project, errors = _lint([str(p) for p in py_files], root)
    opslot_tree = project.root is not None and project.api.generation is Generation.OP_SLOT
    from npu_lint.engine.adopt import distinct

    # findings in generated files that trace to one spec line count once ("+N generated copies")
    diags, generated_copies = distinct(diags)
    by_code = Counter(d.code for d in diags)
    by_file: dict[str, Counter] = {}
    for d in diags:
        by_file.setdefault(rel(Path(d.path).resolve()), Counter())[d.code] += 1
    findings = [
        {
            "code": code,
            "name": rules[code].name if code in rules else "",
            "count": by_code[code],
            "default_enabled": rules[code].default_enabled if code in rules else True,
            "examples": [
                f"{rel(Path(d.path).resolve())}:{d.line}: {d.message}" for d in diags if d.code == code
            ][:3],
        }
        for code in sorted(by_code)
    ]
    return Lint(diags, rules, project, errors, opslot_tree, generated_copies, by_code, by_file, findings)


def build_reuse(pkg: Package, inventory: list[dict[str, Any]], lint: Lint) -> list[dict[str, str]]:
    """Each file (and each GPU patch function): reused as it is, edited or regenerated, and why."""
    rel, py_files, init = pkg.rel, pkg.py_files, pkg.init
    gpu_spec, npu_spec = pkg.gpu_spec, pkg.npu_spec
    diags, by_file, opslot_tree = lint.diags, lint.by_file, lint.opslot_tree
    reuse: list[dict[str, str]] = []
    role_paths = {x["path"] for x in inventory}
    for p in py_files:
        r = rel(p)
        counts = by_file.get(r, Counter())
        n = sum(counts.values())
        if r in role_paths and "generated/" in r:
            why = (
                "regenerated from the specs, never edited"
                if n == 0
                else f"regenerated from the specs after fixing them ({n} findings trace back to a spec)"
            )
            reuse.append({"file": r, "status": "regenerate", "why": why})
        elif n == 0:
            why = "no findings: device-neutral as it is"
            spec = next((x for x in (gpu_spec, npu_spec) if x and rel(Path(x["path"])) == r), None)
            slots = [name for kind, _, _, name in (spec or {}).get("dispatch", []) if kind == "OpSlot"]
            if slots and not opslot_tree:
                reuse.append(
                    {
                        "file": r,
                        "status": "edit",
                        "why": f"no findings, but it declares {len(slots)} module-global OpSlot{'s' if len(slots) > 1 else ''} "
                        f"({', '.join(slots)}): the dispatch migration (NPU2xx) rewrites them",
                    }
                )
                continue
            if r == "__init__.py":
                why = "no findings" + ("" if init and init["npu_switch"] else "; but it needs the NPU switch")
                reuse.append(
                    {
                        "file": r,
                        "status": "edit" if not (init and init["npu_switch"]) else "reuse",
                        "why": why,
                    }
                )
                continue
            reuse.append({"file": r, "status": "reuse", "why": why})
        else:
            codes = ", ".join(f"{c}×{k}" for c, k in sorted(counts.items()))
            reuse.append({"file": r, "status": "edit", "why": f"{n} findings ({codes})"})
    if gpu_spec:
        spec_rel = rel(Path(gpu_spec["path"]))
        spec_diags = [d for d in diags if rel(Path(d.path).resolve()) == spec_rel]
        for fn in gpu_spec.get("functions", []):
            if not fn["target"]:
                continue
            inside = [d for d in spec_diags if fn["start"] <= d.line <= fn["end"]]
            slots = [name for kind, _, _, name in gpu_spec.get("dispatch", []) if kind == "OpSlot"]
            used_slots = [name for name in slots if name in fn.get("uses", [])]
            if inside or (used_slots and not opslot_tree):
                why = f"patch of `{fn['target']}`"
                if used_slots:
                    why += " calls the module-global OpSlot " + ", ".join(f"`{n}`" for n in used_slots)
                    why += (
                        " (the tree's own dispatch: not migratable on the OpSlot generation, NPU201)"
                        if opslot_tree
                        else ": migrate it to an instance-local handle (NPU2xx), then the NPU spec reuses it"
                    )
                if inside:
                    why += "; findings: " + ", ".join(sorted({d.code for d in inside}))
                reuse.append({"file": f"{spec_rel}::{fn['name']}", "status": "edit", "why": why})
            else:
                if npu_spec is None:
                    how = "the NPU spec to create keeps it (deepcopy of the GPU config)"
                elif fn["name"] in npu_spec["imports_gpu"]:
                    how = "the NPU spec re-registers it"
                elif npu_spec.get("shape", "") and npu_spec["shape"].startswith("b"):
                    how = "the NPU spec keeps it (deepcopy of the GPU config)"
                else:
                    how = "reusable, but the NPU spec does not re-register it"
                reuse.append(
                    {
                        "file": f"{spec_rel}::{fn['name']}",
                        "status": "reuse",
                        "why": f"patch of `{fn['target']}` is device-neutral: {how}",
                    }
                )
    return reuse
