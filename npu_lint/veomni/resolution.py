"""What an implementation row of a VeOmni tree binds: the static resolution model of its dispatch tables.

A tree says, per op, which callable an implementation name binds, in several forms:

* ``KernelSpec(name=, op_name=, variant=, factory=F, hardware=...)`` (OpSlot generation): ``F`` is a zero-argument
  function of the module; the callable is what ``F`` returns (an imported function, a module attribute, or an
  adapter called on one);
* ``BackendSpec(entry="module:attr", entry_is_factory=...)`` in an ``OpSpec(backends={name: ...})`` table or a
  model's ``extra_backends={op: {name: ...}}`` (the ops-config generation; a factory entry of the same module is
  read like a ``KernelSpec`` factory);
* ``register_op(op, variant, impl, forward, backward, wrapper=..., requirement=...)`` (VeomniOp generation): the
  callable is the forward / wrapper, usually ``<imported module>.forward``.

:func:`file_bindings` reads every row of one module into :class:`Binding` (op, variant or patched target,
implementation name, the device the row serves, and the callable as ``module:attr`` in absolute form);
:func:`gpu_marker` says why a callable is GPU-only code (a GPU vendor package, a VeOmni Triton/CUDA kernel module).
The dispatch rules compare the rows with each other: an NPU row must bind an NPU-capable callable (NPU220), and
two rows the tree keeps apart (two variants, a model's override of the registry default) must not bind the same
one on NPU (NPU221). Nothing is imported or executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from npu_lint.core.astutil import absolute_module, call_name, keyword_arg, last_name, nodes_of, str_value
from npu_lint.veomni.catalog import ANY, GPU, MLU, NPU
from npu_lint.veomni.registry import (
    hardware_kind,
    loop_iterations,
    module_constants,
    register_row,
    requirement_kind,
)
from npu_lint.veomni.vendor_map import GPU_ATTENTION, GPU_KERNEL, VENDOR_PACKAGES

MARKERS = ("KernelSpec(", "BackendSpec(", "register_op(", "register_kernel(")

# words of a VeOmni module name that make it a GPU kernel module (``triton_batch_invariant``, ``cuda_gemm``)
_GPU_MODULE_WORDS = ("triton", "cuda", "liger", "quack", "cutlass", "cudnn", "tilelang", "flashmla")
_NPU_MODULE_WORDS = ("npu", "ascend", "ascendc", "mlu")


def names_npu(name: str | None) -> bool:
    """``npu``, ``fused_npu``, ``npu_ascendc``: "npu" as a word of the implementation name."""
    return name is not None and "npu" in re.split(r"[^a-z0-9]+", name.lower())


# implementation names that name a GPU toolchain or vendor package (``liger_kernel``, ``fused_triton``,
# ``tilelang``, ``cudnn``...): the name itself says the row runs GPU code
_GPU_IMPL_WORDS = frozenset(
    {
        "triton",
        "cuda",
        "liger",
        "quack",
        "cutlass",
        "cudnn",
        "tilelang",
        "flashmla",
        "fla",
        "flashinfer",
        "cute",
    }
)


def names_gpu(name: str | None) -> str | None:
    """The GPU toolchain an implementation name names (``fused_triton`` -> ``triton``), or None. A name that
    also names NPU (``npu_triton``) is not a GPU name."""
    if name is None or names_npu(name):
        return None
    # (``flash_attention_2`` is not one: transformers serves it on Ascend with its NPU flash-attention)
    for word in re.split(r"[^a-z0-9]+", name.lower()):
        if word in _GPU_IMPL_WORDS:
            return word
    return None


@dataclass(frozen=True)
class Target:
    """The callable a row binds: ``module:attr`` (absolute module), and the modules its factory imports."""

    module: str
    attr: str
    adapted_by: str | None = None  # the local adapter the factory wraps it in (``_make_adapter(kernel)``)

    @property
    def dotted(self) -> str:
        return f"{self.module}:{self.attr}" if self.attr else self.module


@dataclass
class Binding:
    op: str
    variant: str  # the variant (KernelSpec / register_op), or the per-model table's op for a BackendSpec
    impl: str
    device: str  # NPU / GPU / MLU / ANY
    target: Target | None
    node: ast.AST  # where to report (the row's call or the dict entry's value)
    kind: str  # "kernel_spec" | "backend" | "register_op"
    per_model: bool = False  # a model's extra_backends entry (overrides the registry default)
    factory_imports: tuple[str, ...] = field(default=())  # absolute modules the row's factory imports
    # every callable the row binds, by role (``forward`` / ``backward`` / ``wrapper`` of a register_op row; the
    # one callable of a KernelSpec / BackendSpec as ``kernel``): an NPU host runs all of them
    parts: tuple[tuple[str, Target], ...] = field(default=())
    hardware_node: ast.AST | None = None  # the row's hardware / requirement expression, as written


def gpu_marker(module: str) -> str | None:
    """Why ``module`` is GPU-only kernel code (None when it is not known to be): a GPU vendor package
    (``fla``, ``liger_kernel``, ``triton``...) or a VeOmni module named for a GPU toolchain (``triton_*``,
    ``*_cuda``) with no NPU/Ascend component in its path."""
    if not module:
        return None
    top = module.split(".", 1)[0]
    family = VENDOR_PACKAGES.get(top)
    if family in (GPU_KERNEL, GPU_ATTENTION):
        return f"the GPU kernel package `{top}`"
    parts = module.split(".")
    if any(w in re.split(r"[^a-z0-9]+", p.lower()) for p in parts for w in _NPU_MODULE_WORDS):
        return None
    last = parts[-1].lower()
    words = re.split(r"[^a-z0-9]+", last)
    for word in _GPU_MODULE_WORDS:
        if word in words:
            return f"the {word.capitalize() if word != 'cuda' else 'CUDA'} kernel module `{module}`"
    return None


def _npu_module(module: str) -> bool:
    return any(w in re.split(r"[^a-z0-9]+", p.lower()) for p in module.split(".") for w in _NPU_MODULE_WORDS)


class _Module:
    """One module's import table and functions, for resolving what a factory returns."""

    def __init__(self, tree: ast.Module, module: str, is_package: bool) -> None:
        self.tree = tree
        self.module = module
        self.is_package = is_package
        self.functions = {
            s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.names: dict[str, tuple[str, str]] = {}  # local name -> (module, attr); attr "" for a module
        self._imports(tree.body, self.names)
        self.constants = module_constants(tree)

    def _absolute(self, node: ast.ImportFrom) -> str | None:
        return absolute_module(self.module, self.is_package, node.level, node.module)

    def _imports(self, stmts: list[ast.stmt], out: dict[str, tuple[str, str]]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.ImportFrom):
                base = self._absolute(stmt)
                if base is None:
                    continue
                for alias in stmt.names:
                    out[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        out[alias.asname] = (alias.name, "")
            elif isinstance(stmt, ast.If):
                self._alternatives([stmt.body, stmt.orelse], out)
            elif isinstance(stmt, ast.Try):
                self._alternatives([stmt.body, *(h.body for h in stmt.handlers)], out)

    def _alternatives(self, branches: list[list[ast.stmt]], out: dict[str, tuple[str, str]]) -> None:
        """Imports under branches only one of which runs (``if``/``else``, ``try``/``except``): a name the
        branches bind to different callables is not resolved (which one the host gets is decided at run time;
        ``if not is_torch_npu_available(): from .triton import f`` / ``else: from .npu import f``)."""
        seen: dict[str, set[tuple[str, str]]] = {}
        for branch in branches:
            bound: dict[str, tuple[str, str]] = {}
            self._imports(branch, bound)
            for name, value in bound.items():
                seen.setdefault(name, set()).add(value)
        for name, values in seen.items():
            if len(values) == 1:
                out[name] = next(iter(values))
            else:
                out.pop(name, None)

    def local_names(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[str, str]]:
        names = dict(self.names)
        for sub in ast.walk(func):
            if isinstance(sub, (ast.ImportFrom, ast.Import)):
                self._imports([sub], names)
        return names

    def value_target(self, node: ast.expr | None, names: dict[str, tuple[str, str]]) -> Target | None:
        """The callable an expression denotes: an imported name, ``<imported module>.attr``, or a local
        function of this module."""
        if isinstance(node, ast.Name):
            if node.id in names:
                mod, attr = names[node.id]
                if not attr:
                    return Target(mod, "")
                return Target(mod, attr)
            if node.id in self.functions:
                return Target(self.module, node.id)
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = names.get(node.value.id)
            if base is None:
                return None
            mod, attr = base
            # ``from . import npu as kernels`` then ``kernels.f``: (pkg.npu, f); ``import x.y as m``: (x.y, f)
            return Target(f"{mod}.{attr}" if attr else mod, node.attr)
        return None

    def factory_result(self, name: str) -> tuple[Target | None, tuple[str, ...]]:
        """What the module's zero-argument function ``name`` returns, and the modules it imports."""
        func = self.functions.get(name)
        if func is None:
            return None, ()
        names = self.local_names(func)
        imported = tuple(
            sorted(
                {
                    m
                    for sub in ast.walk(func)
                    if isinstance(sub, ast.ImportFrom)
                    for m in [self._absolute(sub)]
                    if m is not None
                }
                | {a.name for sub in ast.walk(func) if isinstance(sub, ast.Import) for a in sub.names}
            )
        )
        returns = [s.value for s in ast.walk(func) if isinstance(s, ast.Return) and s.value is not None]
        if len(returns) != 1:
            return None, imported
        value = returns[0]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.args:
            # ``return _make_adapter(kernel)``: the adapted kernel
            inner = self.value_target(value.args[0], names)
            if inner is not None and inner.attr:
                return Target(inner.module, inner.attr, adapted_by=value.func.id), imported
            return None, imported
        return self.value_target(value, names), imported

    def factory_arguments(self, name: str) -> tuple[Target, ...]:
        """The callables a factory passes to the adapter it returns (``partial(ForCausalLMLoss,
        cross_entropy_fn=fused_liger_kernel_cross_entropy)``: the Liger kernel), beside the adapted one."""
        func = self.functions.get(name)
        if func is None:
            return ()
        returns = [s.value for s in ast.walk(func) if isinstance(s, ast.Return) and s.value is not None]
        if len(returns) != 1 or not isinstance(returns[0], ast.Call):
            return ()
        names = self.local_names(func)
        call = returns[0]
        values = [*call.args[1:], *(k.value for k in call.keywords)]
        return tuple(t for v in values for t in [self.value_target(v, names)] if t is not None and t.attr)


def _device(impl: str, hardware: str) -> str:
    if hardware in (NPU, GPU, MLU):
        return hardware
    return NPU if names_npu(impl) else ANY


def _entry_target(mod: _Module, call: ast.Call) -> tuple[Target | None, tuple[str, ...]]:
    entry = str_value(keyword_arg(call, "entry"))
    if entry is None and call.args:
        entry = str_value(call.args[0])
    if entry is None or ":" not in entry:
        return None, ()
    module, _, attr = entry.partition(":")
    factory = keyword_arg(call, "entry_is_factory")
    if isinstance(factory, ast.Constant) and factory.value is True and module == mod.module:
        target, imported = mod.factory_result(attr)
        if target is None and not imported:
            target = Target(module, attr)
        return target, imported
    return Target(module, attr), ()


def _requires_npu(call: ast.Call) -> bool:
    req = keyword_arg(call, "requires")
    return isinstance(req, (ast.Tuple, ast.List)) and any(str_value(e) == "torch_npu" for e in req.elts)


def _backend_call(mod: _Module, node: ast.expr) -> ast.Call | None:
    if isinstance(node, ast.Name):
        bound = mod.constants.get(node.id)
        node = bound if bound is not None else node
    if isinstance(node, ast.Call) and call_name(node) == "BackendSpec":
        return node
    return None


def _backend_table(
    mod: _Module, table: ast.expr, op: str, variant: str, per_model: bool, out: list[Binding]
) -> None:
    if isinstance(table, ast.Name):
        table = mod.constants.get(table.id, table)
    if not isinstance(table, ast.Dict):
        return
    for key, value in zip(table.keys, table.values, strict=False):
        impl = str_value(key) if key is not None else None
        if impl is None:
            continue
        call = _backend_call(mod, value)
        if call is None:
            continue
        target, imported = _entry_target(mod, call)
        device = NPU if (names_npu(impl) or _requires_npu(call)) else ANY
        out.append(Binding(op, variant, impl, device, target, value, "backend", per_model, imported))


def _call_envs(tree: ast.Module, constants: dict[str, ast.expr]) -> dict[int, list[dict[str, ast.expr]]]:
    """For every call inside a registration loop over a literal (``for name, hw in (("chunk_loss", ...), ...)``),
    the loop variables' bindings, one per iteration (nested loops multiply); calls outside loops are absent."""
    out: dict[int, list[dict[str, ast.expr]]] = {}

    def visit(node: ast.AST, envs: list[dict[str, ast.expr]]) -> None:
        if isinstance(node, ast.For):
            inner = [{**env, **it} for env in envs for it in loop_iterations(node, env, constants)][:256]
            for stmt in node.body:
                visit(stmt, inner or envs)
            for stmt in node.orelse:
                visit(stmt, envs)
            return
        if isinstance(node, ast.Call) and (len(envs) > 1 or envs[0]):
            out[id(node)] = envs
        for child in ast.iter_child_nodes(node):
            visit(child, envs)

    if any(isinstance(n, ast.For) for n in ast.walk(tree)):
        visit(tree, [{}])
    return out


def _bound(
    node: ast.expr | None, env: dict[str, ast.expr], constants: dict[str, ast.expr] | None = None
) -> ast.expr | None:
    """A loop variable's value in this iteration, or a module constant's (``hardware=_TILELANG_HARDWARE``)."""
    for _ in range(3):
        if isinstance(node, ast.Name) and node.id in env:
            node = env[node.id]
        elif isinstance(node, ast.Name) and constants and node.id in constants:
            node = constants[node.id]
        else:
            break
    return node


def file_bindings(tree: ast.Module, module: str, is_package: bool) -> list[Binding]:
    """Every implementation row of one module, with the callable it binds (see the module docstring); a row
    registered in a loop over a literal is read once per iteration."""
    mod = _Module(tree, module, is_package)
    envs_of = _call_envs(tree, mod.constants)
    out: list[Binding] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        if name == "KernelSpec":
            for env in envs_of.get(id(node), [{}]):
                _kernel_spec(mod, node, env, out)
        elif name == "OpSpec":
            op = str_value(keyword_arg(node, "name"))
            backends = keyword_arg(node, "backends")
            if op is not None and backends is not None:
                _backend_table(mod, backends, op, op, False, out)
        elif name in ("register_op", "register_kernel"):
            for env in envs_of.get(id(node), [{}]):
                _register_op(mod, node, env, out)
        else:
            extra = keyword_arg(node, "extra_backends")
            if extra is None:
                continue
            if isinstance(extra, ast.Name):
                extra = mod.constants.get(extra.id, extra)
            if not isinstance(extra, ast.Dict):
                continue
            for key, value in zip(extra.keys, extra.values, strict=False):
                op = str_value(key) if key is not None else None
                if op is not None:
                    _backend_table(mod, value, op, op, True, out)
    out.sort(key=lambda b: (getattr(b.node, "lineno", 0), getattr(b.node, "col_offset", 0)))
    return out


def _kernel_spec(mod: _Module, node: ast.Call, env: dict[str, ast.expr], out: list[Binding]) -> None:
    impl = str_value(_bound(keyword_arg(node, "name"), env))
    op = str_value(_bound(keyword_arg(node, "op_name"), env))
    variant = str_value(_bound(keyword_arg(node, "variant"), env))
    factory = _bound(keyword_arg(node, "factory"), env)
    if impl is None or op is None or variant is None:
        return
    target, imported = (None, ())
    if isinstance(factory, ast.Name):
        target, imported = mod.factory_result(factory.id)
    hw_node = keyword_arg(node, "hardware")
    hw = hardware_kind(_bound(hw_node, env, mod.constants)) or ANY
    parts: tuple[tuple[str, Target], ...] = (("kernel", target),) if target is not None else ()
    if isinstance(factory, ast.Name):
        parts += tuple(("argument", t) for t in mod.factory_arguments(factory.id))
    out.append(
        Binding(
            op,
            variant,
            impl,
            _device(impl, hw),
            target,
            node,
            "kernel_spec",
            False,
            imported,
            parts,
            hw_node,
        )
    )


def _register_op(mod: _Module, node: ast.Call, env: dict[str, ast.expr], out: list[Binding]) -> None:
    row = register_row(node, env=env, constants=mod.constants)
    if row is None:
        return
    values: dict[str, ast.expr] = dict(zip(("forward", "backward"), node.args[3:5], strict=False))
    for kw in node.keywords:
        if kw.arg in ("forward", "backward", "wrapper"):
            values[kw.arg] = kw.value
    wrapper = values.get("wrapper")
    value = wrapper if wrapper is not None else values.get("forward")
    target = mod.value_target(_bound(value, env), mod.names)
    parts = tuple(
        (role, t)
        for role in ("forward", "backward", "wrapper")
        if role in values
        for t in [mod.value_target(_bound(values[role], env), mod.names)]
        if t is not None
    )
    req_node = keyword_arg(node, "requirement")
    req = requirement_kind(_bound(req_node, env, mod.constants), mod.constants)
    out.append(
        Binding(
            row.op,
            row.variant,
            row.impl,
            _device(row.impl, req),
            target,
            node,
            "register_op",
            False,
            (),
            parts,
            req_node,
        )
    )


def binding_gpu_reason(binding: Binding, rows: list[Binding]) -> str | None:
    """Why an NPU row's callable is GPU-only code: its module (or every module its factory imports, when the
    callable is not resolved) is a GPU kernel module, or a GPU-only row of the same op binds the same callable.
    Every callable the row binds counts (a raw forward/backward pair runs both: an NPU forward with a Triton
    backward fails at the first backward pass); the answer names the part when it is not the row's main one."""
    for role, part in binding.parts:
        if part == binding.target:
            continue
        if role == "argument":  # a kernel handed to the row's adapter: its own module says what it is
            reason = gpu_marker(part.module)
            if reason is not None:
                return f"its adapter is given `{part.dotted}`, {reason}"
            continue
        reason = _target_gpu_reason(binding, part, rows)
        if reason is not None:
            return f"its {role} is {reason}"
    return _primary_gpu_reason(binding, rows)


def _target_gpu_reason(binding: Binding, target: Target, rows: list[Binding]) -> str | None:
    reason = gpu_marker(target.module)
    if reason is not None:
        return reason
    for other in rows:
        if other is binding or other.op != binding.op or other.device != GPU:
            continue
        for _role, theirs in other.parts or ((("kernel", other.target),) if other.target else ()):
            if (theirs.module, theirs.attr) == (target.module, target.attr):
                return f"the kernel of the GPU-only row `{other.impl}` of `{other.op}/{other.variant}`"
            if (
                binding.kind == other.kind == "register_op"
                and theirs.attr
                and target.attr
                and theirs.module == target.module
                and not _npu_module(target.module)
            ):
                # the kernel module of a GPU-only row (``cuda_graph.backward`` beside the row's ``cuda_graph.run``)
                return f"from `{target.module}`, the kernel module of the GPU-only row `{other.impl}`"
    return None


def _arguments(binding: Binding) -> tuple[str, ...]:
    return tuple(sorted(t.dotted for role, t in binding.parts if role == "argument"))


def _primary_gpu_reason(binding: Binding, rows: list[Binding]) -> str | None:
    target = binding.target
    if target is not None:
        reason = gpu_marker(target.module)
        if reason is not None:
            return reason
        for other in rows:
            if (
                other is not binding
                and other.op == binding.op
                and other.device == GPU
                and other.target is not None
                and (other.target.module, other.target.attr) == (target.module, target.attr)
                and _arguments(other)
                == _arguments(binding)  # ``partial(F, fn=liger)`` vs ``partial(F, fn=eager)``
            ):
                return f"the kernel of the GPU-only row `{other.impl}` of `{other.op}/{other.variant}`"
        if target.module != "" and binding.factory_imports and target.module not in binding.factory_imports:
            return None
    if binding.factory_imports:
        # an unresolved callable built by a factory: GPU code when the factory imports a GPU kernel module and
        # nothing NPU-specific
        reasons = [gpu_marker(m) for m in binding.factory_imports]
        npu = any(
            w in re.split(r"[^a-z0-9]+", m.lower())
            for m in binding.factory_imports
            for w in _NPU_MODULE_WORDS
        )
        found = [r for r in reasons if r]
        if found and not npu:
            return found[0]
    return None


def module_of(path: str) -> tuple[str, bool]:
    """The dotted module of a file and whether it is a package's ``__init__``."""
    from npu_lint.core.astutil import module_package

    norm = path.replace("\\", "/")
    is_package = norm.endswith("/__init__.py") or norm == "__init__.py"
    package = module_package(path)
    dirs = norm.split("/")[:-1]
    if "veomni" in dirs:  # a tree whose top package has no ``__init__.py``: name it from the path
        spelled = dirs[len(dirs) - 1 - dirs[::-1].index("veomni") :]
        if len(spelled) > len(package) and spelled[len(spelled) - len(package) :] == package:
            package = spelled
    stem = norm.rsplit("/", 1)[-1].removesuffix(".py")
    parts = package if is_package else [*package, stem]
    return ".".join(parts), is_package


_DEFAULTS: dict[
    tuple[str, tuple[tuple[str, int, int], ...]], dict[tuple[str, str], tuple[str, int, str]]
] = {}


def default_backends(root: str) -> dict[tuple[str, str], tuple[str, int, str]]:
    """``(op, backend name) -> (entry, line, file)`` of the registry defaults (``OpSpec(backends=...)``) of the
    tree at ``root``, read from its registry modules (a few small files; the answer, a table of strings, is kept
    per run for the files' stat keys)."""
    import os
    from pathlib import Path

    from npu_lint.veomni.patchgen import load_file
    from npu_lint.veomni.registry import registry_dirs

    files: list[Path] = []
    for base in registry_dirs(Path(root)):
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "generated")]
            files.extend(Path(dirpath, f) for f in filenames if f == "__init__.py")
    keys = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        keys.append((str(f), st.st_mtime_ns, st.st_size))
    key = (root, tuple(sorted(keys)))
    hit = _DEFAULTS.get(key)
    if hit is not None:
        return hit
    out: dict[tuple[str, str], tuple[str, int, str]] = {}
    for path, _m, _s in key[1]:
        parsed = load_file(path)  # the run's one store of parsed files
        if parsed is None or "OpSpec(" not in parsed.text:
            continue
        tree = parsed.tree
        if tree is None:
            continue
        module, is_package = module_of(path)
        for b in file_bindings(tree, module, is_package):
            if b.kind == "backend" and not b.per_model and b.target is not None:
                out.setdefault((b.op, b.impl), (b.target.dotted, getattr(b.node, "lineno", 0), path))
    if len(_DEFAULTS) > 8:
        _DEFAULTS.clear()
    _DEFAULTS[key] = out
    return out


# -- the NPU host's view of implementation-name code -------------------------------------------------------------

NPU_NAME = "<npu>"  # the NPU implementation name of an op whose NPU default is not spelled out here
NONE = "<none>"  # Python's None, as a parameter left at its default holds it (``default_env``)
_NPU_PREDICATE = re.compile(r"(?i)^(is_(torch_)?npu(_is)?_available|is_npu|npu_available|on_npu|use_npu)$")
_CUDA_PREDICATE = re.compile(r"(?i)^(is_(torch_)?cuda_available|is_cuda|cuda_available)$")
_CONFIG_WORDS = ("config", "cfg")


@dataclass(frozen=True)
class HostValue:
    """A value as an NPU host computes it: a string (or :data:`NPU_NAME`), None when unknown; ``npu`` when the
    value comes from what the host reads for an implementation name (so a decision on it is the host's)."""

    value: str | None
    npu: bool = False


_UNKNOWN = HostValue(None)


def _predicate_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        if (
            node.attr == "is_available"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "cuda"
        ):
            return "is_cuda_available"
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _config_object(node: ast.expr) -> bool:
    name = last_name(node) or ""
    return any(w in name.lower() for w in _CONFIG_WORDS)


class NpuHost:
    """Implementation names and tests evaluated as an NPU host sees them: NPU availability is true, CUDA
    availability false, an ops-config implementation field holds its NPU value (``field_values``, else the op's
    NPU name, :data:`NPU_NAME`). ``env`` maps local names to what they hold."""

    def __init__(
        self, field_values: dict[str, str] | None = None, constants: dict[str, ast.expr] | None = None
    ) -> None:
        self.field_values = field_values or {}
        # module-level tables (``_ALIASES = {"npu": "eager"}``) that a lookup of an implementation name reads
        self.constants = constants or {}

    def field(self, name: str | None) -> HostValue:
        if name is None:
            return HostValue(NPU_NAME, True)
        value = self.field_values.get(name, NPU_NAME)
        if value == "eager":
            return _UNKNOWN  # the tree's own NPU default is eager: a decision on it is not forced by code
        return HostValue(value, True)

    def value(self, node: ast.expr | None, env: dict[str, HostValue]) -> HostValue:
        if node is None:
            return _UNKNOWN
        if isinstance(node, ast.Constant):
            return HostValue(node.value) if isinstance(node.value, str) else _UNKNOWN
        if isinstance(node, ast.Name):
            return env.get(node.id, _UNKNOWN)
        if isinstance(node, ast.Attribute):
            if node.attr.endswith("_implementation") and _config_object(node.value):
                return self.field(node.attr)
            return _UNKNOWN
        if isinstance(node, ast.IfExp):
            decided, _dep = self.test(node.test, env)
            if decided is True:
                return self.value(node.body, env)
            if decided is False:
                return self.value(node.orelse, env)
            a, b = self.value(node.body, env), self.value(node.orelse, env)
            if a.npu != b.npu:  # a configured NPU host takes the branch that reads its configuration
                return a if a.npu else b
            return a if a == b else _UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.Subscript):  # ``_ALIASES[impl]``
            return self._lookup(node.value, node.slice, None, env)
        if isinstance(node, ast.BoolOp):  # ``npu_as or "eager"``: the first operand that is true (the last)
            got = _UNKNOWN
            for operand in node.values:
                got = self.value(operand, env)
                if got.value is None:
                    return _UNKNOWN
                if (got.value not in (NONE, "")) == isinstance(node.op, ast.Or):
                    return got
            return got
        return _UNKNOWN

    def _call(self, node: ast.Call, env: dict[str, HostValue]) -> HostValue:
        name = call_name(node)
        if name == "getattr" and len(node.args) >= 2:
            obj, key = node.args[0], node.args[1]
            literal = str_value(key)
            if literal is not None and literal.endswith("_implementation"):
                return self.field(literal)
            if isinstance(key, ast.JoinedStr) and _config_object(obj):
                return self.field(None)
            if literal is None and _config_object(obj):
                return self.field(None)
            return _UNKNOWN
        if (
            name == "get" and isinstance(node.func, ast.Attribute) and node.args
        ):  # ``_ALIASES.get(impl, impl)``
            return self._lookup(
                node.func.value, node.args[0], node.args[1] if len(node.args) > 1 else None, env
            )
        if name == "replace" and isinstance(node.func, ast.Attribute) and len(node.args) == 2:
            base = self.value(node.func.value, env)
            old, new = str_value(node.args[0]), str_value(node.args[1])
            if base.value is None or old is None or new is None:
                return HostValue(None, base.npu)
            if (
                base.value == NPU_NAME
            ):  # the NPU name is not spelled here: ``npu`` replaced whole, else unknown
                return HostValue(new, base.npu) if old == "npu" else HostValue(None, base.npu)
            return HostValue(base.value.replace(old, new), base.npu)
        if name in ("removeprefix", "removesuffix", "lower", "strip") and isinstance(
            node.func, ast.Attribute
        ):
            base = self.value(node.func.value, env)
            arg = str_value(node.args[0]) if node.args else None
            if base.value is None or base.value == NPU_NAME:
                return HostValue(None, base.npu)
            if name == "lower":
                return HostValue(base.value.lower(), base.npu)
            if arg is None and name != "strip":
                return HostValue(None, base.npu)
            done = getattr(base.value, name)(arg) if arg is not None else base.value.strip()
            return HostValue(done, base.npu)
        # a helper reading an implementation field (``resolve_op_impl("x_implementation", npu_as="y")``)
        fields = [str_value(a) for a in node.args]
        fields = [f for f in fields if f is not None and f.endswith("_implementation")]
        if len(fields) == 1 and name.startswith(("resolve", "get", "read")):
            got = self.field(fields[0])
            npu_as = str_value(keyword_arg(node, "npu_as"))
            if npu_as is not None and got.value is not None and names_npu(got.value.replace(NPU_NAME, "npu")):
                return HostValue(npu_as, True)
            return got
        return _UNKNOWN

    def _lookup(
        self, table: ast.expr, key: ast.expr, default: ast.expr | None, env: dict[str, HostValue]
    ) -> HostValue:
        """A table lookup of an implementation name: the row an NPU host's name selects (the one key naming the NPU
        when the name is not spelled here), else ``default``."""
        if isinstance(table, ast.Name) and isinstance(self.constants.get(table.id), ast.Dict):
            table = self.constants[table.id]
        got = self.value(key, env)
        if not isinstance(table, ast.Dict) or got.value is None:
            return _UNKNOWN
        keys = [str_value(k) if k is not None else None for k in table.keys]
        if None in keys:
            return _UNKNOWN  # ``**other``, or keys that are no literals
        hits = [i for i, k in enumerate(keys) if self._equal(got.value, k)]
        if len(hits) == 1:
            found = self.value(table.values[hits[0]], env)
            return HostValue(found.value, got.npu or found.npu)
        if hits or default is None:
            return _UNKNOWN
        if got.value == NPU_NAME and any(k is not None and names_npu(k) for k in keys):
            return _UNKNOWN
        return self.value(default, env)

    def test(self, node: ast.expr, env: dict[str, HostValue]) -> tuple[bool | None, bool]:
        """(the decision, whether the NPU host decided it): True/False, or None when the host cannot tell."""
        pred = _predicate_name(node) if isinstance(node, (ast.Call, ast.Name, ast.Attribute)) else None
        if pred is not None:
            if _NPU_PREDICATE.match(pred) or pred.upper() == "IS_NPU_AVAILABLE":
                return True, True
            if _CUDA_PREDICATE.match(pred) or pred.upper() == "IS_CUDA_AVAILABLE":
                return False, True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            decided, dep = self.test(node.operand, env)
            return (None if decided is None else not decided), dep
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and len(node.args) == 1
        ):  # ``impl.endswith("_npu")``
            base, affix = self.value(node.func.value, env), str_value(node.args[0])
            if not base.npu or base.value is None or affix is None:
                return None, False
            if base.value == NPU_NAME:
                return (True, True) if names_npu(affix) else (None, False)
            return getattr(base.value, node.func.attr)(affix), True
        if isinstance(node, ast.Name) and env.get(node.id, _UNKNOWN).value == NONE:
            return False, False  # a parameter left at its default None
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Is, ast.IsNot))
            and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value is None
        ):
            left = self.value(node.left, env)
            if left.value is None:
                return None, False
            return (left.value == NONE) == isinstance(node.ops[0], ast.Is), left.npu
        if isinstance(node, ast.BoolOp):
            results = [self.test(v, env) for v in node.values]
            is_and = isinstance(node.op, ast.And)
            short = False if is_and else True
            for decided, dep in results:
                if decided is short and dep:
                    return short, True
            if all(d is not None for d, _ in results):
                return (all(d for d, _ in results) if is_and else any(d for d, _ in results)), any(
                    dep for _, dep in results
                )
            return None, False
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and str_value(node.left) is not None
        ):  # ``"npu" in impl``
            right = self.value(node.comparators[0], env)
            part = str_value(node.left) or ""
            if not right.npu or right.value is None:
                return None, False
            hit = names_npu(part) or None if right.value == NPU_NAME else part in right.value
            if hit is None:
                return None, False
            return hit == isinstance(node.ops[0], ast.In), True
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.value(node.left, env)
            if not left.npu or left.value is None:
                return None, False
            op, right = node.ops[0], node.comparators[0]
            if isinstance(op, (ast.Eq, ast.NotEq)):
                eq = self._equal(left.value, str_value(right))
                if eq is None:
                    return None, False
                return (eq if isinstance(op, ast.Eq) else not eq), True
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                found = [self._equal(left.value, str_value(e)) for e in right.elts]
                if any(f is True for f in found):
                    hit = True
                elif all(f is False for f in found):
                    hit = False
                else:
                    return None, False
                return (hit if isinstance(op, ast.In) else not hit), True
        return None, False

    @staticmethod
    def _equal(value: str, literal: str | None) -> bool | None:
        if literal is None:
            return None
        if value != NPU_NAME:
            return value == literal
        # the op's NPU name is not spelled here: any NPU-named literal the code compares it with is taken for it
        return names_npu(literal)


def host_env(func: ast.AST, host: NpuHost, before: int | None = None) -> dict[str, HostValue]:
    """What the local names of a function hold on an NPU host: names assigned once (or always the same value)
    from an implementation-name read, in statement order (``before``: only the assignments above that line)."""
    env: dict[str, HostValue] = {}
    seen: dict[str, int] = {}
    assigns = nodes_of(func, ast.Assign)
    if before is not None:
        assigns = [a for a in assigns if a.lineno < before]  # type: ignore[attr-defined]
    for node in assigns:
        assert isinstance(node, ast.Assign)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen[node.targets[0].id] = seen.get(node.targets[0].id, 0) + 1
    for node in sorted(assigns, key=lambda n: (n.lineno, n.col_offset)):  # type: ignore[attr-defined]
        assert isinstance(node, ast.Assign)
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            continue
        name = node.targets[0].id
        got = host.value(node.value, env)
        if not got.npu:
            continue
        if seen.get(name, 0) > 1 and name in env and env[name] != got:
            env[name] = _UNKNOWN
            continue
        env[name] = got
    return env


def default_env(func: ast.AST) -> dict[str, HostValue]:
    """A function's parameters that default to None or a string and are never rebound in its body, as a call that
    leaves them out sees them (``npu_as: str | None = None`` holds :data:`NONE`)."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {}
    args = func.args
    pairs = list(zip(reversed(args.posonlyargs + args.args), reversed(args.defaults), strict=False))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    rebound = {n.id for n in nodes_of(func, ast.Name) if isinstance(n.ctx, (ast.Store, ast.Del))}
    out: dict[str, HostValue] = {}
    for arg, default in pairs:
        if arg.arg in rebound or not isinstance(default, ast.Constant):
            continue
        if default.value is None:
            out[arg.arg] = HostValue(NONE)
        elif isinstance(default.value, str):
            out[arg.arg] = HostValue(default.value)
    return out


# -- what a handle asks for on an NPU host ----------------------------------------------------------------------


@dataclass(frozen=True)
class NpuSelection:
    """How a handle's implementation argument reads the ops config: the field it reads, the op that field
    chooses (None when the catalog does not know the field), the ``npu_as`` remap, and the name an NPU host
    that kept the default configuration asks for (None when the field has no NPU default)."""

    field: str
    field_op: str | None
    npu_as: str | None
    asked: str | None


def npu_selection(impl_node: ast.expr | None, resolvers: frozenset[str]) -> NpuSelection | None:
    """The NPU host's reading of ``resolve_op_impl("<field>", npu_as=...)``-style implementation arguments (the
    resolver returns the field's value, with the NPU name ``npu`` replaced by ``npu_as`` when given)."""
    from npu_lint.veomni.catalog import CONFIG_FIELD_TO_OP, NPU_FIELD_DEFAULTS

    if not isinstance(impl_node, ast.Call) or call_name(impl_node) not in resolvers:
        return None
    fields = [
        f for f in (str_value(a) for a in impl_node.args) if f is not None and f.endswith("_implementation")
    ]
    if len(fields) != 1:
        return None
    field_name = fields[0]
    npu_as = str_value(keyword_arg(impl_node, "npu_as"))
    value = NPU_FIELD_DEFAULTS.get(field_name)
    asked = npu_as if (npu_as is not None and value == "npu") else value
    return NpuSelection(field_name, CONFIG_FIELD_TO_OP.get(field_name), npu_as, asked)
