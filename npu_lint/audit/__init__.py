"""``npu-lint audit MODEL_DIR``: the migration inventory of one VeOmni model package, before any edit.

Static, like the linter: files present and missing (GPU/NPU spec, generated files and diffs, the ``__init__``
switch, tests), which existing files are reused unchanged and why, a per-op table (op, variant, GPU and NPU
implementations in the registry, action), GPU-only dependencies classified, findings by rule (every rule the
engine has, run on the package's files), ordered implementation steps, and the migration completion checklist.
With ``--base REV`` it lists files changed since REV that fall outside a model migration's scope.

Output: markdown (default) or ``--format json`` (the same data). Exit code 0 when every checklist item passes,
1 when an item fails or is unknown, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.veomni import catalog, vendor_map
from npu_lint.veomni.layout import find_veomni_root
from npu_lint.veomni.patchgen import veomni_root_of
from npu_lint.veomni.profile import Generation
from npu_lint.veomni.project import Project

EXIT_OK, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
NOT_ATTAINABLE = (
    "not attainable"  # the item needs an API the tree's generation does not have (OpSlot: no handles)
)

# -- the checklist: item -> rule codes (a trailing "x" is a prefix: NPU1xx = every NPU1.. code) -------------------
CHECKLIST: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("pin", "transformers pin matches the installed transformers", ("NPU506",)),
    (
        "gpu-deps",
        "GPU-only dependencies classified (vendor kernels reached only through the registry)",
        ("NPU3xx",),
    ),
    ("device", "device-neutral allocations, dtype conversions and distributed APIs", ("NPU1xx", "NPU6xx")),
    ("npu-backends", "NPU backends present in the registry for every dispatched op", ("NPU205",)),
    (
        "veomniop",
        "every model-side operator an instance-local handle (VeomniOp / VeomniKernel)",
        ("NPU201", "NPU202", "NPU203"),
    ),
    ("semantics", "normalisation and loss semantics preserved", ("NPU401", "NPU402")),
    ("npu-spec", "NPU spec reuses GPU bodies", ("NPU504",)),
    ("registration", "every model type registered (a multimodal wrapper and its text backbone)", ("NPU503",)),
    ("generated", "generated files in sync", ("NPU505",)),
    ("scope", "no out-of-scope files", ()),
)

# files changed since --base that a model migration should not touch
OUT_OF_SCOPE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("checkpoint", re.compile(r"(^|/)(checkpoints?|ckpts?)/|\.(safetensors|bin|pt|pth|ckpt|gguf)$", re.I)),
    ("log", re.compile(r"(^|/)(logs?|wandb|runs|tensorboard)/|\.(log|out|err)$", re.I)),
    ("plot", re.compile(r"(^|/)(plots?|figures?|figs?)/|\.(png|jpe?g|svg|gif|pdf)$", re.I)),
    ("dataset", re.compile(r"(^|/)(datasets?|data)/|\.(jsonl|parquet|arrow|csv|tsv)$", re.I)),
    (
        "report",
        re.compile(r"(^|/)reports?/|(^|/)[^/]*(report|summary|results?)[^/]*\.(md|txt|html|json)$", re.I),
    ),
    (
        "launch script",
        re.compile(r"\.sh$|(^|/)(scripts|launch|launcher)/|(^|/)(train|launch|run)[^/]*\.py$", re.I),
    ),
    ("training config", re.compile(r"(^|/)(configs?|recipes?)/.*\.(ya?ml|json|toml)$|\.ya?ml$", re.I)),
)

_ATTN_IMPLS = {
    "flash_attention_2": "has an NPU row (flash_attention_2 / veomni_flash_attention_2)",
    "veomni_flash_attention_2": "has an NPU row",
    "flash_attention_3": "GPU only",
    "flash_attention_4": "GPU only",
    "sdpa": "device-agnostic",
    "flex_attention": "device-agnostic",
}
_ATTN_SUPPORTS = re.compile(r"^_supports_(flash_attn\w*|sdpa|flex_attn)$")
_TEST_GLOBS = ("test_*.py", "*_test.py")


@dataclass
class _Row:
    op: str
    variant: str
    impl: str
    requirement: str


# -- small static helpers --------------------------------------------------------------------------------------


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _embedded_trees(tree: ast.Module) -> list[ast.Module]:
    """Code strings passed to ``add_post_import_block`` / ``add_helper``: parsed (they land in generated files)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in ("add_post_import_block", "add_helper"):
            code = _str(node.args[0]) if node.args else None
            if code:
                try:
                    out.append(ast.parse(textwrap.dedent(code)))
                except SyntaxError:
                    pass
    return out


def _dispatch_decls(tree: ast.Module) -> list[tuple[str, str, str, str]]:
    """(kind OpSlot/VeomniOp, op, variant, name) declared in a module (and its embedded code strings)."""
    out: list[tuple[str, str, str, str]] = []
    for t in [tree, *_embedded_trees(tree)]:
        for node in ast.walk(t):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                kind = _call_name(node.value)
                if kind in ("OpSlot", "VeomniOp") and len(node.value.args) >= 2:
                    op, variant = _str(node.value.args[0]), _str(node.value.args[1])
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
    tree = _parse(path)
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
            name = _call_name(node)
            if name == "PatchConfig":
                info["source_module"] = _str(_kw(node, "source_module"))
                info["target_file"] = _str(_kw(node, "target_file"))
            elif name in ("override_method", "replace_function", "replace_class", "modify_init"):
                target = _str(node.args[0]) if node.args else _str(_kw(node, "target"))
                repl = _kw(node, "replacement")
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
                        "target": _str(_kw(node, "target")),
                        "line": node.lineno,
                        "replacement": _str(_kw(node, "replacement_module")),
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
                if isinstance(dec, ast.Call) and _call_name(dec) in (
                    "override_method",
                    "replace_function",
                    "replace_class",
                    "modify_init",
                ):
                    target = _str(dec.args[0]) if dec.args else None
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
    info["dispatch"] = _dispatch_decls(tree)
    return info


def _banner(path: Path) -> dict[str, Any]:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:6000]
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
    tree = _parse(path)
    info: dict[str, Any] = {"model_types": [], "modules": [], "npu_switch": False}
    if tree is None:
        return info
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and _call_name(dec) == "register" and dec.args:
                    value = _str(dec.args[0])
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


def _veomni_root(model_dir: Path) -> Path | None:
    """The directory holding the ``veomni`` package (any model layout; ``npu_lint.veomni.layout``)."""
    found = find_veomni_root(model_dir)
    if found is None:
        above = veomni_root_of(str(model_dir / "__init__.py"))
        found = Path(above) if above else None
    return found


def _registry_rows(project: Project) -> tuple[list[_Row], str]:
    """The registry rows of the tree (an OpSlot tree's ``KernelSpec`` rows, whose eager implementation is
    implicit; else its register rows), else the rows the rules check against (the built-in catalog)."""
    if project.root is not None and project.live_rows is None:
        if project.registered:
            rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.registered]
            return rows, f"the tree's `{project.api.register_function or 'register_op'}` rows"
        if project.slot_rows:
            pairs = sorted({(r.op, r.variant) for r in project.slot_rows})
            rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.slot_rows]
            rows += [_Row(op, variant, "eager", catalog.ANY) for op, variant in pairs]
            return rows, "the tree's `KernelSpec` rows (eager is implicit for every slot)"
    rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.rows]
    return rows, project.rows_origin


def _in_tree(project: Project, op: str, variant: str) -> tuple[str, str]:
    """A catalog ``op/variant`` in the tree's own names (``rope/full`` is an OpSlot tree's
    ``rotary_pos_emb/full``; the offset RMSNorm the tree's variant); variant "" when the tree registers no such
    op (outside any tree: unchanged)."""
    if project.root is None:
        return op, variant
    found = project.api.tree_op(op, variant)
    if found is None:
        return op, ""
    return found[0], found[1] or ""


def _impls(rows: list[_Row], op: str, variant: str) -> tuple[list[str], list[str], bool]:
    """(GPU implementations, NPU implementations, row exists). NPU: npu rows, else device-agnostic non-eager."""
    mine = [r for r in rows if r.op == op and r.variant == variant]
    gpu = [
        r.impl
        for r in mine
        if r.requirement in (catalog.GPU, "cuda")
        or (r.requirement == catalog.ANY and r.impl not in ("eager",))
    ]
    npu = [r.impl for r in mine if r.requirement == catalog.NPU]
    return gpu, npu, bool(mine)


# -- the audit ---------------------------------------------------------------------------------------------------


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


def _dependencies(files: list[Path], model_dir: Path, project: Project | None = None) -> list[dict[str, Any]]:
    """Vendor kernels, attention implementations and CUDA APIs named in the package, classified."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(kind: str, name: str, classification: str, path: Path, line: int) -> None:
        rel = path.relative_to(model_dir).as_posix()
        entry = found.setdefault(
            (kind, name, rel),
            {"kind": kind, "name": name, "classification": classification, "file": rel, "lines": []},
        )
        if line not in entry["lines"]:
            entry["lines"].append(line)
            entry["lines"].sort()

    for path in files:
        tree = _parse(path)
        if tree is None:
            continue
        from npu_lint.core.astutil import resolve_relative

        for t in [tree, *_embedded_trees(tree)]:
            for node in ast.walk(t):
                line = getattr(node, "lineno", 0) if t is tree else 0
                modules: list[str] = []
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    mod = resolve_relative(str(path), "." * node.level + (node.module or ""))
                    modules = [f"{mod}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Call) and _call_name(node) in (
                    "add_import",
                    "create_patch_from_external",
                ):
                    mod = _str(node.args[0]) if node.args else _str(_kw(node, "replacement_module"))
                    mod = mod or _str(_kw(node, "replacement_module"))
                    if mod:
                        modules = [mod]
                for mod in modules:
                    kernel = vendor_map.lookup(mod)
                    if kernel is None:
                        continue
                    family = kernel.family
                    label = {
                        vendor_map.NPU_VENDOR: "Ascend vendor package: only inside veomni/ops kernels",
                        vendor_map.GPU_KERNEL: "GPU-only kernel library",
                        vendor_map.GPU_ATTENTION: "GPU-only attention kernel",
                        vendor_map.VEOMNI_KERNEL: "VeOmni kernel module: reach through the registry",
                    }[family]
                    repl = kernel.replacement()
                    if repl and project is not None and project.root is not None and kernel.op:
                        found_op = project.api.tree_op(kernel.op, kernel.variant)  # the tree's own names
                        repl = (
                            "/".join(p for p in found_op if p)
                            if found_op
                            else f"none: this tree registers no `{kernel.op}` op"
                        )
                    add("vendor import", mod, label + (f" (registry op {repl})" if repl else ""), path, line)
                if t is not tree:
                    continue
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value in _ATTN_IMPLS
                ):
                    add("attention implementation", node.value, _ATTN_IMPLS[node.value], path, line)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and _ATTN_SUPPORTS.match(target.id):
                            add(
                                "attention support flag",
                                target.id,
                                "declares an attention backend",
                                path,
                                line,
                            )
                elif isinstance(node, ast.Attribute):
                    dotted = _dotted(node)
                    if dotted and (
                        dotted.startswith("torch.cuda.") or dotted.startswith("torch.backends.cudnn")
                    ):
                        add("CUDA API", dotted, "CUDA-only: use veomni.utils.device helpers", path, line)
                    elif node.attr in ("cuda", "is_cuda") and not (dotted or "").startswith("torch."):
                        add("CUDA API", f".{node.attr}", "CUDA-only: device from data in scope", path, line)
                elif isinstance(node, ast.Call) and re.search(r"flash_att(n|ention)", _call_name(node)):
                    add(
                        "attention implementation check",
                        f"{_call_name(node)}()",
                        "branches on FlashAttention: flash_attention_2 has an NPU row, 3/4 are GPU only",
                        path,
                        line,
                    )
                elif isinstance(node, ast.Constant) and node.value in ("cuda", "nccl"):
                    add(
                        "CUDA API",
                        repr(node.value),
                        "CUDA literal: get_device_type()/get_dist_comm_backend()",
                        path,
                        line,
                    )
    return sorted(found.values(), key=lambda e: (e["kind"], e["name"], e["file"]))


def _undispatched_ops(path: Path) -> list[tuple[str, str, str]]:
    """Operators an upstream-shaped modeling file implements eagerly: (op, variant, where)."""
    tree = _parse(path)
    out: list[tuple[str, str, str]] = []
    if tree is None:
        return out
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            text = ast.unparse(stmt)
            if stmt.name.endswith("RMSNorm"):
                offset = "torch.zeros(" in text or re.search(r"1(\.0)?\s*\+\s*self\.weight", text) is not None
                out.append(("rms_norm", "offset" if offset else "standard", stmt.name))
            elif stmt.name.endswith("MLP") and all(p in text for p in ("gate_proj", "up_proj", "down_proj")):
                geglu = "hidden_activation" in text or "gelu" in text
                out.append(("swiglu_mlp", "geglu" if geglu else "standard", stmt.name))
            elif stmt.name.endswith("ForCausalLM") or stmt.name.endswith("ForConditionalGeneration"):
                if "loss_function" in text or "ForCausalLMLoss" in text:
                    out.append(("cross_entropy_loss", "standard", stmt.name))
            if "ALL_ATTENTION_FUNCTIONS" in text:
                out.append(("attention", "standard", stmt.name))
        elif isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("apply_rotary_pos_emb"):
            out.append(("rope", "full", stmt.name))
    return out


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


def build_audit(model_dir: str, base: str | None = None) -> dict[str, Any]:
    root = Path(model_dir).resolve()
    model = root.name
    files = _model_files(root)
    py_files = [p for p in files if p.suffix == ".py"]
    gen_dir = root / "generated"

    gpu_specs = sorted(root.glob("*_gpu_patch_gen_config.py"))
    npu_specs = sorted(root.glob("*_npu_patch_gen_config.py"))
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

    def rel(p: Path) -> str:
        return p.relative_to(root).as_posix()

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

    # -- lint with every rule ------------------------------------------------------------------------------
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

    # -- reuse ------------------------------------------------------------------------------------------
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

    # -- op table -------------------------------------------------------------------------------------------
    rows, rows_source = _registry_rows(project)
    api = project.api
    field_of = {}
    for fld, op in catalog.CONFIG_FIELD_TO_OP.items():
        field_of.setdefault(op, fld)
    ops: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add_op(op: str, variant: str, source: str, decl: str, fld: str | None = None) -> None:
        if project.root is not None:
            fld = fld or api.config_field(op) or ""
        fld = fld or field_of.get(op, "")
        entry = ops.setdefault(
            (op, variant, fld),
            {"op": op, "variant": variant, "field": fld, "sources": [], "decls": [], "declared_variants": []},
        )
        declared = re.search(r"OpSlot\('[^']*', '([^']*)'\)", decl or "")
        if declared and declared.group(1) not in entry["declared_variants"]:
            entry["declared_variants"].append(declared.group(1))
        if source not in entry["sources"]:
            entry["sources"].append(source)
        if decl and decl not in entry["decls"]:
            entry["decls"].append(decl)

    for spec in (gpu_spec, npu_spec):
        for kind, op, variant, name in (spec or {}).get("dispatch", []):
            if kind == "OpSlot" and opslot_tree:  # the tree's own slot names and ops-config field
                known = any(r.op == op and r.variant == variant for r in rows)
                add_op(
                    op,
                    variant,
                    "OpSlot" if known else "OpSlot (unmapped)",
                    f"{name} = OpSlot({op!r}, {variant!r})",
                )
            elif kind == "OpSlot":
                mapped = catalog.OPSLOT_TO_VEOMNIOP.get((op, variant))
                if mapped:
                    mapped = (
                        _in_tree(project, *mapped)
                        if project.root is not None and _in_tree(project, *mapped)[1]
                        else mapped
                    )
                    slot_field = f"{op}_implementation"
                    add_op(
                        mapped[0],
                        mapped[1],
                        "OpSlot",
                        f"{name} = OpSlot({op!r}, {variant!r})",
                        slot_field if slot_field in catalog.CONFIG_FIELD_TO_OP else None,
                    )
                else:
                    # no renaming known: the op keeps its name when the registry has it
                    known = any(r.op == op and r.variant == variant for r in rows)
                    add_op(
                        op,
                        variant,
                        "OpSlot" if known else "OpSlot (unmapped)",
                        f"{name} = OpSlot({op!r}, {variant!r})",
                        f"{op}_implementation"
                        if f"{op}_implementation" in catalog.CONFIG_FIELD_TO_OP
                        else None,
                    )
            else:
                add_op(op, variant, "VeomniOp", f"{name} = VeomniOp({op!r}, {variant!r}, ...)")
    for p in py_files:
        if p.parent == gen_dir or p.name.endswith("_patch_gen_config.py"):
            continue
        tree = _parse(p)
        for kind, op, variant, name in _dispatch_decls(tree) if tree else []:
            add_op(op, variant, kind, f"{name} ({rel(p)})")
    for d in diags:
        if d.code == "NPU302":
            m = re.search(r"registry op `(\w+)(?:/(\w+))?`", d.message) or re.search(
                r"`OpSlot\(\"(\w+)\", \"(\w+)\"\)` slot", d.message
            )
            if m:
                add_op(
                    m.group(1),
                    m.group(2) or "standard",
                    "vendor kernel call",
                    f"{rel(Path(d.path).resolve())}:{d.line}",
                )
    gen_gpu = gen_dir / gpu_target
    if gen_gpu.is_file():
        for op, variant, where in _undispatched_ops(gen_gpu):
            op, variant = _in_tree(project, op, variant)
            covered = [k for k in ops if k[0] == op]
            if op == "rms_norm" and covered:
                continue
            source = "transformers attention interface" if op == "attention" else "eager (not dispatched)"
            if not covered:
                add_op(op, variant, source, where)
            elif any(
                k[:2] == (op, variant) and "eager (not dispatched)" in v["sources"] for k, v in ops.items()
            ):
                add_op(op, variant, "eager (not dispatched)", where)
    op_table = []
    for (op, variant, _field), entry in sorted(ops.items()):
        gpu, npu, exists = _impls(rows, op, variant)
        sources = entry["sources"]
        handle = api.handle if api.instance_local else None
        dispatch = f"an instance-local `{handle}`" if handle else f"this tree's `{api.handle}` dispatch"
        if "transformers attention interface" in sources and not variant:
            registered = ", ".join(api.attention_functions[:4]) + (
                ", ..." if len(api.attention_functions) > 4 else ""
            )
            action = (
                "follows `config._attn_implementation` through transformers' `ALL_ATTENTION_FUNCTIONS`"
                + (f" (this tree registers {registered})" if registered else "")
                + "; this tree registers no `attention` op"
            )
        elif not exists and "OpSlot (unmapped)" in sources:
            action = (
                f"the {rows_source} have no `{op}/{variant}` row: check the slot's variant"
                if opslot_tree
                else f"migrate the OpSlot to {dispatch}; the {rows_source} has no `{op}/{variant}` row: "
                "check the registry for the variant's name"
            )
        elif not exists:
            shown_name = f"{op}/{variant}" if variant else op
            action = f"no `{shown_name}` row in the {rows_source}: check the variant"
        elif "vendor kernel call" in sources:
            action = f"replace the vendor call with {dispatch} (NPU302)"
        elif "OpSlot" in sources and opslot_tree:
            action = (
                "not attainable on this generation: the slot is bound from the ops config by the tree's binder and "
                "shared by every model (NPU201); instance-local once the tree moves to VeomniOp or VeomniKernel"
            )
        elif "OpSlot" in sources:
            action = f"migrate the module-global OpSlot to {dispatch} built in `__init__` (NPU2xx)"
        elif {"VeomniOp", "VeomniKernel"} & set(sources):
            action = "none: already an instance-local handle"
        elif "transformers attention interface" in sources:
            action = "follows `config._attn_implementation` (see the NPU implementations)" + (
                f'; {handle} generation: `{handle}("{op}", "{variant}", ...)` in `__init__`' if handle else ""
            )
        else:
            action = (
                f"optional: dispatch through {dispatch} to use the NPU row"
                if npu
                else "none: eager runs on NPU"
            )
        if not npu:
            npu = [
                f"{r.impl} (device-agnostic)"
                for r in rows
                if r.op == op and r.variant == variant and r.requirement == catalog.ANY and r.impl != "eager"
            ]
            if exists and {"OpSlot", "VeomniOp", "VeomniKernel", "vendor kernel call"} & set(sources):
                agnostic = [x.split(" ")[0] for x in npu]
                action += f"; no NPU row: NPU uses {', '.join(agnostic) or 'eager'}"
        shown = [v for v in entry["declared_variants"] if v != variant]
        op_table.append(
            {
                "op": op,
                # ``OpSlot("cross_entropy_loss", "causal")`` is the causal variant, looked up as the registry's
                # ``standard`` row: both are named
                "variant": f"{'/'.join(shown)} (registry row: {variant})" if shown else variant,
                "config_field": entry["field"],
                "source": ", ".join(sources),
                "declared": entry["decls"][:4],
                "gpu": gpu,
                "npu": npu,
                "action": action,
            }
        )

    deps = _dependencies(py_files, root, project)

    # -- out of scope -------------------------------------------------------------------------------------
    changed: list[dict[str, str]] | None = None
    scope_error = ""
    if base:
        changed, scope_error = _changed_since(root, base)

    checklist = _checklist(
        rules,
        by_code,
        diags,
        inventory,
        op_table,
        deps,
        changed,
        scope_error,
        npu_spec,
        init,
        root,
        opslot_tree,
    )
    shown = Path(model_dir)
    steps = _steps(
        model,
        shown,
        _repo_relative(root, vroot),
        by_code,
        inventory,
        op_table,
        npu_spec,
        gpu_spec,
        init,
        deps,
        checklist,
    )
    return {
        "model": model,
        "model_dir": model_dir,
        "veomni_root": str(vroot) if vroot else None,
        "registry_rows": rows_source,
        "files": inventory,
        "reuse": reuse,
        "ops": op_table,
        "dependencies": deps,
        "findings": findings,
        "findings_total": len(diags),
        "generated_copies": generated_copies,
        "rules_run": len(rules),
        "errors": errors,
        "changed_since_base": changed,
        "base": base,
        "steps": steps,
        "checklist": checklist,
    }


def _changed_since(root: Path, base: str) -> tuple[list[dict[str, str]] | None, str]:
    def git(*args: str, cwd: Path = root) -> str:
        # the repository's own config must not run anything (core.fsmonitor is a command git runs on diff
        # and ls-files); no external diff or textconv either
        safe = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external="]
        proc = subprocess.run(
            ["git", *safe, "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "git failed")
        return proc.stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        # paths relative to the repository root: diff (tracked changes since REV) and untracked files
        names = git("diff", "--no-ext-diff", "--no-textconv", "--name-only", base, "--", cwd=top).splitlines()
        names += git("ls-files", "--others", "--exclude-standard", cwd=top).splitlines()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return None, f"git: {exc}"
    model_rel = root.relative_to(top).as_posix() if root.is_relative_to(top) else ""
    # the package that imports every model package (``<layout>/transformers/__init__.py``, any layout)
    parent = root.resolve().parent
    registry_import = (
        (parent / "__init__.py").relative_to(top).as_posix() if parent.is_relative_to(top) else ""
    )
    out = []
    for name in sorted(set(n.strip() for n in names if n.strip())):
        if model_rel and (name == model_rel or name.startswith(model_rel + "/")):
            category, scope = "model package", "in scope"
        elif re.search(r"(^|/)tests?/", name) or Path(name).name.startswith("test_"):
            category, scope = "test", "in scope"
        elif registry_import and name == registry_import:
            category, scope = "model registry import", "in scope"
        else:
            category = next((label for label, rx in OUT_OF_SCOPE if rx.search(name)), "")
            scope = "out of scope" if category else "review"
            category = category or "other"
        out.append({"path": name, "category": category, "scope": scope})
    return out, ""


def _codes_status(rules: dict[str, Any], by_code: Counter, codes: tuple[str, ...]) -> tuple[str, str, int]:
    """(status, note, findings) for an item mapped to rule codes (prefixes end in 'xx')."""
    present: list[str] = []
    missing: list[str] = []
    count = 0
    for code in codes:
        if code.endswith("xx"):
            prefix = code[:-2]
            matched = [c for c in rules if c.startswith(prefix)]
            (present if matched else missing).append(code)
            count += sum(by_code[c] for c in matched)
        else:
            (present if code in rules else missing).append(code)
            count += by_code[code]
    if count:
        return FAIL, f"{count} findings ({', '.join(present)})", count
    if not present:
        return UNKNOWN, f"{', '.join(missing)} not in this npu-lint build's rule registry", 0
    if missing:
        return (
            UNKNOWN,
            f"no {', '.join(present)} findings, but {', '.join(missing)} not in the rule registry",
            0,
        )
    return PASS, f"no {', '.join(present)} findings", 0


def _checklist(
    rules,
    by_code,
    diags,
    inventory,
    op_table,
    deps,
    changed,
    scope_error,
    npu_spec,
    init,
    root,
    opslot_tree=False,
):  # noqa: ANN001, ANN202
    present = {i["role"]: i for i in inventory}
    out = []
    for key, label, codes in CHECKLIST:
        evidence: list[str] = []
        if key == "scope":
            if changed is None:
                status, note = UNKNOWN, scope_error or "run with `--base REV` to list files changed since REV"
            else:
                bad = [c for c in changed if c["scope"] == "out of scope"]
                status = FAIL if bad else PASS
                note = (
                    f"{len(bad)} of {len(changed)} changed files are out of scope"
                    if bad
                    else f"{len(changed)} changed files, none out of scope"
                )
                evidence = [f"{c['path']} ({c['category']})" for c in bad[:10]]
            out.append(
                {"item": label, "key": key, "codes": [], "status": status, "note": note, "evidence": evidence}
            )
            continue
        status, note, _ = _codes_status(rules, by_code, codes)
        matched = [
            d
            for d in diags
            if any(d.code.startswith(c[:-2]) if c.endswith("xx") else d.code == c for c in codes)
        ]
        evidence = [
            f"{Path(d.path).resolve().relative_to(root).as_posix()}:{d.line}: {d.code} {d.message}"
            for d in matched[:5]
        ]
        # inventory facts that settle an item the rules cannot see
        if key == "npu-spec" and not present["NPU patch spec"]["present"]:
            status, note = FAIL, "no NPU patch spec yet"
        elif key == "npu-spec" and npu_spec and status != FAIL:
            evidence.append(
                f"NPU spec shape {npu_spec.get('shape') or 'unknown'}; re-registers "
                f"{len(npu_spec.get('imports_gpu') or [])} GPU patch functions"
            )
        elif key == "generated":
            missing = [i["path"] for i in inventory if i["role"].startswith("generated") and not i["present"]]
            if any(i["role"] == "generated NPU file" and not i["present"] for i in inventory):
                status, note = FAIL, "the NPU generated file does not exist yet"
            if missing:
                evidence.append("missing: " + ", ".join(missing))
        elif key == "veomniop" and opslot_tree:
            slots = [o for o in op_table if "OpSlot" in o["source"]]
            evidence = evidence[:0] + (
                ["inventory: " + ", ".join(f"{o['op']}/{o['variant']} (OpSlot)" for o in slots)]
                if slots
                else []
            )
            others = [d for d in matched if d.code != "NPU201"]
            if others:
                status, note = FAIL, f"{len(others)} findings besides the OpSlot dispatch"
            else:
                status, note = (
                    NOT_ATTAINABLE,
                    "this tree is of the OpSlot generation, which has no instance-local handle API: its dispatch is "
                    "module-global by design (NPU201 lists it once per file); attainable once the tree moves to "
                    "VeomniOp or VeomniKernel",
                )
        elif key == "veomniop":
            slots = [o for o in op_table if "OpSlot" in o["source"] or "vendor kernel call" in o["source"]]
            if slots:
                evidence.append(
                    "inventory: " + ", ".join(f"{o['op']}/{o['variant']} ({o['source']})" for o in slots)
                )
                if status != FAIL:
                    status, note = (
                        FAIL,
                        note + f"; the inventory finds {len(slots)} ops not yet instance-local",
                    )
        elif key == "npu-backends":
            no_npu = [
                f"{o['op']}/{o['variant']}" if o["variant"] else o["op"]
                for o in op_table
                if not [i for i in o["npu"] if not i.endswith("(device-agnostic)")]
            ]
            if no_npu:
                evidence.append(
                    "no NPU row (eager or a device-agnostic implementation on NPU): " + ", ".join(no_npu)
                )
        elif key == "gpu-deps":
            gpu_only = [d for d in deps if d["kind"] == "vendor import"]
            if gpu_only:
                evidence.append("vendor imports: " + ", ".join(sorted({d["name"] for d in gpu_only})))
        elif key == "registration" and init is not None:
            evidence.append("registered: " + (", ".join(init["model_types"]) or "none"))
            if not init["model_types"] and status == PASS:
                status, note = FAIL, "`__init__.py` registers no model type"
            classes = _generated_classes(root, inventory)
            wrappers = sorted(c for c in classes if c.endswith("ForConditionalGeneration"))
            backbones = sorted(c for c in classes if c.endswith(("TextModel", "ForCausalLM")))
            if wrappers and backbones:
                evidence.append(
                    f"the GPU generated file defines a multimodal wrapper ({', '.join(wrappers)}) and a text backbone "
                    f"({', '.join(backbones)}): a vision-language model registers both model types"
                )
        elif key == "pin":
            pins = sorted({i["note"] for i in inventory if i["note"].startswith("Based on transformers")})
            try:
                import importlib.metadata as md

                installed = md.version("transformers")
            except md.PackageNotFoundError:
                installed = "not installed"
            evidence.append(f"generated files: {'; '.join(pins) or 'no banner'}; installed: {installed}")
            versions = {m.group(1) for p in pins for m in [re.search(r"transformers==(\S+)", p)] if m}
            if status != FAIL:  # a pass needs the comparison to have been made, and to agree
                if installed == "not installed":
                    status, note = UNKNOWN, "transformers is not installed here: the pin cannot be compared"
                elif not versions:
                    status, note = UNKNOWN, "no generated file names its transformers version"
                elif versions != {installed}:
                    status, note = (
                        FAIL,
                        f"generated from transformers {', '.join(sorted(versions))}, installed {installed}",
                    )
                else:
                    note = f"generated from transformers {installed}, the installed version"
        out.append(
            {
                "item": label,
                "key": key,
                "codes": list(codes),
                "status": status,
                "note": note,
                "evidence": evidence,
            }
        )
    return out


def _generated_classes(root: Path, inventory: list[dict[str, Any]]) -> set[str]:
    for i in inventory:
        if i["role"] == "generated GPU file" and i["present"]:
            tree = _parse(root / i["path"])
            if tree is not None:
                return {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    return set()


def _repo_relative(root: Path, vroot: Path | None) -> str:
    return root.relative_to(vroot).as_posix() if vroot and root.is_relative_to(vroot) else root.as_posix()


def _steps(model, root, repo_rel, by_code, inventory, op_table, npu_spec, gpu_spec, init, deps, checklist):  # noqa: ANN001, ANN202
    present = {i["role"]: i["present"] for i in inventory}
    status = {c["key"]: c["status"] for c in checklist}
    steps: list[str] = []
    if status.get("pin") == FAIL:
        steps.append("Align the installed transformers with the repository pin (NPU506) before regenerating.")
    dev = sum(n for c, n in by_code.items() if c.startswith(("NPU1", "NPU6")))
    if dev:
        steps.append(
            f"Make the code device-neutral: `npu-lint check --fix {root}` ({dev} NPU1xx/NPU6xx findings; "
            "fixes in generated/ are made in the specs)."
        )
    vendor = sum(n for c, n in by_code.items() if c.startswith("NPU3"))
    opslot_tree = status.get("veomniop") == NOT_ATTAINABLE
    if vendor:
        steps.append(
            f"Take vendor kernels out of model code ({vendor} NPU3xx findings): "
            + (
                "each call goes through the tree's registry (its `OpSlot` slots; each finding names the slot)."
                if opslot_tree
                else "each call becomes an instance-local handle (`npu-lint check --fix --unsafe-fixes` does the "
                "exact RMSNorm case)."
            )
        )
    migrate = [o for o in op_table if "OpSlot" in o["source"]]
    if migrate and not opslot_tree:
        names = ", ".join(f"`{o['op']}/{o['variant']}`" for o in migrate)
        steps.append(
            f"Migrate module-global OpSlots to instance-local VeomniOps built in `__init__`: {names} "
            "(NPU2xx; `npu-lint check --fix`)."
        )
    semantics = sum(n for c, n in by_code.items() if c in ("NPU401", "NPU402"))
    if semantics:
        steps.append(
            f"Check normalisation/loss semantics ({semantics} NPU401/402 findings: offset vs standard "
            "RMSNorm, loss helpers)."
        )
    if not present.get("NPU patch spec"):
        gpu_name = Path(gpu_spec["path"]).stem if gpu_spec else f"{model}_gpu_patch_gen_config"
        steps.append(
            f"Create `{model}_npu_patch_gen_config.py`: `config = deepcopy(gpu_config)` from `{gpu_name}`, "
            "set `target_file`/`description`, add only NPU-specific patches (NPU504)."
        )
    dotted = _dotted_module(Path(repo_rel))
    specs = [s for s in (gpu_spec, npu_spec) if s] or []
    names = [Path(s["path"]).stem for s in specs]
    if not present.get("NPU patch spec"):
        names.append(f"{model}_npu_patch_gen_config")
    regen = "; ".join(f"`patchgen {dotted}.{n} -o {repo_rel}/generated --diff -v`" for n in names)
    steps.append(f"Regenerate the generated files and diffs: {regen} (then `patchgen --check`).")
    if not (init and init.get("npu_switch")):
        steps.append(
            "Add the `__init__` switch: `if IS_NPU_AVAILABLE:` import the `_npu` generated module, else the "
            "`_gpu` one (NPU502)."
        )
    if status.get("registration") == FAIL:
        steps.append("Register every model type (the multimodal wrapper and its text backbone) (NPU503).")
    if not present.get("tests"):
        steps.append(
            "Add tests: the package imports on a CPU host and both generated modules build a tiny model."
        )
    steps.append(
        f"Re-run `npu-lint audit {root}` until every checklist item passes"
        + (" (or is not attainable on this generation)." if opslot_tree else ".")
    )
    return steps


def _dotted_module(root: Path) -> str:
    parts = root.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "veomni":
            return ".".join(parts[i:])
    return root.name


# -- rendering ---------------------------------------------------------------------------------------------------

_MARK = {PASS: "pass", FAIL: "FAIL", UNKNOWN: "unknown", NOT_ATTAINABLE: "not attainable on this generation"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    w(f"# Migration audit: `{report['model']}`\n")
    w(f"Model directory: `{report['model_dir']}`  ")
    w(
        f"Registry rows: {report['registry_rows']}; rules run: {report['rules_run']}; "
        f"findings: {report['findings_total']}"
        + (f" (+{report['generated_copies']} generated copies)" if report.get("generated_copies") else "")
        + "\n"
    )
    w("## Files\n")
    w("| role | path | present | note |")
    w("|---|---|---|---|")
    for f in report["files"]:
        w(
            f"| {f['role']} | `{_cell(f['path'])}` | {'yes' if f['present'] else '**missing**'} | {_cell(f['note'])} |"
        )
    w("")
    w("## Reuse\n")
    w("| file / patch | status | why |")
    w("|---|---|---|")
    for r in report["reuse"]:
        w(f"| `{_cell(r['file'])}` | {r['status']} | {_cell(r['why'])} |")
    w("")
    w("## Operators\n")
    w("| op | variant | ops config field | source | GPU implementations | NPU implementation | action |")
    w("|---|---|---|---|---|---|---|")
    for o in report["ops"]:
        w(
            f"| {o['op']} | {o['variant'] or '(none registered here)'} | {o['config_field'] or '-'} | {_cell(o['source'])} | "
            f"{', '.join(o['gpu']) or '-'} | {', '.join(o['npu']) or 'none'} | {_cell(o['action'])} |"
        )
    if not report["ops"]:
        w("| - | - | - | no dispatched or recognisable operators | - | - | - |")
    w("")
    w(
        "Declarations: "
        + "; ".join(
            (f"{o['op']}/{o['variant']}" if o["variant"] else o["op"])
            + ": "
            + ", ".join(f"`{d}`" for d in o["declared"])
            for o in report["ops"]
            if o["declared"]
        )
        + "\n"
    )
    w("## GPU-only dependencies\n")
    if report["dependencies"]:
        w("| kind | name | classification | file:lines |")
        w("|---|---|---|---|")
        for d in report["dependencies"]:
            lines = ",".join(str(n) for n in d["lines"][:8] if n) + ("..." if len(d["lines"]) > 8 else "")
            w(
                f"| {d['kind']} | `{_cell(d['name'])}` | {_cell(d['classification'])} | `{d['file']}`"
                f"{':' + lines if lines else ''} |"
            )
    else:
        w("None found: no vendor imports, attention implementation names or CUDA APIs.")
    w("")
    w("## Findings by rule\n")
    if report["findings"]:
        w("| code | rule | count | first findings |")
        w("|---|---|---|---|")
        for f in report["findings"]:
            name = f["name"] + ("" if f["default_enabled"] else " (off by default)")
            w(
                f"| {f['code']} | {name} | {f['count']} | "
                + "<br>".join(_cell(e) for e in f["examples"])
                + " |"
            )
    else:
        w("No findings.")
    for err in report["errors"]:
        w(f"\n- error: {err}")
    w("")
    if report["changed_since_base"] is not None:
        w(f"## Files changed since `{report['base']}`\n")
        w("| path | category | scope |")
        w("|---|---|---|")
        for c in report["changed_since_base"]:
            w(
                f"| `{_cell(c['path'])}` | {c['category']} | "
                f"{'**out of scope**' if c['scope'] == 'out of scope' else c['scope']} |"
            )
        if not report["changed_since_base"]:
            w("| - | no changes | - |")
        w("")
    w("## Implementation steps\n")
    for i, step in enumerate(report["steps"], 1):
        w(f"{i}. {step}")
    w("")
    w("## Migration completion checklist\n")
    for c in report["checklist"]:
        codes = f" [{', '.join(c['codes'])}]" if c["codes"] else ""
        w(
            f"- [{'x' if c['status'] == PASS else ' '}] **{_MARK[c['status']]}**: {c['item']}{codes}: {c['note']}"
        )
        for e in c["evidence"]:
            w(f"  - {e}")
    return "\n".join(out) + "\n"


def is_model_dir(path: Path) -> bool:
    """A model package: a patch spec, a ``generated/`` directory or a ``modeling_*.py`` directly inside it."""
    try:
        names = [e.name for e in os.scandir(path)]
    except OSError:
        return False
    return any(
        n.endswith("_patch_gen_config.py")
        or n == "generated"
        or (n.startswith("modeling_") and n.endswith(".py"))
        for n in names
    )


def run_audit(args: argparse.Namespace) -> int:
    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        print(f"npu-lint audit: {args.model_dir}: not a directory", file=sys.stderr)
        return EXIT_ERROR
    if not is_model_dir(model_dir):
        print(
            f"npu-lint audit: {args.model_dir} is not a model package (no *_patch_gen_config.py, generated/ or "
            "modeling_*.py): give a directory such as veomni/models/transformers/<model>",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        report = build_audit(str(model_dir), base=getattr(args, "base", None))
    except AuditError as exc:
        print(f"npu-lint audit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if getattr(args, "format", "markdown") == "json":
        import json

        text = json.dumps(report, indent=2) + "\n"
    else:
        text = render_markdown(report)
    output = getattr(args, "output_file", None)
    if output:
        from npu_lint.engine.write import write_output

        try:  # never replaces a device, FIFO or symlink
            write_output(output, text)
        except OSError as exc:
            print(f"npu-lint audit: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
    else:
        sys.stdout.write(text)
    return EXIT_OK if all(c["status"] in (PASS, NOT_ATTAINABLE) for c in report["checklist"]) else EXIT_FAIL
