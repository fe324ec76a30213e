"""Registry rows of a VeOmni tree, read statically from its kernel registration modules.

Every generation is read: ``register_op(op, variant, impl, ..., requirement=...)`` (VeomniOp),
``register_kernel(...)`` (VeomniKernel) and ``KernelSpec(name=, op_name=, variant=, hardware=...)`` (OpSlot).
Arguments may be literals, module-level constants (``_OP = "rms_norm"``), or variables of enclosing
module-level ``for`` loops over literal tuples/lists or over module-level constants holding them
(``_IMPLS = ("eager", "sdpa")`` then ``for impl in _IMPLS: register_op("attention", "standard", impl)``);
nested loops give their product. A requirement may be a call or a module-level name bound to one
(``_CUDA = CudaKernelRequirement()`` then ``requirement=_CUDA``).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from npu_lint.core.astutil import str_value
from npu_lint.core.safeio import read_regular
from npu_lint.veomni import scanstore
from npu_lint.veomni.catalog import ANY, GPU, MLU, NPU, OpRow
from npu_lint.veomni.patchgen import is_npu_model_file, package_specs

REGISTER_CALLS = ("register_op", "register_kernel")
# calls that declare a row (and keep what they are given for later) rather than select one: the registry's
# register calls, the spec constructors, and the generic ``register`` / ``register_backend`` decorators-as-calls
# (NPU230: a callable handed to one outlives the loop that built it; NPU225: a declaration is no selection)
ROW_DECLARATIONS = frozenset(
    {*REGISTER_CALLS, "KernelSpec", "BackendSpec", "OpSpec", "register", "register_backend"}
)
_MARKERS = (b"register_op(", b"register_kernel(", b"KernelSpec(")
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist", "generated"}
_MAX_ENVS = 4096  # loop-variable combinations followed per statement

Env = dict[str, ast.expr]


def requirement_kind(node: ast.expr | None, constants: Env | None = None) -> str:
    """npu / gpu / mlu / any from ``requirement=NpuKernelRequirement()``-style expressions."""
    if isinstance(node, ast.Name) and constants and node.id in constants:
        node = constants[node.id]
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return ANY
    func = node.func if isinstance(node, ast.Call) else node
    name = ""
    while isinstance(func, ast.Attribute):
        name = name or func.attr
        func = func.value
    if not name and isinstance(func, ast.Name):
        name = func.id
    if name == "HardwareRequirement":
        return hardware_kind(node) or ANY
    lowered = name.lower().lstrip("_")
    if lowered.startswith("npu"):
        return NPU
    if lowered.startswith(("gpu", "cuda")):
        return GPU
    if lowered.startswith("mlu"):
        return MLU
    return ANY


def hardware_kind(node: ast.expr | None) -> str | None:
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
        if "any" in kinds or "npu" in kinds:
            return ANY
        return GPU if "gpu" in kinds else MLU
    return {"npu": NPU, "gpu": GPU, "cuda": GPU, "mlu": MLU}.get(kinds[0], ANY)


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _resolve(node: ast.expr | None, env: Env, constants: Env) -> ast.expr | None:
    for _ in range(4):
        if isinstance(node, ast.Name):
            if node.id in env:
                node = env[node.id]
                continue
            if node.id in constants:
                node = constants[node.id]
                continue
        break
    return node


_str = str_value  # core.astutil's string-literal helper


def register_row(call: ast.Call, env: Env | None = None, constants: Env | None = None) -> OpRow | None:
    """The row of a ``register_op`` / ``register_kernel(op, variant, impl, ...)`` call, or None."""
    if _call_name(call) not in REGISTER_CALLS:
        return None
    env = env or {}
    constants = constants or {}
    params = ["op", "variant", "impl"]
    values: dict[str, ast.expr] = dict(zip(params, call.args[:3], strict=False))
    requirement: ast.expr | None = None
    for kw in call.keywords:
        if kw.arg in params:
            values[kw.arg] = kw.value
        elif kw.arg == "requirement":
            requirement = kw.value
    op, variant, impl = (_str(_resolve(values.get(p), env, constants)) for p in params)
    if op is None or variant is None or impl is None:
        return None  # e.g. the 0.1.12 config registry's register_op(OpSpec(...)), or computed names
    return OpRow(op, variant, impl, requirement_kind(_resolve(requirement, env, constants), constants))


def kernel_spec_row(call: ast.Call, env: Env | None = None, constants: Env | None = None) -> OpRow | None:
    """The row of an OpSlot-generation ``KernelSpec(name=, op_name=, variant=, hardware=...)`` call."""
    if _call_name(call) != "KernelSpec":
        return None
    env = env or {}
    constants = constants or {}
    fields: dict[str, ast.expr] = dict(zip(("name", "op_name", "variant", "factory", "hardware"), call.args))
    for kw in call.keywords:
        if kw.arg:
            fields[kw.arg] = kw.value
    name, op, variant = (
        _str(_resolve(fields.get(f), env, constants)) for f in ("name", "op_name", "variant")
    )
    if name is None or op is None or variant is None:
        return None
    kind = hardware_kind(_resolve(fields.get("hardware"), env, constants)) or ANY
    return OpRow(op, variant, name, kind)


def module_constants(tree: ast.Module) -> Env:
    """Module-level ``NAME = <expr>`` bindings (the last one wins), including inside top-level if/try."""
    out: Env = {}

    def scan(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                out[stmt.target.id] = stmt.value
            elif isinstance(stmt, (ast.If, ast.Try)):
                scan(stmt.body)
                scan(stmt.orelse)

    scan(tree.body)
    return out


def loop_iterations(loop: ast.For, env: Env, constants: Env) -> list[Env]:
    """One binding of the loop target per iteration, when the iterable is a literal (or a constant holding
    one); ``[]`` when it cannot be read statically."""
    iterable = _resolve(loop.iter, env, constants)
    if not isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
        return []
    out: list[Env] = []
    for elt in iterable.elts:
        binding: Env = {}
        if not _bind(loop.target, _resolve(elt, env, constants), binding, env, constants):
            return []
        out.append(binding)
    return out


def _bind(target: ast.expr, value: ast.expr | None, out: Env, env: Env, constants: Env) -> bool:
    if isinstance(target, ast.Name) and value is not None:
        out[target.id] = value
        return True
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
        if len(target.elts) != len(value.elts):
            return False
        return all(
            _bind(t, _resolve(v, env, constants), out, env, constants)
            for t, v in zip(target.elts, value.elts, strict=True)
        )
    return False


def _skips_iteration(stmt: ast.If) -> bool:
    """An ``if`` without ``else`` whose body ends the loop iteration (``continue`` / ``break``)."""
    return not stmt.orelse and isinstance(stmt.body[-1], (ast.Continue, ast.Break))


def _decided(test: ast.expr, env: Env, constants: Env) -> bool | None:
    """The value of a ``name ==/!=/in/not in literal`` test under one loop binding; None when undecidable."""
    if isinstance(test, ast.BoolOp):
        values = [_decided(v, env, constants) for v in test.values]
        if isinstance(test.op, ast.Or):
            return True if True in values else (False if all(v is False for v in values) else None)
        return False if False in values else (True if all(v is True for v in values) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decided(test.operand, env, constants)
        return None if inner is None else not inner
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left = _resolve(test.left, env, constants)
    right = _resolve(test.comparators[0], env, constants)
    if not isinstance(left, ast.Constant):
        return None
    op = test.ops[0]
    if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
        return (left.value == right.value) == isinstance(op, ast.Eq)
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        items = [_resolve(e, env, constants) for e in right.elts]
        if not all(isinstance(e, ast.Constant) for e in items):
            return None
        return any(e.value == left.value for e in items) == isinstance(op, ast.In)  # type: ignore[union-attr]
    return None


def read_registry_tree(tree: ast.Module) -> tuple[list[OpRow], list[OpRow], list[tuple[OpRow, int]]]:
    """(register_op / register_kernel rows, KernelSpec rows, [(row, line)]) of one parsed module."""
    ops, slots, where, _slot_where = read_registry_rows(tree)
    return ops, slots, where


def read_registry_rows(
    tree: ast.Module,
) -> tuple[list[OpRow], list[OpRow], list[tuple[OpRow, int]], list[tuple[OpRow, int]]]:
    """As ``read_registry_tree``, plus [(KernelSpec row, line)] (loops expanded, skipped iterations left out)."""
    constants = module_constants(tree)
    slot_where: list[tuple[OpRow, int]] = []
    ops: list[OpRow] = []
    slots: list[OpRow] = []
    where: list[tuple[OpRow, int]] = []

    def scan(stmts: list[ast.stmt], envs: list[Env]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.If) and _skips_iteration(stmt):
                # `if name == "npu": continue` inside a registration loop: the rest of the body does not run
                # for the iterations whose binding the test selects
                scan(stmt.body, envs)
                envs = [env for env in envs if _decided(stmt.test, env, constants) is not True]
                if not envs:
                    return
                continue
            if isinstance(stmt, ast.For):
                inner = [{**env, **it} for env in envs for it in loop_iterations(stmt, env, constants)][
                    :_MAX_ENVS
                ]
                if inner:
                    scan(stmt.body, inner)
                continue
            if isinstance(stmt, (ast.If, ast.Try, ast.With)):
                scan(stmt.body, envs)
                scan(getattr(stmt, "orelse", []), envs)
                scan(getattr(stmt, "finalbody", []), envs)
                for handler in getattr(stmt, "handlers", []):
                    scan(handler.body, envs)
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # registration happens at import time, at module level
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                for env in envs:
                    row = register_row(node, env, constants)
                    if row is not None:
                        ops.append(row)
                        where.append((row, node.lineno))
                    slot = kernel_spec_row(node, env, constants)
                    if slot is not None:
                        slots.append(slot)
                        slot_where.append((slot, node.lineno))

    scan(tree.body, [{}])
    return ops, slots, where, slot_where


def read_registry_file(path: Path) -> tuple[list[OpRow], list[OpRow], list[tuple[OpRow, int]]]:
    """(register rows, KernelSpec rows, [(row, line)]) of one kernel module, read statically."""
    try:
        data = read_regular(path)[0]
    except OSError:
        return [], [], []
    if not any(marker in data for marker in _MARKERS):
        return [], [], []
    from npu_lint.veomni.patchgen import load_file  # the run's one store: the module index reads it too

    parsed = load_file(str(path))
    tree = parsed.tree if parsed is not None else None
    if tree is None:  # unreadable, undecodable or not parsable
        return [], [], []
    return read_registry_tree(tree)


def registry_dirs(root: Path) -> list[Path]:
    """The directories of a tree that hold registration modules (``veomni/ops``, ``veomni/kernels``)."""
    return [d for d in (root / "veomni" / "ops", root / "veomni" / "kernels") if d.is_dir()]


def read_registry(
    root: Path, listing: scanstore.TreeListing | None = None
) -> tuple[tuple[OpRow, ...], tuple[OpRow, ...], dict[str, str]]:
    """(registered rows, KernelSpec rows, {"op/variant/impl": "file:line"}) of a whole tree (its files selected
    from ``listing``, the tree's one walk, when given); with a store (``scanstore.use_store``) reused while no
    registration module's stat key changed."""
    files: list[Path] = []
    for base in registry_dirs(root):
        if listing is not None and not base.is_symlink():  # a linked directory: the walk did not enter it
            files.extend(listing.select(_SKIP_DIRS, under=(base.name,)))
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            files.extend(Path(dirpath) / name for name in sorted(filenames) if name.endswith(".py"))

    def compute() -> tuple[tuple[OpRow, ...], tuple[OpRow, ...], dict[str, str]]:
        registered: set[OpRow] = set()
        slots: set[OpRow] = set()
        sources: dict[str, str] = {}
        for path in files:
            ops, slot_rows, where = read_registry_file(path)
            registered.update(ops)
            slots.update(slot_rows)
            for row, line in where:
                sources.setdefault("/".join(row.triple), f"{path}:{line}")
        return tuple(sorted(registered)), tuple(sorted(slots)), sources

    def encode(value: tuple[tuple[OpRow, ...], tuple[OpRow, ...], dict[str, str]]) -> list:
        rows = [[[r.op, r.variant, r.impl, r.requirement] for r in part] for part in value[:2]]
        return [*rows, value[2]]

    def decode(hit: list) -> tuple[tuple[OpRow, ...], tuple[OpRow, ...], dict[str, str]] | None:
        registered, slots, sources = (
            scanstore.string_rows(hit[0], 4),
            scanstore.string_rows(hit[1], 4),
            hit[2],
        )
        if registered is None or slots is None or not isinstance(sources, dict):
            return None
        if not all(isinstance(v, str) for v in sources.values()):
            return None
        return tuple(OpRow(*r) for r in registered), tuple(OpRow(*r) for r in slots), dict(sources)

    return scanstore.stored("registry", root, files, compute, encode, decode)


_SELECTOR_MARKERS = (b"OpSlot(", b"VeomniOp(", b"VeomniKernel(")
# a handle constructor with literal op and variant (every generation), read from the bytes: the NPU files of a
# tree are large generated modules, and parsing them all would cost every run about a second
_SELECTION = re.compile(
    rb"""\b(?:OpSlot|VeomniOp|VeomniKernel)\(\s*(?:op(?:_name)?\s*=\s*)?["']([\w.-]+)["']\s*,\s*"""
    rb"""(?:variant\s*=\s*)?["']([\w.-]+)["']\s*(,\s*(?:impl\s*=\s*)?["']eager["']\s*\))?"""
)


def npu_file(path: Path) -> bool:
    """An NPU-targeted model file: an NPU patch spec, or a generated NPU modeling file."""
    return is_npu_model_file(path)


def read_npu_selections(
    packages: tuple[str, ...], root: Path | None = None
) -> tuple[tuple[str, str, str], ...]:
    """(op, variant, "path:line") of every handle constructor with literal names in the NPU-targeted files of
    the model packages (their specs and generated NPU copies): what an NPU host binds from the registry. A
    selection of the literal ``"eager"`` implementation needs no NPU row and is left out, as are commented-out
    lines. Paths are relative to ``root`` when given."""
    files: list[Path] = []
    for package in packages:
        base = Path(package)
        files.extend([*map(Path, package_specs(base, "npu")), *sorted(base.glob("generated/*_npu.py"))])

    def compute() -> tuple[tuple[str, str, str], ...]:
        out: set[tuple[str, str, str]] = set()
        for path in files:
            try:
                data = read_regular(path)[0]
            except OSError:
                continue
            if not any(marker in data for marker in _SELECTOR_MARKERS):
                continue
            shown = str(path)
            if root is not None:
                try:
                    shown = str(path.relative_to(root))
                except ValueError:
                    pass
            for match in _SELECTION.finditer(data):
                if match.group(3):
                    continue  # the eager implementation, spelled out
                line_start = data.rfind(b"\n", 0, match.start()) + 1
                if data[line_start : match.start()].lstrip().startswith(b"#"):
                    continue
                line = data.count(b"\n", 0, match.start()) + 1
                op, variant = match.group(1).decode(), match.group(2).decode()
                out.add((op, variant, f"{shown}:{line}"))
        return tuple(sorted(out))

    anchor = root if root is not None else Path(packages[0] if packages else ".")
    return scanstore.stored(
        "selections",
        anchor,
        files,
        compute,
        lambda value: [list(t) for t in value],
        lambda hit: scanstore.string_rows(hit, 3),
    )


_REMAP = re.compile(
    rb"""\b(resolve_op_impl|resolve_kernel_impl)\(\s*["'](\w+)["']\s*,\s*npu_as\s*=\s*["']([\w.-]+)["']"""
)


def read_npu_remaps(
    packages: tuple[str, ...], root: Path | None = None
) -> tuple[tuple[str, str, str, str], ...]:
    """(resolver, field, npu_as value, "path:line") of every ops-config read in the model packages' patch specs
    that remaps the NPU implementation name (``resolve_op_impl("cross_entropy_loss_implementation",
    npu_as="chunk_loss")``): how the tree itself says a field's NPU name must be read."""
    files = [path for package in packages for path in sorted(Path(package).glob("*_patch_gen_config.py"))]

    def compute() -> tuple[tuple[str, str, str, str], ...]:
        out: set[tuple[str, str, str, str]] = set()
        for path in files:
            try:
                data = read_regular(path)[0]
            except OSError:
                continue
            if b"npu_as" not in data:
                continue
            shown = str(path)
            if root is not None:
                try:
                    shown = str(path.relative_to(root))
                except ValueError:
                    pass
            for match in _REMAP.finditer(data):
                line = data.count(b"\n", 0, match.start()) + 1
                resolver, field, value = (g.decode() for g in match.groups())
                out.add((resolver, field, value, f"{shown}:{line}"))
        return tuple(sorted(out))

    anchor = root if root is not None else Path(packages[0] if packages else ".")
    return scanstore.stored(
        "remaps",
        anchor,
        files,
        compute,
        lambda value: [list(t) for t in value],
        lambda hit: scanstore.string_rows(hit, 4),
    )
