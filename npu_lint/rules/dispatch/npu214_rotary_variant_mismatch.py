"""NPU214 rotary-variant-mismatch."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import HANDLES, Handle, HandleCalls, call_arg, call_name, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import file_source_module, upstream_path

_ROTARY_OPS = frozenset({"rope"})  # OpSlot's rotary_pos_emb / rotary_pos_emb_vision map to it
_FULL, _PARTIAL = "full", "partial"


def _last_dim_slice(node: ast.Subscript) -> ast.Slice | None:
    """``x[..., a:b]`` / ``x[:, :, a:b]`` (the last index a slice) or ``x[a:b]``."""
    index = node.slice
    if isinstance(index, ast.Tuple) and index.elts:
        first, last = index.elts[0], index.elts[-1]
        if isinstance(last, ast.Slice) and (
            (isinstance(first, ast.Constant) and first.value is Ellipsis) or len(index.elts) >= 2
        ):
            return last
        return None
    return index if isinstance(index, ast.Slice) else None


def rotary_split(func: ast.AST) -> str | None:
    """The rotary width when the function splits the head into a rotated and a pass-through part
    (``q[..., :d]`` and ``q[..., d:]`` with the same ``d``, or ``torch.split(q, [d, rest], dim=-1)``)."""
    uppers: dict[str, ast.expr] = {}
    lowers: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Subscript):
            piece = _last_dim_slice(node)
            if piece is None or piece.step is not None:
                continue
            if piece.upper is not None and piece.lower is None:
                uppers.setdefault(ast.dump(piece.upper), piece.upper)
            elif piece.lower is not None and piece.upper is None:
                lowers.add(ast.dump(piece.lower))
        elif isinstance(node, ast.Call) and call_name(node) == "split":
            sizes = call_arg(node, 1, "split_size_or_sections")
            dim = call_arg(node, 2, "dim")
            if isinstance(sizes, (ast.List, ast.Tuple)) and len(sizes.elts) == 2 and dim is not None:
                if isinstance(dim, ast.UnaryOp) and isinstance(dim.op, ast.USub):
                    return ast.unparse(sizes.elts[0])
    for key, upper in uppers.items():
        if key in lowers:
            return ast.unparse(upper)
    return None


def _replaces(func: ast.AST) -> str:
    """The upstream function a function stands for: the target of a spec's ``@config.replace_function("name")``,
    else its own name (a generated file keeps the upstream name; a spec's ``apply_rotary_pos_emb_patched`` or
    ``_npu`` copy says which one it replaces in its decorator)."""
    for deco in getattr(func, "decorator_list", ()):
        if isinstance(deco, ast.Call) and call_name(deco) == "replace_function":
            # patchgen: replace_function(target_func, replacement=None, ...)
            target = str_value(call_arg(deco, 0, "target_func"))
            if target:
                return target
    return getattr(func, "name", "")


def rotates_whole_head(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``rotate_half(q)`` on a parameter of the function itself: the whole head is rotated."""
    params = {a.arg for a in [*func.args.posonlyargs, *func.args.args]}
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and call_name(node) == "rotate_half" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id in params:
                return True
    return False


class RotaryVariantMismatch(Rule):
    code = "NPU214"
    name = "rotary-variant-mismatch"
    summary = (
        "A rotary-embedding dispatch handle names the `full` variant in a function whose eager path rotates "
        "only part of each head (or `partial` where it rotates the whole head)."
    )
    why = (
        "The rotary op has one registry row per contract: `full` rotates every head dim (`npu_rotary_mul` over "
        "the whole head), `partial` rotates the first `rotary_dim = cos.shape[-1]` dims and passes the rest "
        "through (Qwen3.5, GLM, Phi with `partial_rotary_factor`). The function that guards the handle keeps "
        "the model's eager math next to it, so the variant must match that math: a `full` handle in a model "
        "whose eager path splits `q[..., :rotary_dim]` / `q[..., rotary_dim:]` makes the NPU kernel fail on "
        "the shape mismatch (or rotate the pass-through dims), and a `partial` handle where the eager path "
        "rotates the whole head binds a kernel with another contract. The handle's declaration (module-level "
        "slot, post-import block, local handle) is read from the file; the finding sits on it when the file "
        "holds it, else on the call. Where the handle is the whole path (VeomniOp generation), the model's "
        "upstream `apply_rotary_pos_emb` decides. On an OpSlot tree the text and vision rotaries have their own "
        "slots (`rotary_pos_emb`, `rotary_pos_emb_vision`, bound from different ops-config fields): the text "
        "rotary calling the vision slot, or the reverse, is reported too."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "full")


            def rotate_half(x):
                a, b = x.chunk(2, dim=-1)
                return torch.cat((-b, a), dim=-1)


            def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
                if veomni_rope.use_non_eager_impl:
                    return veomni_rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
                cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
                width = cos.shape[-1]
                q_rot, q_keep = q[..., :width], q[..., width:]
                k_rot, k_keep = k[..., :width], k[..., width:]
                q_rot = q_rot * cos + rotate_half(q_rot) * sin
                k_rot = k_rot * cos + rotate_half(k_rot) * sin
                return torch.cat([q_rot, q_keep], dim=-1), torch.cat([k_rot, k_keep], dim=-1)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="a partial-rotary model bound to the full-head kernel",
        ),
        Example(
            """
            import torch
            from veomni.ops import VeomniOp
            from veomni.models_kernel.utils.op_utils import resolve_op_impl


            def rotate_half(x):
                a, b = x.chunk(2, dim=-1)
                return torch.cat((-b, a), dim=-1)


            def apply_rope(q, k, cos, sin):
                impl = resolve_op_impl("rotary_pos_emb_implementation")
                if impl != "eager":
                    kernel = VeomniOp("rope", "partial", impl)
                    return kernel(q, k, cos, sin)
                return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            """,
            path="veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="the partial kernel where the eager path rotates the whole head",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "partial")


            def apply_rotary_pos_emb(q, k, cos, sin):
                if veomni_rope.use_non_eager_impl:
                    return veomni_rope(q, k, cos, sin)
                q_rot, q_keep = torch.split(q, [cos.shape[-1], q.shape[-1] - cos.shape[-1]], dim=-1)
                k_rot, k_keep = torch.split(k, [cos.shape[-1], k.shape[-1] - cos.shape[-1]], dim=-1)
                return torch.cat([q_rot * cos, q_keep], -1), torch.cat([k_rot * cos, k_keep], -1)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        ),
    )
    fix_safety = (
        "No fix: the variant has to be chosen by hand (the partial row may not exist for every impl)."
    )
    requires = (("rotary_pos_emb", '"rope"', "'rope'"), tuple(sorted(HANDLES)))
    node_types = (ast.Assign, ast.Call)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _crossed(self, call: ast.Call, handle: Handle, func: ast.AST, cls: str | None) -> bool:
        """The vision rotary slot called by the text rotary function, or the text slot by the vision one (an
        OpSlot tree names them apart: `rotary_pos_emb` / `rotary_pos_emb_vision`)."""
        if handle.kind != "OpSlot":
            return False
        op = str_value(call_arg(handle.call, 0, "op_name")) or ""
        where = f"{getattr(func, 'name', '')} {cls or ''}".lower()
        vision_site = "vision" in where or "visual" in where
        text_site = _replaces(func) == "apply_rotary_pos_emb"
        if op == "rotary_pos_emb_vision" and text_site and not vision_site:
            want = "rotary_pos_emb"
        elif op == "rotary_pos_emb" and vision_site:
            want = "rotary_pos_emb_vision"
        else:
            return False
        name = self.ctx.source.segment(call.func)
        # a handle whose own name says the site's tower (`veomni_apply_rotary_pos_emb_vision` in the vision
        # rotary) but whose declaration names the other op: the declaration is the slip
        named_vision = "vision" in name.lower() or "visual" in name.lower()
        at: ast.AST = call.func
        if named_vision and vision_site and handle.block is None and handle.call.lineno != call.lineno:
            at = handle.call
        self.report(
            at,
            f"`{name}` is the `{op}` slot, but `{getattr(func, 'name', '')}` is the "
            f"{'vision' if vision_site else 'text'} rotary: the ops config binds the two from different fields "
            f"(`{want}_implementation` is meant here), so this path runs the other tower's kernel; call the "
            f"`{want}` slot",
        )
        return True

    @staticmethod
    def _text_rotary(handle: Handle, func: ast.AST, cls: str | None, call: ast.Call) -> bool:
        """A text-attention rotary handle: called in ``apply_rotary_pos_emb`` or in an attention class's method,
        and nothing (op, handle name, class) says vision."""
        op = str_value(call_arg(handle.call, 0, "op_name" if handle.kind == "OpSlot" else "op")) or ""
        callee = ast.unparse(call.func)
        if any("vision" in text.lower() or "visual" in text.lower() for text in (op, callee, cls or "")):
            return False
        return _replaces(func) == "apply_rotary_pos_emb" or (cls is not None and "Attention" in cls)

    def _upstream_rotary(self) -> ast.FunctionDef | None:
        """Upstream's module-level ``apply_rotary_pos_emb`` of the model this file copies or patches."""
        if "upstream" not in self.__dict__:
            found = None
            module = file_source_module(self.ctx.tree, self.ctx.source.text, self.ctx.source.path)
            path = upstream_path(module) if module and module.startswith("transformers.") else None
            parsed = load_file(str(path)) if path is not None else None
            if parsed is not None and parsed.tree is not None:
                found = next(
                    (
                        s
                        for s in parsed.tree.body
                        if isinstance(s, ast.FunctionDef) and s.name == "apply_rotary_pos_emb"
                    ),
                    None,
                )
            self.__dict__["upstream"] = found
        return self.__dict__["upstream"]

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.calls = HandleCalls(ctx, _ROTARY_OPS)

    def visit(self, node: ast.AST) -> None:
        self.calls.visit(node)

    def finish(self) -> None:
        reported: set[int] = set()
        for call, handle, func, cls in self.calls.resolved_in_classes():
            if (
                func is not None
                and id(handle.call) not in reported
                and self._crossed(call, handle, func, cls)
            ):
                reported.add(id(handle.call))
                continue
            variant = handle.raw_variant
            if func is None or variant not in (_FULL, _PARTIAL) or id(handle.call) in reported:
                continue
            width = rotary_split(func)
            whole = width is None and rotates_whole_head(func)
            source = f"`{func.name}`, which calls it (line {call.lineno}),"
            if width is None and not whole and self._text_rotary(handle, func, cls, call):
                # no eager math here (the handle is the whole path): the model's upstream rotary decides
                upstream = self._upstream_rotary()
                if upstream is not None:
                    width = rotary_split(upstream)
                    whole = width is None and rotates_whole_head(upstream)
                    source = (
                        f"upstream's `{upstream.name}` (the rotary the handle at line {call.lineno} replaces)"
                    )
            if variant == _FULL and width is not None:
                found = f"rotates only the first `{width}` dims of each head and passes the rest through"
                want = _PARTIAL
            elif variant == _PARTIAL and whole:
                found = "rotates the whole head (`rotate_half` on the full query/key)"
                want = _FULL
            else:
                continue
            reported.add(id(handle.call))
            op = str_value(call_arg(handle.call, 0, "op_name" if handle.kind == "OpSlot" else "op")) or "rope"
            name = self.ctx.source.segment(call.func)
            self.report(
                self.calls.where(handle),
                f'`{name}` is `{handle.kind}("{op}", "{variant}")`, but {source} {found}: the `{variant}` kernel '
                "has another contract than this model's eager rotary, so on NPU the attention fails on the shape "
                f'or rotates the wrong dims; use "{want}"',
            )
