"""NPU2xx: operator dispatch. Model classes own VeomniOp handles built once in ``__init__``; no module-global
dispatch (OpSlot), no guards with eager fallbacks, implementation names from the ops config, registered rows.

The helpers at the top (dispatch constructors, patch-spec targets, post-import blocks, the per-file handle
table) are shared with ``npu_lint.rules.semantics``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from npu_lint.catalog import ANY, CONFIG_FIELD_TO_OP, NPU, OPSLOT_TO_VEOMNIOP, OpRow
from npu_lint.diagnostics import Applicability, Edit, Fix
from npu_lint.project import Project
from npu_lint.rules.base import Context, Example, Rule, make_fix

# -- recognisers ------------------------------------------------------------------------------------

CONSTRUCTORS = {"OpSlot", "VeomniOp", "resolve_op", "attention_op"}
HANDLE_CONSTRUCTORS = {"OpSlot", "VeomniOp", "resolve_op"}
GUARD_ATTRS = {"use_non_eager_impl", "use_eager_impl", "is_bound"}
_CAST_METHODS = {"to", "float", "type_as", "type", "half", "bfloat16", "contiguous", "detach"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_EMPTY_PROJECT = Project()


def project_of(ctx: Context) -> Project:
    project = ctx.project
    return project if isinstance(project, Project) else _EMPTY_PROJECT


def call_name(node: ast.AST) -> str | None:
    """Last component of a called name: ``OpSlot`` for ``dispatch.OpSlot(...)``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def constructor_kind(node: ast.AST) -> str | None:
    """OpSlot / VeomniOp / resolve_op / attention_op / bound_kernel for a dispatch-creating call."""
    name = call_name(node)
    if name in CONSTRUCTORS:
        return name
    if name == "bound_kernel" and isinstance(node.func, ast.Attribute):  # type: ignore[union-attr]
        return "bound_kernel"
    return None


def str_value(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def call_arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def op_variant(call: ast.Call) -> tuple[str | None, str | None]:
    """(op, variant) literals of a handle constructor, OpSlot names mapped to the VeomniOp ones."""
    first = "op_name" if call_name(call) == "OpSlot" else "op"
    op = str_value(call_arg(call, 0, first))
    variant = str_value(call_arg(call, 1, "variant"))
    if call_name(call) == "OpSlot" and op is not None and variant is not None:
        op, variant = OPSLOT_TO_VEOMNIOP.get((op, variant), (op, variant))
    return op, variant


def in_function(ctx: Context) -> bool:
    return ctx.enclosing(*_SCOPES) is not None


def spec_target(func: ast.AST) -> tuple[str | None, str | None]:
    """(class, method) a patch-spec function replaces, from its decorator.

    ``@config.override_method("Cls.forward")`` -> ("Cls", "forward"); ``@config.modify_init("Cls")`` ->
    ("Cls", "__init__"); ``@config.replace_function("name")`` -> (None, "name").
    """
    for deco in getattr(func, "decorator_list", ()):
        if not isinstance(deco, ast.Call) or not isinstance(deco.func, ast.Attribute):
            continue
        target = str_value(deco.args[0]) if deco.args else None
        if target is None:
            target = next((str_value(k.value) for k in deco.keywords if k.arg in ("target", "name")), None)
        if target is None:
            continue
        kind = deco.func.attr
        if kind == "override_method" and "." in target:
            cls, _, method = target.rpartition(".")
            return cls, method
        if kind == "modify_init":
            return target, "__init__"
        if kind == "replace_function":
            return None, target
    return None, None


def owner_class(ctx: Context, func: ast.AST | None) -> str | None:
    """The class a function belongs to: its enclosing class, or the class a patch-spec function patches."""
    if func is None:
        return None
    cls = ctx.class_
    if cls is not None and func in cls.body:
        return cls.name
    return spec_target(func)[0]


def method_name(func: ast.AST | None) -> str | None:
    """A function's effective name: the patched method's name for a patch-spec replacement."""
    if func is None:
        return None
    target = spec_target(func)[1]
    return target or getattr(func, "name", None)


# -- post-import blocks -----------------------------------------------------------------------------


@dataclass
class Block:
    """A parsed ``config.add_post_import_block("...")`` string, with positions mapped to the file."""

    call: ast.Call
    tree: ast.Module
    lines: list[str]  # lines of the dedented code
    margin: int  # indentation removed by the dedent
    first_line: int  # file line of the string's first content line
    first_col: int  # file column (code points) where the content starts on its first line
    exact: bool  # whether the literal's text equals its value (no escapes), so columns map exactly
    anchor: tuple[int, int, int, int] = (1, 0, 1, 0)  # where the string literal starts (fallback position)

    def position(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) in the spec file, code points."""
        if not self.exact:  # the string literal's own position
            return self.anchor
        line, col = self._map(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end_line, end_col = self._map(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
        return line, col, end_line, end_col

    def _map(self, line: int, byte_col: int) -> tuple[int, int]:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
        file_line = self.first_line + line - 1
        base = self.first_col if line == 1 else 0
        return file_line, base + self.margin + col

    def offsets(self, ctx: Context, node: ast.AST) -> tuple[int, int] | None:
        if not self.exact:
            return None
        line, col, end_line, end_col = self.position(node)
        return ctx.source.offset(line, col), ctx.source.offset(end_line, end_col)


def _dedent(value: str) -> tuple[list[str], int]:
    lines = value.split("\n")
    indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
    margin = min(indents) if indents else 0
    prefixes = {ln[:margin] for ln in lines if ln.strip()}
    if len(prefixes) > 1:  # mixed tabs/spaces: give up on mapping, keep textwrap's behaviour
        import textwrap

        return textwrap.dedent(value).split("\n"), -1
    return [ln[margin:] if ln.strip() else "" for ln in lines], margin


def _parse_block(ctx: Context, call: ast.Call) -> Block | None:
    arg = call.args[0] if call.args else None
    value = str_value(arg)
    if arg is None or value is None:
        return None
    lines, margin = _dedent(value)
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError):
        return None
    src = ctx.source
    literal = src.segment(arg)
    exact = False
    first_line, first_col = arg.lineno, src.char_col(arg.lineno, arg.col_offset)
    prefix_len = len(literal) - len(literal.lstrip("rRuUbBfF"))
    body = literal[prefix_len:]
    for quote in ('"""', "'''", '"', "'"):
        if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
            raw = body[len(quote) : -len(quote)]
            exact = raw.replace("\r\n", "\n").replace("\r", "\n") == value and margin >= 0
            first_col += prefix_len + len(quote)
            break
    col = src.char_col(arg.lineno, arg.col_offset)
    anchor = (arg.lineno, col, arg.lineno, col)
    return Block(call, tree, lines, max(margin, 0), first_line, first_col, exact, anchor)


def post_import_blocks(ctx: Context) -> list[Block]:
    """Every ``<config>.add_post_import_block("...")`` at module level of the file, parsed (cached)."""
    cached = ctx.memo.get("post_import_blocks")
    if cached is not None:
        return cached
    blocks: list[Block] = []
    for stmt in ctx.tree.body:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "add_post_import_block"
        ):
            block = _parse_block(ctx, stmt.value)
            if block is not None:
                blocks.append(block)
    ctx.memo["post_import_blocks"] = blocks
    return blocks


def block_of(ctx: Context, call: ast.Call) -> Block | None:
    return next((b for b in post_import_blocks(ctx) if b.call is call), None)


def module_scope_calls(tree: ast.Module) -> Iterator[ast.Call]:
    """Calls evaluated at import time of a (small) block: module level, not inside functions or lambdas."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_SCOPES, ast.ClassDef)):
            if isinstance(node, ast.ClassDef):
                stack.extend(node.body)
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


# -- the handle table ------------------------------------------------------------------------------


@dataclass
class Handle:
    kind: str  # OpSlot | VeomniOp | resolve_op
    op: str | None
    variant: str | None  # VeomniOp naming (OpSlot qwen3_5 -> offset)
    call: ast.Call  # the constructor call
    block: Block | None = None  # set when declared inside a post-import block
    raw_variant: str | None = None  # the variant literal as written


@dataclass
class HandleTable:
    """Dispatch handles a file declares: module globals (file or post-import blocks) and ``self.<attr>``."""

    module: dict[str, list[Handle]] = field(default_factory=dict)
    attrs: dict[tuple[str | None, str], list[Handle]] = field(default_factory=dict)
    blocks_done: bool = False

    @staticmethod
    def _handle(call: ast.Call, block: Block | None = None) -> Handle | None:
        kind = call_name(call)
        if kind not in HANDLE_CONSTRUCTORS:
            return None
        op, variant = op_variant(call)
        raw = str_value(call_arg(call, 1, "variant"))
        return Handle(kind, op, variant, call, block, raw)  # type: ignore[arg-type]

    def add_blocks(self, ctx: Context) -> None:
        if self.blocks_done:
            return
        self.blocks_done = True
        for block in post_import_blocks(ctx):
            for stmt in block.tree.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                    handle = self._handle(stmt.value, block)
                    if handle is not None:
                        for target in stmt.targets:
                            if isinstance(target, ast.Name):
                                self.module.setdefault(target.id, []).append(handle)

    def visit_assign(self, ctx: Context, node: ast.Assign) -> None:
        """Feed an ``Assign`` met during the traversal."""
        self.add_blocks(ctx)
        value = node.value
        if not isinstance(value, ast.Call):
            return
        handle = self._handle(value)
        if handle is None:
            return
        func = ctx.enclosing(*_SCOPES)
        for target in node.targets:
            if isinstance(target, ast.Name) and func is None:
                self.module.setdefault(target.id, []).append(handle)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and func is not None
            ):
                self.attrs.setdefault((owner_class(ctx, func), target.attr), []).append(handle)

    def resolve(self, ctx: Context, callee: ast.expr, cls: str | None) -> Handle | None:
        """The handle a call's callee refers to, when it is unambiguous (one op and variant)."""
        self.add_blocks(ctx)
        found: list[Handle] = []
        if isinstance(callee, ast.Call):
            handle = self._handle(callee)
            found = [handle] if handle else []
        elif isinstance(callee, ast.Name):
            found = self.module.get(callee.id, [])
        elif (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and callee.value.id == "self"
        ):
            found = self.attrs.get((cls, callee.attr), [])
            if not found:
                found = [h for (c, a), hs in self.attrs.items() if a == callee.attr for h in hs]
        if not found:
            return None
        if len({(h.op, h.variant) for h in found}) != 1:
            return None
        return found[0]

    def is_handle(self, ctx: Context, callee: ast.expr, cls: str | None) -> bool:
        self.add_blocks(ctx)
        if isinstance(callee, ast.Call):
            return call_name(callee) in HANDLE_CONSTRUCTORS
        if isinstance(callee, ast.Name):
            return callee.id in self.module
        if (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and callee.value.id == "self"
        ):
            return any(a == callee.attr for (_c, a) in self.attrs)
        return False


# -- the migration fix (built by npu_lint.fixers.dispatch, when present) ---------------------------


def migration_fix(ctx: Context, code: str, node: ast.AST, line: int | None = None) -> Fix | None:
    """The whole-file dispatch migration, attached once per file: to the first NPU201-203 finding that is
    not suppressed by a ``# noqa`` on its line (``line``, default the node's)."""
    if ctx.memo.get("migration_fix_done"):
        return None
    from npu_lint.engine import noqa_codes

    noqa = noqa_codes(ctx.source.line_text(line or node.lineno))  # type: ignore[attr-defined]
    if noqa is None or (noqa is not False and code in noqa):
        return None  # this finding is suppressed: the next one carries the fix
    ctx.memo["migration_fix_done"] = True
    if not ctx.fix_mode:
        # the codemod (libcst + astroid) runs only when fixes are applied: a plain check shows a deferred fix
        return Fix(
            "Migrate module-global dispatch to instance-local VeomniOp handles",
            (),
            Applicability.UNSAFE,
            (),
            "computed by --fix/--diff/editor actions; where a step cannot be done exactly the migration is "
            "shown as a display-only proposal instead",
            deferred=True,
        )
    try:
        from npu_lint.fixers.dispatch import build_migration_fix
    except ImportError:
        build_migration_fix = None
    if build_migration_fix is None:
        return None
    try:
        return build_migration_fix(ctx, code, node)
    except Exception:  # a codemod failure must never stop detection
        return None


def _dispatch_doc(kind: str) -> str:
    return {
        "OpSlot": "an `OpSlot` is bound once per process and shared by every model instance",
        "VeomniOp": "a `VeomniOp` built at import time resolves its row before the ops config is installed",
        "resolve_op": "a row resolved at import time ignores the ops config installed later",
        "attention_op": "an attention handle built at import time ignores the model's config",
        "bound_kernel": "a kernel taken from a module-global slot at import time is shared by every model",
    }[kind]


# -- NPU201 -----------------------------------------------------------------------------------------


class ModuleGlobalDispatch(Rule):
    code = "NPU201"
    name = "module-global-dispatch"
    summary = "An operator dispatch object (OpSlot, VeomniOp, resolved row) is created at module scope."
    why = (
        'OpSlot-era modeling code declares `veomni_rms_norm = OpSlot("rms_norm", "standard")` at module '
        "scope (usually through a patch spec's `add_post_import_block`). The slot is bound once per process, "
        "so every model built from the module shares one binding: a second model built with another ops config "
        "silently retargets the first. VeOmni's VeomniOp generation gives each model class its own handles, "
        "built in `__init__` from the model's ops config and stored on `self`. Declarations inside a spec's "
        "post-import block are reported at their line inside the string."
    )
    bad = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(hidden_states, weight, eps):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, weight, eps)
                return hidden_states * weight
            """,
            title="an OpSlot in model code",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.toy.modeling_toy",
                target_file="patched_modeling_toy_gpu.py",
            )

            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rotary = OpSlot("rotary_pos_emb", "full")
                """
            )
            ''',
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="an OpSlot declared in a patch spec's post-import block",
        ),
        Example(
            """
            from veomni.ops import VeomniOp

            ROPE = VeomniOp("rope", "full", "eager")
            """,
            title="a VeomniOp handle at import time",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
            """
        ),
        Example(
            """
            from veomni.ops.dispatch import OpSlot  # importing the name is not a declaration

            veomni_rms_norm = None  # placeholder in a spec: the slot lives in the generated file
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`): it rewrites the whole spec or model "
        "module to per-instance VeomniOp handles, attached to the first finding of the file. In generated files "
        "it is display-only (fix the spec and regenerate)."
    )
    precision = (
        "veomni 0.1.12: 226 findings, all module-level OpSlot declarations (in specs, their post-import "
        "blocks and generated files), matching an independent count of 226 (bench/count_opslots.py); "
        "no false positives."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(
            word in text
            for word in (
                "OpSlot",
                "VeomniOp",
                "resolve_op",
                "attention_op",
                "bound_kernel",
                "add_post_import_block",
            )
        ):
            self.node_types = ()  # every finding names one of these in a call

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        kind = constructor_kind(node)
        if kind is None and not (
            isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block"
        ):
            return  # the cheap checks first: only module-scope calls of these names matter
        if in_function(self.ctx):
            return
        if kind is not None:
            self._report(node, kind, None)
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block":
            block = block_of(self.ctx, node)
            if block is None:
                return
            for call in sorted(module_scope_calls(block.tree), key=lambda c: (c.lineno, c.col_offset)):
                kind = constructor_kind(call)
                if kind is not None:
                    self._report(call, kind, block)

    def _report(self, call: ast.Call, kind: str, block: Block | None) -> None:
        where: ast.AST | tuple[int, int, int, int] = call if block is None else block.position(call)
        label = kind if kind != "bound_kernel" else "`.bound_kernel()`"
        op = str_value(call_arg(call, 0, "op_name" if kind == "OpSlot" else "op"))
        variant = str_value(call_arg(call, 1, "variant"))
        what = f'`{kind}("{op}", "{variant}")`' if op and variant and kind != "attention_op" else f"`{label}`"
        inside = " (in a post-import block)" if block is not None else ""
        message = (
            f"module-global dispatch{inside}: {what} is created at import time; {_dispatch_doc(kind)}. "
            "Build a VeomniOp handle in the owning class's `__init__` and store it on `self`"
        )
        if block is None:
            fix = migration_fix(self.ctx, self.code, call)
        else:
            fix = migration_fix(self.ctx, self.code, block.call, block.position(call)[0])
        self.report(where, message, fix)


# -- NPU202 -----------------------------------------------------------------------------------------


class HandleOutsideInit(Rule):
    code = "NPU202"
    name = "handle-outside-init"
    summary = "A VeomniOp handle is constructed per forward step instead of once in `__init__`."
    why = (
        "A `VeomniOp(...)` (or `attention_op()`) resolves its registry row and validates the device when it is "
        "constructed. Built in `forward`, or in a free function that runs every step (a patched "
        "`apply_rotary_pos_emb`, a loss helper), it pays a registry lookup per call, hides a configuration error "
        "until the first step, and cannot follow a per-model ops config. VeOmni's contract: handles are built "
        "in `__init__` and stored on `self`; `forward` only calls them."
    )
    bad = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                    return rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """,
            title="built in forward",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            def apply_rope(q, k, cos, sin):
                return VeomniOp("rope", "full", "eager")(q, k, cos, sin)


            class ToyAttention(nn.Module):
                def forward(self, q, k, cos, sin):
                    return apply_rope(q, k, cos, sin)
            """,
            title="built in a free function called by forward",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            from veomni.ops import VeomniOp


            def build_rope_op(impl):
                # a builder called from __init__ is fine
                return VeomniOp("rope", "full", impl)
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), attached once per file; no separate "
        "fix is offered."
    )
    precision = (
        "veomni 0.1.12 (OpSlot generation) and transformers 5.9.0: no VeomniOp code, no findings; behaviour "
        "pinned by tests."
    )
    node_types = (ast.Call, ast.FunctionDef, ast.AsyncFunctionDef)
    leave_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.constructions: list[tuple[ast.Call, ast.AST]] = []
        self.functions: dict[ast.AST, tuple[str | None, str | None, bool]] = {}  # func -> (cls, name, free)
        self.calls: dict[ast.AST, set[str]] = {}  # func -> names it calls ("f" or "self.m")
        self.stack: list[ast.AST] = []  # enclosing functions (innermost last)

    def leave(self, node: ast.AST) -> None:
        self.stack.pop()

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cls = ctx.class_
            is_method = cls is not None and node in cls.body
            self.functions[node] = (owner_class(ctx, node), method_name(node), not is_method)
            self.stack.append(node)
            return
        assert isinstance(node, ast.Call)
        if not self.stack:
            return
        func = self.stack[-1]
        callee = node.func
        if isinstance(callee, ast.Name):
            self.calls.setdefault(func, set()).add(callee.id)
            if callee.id in ("VeomniOp", "attention_op"):
                self.constructions.append((node, func))
        elif isinstance(callee, ast.Attribute):
            if callee.attr in ("VeomniOp", "attention_op"):
                self.constructions.append((node, func))
            if isinstance(callee.value, ast.Name) and callee.value.id == "self":
                self.calls.setdefault(func, set()).add("self." + callee.attr)

    def finish(self) -> None:
        if not self.constructions:
            return
        per_step: set[ast.AST] = set()
        by_name: dict[str, list[ast.AST]] = {}
        for func, (_cls, name, free) in self.functions.items():
            if name == "forward":
                per_step.add(func)
            if name and spec_target(func)[0] is None and spec_target(func)[1] == name:
                per_step.add(func)  # replace_function: an upstream function called per step
            if free and name:
                by_name.setdefault(name, []).append(func)
        methods: dict[tuple[str | None, str | None], list[ast.AST]] = {}
        for func, (cls, name, free) in self.functions.items():
            if not free or spec_target(func)[0] is not None:
                methods.setdefault((cls, name), []).append(func)
        frontier = list(per_step)
        while frontier:
            func = frontier.pop()
            cls = self.functions.get(func, (None, None, True))[0]
            for called in self.calls.get(func, ()):
                if called.startswith("self."):
                    targets = methods.get((cls, called[5:]), [])
                else:
                    targets = by_name.get(called, [])
                for target in targets:
                    if target not in per_step and method_name(target) != "__init__":
                        per_step.add(target)
                        frontier.append(target)
        for call, func in self.constructions:
            if func not in per_step or method_name(func) == "__init__":
                continue
            where = (
                "`forward`"
                if method_name(func) == "forward"
                else f"`{method_name(func)}`, which runs every step"
            )
            message = (
                f"`{call_name(call)}(...)` is constructed in {where}: build the handle once in `__init__`, "
                "store it on `self`, and call it in `forward`"
            )
            self.report(call, message, migration_fix(self.ctx, self.code, call))


# -- NPU203 -----------------------------------------------------------------------------------------


def _impl_expr(ctx: Context, node: ast.AST) -> bool:
    """An expression naming a configured implementation: `*.rms_norm_implementation`, `resolve_op_impl()`."""
    if isinstance(node, ast.Call):
        return call_name(node) == "resolve_op_impl"
    dotted = ctx.dotted(node)
    if dotted is None:
        return False
    last = dotted.rsplit(".", 1)[-1]
    return last.endswith(("_implementation", "_impl", "_impl_name")) or last in ("impl", "implementation")


def guard_of(ctx: Context, test: ast.AST) -> tuple[str, ast.AST | None, bool] | None:
    """(description, receiver, needs-a-check) of a dispatch guard.

    When the last item is true the guard is only reported if the receiver is a known dispatch handle (or,
    without a receiver, if the guarded code calls one).
    """
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            found = guard_of(ctx, value)
            if found is not None:
                return found
        return None
    if isinstance(test, ast.Attribute) and test.attr in GUARD_ATTRS:
        # `use_non_eager_impl` is VeOmni's own word; `is_bound` / `use_eager_impl` need a known handle
        return f"`.{test.attr}`", test.value, test.attr != "use_non_eager_impl"
    if (
        isinstance(test, ast.Call)
        and call_name(test) == "bound_kernel"
        and isinstance(test.func, ast.Attribute)
    ):
        return "`.bound_kernel()`", test.func.value, False
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        left, right = test.left, test.comparators[0]
        if (
            isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(right, ast.Constant)
            and right.value is None
        ):
            if isinstance(left, ast.Call) and call_name(left) == "bound_kernel":
                return "`.bound_kernel()`", left.func.value, False  # type: ignore[union-attr]
            return None
        if isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            for a, b in ((left, right), (right, left)):
                literal = str_value(b) is not None or (
                    isinstance(b, (ast.Tuple, ast.List, ast.Set))
                    and all(str_value(e) is not None for e in b.elts)
                )
                if literal and _impl_expr(ctx, a):
                    return "a comparison of the configured implementation name", None, True
    return None


class GuardedDispatch(Rule):
    code = "NPU203"
    name = "guarded-dispatch"
    summary = "A dispatch call is guarded (`use_non_eager_impl`, `bound_kernel()`, impl-name test) with an eager fallback."
    why = (
        "The OpSlot generation calls the fused kernel only when a slot is bound (`if slot.use_non_eager_impl: "
        "return slot(...)`) and otherwise falls through to a copy of the eager code. Two code paths per op drift "
        "apart, and a kernel that fails to bind silently runs eager. A VeomniOp handle is called "
        "unconditionally: the registry's `eager` row is the fallback, and an impossible selection fails loudly at "
        "construction."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def toy_rmsnorm_forward(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            """,
            title="the OpSlot guard",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyMLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.impl = config.ops_config.swiglu_mlp_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", self.impl)

                def forward(self, x):
                    if self.impl != "eager":
                        return self.veomni_swiglu(x, self.gate_w, None, self.up_w, None, self.down_w, None)
                    return self.down(self.act(self.gate(x)) * self.up(x))
            """,
            title="a test of the implementation name",
        ),
    )
    good = (
        Example(
            """
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            def attention(config, query):
                # Hugging Face's own attention switch is not a VeOmni dispatch guard
                if config._attn_implementation != "eager":
                    return query * 2
                return query
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), attached once per file: it replaces the "
        "guard and its eager copy by an unconditional handle call."
    )
    precision = (
        "veomni 0.1.12: 190 findings, all true positives (183 `use_non_eager_impl` guards, 2 `use_eager_impl` "
        "guards, 5 `bound_kernel() or <fallback>`); transformers 5.9.0 models (Hugging Face's own "
        "`_attn_implementation` switches): 0 findings."
    )
    node_types = (ast.If, ast.IfExp, ast.BoolOp, ast.Assign)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.handles = HandleTable()
        # (report node, guarded region, what, class, guard receiver): judged once the handles are known
        self.pending: list[tuple[ast.AST, ast.AST, str, str | None, ast.AST | None]] = []

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Assign):
            self.handles.visit_assign(ctx, node)
            return
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.Or) and len(node.values) >= 2:
                first = node.values[0]
                if isinstance(first, ast.Call) and call_name(first) == "bound_kernel":
                    parent = ctx.parent
                    if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is node:
                        return  # reported as the test of its if
                    self._report(node, "`.bound_kernel() or <eager fallback>`")
            return
        test = node.test  # type: ignore[attr-defined]
        guard = guard_of(ctx, test)
        if guard is None:
            return
        what, receiver, needs_check = guard
        if isinstance(node, ast.If):
            has_fallback = bool(node.orelse) or self._falls_through(node)
        else:
            has_fallback = True
        if not has_fallback:
            return
        if needs_check:
            self.pending.append((test, node, what, owner_class(ctx, ctx.function), receiver))
            return
        self._report(test, what)

    def _falls_through(self, node: ast.If) -> bool:
        """The guarded branch returns and code follows the `if` in its block (the eager copy)."""
        if not node.body or not isinstance(node.body[-1], (ast.Return, ast.Raise)):
            return False
        parent = self.ctx.parent
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, name, None)
            if isinstance(stmts, list) and node in stmts:
                return stmts.index(node) < len(stmts) - 1
        return False

    def finish(self) -> None:
        for test, region, what, cls, receiver in self.pending:
            if receiver is not None:
                if self.handles.is_handle(self.ctx, receiver, cls):  # type: ignore[arg-type]
                    self._report(test, what)
                continue
            for sub in ast.walk(region):
                if isinstance(sub, ast.Call) and self.handles.is_handle(self.ctx, sub.func, cls):
                    self._report(test, what)
                    break

    def _report(self, node: ast.AST, what: str) -> None:
        message = (
            f"dispatch guarded by {what} with an eager fallback: call the VeomniOp handle unconditionally "
            "(the registry's eager row is the fallback)"
        )
        self.report(node, message, migration_fix(self.ctx, self.code, node))


# -- NPU204 -----------------------------------------------------------------------------------------

_OP_TO_FIELDS: dict[str, list[str]] = {}
for _field, _op in CONFIG_FIELD_TO_OP.items():
    _OP_TO_FIELDS.setdefault(_op, []).append(_field)
_ATTENTION_FIELDS = {"_attn_implementation", "attn_implementation"}


def _field_of(node: ast.AST) -> tuple[str, ast.AST] | None:
    """(config field, the node holding it) of `resolve_op_impl("<field>")` / `config.ops_config.<field>`."""
    if isinstance(node, ast.Call) and call_name(node) == "resolve_op_impl":
        arg = call_arg(node, 0, "field")
        value = str_value(arg)
        return (value, arg) if value is not None and arg is not None else None
    if isinstance(node, ast.Attribute):
        if node.attr in _ATTENTION_FIELDS:
            return node.attr, node
        if isinstance(node.value, ast.Attribute) and node.value.attr == "ops_config":
            return node.attr, node
    return None


def _local_value(ctx: Context, name: ast.Name) -> ast.expr | None:
    """The single value assigned to a local name in the enclosing function (or the module)."""
    scope = ctx.function
    body = scope.body if scope is not None else ctx.tree.body
    values: list[ast.expr] = []
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_SCOPES, ast.ClassDef)):
            continue
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name.id for t in node.targets
        ):
            values.append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            if node.target.id == name.id:
                return None
        stack.extend(ast.iter_child_nodes(node))
    return values[0] if len(values) == 1 else None


def impl_argument(call: ast.Call) -> ast.expr | None:
    return call_arg(call, 2, "impl")


class HardcodedOpImplementation(Rule):
    code = "NPU204"
    name = "hardcoded-op-implementation"
    summary = (
        'An operator implementation is a literal (other than "eager") or read from the wrong config field.'
    )
    why = (
        "The implementation of a VeomniOp handle is the user's choice, made in the ops config: "
        '`resolve_op_impl("rms_norm_implementation")` ("eager" when no config is installed) or '
        '`config.ops_config.rms_norm_implementation`. A literal such as "liger_kernel" pins a GPU kernel on '
        "every device (on an NPU host the handle raises at construction), and a field of another op "
        '(`rope` reading `rms_norm_implementation`) silently follows the wrong switch. "eager" is the one '
        "literal that is always valid."
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyRMSNorm:
                def __init__(self):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "liger_kernel")
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm:
                def __init__(self):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
            """,
            title="a literal implementation",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRotary:
                def __init__(self):
                    self.veomni_rope = VeomniOp("rope", "full", resolve_op_impl("rms_norm_implementation"))
            """,
            title="the wrong config field (rope has two fields: no automatic fix)",
        ),
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyMLP:
                def __init__(self, config):
                    impl = config.ops_config.rms_norm_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", impl)
            """,
            fixed="""
            from veomni.ops import VeomniOp


            class ToyMLP:
                def __init__(self, config):
                    impl = config.ops_config.swiglu_mlp_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", impl)
            """,
            title="the wrong field, through a local variable",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyModel:
                def __init__(self, config):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))
                    self.veomni_rope = VeomniOp("rope", "full", "eager")
                    self.veomni_attn = VeomniOp("attention", "standard", config._attn_implementation)
                    impl = config.ops_config.moe_implementation if config is not None else "eager"
                    self.veomni_moe = VeomniOp("moe_experts", "standard", impl)
            """
        ),
    )
    fix_safety = (
        "Unsafe (the implementation then follows the ops config, whose default may differ from the literal): a "
        'literal becomes `resolve_op_impl("<field>")` of the op\'s config field, and a wrong field is replaced '
        "by the op's field. No fix when the op has several fields (`rope`: `rotary_pos_emb_implementation` or "
        "`rotary_pos_emb_vision_implementation`) or none."
    )
    precision = (
        "veomni 0.1.12 (OpSlot generation) and transformers 5.9.0: no VeomniOp code, no findings; behaviour "
        "pinned by tests."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(word in text for word in ("VeomniOp", "resolve_op")):
            self.node_types = ()  # only VeomniOp(...) / resolve_op(...) calls are checked

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if call_name(node) not in ("VeomniOp", "resolve_op"):
            return
        op = str_value(call_arg(node, 0, "op"))
        impl = impl_argument(node)
        if op is None or impl is None:
            return
        self._check(node, op, impl, impl, depth=0)

    def _check(self, call: ast.Call, op: str, impl: ast.expr, at: ast.expr, depth: int) -> None:
        ctx = self.ctx
        fields = _OP_TO_FIELDS.get(op, [])
        if isinstance(impl, ast.IfExp):
            for branch in (impl.body, impl.orelse):
                self._check(call, op, branch, branch, depth)
            return
        if isinstance(impl, ast.Name) and depth == 0:
            value = _local_value(ctx, impl)
            if value is not None:
                self._check(call, op, value, value, depth + 1)
            return
        literal = str_value(impl)
        if literal is not None:
            if literal == "eager":
                return
            fix = None
            if len(fields) == 1 and op != "attention":
                edits = [ctx.replace(impl, f'resolve_op_impl("{fields[0]}")')]
                if "resolve_op_impl" not in ctx.imports:
                    edits.extend(ctx.import_edits("veomni.ops.config", "resolve_op_impl"))
                fix = make_fix(
                    f'Read the implementation from the ops config: `resolve_op_impl("{fields[0]}")`',
                    edits,
                    Applicability.UNSAFE,
                    f'the implementation then follows the ops config instead of always being "{literal}"',
                )
            where = f'`resolve_op_impl("{fields[0]}")`' if len(fields) == 1 else "the op's ops-config field"
            self.report(
                impl,
                f'hard-coded implementation "{literal}" for op `{op}`: take it from the ops config ({where}); '
                '"eager" is the only literal allowed',
                fix,
            )
            return
        found = _field_of(impl)
        if found is None:
            return
        name, holder = found
        if op == "attention":
            if name in _ATTENTION_FIELDS:
                return
        elif name in fields:
            return
        if name not in CONFIG_FIELD_TO_OP and name not in _ATTENTION_FIELDS:
            if not name.endswith("_implementation"):
                return
        owner = "attention" if name in _ATTENTION_FIELDS else CONFIG_FIELD_TO_OP.get(name, "no op")
        expected = ", ".join(f"`{f}`" for f in fields) or "(none in the catalog)"
        fix = None
        attribute_ok = isinstance(holder, ast.Constant) or (
            isinstance(holder, ast.Attribute)
            and isinstance(holder.value, ast.Attribute)
            and holder.value.attr == "ops_config"
        )
        if len(fields) == 1 and op != "attention" and attribute_ok:
            if isinstance(holder, ast.Constant):
                edit = ctx.replace(holder, f'"{fields[0]}"')
            else:
                assert isinstance(holder, ast.Attribute)
                start, end = ctx.source.node_range(holder)
                edit = Edit(end - len(holder.attr), end, fields[0])
            fix = make_fix(
                f"Read `{fields[0]}`",
                [edit],
                Applicability.UNSAFE,
                "the handle then follows another config switch",
            )
        self.report(
            at if depth == 0 else holder,
            f"op `{op}` reads the implementation from `{name}` (the field of {owner}); its field is {expected}",
            fix,
        )


# -- NPU205 -----------------------------------------------------------------------------------------


def _npu_capable(rows: list[OpRow]) -> list[OpRow]:
    return [r for r in rows if r.requirement == NPU or (r.requirement == ANY and r.impl != "eager")]


def _describe(rows: list[OpRow]) -> str:
    parts = []
    for r in sorted(rows, key=lambda r: (r.impl != "eager", r.impl)):
        parts.append(r.impl if r.requirement == ANY else f"{r.impl} ({r.requirement})")
    return ", ".join(dict.fromkeys(parts))


def npu_targeted(ctx: Context) -> bool:
    name = ctx.source.path.replace("\\", "/").rsplit("/", 1)[-1]
    if name.endswith("_npu_patch_gen_config.py"):
        return True
    return ctx.source.kind.generated and name.endswith("_npu.py")


class UnknownOpRow(Rule):
    code = "NPU205"
    name = "unknown-op-row"
    summary = "A VeomniOp names a row nobody registered, or an NPU spec selects an op with no NPU row."
    why = (
        "`VeomniOp(op, variant, impl)` resolves its row at construction: an unknown triple raises KeyError, and "
        "on an NPU host a selection without an NPU (or device-agnostic) row raises RuntimeError. There is no "
        "silent eager fallback. Rows come from the tree's `register_op` calls (read statically), from "
        "`OP_REGISTRY` with `--live-registry`, or from the built-in catalog for out-of-tree models. In an "
        'NPU-targeted spec an op without an NPU row (e.g. `swiglu_mlp`) must be resolved to "eager".'
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp


            class ToyRMSNorm:
                def __init__(self, impl):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", impl)
            """,
            title="an OpSlot-era variant that VeomniOp does not register (it is `offset` now)",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_mlp_init_patched(self, config):
                self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", resolve_op_impl("swiglu_mlp_implementation"))
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="an NPU spec selecting an op without an NPU row",
        ),
        Example(
            """
            from veomni.ops import VeomniOp

            def build():
                return VeomniOp("rope", "full", "flash_rope")
            """,
            title="an implementation nobody registered",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            def toy_init_patched(self, config):
                self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", "eager")
                self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))
                self.veomni_ce = VeomniOp(
                    "cross_entropy_loss", "standard",
                    resolve_op_impl("cross_entropy_loss_implementation", npu_as="chunk_loss"),
                )
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "No fix: the right row depends on what the op should do; the message lists the registered rows."
    )
    precision = (
        "veomni 0.1.12 (OpSlot generation) and transformers 5.9.0: no VeomniOp code, no findings; behaviour "
        "pinned by tests."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(word in text for word in ("VeomniOp", "resolve_op")):
            self.node_types = ()  # only VeomniOp(...) / resolve_op(...) calls are checked

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if call_name(node) not in ("VeomniOp", "resolve_op"):
            return
        op = str_value(call_arg(node, 0, "op"))
        variant = str_value(call_arg(node, 1, "variant"))
        if op is None or variant is None:
            return
        project = project_of(self.ctx)
        origin = project.rows_origin
        op_rows = project.rows_for(op)
        if not op_rows:
            known = ", ".join(sorted({r.op for r in project.rows}))
            renamed_ops = sorted(
                {new[0] for (old, _v), new in OPSLOT_TO_VEOMNIOP.items() if old == op and new[0] != op}
            )
            hint = f"; the OpSlot op `{op}` is `{renamed_ops[0]}` in VeomniOp" if renamed_ops else ""
            self.report(node, f"no registered row has op `{op}` (per {origin}); known ops: {known}{hint}")
            return
        rows = [r for r in op_rows if r.variant == variant]
        if not rows:
            variants = ", ".join(sorted({r.variant for r in op_rows}))
            hint = ""
            renamed = OPSLOT_TO_VEOMNIOP.get((op, variant))
            if renamed is not None and renamed != (op, variant):
                hint = f"; the OpSlot variant `{op}/{variant}` is `{renamed[0]}/{renamed[1]}` in VeomniOp"
            self.report(
                node,
                f"no registered row has op `{op}` variant `{variant}` (per {origin}); variants of `{op}`: "
                f"{variants}{hint}",
            )
            return
        impl_node = impl_argument(node)
        impl = str_value(impl_node) if impl_node is not None else "eager"
        if impl is not None and not any(r.impl == impl for r in rows):
            self.report(
                node,
                f"no registered row `{op}/{variant}/{impl}` (per {origin}); implementations: {_describe(rows)}",
            )
            return
        if not npu_targeted(self.ctx) or impl == "eager":
            return
        if _npu_capable(rows):
            if impl is not None and impl not in {r.impl for r in rows if r.requirement in (NPU, ANY)}:
                self.report(
                    node,
                    f"NPU-targeted code selects `{op}/{variant}/{impl}`, which has no NPU row; implementations: "
                    f"{_describe(rows)}",
                )
            return
        if isinstance(impl_node, ast.Call) and call_name(impl_node) == "resolve_op_impl":
            npu_as = str_value(call_arg(impl_node, 99, "npu_as"))
            if npu_as == "eager" or (npu_as is not None and any(r.impl == npu_as for r in rows)):
                return
        self.report(
            node,
            f'NPU-targeted code: op `{op}/{variant}` has no NPU row ({_describe(rows)}); resolve it to "eager"',
        )


# -- NPU206 -----------------------------------------------------------------------------------------


def _npu_named(impl: str) -> bool:
    return impl == "npu" or impl.endswith("_npu") or impl.startswith("npu_")


def _uses_torch_npu(func: ast.AST) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == "torch_npu":
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_npu" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_npu":
            return True
    return False


class NpuRowWithoutRequirement(Rule):
    code = "NPU206"
    name = "npu-row-without-requirement"
    summary = "A `register_op` row that runs Ascend code has no `requirement=NpuKernelRequirement()`."
    why = (
        "A row registered without a requirement is device-agnostic: resolution picks it on any host, so a GPU "
        "run that selects the `npu` implementation gets the row and fails later, inside `torch_npu`, instead of "
        "failing at construction with a clear message. Rows whose implementation uses `torch_npu` (or is named "
        "`npu` / `*_npu`) must carry `requirement=NpuKernelRequirement()` (`veomni.ops.platform`). OpSlot-era "
        '`KernelSpec` rows named `npu` need `hardware=HardwareRequirement(device_type="npu")`.'
    )
    bad = (
        Example(
            """
            from veomni.ops import register_op


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            register_op("rope", "full", "npu", wrapper=_npu_rope)
            """,
            fixed="""
            from veomni.ops import register_op
            from veomni.ops.platform import NpuKernelRequirement


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            register_op("rope", "full", "npu", wrapper=_npu_rope, requirement=NpuKernelRequirement())
            """,
            path="veomni/ops/kernels/rotary/npu.py",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import register_op
            from veomni.ops.platform import NpuKernelRequirement


            def _npu_rope(q, k, cos, sin):
                import torch_npu

                return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


            def _eager_rope(q, k, cos, sin):
                return q * cos, k * cos


            register_op("rope", "full", "npu", wrapper=_npu_rope, requirement=NpuKernelRequirement())
            register_op("rope", "full", "eager", wrapper=_eager_rope)
            """,
            path="veomni/ops/kernels/rotary/npu.py",
        ),
    )
    fix_safety = (
        "Safe: adds `requirement=NpuKernelRequirement()` (imported from `veomni.ops.platform`, or the module "
        "the file already imports it from). On an NPU host resolution is unchanged; elsewhere the row is no "
        "longer selectable, which turns a late failure inside `torch_npu` into a clear error at construction."
    )
    precision = (
        "veomni 0.1.12: no findings (its `register_op(OpSpec(...))` is a different API and is skipped; every "
        "`npu` KernelSpec row carries an npu hardware requirement)."
    )
    node_types = (ast.Call, ast.FunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.kernel and not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.functions: dict[str, ast.AST] = {}
        self.rows: list[ast.Call] = []

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef):
            if self.ctx.parent is self.ctx.tree:
                self.functions[node.name] = node
            return
        assert isinstance(node, ast.Call)
        if call_name(node) in ("register_op", "KernelSpec") and self.ctx.function is None:
            self.rows.append(node)

    def finish(self) -> None:
        for call in self.rows:
            if call_name(call) == "KernelSpec":
                self._kernel_spec(call)
            else:
                self._register_op(call)

    def _implementation_uses_npu(self, call: ast.Call) -> bool:
        for key, index in (("forward", 3), ("backward", 4), ("wrapper", 99)):
            ref = call_arg(call, index, key)
            if isinstance(ref, ast.Name):
                func = self.functions.get(ref.id)
                if func is not None and _uses_torch_npu(func):
                    return True
                module = self.ctx.imports.get(ref.id, "")
                if any(
                    part == "npu" or part.startswith("npu_") or part.endswith("_npu")
                    for part in module.split(".")[:-1]
                ):
                    return True
            elif ref is not None and _uses_torch_npu(ref):
                return True
        return False

    def _register_op(self, call: ast.Call) -> None:
        impl = str_value(call_arg(call, 2, "impl"))
        op = str_value(call_arg(call, 0, "op"))
        variant = str_value(call_arg(call, 1, "variant"))
        if impl is None or op is None or variant is None:
            return  # not the VeomniOp register_op (e.g. register_op(OpSpec(...)))
        if not (_npu_named(impl) or self._implementation_uses_npu(call)):
            return
        requirement = next((k for k in call.keywords if k.arg == "requirement"), None)
        if requirement is not None:
            name = call_name(requirement.value) or ""
            if name.lower().startswith("npu"):
                return
        ctx = self.ctx
        module = "veomni.ops.platform"
        if ctx.imports.get("NpuKernelRequirement", "").startswith("veomni.ops.requirement"):
            module = "veomni.ops.requirement"
        edits: list[Edit] = []
        if "NpuKernelRequirement" not in ctx.imports:
            edits.extend(ctx.import_edits(module, "NpuKernelRequirement"))
        if requirement is not None:
            edits.append(ctx.replace(requirement.value, "NpuKernelRequirement()"))
        else:
            last = max(
                [*call.args, *(k.value for k in call.keywords)],
                key=lambda n: (n.end_lineno, n.end_col_offset),
            )
            end = ctx.source.node_range(last)[1]
            edits.append(Edit(end, end, ", requirement=NpuKernelRequirement()"))
        fix = make_fix("Add `requirement=NpuKernelRequirement()`", edits)
        self.report(
            call,
            f"row `{op}/{variant}/{impl}` runs Ascend code but has no `requirement=NpuKernelRequirement()`: "
            "it is selectable on every device",
            fix,
        )

    def _kernel_spec(self, call: ast.Call) -> None:
        name = str_value(call_arg(call, 0, "name"))
        if name is None or not _npu_named(name):
            return
        hardware = call_arg(call, 4, "hardware")
        from npu_lint.project import _hardware_kind

        kind = _hardware_kind(hardware) if hardware is not None else None
        if hardware is not None and kind in (None, NPU, ANY):
            return  # not a literal, or npu-capable
        self.report(
            call,
            f"KernelSpec `{name}` runs Ascend code but its hardware requirement is not "
            '`HardwareRequirement(device_type="npu")`',
        )
