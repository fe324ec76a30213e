"""The cross-file index of a VeOmni tree: root, API profile, dispatch generation, registry rows, packages.

Built once per run from the linted paths, statically (never imports the linted code: every registry row is
read with ``ast`` from the registration modules under ``veomni/ops`` and ``veomni/kernels``), and handed
to every rule through ``Context.project``. It must stay picklable (it is sent to worker processes) and
cheap to build: only files whose bytes mention a registration call are parsed.

``profile`` (:class:`npu_lint.veomni.profile.ApiProfile`) names, for the tree's generation (OpSlot, VeomniOp
or VeomniKernel; ``target-api`` overrides it), every API name a rule or fix uses and the module defining it,
and answers ``defines(module, name)`` statically. ``generation`` is the profile's generation when the tree
defines its handle, else the generation the tree has (None: unknown); ``notes`` say once per run when
target-api forces an API the tree lacks.

Two row tables are kept:

* ``registered``: one row per ``register_op`` / ``register_kernel(op, variant, impl, ...,
  requirement=...)`` call (literals, module constants, loops over literal or constant tuples; requirement
  kind npu / gpu / mlu / any, also through a module-level name).
* ``slot_rows``: the OpSlot-generation ``KernelSpec(name=, op_name=, variant=, hardware=...)`` table
  (eager is implicit there: an OpSlot bound to "eager" falls through to the original code).

``rows`` (what rules check handle triples against) is ``registered`` when the tree is of the VeomniOp or
VeomniKernel generation (its registry is authoritative), else the built-in catalog (the migration target)
merged with whatever rows the tree registers; with ``--live-registry`` it is ``OP_REGISTRY`` read from an
importable ``veomni``.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from npu_lint.core.memo import Bounded
from npu_lint.veomni import scanstore
from npu_lint.veomni.catalog import ANY, BUILTIN_ROWS, GPU, MLU, NPU, OpRow
from npu_lint.veomni.layout import find_model_packages, find_veomni_root
from npu_lint.veomni.optional import SKIP_DIRS as IMPORT_SCAN_SKIP
from npu_lint.veomni.optional import Site, required, scan_sites
from npu_lint.veomni.profile import ApiProfile, Generation, builtin_profile, detect_profile
from npu_lint.veomni.profile import detect_generation as _detect_generation
from npu_lint.veomni.registry import (
    hardware_kind,
    kernel_spec_row,
    read_npu_remaps,
    read_npu_selections,
    read_registry,
    read_registry_file,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from npu_lint.core.config import Settings

T = TypeVar("T")
_MISSING = object()
OP_SLOT = Generation.OP_SLOT
VEOMNI_OP = Generation.VEOMNI_OP
VEOMNI_KERNEL = Generation.VEOMNI_KERNEL
_HANDLE_GENERATIONS = (VEOMNI_OP, VEOMNI_KERNEL)  # generations whose registry is authoritative for rows

__all__ = [
    "OP_SLOT",
    "VEOMNI_KERNEL",
    "VEOMNI_OP",
    "ApiProfile",
    "Generation",
    "Project",
    "detect_generation",
    "find_model_packages",
    "find_veomni_root",
    "kernel_spec_rows",
    "live_rows",
    "load_project",
    "read_registry",
    "read_registry_file",
]


@dataclass
class Project:
    root: str | None = None  # directory that holds the veomni package (the VeOmni checkout or wheel root)
    generation: Generation | None = None  # the tree's generation (or target-api's); None: unknown / no tree
    registered: tuple[OpRow, ...] = ()  # register_op / register_kernel rows of the tree
    slot_rows: tuple[OpRow, ...] = ()  # KernelSpec rows of the tree (OpSlot generation)
    model_packages: tuple[str, ...] = ()  # model packages (spec, generated/ or registration), any layout
    live_rows: tuple[OpRow, ...] | None = None  # OP_REGISTRY, when --live-registry was given
    row_sources: dict[str, str] = field(default_factory=dict)  # "op/variant/impl" -> file:line (messages)
    profile: ApiProfile | None = None  # the names of this tree's API; built-in for the generation when None
    # (op, variant, "path:line") of the handles the tree's NPU-targeted model files construct (NPU209)
    npu_selections: tuple[tuple[str, str, str], ...] = ()
    # (resolver, field, npu_as value, "path:line") of the specs' ops-config reads that remap the NPU name (NPU204)
    npu_remaps: tuple[tuple[str, str, str, str], ...] = ()
    # package -> where the tree's ``veomni/**/*.py`` import it (``veomni.optional.scan_sites``; NPU308)
    import_sites: dict[str, tuple[Site, ...]] = field(default_factory=dict)
    # the import names of the packages the tree's pyproject requires (``veomni.optional.required``)
    required_packages: frozenset[str] = frozenset()
    # the tree's ``veomni/**/*.py`` as the one walk listed them (``scanstore.list_tree``), for the rules that read
    # the whole tree (NPU234); not part of the fingerprint (the tables above are what the files say)
    tree_files: tuple[str, ...] = ()
    # what the rules and helpers derive from the tree's files once per project (`remember`): NPU323's import
    # requirements and closures, the operators the tree defines (NPU320, NPU323), NPU308's on-demand imports,
    # NPU234's top-level imports, NPU309/NPU311's kernel calls, NPU732's sibling registrations. Owned by this
    # index, so it dies with it: a run's one project, or the language server's until a file it depends on changes
    # (the server then builds a new one); bounded
    memo: Bounded[Hashable, object] = field(
        default_factory=lambda: Bounded(512), init=False, compare=False, repr=False
    )

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per project for ``key`` (see ``memo``); a project without a tree (the one shared by
        every file outside a tree) keeps nothing."""
        if self.root is None:
            return compute()
        hit = self.memo.get(key, _MISSING)
        if hit is _MISSING:
            hit = self.memo[key] = compute()
        return hit  # type: ignore[return-value]

    def __post_init__(self) -> None:
        if self.generation is not None and not isinstance(self.generation, Generation):
            self.generation = Generation(self.generation)
        if self.profile is None:
            self.profile = builtin_profile(self.generation)

    @property
    def api(self) -> ApiProfile:
        """The profile, typed as always present."""
        assert self.profile is not None
        return self.profile

    @property
    def notes(self) -> tuple[str, ...]:
        """What the run says once (e.g. target-api forces an API the tree lacks)."""
        return self.api.notes

    # False when no veomni package is in the tree or installed: fixes that import ``veomni.*`` are not offered
    veomni_available: bool = True

    # -- rows ---------------------------------------------------------------------------------------
    @property
    def rows(self) -> tuple[OpRow, ...]:
        """The rows VeomniOp triples are checked against."""
        if self.live_rows is not None:
            return self.live_rows
        if self.generation in _HANDLE_GENERATIONS and self.registered:
            return self.registered
        if not self.registered:
            return BUILTIN_ROWS
        return tuple(sorted(set(BUILTIN_ROWS) | set(self.registered)))

    @property
    def rows_origin(self) -> str:
        if self.live_rows is not None:
            return "the live OP_REGISTRY"
        register = self.api.register_function or "register_op"
        if self.generation in _HANDLE_GENERATIONS and self.registered:
            return f"the tree's {register} rows"
        if self.registered:
            return f"the built-in catalog and the tree's {register} rows"
        return "the built-in catalog"

    def rows_for(self, op: str, variant: str | None = None) -> list[OpRow]:
        return [r for r in self.rows if r.op == op and (variant is None or r.variant == variant)]

    def has_triple(self, op: str, variant: str, impl: str) -> bool:
        return any(r.triple == (op, variant, impl) for r in self.rows)

    def outside_tree(self, path: str) -> bool:
        """``path`` is outside any VeOmni tree: not in a ``veomni`` package, not under the project's root (the
        directory holding ``veomni/``, where a script beside the package imports it). Its fixes never rely on
        ``veomni`` names (whatever the linting environment has installed)."""
        from npu_lint.veomni.patchgen import module_of

        if module_of(path) is not None:
            return False
        if self.root is None:
            return True
        real, base = os.path.realpath(path), os.path.realpath(self.root)
        return not (real == base or real.startswith(base.rstrip(os.sep) + os.sep))

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(
            repr(
                (self.root, self.generation, self.model_packages, self.profile, self.veomni_available)
            ).encode()
        )
        for table in (
            self.registered,
            self.slot_rows,
            self.live_rows or (),
            self.npu_selections,
            self.npu_remaps,
            # where the tree imports each package, without line numbers: a line moving above an import does
            # not change what any rule reports (NPU308 names the file, not the line)
            {k: sorted({(s.path, s.how) for s in v}) for k, v in self.import_sites.items()},
            sorted(self.required_packages),
        ):
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
                    h.update(f"{entry.path}:{st.st_size}:{st.st_mtime_ns}".encode("utf-8", "surrogateescape"))
        # and on modules outside the model packages: sibling kernel backends (NPU316), the eager function an
        # adapter replaces (NPU314: any module beside a `torch_npu` importer), a zero-argument implementation
        # resolver (NPU204)
        from npu_lint.veomni.layout import shared_module_files

        adapters = [s.path for s in self.import_sites.get("torch_npu", ())]
        for file in shared_module_files(self.root, adapters):
            try:
                st = os.stat(file)
            except OSError:
                continue
            h.update(f"{file}:{st.st_size}:{st.st_mtime_ns}".encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:16]

    # -- live registry ------------------------------------------------------------------------------
    def load_live_registry(self, timeout: float = 120) -> str:
        """Read ``OP_REGISTRY`` from an importable ``veomni.ops`` (``--live-registry``).

        Importing ``veomni.ops`` runs the tree's code, so it happens only when asked for, and never in this
        process: a child interpreter (working directory: the tree's root, so the tree's ``veomni`` is the one
        imported) prints the rows as JSON. Returns the note the front end shows (what was imported, where)."""
        import sys

        import npu_lint
        from npu_lint.core.config import ConfigError
        from npu_lint.core.process import run_untrusted

        cwd = str(self.root or os.getcwd())
        # isolated interpreter (-I: neither the working directory nor PYTHONPATH on sys.path): npu-lint's own
        # package first, then the tree; the key is read before the tree's code runs
        script = (
            "import sys; sys.path.insert(0, sys.argv[1])\n"
            "from npu_lint.core.process import child_read_key, child_send\n"
            "key, _ = child_read_key()\n"
            "sys.path.insert(1, sys.argv[2])\n"  # the tree, only now: a module of it cannot shadow hmac or json
            "import npu_lint.veomni.project as p\n"
            "child_send(key, p.live_rows_json())\n"
        )
        ours = os.path.dirname(os.path.dirname(os.path.abspath(npu_lint.__file__)))
        try:
            outcome = run_untrusted(
                [sys.executable, "-I", "-c", script, ours, cwd],
                cwd=cwd,
                timeout=timeout,
                python=sys.executable,
            )
        except OSError as exc:
            raise ConfigError(f"--live-registry: cannot start {sys.executable}: {exc}") from None
        if outcome.timed_out:
            raise ConfigError(f"--live-registry: importing veomni.ops took more than {timeout:g} s") from None
        answer = outcome.result
        if answer is None:
            tail = (outcome.stderr.strip().splitlines() or [outcome.result_problem])[-1]
            raise ConfigError(f"--live-registry: importing veomni.ops failed: {tail}")
        if isinstance(answer, dict) and "error" in answer:
            raise ConfigError(f"--live-registry: {answer['error']}")
        if not isinstance(answer, list) or not all(isinstance(r, list) and len(r) == 4 for r in answer):
            raise ConfigError("--live-registry: the child's answer has the wrong shape")
        self.live_rows = tuple(sorted({OpRow(*(str(v) for v in row)) for row in answer}))
        self.generation = VEOMNI_OP
        if self.api.generation != VEOMNI_OP:
            self.profile = (
                detect_profile(self.root, VEOMNI_OP.value) if self.root else builtin_profile(VEOMNI_OP)
            )
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


# -- static reading of the tree (the readers live in npu_lint.veomni; these names stay for callers) -------


def _hardware_kind(node: ast.expr | None) -> str | None:
    return hardware_kind(node)


def kernel_spec_rows(call: ast.Call, loop_bindings: dict[str, list[ast.expr]]) -> list[OpRow]:
    """Rows of an OpSlot-generation ``KernelSpec(...)`` call; ``loop_bindings`` maps loop variables bound
    together (same tuple position) to their values, zipped."""
    width = max((len(v) for v in loop_bindings.values()), default=1)
    out: list[OpRow] = []
    for i in range(width):
        env = {name: values[i] for name, values in loop_bindings.items() if i < len(values)}
        row = kernel_spec_row(call, env)
        if row is not None:
            out.append(row)
    return out


def detect_generation(root: Path) -> Generation | None:
    """The dispatch generation of the tree at ``root`` (OpSlot, VeomniOp or VeomniKernel), or None."""
    return _detect_generation(root)


def load_project(paths: list[str], settings: Settings | None = None) -> Project:
    """The project index of the VeOmni tree holding ``paths`` (or, outside any tree, of the model packages
    found under them, with the built-in profile). ``settings.target_api`` overrides the generation."""
    target_api = settings.target_api if settings is not None else "auto"
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
        generation = None if target_api == "auto" else Generation(target_api)
        return Project(
            model_packages=tuple(sorted(packages)),
            generation=generation,
            profile=builtin_profile(target_api),
            veomni_available=veomni_installed(),
        )
    listing = scanstore.list_tree(root)  # the one walk of the tree's files, shared by the scans below
    registered, slots, sources = read_registry(root, listing)
    packages_found = tuple(sorted(find_model_packages(root / "veomni")))
    profile = detect_profile(
        root, target_api, rows=registered or slots, packages=packages_found, listing=listing
    )
    return Project(
        root=str(root),
        # the API the code may use: the profile's, when the tree has it; else what the tree has (a forced
        # target-api the tree lacks changes the names in messages, never what fixes may import)
        generation=profile.generation if profile.has_handle else profile.detected,
        registered=registered,
        slot_rows=slots,
        model_packages=packages_found,
        row_sources=sources,
        profile=profile,
        npu_selections=read_npu_selections(packages_found, root),
        npu_remaps=read_npu_remaps(packages_found, root),
        import_sites=scan_sites(root, listing.select(IMPORT_SCAN_SKIP)),
        required_packages=required(root),
        tree_files=tuple(str(path) for path, _parts in listing.files),
    )


def veomni_installed() -> bool:
    """Whether a ``veomni`` package can be imported here (found by the import system, never imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("veomni") is not None
    except (ImportError, ValueError):
        return False
