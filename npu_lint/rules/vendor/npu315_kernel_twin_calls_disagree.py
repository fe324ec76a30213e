"""NPU315 kernel-twin-calls-disagree."""

from __future__ import annotations

import ast
import re
from collections import Counter

from npu_lint.core.astutil import dotted_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import norms
from npu_lint.veomni.npucalls import kernel_of, torch_npu_names
from npu_lint.veomni.vendor_map import NPU_TWIN_OPTIONS

_UNSET = object()
# keyword options that choose what a call returns or keeps, not how it computes: a backward's recompute may set
# them otherwise (`output_final_state=False`, `save_new_value=True`, `return_lse=False`)
_OUTPUT_OPTION = re.compile(
    r"^(output|return|save|store|keep|need|needs|require|requires|emit|with|compute)_|grad"
)
# the forward / backward naming of a kernel's two passes (an autograd Function's methods, module functions)
_PASSES = (("forward", "backward"), ("fwd", "bwd"))


def _op_kernel(call: ast.Call, imported: frozenset[str]) -> str | None:
    """A fused kernel a call launches: a ``torch_npu`` kernel, or a dispatcher operator ``torch.ops.<ns>.<op>``
    (its ``.default`` overload included)."""
    kernel = kernel_of(call, imported)
    if kernel is not None:
        return kernel
    name = dotted_name(call.func) or ""
    parts = name.split(".")
    if len(parts) in (4, 5) and parts[:2] == ["torch", "ops"] and (len(parts) == 4 or parts[4] == "default"):
        return ".".join(parts[:4])
    return None


def _same_inputs(first: ast.Call, second: ast.Call) -> bool:
    """Two calls handed the same data: the same positional arguments (by their text), or, without positional
    arguments, the same values for every data keyword they share (at least one). A backward's recompute reads what
    the forward read; a backward that reuses the kernel for a gradient (`[grad], [w.T]`) reads other data."""
    if first.args or second.args:
        return len(first.args) == len(second.args) and all(
            ast.dump(a) == ast.dump(b) for a, b in zip(first.args, second.args)
        )
    shared = {k.arg: k.value for k in first.keywords if k.arg}
    common = [(shared[k.arg], k.value) for k in second.keywords if k.arg in shared and not _literal(k.value)]
    return bool(common) and all(ast.dump(a) == ast.dump(b) for a, b in common)


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _literal_options(call: ast.Call) -> dict[str, object]:
    """The keyword options a call passes a literal (``use_exp2=False``, ``rotary_mode="half"``)."""
    out: dict[str, object] = {}
    for kw in call.keywords:
        if kw.arg is None or _OUTPUT_OPTION.search(kw.arg):
            continue
        try:
            value = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, (bool, int, float, str)):
            out[kw.arg] = value
    return out


def _autograd(node: ast.ClassDef) -> bool:
    """A custom ``torch.autograd.Function`` (its forward and backward are one unit)."""
    return any((dotted_name(b) or "").endswith("Function") for b in node.bases)


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def _option(call: ast.Call, index: int, keyword: str, default: object) -> object:
    """The option's effective literal value (its default when not passed), ``_UNSET`` when not a literal."""
    node = _arg(call, index, keyword)
    if node is None:
        if any(kw.arg is None for kw in call.keywords):
            return _UNSET
        return default
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNSET


def _transposed(node: ast.expr) -> str | None:
    """``g.T`` / ``g.mT`` / ``g.t()`` / ``g.transpose(..)`` / ``torch.transpose(g, ..)`` -> ``g``."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(node.value, ast.Name):
        return node.value.id
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("t", "transpose") and isinstance(node.func.value, ast.Name):
            if node.func.value.id == "torch" and node.args and isinstance(node.args[0], ast.Name):
                return node.args[0].id
            if node.func.value.id != "torch":
                return node.func.value.id
    return None


def _single(node: ast.expr | None) -> ast.expr | None:
    """The one element of ``[x]`` (a grouped matmul's tensor list)."""
    if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 1:
        return node.elts[0]
    return None


def _products(unit: ast.AST, imported: frozenset[str]) -> list[tuple[ast.AST, ast.expr, ast.expr]]:
    """Every matrix product in ``unit``: ``npu_grouped_matmul([a], [b], ...)``, ``torch.matmul(a, b)``, ``a @ b``."""
    out: list[tuple[ast.AST, ast.expr, ast.expr]] = []
    for node in nodes_of(unit, ast.Call, ast.BinOp):
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.MatMult):
                out.append((node, node.left, node.right))
            continue
        assert isinstance(node, ast.Call)
        if kernel_of(node, imported) == "npu_grouped_matmul" and len(node.args) >= 2:
            a, b = _single(node.args[0]), _single(node.args[1])
            if a is not None and b is not None:
                out.append((node, a, b))
        elif (dotted_name(node.func) or "") in ("torch.matmul", "torch.mm", "torch.bmm") and len(
            node.args
        ) == 2:
            out.append((node, node.args[0], node.args[1]))
    return out


_Chain = list[tuple[ast.AST, str, int]]


def _chains(unit: ast.AST) -> dict[int, _Chain]:
    """For every node of ``unit``, its ancestors from ``unit`` down: (ancestor, field, index in a list field)."""
    out: dict[int, _Chain] = {id(unit): []}
    stack = [unit]
    while stack:
        node = stack.pop()
        chain = out[id(node)]
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for i, child in enumerate(children):
                if isinstance(child, ast.AST):
                    out[id(child)] = [*chain, (node, field, i)]
                    stack.append(child)
    return out


def _leaves(block: list[ast.stmt]) -> bool:
    """A statement list that never falls through (it ends in ``return`` / ``raise`` / ``continue`` / ``break``)."""
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _exclusive(a: _Chain, b: _Chain) -> bool:
    """Two nodes (by their ancestor chains) on exclusive paths: the two arms of an ``if`` / conditional
    expression, two ``match`` cases, or inside an ``if`` arm that returns and after that ``if``."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if i >= len(a) or i >= len(b):
        return False
    (parent, fa, ia), (_, fb, ib) = a[i], b[i]
    if isinstance(parent, (ast.If, ast.IfExp)) and {fa, fb} == {"body", "orelse"}:
        return True
    if isinstance(parent, ast.Match) and fa == fb == "cases" and ia != ib:
        return True
    if fa == fb and ia != ib and isinstance(getattr(parent, fa, None), list):
        first, inner = (a, i) if ia < ib else (b, i)
        stmt = getattr(parent, fa)[min(ia, ib)]
        if isinstance(stmt, ast.If) and len(first) > inner + 1:
            arm = first[inner + 1][1]
            if arm in ("body", "orelse") and _leaves(getattr(stmt, arm)):
                return True
    return False


def _kept(unit: ast.AST, stash: ast.AST, name: str) -> bool:
    """``name`` is not rebound in the function that stashes it after the stash: its later calls read that data."""
    scopes = [
        f
        for f in nodes_of(unit, ast.FunctionDef, ast.AsyncFunctionDef)
        if f.lineno <= stash.lineno <= (f.end_lineno or 0)
    ]
    return not any(
        isinstance(n.ctx, ast.Store) and n.id == name and n.lineno > stash.lineno
        for n in nodes_of(scopes[-1] if scopes else unit, ast.Name)
    )


def _carried(unit: ast.AST) -> set[int]:
    """The name stores of ``unit`` that only take back what the forward handed the backward under the same name:
    ``group_list = ctx.group_list`` after ``ctx.group_list = group_list``, ``x, w = ctx.saved_tensors`` after
    ``ctx.save_for_backward(x, w)``. They bind the same data again, not new data."""
    stashed: set[tuple[str, str]] = set()  # (attribute, name)
    saved: list[str] = []
    for node in nodes_of(unit, ast.Assign, ast.Call):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and _kept(unit, node, node.value.id)
                ):
                    stashed.add((target.attr, node.value.id))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "save_for_backward"
        ):
            saved = [a.id if isinstance(a, ast.Name) and _kept(unit, node, a.id) else "" for a in node.args]
    out: set[int] = set()
    for node in nodes_of(unit, ast.Assign):
        if len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if not isinstance(value, ast.Attribute) or not isinstance(value.value, ast.Name):
            continue
        if isinstance(target, ast.Name) and (value.attr, target.id) in stashed:
            out.add(id(target))
        elif isinstance(target, (ast.Tuple, ast.List)) and value.attr == "saved_tensors":
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name) and i < len(saved) and saved[i] == elt.id:
                    out.add(id(elt))
    return out


def _stores(unit: ast.AST) -> dict[str, list[int]]:
    """The lines where each name of ``unit`` is (re)bound to new data (a backward taking back what its forward
    stashed in ``ctx`` under the same name rebinds nothing)."""
    carried = _carried(unit)
    out: dict[str, list[int]] = {}
    for node in nodes_of(unit, ast.Name):
        if isinstance(node.ctx, ast.Store) and id(node) not in carried:
            out.setdefault(node.id, []).append(node.lineno)
    return out


def _same_binding(first: ast.Call, second: ast.Call, names: set[str], stores: dict[str, list[int]]) -> bool:
    """No name the two calls share is rebound between them: they read the same values."""
    lo, hi = sorted((first.lineno, second.lineno))
    return not any(lo <= line < hi for name in names for line in stores.get(name, ()))


def _transposed_back(product: ast.AST, chains: dict[int, _Chain], unit: ast.AST) -> bool:
    """The product's result is transposed again: ``(a @ b).T`` / ``torch.bmm(a, b).transpose(1, 2)``, or the
    variable it is assigned to is (``dw_t = ...; return dw_t.transpose(1, 2)``)."""
    chain = chains.get(id(product), [])
    parent = chain[-1][0] if chain else None
    if isinstance(parent, ast.Attribute) and parent.attr in ("T", "mT"):
        return True
    if isinstance(parent, ast.Attribute) and parent.attr in ("t", "transpose") and len(chain) >= 2:
        return isinstance(chain[-2][0], ast.Call) and chain[-2][0].func is parent
    if isinstance(parent, ast.Call) and (dotted_name(parent.func) or "") == "torch.transpose":
        return bool(parent.args) and parent.args[0] is product
    if (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        name = parent.targets[0].id
        return any(
            isinstance(n, ast.expr) and _transposed(n) == name and n.lineno >= parent.lineno
            for n in ast.walk(unit)
        )
    return False


class KernelTwinCallsDisagree(Rule):
    code = "NPU315"
    name = "kernel-twin-calls-disagree"
    summary = (
        "Two calls of one Ascend kernel in the same adapter (the q and k rotations, a grouped matmul's forward and "
        "backward) read the same data in different layouts, or the query-side call of a q/k norm kernel is fed "
        "the key-side tensor (or the reverse), or the backward's weight gradient multiplies its operands in the "
        "other order than the forward's product implies."
    )
    why = (
        "A kernel adapter calls the same kernel on twin inputs: `npu_rotary_mul(q, cos, sin)` and "
        "`npu_rotary_mul(k, cos, sin)` read one cos/sin table, the forward and the backward grouped matmuls read "
        "one `group_list`. The options that say how that shared data is laid out (`rotary_mode`, "
        "`group_list_type`) must then agree: a key rotated in interleaved pairs while the query is rotated by "
        "halves no longer encodes relative position, a group list read as counts in the backward and as "
        "cumulative ends in the forward multiplies tokens by the wrong experts in one direction only. The calls "
        "are each other's reference (the majority wins; on a tie, the call that departs from the kernel's default); "
        "what the forward stashes in `ctx` (`ctx.group_list = group_list`, `ctx.save_for_backward(...)`) and the "
        "backward takes back under the same name is the same data. Likewise a backward of "
        "`y = x @ w` owes `dw = x^T @ dy`: `dy^T @ x` is the transposed gradient, a shape error or, for square "
        "experts, silently transposed updates. A backward that launches the forward's kernel again to recompute "
        "what the forward did not save (an autograd Function's `forward` / `backward`, module functions `<x>_fwd` / "
        "`<x>_bwd`) must compute exactly what the forward computed: an option passed a literal in both "
        "(`use_exp2`, `transpose_state_layout`, `chunk_size`, `rotary_mode`) that differs makes the gradients those "
        "of another function. A recompute reads the forward's data (the same positional arguments); a backward that "
        "reuses the kernel on other data (`[grad], [w.T]` for a gradient) is no recompute. Options that only choose what the call returns or keeps (`output_*`, `save_*`, "
        "`return_*`, `*grad*`) may differ; neither call is the reference, so both are marked."
    )
    bad = (
        Example(
            """
            import torch_npu


            def apply_rotary(q, k, cos, sin):
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="interleave")
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="the key rotated in interleaved pairs, the query by halves",
        ),
        Example(
            """
            import torch
            import torch_npu


            class Gmm(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight, group_list):
                    ctx.save_for_backward(x, weight)
                    ctx.group_list = group_list
                    return torch_npu.npu_grouped_matmul([x], [weight], group_list=group_list, group_list_type=1)[0]

                @staticmethod
                def backward(ctx, grad):
                    x, weight = ctx.saved_tensors
                    group_list = ctx.group_list
                    dx = torch_npu.npu_grouped_matmul(
                        [grad], [weight.transpose(1, 2)], group_list=group_list, group_list_type=1
                    )[0]
                    dw = torch_npu.npu_grouped_matmul(
                        [grad.T], [x], group_list=group_list, group_type=2, group_list_type=1
                    )[0]
                    return dx, dw, None
            """,
            path="veomni/ops/kernels/toy_moe/npu_gmm.py",
            title="the weight gradient computed as dy^T x",
        ),
        Example(
            """
            import torch_npu


            def qk_norm_backward(dy_q, dy_k, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
                grad_k, grad_norm_k_weight = torch_npu.npu_rms_norm_backward(dy_k, k, norm_k_weight, invvar_k)
                grad_q, grad_norm_q_weight = torch_npu.npu_rms_norm_backward(dy_q, k, norm_q_weight, invvar_q)
                return grad_q, grad_k, grad_norm_q_weight, grad_norm_k_weight
            """,
            path="veomni/distributed/sequence_parallel/async_ulysses.py",
            title="the query norm's backward recomputed from the keys",
        ),
    )
    good = (
        Example(
            """
            import torch_npu


            def apply_rotary(q, k, cos, sin):
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="half")
                return q_embed, k_embed


            def apply_rotary_video(x, cos_t, sin_t, cos_s, sin_s):
                return (
                    torch_npu.npu_rotary_mul(x, cos_t, sin_t, rotary_mode="interleave"),
                    torch_npu.npu_rotary_mul(x, cos_s, sin_s),
                )
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
        ),
    )
    bad += (
        Example(
            """
            import torch


            def chunk_scan_fwd(x, decay, chunk_size=64):
                return torch.ops.npu.npu_chunk_scan(x, decay, chunk_size=chunk_size, use_exp2=False)


            def chunk_scan_bwd(dy, x, decay, chunk_size=64):
                h = torch.ops.npu.npu_chunk_scan(x, decay, chunk_size=chunk_size, use_exp2=True)
                return torch.ops.npu.npu_chunk_scan_grad(dy, h, decay)
            """,
            path="veomni/ops/kernels/toy_scan/_ascend/scan.py",
            title="the backward recomputes the forward's kernel with another decay base",
        ),
    )
    fix_safety = "No fix: which layout is right is read from the data's construction and the eager reference."
    requires = (("torch_npu", "autograd", "torch.ops."),)
    node_types = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _imported(self) -> frozenset[str]:
        imported = self.ctx.memo.get("npucalls.imported")
        if imported is None:
            imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
        return imported  # type: ignore[return-value]

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            if _autograd(node):
                if self.ctx.function is None:  # else the enclosing function's unit holds its twin calls
                    self._twins(node)
                self._weight_grad(node)
                methods = {
                    m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                if "forward" in methods and "backward" in methods:
                    self._recompute(methods["forward"], methods["backward"])
            return
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if self.ctx.function is not None:
            return  # inside the outer function's unit
        if self.ctx.parent is self.ctx.tree:
            for fwd, bwd in _PASSES:
                if node.name.endswith("_" + fwd):
                    partner = node.name[: -len(fwd)] + bwd
                    backward = next(
                        (
                            s
                            for s in self.ctx.tree.body
                            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == partner
                        ),
                        None,
                    )
                    if backward is not None:
                        self._recompute(node, backward)
        owner = self.ctx.parent
        if isinstance(owner, ast.ClassDef) and _autograd(owner):
            return  # inside the autograd Function's unit
        self._twins(node)

    # -- twin calls -----------------------------------------------------------------------------------------
    def _crossed(self, unit: ast.AST, imported: frozenset[str]) -> None:
        """The q-side and k-side calls of one norm kernel (`npu_rms_norm`, `npu_rms_norm_backward`) are one
        statement with the q/k names swapped: a call that keeps the query side's weight and saved state but is
        handed the key tensor (or the reverse) normalises, or differentiates, the other side's rows."""
        for stmt, leftover, expected, operand in norms.query_key_leftovers(unit):
            if not operand:
                continue  # a leftover weight or saved state: NPU465's
            for call in nodes_of(stmt, ast.Call):
                assert isinstance(call, ast.Call)
                kernel = kernel_of(call, imported)
                if kernel is None:
                    continue
                arg = next(
                    (
                        a
                        for a in (*call.args, *(k.value for k in call.keywords))
                        if isinstance(a, ast.Name) and a.id == leftover
                    ),
                    None,
                )
                if arg is None:
                    continue
                self.report(
                    arg,
                    f"`{kernel}` is handed `{leftover}` in a call otherwise on the other side of its q/k twin call: "
                    f"the twin's names swapped give `{expected}` here, so the kernel normalises (or differentiates) "
                    "the other side's rows with this side's weight and saved state",
                )
                break

    def _twins(self, unit: ast.AST) -> None:
        imported = self._imported()
        self._crossed(unit, imported)
        groups: dict[tuple[object, ...], list[tuple[ast.Call, object]]] = {}
        for call in nodes_of(unit, ast.Call):
            assert isinstance(call, ast.Call)
            kernel = kernel_of(call, imported)
            options = NPU_TWIN_OPTIONS.get(kernel or "")
            if not options:
                continue
            for option, (index, default, described) in options.items():
                shared = [_arg(call, i, k) for i, k in described]
                if not described or any(s is None for s in shared):
                    continue
                value = _option(call, index, option, default)
                if value is _UNSET:
                    continue
                key = (kernel, option, tuple(ast.unparse(s) for s in shared if s is not None))
                groups.setdefault(key, []).append((call, value))
        chains, stores = _chains(unit), _stores(unit)
        for (kernel, option, shared), calls in groups.items():
            values = Counter(repr(v) for _, v in calls)
            if len(values) < 2:
                continue
            (top, top_n), (_, second_n) = values.most_common(2)
            default = NPU_TWIN_OPTIONS[str(kernel)][str(option)][1]
            if top_n > second_n:
                odd = [(c, v) for c, v in calls if repr(v) != top]
                ref = next(c for c, v in calls if repr(v) == top)
            else:
                # a tie: the side that departs from the kernel's default, else the later call
                ordered = sorted(calls, key=lambda cv: (cv[0].lineno, cv[0].col_offset))
                plain = [c for c, v in ordered if v == default]
                if plain and len(plain) < len(ordered):
                    odd, ref = [(c, v) for c, v in ordered if v != default], plain[0]
                else:
                    odd, ref = [ordered[-1]], ordered[0][0]
            what = ", ".join(f"`{s}`" for s in shared)
            described = NPU_TWIN_OPTIONS[str(kernel)][str(option)][2]
            names = {
                n.id
                for i, k in described
                for n in ast.walk(_arg(calls[0][0], i, k) or ast.Pass())
                if isinstance(n, ast.Name)
            }
            for call, value in odd:
                # a twin on an exclusive path (the other arm of a mode switch) or reading a rebound name is
                # not the same data read twice
                peers = [
                    c
                    for c, v in calls
                    if repr(v) != repr(value)
                    and not _exclusive(chains[id(call)], chains[id(c)])
                    and _same_binding(call, c, names, stores)
                ]
                if not peers:
                    continue
                twin = ref if ref in peers else peers[0]
                ref_value = next(v for c, v in calls if c is twin)
                note = " (its default)" if ref_value == default else ""
                self.report(
                    call,
                    f"`{kernel}` reads {what} with `{option}={value!r}` here, but its twin call at line "
                    f"{twin.lineno} reads the same {what} with `{option}={ref_value!r}`{note}: one of them lays the "
                    "shared data out wrongly; make them agree with how it is built (and with the eager reference)",
                )

    # -- the backward's recompute of the forward's kernel --------------------------------------------------------
    def _recompute(self, forward: ast.AST, backward: ast.AST) -> None:
        """A backward that launches the forward's fused kernel again (to recompute what the forward did not save)
        owes it the forward's computing options: `npu_chunk_gated_delta_rule_fwd_h(..., use_exp2=False)` in the
        forward and `use_exp2=True` in the backward's recompute decay the state by exp(g) in one and 2**g in the
        other, so the gradients are not those of the forward's output."""
        imported = self._imported()

        def options(unit: ast.AST) -> dict[str, list[tuple[ast.Call, dict[str, object]]]]:
            out: dict[str, list[tuple[ast.Call, dict[str, object]]]] = {}
            for call in nodes_of(unit, ast.Call):
                assert isinstance(call, ast.Call)
                kernel = _op_kernel(call, imported)
                if kernel is not None:
                    out.setdefault(kernel, []).append((call, _literal_options(call)))
            return out

        ahead, behind = options(forward), options(backward)
        for kernel in sorted(ahead.keys() & behind.keys()):
            for option in sorted({o for _, opts in ahead[kernel] for o in opts}):
                fwd_values = {repr(opts[option]) for _, opts in ahead[kernel] if option in opts}
                bwd = [(c, opts[option]) for c, opts in behind[kernel] if option in opts]
                if len(fwd_values) != 1 or not bwd or any(option not in opts for _, opts in ahead[kernel]):
                    continue
                fwd_call, opts = ahead[kernel][0]
                for call, value in bwd:
                    if repr(value) in fwd_values or not _same_inputs(fwd_call, call):
                        continue  # agreeing, or the kernel reused on other data (a gradient's product), no recompute
                    short = kernel.rpartition(".")[2]
                    where = (
                        f"the backward's recompute (line {call.lineno}, `{getattr(backward, 'name', '')}`)"
                    )
                    # neither side is the reference: the finding marks both calls
                    for at, mine, theirs, other in (
                        (fwd_call, opts[option], value, where),
                        (call, value, opts[option], f"the forward's call (line {fwd_call.lineno})"),
                    ):
                        keyword = next((k for k in at.keywords if k.arg == option), None)
                        self.report(
                            keyword.value if keyword is not None else at,
                            f"`{short}` is launched with `{option}={mine!r}` here but with `{option}={theirs!r}` "
                            f"by {other}: a backward that recomputes the forward's kernel must compute what the "
                            "forward computed, or its gradients are not those of the forward's output; make the "
                            "two calls agree",
                        )
                    break

    # -- the backward's weight gradient -----------------------------------------------------------------------
    def _weight_grad(self, cls: ast.ClassDef) -> None:
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        forward, backward = methods.get("forward"), methods.get("backward")
        if forward is None or backward is None or len(backward.args.args) < 2:
            return
        imported = self._imported()
        params = [a.arg for a in forward.args.args]
        fwd = [
            (n, a, b)
            for n, a, b in _products(forward, imported)
            if isinstance(a, ast.Name) and isinstance(b, ast.Name) and a.id in params and b.id in params
        ]
        if len(fwd) != 1:
            return
        product, x, _ = fwd[0]
        assert isinstance(x, ast.Name)
        saved: list[str] = []
        for call in nodes_of(forward, ast.Call):
            assert isinstance(call, ast.Call)
            if isinstance(call.func, ast.Attribute) and call.func.attr == "save_for_backward":
                saved = [a.id if isinstance(a, ast.Name) else "" for a in call.args]
        if x.id not in saved:
            return
        index = saved.index(x.id)
        saved_x = None
        for assign in nodes_of(backward, ast.Assign):
            assert isinstance(assign, ast.Assign)
            value = assign.value
            if (
                isinstance(value, ast.Attribute)
                and value.attr == "saved_tensors"
                and len(assign.targets) == 1
                and isinstance(assign.targets[0], ast.Tuple)
                and len(assign.targets[0].elts) == len(saved)
            ):
                target = assign.targets[0].elts[index]
                saved_x = target.id if isinstance(target, ast.Name) else None
        grad = backward.args.args[1].arg
        if saved_x is None or saved_x == grad:
            return
        chains = _chains(backward)
        for node, a, b in _products(backward, imported):
            if _transposed(a) == grad and isinstance(b, ast.Name) and b.id == saved_x:
                if _transposed_back(node, chains, backward):
                    continue  # (dy^T x)^T = x^T dy: the right gradient
                self.report(
                    node,
                    f"the weight gradient is computed as `{ast.unparse(a)}` times `{saved_x}` (dy^T x), but the "
                    f"forward multiplies `{x.id}` by the weight (line {product.lineno}, y = x w), whose gradient "
                    f"is x^T dy: the operands are swapped, giving the transposed gradient; multiply "
                    f"`{saved_x}` transposed by `{grad}`",
                )
