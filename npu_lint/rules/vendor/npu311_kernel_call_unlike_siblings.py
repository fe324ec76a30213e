"""NPU311 kernel-call-unlike-siblings."""

from __future__ import annotations

import ast
import os

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.npucalls import KernelCall, file_calls, tree_calls
from npu_lint.veomni.vendor_map import NPU_MODE_KEYWORDS, NPU_POSITIONAL_ROLES


def _short(path: str, root: str | None) -> str:
    if root:
        try:
            return os.path.relpath(path, os.path.realpath(root))
        except ValueError:
            pass
    return os.path.basename(path)


class KernelCallUnlikeSiblings(Rule):
    code = "NPU311"
    name = "kernel-call-unlike-siblings"
    summary = (
        "A `torch_npu` kernel call differs from every other call of the same kernel in the tree: a data argument "
        "they all pass by keyword is missing, its named arguments come in another order, or an argument they all "
        "cast to int32 is passed uncast."
    )
    why = (
        "Ascend kernels take most of their inputs positionally and accept what they are given: "
        "`npu_moe_token_unpermute` without `probs` sums the experts' outputs unweighted, `npu_rms_norm_backward` "
        "given `(dy, rstd, x, gamma)` instead of `(dy, x, gamma, rstd)` returns wrong gradients when the shapes "
        "happen to broadcast, and index inputs must be int32 where `topk` gives int64. The tree's own calls of "
        "the same kernel -- the MoE forward and its LoRA twin, the k-branch and the q-branch of a backward -- are "
        "the contract the maintainers settled on: a call that drops a data keyword every other call passes, "
        "passes the same named values in another order, or skips the int32 cast every other call makes is almost "
        "always the slip. Literal options (`dim=-1`, `rotary_mode=...`) are left alone: they may equal a default "
        "or choose a layout on purpose."
    )
    bad = (
        Example(
            """
            import torch_npu


            def unpermute_a(output, row_ids_map, routing_weights):
                return torch_npu.npu_moe_token_unpermute(output, row_ids_map, probs=routing_weights)


            def unpermute_b(output, row_ids_map, routing_weights):
                return torch_npu.npu_moe_token_unpermute(output, row_ids_map)
            """,
            path="veomni/ops/kernels/toy_moe/npu_unpermute.py",
            title="the routing weights dropped from one of two unpermutes",
        ),
        Example(
            """
            import torch_npu


            def norm_backward(grad, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
                grad_k, dw_k = torch_npu.npu_rms_norm_backward(grad, k, norm_k_weight, invvar_k)
                grad_q, dw_q = torch_npu.npu_rms_norm_backward(grad, invvar_q, q, norm_q_weight)
                return grad_q, grad_k, dw_q, dw_k
            """,
            path="veomni/ops/kernels/toy_norm/npu_backward.py",
            title="the q branch passes the k branch's arguments in another order",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu


            def permute_a(hidden_states, selected_experts):
                return torch_npu.npu_moe_token_permute(hidden_states, selected_experts.to(torch.int32))


            def permute_b(hidden_states, selected_experts):
                selected_experts = selected_experts.to(torch.int32)
                return torch_npu.npu_moe_token_permute(hidden_states, selected_experts)


            def swiglu(x):
                return torch_npu.npu_swiglu(x)


            def swiglu_last(x):
                return torch_npu.npu_swiglu(x, dim=-1)
            """,
            path="veomni/ops/kernels/toy_moe/npu_permute.py",
        ),
    )
    fix_safety = "No fix: which call is right is read from the kernel's contract by the author."
    requires = ("torch_npu",)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._own: dict[int, tuple[str, KernelCall]] | None = None
        self._tree: dict[str, tuple[KernelCall, ...]] | None = None

    def _siblings(self, node: ast.Call) -> tuple[str, KernelCall, list[KernelCall]] | None:
        if self._own is None:
            path = os.path.realpath(self.ctx.source.path)
            self._own = file_calls(self.ctx.tree, path)
            self._tree = tree_calls(self.ctx.project) if self._own else {}
        hit = self._own.get(id(node))
        if hit is None:
            return None
        kernel, me = hit
        assert self._tree is not None
        others = [c for k, c in self._own.values() if k == kernel and c is not me]
        others += [c for c in self._tree.get(kernel, ()) if c.path != me.path]
        # a generated file repeats its spec's calls: count each (file stem, text) once
        seen: set[tuple[object, ...]] = set()
        unique = []
        for c in others:
            key = (os.path.splitext(os.path.basename(c.path))[0], c.stems, c.texts, c.data_keywords, c.int32)
            if key not in seen:
                seen.add(key)
                unique.append(c)
        return kernel, me, unique

    @staticmethod
    def _outvoted(kernel: str, me: KernelCall, ref: KernelCall) -> bool:
        """Of a pair of calls whose named arguments come in two orders, whether ``me`` is the one to report:
        the one whose argument spellings break the kernel's documented positional roles, else the later one
        (by path, then line), so that the pair is reported once."""
        roles = dict(NPU_POSITIONAL_ROLES.get(kernel, ()))

        def broken(call: KernelCall) -> int:
            return sum(
                1
                for i, role in roles.items()
                if i < len(call.stems) and call.stems[i] and role not in call.stems[i]
            )

        if roles and broken(me) != broken(ref):
            return broken(me) > broken(ref)
        return (me.path, me.line) > (ref.path, ref.line)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        found = self._siblings(node)
        if found is None:
            return
        kernel, me, others = found
        if not others:
            return
        same_arity = [c for c in others if len(c.stems) == len(me.stems)]
        root = self.ctx.project.root
        # a data keyword every other call passes
        # a mode-choosing keyword (an attention mask, a positional bias) may be left out on purpose
        missing = (
            frozenset.intersection(*(c.data_keywords for c in others)) - me.data_keywords - NPU_MODE_KEYWORDS
        )
        for word in sorted(missing):
            if any(k.arg == word for k in node.keywords):
                continue
            if not same_arity or len(me.stems) > min(len(c.stems) for c in others):
                continue  # passed positionally, perhaps
            ref = others[0]
            self.report(
                node,
                f"`{kernel}` is called without `{word}=`, which every other call of it in the tree passes "
                f"({len(others)}, e.g. {_short(ref.path, root)}:{ref.line}): the kernel runs without that input "
                "(its default) here; pass it as the other calls do",
            )
            return
        if not same_arity:
            return
        # the same named arguments in another order
        named = [s for s in me.stems if s]
        if len(named) >= 2 and len(set(named)) == len(named):
            orders = {
                tuple(s for s in c.stems if s)
                for c in same_arity
                if sorted(s for s in c.stems if s) == sorted(named)
            }
            if len(orders) == 1:
                order = next(iter(orders))
                if order != tuple(named):
                    refs = [c for c in same_arity if tuple(s for s in c.stems if s) == order]
                    ref = refs[0]
                    if len(refs) == 1 and len(same_arity) == 1 and not self._outvoted(kernel, me, ref):
                        return  # one call against one: the pair is reported once, at the other call
                    self.report(
                        node,
                        f"`{kernel}` gets its arguments in another order than the tree's other call at "
                        f"{_short(ref.path, root)}:{ref.line} (`{', '.join(ref.texts)}` there, "
                        f"`{', '.join(me.texts)}` here): the kernel reads them by position; pass them in its order",
                    )
                    return
        # a position every other call casts to int32
        cast = frozenset.intersection(*(c.int32 for c in same_arity)) - me.int32
        for index in sorted(cast):
            ref = same_arity[0]
            self.report(
                node.args[index],
                f"`{kernel}` is passed `{me.texts[index]}` uncast, where every other call of it in the tree casts "
                f"this argument to int32 (e.g. `{ref.texts[index]}` at {_short(ref.path, root)}:{ref.line}): an "
                "int64 index tensor (what `topk` returns) is rejected on Ascend; cast it to `torch.int32`",
            )
            return
