"""NPU309 npu-kernel-call-contract."""

from __future__ import annotations

import ast
import copy
import os
import re

from npu_lint.core.astutil import dotted_name, int_value, nodes_of, walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.npucalls import KernelCall, file_calls, tree_calls
from npu_lint.veomni.ropelayout import convention, helper_convention, imported_helper
from npu_lint.veomni.vendor_map import (
    NPU_AUX_OUTPUTS,
    NPU_AUX_WORDS,
    NPU_FA_LAYOUT_HEAD_AXIS,
    NPU_FA_SPARSE_MODES,
    NPU_KEYWORD_ROLES,
    NPU_LIST_RESULTS,
    NPU_POSITIONAL_ROLES,
    NPU_RESULT_WORDS,
    NPU_ROLE_WORDS,
    NPU_ROTARY_MODES,
    NPU_TUPLE_RESULTS,
)

_PREFIXES = ("torch_npu.", "torch.ops.npu.")
_KERNELS = frozenset(
    {
        *NPU_TUPLE_RESULTS,
        *NPU_POSITIONAL_ROLES,
        *NPU_AUX_OUTPUTS,
        "npu_swiglu",
        "npu_rotary_mul",
        "npu_fusion_attention",
    }
)
# methods of a list or tuple: calling one on a kernel's sequence result is no tensor use
_SEQUENCE_METHODS = frozenset(
    {"append", "extend", "insert", "pop", "index", "count", "copy", "clear", "remove"}
)
# torch functions whose first argument is a sequence of tensors (or any object): a list result fits them
_SEQUENCE_FUNCTIONS = frozenset(
    {
        "cat",
        "concat",
        "concatenate",
        "stack",
        "hstack",
        "vstack",
        "dstack",
        "column_stack",
        "block_diag",
        "broadcast_tensors",
        "cartesian_prod",
        "meshgrid",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "is_tensor",
        "numel",
        "save",
        "tensor",
        "as_tensor",
    }
)
# Ascend kernels whose first argument is one tensor
_TENSOR_INPUT_KERNELS = frozenset(
    {"npu_swiglu", "npu_rms_norm", "npu_rotary_mul", "npu_moe_token_unpermute", "npu_fusion_attention"}
)
_ELEMENTWISE = frozenset({"float", "to", "contiguous", "half", "bfloat16", "type_as", "view", "reshape"})


def _base(node: ast.AST) -> str:
    """The name under elementwise conversions: ``hidden_states.float()`` -> ``hidden_states``."""
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENTWISE
    ):
        node = node.func.value
    return dotted_name(node) or ""


def _words(name: str, words: tuple[str, ...]) -> bool:
    low = name.lower().rsplit(".", 1)[-1]
    parts = set(re.split(r"[_\d]+", low))
    return any(w == low or w in parts or ("_" in w and w in low) for w in words)


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        return _last(node.value)
    return ""


_RANK_KEEPING = frozenset({"float", "to", "contiguous", "half", "bfloat16", "type_as", "clone", "detach"})


def _rank_step(node: ast.AST) -> tuple[ast.AST, int] | None:
    """One step of a value's construction and how many axes it adds: ``t.unsqueeze(d)`` / ``torch.unsqueeze(t,
    d)`` +1, ``t.squeeze(d)`` -1, ``t[None, :, None]`` one per None less one per integer index, a cast 0; None for
    a step whose rank change is not known (``view``, ``reshape``, ``squeeze()``)."""
    if isinstance(node, ast.Subscript):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        delta = 0
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                delta += 1
            elif isinstance(item, (ast.Slice, ast.Starred)) or (
                isinstance(item, ast.Constant) and item.value is Ellipsis
            ):
                continue
            elif int_value(item) is not None:
                delta -= 1
            else:
                return None  # a tensor index: another shape altogether
        return node.value, delta
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    attr, receiver = node.func.attr, node.func.value
    if isinstance(receiver, ast.Name) and receiver.id == "torch":
        if attr in ("unsqueeze", "squeeze") and len(node.args) == 2:
            return node.args[0], 1 if attr == "unsqueeze" else -1
        return None
    if attr == "unsqueeze" and (node.args or node.keywords):
        return receiver, 1
    if attr == "squeeze" and (node.args or node.keywords):
        return receiver, -1
    if attr in _RANK_KEEPING:
        return receiver, 0
    return None


def _rank_origin(
    node: ast.AST, defs: dict[str, ast.expr], params: set[str], depth: int = 0
) -> tuple[str, int] | None:
    """The parameter a value is built from and the axes added on the way (through the function's locals bound
    once), None when a step's rank change is not known."""
    total = 0
    while depth < 32:
        depth += 1
        if isinstance(node, ast.Name):
            if node.id in defs and not getattr(node, "free", False):
                node = defs[node.id]
                continue
            return (node.id, total) if node.id in params else None
        step = _rank_step(node)
        if step is None:
            return None
        node, delta = step
        total += delta
    return None


def _single_bindings(function: ast.AST, before: int) -> dict[str, ast.expr]:
    """The locals of a function bound by one plain assignment (``a = e`` / ``a, b = e1, e2``) before line
    ``before``, each rebinding of a name in order (``cos = cos.unsqueeze(1)`` reads the parameter ``cos``):
    name -> its value, as a chain of the versions. Names bound any other way (loops, branches, augmented
    assignment) are left out."""
    body = getattr(function, "body", [])
    out: dict[str, ast.expr] = {}
    other: set[str] = set()
    for stmt in body:
        if stmt.lineno >= before:
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(target, ast.Name):
                pairs = [(target, value)]
            elif (
                isinstance(target, ast.Tuple)
                and isinstance(value, ast.Tuple)
                and len(target.elts) == len(value.elts)
            ):
                pairs = list(zip(target.elts, value.elts))
            for name, expr in pairs:
                if isinstance(name, ast.Name):
                    out[name.id] = _substitute(expr, out)
            continue
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                other.add(sub.id)
    return {k: v for k, v in out.items() if k not in other}


def _substitute(expr: ast.expr, bound: dict[str, ast.expr]) -> ast.expr:
    """``expr`` with the names it reads that are already bound replaced by their values (a fresh tree): the value
    a rebinding reads is the previous version, not itself."""

    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 - ast visitor protocol
            if not isinstance(node.ctx, ast.Load):
                return node
            if node.id in bound:
                return bound[node.id]
            node.free = True  # type: ignore[attr-defined]  # the name's value on entry: not looked up again
            return node

    return _Sub().visit(copy.deepcopy(expr))


def _half_name(node: ast.AST) -> str:
    """The name a half of a fused GLU's input goes by: ``gate`` -> ``gate``, ``self.gate_proj(x)`` ->
    ``gate_proj``, ``gate.float()`` -> ``gate``."""
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENTWISE
    ):
        node = node.func.value
    if isinstance(node, ast.Call):
        node = node.func
    return _last(node)


def _gate_half(node: ast.AST) -> bool:
    """A half named for the gate alone (``gate``, ``gate_states``, ``self.gate_proj(x)``; not ``gate_up``)."""
    name = _half_name(node)
    return _words(name, ("gate", "gates")) and not _words(name, ("up",))


def _roles(node: ast.AST) -> set[str]:
    """The roles (``weight``, ``eps``, ``cos``, ``sin``) an argument's last name spells as whole words."""
    words = set(re.split(r"[_\d]+", _last(node).lower()))
    name = _last(node).lower()
    found = set()
    for role, spellings in NPU_ROLE_WORDS.items():
        if any(s in words or s == name for s in spellings):
            found.add(role)
    return found


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _last_axis(call: ast.Call, index: int) -> bool:
    """The call's ``dim`` (keyword, or positional at ``index``) is the last axis."""
    dim = next((k.value for k in call.keywords if k.arg == "dim"), None)
    if dim is None and index < len(call.args):
        dim = call.args[index]
    return dim is not None and int_value(dim) == -1


def _pair_layout(call: ast.Call) -> str | None:
    """The rotary layout one step of a cos/sin table's construction lays out along the last axis: each frequency
    repeated for its pair (``repeat_interleave(2, dim=-1)``) is "interleave", the halves concatenated
    (``torch.cat((f, f), dim=-1)``) is "half"; other axes (per-frame tiling along the tokens) choose none."""
    assert isinstance(call.func, ast.Attribute)
    name = call.func.attr
    if name == "repeat_interleave":
        # ``t.repeat_interleave(2, dim=-1)`` or ``torch.repeat_interleave(t, 2, dim=-1)``
        first = 1 if isinstance(call.func.value, ast.Name) and call.func.value.id == "torch" else 0
        repeats = next((k.value for k in call.keywords if k.arg == "repeats"), None)
        if repeats is None and first < len(call.args):
            repeats = call.args[first]
        if repeats is not None and int_value(repeats) == 2 and _last_axis(call, first + 1):
            return "interleave"
        return None
    if name in ("cat", "concat") and _last_axis(call, 1) and call.args:
        # the same operand twice lays out halves; different ones (2-D vision axes, mrope sections, a partial
        # table padded to the head) are joined pieces whose own steps say the layout
        parts = call.args[0]
        if (
            isinstance(parts, (ast.Tuple, ast.List))
            and len(parts.elts) == 2
            and ast.dump(parts.elts[0]) == ast.dump(parts.elts[1])
        ):
            return "half"
    return None


def _names(node: ast.AST, name: str) -> bool:
    """Whether a ``*name`` or a loop over ``name`` (``for t in name``) takes ``name`` apart."""
    if isinstance(node, ast.Starred):
        return isinstance(node.value, ast.Name) and node.value.id == name
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Name) and node.iter.id == name


class NpuKernelCallContract(Rule):
    code = "NPU309"
    name = "npu-kernel-call-contract"
    summary = (
        "A call of an Ascend kernel breaks its contract: a tuple or list result used as a tensor, arguments in each "
        "other's place, a layout or mode the kernel does not have, a head count read from the wrong axis, a "
        "dropout rate as keep probability, an inverted attention mask or scale."
    )
    why = (
        "torch_npu's fused kernels are not drop-in copies of the CUDA ones. `npu_rms_norm(x, gamma, epsilon)` "
        "returns `(y, rstd)` and the trees take `[0]`; `npu_rotary_mul(x, r1=cos, r2=sin, rotary_mode)` knows "
        "`half` and `interleave`, and the mode must be the convention of the cos/sin tables and of the eager "
        "rotation it replaces (rotate-half: `torch.cat((f, f), dim=-1)`, `cat((-x2, x1))` over `// 2` halves; "
        "interleaved pairs: `repeat_interleave(2, dim=-1)`, stride-2 slices stacked on a new axis, "
        "`view_as_complex`), read from the function itself (tables joined from different pieces "
        "say nothing by the join), else from the module of an imported helper that builds them, its own module, "
        "the upstream module a spec or generated file copies, or the eager module an adapter falls back to (`veomni/ropelayout.py`, the body "
        "and not the helper's name deciding); `npu_fusion_attention(q, k, v, head_num, input_layout, ...)` reads the head "
        "count from the layout's N axis (BSND: 2, BNSD / TND: 1), needs `actual_seq_qlen` / `actual_seq_kvlen` "
        "for `TND`, takes `keep_prob = 1 - dropout`, `scale = 1 / sqrt(head_dim)`, and an `atten_mask` whose "
        "True entries are masked out (`torch.triu(ones, diagonal=1)` for causal; a `tril` mask keeps only the "
        "future); `sparse_mode` is 0-8; `npu_swiglu` splits the last (feature) dim and activates its first half, so "
        "a concatenation handing it the gate second (`torch.cat([x, gate], -1)`) activates the wrong operand; "
        "`npu_rotary_mul` multiplies tensors of one rank, so a wrapper that unsqueezes a cos/sin table (which has "
        "no head axis) must add one axis more to it than to the tensor it rotates; `npu_grouped_matmul`'s "
        "`group_list_type` is 0 for a cumulative group list and 1 for per-group counts, and it returns a list of "
        "tensors (one per group or split) that its callers index (`[0]`): returned whole from an autograd "
        "Function's `forward` or `backward`, or used as a tensor, it breaks the layer. A kernel outside this table "
        "counts as returning a list or tuple when the tree's own other calls of it (two or more) all subscript or "
        "unpack its result. Each mistake either fails "
        "on the first Ascend step or, worse, runs and trains on wrong numbers while the GPU path is right. "
        "Arguments are judged by their spelling (a `sin` table in the `cos` slot, an `eps` in the weight slot) "
        "and by local data flow; calls that cannot be judged are left alone."
    )
    bad = (
        Example(
            """
            import torch_npu


            def rms_norm_forward(self, hidden_states):
                return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)
            """,
            path="veomni/ops/kernels/toy_norm/npu.py",
            title="the (y, rstd) tuple returned as the normalised tensor",
        ),
        Example(
            """
            import torch_npu


            def apply_rotary(q, k, cos, sin):
                return torch_npu.npu_rotary_mul(q, sin, cos), torch_npu.npu_rotary_mul(k, cos, sin)
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="sin and cos in each other's place",
        ),
        Example(
            """
            import torch
            import torch_npu


            class ToyGmm(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight, counts):
                    out = torch_npu.npu_grouped_matmul([x], [weight], group_list=counts, split_item=2)
                    return out
            """,
            path="veomni/ops/kernels/toy_moe/npu_gmm.py",
            title="an autograd Function returning the grouped matmul's list",
        ),
        Example(
            """
            import torch
            from torch_npu import npu_rotary_mul


            def rotate_half(x):
                x1, x2 = x.chunk(2, dim=-1)
                return torch.cat((-x2, x1), dim=-1)


            def apply_rotary_pos_emb_vision(q, k, cos, sin):
                cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
                q_embed = npu_rotary_mul(q.float(), cos, sin, rotary_mode="interleave")
                k_embed = npu_rotary_mul(k.float(), cos, sin, rotary_mode="interleave")
                return q_embed.to(q.dtype), k_embed.to(k.dtype)
            """,
            path="veomni/models/transformers/toy_vl/generated/patched_modeling_toy_vl_npu.py",
            title="interleaved pairs rotated in a module whose tables and eager rotation are rotate-half",
        ),
        Example(
            """
            import math

            import torch
            import torch_npu


            def attention(q, k, v, dropout_p):
                mask = torch.tril(torch.ones([2048, 2048], device=q.device)).bool()
                return torch_npu.npu_fusion_attention(
                    q, k, v, q.shape[1], "BSND", atten_mask=mask, keep_prob=dropout_p,
                    scale=math.sqrt(q.shape[-1]), sparse_mode=3,
                )[0]
            """,
            path="veomni/ops/kernels/toy_attention/npu.py",
            title="head count from the sequence axis, dropout as keep probability, sqrt scale, tril mask",
        ),
    )
    good = (
        Example(
            """
            import math

            import torch
            import torch_npu


            def rms_norm_forward(self, hidden_states):
                return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]


            def attention(q, k, v, dropout_p):
                mask = torch.triu(torch.ones([2048, 2048], device=q.device), diagonal=1).bool()
                return torch_npu.npu_fusion_attention(
                    q, k, v, q.shape[2], "BSND", atten_mask=mask, keep_prob=1.0 - dropout_p,
                    scale=1.0 / math.sqrt(q.shape[-1]), sparse_mode=3,
                )[0]
            """,
            path="veomni/ops/kernels/toy_attention/npu.py",
        ),
    )
    fix_safety = "No fix: the right argument is chosen by hand."
    requires = ("npu_",)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._own: dict[int, tuple[str, KernelCall]] | None = None
        self._tree: dict[str, tuple[KernelCall, ...]] | None = None

    def _kernel(self, call: ast.Call) -> str | None:
        func = call.func
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return None
        name = func.attr if isinstance(func, ast.Attribute) else func.id
        if name not in _KERNELS:
            alias = self.ctx.imports.get(name, "") if isinstance(func, ast.Name) else ""
            if not alias.startswith(_PREFIXES):
                return None
            name = alias.rpartition(".")[2]  # `from torch_npu import npu_swiglu as fused_glu`
            return name if name in _KERNELS else None
        qual = self.ctx.local_qualname(func) or ""
        return name if qual.startswith(_PREFIXES) else None

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        kernel = self._kernel(node)
        if kernel is None or kernel not in NPU_TUPLE_RESULTS:
            learned = self._learned_sequence(node)
            if learned is not None and learned[0] not in NPU_TUPLE_RESULTS:
                evidence = f" (the tree's {learned[1]} other calls of it all subscript or unpack it)"
                self._tuple_result(node, learned[0], evidence, listed=True)
        if kernel is None:
            self._other_rotary(node)
            return
        if kernel in NPU_TUPLE_RESULTS:
            self._tuple_result(node, kernel, listed=kernel in NPU_LIST_RESULTS)
        if kernel in NPU_AUX_OUTPUTS:
            self._aux_output(node, kernel)
        if kernel == "npu_moe_token_permute":
            self._permute_out_tokens(node)
        self._roles(node, kernel)
        if kernel == "npu_rotary_mul":
            given = self._arg(node, 3, "rotary_mode")
            mode = _str(given) if given is None or _str(given) is not None else self._constant_mode(given)
            if mode is not None and mode not in NPU_ROTARY_MODES:
                self.report(
                    node,
                    f'`npu_rotary_mul` has no rotary_mode "{mode}" (it knows {", ".join(sorted(NPU_ROTARY_MODES))})',
                )
            elif mode is not None or given is None:
                self._rotary_layout(node, mode or "half")
            self._rotary_rank(node)
        elif kernel == "npu_swiglu":
            dim = int_value(self._arg(node, 1, "dim"))
            if dim == 0:
                self.report(
                    node,
                    "`npu_swiglu(..., dim=0)` splits the token axis into gate and up halves: the projection's "
                    "gate/up halves lie on the last (feature) dim; use `dim=-1`",
                )
            else:
                self._swiglu_halves(node, -1 if dim is None and self._arg(node, 1, "dim") is None else dim)
        elif kernel == "npu_fusion_attention":
            self._fusion_attention(node)
        elif kernel == "npu_grouped_matmul":
            self._group_list_type(node)

    def _other_rotary(self, call: ast.Call) -> None:
        """Another Ascend rotary kernel told its convention by a literal ``rotary_mode`` keyword
        (``npu_apply_rotary_pos_emb``, ``npu_mrope``): held to the module's rotary convention like
        ``npu_rotary_mul`` (modes other than "half" / "interleave" are left alone)."""
        given = next((k.value for k in call.keywords if k.arg == "rotary_mode"), None)
        mode = _str(given) if given is not None else None
        if mode not in NPU_ROTARY_MODES or not isinstance(call.func, (ast.Name, ast.Attribute)):
            return
        qual = self.ctx.local_qualname(call.func) or ""
        if isinstance(call.func, ast.Name):
            qual = self.ctx.imports.get(call.func.id, qual)
        if qual.startswith(_PREFIXES):
            self._module_convention(call, mode, "cos/sin", qual.rpartition(".")[2])

    def _constant_mode(self, node: ast.expr) -> str | None:
        """A mode named by a module-level string constant (``ROPE_MODE = "interleave"``); None for anything else (a
        parameter, a config read: the caller decides, nothing to judge here)."""
        if not isinstance(node, ast.Name):
            return None
        values = [
            _str(stmt.value)
            for stmt in self.ctx.tree.body
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets)
        ]
        return values[0] if len(values) == 1 else None

    def _rotary_layout(self, call: ast.Call, mode: str) -> None:
        """cos/sin laid out for one rotary mode (each frequency repeated for its pair, ``repeat_interleave(2,
        dim=-1)``: interleaved pairs; the halves concatenated, ``torch.cat((f, f), dim=-1)``: rotate-half) handed
        to ``npu_rotary_mul`` in the other mode: the function's own preparation is the reference."""
        function = self.ctx.function
        cos = self._arg(call, 1, "r1")
        if function is None or not isinstance(cos, ast.Name):
            if function is not None and cos is not None:
                self._module_convention(call, mode, ast.unparse(cos))
            return
        built = [
            a.value
            for a in nodes_of(function, ast.Assign)
            if any(isinstance(t, ast.Name) and t.id == cos.id for t in a.targets)  # type: ignore[attr-defined]
        ]
        steps = [
            {
                _pair_layout(c)
                for c in walk(value)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            }
            - {None}
            for value in built
        ]
        if not any(steps):
            helper = self._table_helper(function, cos.id)
            if helper is not None:
                # built by a function imported from another module: that module's rotary code is the reference
                found = helper_convention(self.ctx.tree, self.ctx.source.path, helper)
                if found is not None and found[0] != mode:
                    self._report_convention(call, mode, cos.id, found)
                return
            # not laid out here (handed in, only unsqueezed or cast): the module's rotary code is the reference
            self._module_convention(call, mode, cos.id)
            return
        if len(built) != 1:
            return
        calls = steps[0]
        laid = "interleave" if "interleave" in calls else "half" if "half" in calls else None
        if laid is None:
            return
        if laid == mode:
            return
        how = (
            "repeats each frequency for its pair (interleaved)"
            if laid == "interleave"
            else "concatenates halves"
        )
        self.report(
            call,
            f'`npu_rotary_mul` runs in rotary_mode "{mode}", but `{cos.id}` is built for "{laid}" (it {how}, line '
            f"{built[0].lineno}): the kernel rotates other element pairs than the table was made for; pass "
            f'`rotary_mode="{laid}"`',
        )

    def _module_convention(
        self, call: ast.Call, mode: str, table: str, kernel: str = "npu_rotary_mul"
    ) -> None:
        """The table is not built here (a parameter, the caller's tensor): the module's own rotary code (its
        tables and eager rotation, upstream's for a spec, the package's eager fallback for an adapter) says which
        channels pair up; a mode that is not that convention rotates other pairs than the tables were built for."""
        found = convention(self.ctx.tree, self.ctx.source.text, self.ctx.source.path)
        if found is None or found[0] == mode:
            return
        self._report_convention(call, mode, table, found, kernel)

    def _table_helper(self, function: ast.AST, table: str) -> str | None:
        """The imported function whose call binds ``table`` in ``function`` (``cos, sin = rope_tables(freqs)``
        with ``from .tables import rope_tables``), or None."""
        for a in nodes_of(function, ast.Assign):
            assert isinstance(a, ast.Assign)
            if not any(isinstance(n, ast.Name) and n.id == table for t in a.targets for n in ast.walk(t)):
                continue
            if isinstance(a.value, ast.Call) and isinstance(a.value.func, ast.Name):
                name = a.value.func.id
                if imported_helper(self.ctx.tree, name):  # type: ignore[arg-type]
                    return name
        return None

    def _report_convention(
        self, call: ast.Call, mode: str, table: str, found: tuple[str, str], kernel: str = "npu_rotary_mul"
    ) -> None:
        laid, where = found
        written = (
            "" if any(k.arg == "rotary_mode" for k in call.keywords) or len(call.args) > 3 else " (default)"
        )
        self.report(
            call,
            f'`{kernel}` runs in rotary_mode "{mode}"{written}, but `{table}` comes from rotary code that '
            f'follows the "{laid}" convention ({where}): the kernel rotates other channel pairs than the eager '
            f'path and the cos/sin tables do; pass `rotary_mode="{laid}"`',
        )

    def _rotary_rank(self, call: ast.Call) -> None:
        """``npu_rotary_mul(x, r1, r2)`` multiplies tensors of one rank (4-D): a cos/sin table lacks the head axis
        of the queries and keys it rotates, so a wrapper that shapes the table itself (unsqueezes it) must add at
        least one axis more to it than to ``x``. A table given as many new axes as ``x`` (or fewer) reaches the
        kernel one rank short: rejected, or broadcast along the wrong axes."""
        function = self.ctx.function
        x, cos = self._arg(call, 0, "input"), self._arg(call, 1, "r1")
        if function is None or x is None or cos is None:
            return
        params = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
        defs = _single_bindings(function, call.lineno)
        rotated, table = _rank_origin(x, defs, params), _rank_origin(cos, defs, params)
        if rotated is None or table is None or rotated[0] == table[0]:
            return
        (x_name, added_x), (cos_name, added_cos) = rotated, table
        if added_cos > added_x:
            return
        if added_cos < 1 and not self._table_shaped_elsewhere(call, function, defs, params, cos_name):
            return  # the caller may have shaped it: nothing here says the table lacks the head axis
        if any(c == added_cos and a < c for a, c in self._sibling_ranks(call, function, params, cos_name)):
            return  # a sibling rotation takes this very table for an unsqueezed-less tensor: its rank is right
        if self._callers_shape(function, cos_name):
            return  # the callers in this file hand the table in with its head axis already added
        self.report(
            call,
            f"`npu_rotary_mul` needs `{ast.unparse(cos)}` of the rank of `{ast.unparse(x)}`, but the table "
            f"`{cos_name}` (which has no head axis) gets {added_cos} new {'axis' if added_cos == 1 else 'axes'} here "
            f"and `{x_name}` gets {added_x}: "
            "it reaches the kernel at least one rank short and is rejected or broadcast along the wrong axes; "
            "unsqueeze the table once more than the tensor it rotates (at the head axis)",
        )

    def _sibling_ranks(self, call: ast.Call, function: ast.AST, params: set[str], table: str) -> list[tuple]:
        """(axes added to the tensor, axes added to the table) of the function's other rotations of ``table``."""
        out = []
        for other in nodes_of(function, ast.Call):
            if other is call or not isinstance(other, ast.Call) or self._kernel(other) != "npu_rotary_mul":
                continue
            defs = _single_bindings(function, other.lineno)
            x, cos = self._arg(other, 0, "input"), self._arg(other, 1, "r1")
            found = [_rank_origin(v, defs, params) if v is not None else None for v in (x, cos)]
            if found[0] is not None and found[1] is not None and found[1][0] == table:
                out.append((found[0][1], found[1][1]))
        return out

    def _callers_shape(self, function: ast.FunctionDef | ast.AsyncFunctionDef, table: str) -> bool:
        """A call of ``function`` elsewhere in the file hands ``table`` in unsqueezed (``cos.unsqueeze(-2)``)."""
        names = [a.arg for a in function.args.args if a.arg not in ("self", "cls")]
        for caller in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            for c in nodes_of(caller, ast.Call):
                if not (isinstance(c, ast.Call) and _last(c.func) == function.name):
                    continue
                arg = next((k.value for k in c.keywords if k.arg == table), None)
                if arg is None and table in names and names.index(table) < len(c.args):
                    arg = c.args[names.index(table)]
                ps = {a.arg for a in (*caller.args.posonlyargs, *caller.args.args, *caller.args.kwonlyargs)}
                found = _rank_origin(arg, _single_bindings(caller, c.lineno), ps) if arg is not None else None
                if found is not None and found[1] >= 1:
                    return True
        return False

    def _table_shaped_elsewhere(
        self, call: ast.Call, function: ast.AST, defs: dict[str, ast.expr], params: set[str], table: str
    ) -> bool:
        """Another ``npu_rotary_mul`` call of the function unsqueezes the same table parameter for the kernel (the
        query's rotation given ``cos.unsqueeze(1)``): the table arrives without the head axis."""
        for other in nodes_of(function, ast.Call):
            if other is call or not isinstance(other, ast.Call) or self._kernel(other) != "npu_rotary_mul":
                continue
            cos = self._arg(other, 1, "r1")
            found = _rank_origin(cos, _single_bindings(function, other.lineno), params) if cos else None
            if found is not None and found[0] == table and found[1] >= 1:
                return True
        return False

    def _swiglu_halves(self, call: ast.Call, dim: int | None) -> None:
        """``npu_swiglu(t, dim)`` is ``silu(t1) * t2`` for the halves ``t1, t2`` of ``t`` along ``dim``: the half
        named for the gate must come first. A concatenation (in the call, or the local it reads) along that axis
        with a gate-named second half and a first half not named for the gate activates the wrong operand."""
        if dim is None:
            return
        value = self._resolved(self._arg(call, 0, "input") or ast.Pass())  # type: ignore[arg-type]
        if not (isinstance(value, ast.Call) and _last(value.func) in ("cat", "concat", "concatenate")):
            return
        halves = (
            value.args[0]
            if value.args
            else next((k.value for k in value.keywords if k.arg == "tensors"), None)
        )
        if not isinstance(halves, (ast.List, ast.Tuple)) or len(halves.elts) != 2:
            return
        if any(isinstance(e, ast.Starred) for e in halves.elts):
            return
        axis = next((k.value for k in value.keywords if k.arg in ("dim", "axis")), None)
        if axis is None and len(value.args) > 1:
            axis = value.args[1]
        cat_dim = 0 if axis is None else int_value(axis)
        if cat_dim is None or cat_dim != dim:
            return  # another axis than the kernel splits: not its halves
        first, second = halves.elts
        if not _gate_half(second) or _gate_half(first):
            return
        self.report(
            halves,
            f"`npu_swiglu` applies SiLU to the first half of its input and multiplies the second by it, but "
            f"`{ast.unparse(value)}` puts the gate (`{ast.unparse(second)}`) second: the activation lands on "
            f"`{ast.unparse(first)}` instead of the gate; concatenate the gate first",
        )

    @staticmethod
    def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg == keyword:
                return kw.value
        if 0 <= index < len(call.args) and not any(
            isinstance(a, ast.Starred) for a in call.args[: index + 1]
        ):
            return call.args[index]
        return None

    # -- tuple results ------------------------------------------------------------------------------------
    def _learned_sequence(self, call: ast.Call) -> tuple[str, int] | None:
        """(kernel, count) when ``call`` is a ``torch_npu`` kernel that the tree's other calls (at least two, each
        counted once across a spec and its generated copy) all take apart: subscript or unpack. The tree's own
        habit says the kernel returns a list or tuple; None otherwise."""
        if self._own is None:
            path = os.path.realpath(self.ctx.source.path)
            self._own = file_calls(self.ctx.tree, path)
            self._tree = tree_calls(self.ctx.project) if self._own else {}
        hit = self._own.get(id(call))
        if hit is None:
            return None
        kernel, me = hit
        assert self._tree is not None
        others = [c for k, c in self._own.values() if k == kernel and c is not me]
        others += [c for c in self._tree.get(kernel, ()) if c.path != me.path]
        seen = {(os.path.splitext(os.path.basename(c.path))[0], c.texts, c.result) for c in others}
        if len(seen) < 2 or any(not result for _stem, _texts, result in seen):
            return None
        return kernel, len(seen)

    def _tuple_result(self, call: ast.Call, kernel: str, evidence: str = "", listed: bool = False) -> None:
        """The result of a kernel that returns a tuple (``npu_rms_norm``'s ``(y, rstd)``) or a list of tensors
        (``npu_grouped_matmul``) used as one tensor: returned from a ``forward`` / ``backward`` (a module's, an
        autograd Function's), a tensor method or arithmetic on it, or a local bound to it and used so without
        ever being subscripted or unpacked. ``listed``: a list result, which a plain wrapper may hand on to
        callers that index it, so returning it counts only from a ``forward`` / ``backward``."""
        parents = self.ctx.parents
        parent = self.ctx.parent
        function = self.ctx.function
        stage = function is not None and any(w in function.name for w in ("forward", "backward"))
        if isinstance(parent, ast.Tuple) and len(parents) > 1 and isinstance(parents[-2], ast.Return):
            parent = parents[-2]  # ``return npu_x(...), None`` from a backward
        if isinstance(parent, ast.Return) and stage:
            # a module's forward hands the tuple on as its output; a raw wrapper may leave `[0]` to its caller
            self._report_tuple(call, kernel, "", evidence, listed)
            return
        if (
            isinstance(parent, ast.Attribute)
            and parent.value is call
            and parent.attr not in _SEQUENCE_METHODS
        ):
            self._report_tuple(call, kernel, "", evidence, listed)
            return
        if isinstance(parent, ast.BinOp) or self._tensor_input(parent, call):
            self._report_tuple(call, kernel, "", evidence, listed)
            return
        if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1):
            return
        target = parent.targets[0]
        if not isinstance(target, ast.Name) or function is None:
            return
        uses = []
        unpacked = False
        for sub in walk(function):
            if (
                isinstance(sub, ast.Subscript)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == target.id
            ):
                return  # indexed somewhere
            if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Name) and sub.value.id == target.id:
                if isinstance(sub.targets[0], ast.Tuple):
                    unpacked = True
            if isinstance(sub, (ast.Starred, ast.For)) and _names(sub, target.id):
                unpacked = True  # ``*out``, ``for t in out``
            if isinstance(sub, ast.Name) and sub.id == target.id and isinstance(sub.ctx, ast.Load):
                uses.append(sub)
        if unpacked or not uses:
            return
        tensor_like = False
        for sub in walk(function):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == target.id
                and sub.attr not in _SEQUENCE_METHODS
            ):
                tensor_like = True
            if isinstance(sub, ast.BinOp) and any(
                isinstance(s, ast.Name) and s.id == target.id for s in (sub.left, sub.right)
            ):
                tensor_like = True
            if (
                isinstance(sub, ast.Call)
                and sub.args
                and isinstance(sub.args[0], ast.Name)
                and sub.args[0].id == target.id
                and self._tensor_input(sub, sub.args[0])
            ):
                tensor_like = True
            if isinstance(sub, ast.Return) and (not listed or stage) and sub.value is not None:
                returned = sub.value.elts if isinstance(sub.value, ast.Tuple) and stage else [sub.value]
                if any(isinstance(r, ast.Name) and r.id == target.id for r in returned):
                    tensor_like = True
        if tensor_like:
            self._report_tuple(call, kernel, f" (through `{target.id}`)", evidence, listed)

    def _tensor_input(self, parent: ast.AST | None, value: ast.expr) -> bool:
        """Whether ``value`` is the first argument of a call that wants one tensor there: a ``torch`` /
        ``torch.nn.functional`` function other than those taking a sequence (``cat``, ``stack``...), or an Ascend
        kernel whose input is a tensor (``npu_swiglu``, ``npu_rms_norm``; not ``npu_grouped_matmul``'s lists)."""
        if not (isinstance(parent, ast.Call) and parent.args and parent.args[0] is value):
            return False
        func = parent.func
        kernel = self._kernel(parent) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if kernel is not None:
            return kernel in _TENSOR_INPUT_KERNELS
        if not isinstance(func, ast.Attribute):
            return False
        owner = dotted_name(func.value) or ""
        head, _, rest = owner.partition(".")
        module = self.ctx.imports.get(head, head) + (f".{rest}" if rest else "")
        if module not in ("torch", "torch.nn.functional"):
            return False
        return func.attr not in _SEQUENCE_FUNCTIONS

    def _report_tuple(
        self, call: ast.Call, kernel: str, through: str, evidence: str = "", listed: bool = False
    ) -> None:
        what = (
            "a list of tensors (one per group or split), not a tensor"
            if listed
            else "a tuple whose first element is the output"
        )
        self.report(
            call,
            f"`{kernel}` returns {what}{evidence}, and the result is used as a tensor{through}: take `[0]` (or "
            "unpack it)",
        )

    # -- auxiliary outputs taken as the result -----------------------------------------------------------------
    def _aux_output(self, call: ast.Call, kernel: str) -> None:
        """``hidden_states = npu_rms_norm(hidden_states, w, eps)[1]``: element 1 is the reciprocal RMS, not the
        normalised output; likewise a tuple unpacked with the statistic's and the result's names swapped."""
        aux = NPU_AUX_OUTPUTS[kernel]
        parents = self.ctx.parents
        first = _base(call.args[0]) if call.args else ""
        if parents and isinstance(parents[-1], ast.Assign) and isinstance(parents[-1].targets[0], ast.Tuple):
            names = [dotted_name(e) or "" for e in parents[-1].targets[0].elts]
            if names and _words(names[0], NPU_AUX_WORDS):
                for index in aux:
                    if index < len(names) and _words(names[index], NPU_RESULT_WORDS):
                        self.report(
                            parents[-1].targets[0],
                            f"`{kernel}` returns its output first and {aux[index]} at element {index}, but the "
                            f"result is unpacked as `{names[0]}` and `{names[index]}`: the names hold each "
                            "other's values; swap the targets",
                        )
                        return
            return
        if not parents or not isinstance(parents[-1], ast.Subscript) or parents[-1].value is not call:
            return
        index = int_value(parents[-1].slice)
        if index not in aux:
            return
        node: ast.AST = parents[-1]
        level = len(parents) - 2
        # climb through elementwise conversions (``[1].to(x.dtype)``)
        while (
            level >= 1
            and isinstance(parents[level], ast.Attribute)
            and isinstance(parents[level - 1], ast.Call)
            and getattr(parents[level - 1], "func", None) is parents[level]
            and parents[level].attr in _ELEMENTWISE  # type: ignore[attr-defined]
        ):
            node = parents[level - 1]
            level -= 2
        holder = parents[level] if level >= 0 else None
        function = self.ctx.function
        target = ""
        if isinstance(holder, ast.Assign) and holder.value is node and len(holder.targets) == 1:
            target = dotted_name(holder.targets[0]) or ""
            if not target or _words(target, NPU_AUX_WORDS):
                return
            if target != first and not _words(target, NPU_RESULT_WORDS):
                return
        elif isinstance(holder, ast.Return):
            if function is None or _words(function.name, NPU_AUX_WORDS):
                return
        else:
            return
        where = f"`{target}`" if target else f"the result of `{function.name}`"  # type: ignore[union-attr]
        self.report(
            parents[-1],
            f"element {index} of `{kernel}` is {aux[index]}, not the kernel's output (element 0), yet it becomes "
            f"{where}: every consumer gets the statistic instead of the result; take `[0]`",
        )

    def _permute_out_tokens(self, call: ast.Call) -> None:
        """``npu_moe_token_permute(tokens, indices, num_out_tokens=tokens.shape[0])``: the permuted output holds
        one row per routed copy (tokens x top-k, ``indices.numel()``); capping it at the token count drops the
        other copies."""
        value = self._arg(call, 2, "num_out_tokens")
        if value is None or not call.args:
            return
        tokens = _base(call.args[0])
        seen = self._resolved(value)
        counted = None
        if self._shape_axis(seen) == 0:
            counted = seen.value.value if isinstance(seen, ast.Subscript) else seen.func.value  # type: ignore[attr-defined]
        elif isinstance(seen, ast.Call) and _last(seen.func) == "len" and len(seen.args) == 1:
            counted = seen.args[0]
        if counted is None or not tokens or _base(counted) != tokens:
            return
        if self._recounted(value, tokens) or (len(call.args) >= 2 and self._one_per_row(call.args[1])):
            return
        self.report(
            value,
            f"`num_out_tokens={ast.unparse(value)}` is the number of tokens, but `npu_moe_token_permute` emits one "
            "row per routed copy (tokens x top-k, the index tensor's `numel()`): the other copies are dropped and "
            "the expert splits no longer match; leave it unset or pass the indices' `numel()`",
        )

    def _recounted(self, value: ast.expr, tokens: str) -> bool:
        """The count is scaled (``n *= top_k``) or the tokens were expanded to one row per routed copy
        (``tokens = tokens.repeat_interleave(top_k, dim=0)``) in the function: the count is the copies'."""
        function = self.ctx.function
        if function is None:
            return False
        for sub in walk(function):
            if isinstance(sub, ast.AugAssign) and isinstance(value, ast.Name):
                if isinstance(sub.target, ast.Name) and sub.target.id == value.id:
                    return True
            if isinstance(sub, ast.Assign) and any(dotted_name(t) == tokens for t in sub.targets):
                if any(
                    isinstance(c, ast.Call) and _last(c.func) in ("repeat_interleave", "repeat", "expand")
                    for c in walk(sub.value)
                ):
                    return True
        return False

    def _one_per_row(self, indices: ast.expr) -> bool:
        """Top-1 routing: one expert index per token (``expert_index.view(-1, 1)``, ``argmax(...)``,
        ``topk(..., 1)``, a function or index named ``top1``), so the copies are the tokens."""
        function = self.ctx.function
        names = [_last(indices), getattr(function, "name", "")]
        if any(re.search(r"top_?1(?!\d)", n.lower()) for n in names):
            return True
        seen = self._resolved(indices) if isinstance(indices, ast.Name) else indices
        for c in walk(seen):
            if not isinstance(c, ast.Call):
                continue
            args = [int_value(a) for a in c.args]
            if _last(c.func) in ("view", "reshape") and args[-2:] == [-1, 1]:
                return True
            if _last(c.func) == "argmax":
                return True
            k = c.args[1] if _last(c.func) == "topk" and len(c.args) >= 2 else None
            k = next((kw.value for kw in c.keywords if kw.arg == "k"), k) if _last(c.func) == "topk" else None
            if k is not None and int_value(k) == 1:
                return True
        return False

    # -- argument roles -----------------------------------------------------------------------------------
    def _roles(self, call: ast.Call, kernel: str) -> None:
        positional = dict(NPU_POSITIONAL_ROLES.get(kernel, ()))
        keyword = NPU_KEYWORD_ROLES.get(kernel, {})
        family = {r for r in (*positional.values(), *keyword.values()) if r in NPU_ROLE_WORDS}
        slots: list[tuple[ast.expr, str, str]] = []
        for index, role in positional.items():
            if role in NPU_ROLE_WORDS and index < len(call.args):
                slots.append((call.args[index], role, f"argument {index + 1}"))
        for kw in call.keywords:
            role = keyword.get(kw.arg or "")
            if role is not None:
                slots.append((kw.value, role, f"`{kw.arg}=`"))
        for value, role, where in slots:
            spelled = _roles(value) & family
            if spelled and role not in spelled:
                other = sorted(spelled)[0]
                self.report(
                    value,
                    f"`{ast.unparse(value)}` is passed as {where} of `{kernel}`, which takes the {role} there; it "
                    f"reads as the {other}: the arguments are in each other's place",
                )

    # -- npu_fusion_attention -----------------------------------------------------------------------------
    def _fusion_attention(self, call: ast.Call) -> None:
        layout = _str(self._arg(call, 4, "input_layout"))
        if layout is not None and layout not in NPU_FA_LAYOUT_HEAD_AXIS:
            self.report(
                call,
                f'`npu_fusion_attention` has no input_layout "{layout}" '
                f"({', '.join(sorted(NPU_FA_LAYOUT_HEAD_AXIS))})",
            )
        keywords = {kw.arg for kw in call.keywords}
        if layout == "TND" and not {"actual_seq_qlen", "actual_seq_kvlen"} <= keywords:
            self.report(
                call,
                '`npu_fusion_attention(..., input_layout="TND")` needs `actual_seq_qlen` and `actual_seq_kvlen` '
                "(the cumulative sequence ends of the packed batch): without them the packed sequences attend "
                "to each other or the call fails",
            )
        head = self._arg(call, 3, "head_num")
        axis = NPU_FA_LAYOUT_HEAD_AXIS.get(layout or "")
        read = self._shape_axis(head)
        if axis is not None and read is not None:
            rank = 3 if layout == "TND" else 4
            if read % rank != axis:
                self.report(
                    head,
                    f"`head_num={ast.unparse(head)}` reads axis {read} of a {layout} tensor, whose head axis is "
                    f"{axis}: the kernel is told the sequence or head-dim length as the head count",
                )
        keep = self._arg(call, -1, "keep_prob")
        if keep is not None and "drop" in _last(keep).lower() and "keep" not in _last(keep).lower():
            self.report(
                keep,
                f"`keep_prob={ast.unparse(keep)}` passes the dropout rate as the probability to keep: use "
                f"`1.0 - {ast.unparse(keep)}`",
            )
        scale = self._arg(call, -1, "scale")
        if scale is not None and self._sqrt_scale(scale):
            self.report(
                scale,
                f"`scale={ast.unparse(scale)}` multiplies the scores by the square root of the head dim: the "
                "softmax scale is its reciprocal (`1 / math.sqrt(head_dim)`)",
            )
        mode = int_value(self._arg(call, -1, "sparse_mode"))
        if mode is not None and mode not in NPU_FA_SPARSE_MODES:
            self.report(call, f"`npu_fusion_attention` has no sparse_mode {mode} (0-8)")
        mask = self._arg(call, -1, "atten_mask")
        if mask is not None:
            self._mask(mask)

    def _group_list_type(self, call: ast.Call) -> None:
        """``group_list_type`` 0 reads the group list as cumulative ends, 1 as per-group counts: a list built by
        ``cumsum`` with type 1, or by ``bincount`` / ``histc`` with type 0 (the default), splits the tokens
        wrongly."""
        group = self._arg(call, -1, "group_list")
        if group is None:
            return
        kind = int_value(self._arg(call, -1, "group_list_type"))
        if kind is None and any(kw.arg == "group_list_type" for kw in call.keywords):
            return
        kind = 0 if kind is None else kind
        built = None
        value = self._resolved(group)
        for sub in walk(value):
            if isinstance(sub, ast.Call) and _last(sub.func) in ("cumsum", "bincount", "histc"):
                built = _last(sub.func)
                break
        if built is None:
            return
        if built == "cumsum" and kind == 1:
            self.report(
                group,
                f"`group_list={ast.unparse(group)}` is a cumulative sum, but `group_list_type=1` tells "
                "`npu_grouped_matmul` the list holds per-group counts: every expert after the first gets the "
                "wrong rows; use `group_list_type=0` or pass the counts",
            )
        elif built != "cumsum" and kind == 0:
            self.report(
                group,
                f"`group_list={ast.unparse(group)}` holds per-group counts (`{built}`), but `group_list_type` is 0 "
                "(cumulative ends, the default): `npu_grouped_matmul` splits the tokens wrongly; pass "
                "`group_list_type=1` or a cumulative list",
            )

    @staticmethod
    def _shape_axis(node: ast.expr | None) -> int | None:
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
        ):
            return int_value(node.slice)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size"
            and len(node.args) == 1
        ):
            return int_value(node.args[0])
        return None

    def _resolved(self, node: ast.expr) -> ast.expr:
        """A local name's last assignment in the function, once."""
        function = self.ctx.function
        if not isinstance(node, ast.Name) or function is None:
            return node
        best: ast.Assign | None = None
        for sub in walk(function):
            if (
                isinstance(sub, ast.Assign)
                and len(sub.targets) == 1
                and isinstance(sub.targets[0], ast.Name)
                and sub.targets[0].id == node.id
                and sub.lineno < node.lineno
                and (best is None or sub.lineno > best.lineno)
            ):
                best = sub
        return best.value if best is not None else node

    def _sqrt_scale(self, node: ast.expr) -> bool:
        value = self._resolved(node)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Pow):
            return _const(value.right) == 0.5
        if isinstance(value, ast.Call) and _last(value.func) == "sqrt":
            arg = value.args[0] if value.args else None
            # `sqrt(1.0 / head_dim)` is the right scale
            return not (
                isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div) and _const(arg.left) is not None
            )
        return False

    def _mask(self, mask: ast.expr) -> None:
        value = self._resolved(mask)
        for sub in walk(value):
            if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, (ast.Invert, ast.Not)):
                return
            if isinstance(sub, ast.Compare) or (
                isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub) and _const(sub.left) == 1
            ):
                return  # `tril(...) == 0`, `1 - tril(...)`: the mask is inverted
            if isinstance(sub, ast.Call) and _last(sub.func) in ("logical_not", "eq"):
                return
        for sub in walk(value):
            if not isinstance(sub, ast.Call):
                continue
            name = _last(sub.func)
            if name == "tril":
                self.report(
                    mask,
                    "the attention mask is built with `tril`, but `npu_fusion_attention` masks out the True "
                    "entries: a lower-triangular mask hides the past and keeps the future; build it with "
                    "`torch.triu(..., diagonal=1)`",
                )
                return
            if name == "triu":
                diagonal = next((k.value for k in sub.keywords if k.arg == "diagonal"), None)
                if diagonal is None and len(sub.args) > 1:
                    diagonal = sub.args[1]
                if int_value(diagonal) in (None, 0) and (diagonal is None or int_value(diagonal) == 0):
                    self.report(
                        mask,
                        "the causal mask is `triu` without `diagonal=1`: `npu_fusion_attention` masks out the "
                        "True entries, so every token is also hidden from itself; use `diagonal=1`",
                    )
                return


def _const(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    return None
