"""NPU316 backend-signature-unlike-siblings."""

from __future__ import annotations

import ast
import os

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.layout import in_kernel_backends, sibling_modules
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.vendor_map import BACKEND_NAME_WORDS

_MIN_SHARED = 2  # tokens a role name needs (``cross_entropy``, ``fused_moe_forward``)


def _tokens(name: str) -> list[str]:
    return [t for t in name.lower().split("_") if t]


def _role(a: str, b: str) -> tuple[str, ...] | None:
    """The role two backend entry names share: their common token suffix or prefix of at least two tokens
    (``npu_fused_moe_forward`` / ``group_gemm_fused_moe_forward`` -> fused_moe_forward,
    ``load_balancing_loss_triton`` / ``load_balancing_loss_pytorch`` -> load_balancing_loss)."""
    ta, tb = _tokens(a), _tokens(b)
    suffix: list[str] = []
    for x, y in zip(reversed(ta), reversed(tb)):
        if x != y:
            break
        suffix.insert(0, x)
    prefix: list[str] = []
    for x, y in zip(ta, tb):
        if x != y:
            break
        prefix.append(x)
    best = max(suffix, prefix, key=len)
    if len(best) < _MIN_SHARED or len(best) == len(ta) == len(tb):
        return None
    differ = set(ta) ^ set(tb)
    if not differ or not differ <= BACKEND_NAME_WORDS:
        return None  # names that differ by more than a backend's words name different functions
    return tuple(best)


def _eager(file: str, name: str) -> bool:
    """The eager (reference) backend: ``eager.py``, ``eager_cross_entropy``, ``load_balancing_loss_pytorch``."""
    return bool(
        {"eager", "pytorch", "torch", "native"} & {*_tokens(file.removesuffix(".py")), *_tokens(name)}
    )


def _params(func: ast.FunctionDef) -> list[str]:
    """The positional parameters (the order test)."""
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args)]


def _names(func: ast.FunctionDef) -> list[str]:
    """Every named parameter, keyword-only ones included (the missing test)."""
    return [*_params(func), *(a.arg for a in func.args.kwonlyargs)]


def _entries(tree: ast.Module) -> list[ast.FunctionDef]:
    """A module's public, undecorated top-level functions (a ``@triton.jit`` kernel is no backend entry)."""
    return [
        s
        for s in tree.body
        if isinstance(s, ast.FunctionDef) and not s.name.startswith("_") and not s.decorator_list
    ]


class BackendSignatureUnlikeSiblings(Rule):
    code = "NPU316"
    name = "backend-signature-unlike-siblings"
    summary = (
        "A kernel backend's entry function takes the parameters its sibling backends of the same op (the other "
        "files of the kernel's directory) share in another order, or lacks one they all take."
    )
    why = (
        "The backends of one op are interchangeable: `fused_moe_forward` hands the same arguments to "
        "`group_gemm_fused_moe_forward`, `quack_gemm_fused_moe_forward` or `npu_fused_moe_forward` depending on "
        "the device, and the eager cross-entropy, the Liger one and the chunked one are bound to one loss "
        "signature. Their parameter lists are each other's reference: an Ascend adapter that takes "
        "`(routing_weights, selected_experts)` where every sibling takes `(selected_experts, routing_weights)` "
        "receives the expert indices as weights on Ascend only, and one that drops `swiglu_limit` raises a "
        "TypeError (or ignores the clamp) where the GPU backends apply it. Functions are paired by the role their "
        "names share (`*_fused_moe_forward`, `load_balancing_loss_*`); extra parameters (an EP group) are fine."
    )
    bad = (
        Example(
            """
            def eager_toy_loss(logits, labels, ignore_index=-100):
                return (logits.float() - labels.float()).mean()


            def npu_toy_loss(labels, logits, ignore_index=-100):
                return (logits.float() - labels.float()).mean()
            """,
            path="veomni/ops/kernels/toy_loss/backends.py",
            title="the NPU backend takes labels and logits in the other order than the eager one",
        ),
    )
    good = (
        Example(
            """
            def eager_toy_loss(logits, labels, ignore_index=-100):
                return (logits.float() - labels.float()).mean()


            def npu_toy_loss(logits, labels, ignore_index=-100, ep_group=None):
                return (logits.float() - labels.float()).mean()
            """,
            path="veomni/ops/kernels/toy_loss/backends.py",
        ),
    )
    fix_safety = "No fix: reorder the parameters to the siblings' order (and check the callers)."
    requires = ("def ",)
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and in_kernel_backends(ctx.source.path)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        own = _entries(node)
        if not own:
            return
        here = os.path.abspath(self.ctx.source.path)
        siblings: list[tuple[str, ast.FunctionDef]] = [(os.path.basename(here), f) for f in own]
        for full in sibling_modules(here, inits=False):
            file = os.path.basename(full)
            parsed = load_file(full)
            if parsed is not None and parsed.tree is not None:
                siblings.extend((file, f) for f in _entries(parsed.tree))
        for func in own:
            self._compare(func, [(f, s) for f, s in siblings if s is not func])

    def _compare(self, func: ast.FunctionDef, siblings: list[tuple[str, ast.FunctionDef]]) -> None:
        mine = _params(func)
        if "self" in mine or "cls" in mine or _eager(os.path.basename(self.ctx.source.path), func.name):
            return  # the eager backend is the reference its siblings are read against
        peers = [
            (f, s) for f, s in siblings if _role(func.name, s.name) is not None and "self" not in _params(s)
        ]
        if not peers:
            return
        # the parameters every peer takes, and their order among those this function takes too
        shared = [p for p in _params(peers[0][1]) if all(p in _params(s) for _, s in peers)]
        common = [p for p in shared if p in mine]
        orders = {tuple(p for p in _params(s) if p in common) for _, s in peers}
        taken = [p for p in _names(peers[0][1]) if all(p in _names(s) for _, s in peers)]
        missing = [p for p in taken if p not in _names(func)]
        # one non-eager peer: which of the two has an extra parameter (an EP entry's ep_group) is not known
        judged = len(peers) >= 2 or any(_eager(f, s.name) for f, s in peers)
        if judged and len(missing) == 1 and len(taken) >= 4:
            file, ref = peers[0]
            self.report(
                func,
                f"`{func.name}` lacks `{'`, `'.join(missing)}`, which its sibling backends of the same op take "
                f"(e.g. `{ref.name}` in {file}): a caller passing it fails on this backend only, or the backend "
                "ignores it",
            )
            return
        if len(orders) != 1:
            return
        order = next(iter(orders))
        own_order = tuple(p for p in mine if p in order)
        if len(order) >= 2 and own_order != order:
            file, ref = peers[0]
            first = next(i for i, (a, b) in enumerate(zip(own_order, order)) if a != b)
            at = next(a for a in (*func.args.posonlyargs, *func.args.args) if a.arg == own_order[first])
            self.report(
                at,
                f"`{func.name}` takes `{', '.join(own_order)}` in another order than its sibling backends of the "
                f"same op (`{', '.join(order)}` in `{ref.name}`, {file}): a caller binding them by position hands "
                "each another's value on this backend only; use the siblings' order",
            )
