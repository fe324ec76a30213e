"""NPU308 gpu-import-on-npu-path."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from npu_lint.core.astutil import (
    absolute_module,
    dotted_name,
    keyword_arg,
    last_name,
    literal_import,
    nodes_of,
    str_value,
)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.vendor._shared import in_model_scope
from npu_lint.veomni.backends import CUDA, name_backend
from npu_lint.veomni.catalog import NPU
from npu_lint.veomni.optional import (
    GUARDED,
    LAZY,
    import_sites,
    loaded_elsewhere,
    optional_extra,
    optional_in_tree,
    third_party,
)
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.registry import npu_file
from npu_lint.veomni.resolution import MARKERS, file_bindings, gpu_marker, module_of, names_npu
from npu_lint.veomni.vendor_map import GPU_ATTENTION, GPU_KERNEL, NPU_VENDOR, VENDOR_PACKAGES

_BRANCH_WORDS = ("use_non_eager_impl", "is_bound", "bound_kernel", "impl", "available", "cuda", "CUDA")
_GUARD_WORDS = ("available", "TYPE_CHECKING", "is_cuda", "IS_CUDA", "version")


_NPU_WORDS = ("npu", "ascend", "ascendc")
_NPU_PREDICATES = ("is_torch_npu_available", "is_npu_available", "IS_NPU_AVAILABLE")


def _gpu_package(module: str | None) -> str | None:
    if not module:
        return None
    top = module.split(".", 1)[0]
    return top if VENDOR_PACKAGES.get(top) in (GPU_KERNEL, GPU_ATTENTION) else None


def _npu_named(module: str) -> bool:
    """A VeOmni module named for the NPU: ``npu``/``ascend`` is a word of one of its components
    (``ops.kernels.rotary.npu``, ``lora.ops.npu_moe_group_gemm``, ``gated_delta_rule._ascend.x``)."""
    return any(w in re.split(r"[^a-z0-9]+", part.lower()) for part in module.split(".") for w in _NPU_WORDS)


def _npu_test(test: ast.expr) -> bool:
    """A branch test true only on the NPU path: a name compared equal to (or found among) NPU implementation
    names (``kernel == "npu"``, ``impl in ("npu", "fused_npu")``), an NPU availability predicate, or a
    conjunction with one of them."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_npu_test(v) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(op, ast.Eq):
            return names_npu(str_value(left)) or names_npu(str_value(right))
        if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
            return all(names_npu(str_value(e)) for e in right.elts)
        return False
    node = test.func if isinstance(test, ast.Call) else test
    name = last_name(node) or ""
    return name in _NPU_PREDICATES


def _unguarded_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs when it loads: top level and plain ``if`` blocks, not under a
    ``try`` (an ImportError fallback) nor an availability / ``TYPE_CHECKING`` test."""
    out: list[ast.Import | ast.ImportFrom] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif isinstance(stmt, ast.If) and not any(w in ast.unparse(stmt.test) for w in _GUARD_WORDS):
            out.extend(_unguarded_imports(stmt.body))
            out.extend(_unguarded_imports(stmt.orelse))
    return out


def _guard_test(test: ast.expr) -> bool:
    """A test that selects a host or backend: an availability probe, a device test, ``TYPE_CHECKING``, a
    version test (any case: ``IS_NPU_AVAILABLE``, ``is_torch_npu_available()``)."""
    text = ast.unparse(test).lower()
    return any(w in text for w in ("available", "type_checking", "cuda", "npu", "version", "device"))


def _top_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs whenever it loads: top level and plain ``if`` blocks, not under a
    ``try`` nor a host or backend test (``_guard_test``)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif isinstance(stmt, ast.If) and not _guard_test(stmt.test):
            out.extend(_top_imports(stmt.body))
            out.extend(_top_imports(stmt.orelse))
    return out


def _deferred_modules(files: tuple[str, ...]) -> frozenset[str]:
    """The tree modules some module imports on demand: inside a function, or under a host/backend guard or a
    ``try`` (``from .group_gemm import ...`` inside ``ops/kernels/moe``'s factory). The tree treats such a module
    as backend-selected code, whatever it imports. Reads every file: asked once per project."""
    out: set[str] = set()
    for file in files:
        parsed = load_file(file)
        tree = parsed.tree if parsed is not None else None
        if tree is None:
            continue
        module, is_package = module_of(file)
        eager = {id(stmt) for stmt in _top_imports(tree.body)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in eager and node.level:
                base = absolute_module(module, is_package, node.level, node.module)
                if base:
                    out.add(base)
                    out.update(f"{base}.{a.name}" for a in node.names)
            elif (
                isinstance(node, ast.ImportFrom)
                and id(node) not in eager
                and (node.module or "").startswith("veomni.")
            ):
                out.add(node.module or "")
                out.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(out)


# a top-level module named for CUDA: a compiled CUDA extension (apex's ``fused_layer_norm_cuda``, ``amp_C`` aside)
_CUDA_EXTENSION = re.compile(r"(^|_)cuda($|_)")

# (id of the enclosing statement list, index in it, the statement): one step from a function body down to a statement
_Step = tuple[int, int, ast.stmt]


def _statement_paths(body: list[ast.stmt]) -> dict[int, list[_Step]]:
    """Every statement of a function (outside nested functions and classes), keyed by id, with its path: the
    (statement list, index, statement) steps from the function body down to it. Statements only."""
    out: dict[int, list[_Step]] = {}

    def visit(block: list[ast.stmt], prefix: list[_Step]) -> None:
        for i, stmt in enumerate(block):
            path = [*prefix, (id(block), i, stmt)]
            out[id(stmt)] = path
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner, path)
            for handler in getattr(stmt, "handlers", ()):
                visit(handler.body, path)
            for case in getattr(stmt, "cases", ()):
                visit(case.body, path)

    visit(body, [])
    return out


def paths_of(paths: dict[int, list[_Step]], node: ast.AST) -> list[_Step] | None:
    """The path of ``node``'s innermost statement (an import statement itself; a call: the simple statement whose
    lines hold it), or None when the node is not in the function."""
    if id(node) in paths:
        return paths[id(node)]
    line = getattr(node, "lineno", None)
    if line is None:
        return None
    best = None
    for path in paths.values():
        stmt = path[-1][2]
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno) and (
            best is None or len(path) > len(best)
        ):
            best = path
    if best is not None and isinstance(best[-1][2], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None  # in a nested scope: its own function's
    return best


def _guards(step: _Step) -> bool:
    """A statement on the way to a load that guards it: a ``try`` (an ImportError fallback), a host, availability or
    backend test (``if IS_CUDA_AVAILABLE:``, ``if impl == "apex":``)."""
    stmt = step[2]
    if isinstance(stmt, ast.Try):
        return True
    return isinstance(stmt, (ast.If, ast.While)) and _choice_test(stmt.test)


_CHOICE_NAMES = ("available", "type_checking", "version", "impl", "backend", "kernel", "is_cuda", "is_npu")


def _choice_test(test: ast.expr) -> bool:
    """A test that selects a host, a package's presence or a backend: a device test (``IS_CUDA_AVAILABLE``,
    ``x.is_cuda``, ``device.type == "npu"``), an availability or version probe, ``TYPE_CHECKING``, a name of an
    implementation or backend choice (``use_non_eager_impl``, ``self.backend``), or a comparison with a string
    (``norm_type == "layernorm"``: a mode only some hosts run). A cache test (``if _ext is None:``) is none."""
    if _device_side(test) is not None:
        return True
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and any(
            str_value(c) is not None for c in (node.left, *node.comparators)
        ):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = (last_name(node) or "").lower()
            if any(w in name for w in _CHOICE_NAMES):
                return True
    return False


def _guards_line(path: list[_Step]) -> bool:
    """The load's own statement is a guard around it (``x = mod if IS_CUDA_AVAILABLE else None`` is not read)."""
    stmt = path[-1][2]
    return isinstance(stmt, (ast.If, ast.While, ast.Try))


def _runs_before(load: list[tuple[int, int]], switch: list[tuple[int, int]]) -> int:
    """Where the statement at ``load`` comes before the statement at ``switch`` in a statement list enclosing both
    (at their first difference, the same list, the load first): the index of that step in the paths, else -1."""
    for k, ((lb, li), (sb, si)) in enumerate(zip(load, switch)):
        if (lb, li) == (sb, si):
            continue
        return k if lb == sb and li < si else -1
    return -1


def _uncalled_probe(test: ast.expr) -> bool:
    """An availability function named but not called (``is_torch_npu_available``, ``utils.is_liger_available``):
    lower case ``is_..._available``, the spelling of a function, not of a flag such as ``IS_NPU_AVAILABLE``."""
    name = last_name(test) if isinstance(test, (ast.Name, ast.Attribute)) else None
    return bool(name) and name.startswith("is_") and name.endswith("_available") and name.islower()


def _device_side(test: ast.expr) -> bool | None:
    """Whether a device test holds on Ascend hosts (True: ``IS_NPU_AVAILABLE``, ``device == "npu"``), on the
    others (False: ``not IS_NPU_AVAILABLE``, ``device != "npu"``, ``IS_CUDA_AVAILABLE``,
    ``torch.cuda.is_available()``), or None when it is no device test (a conjunction or disjunction is not read)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _device_side(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(right, ast.Constant) and isinstance(right.value, bool):
            inner = _device_side(left)
            if inner is None or not isinstance(op, (ast.Is, ast.Eq, ast.IsNot, ast.NotEq)):
                return None
            same = isinstance(op, (ast.Is, ast.Eq)) == right.value
            return inner if same else not inner
        words = [str_value(left), str_value(right)]
        if isinstance(op, (ast.Eq, ast.NotEq)) and any(w in ("npu", "cuda") for w in words):
            on_npu = "npu" in words
            return on_npu if isinstance(op, ast.Eq) else not on_npu
        return None
    if _npu_test(test):
        return True
    node = test.func if isinstance(test, ast.Call) else test
    name = (dotted_name(node) or "").lower()
    if "cuda" in name and "available" in name:
        return False
    return None


def _importers(files: tuple[str, ...], module: str) -> tuple[bool, bool]:
    """(eager, on demand): whether some module of the tree imports ``module`` when it loads (top level, not under
    a host/backend test or a ``try``: ``from ..utils.helper import x``, ``from veomni.utils import helper``), and
    whether some imports it otherwise (inside a function, under a test or a ``try``). Only the files whose text
    names the module's last component are parsed."""
    last = module.rsplit(".", 1)[-1]
    eager = lazy = False
    for file in files:
        if not file.endswith(".py"):
            continue
        parsed = load_file(file)
        if parsed is None or last not in parsed.text:
            continue
        tree = parsed.tree
        if tree is None:
            continue
        importer, is_package = module_of(file)
        if importer == module:
            continue
        top = {id(stmt) for stmt in _top_imports(tree.body)}
        for stmt in nodes_of(tree, ast.Import, ast.ImportFrom):
            if isinstance(stmt, ast.Import):
                hit = any(a.name == module for a in stmt.names)
            else:
                assert isinstance(stmt, ast.ImportFrom)
                base = (
                    absolute_module(importer, is_package, stmt.level, stmt.module)
                    if stmt.level
                    else stmt.module
                )
                hit = base == module or bool(base and any(f"{base}.{a.name}" == module for a in stmt.names))
            if hit and id(stmt) in top:
                eager = True
            elif hit:
                lazy = True
        if eager:
            break
    return eager, lazy


def _package_loader(path: str, module: str) -> str | None:
    """The enclosing package whose ``__init__`` (nearest first, up to the top package) that imports ``module`` at its
    top, unguarded (``from .moe_layer import x``, ``from .full import npu``, ``from . import moe_layer``)."""
    here = Path(path).parent
    package = module.rsplit(".", 1)[0]
    while package:
        init = here / "__init__.py"
        parsed = load_file(str(init)) if init.is_file() else None
        if parsed is not None and parsed.tree is not None:
            for stmt in _top_imports(parsed.tree.body):
                if isinstance(stmt, ast.Import):
                    names = [a.name for a in stmt.names]
                else:
                    base = absolute_module(package, True, stmt.level, stmt.module)
                    names = [base, *(f"{base}.{a.name}" for a in stmt.names)] if base else []
                if module in names:
                    return package
        if "." not in package:
            return None
        package = package.rsplit(".", 1)[0]
        here = here.parent
    return None


class GpuImportOnNpuPath(Rule):
    code = "NPU308"
    name = "gpu-import-on-npu-path"
    summary = (
        "A registration module imports GPU-only kernel code when it loads (a GPU vendor package, or a tree "
        "module that imports one at its top), or code that runs only on Ascend (an NPU spec or generated file, "
        "an NPU kernel module, an NPU branch, an NPU row's factory) imports GPU-only kernel code; or a module its "
        "package's `__init__` loads on every host (or any module named for no device) imports `torch_npu` or GPU "
        "kernel code when it loads; or a function that switches on the device loads one side's vendor code (a "
        "CUDA extension, a GPU package, `torch_npu`) on its way to the switch, unguarded."
    )
    why = (
        "Registration modules (`KernelSpec`, `register_op`, `OpSpec` tables and the kernel packages' "
        "`__init__`) are imported on every host to register their rows before any backend is chosen; that is "
        "why their GPU kernels are imported lazily, inside the factory or wrapper that the selected backend "
        "runs. A module-level import of `fla`, `liger_kernel`, `quack`, `tilelang`... -- written directly, or "
        "through a module of the tree that imports one at its top -- makes importing the registry fail on an "
        "Ascend host, which has none of them, before the NPU rows can be chosen. The same holds for code that "
        "only runs on NPU (an NPU patch spec, a generated `_npu` modeling file): a GPU vendor import there, "
        "even inside a function, is reached on Ascend only. So is every import of an NPU kernel module (a "
        "module named for the NPU: `ops/kernels/rotary/npu.py`, `lora/ops/npu_moe_group_gemm.py`, `_ascend/`), "
        'of a branch taken only on NPU (`if kernel == "npu":`, `if is_torch_npu_available():`) and of the '
        'factory of an NPU row (`KernelSpec(name="npu", factory=f)`): there a GPU vendor package, or a tree '
        "module not named for the NPU that imports one (Triton included: the Ascend Triton kernels live in "
        "NPU-named modules) is reported at the import, the line to change. A bare `import triton` in NPU code "
        "is left alone (Ascend carries triton-ascend). The rule reads the imported tree modules' top-level "
        "imports statically (a few levels), and leaves imports under `try`, availability or `TYPE_CHECKING` "
        "tests alone. "
        "Beyond registration modules, a module that an enclosing package's `__init__` imports at its top "
        "(`from .moe_layer import ...` in `distributed/moe/__init__.py`, `from .full import npu` in a rope "
        "registry) is imported on every host that uses the package, before any device is chosen: it must not "
        "import `torch_npu` (or another NPU vendor package) when it loads, nor a GPU vendor package other than "
        "bare `triton`, nor a tree module not named for the NPU that imports such a package when it loads (what "
        "the module itself would be reported for: a kernel module's bare `triton` is not) -- unless under the tree's own guard (`if not is_torch_npu_available():`, "
        "`if IS_NPU_AVAILABLE:`, `try: ... except ImportError`). Packages named for a device are loaded only "
        "on its path and are left alone. "
        "A package the tree treats as optional (`veomni/optional.py`: the file guards its import with `try: ... "
        "except ImportError` or an availability test, or, for a registration module, every other module imports "
        "it lazily; no other module imports it when it loads and the pyproject does not require it) imported "
        "again at the top of the module makes that module fail to import wherever the package is missing; so "
        "does a top-level import of a package the same file also imports lazily (inside a function) when the "
        "pyproject lists it only as an optional extra (`torchcodec`, `librosa`) or the rest of the tree imports it "
        "only lazily. "
        "Any module named for no device (`veomni/utils/helper.py`, a data collator, a trainer, a package "
        "`__init__`) is device-neutral: importing `torch_npu` when it loads, unguarded, breaks every GPU or CPU "
        "host that imports it, unless the tree imports that module only on demand (inside a function, under a "
        "device or availability test). An NPU vendor package imported on the other side of a device test (`if "
        'not IS_NPU_AVAILABLE:`, `device != "npu"`, a CUDA test, the `else` of `if IS_NPU_AVAILABLE:`), in any '
        "module, runs exactly on the hosts that lack it. "
        "Likewise inside a function that switches on the device (`if IS_CUDA_AVAILABLE: <CUDA kernel> else: "
        "<torch_npu kernel>`, or a CUDA side that returns early): a load of one side's vendor code that runs on "
        "the way to the switch -- before it, in a statement list enclosing it, not under a device, availability, "
        "backend or mode test nor in a `try` (a cache test such as `if _ext is None:` guards nothing) -- runs on "
        "every host that calls the function. A GPU package or a compiled CUDA extension (a top-level module "
        'named for CUDA, as apex\'s `importlib.import_module("fused_layer_norm_cuda")`) loaded there fails on '
        "Ascend before the NPU branch is reached; `torch_npu` loaded there fails on every other host before "
        "theirs. A vendor package imported by a statement in model code is NPU301's."
    )
    bad = (
        Example(
            """
            from cutile_kernels.norm import fused_norm  # noqa: F401
            from flash_attn.ops.layer_norm import dropout_add_layer_norm

            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
            title="a GPU vendor package imported when the registration module loads",
        ),
        Example(
            """
            def toy_attention_forward_npu(self, hidden_states):
                from liger_kernel.transformers.rope import liger_rotary_pos_emb as apply_rope_npu

                return apply_rope_npu(hidden_states, hidden_states, self.cos, self.sin)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an NPU spec importing Liger under an NPU name",
        ),
        Example(
            """
            import torch_npu
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction


            def layer_norm_forward_npu(self, hidden_states):
                if hidden_states.numel() == 0:
                    return LigerLayerNormFunction.apply(hidden_states, self.weight, self.bias, self.eps)
                return torch_npu.npu_layer_norm_eval(hidden_states, self.weight.shape, self.weight, self.bias)
            """,
            path="veomni/ops/kernels/layer_norm/npu.py",
            title="an NPU kernel module importing a GPU vendor package",
        ),
        Example(
            """
            def bind_toy_scan(scan_kernel: str) -> None:
                global _scan
                if scan_kernel == "npu_fused":
                    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn as npu_scan

                    _scan = npu_scan
                else:
                    _scan = None
            """,
            path="veomni/ops/kernels/scan/__init__.py",
            title="the NPU branch of a binder importing a GPU kernel",
        ),
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _npu_short_conv_factory():
                from fla.modules import ShortConvolution

                return ShortConvolution


            KERNEL_REGISTRY.register(
                KernelSpec(
                    name="npu",
                    op_name="short_conv",
                    variant="standard",
                    factory=_npu_short_conv_factory,
                    hardware=HardwareRequirement(device_type="npu"),
                )
            )
            """,
            path="veomni/ops/kernels/short_conv/__init__.py",
            title="an NPU row's factory importing a GPU vendor package",
        ),
        Example(
            """
            import torch
            from newton_kernels import NewtonSolver


            def solve(grad: torch.Tensor) -> torch.Tensor:
                try:
                    from newton_kernels import NewtonSolver
                except ImportError:
                    return grad
                return NewtonSolver()(grad)
            """,
            path="veomni/optim/newton.py",
            title="an optional package the file guards, also imported when the module loads",
        ),
        Example(
            """
            import torch
            import torch_npu


            def get_profiler(enabled: bool):
                return torch_npu.profiler.profile() if enabled else None
            """,
            path="veomni/utils/toy_helper.py",
            title="torch_npu imported when a device-neutral module loads",
        ),
        Example(
            """
            import importlib

            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE

            if IS_NPU_AVAILABLE:
                import torch_npu

            _norm_ext = None


            def toy_qk_rms_norm(q, weight, eps):
                global _norm_ext
                if _norm_ext is None:
                    _norm_ext = importlib.import_module("fused_layer_norm_cuda")
                if IS_CUDA_AVAILABLE:
                    return _norm_ext.rms_forward_affine(q, q.shape[-1:], weight, eps)[0]
                return torch_npu.npu_rms_norm(q, weight, eps)[0]
            """,
            path="veomni/distributed/sequence_parallel/toy_norm.py",
            title="a CUDA extension loaded on the way to the device switch",
        ),
    )
    good = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
            from ...utils.import_utils import is_package_available

            if is_package_available("flash_attn"):
                from flash_attn.ops.layer_norm import dropout_add_layer_norm  # noqa: F401


            def _gpu_factory():
                from flash_attn.ops.layer_norm import dropout_add_layer_norm

                return dropout_add_layer_norm
            """,
            path="veomni/ops/kernels/layer_norm/__init__.py",
        ),
        Example(
            """
            import torch_npu
            import triton
            import triton.language as tl


            @triton.jit
            def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
                pass


            def scale_forward_npu(x):
                if x.is_cuda:
                    from liger_kernel.ops.utils import ensure_contiguous  # noqa: F401
                return torch_npu.npu_format_cast(x, 2)
            """,
            path="veomni/ops/kernels/scale/npu.py",
        ),
        Example(
            """
            def bind_toy_scan(scan_kernel: str) -> None:
                global _scan
                if scan_kernel == "npu":
                    from .npu_scan import npu_scan_fn

                    _scan = npu_scan_fn
                elif scan_kernel == "cuda":
                    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

                    _scan = selective_scan_fn
            """,
            path="veomni/ops/kernels/scan/__init__.py",
        ),
        Example(
            """
            import torch


            def solve(grad: torch.Tensor) -> torch.Tensor:
                try:
                    from newton_kernels import NewtonSolver
                except ImportError:
                    return grad
                return NewtonSolver()(grad)
            """,
            path="veomni/optim/newton.py",
        ),
        Example(
            """
            import importlib

            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE

            if IS_NPU_AVAILABLE:
                import torch_npu

            _norm_ext = None


            def toy_qk_rms_norm(q, weight, eps):
                global _norm_ext
                if IS_CUDA_AVAILABLE:
                    if _norm_ext is None:
                        _norm_ext = importlib.import_module("fused_layer_norm_cuda")
                    return _norm_ext.rms_forward_affine(q, q.shape[-1:], weight, eps)[0]
                return torch_npu.npu_rms_norm(q, weight, eps)[0]
            """,
            path="veomni/distributed/sequence_parallel/toy_norm.py",
        ),
    )
    fix_safety = "No fix: moving the import into the backend's factory is a refactor left to the author."
    requires = ("import",)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        path = self.ctx.source.path
        norm = "/" + path.replace("\\", "/").lstrip("/")
        self._hoisted: set[int] = set()
        if "/veomni/" in norm and ("npu" in self.ctx.source.text or "_available" in self.ctx.source.text):
            self._npu_import_off_npu()
        if "/veomni/" in norm and "def " in self.ctx.source.text:
            self._load_before_device_branch()
        if npu_file(Path(path)):
            self._npu_code()
            return
        text = self.ctx.source.text
        registry = any(m in text for m in MARKERS) or (
            norm.endswith("/__init__.py") and ("/veomni/ops/kernels/" in norm or "/veomni/kernels/" in norm)
        )
        if registry:
            self._registry()
        elif "/veomni/" in norm and not norm.endswith("/__init__.py"):
            self._loaded_by_registry(path)
        if "/veomni/" in norm:
            self._loaded_by_package(path, registry)
        if "/veomni/" in norm:
            self._optional_hoisted(registry)
            if "import_module" in text or "__import__" in text:
                self._dynamic_hoisted()
        if "/veomni/" not in norm or not ("npu" in text.lower() or "npu" in norm or "ascend" in norm):
            return
        module, is_package = module_of(path)
        self._seen: set[int] = set()
        if not is_package and _npu_named(module):
            self._npu_only(self.ctx.tree.body, module, is_package, f"this NPU kernel module (`{module}`)")
            return
        for node in nodes_of(self.ctx.tree, ast.If):
            assert isinstance(node, ast.If)
            if _npu_test(node.test):
                self._npu_only(
                    node.body, module, is_package, f"the branch at line {node.lineno} (taken on NPU)"
                )
        if registry:
            self._npu_factories(module, is_package)

    def _npu_code(self) -> None:
        # the file's GPU imports first (a GPU vendor package, a tree module that is GPU code, also through
        # ``config.add_import("veomni....")``), in walk order; most NPU files have none, and then the backend
        # guards (a walk of the whole tree, each branch test unparsed) are not looked for
        root = self.ctx.project.root
        verdicts: dict[str, str | None] = {}
        found: list[tuple[ast.AST, str, str]] = []  # (the import, the module, why it is GPU-only)
        for node in nodes_of(self.ctx.tree, ast.Import, ast.ImportFrom, ast.Call):
            if isinstance(node, ast.ImportFrom):
                if node.level != 0:
                    continue
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_import"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value.startswith("veomni.")  # a vendor package there is NPU301's
            ):
                names = [
                    node.args[0].value
                ]  # ``config.add_import("module", ...)``: emitted into the generated file
            else:
                continue
            for name in names:
                if name not in verdicts:
                    top = _gpu_package(name)
                    verdicts[name] = (
                        f"`{top}`"
                        if top is not None
                        else self._gpu_code(str(root) if root else None, name)
                        if name.startswith("veomni.")
                        else None
                    )
                why = verdicts[name]
                if why is not None:
                    found.append((node, name, why))
                    break
        if not found:
            return
        guarded: set[int] = set()
        for node in nodes_of(self.ctx.tree, ast.If, ast.Try):
            # a backend branch (a dispatch guard, an availability or implementation-name test) or an ImportError
            # fallback: the import runs only where its backend was chosen
            if isinstance(node, ast.If) and any(w in ast.unparse(node.test) for w in _BRANCH_WORDS):
                guarded.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
            elif isinstance(node, ast.Try):
                guarded.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
        for node, name, why in found:
            if id(node) in guarded:
                continue
            self.report(
                node,
                f"`{name}` is GPU-only ({why}) but this file runs only on Ascend (an NPU patch spec or "
                "generated `_npu` file): the import fails there, or binds a CUDA kernel to NPU tensors; "
                "use the op's NPU kernel",
            )

    def _loaded_by_registry(self, path: str) -> None:
        """A module that its package's registration ``__init__`` imports when it loads (``from . import flash``)
        and that itself imports a GPU vendor package at its top: the import to make lazy is this one."""
        hits = [
            (stmt, top)
            for stmt in _unguarded_imports(self.ctx.tree.body)
            for name in (
                [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            )
            if not (isinstance(stmt, ast.ImportFrom) and stmt.level)
            for top in [_gpu_package(name)]
            if top is not None and top != "triton"
        ]
        if not hits:
            return
        init = str(Path(path).parent / "__init__.py")
        parsed = load_file(init)
        tree = parsed.tree if parsed is not None else None
        if tree is None:
            return
        init_norm = "/" + init.replace("\\", "/").lstrip("/")
        if not (
            any(m in parsed.text for m in MARKERS)
            or "/veomni/ops/kernels/" in init_norm
            or "/veomni/kernels/" in init_norm
        ):
            return
        module, _is_package = module_of(path)
        package, _ = module_of(init)
        loaded = False
        for stmt in _unguarded_imports(tree.body):
            if not isinstance(stmt, ast.ImportFrom):
                continue
            base = absolute_module(package, True, stmt.level, stmt.module)
            if base == module or (
                base == package and any(a.name == module.rsplit(".", 1)[-1] for a in stmt.names)
            ):
                loaded = True
                break
        if not loaded:
            return
        for stmt, top in hits:
            self._hoisted.add(id(stmt))
            self.report(
                stmt,
                f"this module imports `{top}` (GPU-only) when it loads, and the registration package `{package}` "
                "imports it at its top: importing the registry fails on Ascend before any backend is chosen; "
                "import it inside the function that uses it",
            )

    def _loaded_by_package(self, path: str, registry: bool) -> None:
        """A module its package loads with it: a package ``__init__`` itself, or a module an enclosing package's
        ``__init__`` imports at its top (``from .moe_layer import ...``, ``from .full import npu``). Such a module
        is imported on every host that uses the package, before any device or backend is chosen, so what it
        imports when it loads must exist on every host: no NPU vendor package (``torch_npu``: GPU hosts have
        none), no GPU vendor package but bare ``triton`` (Ascend carries triton-ascend), and no tree module not
        named for the NPU that imports such a package when it loads (bare ``triton`` is not one, there as here).
        Imports under a ``try``, an availability / device / ``TYPE_CHECKING`` test are guarded."""
        root = self.ctx.project.root
        module, is_package = module_of(path)
        if not module.startswith("veomni"):
            return
        if is_package:
            # a package's own ``__init__``: loaded whenever the package is (GPU packages of registration ones:
            # ``_registry``)
            self._npu_vendor_on_every_host(module)
            return
        package = _package_loader(path, module)
        if package is None:
            self._npu_vendor_on_every_host(module)
            return
        if _npu_named(package) or name_backend(package.rsplit(".", 1)[-1]) == CUDA:
            return  # a package named for a device is loaded only on that device's path
        loader = f"`{package.replace('.', '/')}/__init__.py`"
        for stmt in _top_imports(self.ctx.tree.body):
            if id(stmt) in self._hoisted:
                continue
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                base = absolute_module(module, is_package, stmt.level, stmt.module)
                targets = [base] if base else []
                if base and base.startswith("veomni"):
                    targets += [f"{base}.{a.name}" for a in stmt.names]
            for target in targets:
                top = target.split(".", 1)[0]
                kind = VENDOR_PACKAGES.get(top)
                why = None
                if kind == NPU_VENDOR:
                    why = (
                        f"`{top}` exists only on Ascend hosts: importing the package fails on every GPU or CPU "
                        "host; import it inside the function that runs on NPU"
                    )
                elif kind in (GPU_KERNEL, GPU_ATTENTION):
                    if top != "triton" and not registry:  # registration modules: ``_registry``
                        why = (
                            f"`{top}` is GPU-only: importing the package fails on Ascend, which has none; import "
                            "it inside the function the GPU backend runs"
                        )
                elif target.startswith("veomni.") and root and not registry and not _npu_named(target):
                    # what the module itself would be reported for: a bare ``triton`` is not (triton-ascend),
                    # unless the tree itself imports that kernel code only on demand (a backend's factory)
                    via, gpu = self._through_tree(str(root), target, skip_npu=True, triton=False)
                    if gpu is None:
                        via, gpu = self._through_tree(str(root), target, skip_npu=True)
                        if gpu is not None and not self._deferred_elsewhere(target, via, str(root)):
                            via, gpu = None, None
                    if gpu is not None and not _npu_named(module):
                        how = (
                            f"`{target}` imports `{gpu}`"
                            if via == target
                            else f"through `{via}`, which imports `{gpu}`"
                        )
                        why = (
                            f"that loads GPU-only kernel code ({how} when it loads): on Ascend the import fails or "
                            "binds a CUDA kernel before the NPU path is chosen; import it only where the GPU "
                            "backend is selected (`if not is_torch_npu_available():`, inside its function)"
                        )
                if why is None:
                    continue
                self._hoisted.add(id(stmt))
                self.report(
                    stmt,
                    f"this module is imported whenever its package is ({loader} loads it at its top), on every "
                    f"host, and it imports `{target}` when it loads: {why}",
                )
                break

    def _npu_import_off_npu(self) -> None:
        """An NPU vendor package imported in the branch of a device test that runs on every host but Ascend:
        under ``if not IS_NPU_AVAILABLE:`` (``not is_torch_npu_available()``, ``device != "npu"``), under a CUDA
        test (``if IS_CUDA_AVAILABLE:``, ``torch.cuda.is_available()``), or in the ``else`` of ``if
        IS_NPU_AVAILABLE:``: the import runs exactly where the package does not exist. The nearest device test
        around the import decides."""
        # id(import) -> (the test, whether the branch runs on NPU)
        branch: dict[int, tuple[ast.If, bool]] = {}
        for node in nodes_of(self.ctx.tree, ast.If):
            assert isinstance(node, ast.If)
            if _uncalled_probe(node.test):
                self._probe_not_called(node)
                continue
            side = _device_side(node.test)
            if side is None:
                continue
            for part, on_npu in ((node.body, side), (node.orelse, not side)):
                for stmt in part:
                    for sub in nodes_of(stmt, ast.Import, ast.ImportFrom):
                        branch[id(sub)] = (node, on_npu)
        if not branch:
            return
        for stmt in nodes_of(self.ctx.tree, ast.Import, ast.ImportFrom):
            hit = branch.get(id(stmt))
            if hit is None or hit[1] or (isinstance(stmt, ast.ImportFrom) and stmt.level):
                continue
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]  # type: ignore[union-attr]
            top = next(
                (n.split(".", 1)[0] for n in names if VENDOR_PACKAGES.get(n.split(".", 1)[0]) == NPU_VENDOR),
                None,
            )
            if top is None:
                continue
            self._hoisted.add(id(stmt))
            self.report(
                stmt,
                f"`{top}` is imported in the branch of `if {ast.unparse(hit[0].test)}:` (line {hit[0].lineno}) that "
                f"runs on every host but Ascend: `{top}` exists only on Ascend hosts, so the import fails exactly "
                "where it runs and never runs where the package is; import it under the NPU side of the test",
            )

    def _load_before_device_branch(self) -> None:
        """A function that switches on the device (``if IS_CUDA_AVAILABLE: <CUDA kernel> else: <torch_npu
        kernel>``) and loads one side's vendor code before the switch, unguarded: a GPU-only package or CUDA
        extension (``importlib.import_module("fused_layer_norm_cuda")``, ``from apex... import``) on the way to the
        branch Ascend takes, or an NPU vendor package on the way to the branch the other hosts take. The load runs
        on every host that reaches the switch, so it fails on exactly the host whose branch does not need it.
        Loads under a host, availability or backend test, or inside a ``try``, are guarded."""
        found: list[tuple[ast.AST, str, bool]] = []  # (the load, its package, whether it is NPU vendor code)
        dynamic = "import_module" in self.ctx.source.text or "__import__" in self.ctx.source.text
        model = self.ctx.source.kind.model_code and in_model_scope(self.ctx)
        for node in nodes_of(
            self.ctx.tree,
            *((ast.Import, ast.ImportFrom, ast.Call) if dynamic else (ast.Import, ast.ImportFrom)),
        ):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module or ""]
            else:
                module = literal_import(node)
                names = [module] if module else []
            for name in names:
                top = name.split(".", 1)[0]
                kind = VENDOR_PACKAGES.get(top)
                if kind is not None and model and not isinstance(node, ast.Call):
                    continue  # a vendor import in model code is NPU301's
                if kind == NPU_VENDOR:
                    found.append((node, top, True))
                elif (kind in (GPU_KERNEL, GPU_ATTENTION) and top != "triton") or (
                    kind is None and _CUDA_EXTENSION.search(top) and third_party(top)
                ):
                    found.append((node, top, False))
                else:
                    continue
                break
        if not found:
            return
        loads = {id(node): (node, top, npu) for node, top, npu in found if id(node) not in self._hoisted}
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            first, last = func.lineno, func.end_lineno or func.lineno  # type: ignore[attr-defined]
            if not any(first < node.lineno <= last for node, _t, _n in loads.values()):  # type: ignore[attr-defined]
                continue
            paths = _statement_paths(func.body)  # type: ignore[attr-defined]
            mine = [(paths_of(paths, node), node, top, npu) for node, top, npu in loads.values()]
            mine = [m for m in mine if m[0] is not None]
            if not mine:
                continue
            branches: list[tuple[list[tuple[int, int]], ast.If, bool]] = []  # (path, switch, side run on NPU)
            for path in paths.values():
                node = path[-1][2]
                if not isinstance(node, ast.If):
                    continue
                side = _device_side(node.test)
                if side is None:
                    continue
                for part, other, on_npu in (
                    (node.body, node.orelse, side),
                    (node.orelse, node.body, not side),
                ):
                    # a side with code, or the code after the switch when the other side leaves early
                    if part or (other and isinstance(other[-1], (ast.Return, ast.Raise))):
                        branches.append(([(b, i) for b, i, _ in path], node, on_npu))
            for path, node, top, npu in mine:
                spots = [(b, i) for b, i, _ in path]
                hit = None
                for bpath, switch, on_npu in branches:
                    split = _runs_before(spots, bpath)
                    # what encloses both encloses the switch too; below it, the load must be unguarded
                    if on_npu != npu and split >= 0 and not any(_guards(step) for step in path[split:-1]):
                        hit = (switch, on_npu)
                        break
                if hit is None or _guards_line(path):
                    continue
                switch, _ = hit
                loads.pop(id(node), None)
                self._hoisted.add(id(node))
                if npu:
                    why = (
                        f"`{top}` exists only on Ascend hosts, and the function runs it on its way to the branch the "
                        "other hosts take: it fails on every GPU or CPU host before that branch is reached; import "
                        "it inside the NPU side of the test"
                    )
                else:
                    what = "a CUDA extension" if VENDOR_PACKAGES.get(top) is None else "GPU-only"
                    why = (
                        f"`{top}` is {what}, and the function loads it on its way to the branch an Ascend host "
                        "takes: there the load fails (no such module) before the NPU kernel is reached; load it "
                        "under the CUDA side of the test (or its own availability guard)"
                    )
                self.report(
                    node,
                    f"this load runs on every host that calls `{func.name}` (it is not under the device test "  # type: ignore[attr-defined]
                    f"`if {ast.unparse(switch.test)}:` at line {switch.lineno}, which it precedes): {why}",
                )

    def _probe_not_called(self, node: ast.If) -> None:
        """``if is_torch_npu_available:`` (the function, not its result) is always true: a vendor package imported
        under it is imported on every host."""
        for stmt in node.body:
            for sub in nodes_of(stmt, ast.Import, ast.ImportFrom):
                if isinstance(sub, ast.ImportFrom) and sub.level:
                    continue
                names = [a.name for a in sub.names] if isinstance(sub, ast.Import) else [sub.module or ""]  # type: ignore[union-attr]
                tops = [n.split(".", 1)[0] for n in names]
                top = next((t for t in tops if VENDOR_PACKAGES.get(t) and t != "triton"), None)
                if top is None:
                    continue
                self._hoisted.add(id(sub))
                self.report(
                    sub,
                    f"`if {ast.unparse(node.test)}:` (line {node.lineno}) tests the function, not its result: a "
                    f"function is always true, so `{top}` is imported on every host, including those that lack it; "
                    f"call it (`{ast.unparse(node.test)}()`)",
                )

    def _npu_vendor_on_every_host(self, module: str) -> None:
        """A module named for no device (``veomni.utils.helper``, ``veomni.data.collator``, a trainer) that imports
        an NPU vendor package (``torch_npu``) when it loads, unguarded: every GPU or CPU host that imports the
        module fails. Left alone: a module named for a device, and one the tree imports only on demand (inside a
        function, under a device or availability test), which runs on the selected device only."""
        if _npu_named(module) or any(name_backend(part) == CUDA for part in module.split(".")):
            return
        if self.ctx.source.kind.model_code and in_model_scope(self.ctx):
            return  # model code: every vendor import there is NPU301's
        hits = []
        for stmt in _top_imports(self.ctx.tree.body):
            if id(stmt) in self._hoisted or (isinstance(stmt, ast.ImportFrom) and stmt.level):
                continue
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            top = next(
                (n.split(".", 1)[0] for n in names if VENDOR_PACKAGES.get(n.split(".", 1)[0]) == NPU_VENDOR),
                None,
            )
            if top is not None:
                hits.append((stmt, top))
        if not hits:
            return
        project = self.ctx.project
        if project.root is not None:
            eager, lazy = project.remember(
                ("NPU308.importers", module), lambda: _importers(project.tree_files, module)
            )
            if lazy and not eager:
                return  # imported only where a backend or device was chosen
        for stmt, top in hits:
            self._hoisted.add(id(stmt))
            self.report(
                stmt,
                f"`{module}` is named for no device and imported on every host, but it imports `{top}` when it "
                f"loads: `{top}` exists only on Ascend hosts, so importing the module fails on every GPU or CPU "
                "host; guard it as the tree does (`if IS_NPU_AVAILABLE:`, `if is_torch_npu_available():`) or "
                "import it inside the function that runs on NPU",
            )

    def _optional_hoisted(self, registry: bool) -> None:
        """A module-level import of a package treated as optional (``veomni.optional``): one this file guards
        elsewhere (under a ``try`` that catches ImportError, or an availability test) and no other module of the
        tree imports when it loads; or, in a registration module, one that no other module of the tree imports
        when it loads while some import it lazily. Packages the pyproject requires are not optional; GPU vendor
        packages in a registration module are ``_registry``'s."""
        root = self.ctx.project.root
        path = self.ctx.source.path
        guarded: dict[str, int] = {}
        lazy: dict[str, int] = {}  # imported inside a function or block: optional if the tree says so too
        for stmt, package, how in import_sites(self.ctx.tree):
            if how == GUARDED:
                guarded.setdefault(package, stmt.lineno)
            elif how == LAZY:
                lazy.setdefault(package, stmt.lineno)
        if not guarded and (root is None or (not registry and not lazy)):
            return
        for stmt in _unguarded_imports(self.ctx.tree.body):
            if id(stmt) in self._hoisted or (isinstance(stmt, ast.ImportFrom) and stmt.level):
                continue
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            for name in names:
                package = name.split(".", 1)[0]
                kind = VENDOR_PACKAGES.get(package)
                if not third_party(package) or kind == NPU_VENDOR:
                    continue
                if package in guarded and (
                    root is None or not loaded_elsewhere(self.ctx.project, package, path)
                ):
                    where = f"this file guards its import at line {guarded[package]}"
                elif (
                    package in lazy
                    and root is not None
                    and not loaded_elsewhere(self.ctx.project, package, path)
                    and (
                        optional_extra(self.ctx.project, package)
                        or optional_in_tree(self.ctx.project, package, path)
                    )
                ):
                    extra = optional_extra(self.ctx.project, package)
                    where = (
                        f"this file imports it lazily at line {lazy[package]}, and the pyproject lists it only as an "
                        "optional extra"
                        if extra
                        else f"this file imports it lazily at line {lazy[package]}, as does the rest of the tree"
                    )
                elif registry and kind is None and root is not None:
                    site = optional_in_tree(self.ctx.project, package, path)
                    if site is None:
                        continue
                    where = f"the tree imports it only lazily, e.g. in {site.path}"
                else:
                    continue
                if root is not None:
                    where += "; no other module of the tree imports it when it loads"
                gpu = kind in (GPU_KERNEL, GPU_ATTENTION) or name_backend(package) == CUDA
                host = (
                    "every host without it (an Ascend host, which cannot install it, included)"
                    if gpu
                    else ("every host without it")
                )
                what = (
                    "the registry is imported on every host before a backend is chosen, so "
                    if registry
                    else ""
                )
                self.report(
                    stmt,
                    f"`{package}` is treated as optional ({where}) but this import runs when the module loads: "
                    f"{what}the module fails to import on {host}; import it inside the function that uses it",
                )
                break

    def _dynamic_hoisted(self) -> None:
        """A module-level dynamic import (``x = importlib.import_module("pkg")``) of a package this file loads
        lazily elsewhere (a dynamic import inside a function, typically behind ``if x is None``, or a guarded
        import): the file's own lazy load says the package is optional, and the module-level one defeats it."""
        top: list[tuple[ast.stmt, str]] = []
        top_calls: set[int] = set()

        def scan(body: list[ast.stmt]) -> None:
            for stmt in body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) and stmt.value is not None:
                    module = literal_import(stmt.value)
                    if module is not None:
                        top.append((stmt, module.split(".", 1)[0]))
                        top_calls.add(id(stmt.value))
                elif isinstance(stmt, ast.If) and not any(w in ast.unparse(stmt.test) for w in _GUARD_WORDS):
                    scan(stmt.body)
                    scan(stmt.orelse)

        scan(self.ctx.tree.body)
        if not top:
            return
        lazy: dict[str, int] = {}
        for stmt, package, how in import_sites(self.ctx.tree):
            if how == GUARDED:
                lazy.setdefault(package, stmt.lineno)
        for call in nodes_of(self.ctx.tree, ast.Call):
            if id(call) in top_calls:
                continue
            module = literal_import(call)
            if module is not None:
                lazy.setdefault(module.split(".", 1)[0], call.lineno)
        for stmt, package in top:
            if package not in lazy or not third_party(package) or VENDOR_PACKAGES.get(package) == NPU_VENDOR:
                continue
            self.report(
                stmt,
                f"`{package}` is loaded when the module loads, but this file loads it lazily at line "
                f"{lazy[package]} (the tree treats it as optional): importing the module now fails on every host "
                "without it (an Ascend host, which cannot build a CUDA extension, included); keep the load inside "
                "the function that uses it",
            )

    def _npu_factories(self, module: str, is_package: bool) -> None:
        """The factories of the file's NPU rows (``KernelSpec(factory=f)`` with an NPU name or requirement): what
        they import runs only when an Ascend host binds the row."""
        functions = {
            n.name: n for n in self.ctx.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for binding in file_bindings(self.ctx.tree, module, is_package):
            if binding.device != NPU or not isinstance(binding.node, ast.Call):
                continue
            factory = keyword_arg(binding.node, "factory")
            func = functions.get(factory.id) if isinstance(factory, ast.Name) else None
            if func is not None:
                where = f"`{func.name}`, the factory of the NPU row `{binding.impl}` of `{binding.op}`"
                self._npu_only(func.body, module, is_package, where)

    def _npu_only(self, body: list[ast.stmt], module: str, is_package: bool, where: str) -> None:
        """Imports in code that runs only on Ascend (an NPU kernel module, an NPU branch, an NPU row's
        factory) of GPU-only kernel code: a GPU vendor package (bare ``triton`` excepted: Ascend carries
        triton-ascend), or a tree module not named for the NPU that is a GPU kernel module by name or imports
        a GPU vendor package (``triton`` included) when it loads."""
        guarded: set[int] = set()
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Try):
                    guarded.update(id(sub) for part in node.body for sub in ast.walk(part))
                elif isinstance(node, ast.If) and any(w in ast.unparse(node.test) for w in _GUARD_WORDS):
                    guarded.update(id(sub) for part in node.body for sub in ast.walk(part))
        root = self.ctx.project.root
        for stmt in body:
            for node in ast.walk(stmt):
                if id(node) in guarded or id(node) in self._seen:
                    continue
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = absolute_module(module, is_package, node.level, node.module)
                    targets = [base] if base else []
                    if base and base.startswith("veomni"):
                        targets += [f"{base}.{a.name}" for a in node.names]
                else:
                    continue
                for target in targets:
                    why = self._gpu_code(str(root) if root else None, target)
                    if why is None:
                        continue
                    self._seen.add(id(node))
                    self.report(
                        node,
                        f"`{target}` is GPU-only ({why}) but {where} runs only on Ascend, which has no such "
                        "kernel: the import fails there, or runs a CUDA kernel on NPU tensors; use the op's NPU "
                        "kernel",
                    )
                    break

    @staticmethod
    def _gpu_code(root: str | None, target: str) -> str | None:
        top = _gpu_package(target)
        if top is not None:
            return None if top == "triton" else f"the GPU kernel package `{top}`"
        if not target.startswith("veomni.") or _npu_named(target):
            return None
        marker = gpu_marker(target)
        if marker is not None:
            return marker
        if root is None:
            return None
        via, top = GpuImportOnNpuPath._through_tree(root, target, skip_npu=True)
        if top is None:
            return None
        return (
            f"it imports `{top}` when it loads"
            if via == target
            else f"through `{via}`, which imports `{top}`"
        )

    def _registry(self) -> None:
        module, is_package = module_of(self.ctx.source.path)
        root = self.ctx.project.root
        for stmt in _unguarded_imports(self.ctx.tree.body):
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                base = absolute_module(module, is_package, stmt.level, stmt.module)
                targets = [base] if base else []
                if base and stmt.level:
                    targets += [f"{base}.{a.name}" for a in stmt.names]
            for target in targets:
                top = _gpu_package(target)
                via = None
                if top is None and root:
                    via, top = self._through_tree(str(root), target)
                if top is None:
                    continue
                how = f"through `{via}`, which imports `{top}` when it loads" if via else f"`{top}`"
                self._hoisted.add(id(stmt))
                self.report(
                    stmt,
                    f"this registration module imports GPU-only kernel code when it loads ({how}): the registry "
                    "is imported on every host before a backend is chosen, so on Ascend (no such package) the "
                    "import fails before the NPU rows can be selected; import it inside the backend's factory",
                )
                break

    def _deferred_elsewhere(self, target: str, via: str | None, root: str) -> bool:
        """Whether the tree imports the kernel code ``target`` reaches (``target`` itself, or ``via``, the module
        that imports the vendor package, or a module importing ``via`` at its top) only on demand elsewhere."""
        project = self.ctx.project
        deferred = project.remember("NPU308.deferred", lambda: _deferred_modules(project.tree_files))
        if target in deferred or (via is not None and via in deferred):
            return True
        if via is None:
            return False
        for importer in deferred:  # a deferred module whose top imports load ``via``
            if not importer.startswith("veomni."):
                continue
            base = Path(root, *importer.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if not candidate.is_file():
                    continue
                parsed = load_file(str(candidate))
                if parsed is None or parsed.tree is None:
                    break
                is_package = candidate.name == "__init__.py"
                for stmt in _top_imports(parsed.tree.body):
                    if isinstance(stmt, ast.ImportFrom):
                        base_mod = absolute_module(importer, is_package, stmt.level, stmt.module)
                        if base_mod == via or any(f"{base_mod}.{a.name}" == via for a in stmt.names):
                            return True
                break
        return False

    @staticmethod
    def _through_tree(
        root: str, module: str, depth: int = 3, skip_npu: bool = False, triton: bool = True
    ) -> tuple[str | None, str | None]:
        """A tree module (``veomni.ops.kernels.x.quack_gemm``) that imports a GPU vendor package when it loads,
        itself or through the tree modules it imports at its top (a few levels). ``skip_npu``: modules named for
        the NPU are not followed (their Triton is triton-ascend). ``triton=False``: a bare ``triton`` import
        does not count (the callers that do not report it in the module itself: Ascend has triton-ascend)."""
        parts = module.split(".")
        if parts[0] != "veomni" or depth <= 0 or (skip_npu and _npu_named(module)):
            return None, None
        base = Path(root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if not candidate.is_file():
                continue
            parsed = load_file(str(candidate))  # the run's one store of parsed files
            tree = parsed.tree if parsed is not None else None
            if tree is None:
                return None, None
            is_package = candidate.name == "__init__.py"
            inner: list[str] = []
            for stmt in _unguarded_imports(tree.body):
                if isinstance(stmt, ast.Import):
                    names = [a.name for a in stmt.names]
                else:
                    resolved = absolute_module(module, is_package, stmt.level, stmt.module)
                    names = [resolved] if resolved else []
                for name in names:
                    top = _gpu_package(name)
                    if top is not None and (triton or top != "triton"):
                        return module, top
                    if name.startswith("veomni.") and not is_package:
                        inner.append(name)
            for name in inner:
                _via, top = GpuImportOnNpuPath._through_tree(root, name, depth - 1, skip_npu, triton)
                if top is not None:
                    return module, top
            return None, None
        return None, None
