"""Helpers shared by the rules of the semantics family (private to it)."""

from __future__ import annotations

import ast
import bisect
import functools
import os
import re

from npu_lint.core.astutil import dotted_name, nodes_of, resolve_relative, scoped_memo
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.rules._handles import (
    Handle,
    HandleTable,
    call_arg,
    foreign_attr,
    owner_class,
    spec_target,
    str_value,
)
from npu_lint.rules.base import Context, Rule, make_fix
from npu_lint.veomni import vendor_map
from npu_lint.veomni.norms import (
    KernelFunction,
    RmsContract,
    call_flags,
    class_contract_of,
    class_rms_contract,
    defines_norm_class,
    fill_kind,
    function_kernel,
    init_weights_fills,
    kernel_function,
    param_init_kind,
    rms_variant_contract,
    variant_for_contract,
    weight_init_faults,
)
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import (
    PatchedMethod,
    last_name,
    patched_methods,
    spec_source_module,
    upstream_class_method,
)

_CASTS = {"to", "float", "type_as", "type", "half", "bfloat16", "contiguous"}
_SIMPLE = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 1


def _paren_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Extend [start, end) over one pair of parentheses around it (whitespace allowed)."""
    i, j = start - 1, end
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    if i >= 0 and j < len(text) and text[i] == "(" and text[j] == ")":
        return i, j + 1
    return start, end


def offset_raw(ctx: Context, expr: ast.AST) -> str | None:
    """For `1 + w`, `1.0 + w.float()`, `w + 1`, `(1 + w).to(x.dtype)`: the text with the offset removed."""
    src = ctx.source
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        other = expr.right if _is_one(expr.left) else expr.left if _is_one(expr.right) else None
        if other is None:
            return None
        text = src.segment(other)
        return text if isinstance(other, _SIMPLE) else f"({text})"
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in _CASTS
        and isinstance(expr.func.value, ast.BinOp)
    ):
        inner = offset_raw(ctx, expr.func.value)
        if inner is None:
            return None
        start, end = src.node_range(expr.func.value)
        _, after = _paren_span(src.text, start, end)
        call_end = src.node_range(expr)[1]
        return inner + src.text[after:call_end]
    return None


def _assigned_in(func: ast.AST | None, name: str) -> list[ast.expr]:
    if func is None:
        return []
    values: list[ast.expr] = []
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            values.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            if node.target.id == name:
                values.append(node.value or node.target)  # type: ignore[arg-type]
    return values


def offset_inner(expr: ast.AST) -> ast.AST | None:
    """For `1 + w`, `w + 1`, `(1.0 + w).to(d)`, `w.float().add(1.0)`: the `w` node (no text needed: for code of
    another file)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _CASTS:
        expr = expr.func.value
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "add"
        and len(expr.args) == 1
        and not expr.keywords
        and _is_one(expr.args[0])
    ):
        return expr.func.value
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        if _is_one(expr.left):
            return expr.right
        if _is_one(expr.right):
            return expr.left
    return None


# torch's own RMSNorm function: `rms_norm(input, normalized_shape, weight, eps)` (a standard norm)
TORCH_RMS = frozenset({"torch.nn.functional.rms_norm", "torch.rms_norm"})
_TORCH_RMS_TEXT = ("F.rms_norm", "functional.rms_norm", "torch.rms_norm")


def is_torch_rms(call: ast.Call) -> bool:
    text = dotted_name(call.func) or ""
    return text.endswith(_TORCH_RMS_TEXT) and (text == "F.rms_norm" or text.startswith(("torch.", "nn.")))


def liger_offset_contract(call: ast.Call) -> str | None:
    """Liger's functional RMSNorm (`LigerRMSNormFunction.apply(x, w, eps, offset, casting_mode, ...)`,
    `liger_rms_norm(x, w, eps, offset=...)`) adds its `offset` argument to the weight: "offset" for a literal
    1, "standard" for 0 or none given (the default), None when it is not a literal."""
    node = call_arg(call, 3, "offset")
    if node is None:
        return "standard"
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return "standard" if node.value == 0 else "offset" if node.value == 1 else None
    return None


def weight_argument(call: ast.Call) -> ast.expr | None:
    """The weight a kernel call is given: second positional, or `weight=` (`gamma=` for torch_npu's kernel;
    third positional for torch's `F.rms_norm(x, shape, weight, eps)`)."""
    if is_torch_rms(call):
        return call_arg(call, 2, "weight")
    found = call_arg(call, 1, "weight")
    if found is None:
        found = next((k.value for k in call.keywords if k.arg == "gamma"), None)
    return found


def raw_weight_attr(expr: ast.AST, receiver: str = "self") -> str | None:
    """`self.weight`, `self.weight.float()`, `self.weight.to(x.dtype)` -> "weight" (``receiver``: the name the
    module goes by, `self` or a wrapper's first parameter)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _CASTS:
        expr = expr.func.value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == receiver:
        return expr.attr
    return None


def receiver_of(func: ast.AST | None) -> str:
    """The name a function calls its module by: `self` for a method, the first parameter of a module-level
    forward replacement written as a plain function (`def rms_norm_forward_npu(module, x)`)."""
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.args.args:
        return func.args.args[0].arg
    return "self"


def _per_tree(name: str, tree: ast.AST, compute):  # noqa: ANN001, ANN202
    """``compute(tree)`` once per tree within the engine's memo scope (``scoped_memo``; the answer is shared:
    read it, never modify it)."""
    memo = scoped_memo(name)
    hit = memo.get(id(tree))
    if hit is None or hit[0] is not tree:
        hit = memo[id(tree)] = (tree, compute(tree))
    return hit[1]


def _rms_norm_methods(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """(class, method) of the file's RMSNorm classes other than `__init__`: the methods of the classes it defines
    and a spec's functions that replace one (`@config.override_method("FooRMSNorm.forward")`), whose class is
    the upstream one. Computed once per tree (several RMSNorm rules ask)."""
    return _per_tree("semantics.rms_norm_methods", tree, _find_rms_norm_methods)


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _classes(tree: ast.Module) -> list[ast.ClassDef]:
    """The file's classes, nested ones included, in ``walk`` order, reached through statement lists only (a class
    is a statement: never inside an expression); the trees asked about are often other files', not walked."""
    out: list[ast.ClassDef] = []
    queue: list[ast.AST] = [tree]
    for node in queue:  # breadth first, each node's statement lists in field order: walk's order, restricted
        if isinstance(node, ast.ClassDef):
            out.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list and value and isinstance(value[0], _BLOCKS):
                queue.extend(value)
    return out


def _find_rms_norm_methods(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    out: list[tuple[str, ast.FunctionDef]] = []
    for cls in _classes(tree):
        if "rmsnorm" in cls.name.lower():
            out.extend(
                (cls.name, f) for f in cls.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"
            )
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        for deco in stmt.decorator_list:
            if not (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "override_method"
                and deco.args
            ):
                continue
            target = str_value(deco.args[0]) or ""
            owner, _, method = target.rpartition(".")
            if owner and method != "__init__" and "rmsnorm" in owner.lower():
                out.append((owner, stmt))
    return out


def eager_weight_products(tree: ast.Module) -> list[tuple[str, ast.expr, str, bool]]:
    """The eager RMSNorm math of the file's RMSNorm classes (the methods other than `__init__`, in a class of the
    file or a spec's replacement of one): each operand of a multiplication that is the class's weight, as (class,
    operand node, weight attribute, with the `1 +` offset). Computed once per tree."""
    return _per_tree("semantics.eager_weight_products", tree, _find_eager_weight_products)


def _find_eager_weight_products(tree: ast.Module) -> list[tuple[str, ast.expr, str, bool]]:
    out: list[tuple[str, ast.expr, str, bool]] = []
    for cls_name, func in _rms_norm_methods(tree):
        out.extend((cls_name, side, attr, offset) for side, attr, offset in weight_products(func))
    return out


def weight_products(func: ast.AST) -> list[tuple[ast.expr, str, bool]]:
    """Each operand of a multiplication in ``func`` that is the module's weight: (operand, attribute, with the
    `1 +` offset). A local holding the scale (`scale = 1.0 + self.weight`) counts, and so does the offset expanded
    into a sum (`x + x * self.weight`, `x * w + x`: `x * (1 + w)`)."""
    out: list[tuple[ast.expr, str, bool]] = []
    receiver = receiver_of(func)
    # `x + x * w` / `x * w + x` is `x * (1 + w)`: the offset written out as a sum (the applied scale, not its
    # spelling, is what counts)
    expanded: set[int] = set()
    for node in _walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for prod, addend in ((node.left, node.right), (node.right, node.left)):
                if isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult):
                    key = ast.dump(addend)
                    for side, other in ((prod.left, prod.right), (prod.right, prod.left)):
                        if ast.dump(other) == key:
                            expanded.add(id(side))
    for node in _walk(func):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        for side in (node.left, node.right):
            value = side
            if isinstance(side, ast.Name):
                values = _assigned_in(func, side.id)
                if len(values) != 1:
                    continue
                value = values[0]
            inner = offset_inner(value)
            attr = raw_weight_attr(inner if inner is not None else value, receiver)
            if attr is not None and "weight" in attr:
                out.append((side, attr, inner is not None or id(side) in expanded))
    return out


# -- zero-initialised weights -------------------------------------------------------------------------


# -- the shared collector ----------------------------------------------------------------------------


class _RmsNormState:
    """What the RMSNorm rules (NPU401-405) need from the traversal, collected once per file for all of them."""

    def __init__(self) -> None:
        self.handles = HandleTable()
        self.calls: list[tuple[ast.Call, ast.AST | None, str | None]] = []  # (call, function, class)
        self.classes: dict[str, ast.ClassDef] = {}
        self.init_patches: dict[str, ast.AST] = {}  # class -> spec function replacing its __init__
        self.source_module: str | None = None
        self.functions: list[tuple[ast.AST, str | None]] = []  # stack of (function, owning class)
        self.enclosing: dict[
            int, list[ast.AST]
        ] = {}  # id(function) -> the functions around it, outermost first
        self.reused: list[tuple[ast.Name, str]] = []  # (replacement= name, patched class) in a spec
        self.replaced: dict[str, str] = {}  # spec class -> the upstream class it replaces (replace_class)
        # (replacement_name node, target, dotted replacement) of create_patch_from_external
        self.externals: list[tuple[ast.expr, str, str]] = []
        self.spec_imports: dict[str, str] = {}  # name -> dotted, from a spec's config.add_import(...)
        self.local_handles: dict[tuple[int, str], list[Handle]] = {}  # (id(function), name) -> handles
        # a device patch's `apply_per_model_patches(targets={"rms_norm": "FooRMSNorm"}, extra_backends=...)`:
        # (the target class, or None; the `entry="mod:fn"` string nodes of its rms_norm backends that replace
        # the forward); "" until read
        self.dispatch_target: tuple[str | None, list[ast.Constant]] | str = ""


def _self_method(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A module-level function written as a method (`def forward_npu(self, x)`, or with the module under another
    name: `def forward_npu(module, x)`) that touches its weight: a forward replacement installed onto a class at run
    time (a kernel wrapper)."""
    args = func.args.args
    return bool(args) and any(
        isinstance(n, ast.Attribute)
        and n.attr == "weight"
        and isinstance(n.value, ast.Name)
        and n.value.id == args[0].arg
        for n in _walk(func)
    )


def _py_files_state(directory: str) -> tuple[tuple[str, int, int, int], ...]:
    """(name, size, mtime_ns, inode) of the directory's Python files: the cache key of what was read from them,
    so an edit (a long-running language server) is seen."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return ()
    out = []
    for entry in entries:
        if entry.name.endswith(".py"):
            try:
                st = entry.stat()
            except OSError:
                continue
            out.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(sorted(out))


def _norm_classes_in(directory: str) -> tuple[tuple[str, str, int], ...]:
    """(file, class, line) of the RMSNorm-like classes (a `*Norm` class whose `__init__` sets `self.weight`) that
    the Python files of one directory define, as they are now."""
    return _norm_classes_at(directory, _py_files_state(directory))


@functools.lru_cache(maxsize=64)
def _norm_classes_at(
    directory: str, state: tuple[tuple[str, int, int, int], ...]
) -> tuple[tuple[str, str, int], ...]:
    out = []
    for name, *_ in state:
        path = os.path.join(directory, name)
        parsed = load_file(path)  # the run's one tree of the file (shared with the file pass)
        if parsed is None or not defines_norm_class(parsed.text) or parsed.tree is None:
            continue
        for stmt in parsed.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name.endswith("Norm"):
                init = next(
                    (f for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None
                )
                if init is not None and any(
                    isinstance(t, ast.Attribute) and t.attr == "weight"
                    for n in _walk(init)
                    if isinstance(n, ast.Assign)
                    for t in n.targets
                ):
                    out.append((path, stmt.name, stmt.lineno))
    return tuple(out)


def _class_node(path: str, name: str, line: int) -> ast.ClassDef | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _class_node_at(path, name, line, (st.st_size, st.st_mtime_ns, st.st_ino))


@functools.lru_cache(maxsize=64)
def _class_node_at(path: str, name: str, line: int, state: tuple[int, int, int]) -> ast.ClassDef | None:
    parsed = load_file(path)
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    return next(
        (s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == name and s.lineno == line), None
    )


def _tree_norm_owner(ctx: Context, state: _RmsNormState) -> str | None:
    """The RMSNorm class a kernel wrapper written as a module-level method belongs to: the only RMSNorm-like
    class defined in the wrapper's own directory (the model package defines its norm there); its ClassDef is
    added to the file's classes so its weight initialisation and eps attribute are read."""
    if ctx.source.kind.generated or ctx.source.kind.spec or ctx.source.kind.kernel:
        return None  # a kernel package (`veomni/ops/kernels/rms_norm/`) serves every model, not its own class
    directory = os.path.dirname(os.path.abspath(ctx.source.path))
    found = {(n, p, ln) for p, n, ln in _norm_classes_in(directory)}
    if len({n for n, _, _ in found}) != 1 or len(found) != 1:
        return None
    name, path, line = next(iter(found))
    if name not in state.classes:
        node = _class_node(path, name, line)
        if node is None:
            return None
        state.classes[name] = node
    return name


def _dispatch_target(ctx: Context, state: _RmsNormState) -> tuple[str | None, list[ast.Constant]]:
    """The RMSNorm class a device patch dispatches (``apply_per_model_patches(targets={"rms_norm": "FooRMSNorm"},
    extra_backends={"rms_norm": {...: BackendSpec(entry="mod:fn", replace_forward=True)}})``) and the entry
    strings of its forward-replacing rms_norm backends. The class is read from the model package (an in-tree
    class of the directory) or from the transformers module of the same model."""
    if isinstance(state.dispatch_target, tuple):
        return state.dispatch_target
    found: tuple[str | None, list[ast.Constant]] = (None, [])
    state.dispatch_target = found
    if "apply_per_model_patches" not in ctx.source.text:
        return found
    assigned: dict[str, ast.expr] = {}
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            assigned[stmt.targets[0].id] = stmt.value
    for call in nodes_of(ctx.tree, ast.Call):
        if last_name(call.func) != "apply_per_model_patches":
            continue
        targets = next((k.value for k in call.keywords if k.arg == "targets"), None)
        if not isinstance(targets, ast.Dict):
            continue
        cls = next(
            (
                str_value(v)
                for k, v in zip(targets.keys, targets.values)
                if k is not None and str_value(k) == "rms_norm"
            ),
            None,
        )
        if not cls or not _resolve_target_class(ctx, state, cls):
            continue
        entries: list[ast.Constant] = []
        backends = next((k.value for k in call.keywords if k.arg == "extra_backends"), None)
        rms = None
        if isinstance(backends, ast.Dict):
            rms = next(
                (
                    v
                    for k, v in zip(backends.keys, backends.values)
                    if k is not None and str_value(k) == "rms_norm"
                ),
                None,
            )
        if isinstance(rms, ast.Dict):
            for spec in rms.values:
                if isinstance(spec, ast.Name):
                    spec = assigned.get(spec.id, spec)
                if not (isinstance(spec, ast.Call) and last_name(spec.func) == "BackendSpec"):
                    continue
                kws = {k.arg: k.value for k in spec.keywords}
                replace = kws.get("replace_forward")
                entry = kws.get("entry")
                if (
                    isinstance(replace, ast.Constant)
                    and replace.value is True
                    and "entry_is_factory" not in kws
                    and "target_override" not in kws
                    and isinstance(entry, ast.Constant)
                    and isinstance(entry.value, str)
                    and ":" in entry.value
                ):
                    entries.append(entry)
        found = (cls, entries)
        break
    state.dispatch_target = found
    return found


def _resolve_target_class(ctx: Context, state: _RmsNormState, cls: str) -> bool:
    if cls in state.classes:
        return True
    directory = os.path.dirname(os.path.abspath(ctx.source.path))
    for path, name, line in _norm_classes_in(directory):
        if name == cls:
            node = _class_node(path, name, line)
            if node is not None:
                state.classes[name] = node
                return True
    model = os.path.basename(directory)
    module = f"transformers.models.{model}.modeling_{model}"
    if state.source_module is None and upstream_class_method(module, cls, "__init__") is not None:
        state.source_module = module
        return True
    return False


# what the norm computes and what a wrong fill does to it, by the fill found (``report_init_faults``)
_INIT_FAULT_TEXT = {
    "zeros": (
        "`norm(x) * weight` (the upstream class starts it at ones, there is no `1 +` offset)",
        "multiplies every normalised activation by 0",
    ),
    "ones": (
        "`norm(x) * (1 + weight)` (its forward, or the upstream class, which starts the weight at zeros)",
        "scales every normalised activation by 2",
    ),
}


def first_report(rule: Rule, where: ast.AST) -> bool:
    """Whether ``where`` is reported by ``rule`` for the first time in this file (a rule visiting every function
    sees a nested function again with its parent)."""
    seen = rule.ctx.memo.setdefault((rule.code, "reported"), set())
    assert isinstance(seen, set)
    if id(where) in seen:
        return False
    seen.add(id(where))
    return True


def norm_code(ctx: Context) -> bool:
    """The files the RMSNorm variant rules read: model code, and the tree's kernel modules that define norm modules,
    kernel wrappers or forwards (``veomni/ops/kernels/rms_norm/...``, ``npu_rms_norm_gated.py``)."""
    return ctx.source.kind.model_code or (
        ctx.source.kind.kernel and not ctx.source.kind.test and "rms_norm" in ctx.source.text
    )


class _RmsNormCalls(Rule):
    """Collects handle declarations and RMSNorm handle calls; subclasses judge them in ``finish``.

    The first of NPU401/NPU402 instantiated for a file feeds a state shared through the context; the other
    only reads it.
    """

    node_types = (ast.Assign, ast.Call, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    leave_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        state = ctx.memo.get("rms_state")
        self.feeder = state is None
        if state is None:
            state = _RmsNormState()
            ctx.memo["rms_state"] = state
        self.state = state
        if not self.feeder:  # visit/leave do nothing for the reader: the walk need not call them
            self.node_types = ()
            self.leave_types = ()
        self.handles = state.handles
        self.classes = state.classes
        self.init_patches = state.init_patches

    @property
    def source_module(self) -> str | None:
        return self.state.source_module

    def leave(self, node: ast.AST) -> None:
        if self.feeder:
            self.state.functions.pop()

    def visit(self, node: ast.AST) -> None:
        if not self.feeder:
            return
        ctx = self.ctx
        state = self.state
        if isinstance(node, ast.Call):
            if (
                state.functions
                and (len(node.args) >= 2 or any(k.arg in ("weight", "gamma") for k in node.keywords))
                and isinstance(node.func, (ast.Name, ast.Attribute, ast.Call))
            ):
                func, cls = state.functions[-1]
                if func is not None:
                    state.calls.append((node, func, cls))
                    if id(func) not in state.enclosing:
                        state.enclosing[id(func)] = [f for f, _ in state.functions[:-1] if f is not None]
            elif not state.functions and ctx.source.kind.spec:
                self._note_reuse(node)
            if (
                not state.functions
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_import"
                and ctx.source.kind.spec
            ):
                module = str_value(call_arg(node, 0, "module"))
                names = call_arg(node, 1, "names")
                if module and isinstance(names, (ast.List, ast.Tuple)):
                    for elt in names.elts:
                        name = str_value(elt)
                        if name:
                            state.spec_imports[name] = f"{module}.{name}"
            if last_name(node.func) == "create_patch_from_external":
                target = str_value(call_arg(node, 0, "target"))
                module = str_value(call_arg(node, 1, "replacement_module"))
                name_node = call_arg(node, 2, "replacement_name")
                name = str_value(name_node)
                if target and module and name and name_node is not None and "RMSNorm" in name:
                    state.externals.append((name_node, target, f"{module}.{name}"))
        elif isinstance(node, ast.Assign):
            state.handles.visit_assign(ctx, node)
            value = node.value
            if state.functions and isinstance(value, ast.Call) and state.functions[-1][0] is not None:
                local = HandleTable._handle(value)
                if local is not None:
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            key = (id(state.functions[-1][0]), target.id)
                            state.local_handles.setdefault(key, []).append(local)
            if isinstance(value, ast.Call) and last_name(value.func) == "PatchConfig" and not state.functions:
                state.source_module = str_value(call_arg(value, 99, "source_module")) or state.source_module
        elif isinstance(node, ast.Lambda):
            state.functions.append((None, None))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owner = owner_class(ctx, node)
            if owner is None and not state.functions and _self_method(node):
                owner = _tree_norm_owner(ctx, state)
            if owner is None and _self_method(node):  # a forward built by a device patch's factory
                owner = _dispatch_target(ctx, state)[0]
            state.functions.append((node, owner))
            if isinstance(node, ast.FunctionDef):
                cls, method = spec_target(node)
                if cls is not None and method == "__init__":
                    state.init_patches[cls] = node
        elif isinstance(node, ast.ClassDef):
            if not state.functions:
                state.classes.setdefault(node.name, node)
                for deco in node.decorator_list:
                    if (
                        isinstance(deco, ast.Call)
                        and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr == "replace_class"
                    ):
                        target = str_value(call_arg(deco, 0, "target"))
                        if target:
                            state.replaced[node.name] = target

    def _note_reuse(self, node: ast.Call) -> None:
        """``config.override_method("Cls.meth", replacement=name)`` at module scope of a spec."""
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "override_method" and node.args):
            return
        target = str_value(node.args[0])
        repl = next((k.value for k in node.keywords if k.arg == "replacement"), None)
        if target is None or "." not in target or not isinstance(repl, ast.Name):
            return
        self.state.reused.append((repl, target.rpartition(".")[0]))

    def reused_functions(self) -> list[tuple[ast.Name, str, ast.FunctionDef, str]]:
        """Patch functions another spec defines that this spec re-registers for one of its RMSNorm classes
        (``override_method("FooRMSNorm.forward", replacement=imported_fn)``): (the ``replacement=`` name, the
        patched class, the function in the other file, that file)."""
        if not self.state.reused:
            return []
        memo = self.ctx.memo.get("rms_reused_functions")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out: list[tuple[ast.Name, str, ast.FunctionDef, str]] = []
        from npu_lint.veomni.patchgen import parse_spec

        try:
            spec = parse_spec(self.ctx.source.path, self.ctx.source.text, self.ctx.tree)
        except Exception:  # noqa: BLE001 - a spec we cannot model is not reported on
            spec = None
        for name_node, cls in self.state.reused if spec is not None else ():
            if "norm" not in cls.lower() or vendor_map.is_veomni_kernel(self.ctx.qualname(name_node) or ""):
                continue  # a kernel function of the tree: ``method_kernel_calls``
            ref = spec.resolve(name_node.id)  # type: ignore[union-attr]
            if ref is None or ref.path == self.ctx.source.path or not isinstance(ref.node, ast.FunctionDef):
                continue
            out.append((name_node, cls, ref.node, ref.path))
        self.ctx.memo["rms_reused_functions"] = out
        return out

    def reused_rms_calls(self) -> list[tuple[ast.Call, ast.AST, str | None, Handle, ast.Name]]:
        """RMSNorm handle calls inside a patch function another spec defines and this spec re-registers
        (``override_method(..., replacement=imported_fn)``), with the handles this spec declares:
        (call in the other file, its function, class, handle, the ``replacement=`` name to report at)."""
        if not self.state.reused:
            return []
        memo = self.ctx.memo.get("rms_reused")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out: list[tuple[ast.Call, ast.AST, str | None, Handle, ast.Name]] = []
        from npu_lint.veomni.patchgen import parse_spec

        try:
            spec = parse_spec(self.ctx.source.path, self.ctx.source.text, self.ctx.tree)
        except Exception:  # noqa: BLE001 - a spec we cannot model is not reported on
            spec = None
        for name_node, cls in self.state.reused if spec is not None else ():
            ref = spec.resolve(name_node.id)  # type: ignore[union-attr]
            if ref is None or ref.path == self.ctx.source.path or isinstance(ref.node, ast.ClassDef):
                continue
            for call in _walk(ref.node):
                if not isinstance(call, ast.Call) or weight_argument(call) is None:
                    continue
                handle = self.handles.resolve(self.ctx, call.func, cls)
                if handle is not None and handle.op == "rms_norm":
                    out.append((call, ref.node, cls, handle, name_node))
        self.ctx.memo["rms_reused"] = out
        return out

    def all_rms_calls(self) -> list[tuple[ast.Call, ast.AST | None, str | None, Handle, ast.Name | None]]:
        """``rms_calls`` of this file (anchor None) and ``reused_rms_calls`` (anchored at ``replacement=``)."""
        out: list[tuple[ast.Call, ast.AST | None, str | None, Handle, ast.Name | None]] = [
            (c, f, k, h, None) for c, f, k, h in self.rms_calls()
        ]
        out.extend(self.reused_rms_calls())
        return out

    def rms_calls(self) -> list[tuple[ast.Call, ast.AST | None, str | None, Handle]]:
        """RMSNorm handle calls of this file (computed once per file, shared by the RMSNorm rules)."""
        memo = self.ctx.memo.get("rms_calls")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out = []
        for call, func, cls in self.state.calls:
            handle = self.handles.resolve(self.ctx, call.func, cls)
            if handle is not None and foreign_attr(self.ctx.tree, self.handles, call.func, handle, cls):
                continue  # an attribute of a base defined elsewhere, not of the file's class of that name
            if handle is None and isinstance(call.func, ast.Name):  # a handle local to the function
                found = self.state.local_handles.get((id(func), call.func.id), [])
                if len(found) == 1:
                    handle = found[0]
            if handle is not None and handle.op == "rms_norm" and weight_argument(call) is not None:
                out.append((call, func, cls, handle))
        self.ctx.memo["rms_calls"] = out
        return out

    # -- is the class's weight zero-initialised?
    def _module_of_file(self) -> str | None:
        if self.source_module:
            return self.source_module
        head = self.ctx.source.text[:4096]
        for line in head.splitlines():
            stripped = line.lstrip("# ").strip()
            if stripped.startswith("Source:"):
                return stripped.split(":", 1)[1].strip() or None
        if self.ctx.source.kind.spec:  # a spec built on another one: its base spec's source module
            memo = self.ctx.memo.get("rms_spec_source", "")
            if memo == "":
                memo = spec_source_module(self.ctx.source.path, self.ctx.source.text, self.ctx.tree)
                self.ctx.memo["rms_spec_source"] = memo
            return memo  # type: ignore[return-value]
        return None

    def init_faults(self) -> list[tuple[ast.AST, str, str, str]]:
        """The file's RMSNorm weights initialised against what the norm computes (``norms.weight_init_faults``),
        read once per file for NPU402 and NPU404."""
        found = self.ctx.memo.get("rms_init_faults")
        if found is None:
            found = []
            if "RMSNorm" in self.ctx.source.text:
                found = weight_init_faults(self.ctx.tree, self._module_of_file(), self.init_patches)
            self.ctx.memo["rms_init_faults"] = found
        return found  # type: ignore[return-value]

    def report_init_faults(self, found: str) -> None:
        """Report the file's norm weights initialised to ``found`` where the norm's formula wants the other fill:
        zeros under `norm(x) * weight` (NPU402), ones under `norm(x) * (1 + weight)` (NPU404)."""
        expected = "ones" if found == "zeros" else "zeros"
        computes, effect = _INIT_FAULT_TEXT[found]
        for node, cls, got, want in self.init_faults():
            if got == found and want == expected:
                self.report(
                    node,
                    f"`{cls}`'s weight starts at {found} here, but the norm computes {computes}: a fresh or partly "
                    f"loaded model {effect}; initialise the weight to {expected}",
                )

    def zero_init(self, cls: str | None, attr: str) -> bool:
        return self.weight_kind(cls, attr) == "zeros"

    def _local_init(self, cls: str) -> ast.FunctionDef | None:
        node = self.classes.get(cls)
        if node is None:
            return None
        return next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)

    def weight_kind(self, cls: str | None, attr: str, depth: int = 0) -> str | None:
        """How the class initialises ``self.<attr>``: "zeros" | "ones" | "other" | None (unknown).

        Read from a spec's ``__init__`` patch, the class's own ``__init__`` in the file, its bases (in the file
        or upstream transformers), or, for a patched copy of an upstream class, the upstream class. A model's
        ``_init_weights`` of the file filling the class's weight otherwise (`nn.init.zeros_(module.weight)` under
        `isinstance(module, Cls)`) makes it unknown: which of the two a loaded model starts from is not read."""
        found = self._weight_kind(cls, attr, depth)
        if found in ("ones", "zeros") and attr == "weight" and cls is not None and depth == 0:
            fills = init_weights_fills(self.ctx.tree, cls)
            if fills and fills != {found}:
                return None
        return found

    def _weight_kind(self, cls: str | None, attr: str, depth: int = 0) -> str | None:
        if cls is None or depth > 6:
            return None
        patch = self.init_patches.get(cls)
        if patch is not None:
            result = param_init_kind(patch, attr)
            if result is not None:
                return result
        node = self.classes.get(cls)
        if node is not None:
            init = self._local_init(cls)
            if init is not None:
                # `super().__init__(...)` then `self.weight.data.zero_()`: the fill is what it starts at
                result = param_init_kind(init, attr) or fill_kind(init, attr)
                if result == "other":  # created empty: filled by another method (`reset_parameters`)?
                    filled = [
                        fill_kind(f, attr)
                        for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name != "__init__"
                    ]
                    kinds = {k for k in filled if k is not None}
                    if len(kinds) == 1:
                        return kinds.pop()
                elif result in ("ones", "zeros") and any(
                    fill_kind(f, attr) not in (None, result)
                    for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name != "__init__"
                ):
                    return None  # refilled otherwise by another method (`reset_parameters`): which one runs last?
                if result is not None:
                    return result
            for base in node.bases:
                name = last_name(base)
                if name in self.classes and name != cls:
                    result = self._weight_kind(name, attr, depth + 1)
                    if result is not None:
                        return result
                    continue
                target = self.ctx.imports.get(name or "", "")
                if target.startswith("transformers."):
                    mod, _, real = target.rpartition(".")
                    up = upstream_class_method(mod, real, "__init__")
                    result = param_init_kind(up, attr) if up is not None else None
                    if result is not None:
                        return result
            if init is not None or node.bases:
                return None
        # not set in the file: a patched copy of an upstream class (spec, generated file) reads upstream
        module = self._module_of_file()
        if module and module.startswith("transformers."):
            up = upstream_class_method(module, self.state.replaced.get(cls, cls), "__init__")
            return param_init_kind(up, attr) if up is not None else None
        return None

    def external_rms(self) -> list[tuple[ast.expr, str, str, str, RmsContract]]:
        """``create_patch_from_external(target=<RMSNorm class>, replacement=<vendor RMSNorm>)``: (the
        replacement_name node, target, dotted replacement, the replacement's contract, the target's contract)."""
        out = []
        for node, target, dotted in self.state.externals:
            kernel = vendor_map.lookup(dotted)
            if (
                kernel is None
            ):  # another model's norm class (transformers, or the tree's own), read from source
                other = class_contract_of(dotted, self.ctx.source.path)
                contract = (
                    None
                    if other is None
                    else "offset"
                    if other.gemma_style
                    else "standard"
                    if other.standard_style
                    else None
                )
            elif kernel.op != "rms_norm":
                continue
            else:
                contract = (
                    "offset" if "gemma" in dotted.lower() else rms_variant_contract(None, kernel.variant)
                )
            mine = self.class_contract(target)
            if contract is not None and mine is not None:
                out.append((node, target, dotted, contract, mine))
        return out

    def class_contract(self, cls: str | None) -> RmsContract | None:
        """What the model's RMSNorm class computes: its weight init (as above), and from the upstream class
        (or the class in the file when it is not an upstream one) the offset, the eps attribute, the upcast."""
        if cls is None:
            return None
        init_kind = self.weight_kind(cls, "weight")
        module = self._module_of_file()
        forward = init = None
        if module and module.startswith("transformers."):
            forward = upstream_class_method(module, cls, "forward")
            init = upstream_class_method(module, cls, "__init__")
        if forward is None and init is None:
            init = self._local_init(cls)
        base = class_rms_contract(init, forward)
        return RmsContract(init_kind or base.weight_init, base.offset, base.eps_attr, base.upcast)

    def assigned_attrs(self, cls: str | None) -> set[str] | None:
        """Attributes the class's effective ``__init__`` assigns on self (None: no ``__init__`` read)."""
        if cls is None:
            return None
        inits: list[ast.AST] = []
        for init in (self.init_patches.get(cls), self._local_init(cls)):
            if init is not None:
                inits.append(init)
        module = self._module_of_file()
        if not inits and module and module.startswith("transformers."):
            up = upstream_class_method(module, cls, "__init__")
            if up is not None:
                inits.append(up)
        if not inits:
            return None
        out: set[str] = set()
        for init in inits:
            for node in _walk(init):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else ([node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
                )
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        out.add(target.attr)
        return out

    def contract_of(self, handle: Handle) -> str | None:
        """The registry contract of an RMSNorm handle's variant ("offset" | "standard" | ...)."""
        return rms_variant_contract(self.ctx.project, handle.raw_variant or handle.variant)

    def _call_qualname(self, call: ast.Call, func: ast.AST | None) -> str | None:
        """The dotted name a call reaches: module imports, a spec's ``add_import``, and the imports of the
        enclosing function (a kernel imported lazily inside the patched forward)."""
        node = call.func
        if isinstance(node, ast.Name) and node.id in self.state.spec_imports:
            return self.state.spec_imports[node.id]
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(
            node, (ast.Name, ast.Attribute)
        ):
            dotted = self.ctx.dotted(node)
            head, _, rest = (dotted or "").partition(".")
            if dotted and self.ctx.may_be_imported(head):
                local = self._imports_in_scope(func)
                if head in local:
                    full = f"{local[head]}.{rest}" if rest else local[head]
                    return resolve_relative(self.ctx.source.path, full) if full.startswith(".") else full
        found = self.ctx.qualname(node)
        if found and found.startswith("."):
            return resolve_relative(self.ctx.source.path, found)
        return found

    def _imports_in_scope(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
        """The imports a call inside ``func`` (its innermost function) sees: those of the functions enclosing
        ``func`` (a factory's imports) first, then ``func``'s own; computed once per function."""
        key = ("rms-scope-imports", id(func))
        found = self.ctx.memo.get(key)
        if found is None:
            local: dict[str, str] = {}
            outers = self.state.enclosing.get(id(func))
            if outers is None:  # not recorded by the walk: the functions whose lines hold ``func``
                first, last = func.lineno, func.end_lineno or func.lineno
                outers = [
                    o
                    for o in functions_of(self.ctx.tree)
                    if o is not func and o.lineno <= first and last <= (o.end_lineno or o.lineno)
                ]
            for outer in outers:
                local.update(self.ctx.local_imports(outer))
            local.update(self.ctx.local_imports(func))
            found = self.ctx.memo[key] = local
        return found  # type: ignore[return-value]

    def vendor_rms_calls(self) -> list[tuple[ast.Call, ast.AST | None, str | None, str]]:
        """Direct vendor RMSNorm kernel calls given a weight (`torch_npu.npu_rms_norm(x, w, ...)`,
        `standard_rms_norm_forward_npu(x, w, eps)` of the tree's kernel module): (call, func, class, name).
        Method-style kernels (`rms_norm_forward_npu(self, x)`) are in ``method_kernel_calls``."""
        memo = self.ctx.memo.get("rms_vendor_calls")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out = []
        for call, func, cls in self.state.calls:
            qual = self._call_qualname(call, func)
            if not qual:
                continue
            if "." not in qual and weight_argument(call) is not None:
                local = self.local_kernel(qual)
                if local is not None and not local.method_style:
                    out.append((call, func, cls, qual))
                continue
            if (qual in TORCH_RMS or is_torch_rms(call)) and weight_argument(call) is not None:
                out.append((call, func, cls, "torch.nn.functional.rms_norm"))
                continue
            kernel = vendor_map.lookup(qual)
            if kernel is None or weight_argument(call) is None:
                continue
            found = kernel_function(qual, self.ctx.source.path)
            if found is not None and (found.method_style or not found.rms):
                continue
            if kernel.op != "rms_norm" and found is None:
                continue
            out.append((call, func, cls, qual))
        self.ctx.memo["rms_vendor_calls"] = out
        return out

    def local_kernel(self, name: str) -> KernelFunction | None:
        """A module-level function of this file that wraps an RMSNorm kernel (`def _fused_norm(x, w, eps): return
        torch_npu.npu_rms_norm(x, w, eps)[0]`), read as a kernel function; None for a forward replacement of a
        class (decorated) or a function that calls no RMSNorm kernel."""
        memo = self.ctx.memo.get("rms_local_kernels")
        if memo is None:
            memo = {}
            for stmt in self.ctx.tree.body:
                if (
                    isinstance(stmt, ast.FunctionDef)
                    and not stmt.decorator_list
                    and self._wraps_vendor_rms(stmt)
                ):
                    found = function_kernel(stmt)
                    if found.contract is not None:
                        memo[stmt.name] = found
            self.ctx.memo["rms_local_kernels"] = memo
        return memo.get(name)  # type: ignore[union-attr]

    def _wraps_vendor_rms(self, func: ast.FunctionDef) -> bool:
        """``func`` calls a vendor RMSNorm kernel whose weight is used as given (`torch_npu.npu_rms_norm`, Liger's
        functional norm): not a dispatch handle, whose variant decides."""
        if "rms" not in self.ctx.source.segment(func).lower():
            return False
        local = self.ctx.local_imports(func)
        for node in _walk(func):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else None
            qual = local.get(name) if name in local else self.ctx.qualname(node.func)  # type: ignore[arg-type]
            if not qual or not qual.startswith(("torch_npu.", "liger_kernel.")):
                continue
            kernel = vendor_map.lookup(qual)
            if kernel is not None and kernel.op == "rms_norm" and kernel.variant == "standard":
                return True
        return False

    def kernel_contract(self, qual: str, call: ast.Call | None = None) -> str | None:
        """What a vendor RMSNorm kernel does with its weight: the tree's kernel function read from its source
        (``qwen3_5_rms_norm_forward_npu`` adds 1: "offset"), else the vendor table (`torch_npu.npu_rms_norm`:
        "standard")."""
        if qual in TORCH_RMS:
            return "standard"
        if call is not None and qual.startswith("liger_kernel") and "rms" in qual.lower():
            return liger_offset_contract(call)
        found = self.local_kernel(qual) if "." not in qual else None
        flags = call_flags(call) if call is not None else None  # `zero_centered=True` given, or its default
        if found is not None and flags is not None:
            func = next(s for s in self.ctx.tree.body if isinstance(s, ast.FunctionDef) and s.name == qual)
            found = function_kernel(func, self.ctx.tree, flags)
        if found is None:
            found = kernel_function(qual, self.ctx.source.path, flags)
        if found is not None:
            return found.contract
        kernel = vendor_map.lookup(qual)
        return rms_variant_contract(None, kernel.variant) if kernel is not None else None

    def method_kernel_calls(self) -> list[tuple[ast.expr, ast.AST | None, str | None, str, KernelFunction]]:
        """Calls of a method-style RMSNorm kernel of the tree given the module itself (`rms_norm_forward_npu(self,
        x)` in a patched forward), and such a kernel registered as the forward (the ``replacement=`` name): (node,
        func, class, name, the kernel as its source reads). Computed once per file (NPU402, NPU403, NPU405 ask)."""
        memo = self.ctx.memo.get("rms_method_kernel_calls")
        if memo is not None:
            return memo  # type: ignore[return-value]
        out = self.ctx.memo["rms_method_kernel_calls"] = self._method_kernel_calls()
        return out

    def _method_kernel_calls(self) -> list[tuple[ast.expr, ast.AST | None, str | None, str, KernelFunction]]:
        out = []
        for call, func, cls in self.state.calls:
            if not call.args or not isinstance(call.args[0], ast.Name):
                continue
            if call.args[0].id != receiver_of(func):
                continue
            qual = self._call_qualname(call, func)
            if not qual:
                continue
            if "." not in qual:
                found = self.local_kernel(qual)
            elif vendor_map.is_veomni_kernel(qual):
                found = kernel_function(qual, self.ctx.source.path)
            else:
                continue
            if found is not None and found.method_style and found.rms:
                out.append((call, func, cls, qual, found))
        cls_target, entries = _dispatch_target(self.ctx, self.state)
        for entry in entries:
            module, _, name = entry.value.partition(":")
            qual = f"{module}.{name}"
            # a wrapper of the model package reports in its own file; a kernel function of the tree here
            found = kernel_function(qual, self.ctx.source.path) if vendor_map.is_veomni_kernel(qual) else None
            if found is not None and found.method_style and found.rms:
                out.append((entry, None, cls_target, qual, found))
        # a spec registering a method-style kernel of the tree as a norm's forward
        # (`override_method("FooRMSNorm.forward", replacement=rms_norm_forward_npu)`): anchored at the name
        for name_node, cls in self.state.reused:
            qual = self.ctx.qualname(name_node)
            if "norm" not in cls.lower() or not qual or not vendor_map.is_veomni_kernel(qual):
                continue
            found = kernel_function(qual, self.ctx.source.path)
            if found is not None and found.method_style and found.rms:
                out.append((name_node, None, cls, qual, found))  # type: ignore[arg-type]
        return out

    def variant_fix(self, handle: Handle, contract: str, reason: str) -> Fix | None:
        """Switch a literal handle declaration to the variant the tree's registry names for ``contract``."""
        ctx = self.ctx
        node = call_arg(handle.call, 1, "variant")
        if node is None or str_value(node) is None:
            return None
        name = variant_for_contract(ctx.project, contract, handle.kind)
        new = f'"{name}"'
        if handle.block is not None:
            span = handle.block.offsets(ctx, node)
            if span is None:
                return None
            edit = Edit(span[0], span[1], new)
        else:
            edit = ctx.replace(node, new)
        return make_fix(f"Switch the handle to the {new} variant", [edit], Applicability.UNSAFE, reason)


# -- NPU401 -----------------------------------------------------------------------------------------


# -- NPU402 -----------------------------------------------------------------------------------------


# -- loss paths (NPU41x) ------------------------------------------------------------------------------

LOSS_CLASSES = ("ForCausalLM", "ForConditionalGeneration")
_LOSS_FUNCS = {"ForCausalLMLoss", "fixed_cross_entropy", "causal_lm_loss"}
_DIRECT_CE = {"cross_entropy", "CrossEntropyLoss"}


class LossRule(Rule):
    """Base of the NPU41x rules: each patched loss forward of the file, paired with the upstream forward."""

    node_types = ()

    def finish(self) -> None:
        ctx = self.ctx
        memo_key = "loss_patched"
        found = ctx.memo.get(memo_key)
        if found is None:
            text = ctx.source.text
            if "forward" not in text or (
                "ForCausalLM" not in text and "ForConditionalGeneration" not in text
            ):
                found = []
            else:
                found = patched_methods(ctx.tree, text, "forward", LOSS_CLASSES, path=ctx.source.path)
            ctx.memo[memo_key] = found
        for patched in found:
            self.check(patched)

    def check(self, patched: PatchedMethod) -> None:  # pragma: no cover - interface
        pass


def loss_calls(func: ast.AST) -> list[ast.Call]:
    """Calls that compute the causal-LM loss: `self.loss_function(...)`, the loss helpers, a loss handle
    (cached per function: several rules ask about the same upstream and patched forwards)."""
    memo = scoped_memo("semantics.loss_calls")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    out = _loss_calls(func)
    memo[id(func)] = (func, out)
    return out


def _loss_calls(func: ast.AST) -> list[ast.Call]:
    out = []
    for node in _walk(func):
        if not isinstance(node, ast.Call):
            continue
        name = last_name(node.func)
        if name in ("loss_function", *_LOSS_FUNCS) or (
            name is not None and ("causal_lm_loss" in name or "cross_entropy" in name or name.endswith("_ce"))
        ):
            out.append(node)
    return out


def direct_ce_calls(func: ast.AST) -> list[ast.Call]:
    out = []
    for node in _walk(func):
        if isinstance(node, ast.Call):
            if last_name(node.func) in _DIRECT_CE:
                out.append(node)
            elif isinstance(node.func, ast.Call) and last_name(node.func.func) in _DIRECT_CE:
                out.append(node)
    return out


def mentions_attr(func: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in _walk(func))


def names_in(func: ast.AST) -> set[str]:
    return {n.id for n in _walk(func) if isinstance(n, ast.Name)}


def forwards_kwargs(call: ast.Call) -> bool:
    return any(kw.arg is None for kw in call.keywords)


def params_of(func: ast.FunctionDef) -> list[str]:
    args = func.args
    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


def def_span(ctx: Context, func: ast.FunctionDef) -> tuple[int, int, int, int]:
    """The `def name` of a function, as a report range (line 1-based, columns in code points)."""
    line = func.lineno
    text = ctx.source.line_text(line)  # the line `ast` numbers (str.splitlines also breaks at form feeds)
    col = text.find("def ")
    col = col if col >= 0 else 0
    return line, col, line, col + 4 + len(func.name)


def class_methods(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """(class, method) pairs of a file: methods of its classes, and a spec's functions that replace a method
    (`@config.override_method("Cls.meth")`, `@config.modify_init("Cls")`)."""
    out: list[tuple[str, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            out.extend((stmt.name, item) for item in stmt.body if isinstance(item, ast.FunctionDef))
        elif isinstance(stmt, ast.FunctionDef):
            for deco in stmt.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.args):
                    continue
                target = str_value(deco.args[0])
                if target is None:
                    continue
                if deco.func.attr == "modify_init":
                    out.append((target, stmt))
                elif deco.func.attr == "override_method" and "." in target:
                    out.append((target.rpartition(".")[0], stmt))
    return out


def functions_of(
    tree: ast.Module, lines: str | list[str] | None = None, *words: str
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of a file, nested ones included (computed once per tree); with ``lines`` (the file's
    lines) and ``words``, only the functions whose text contains one of the words (a cheap pre-filter)."""
    memo = scoped_memo("semantics.functions")
    hit = memo.get(id(tree))
    if hit is None or hit[0] is not tree:
        found = []
        stack: list[ast.AST] = [tree]
        while stack:  # statements only: functions live in statement bodies, never inside expressions
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(node)
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list):
                    stack.extend(stmts)
        found.sort(key=lambda n: (n.lineno, n.col_offset))
        memo[id(tree)] = hit = (tree, found)
    funcs = hit[1]
    if lines is None or not words:
        return funcs
    memo = scoped_memo("semantics.line_starts")  # the text and its line starts, once per file
    known = memo.get(id(lines))
    if known is None or known[0] is not lines:
        text = lines if isinstance(lines, str) else "\n".join(lines)
        known = memo[id(lines)] = (lines, text, [0] + [m.end() for m in re.finditer("\n", text)])
    text, starts = known[1], known[2]
    hits: set[int] = set()  # 1-based numbers of the lines holding a word: one find per line and word
    last = len(starts)
    for word in words:
        at = text.find(word)
        while at >= 0:
            line = bisect.bisect_right(starts, at)
            hits.add(line)
            if line >= last:
                break
            at = text.find(word, starts[line])
    marked = sorted(hits)
    if not marked:
        return []
    out = []
    for func in funcs:
        k = bisect.bisect_left(marked, func.lineno)
        if k < len(marked) and marked[k] <= (func.end_lineno or func.lineno):
            out.append(func)
    return out


def path_before(func: ast.AST, target: ast.AST) -> list[ast.AST]:
    """What runs before ``target`` on its path through ``func``: the earlier statements of every enclosing
    statement list and the tests of the enclosing branches (empty when ``target`` is not inside ``func``)."""

    def visit(node: ast.AST) -> list[ast.AST] | None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if stmt is target or any(n is target for n in _walk(stmt)):
                    head: list[ast.AST] = list(stmts[:i])
                    test = getattr(node, "test", None)
                    if test is not None and node is not func:
                        head.append(test)
                    inner = visit(stmt)
                    if inner is None:  # target is in this simple statement itself
                        inner = [stmt] if stmt is not target else []
                    return head + inner
        return None

    return visit(func) or []
