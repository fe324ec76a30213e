"""The cross-file index of a VeOmni tree: root, dispatch generation, registry rows, model packages.

Built once per run from the linted paths, statically (never imports the linted code: every registry row is
read with ``ast`` from the kernel registration modules), and handed to every rule through
``Context.project``. It must stay picklable (it is sent to worker processes) and cheap to build: only files
under ``veomni/ops`` whose bytes mention a registration call are parsed.

Two row tables are kept:

* ``registered``: the VeomniOp-generation rows, one per ``register_op(op, variant, impl, ...,
  requirement=...)`` call (requirement kind npu / gpu / mlu / any).
* ``slot_rows``: the OpSlot-generation ``KernelSpec(name=, op_name=, variant=, hardware=...)`` table
  (eager is implicit there: an OpSlot bound to "eager" falls through to the original code).

``rows`` (what rules check VeomniOp triples against) is ``registered`` when the tree is of the VeomniOp
generation (its registry is authoritative), else the built-in catalog (the migration target) merged with
whatever rows the tree registers; with ``--live-registry`` it is ``OP_REGISTRY`` read from an importable
``veomni``.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.veomni.catalog import ANY, BUILTIN_ROWS, GPU, MLU, NPU, OpRow

OP_SLOT = "op-slot"
VEOMNI_OP = "veomni-op"

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist", "generated"}
_MAX_PACKAGE_SCAN = 5000  # directories visited when looking for model packages outside a VeOmni tree


@dataclass
class Project:
    root: str | None = None  # directory that holds veomni/ops (the VeOmni checkout or wheel root)
    generation: str | None = None  # "veomni-op" | "op-slot" | None (unknown)
    registered: tuple[OpRow, ...] = ()  # register_op rows of the tree (VeomniOp generation)
    slot_rows: tuple[OpRow, ...] = ()  # KernelSpec rows of the tree (OpSlot generation)
    model_packages: tuple[str, ...] = ()  # directories holding a *_gpu_patch_gen_config.py
    live_rows: tuple[OpRow, ...] | None = None  # OP_REGISTRY, when --live-registry was given
    row_sources: dict[str, str] = field(default_factory=dict)  # "op/variant/impl" -> file:line (messages)

    # -- rows ---------------------------------------------------------------------------------------
    @property
    def rows(self) -> tuple[OpRow, ...]:
        """The rows VeomniOp triples are checked against."""
        if self.live_rows is not None:
            return self.live_rows
        if self.generation == VEOMNI_OP and self.registered:
            return self.registered
        if not self.registered:
            return BUILTIN_ROWS
        return tuple(sorted(set(BUILTIN_ROWS) | set(self.registered)))

    @property
    def rows_origin(self) -> str:
        if self.live_rows is not None:
            return "the live OP_REGISTRY"
        if self.generation == VEOMNI_OP and self.registered:
            return "the tree's register_op rows"
        if self.registered:
            return "the built-in catalog and the tree's register_op rows"
        return "the built-in catalog"

    def rows_for(self, op: str, variant: str | None = None) -> list[OpRow]:
        return [r for r in self.rows if r.op == op and (variant is None or r.variant == variant)]

    def has_triple(self, op: str, variant: str, impl: str) -> bool:
        return any(r.triple == (op, variant, impl) for r in self.rows)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(repr((self.root, self.generation, self.model_packages)).encode())
        for table in (self.registered, self.slot_rows, self.live_rows or ()):
            h.update(b"\0")
            h.update(repr(table).encode())
        # Findings in one file can depend on its package's other files (a generated file's origins come
        # from the spec; backend modules are recognised from their siblings): the per-file cache must be
        # invalidated when any of them changes, so their sizes and mtimes are part of the key.
        for package in self.model_packages:
            try:
                entries = sorted(os.scandir(package), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.endswith(".py"):
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    h.update(f"{entry.path}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()[:16]

    # -- live registry ------------------------------------------------------------------------------
    def load_live_registry(self, timeout: float = 120) -> str:
        """Read ``OP_REGISTRY`` from an importable ``veomni.ops`` (``--live-registry``).

        Importing ``veomni.ops`` runs the tree's code, so it happens only when asked for, and never in this
        process: a child interpreter (working directory: the tree's root, so the tree's ``veomni`` is the one
        imported) prints the rows as JSON. Returns the note the front end shows (what was imported, where)."""
        import json
        import subprocess
        import sys

        from npu_lint.core.config import ConfigError

        cwd = self.root or os.getcwd()
        script = "import json, npu_lint.veomni.project as p; print(json.dumps(p.live_rows_json()))"
        try:
            proc = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=cwd
            )
        except subprocess.TimeoutExpired:
            raise ConfigError(f"--live-registry: importing veomni.ops took more than {timeout:g} s") from None
        except OSError as exc:
            raise ConfigError(f"--live-registry: cannot start {sys.executable}: {exc}") from None
        try:
            answer = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConfigError(f"--live-registry: importing veomni.ops failed: {tail}") from None
        if isinstance(answer, dict) and "error" in answer:
            raise ConfigError(f"--live-registry: {answer['error']}")
        self.live_rows = tuple(sorted({OpRow(*(str(v) for v in row)) for row in answer}))
        self.generation = VEOMNI_OP
        return f"--live-registry: imported veomni.ops (the tree's code) in a subprocess, from {cwd}"


def read_live_rows() -> list[OpRow]:
    """``OP_REGISTRY`` rows of the ``veomni.ops`` importable in *this* interpreter (the child process of
    ``Project.load_live_registry``); raises ConfigError when there is none."""
    from npu_lint.core.config import ConfigError

    try:
        import importlib

        ops = importlib.import_module("veomni.ops")
    except Exception as exc:  # ImportError, or anything the package raises on import
        raise ConfigError(
            f"cannot import veomni.ops ({type(exc).__name__}: {exc}); install VeOmni in "
            "this environment or drop the flag to read the registry statically"
        ) from None
    registry = getattr(ops, "OP_REGISTRY", None)
    if registry is None:
        raise ConfigError("veomni.ops has no OP_REGISTRY (an OpSlot-generation VeOmni); drop the flag")
    return live_rows(registry)


def live_rows_json() -> object:
    """``read_live_rows`` as JSON-ready data (the child process's answer)."""
    from npu_lint.core.config import ConfigError

    try:
        return [[r.op, r.variant, r.impl, r.requirement] for r in read_live_rows()]
    except ConfigError as exc:
        return {"error": str(exc)}


def live_rows(registry: object) -> list[OpRow]:
    """Rows of a live ``OP_REGISTRY``: keys are ``(op, variant, impl, device)``."""
    entries = getattr(registry, "_entries", None)
    out: list[OpRow] = []
    if isinstance(entries, dict):
        for key, entry in entries.items():
            if isinstance(key, tuple) and len(key) >= 3:
                op, variant, impl = (str(k) for k in key[:3])
                device = str(key[3]) if len(key) > 3 else ""
                out.append(OpRow(op, variant, impl, _device_kind(device, entry)))
        return out
    lister = getattr(registry, "list_entries", None)
    if callable(lister):
        for entry in lister():
            op, variant, impl = (getattr(entry, a, None) for a in ("op", "variant", "impl"))
            if op and variant and impl:
                out.append(OpRow(str(op), str(variant), str(impl), _device_kind("", entry)))
    return out


def _device_kind(device: str, entry: object) -> str:
    requirement = getattr(entry, "requirement", None)
    name = (device or getattr(requirement, "device", "") or "").lower()
    if not name and requirement is not None:
        name = type(requirement).__name__.lower()
    if "npu" in name:
        return NPU
    if "mlu" in name:
        return MLU
    if "cuda" in name or "gpu" in name:
        return GPU
    return ANY


# -- static reading of the tree ---------------------------------------------------------------------


def find_veomni_root(start: Path) -> Path | None:
    try:
        start = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop: reported by discovery, per path
        return None
    if start.is_file():
        start = start.parent
    for directory in (start, *start.parents):
        if (directory / "veomni" / "ops").is_dir():
            return directory
        if directory.name == "veomni" and (directory / "ops").is_dir():
            return directory.parent
    return None


def _defines_class(path: Path, name: str) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return f"class {name}".encode() in data


def detect_generation(root: Path) -> str | None:
    ops = root / "veomni" / "ops"
    if _defines_class(ops / "registry.py", "VeomniOp"):
        return VEOMNI_OP
    if _defines_class(ops / "dispatch.py", "OpSlot"):
        return OP_SLOT
    return None


def _requirement_kind(node: ast.expr | None) -> str:
    """npu / gpu / mlu / any from ``requirement=NpuKernelRequirement()``-style expressions."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return ANY
    func = node.func if isinstance(node, ast.Call) else node
    name = ""
    while isinstance(func, ast.Attribute):
        name = name or func.attr
        func = func.value
    if not name and isinstance(func, ast.Name):
        name = func.id
    lowered = name.lower()
    if lowered.startswith("npu"):
        return NPU
    if lowered.startswith(("gpu", "cuda")):
        return GPU
    if lowered.startswith("mlu"):
        return MLU
    return ANY


def _hardware_kind(node: ast.expr | None) -> str | None:
    """Requirement kind of ``HardwareRequirement(device_type=...)``; None when not a literal."""
    if not isinstance(node, ast.Call):
        return None
    value: ast.expr | None = node.args[0] if node.args else None
    for kw in node.keywords:
        if kw.arg == "device_type":
            value = kw.value
    kinds: list[str] = []
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        kinds = [value.value]
    elif isinstance(value, (ast.List, ast.Tuple)):
        kinds = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if not kinds:
        return None
    if len(kinds) > 1:
        # several devices: NPU-capable only if npu (or any) is among them
        if "any" in kinds or "npu" in kinds:
            return ANY
        return GPU if "gpu" in kinds else MLU
    return {"npu": NPU, "gpu": GPU, "mlu": MLU}.get(kinds[0], ANY)


def _str(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def register_op_row(call: ast.Call) -> OpRow | None:
    """The row of a VeomniOp-generation ``register_op(op, variant, impl, ...)`` call (literals only)."""
    if _call_name(call) != "register_op":
        return None
    params = ["op", "variant", "impl"]
    values: dict[str, ast.expr] = dict(zip(params, call.args[:3], strict=False))
    requirement = None
    for kw in call.keywords:
        if kw.arg in params:
            values[kw.arg] = kw.value
        elif kw.arg == "requirement":
            requirement = kw.value
    op, variant, impl = (_str(values.get(p)) for p in params)
    if op is None or variant is None or impl is None:
        return None  # e.g. the 0.1.12 config registry's register_op(OpSpec(...)), or computed names
    return OpRow(op, variant, impl, _requirement_kind(requirement))


def kernel_spec_rows(call: ast.Call, loop_bindings: dict[str, list[ast.expr]]) -> list[OpRow]:
    """Rows of an OpSlot-generation ``KernelSpec(name=, op_name=, variant=, hardware=...)`` call.

    ``loop_bindings`` maps loop variables of enclosing module-level ``for`` loops over literal tuples to
    their values, so ``for _name, _hw in (("chunk_loss", ...), ("npu", ...)): KernelSpec(name=_name, ...)``
    yields both rows.
    """
    if _call_name(call) != "KernelSpec":
        return []
    fields = dict(zip(("name", "op_name", "variant", "factory", "hardware"), call.args, strict=False))
    for kw in call.keywords:
        if kw.arg:
            fields[kw.arg] = kw.value

    def values(node: ast.expr | None) -> list[ast.expr | None]:
        if isinstance(node, ast.Name) and node.id in loop_bindings:
            return list(loop_bindings[node.id])
        return [node]

    names = values(fields.get("name"))
    ops = values(fields.get("op_name"))
    variants = values(fields.get("variant"))
    hardware = values(fields.get("hardware"))
    out: list[OpRow] = []
    # loop variables bound together (same tuple position) are zipped; independent literals broadcast
    width = max(len(names), len(ops), len(variants), len(hardware))
    for i in range(width):
        name = _str(names[i % len(names)])
        op = _str(ops[i % len(ops)])
        variant = _str(variants[i % len(variants)])
        if name is None or op is None or variant is None:
            continue
        kind = _hardware_kind(hardware[i % len(hardware)]) or ANY  # type: ignore[arg-type]
        out.append(OpRow(op, variant, name, kind))
    return out


def _loop_bindings(loop: ast.For) -> dict[str, list[ast.expr]]:
    """``for a, b in ((x1, y1), (x2, y2)):`` -> {"a": [x1, x2], "b": [y1, y2]} (literal tuples only)."""
    if not isinstance(loop.iter, (ast.Tuple, ast.List)):
        return {}
    targets: list[str]
    if isinstance(loop.target, ast.Name):
        targets = [loop.target.id]
        rows = [[e] for e in loop.iter.elts]
    elif isinstance(loop.target, ast.Tuple) and all(isinstance(t, ast.Name) for t in loop.target.elts):
        targets = [t.id for t in loop.target.elts]  # type: ignore[union-attr]
        rows = []
        for elt in loop.iter.elts:
            if not isinstance(elt, (ast.Tuple, ast.List)) or len(elt.elts) != len(targets):
                return {}
            rows.append(list(elt.elts))
    else:
        return {}
    return {name: [row[i] for row in rows] for i, name in enumerate(targets)}


def read_registry_file(path: Path) -> tuple[list[OpRow], list[OpRow], list[tuple[OpRow, int]]]:
    """(register_op rows, KernelSpec rows, [(row, line)]) of one kernel module, read statically."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], [], []
    if b"register_op(" not in data and b"KernelSpec(" not in data:
        return [], [], []
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError, RecursionError):
        return [], [], []
    ops: list[OpRow] = []
    slots: list[OpRow] = []
    where: list[tuple[OpRow, int]] = []

    def scan(stmts: list[ast.stmt], bindings: dict[str, list[ast.expr]]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.For):
                scan(stmt.body, {**bindings, **_loop_bindings(stmt)})
                continue
            if isinstance(stmt, (ast.If, ast.Try)):
                scan(stmt.body, bindings)
                scan(getattr(stmt, "orelse", []), bindings)
                for handler in getattr(stmt, "handlers", []):
                    scan(handler.body, bindings)
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # registration happens at import time, at module level
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                row = register_op_row(node)
                if row is not None:
                    ops.append(row)
                    where.append((row, node.lineno))
                for slot in kernel_spec_rows(node, bindings):
                    slots.append(slot)

    scan(tree.body, {})
    return ops, slots, where


def read_registry(root: Path) -> tuple[tuple[OpRow, ...], tuple[OpRow, ...], dict[str, str]]:
    ops_dir = root / "veomni" / "ops"
    registered: set[OpRow] = set()
    slots: set[OpRow] = set()
    sources: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(ops_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = Path(dirpath) / name
            ops, slot_rows, where = read_registry_file(path)
            registered.update(ops)
            slots.update(slot_rows)
            for row, line in where:
                sources.setdefault("/".join(row.triple), f"{path}:{line}")
    return tuple(sorted(registered)), tuple(sorted(slots)), sources


def find_model_packages(base: Path, limit: int = _MAX_PACKAGE_SCAN) -> list[str]:
    """Directories under ``base`` holding a ``*_gpu_patch_gen_config.py`` (a VeOmni model package)."""
    out: list[str] = []
    if base.is_file():
        base = base.parent
    seen = 0
    for dirpath, dirnames, filenames in os.walk(base):
        seen += 1
        if seen > limit:
            break
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        if any(f.endswith("_gpu_patch_gen_config.py") for f in filenames):
            out.append(str(Path(dirpath).resolve()))
    return out


def load_project(paths: list[str], settings: object | None = None) -> Project:
    root: Path | None = None
    for raw in paths:
        root = find_veomni_root(Path(raw))
        if root is not None:
            break
    if root is None:
        packages: set[str] = set()
        for raw in paths:
            path = Path(raw)
            if path.exists():
                # a package named directly, or one of its files, or a tree of packages
                start = path if path.is_dir() else path.parent
                packages.update(find_model_packages(start))
        return Project(model_packages=tuple(sorted(packages)))
    registered, slots, sources = read_registry(root)
    models = root / "veomni" / "models"
    packages = find_model_packages(models) if models.is_dir() else []
    return Project(
        root=str(root),
        generation=detect_generation(root),
        registered=registered,
        slot_rows=slots,
        model_packages=tuple(sorted(packages)),
        row_sources=sources,
    )
