"""Helpers shared by the rules of the device family (private to it)."""

from __future__ import annotations

import ast
import os
import re

from npu_lint.core.astutil import scoped_memo, walk, walk_pairs
from npu_lint.core.diagnostics import Edit
from npu_lint.rules._handles import (
    GUARD_ATTRS,
    call_name,
    instance_handle_attrs,
    module_handle_names,
    npu_targeted,
    self_attr,
    uses_torch_npu,
)
from npu_lint.rules.base import Context
from npu_lint.veomni import backends, patchgen, vendor_map
from npu_lint.veomni.registration import device_module_for

_TENSOR_ANNOTATIONS = {
    "Tensor",
    "FloatTensor",
    "LongTensor",
    "BoolTensor",
    "IntTensor",
    "HalfTensor",
    "BFloat16Tensor",
}
_PREFERRED_PARAMS = ("hidden_states", "inputs_embeds", "x", "input", "inputs", "query", "q")


def is_tensor_annotation(ctx: Context, ann: ast.expr | None) -> bool:
    """``torch.Tensor`` / ``Tensor`` / ``torch.FloatTensor``... (not Optional: it may be None), written as an
    expression or as a string (a forward reference: ``"torch.Tensor"``)."""
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value.strip(), mode="eval").body
        except SyntaxError:
            return False
    dotted = ctx.dotted(ann)
    return dotted is not None and dotted.split(".")[-1] in _TENSOR_ANNOTATIONS


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def self_parameters(cls: ast.ClassDef) -> list[str]:
    """Attributes assigned ``nn.Parameter(...)`` in the class's ``__init__`` (``self.weight``...)."""
    out: list[str] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, (ast.Name, ast.Attribute))
                    and (
                        node.value.func.attr
                        if isinstance(node.value.func, ast.Attribute)
                        else node.value.func.id
                    )
                    == "Parameter"
                ):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            out.append(target.attr)
    return out


def device_source(ctx: Context, avoid: str | None = None) -> str | None:
    """An expression naming the training device from data in scope, e.g. ``hidden_states.device``.

    Candidates, nearest first: required parameters of the enclosing function annotated as tensors (a
    conventional name such as ``hidden_states`` preferred), else required parameters it uses as tensors
    (``x.shape``, ``x.device``, ``x.view(...)``), then ``self.<p>.device`` for a parameter the
    enclosing class creates in ``__init__``. ``avoid`` is a root name that must not be used (the receiver
    of ``.cuda()``: its own device would make the move a no-op). None when nothing in scope qualifies.
    """
    func = ctx.function
    if func is not None:
        args = func.args
        positional = [*args.posonlyargs, *args.args]
        n_defaults = len(args.defaults)
        required = positional[: len(positional) - n_defaults] if n_defaults else positional
        required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is None]
        tensors = [a.arg for a in required if a.arg != avoid and is_tensor_annotation(ctx, a.annotation)]
        if not tensors:  # else a required parameter the function uses as a tensor (``x.shape``, ``x.device``)
            tensors = [
                a.arg for a in required if a.arg not in (avoid, "self", "cls") and used_as_tensor(func, a.arg)
            ]
        for name in _PREFERRED_PARAMS:
            if name in tensors:
                return f"{name}.device"
        if tensors:
            return f"{tensors[0]}.device"
        is_method = positional and positional[0].arg == "self"
        cls = ctx.class_
        if is_method and cls is not None and avoid != "self":
            params = self_parameters(cls)
            if params:
                name = "weight" if "weight" in params else params[0]
                return f"self.{name}.device"
    return None


# -- shared helpers for NPU102-NPU104 ----------------------------------------------------------------

CUDA_INDEXED = re.compile(r"cuda:(\d+)")


def cuda_string(node: ast.AST | None) -> str | None:
    """``"cuda"`` or ``"cuda:N"`` when ``node`` is that string constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if node.value == "cuda" or CUDA_INDEXED.fullmatch(node.value):
            return node.value
    return None


def _cuda_prefix(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cuda:")


def built_cuda_device(node: ast.AST | None) -> bool:
    """A device name built at run time on CUDA's: ``f"cuda:{rank}"``, ``"cuda:" + str(i)``, ``"cuda:%d" % i``,
    ``"cuda:{}".format(i)``. A plain ``"cuda"``/``"cuda:N"`` constant is ``cuda_string``'s."""
    if isinstance(node, ast.JoinedStr):
        return len(node.values) > 1 and _cuda_prefix(node.values[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left = node.left
        if isinstance(node.op, ast.Add) and isinstance(left, ast.Constant) and left.value == "cuda":
            return True  # "cuda" + ":" + str(i)
        if isinstance(left, ast.BinOp):
            return built_cuda_device(left)  # "cuda:" + str(i) + ...
        return _cuda_prefix(left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _cuda_prefix(node.func.value)
    return False


def is_nccl(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "nccl"


# Outside any VeOmni tree (a user's training script, a pre-commit hook's isolated environment): torch's own
# accelerator API (torch >= 2.6). ``current_accelerator()`` is None on a CPU-only host, hence the fallbacks:
# a device where a device is expected, its type where a string was.
ACCELERATOR = "torch.accelerator.current_accelerator()"
ACCELERATOR_DEVICE = f'{ACCELERATOR} or "cpu"'
ACCELERATOR_TYPE = f'({ACCELERATOR} or torch.device("cpu")).type'
ACCELERATOR_NOTE = "torch >= 2.6; `cpu` on a host without an accelerator"


def outside_veomni(ctx: Context) -> bool:
    """The file is outside any VeOmni tree: not in a ``veomni`` package, not under the project's root (the
    directory holding ``veomni/``, where a script beside the package imports it). Its fixes never import
    ``veomni`` (whatever the linting environment has installed: the fix must not depend on it)."""
    return ctx.project.outside_tree(ctx.source.path)


def accelerator_available(ctx: Context) -> bool:
    """``torch.accelerator`` is reachable here: outside VeOmni, with ``torch`` bound to the torch module, and
    the nearest ``pyproject.toml`` / ``requirements.txt`` does not pin torch below 2.6."""
    if not outside_veomni(ctx) or ctx.runtime_imports.get("torch") != "torch":
        return False
    if any(_rebinds_torch(ctx, node) for node in ctx.parents if isinstance(node, _SCOPES)):
        return False  # `def f(x, torch=None)`: the fix's `torch.accelerator` would be that parameter's
    old = ctx.memo.get("torch-pinned-below-2.6")
    if old is None:  # read once per file (never cached across runs: the project file may change)
        old = ctx.memo["torch-pinned-below-2.6"] = torch_pinned_below(
            os.path.dirname(os.path.abspath(ctx.source.path)), (2, 6)
        )
    return not old


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _rebinds_torch(ctx: Context, scope: ast.AST) -> bool:
    """``scope`` (a function or lambda) binds the name ``torch`` to something else than the torch module:
    a parameter, an assignment or loop target, a ``with ... as torch``, an ``import x as torch``."""
    key = ("rebinds-torch", id(scope))
    cached = ctx.memo.get(key)
    if cached is not None and cached[0] is scope:  # type: ignore[index]
        return cached[1]  # type: ignore[index]
    args = scope.args  # type: ignore[attr-defined]
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    found = any(p is not None and p.arg == "torch" for p in params)
    if not found:
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id == "torch" and isinstance(node.ctx, ast.Store):
                found = True
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found = any(
                    (a.asname or a.name.split(".")[0]) == "torch"
                    and not (isinstance(node, ast.Import) and a.name.split(".")[0] == "torch")
                    for a in node.names
                )
            if found:
                break
    ctx.memo[key] = (scope, found)
    return found


_TORCH_REQ = re.compile(r"""(?:^|["'\s])torch\s*((?:[<>=!~]=?\s*[\w.*+]+\s*,?\s*)+)""", re.M)


def torch_pinned_below(directory: str, version: tuple[int, int]) -> bool:
    """The nearest ``pyproject.toml`` or ``requirements.txt`` at or above ``directory`` pins ``torch`` to a
    release below ``version`` (``torch==2.4.1``, ``torch<2.6``, ``torch<=2.5``); False when nothing says so."""
    from npu_lint.core.safeio import read_regular

    current = directory
    while True:
        found = False
        for name in ("pyproject.toml", "requirements.txt"):
            try:
                text = read_regular(os.path.join(current, name))[0].decode("utf-8", "replace")
            except OSError:
                continue
            found = True
            for match in _TORCH_REQ.finditer(text):
                for clause in match.group(1).split(","):
                    clause = clause.strip()
                    op = re.match(r"[<>=!~]=?", clause)
                    numbers = re.findall(r"\d+", clause)
                    if op is None or len(numbers) < 2:
                        continue
                    pinned = (int(numbers[0]), int(numbers[1]))
                    if op.group() in ("==", "<=", "~=") and pinned < version:
                        return True
                    if op.group() == "<" and pinned <= version:
                        return True
        if found:
            return False  # the nearest project directory decides
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def helper_edits(ctx: Context, name: str) -> list[Edit] | None:
    """Edits that make VeOmni's device helper ``name`` callable here; None when the name is taken.

    A helper already imported from any ``...utils.device`` module (VeOmni's own files import it relatively)
    needs no edit; a name bound to something else (a local function, another import) blocks the fix.
    The answer depends only on the file, so it is computed once per file and name (a fresh list each call).
    """
    key = ("helper_edits", name)
    cached = ctx.memo.get(key, ctx)
    if cached is ctx:
        cached = ctx.memo[key] = _helper_edits(ctx, name)
    return None if cached is None else list(cached)  # type: ignore[call-overload]


def _helper_edits(ctx: Context, name: str) -> list[Edit] | None:
    if outside_veomni(ctx):
        # no VeOmni tree around this file: its fixes use torch's accelerator API, never a veomni import
        return None
    if not ctx.project.veomni_available and patchgen.module_of(ctx.source.path) is None:
        # no veomni package in the tree, installed, or around this file: the import would be broken (one CLI note)
        return None
    # the module and names the tree's profile confirms (``api.defines``), or the built-in list outside a tree
    api = ctx.project.api
    module = api.device_module
    if name in ctx.source.text and _rebound(ctx.tree, name):
        # a parameter, local, loop target, nested def ... named like the helper: the inserted call could
        # reach that binding instead of the helper (R4-B1), so no safe fix is offered in this file
        return None
    bound = ctx.runtime_imports.get(name)
    if bound is not None:
        # ``veomni.utils.device.X``, ``...utils.device.X``, or ``.device.X`` from a sibling in veomni/utils
        return [] if bound.endswith(f"utils.device.{name}") or bound == f".device.{name}" else None
    for stmt in ctx.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return None
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        ):
            return None
    if not _helper_defined(ctx, name):
        return None  # the tree does not define this helper: no fix imports it
    if ctx.source.kind.spec:  # a spec's imports reach the generated file: absolute, with config.add_import
        return ctx.import_edits(module, name)
    # the file's own style (relative inside the veomni package), merged and sorted by core.imports
    return ctx.import_edits(device_module_for(ctx.source.path, ctx.tree, module), name)


def native_api(ctx: Context, helper: str) -> bool:
    """Whether a message names torch's own API rather than the VeOmni device helper ``helper``: outside VeOmni,
    or where the tree's device module lacks it (a `veomni` package that is not a recognised tree, a fork or a
    sparse checkout, whose own `utils/device.py` does not define it): a message must not send the user to a
    name the tree does not have."""
    return outside_veomni(ctx) or not _helper_defined(ctx, helper)


def _helper_defined(ctx: Context, name: str) -> bool:
    """Whether the tree's device module defines the helper ``name`` (the profile's answer; in a `veomni` package
    that is not a recognised tree, no ops/ or kernels/: a fork, a sparse checkout, the built-in names count only
    when the package beside the file defines them too). Asked once per file and name."""
    key = ("device-helper-defined", name)
    found = ctx.memo.get(key)
    if found is None:
        api = ctx.project.api
        module = api.device_module
        found = name in api.device_helpers and api.defines(module, name)
        if found and ctx.project.root is None:
            found = _package_defines(ctx.source.path, module, name)
        ctx.memo[key] = found
    return bool(found)


def _package_defines(path: str, module: str, name: str) -> bool:
    """False only when the ``veomni`` package holding ``path`` has ``module`` on disk and it does not define
    ``name`` (read statically). A package without that module (a model directory beside an installed veomni,
    as in a pre-commit environment) keeps the built-in answer."""
    from npu_lint.veomni.imports import ModuleIndex

    root = patchgen.veomni_root_of(os.path.abspath(path))
    if root is None or not os.path.isdir(os.path.join(root, "veomni")):
        return True
    index = ModuleIndex(root)
    return not index.has_module(module) or index.defines(module, name)


def _rebound(tree: ast.Module, name: str) -> bool:
    """Whether ``name`` is bound anywhere in the module other than by an import of the device helper
    (module-level defs and assignments are handled by the caller)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            hit = node.arg == name
        elif isinstance(node, ast.Name):
            hit = node.id == name and not isinstance(node.ctx, ast.Load)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            hit = node.name == name and node not in tree.body
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            hit = name in node.names
        elif isinstance(node, ast.ExceptHandler):
            hit = node.name == name
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)):
            hit = node.name == name
        elif isinstance(node, ast.MatchMapping):
            hit = node.rest == name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            # an import binding the name to anything but the helper itself (``from ...device import
            # get_device_type``, at any level, binds the same function) shadows it
            helper = isinstance(node, ast.ImportFrom) and (node.module or "").endswith("device")
            hit = any(
                (a.asname or a.name.split(".")[0]) == name and not (helper and a.name == name)
                for a in node.names
            )
        else:
            continue
        if hit:
            return True
    return False


def child_of(ctx: Context, node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(ancestor, child-on-the-path) pairs, innermost first."""
    chain = [*ctx.parents, node]
    return [(chain[i], chain[i + 1]) for i in range(len(chain) - 2, -1, -1)]


def in_annotation(ctx: Context, node: ast.AST) -> bool:
    for parent, child in child_of(ctx, node):
        if isinstance(parent, ast.arg) and parent.annotation is child:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is child:
            return True
        if isinstance(parent, ast.AnnAssign) and parent.annotation is child:
            return True
        if isinstance(parent, ast.Subscript) and (ctx.dotted(parent.value) or "").split(".")[-1] == "Literal":
            return True
        if isinstance(parent, (ast.stmt, ast.Lambda)):
            return False
    return False


def mentions_cuda_dispatch(ctx: Context, test: ast.AST) -> bool:
    """Whether a condition explicitly selects the CUDA backend (VeOmni's flag or device-type helper)."""
    for sub in ast.walk(test):
        if isinstance(sub, (ast.Name, ast.Attribute)):
            dotted = ctx.dotted(sub) or ""
            last = dotted.split(".")[-1]
            if last in ("IS_CUDA_AVAILABLE", "is_cuda"):
                return True
        if isinstance(sub, ast.Compare) and any(cuda_string(c) for c in [sub.left, *sub.comparators]):
            return True
        if isinstance(sub, ast.Compare) and any(
            isinstance(c, (ast.Tuple, ast.List, ast.Set)) and any(cuda_string(e) for e in c.elts)
            for c in sub.comparators
        ):
            return True
    return False


def cuda_attention_flags(ctx: Context) -> frozenset[str]:
    """Module-level flags set to True only in the ``try:`` that imports a CUDA-only attention library
    (``try: import flash_attn_interface; FLASH_ATTN_3_AVAILABLE = True``): on an Ascend host that import
    fails, so a branch taken only under such a flag is CUDA-only code."""
    memo_key = ("cuda-attention-flags",)
    found = ctx.memo.get(memo_key)
    if found is None:
        flags: set[str] = set()
        for stmt in ctx.tree.body:
            if not isinstance(stmt, ast.Try):
                continue
            imports = [s for s in stmt.body if isinstance(s, (ast.Import, ast.ImportFrom))]
            modules = [a.name for s in imports if isinstance(s, ast.Import) for a in s.names] + [
                s.module or "" for s in imports if isinstance(s, ast.ImportFrom) and not s.level
            ]
            if not modules or not all(vendor_map.family_of(m) == vendor_map.GPU_ATTENTION for m in modules):
                continue
            for sub in stmt.body:
                if (
                    isinstance(sub, ast.Assign)
                    and isinstance(sub.value, ast.Constant)
                    and sub.value.value is True
                ):
                    flags.update(t.id for t in sub.targets if isinstance(t, ast.Name))
        found = ctx.memo[memo_key] = frozenset(flags)
    return found  # type: ignore[return-value]


def _cuda_attention_test(ctx: Context, test: ast.AST) -> bool:
    """``if FLASH_ATTN_3_AVAILABLE:`` (or ``A or B`` of such flags, or ``A and ...``)."""
    if isinstance(test, ast.Name):
        return test.id in cuda_attention_flags(ctx)
    if isinstance(test, ast.BoolOp):
        parts = [_cuda_attention_test(ctx, v) for v in test.values]
        return all(parts) if isinstance(test.op, ast.Or) else any(parts)
    return False


def _guard_test(ctx: Context, test: ast.AST) -> bool:
    """``mentions_cuda_dispatch``, also through a local flag (``unsupported = not IS_CUDA_AVAILABLE``), or a
    flag only a CUDA-only attention library's import sets."""
    if mentions_cuda_dispatch(ctx, test):
        return True
    if _cuda_attention_test(ctx, test):
        return True
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if not names:
        return False
    func = ctx.function
    if func is None:
        return not names.isdisjoint(_module_cuda_flags(ctx))
    return not names.isdisjoint(_cuda_flag_names(ctx, func))


def _cuda_flag_names(ctx: Context, func: ast.AST) -> frozenset[str]:
    """Names a function assigns a CUDA-dispatch condition to, computed once per function (``Context.memo``):
    a function with many findings under many ``if``s is walked once, not once per finding."""
    key = ("cuda-flag-names", id(func))
    info = ctx.memo.get(key)
    if info is None:
        found: set[str] = set(_module_cuda_flags(ctx))
        for sub in ast.walk(func):
            if isinstance(sub, ast.Assign) and mentions_cuda_dispatch(ctx, sub.value):
                found.update(t.id for t in sub.targets if isinstance(t, ast.Name))
        info = ctx.memo[key] = (frozenset(found), func)  # the function is kept: its id stays unique
    return info[0]  # type: ignore[index, no-any-return]


def _module_cuda_flags(ctx: Context) -> frozenset[str]:
    """Module-level names bound to a CUDA-dispatch condition (``is_nvidia = device_platform == "cuda"``), and
    names bound to a conjunction with one of them (``is_hopper = is_nvidia and ...``): once per file."""
    found = ctx.memo.get("module-cuda-flags")
    if found is None:
        flags: set[str] = set()
        assigns = [s for s in ctx.tree.body if isinstance(s, ast.Assign)]
        changed = True
        while changed:
            changed = False
            for stmt in assigns:
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name) and t.id not in flags]
                if not names:
                    continue
                value = stmt.value
                hit = mentions_cuda_dispatch(ctx, value) and not isinstance(value, ast.IfExp)
                if not hit and isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And):
                    hit = any(isinstance(v, ast.Name) and v.id in flags for v in value.values)
                if hit:
                    flags.update(names)
                    changed = True
        found = ctx.memo["module-cuda-flags"] = frozenset(flags)
    return found  # type: ignore[return-value]


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def in_cuda_dispatch(ctx: Context, node: ast.AST) -> bool:
    """Inside a branch that explicitly selects CUDA (``if IS_CUDA_AVAILABLE:``, ``if get_device_type() ==
    "cuda":``, ``match device_type: case "cuda":``, ``x.is_cuda and ...``, or after ``if not
    IS_CUDA_AVAILABLE: return``): CUDA-only code there is deliberate."""
    for parent, child in child_of(ctx, node):
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            if _guard_test(ctx, parent.test):
                return True
        elif isinstance(parent, ast.BoolOp):
            # ``<CUDA test> and X`` / ``not <CUDA test> or X``: X is evaluated on CUDA hosts only (short circuit)
            for value in parent.values:
                if value is child:
                    break
                if isinstance(parent.op, ast.And) and _guard_test(ctx, value):
                    return True
                if (
                    isinstance(parent.op, ast.Or)
                    and isinstance(value, ast.UnaryOp)
                    and isinstance(value.op, ast.Not)
                    and _guard_test(ctx, value.operand)
                ):
                    return True
        elif isinstance(parent, ast.Dict):
            key = _dict_key_of(ctx, parent, child)
            if key is not None and cuda_string(key) and not _called_at_construction(child):
                return True  # a dispatch table: {"cuda": torch.cuda.empty_cache, "npu": ...}
        elif isinstance(parent, ast.match_case):
            for sub in ast.walk(parent.pattern):
                if isinstance(sub, ast.MatchValue) and cuda_string(sub.value):
                    return True
        elif isinstance(parent, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if backends.name_backend(parent.name) == backends.CUDA:
                return (
                    True  # ``class CudaKernelRequirement``, ``def triton_rope(...)``: CUDA code by its name
                )
        if isinstance(child, ast.stmt) and _after_cuda_exit(ctx, parent, child):
            return True
    return False


def _called_at_construction(value: ast.AST) -> bool:
    """A dict value that calls something when the dict is built (``{"cuda": torch.cuda.get_rng_state()}``): the
    call runs on every host, whatever its key says; a reference or a lambda (a dispatch table) does not."""
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def _dict_key_of(ctx: Context, table: ast.Dict, value: ast.AST) -> ast.expr | None:
    """The key of ``value`` in a dict display (positions memoised per dict: linear for large tables)."""
    memo_key = ("dict-values", id(table))
    info = ctx.memo.get(memo_key)
    if info is None:
        info = ctx.memo[memo_key] = ({id(v): i for i, v in enumerate(table.values)}, table)
    index = info[0].get(id(value))  # type: ignore[index]
    return table.keys[index] if index is not None else None


def _after_cuda_exit(ctx: Context, parent: ast.AST, child: ast.stmt) -> bool:
    """``child`` follows ``if not IS_CUDA_AVAILABLE: return`` in the same block.

    Linear per block: the first such guard of a block and the position of each statement are computed once
    per file (``Context.memo``), so a block with many findings is not rescanned for each of them."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if not isinstance(block, list) or not block:
            continue
        key = ("cuda-exit-block", id(block))
        info = ctx.memo.get(key)
        if info is None:
            positions = {id(stmt): i for i, stmt in enumerate(block)}
            first = next(
                (
                    i
                    for i, stmt in enumerate(block)
                    if (
                        isinstance(stmt, ast.If)
                        and isinstance(stmt.test, ast.UnaryOp)
                        and isinstance(stmt.test.op, ast.Not)
                        and _exits(stmt.body)
                        and _guard_test(ctx, stmt.test.operand)
                    )
                    or (
                        isinstance(stmt, ast.Assert) and _guard_test(ctx, stmt.test)
                    )  # assert device == "cuda"
                ),
                len(block),
            )
            info = ctx.memo[key] = (positions, first, block)  # the block is kept: its id stays unique
        positions, first, _ = info  # type: ignore[misc]
        index = positions.get(id(child))
        if index is not None and index > first:
            return True
    return False


def in_fstring(ctx: Context) -> bool:
    return any(isinstance(p, ast.JoinedStr) for p in ctx.parents)


# torch.cuda.<f>() with an exact VeOmni helper: helper name, and the arguments the helper accepts
# (positional count, keyword names) for the replacement to be exact.
EXACT_HELPERS: dict[str, tuple[str, int, frozenset[str]]] = {
    "synchronize": ("synchronize", 0, frozenset()),
    "current_device": ("get_device_id", 0, frozenset()),
    "empty_cache": ("empty_cache", 0, frozenset()),
    "set_device": ("set_device", 1, frozenset({"device"})),
    "current_stream": ("get_current_stream", 0, frozenset()),
    "stream": ("switch_to_specified_stream", 1, frozenset({"stream"})),
    "Stream": ("create_stream", 2, frozenset({"device", "priority"})),
    "Event": ("create_event", 2, frozenset({"enable_timing", "blocking"})),
}
# what ``torch.cpu`` offers: on a CPU-only host VeOmni's ``get_torch_device()`` is ``torch.cpu``, so a call of
# any other runtime function through it (``manual_seed``, ``empty_cache``...) raises AttributeError there,
# where ``torch.cuda.<f>`` was a no-op: such fixes are unsafe
CPU_NAMESPACE = frozenset(
    {
        "synchronize",
        "current_device",
        "set_device",
        "current_stream",
        "stream",
        "Stream",
        "Event",
        "device_count",
    }
)
CPU_HOST_REASON = (
    "on a CPU-only host `get_torch_device()` is `torch.cpu`, which has no `{name}` (AttributeError where "
    "`torch.cuda.{name}` did nothing)"
)
# torch.cuda attributes that torch.npu (torch_npu) mirrors with the same signature: `get_torch_device().<f>`.
MIRRORED = frozenset(
    {
        "synchronize", "current_device", "empty_cache", "set_device", "current_stream", "stream", "Stream",
        "Event", "device", "device_count", "default_stream", "memory_allocated", "max_memory_allocated",
        "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
        "memory_stats", "memory_summary", "mem_get_info", "manual_seed", "manual_seed_all", "seed",
        "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        "get_device_name", "get_device_properties", "is_bf16_supported", "ipc_collect", "set_stream",
    }
)  # fmt: skip
LEGACY_TENSOR_TYPES: dict[str, str] = {
    "FloatTensor": "torch.float32",
    "DoubleTensor": "torch.float64",
    "HalfTensor": "torch.float16",
    "BFloat16Tensor": "torch.bfloat16",
    "ByteTensor": "torch.uint8",
    "CharTensor": "torch.int8",
    "ShortTensor": "torch.int16",
    "IntTensor": "torch.int32",
    "LongTensor": "torch.int64",
    "BoolTensor": "torch.bool",
}
# calls whose first positional argument is a device (type) string
DEVICE_FIRST_ARG = (
    "torch.device",
    "torch.autocast",
    "torch.amp.autocast",
    "torch.set_default_device",
    "torch.get_device_module",
    "torch.amp.GradScaler",
    "torch.Generator",
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.init_device_mesh",
    "torch.distributed.device_mesh.DeviceMesh",
)
_KERNEL_WORDS = ("impl", "kernel", "triton", "tilelang", "flash", "cudnn", "liger", "fused", "cutlass", "fa3")


def is_device_name(name: str | None) -> bool:
    return bool(name) and ("device" in name.lower() or name == "map_location")  # type: ignore[union-attr]


def names_kernel(ctx: Context, node: ast.AST) -> bool:
    """A condition that selects a kernel implementation (``impl == "tilelang"``, ``use_triton``...)."""
    for sub in ast.walk(node):
        words: list[str] = []
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            words.append(sub.value)
        elif isinstance(sub, ast.Name):
            words.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.append(sub.attr)
        if any(w in word.lower() for word in words for w in _KERNEL_WORDS):
            return True
    return False


def is_requirement_stmt(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise):
        return True
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr in ("append", "add", "warning", "warn", "info")
    )


# -- NPU103 -------------------------------------------------------------------------------------------

FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "range", "tensor", "as_tensor", "rand", "randn",
        "randint", "randperm", "eye", "linspace", "logspace", "empty_strided", "tril_indices",
        "triu_indices", "bartlett_window", "hann_window", "hamming_window", "blackman_window", "normal",
        "scalar_tensor", "sparse_coo_tensor", "asarray",
    }
)  # fmt: skip
INIT_METHODS = frozenset(
    {
        "__init__", "_init_weights", "init_weights", "reset_parameters", "_reset_parameters", "post_init",
        "_initialize_weights", "initialize_weights", "from_pretrained", "_from_config", "from_config",
        "_post_init", "tie_weights", "_tie_weights", "reset_buffers",
    }
)  # fmt: skip
_MODULE_BASES = frozenset(
    {"Module", "ModuleList", "ModuleDict", "Sequential", "GradientCheckpointingLayer", "PreTrainedModel",
     "ModelMixin", "Embedding", "Linear", "LayerNorm", "Conv1d", "Conv2d", "Conv3d"}
)  # fmt: skip
# method calls a freshly allocated tensor can pass through before a device move (``.to(x.device)``)
HOST_SINKS = frozenset({"tolist", "item", "numpy", "cpu", "pin_memory"})
# tensor methods that return host values (ints, bools, strings), not tensors
SCALAR_METHODS = frozenset(
    {"size", "dim", "numel", "nelement", "element_size", "stride", "is_contiguous", "data_ptr", "get_device",
     "type", "is_floating_point", "is_complex", "storage_offset", "__len__"}
)  # fmt: skip
MOVES = frozenset({"to", "cuda", "npu", "type_as", "type"})
_DTYPE_WORDS = ("dtype", "float", "int", "bool", "half", "bfloat16", "long", "double", "complex")


def is_init_method(name: str) -> bool:
    return name in INIT_METHODS or name.startswith(("_init_", "init_"))


def module_classes(tree: ast.Module, ctx: Context) -> set[str]:
    """Top-level classes that are ``nn.Module`` subclasses (by base name, transitively within the file)."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, cls in classes.items():
            if name in out:
                continue
            for base in cls.bases:
                last = (ctx.dotted(base) or "").split(".")[-1]
                if last in _MODULE_BASES or last.endswith(("PreTrainedModel", "Module")) or last in out:
                    out.add(name)
                    changed = True
                    break
    return out


def spec_targets(tree: ast.Module) -> dict[str, str]:
    """Spec functions installed by ``@config.override_method("Cls.m")`` / ``replace_function("f")``:
    function name -> the method or function name they replace."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        for deco in stmt.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr in ("override_method", "replace_function", "modify_init")
            ):
                target = next((a.value for a in deco.args[:1] if isinstance(a, ast.Constant)), None)
                if deco.func.attr == "modify_init":
                    out[stmt.name] = "__init__"
                elif isinstance(target, str):
                    out[stmt.name] = target.split(".")[-1]
    return out


def _is_dtype_expr(ctx: Context, node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "dtype":
        return True  # ``.to(next(self.mlp.parameters()).dtype)``: a dtype, whatever it is read from
    dotted = ctx.dotted(node) or ""
    last = dotted.split(".")[-1].lower()
    # a word of the name (`torch.int32`, `compute_dtype`, `half_t`), not a substring (`keypoints`, `hint`)
    return any(
        part in _DTYPE_WORDS or part.rstrip("0123456789").lstrip("uq") in _DTYPE_WORDS
        for part in last.split("_")
        if part
    )


def moves_device(ctx: Context, call: ast.Call) -> bool:
    """``.to(...)``-style call that sets a device (not ``.to(torch.float32)``)."""
    func = call.func
    assert isinstance(func, ast.Attribute)
    if func.attr in ("cuda", "npu", "type_as"):
        return True
    if func.attr == "type":
        return any("cuda" in ast.dump(a) for a in call.args)
    if any(k.arg == "device" or k.arg is None for k in call.keywords):
        return True
    return bool(call.args) and not _is_dtype_expr(ctx, call.args[0])


def is_submodule_call(node: ast.AST) -> bool:
    """``self.norm(x)`` / ``self.layers[i](x)``: a submodule's output lives on the accelerator."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Subscript):
        func = func.value
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
        and not func.attr.startswith(("_", "get_", "compute_", "prepare_"))
    )


def zero_size(call: ast.Call) -> bool:
    """``torch.empty(0)`` / ``torch.empty([0])``: an empty placeholder argument, never computed with."""
    if len(call.args) != 1:
        return False
    arg = call.args[0]
    if isinstance(arg, (ast.List, ast.Tuple)) and len(arg.elts) == 1:
        arg = arg.elts[0]
    return isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value == 0


def bound_before(func: ast.AST, name: str, line: int) -> bool:
    """Every assignment of ``name`` in ``func`` comes before ``line`` (so ``name`` is bound there)."""
    lines = [
        t.lineno
        for n in walk(func)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id == name
    ]
    return bool(lines) and max(lines) < line


def to_cpu(call: ast.Call) -> bool:
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "to"
        and any(
            isinstance(a, ast.Constant) and a.value == "cpu"
            for a in [*call.args, *(k.value for k in call.keywords)]
        )
    )


def subtree(func: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(func))``: ``core.astutil.walk``'s list (memoised per file; read it, never modify it)."""
    return walk(func)


def names_with_parents(ctx: Context, func: ast.AST) -> dict[str, list[tuple[ast.Name, ast.AST]]]:
    """Every ``Name`` in ``func`` with its parent, by identifier, in ``ast.walk`` order (once per function)."""
    key = ("names_with_parents", id(func))
    cached = ctx.memo.get(key)
    if cached is not None and cached[0] is func:  # type: ignore[index]
        return cached[1]  # type: ignore[index]
    out: dict[str, list[tuple[ast.Name, ast.AST]]] = {}
    for child, parent in walk_pairs(func):
        if isinstance(child, ast.Name):
            out.setdefault(child.id, []).append((child, parent))  # type: ignore[arg-type]
    ctx.memo[key] = (func, out)
    return out


def _uses_after(
    ctx: Context, func: ast.AST, name: str, assign: ast.Assign, parents: dict[int, ast.AST]
) -> list[ast.Name] | None:
    """Loads of ``name`` after ``assign`` up to its next rebinding; None when the value is moved to a
    device or the host (``name.to(x.device)``, ``name.cpu()``, ``name.tolist()``) before that: later uses
    then no longer see the allocation."""
    line = assign.end_lineno or assign.lineno
    events = [
        (child.lineno, child.col_offset, child, parent)
        for child, parent in names_with_parents(ctx, func).get(name, ())
        if child.lineno > line
    ]
    events.sort(key=lambda e: (e[0], e[1]))
    uses: list[ast.Name] = []
    for _, _, child, parent in events:
        if isinstance(child.ctx, ast.Store):
            break
        if isinstance(parent, ast.Attribute):
            if parent.attr in HOST_SINKS:
                return None
            call = parents.get(id(parent))
            if parent.attr in MOVES and isinstance(call, ast.Call) and call.func is parent:
                if moves_device(ctx, call):
                    return None
        uses.append(child)
    return uses


_TENSOR_ATTRS = frozenset(
    (
        "device", "dtype", "shape", "size", "view", "reshape", "unsqueeze", "transpose",
        # methods only a tensor has (no Python number, list or dict offers them)
        "sigmoid", "softmax", "log_softmax", "topk", "masked_fill", "masked_fill_", "gather", "scatter",
        "scatter_", "scatter_add_", "index_select", "masked_select", "argsort", "contiguous", "permute",
        "expand", "expand_as", "squeeze", "flatten", "type_as", "new_zeros", "new_empty", "new_ones", "new_full",
        "bincount", "cumsum", "numel", "float", "bfloat16", "half", "matmul",
    )
)  # fmt: skip


def _names_used_as_tensors(func: ast.AST) -> frozenset[str]:
    """Names used as tensors in ``func`` (``name.device`` / ``.dtype`` / ``.shape``...), one walk per function."""
    memo = scoped_memo("device.tensor_uses")
    cached = memo.get(id(func))
    if cached is not None and cached[0] is func:
        return cached[1]
    names = frozenset(
        sub.value.id
        for sub in subtree(func)
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.attr in _TENSOR_ATTRS
    )
    memo[id(func)] = (func, names)
    return names


def used_as_tensor(func: ast.AST, name: str) -> bool:
    """Whether ``name`` is used as a tensor in ``func``."""
    return name in _names_used_as_tensors(func)


# -- NPU104 -------------------------------------------------------------------------------------------

LEGACY_STRING = re.compile(r"torch\.cuda\.(\w+Tensor)")


# -- NPU105 (and NPU102, which leaves these to it) ------------------------------------------------------------

# implementation names that exist only on CUDA: a CUDA test next to one of them guards a CUDA kernel
CUDA_ONLY_IMPLS = (
    "triton", "tilelang", "cudnn", "cutlass", "flash_attention", "flash_attn", "fa2", "fa3", "liger", "quack",
    "deep_gemm", "deepgemm", "sage", "mamba_ssm", "causal_conv1d_cuda", "flashmla", "cuda_graph",
)  # fmt: skip


def _names_cuda_only_impl(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            word = sub.value
        elif isinstance(sub, ast.Name):
            word = sub.id
        elif isinstance(sub, ast.Attribute):
            word = sub.attr
        else:
            continue
        lower = word.lower()
        if any(w in lower for w in CUDA_ONLY_IMPLS):
            return True
    return False


def cuda_presence_probe(ctx: Context, node: ast.Call) -> bool:
    """``torch.cuda.is_available()``: a host test that is False on an Ascend host (NPU105 reads it as a CUDA test
    when it guards an NPU path, NPU102 elsewhere)."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "is_available"
        and not node.args
        and not node.keywords
        and ctx.qualname(func) == "torch.cuda.is_available"
    )


def cuda_gate_condition(ctx: Context, node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(condition root, statement) when the CUDA test ``node`` is (part of) the test of an ``if`` / ``while`` /
    conditional expression, or the value of a flag assignment; None when it is used otherwise."""
    root: ast.AST = node
    for parent, child in child_of(ctx, node):
        if isinstance(parent, (ast.BoolOp, ast.UnaryOp)):
            root = parent
            continue
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is parent.test:
            return root, parent
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and child is parent.value:
            return root, parent
        return None
    return None


def cuda_gate_on_npu_path(ctx: Context, node: ast.AST) -> str | None:
    """What NPU path a CUDA test (``x.is_cuda``, ``x.device.type == "cuda"``) disables, or None.

    Reported: the condition also tests a dispatch guard (``slot.use_non_eager_impl``, ``is_bound``,
    ``.bound_kernel()``); the guarded branch calls a registry handle of the file; or the file is an NPU module
    or spec. Exempt: the condition, an enclosing ``if`` or the enclosing function names a CUDA-only
    implementation (``impl == "triton"``, ``"tilelang"``, ``use_flash_attn``...): that guard selects a CUDA
    kernel on purpose."""
    found = cuda_gate_condition(ctx, node)
    if found is None:
        return None
    root, stmt = found
    if _names_cuda_only_impl(root):
        return None
    for parent, child in child_of(ctx, stmt):
        if isinstance(parent, (ast.If, ast.While)) and child is not parent.test:
            if _names_cuda_only_impl(parent.test):
                return None
        elif isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(w in parent.name.lower() for w in CUDA_ONLY_IMPLS):
                return None
            break
    npu_test = npu_guard_in(root)
    if npu_test is not None:
        return f"the NPU guard `{ctx.source.segment(npu_test)}` it is conjoined with"
    for parent, child in child_of(ctx, stmt):
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            in_body = child is parent.body or (isinstance(parent.body, list) and child in parent.body)
            if in_body and npu_guard_in(parent.test, whole=True) is not None:
                return f"the NPU-only branch under `{ctx.source.segment(parent.test)}`"
        elif isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
    for sub in ast.walk(root):
        if isinstance(sub, ast.Attribute) and sub.attr in GUARD_ATTRS:
            return f"the dispatch guard `{ctx.source.segment(sub)}`"
        if isinstance(sub, ast.Call) and call_name(sub) == "bound_kernel":
            return f"the dispatch guard `{ctx.source.segment(sub)}`"
    if isinstance(stmt, ast.If):
        handles = module_handle_names(ctx)
        attrs = instance_handle_attrs(ctx) if "self." in ctx.source.text else frozenset()
        if handles or attrs:
            for s in stmt.body:
                for sub in ast.walk(s):
                    if not isinstance(sub, ast.Call):
                        continue
                    if isinstance(sub.func, ast.Name) and sub.func.id in handles:
                        return f"a call of the dispatch handle `{sub.func.id}`"
                    if self_attr(sub.func) in attrs:
                        return f"a call of the dispatch handle `{ctx.source.segment(sub.func)}`"
    if npu_targeted(ctx) or npu_module(ctx.source.path):
        return "code of an NPU module"
    if "torch_npu" in ctx.source.text:
        func = ctx.function
        if func is not None and not isinstance(func, ast.Lambda) and uses_torch_npu(func):
            return f"`{func.name}`, which calls a torch_npu kernel"
    return None


_NPU_FLAGS = frozenset({"IS_NPU_AVAILABLE", "is_torch_npu_available", "is_npu_available"})


def _is_npu_test(node: ast.AST) -> bool:
    """``IS_NPU_AVAILABLE``, ``is_torch_npu_available()``, ``<device type> == "npu"``: true only on NPU hosts."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name) and node.id in _NPU_FLAGS:
        return True
    if isinstance(node, ast.Attribute) and node.attr in _NPU_FLAGS:
        return True
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        return any(isinstance(c, ast.Constant) and c.value == "npu" for c in (node.left, node.comparators[0]))
    return False


npu_test = _is_npu_test  # public: NPU105 asks it of a whole scope


def npu_guard_in(test: ast.AST, whole: bool = False) -> ast.AST | None:
    """The NPU-only test among the operands of an ``and`` (or the whole test when ``whole``): a CUDA test
    conjoined with it can never hold, so the branch it guards is dead on the NPU it was written for."""
    if whole and _is_npu_test(test):
        return test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((v for v in test.values if _is_npu_test(v)), None)
    return None


def npu_module(path: str) -> bool:
    """A module written for the NPU: ``npu.py``, ``npu_*.py``, ``*_npu.py`` or one in an ``npu/`` directory."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1].removesuffix(".py")
    return stem == "npu" or stem.startswith("npu_") or stem.endswith("_npu") or "npu" in parts[-3:-1]


def bool_operand_removal(ctx: Context, node: ast.AST, parent: ast.AST | None = None) -> Edit | None:
    """An edit removing ``node`` from the ``and`` it is a direct operand of (``a and x.is_cuda`` -> ``a``);
    ``parent``: that ``and`` when ``node`` is not the node being visited."""
    if parent is None:
        parent = ctx.parents[-1] if ctx.parents else None
    if not (isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And)) or len(parent.values) < 2:
        return None
    values = parent.values
    i = next((k for k, v in enumerate(values) if v is node), None)
    if i is None:
        return None
    src = ctx.source
    if i > 0:
        start = src.node_range(values[i - 1])[1]
        end = src.node_range(node)[1]
    else:
        start = src.node_range(node)[0]
        end = src.node_range(values[1])[0]
    text = src.text[start:end]
    if "#" in text:
        return None
    return Edit(start, end, "")


# -- kernel code in scope (veomni.backends) -------------------------------------------------------------------


def kernel_backend(ctx: Context) -> str:
    """The backend a file under ``veomni/ops`` is written for (``veomni.backends``: "npu", "cuda" or "any"),
    asked once per file."""
    cached = ctx.memo.get("kernel-backend")
    if cached is None:
        cached = ctx.memo["kernel-backend"] = backends.file_backend(ctx.source.path, ctx.tree)
    return cached  # type: ignore[return-value]


def device_neutral_scope(ctx: Context) -> bool:
    """The file is held to device neutrality: model code, and kernel code that is not a CUDA kernel (Ascend
    adapters, eager fallbacks, registries, helpers: they run on NPU hosts); never tests."""
    kind = ctx.source.kind
    if kind.test:
        return False
    return kind.model_code or kernel_backend(ctx) != backends.CUDA
