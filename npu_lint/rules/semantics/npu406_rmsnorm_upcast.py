"""NPU406 rmsnorm-upcast."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._rms_math import fp32_value, receiver, rms_function, squares_mean
from npu_lint.veomni.patchgen import effective_patches, spec_for_generated
from npu_lint.veomni.upstream import (
    PatchedMethod,
    file_source_module,
    patch_description,
    patched_methods,
    upstream_class_method,
)

# a description that promises fp32 numerics ("official eager FP32 fallback", "float32 statistics")
_FP32_PROMISE = re.compile(r"\b(fp32|float32|full[ -]precision)\b", re.IGNORECASE)


def _eager_math(func: ast.AST) -> ast.AST | None:
    """The first eager RMS computation (`x.pow(2)`, `torch.rsqrt(...)`, `x * x`) of a forward, if any."""
    for node in _walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pow", "square", "rsqrt")
        ):
            return node
    return None


def _is_upcast(expr: ast.AST) -> bool:
    for node in _walk(expr):
        if isinstance(node, ast.Attribute) and node.attr == "float32":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "float":
            return True
    return False


def _squared_base(func: ast.AST) -> tuple[ast.AST, int] | None:
    """The tensor the first square of ``func`` squares, with the square's line: `x.pow(2)`, `x.square()`,
    `torch.pow(x, 2)`, `torch.square(x)`, `x ** 2`, `x * x`."""
    for node in _walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pow", "square")
        ):
            base = node.func.value
            if isinstance(base, ast.Name) and base.id == "torch":
                if not node.args:
                    continue
                base = node.args[0]
            return base, node.lineno
        if isinstance(node, ast.BinOp) and (
            (isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 2)
            or (isinstance(node.op, ast.Mult) and ast.dump(node.left) == ast.dump(node.right))
        ):
            if isinstance(node.left, (ast.Name, ast.Call, ast.Subscript, ast.Attribute)):
                return node.left, node.lineno
    return None


def _squared_upcast(func: ast.AST) -> bool | None:
    """Whether the tensor squared by `x.pow(2)` is fp32: cast in place, or assigned from a cast before (None: no
    square)."""
    found = _squared_base(func)
    if found is None:
        return None
    base, line = found
    if _is_upcast(base):
        return True
    root = _root(base)
    return root is not None and _fp32_name(func, root, line, 4)


def _squared_root(func: ast.AST) -> str | None:
    """The local squared by the first `x.pow(2)` / `x.square()` of ``func``."""
    found = _squared_base(func)
    return _root(found[0]) if found is not None else None


def _root(expr: ast.AST) -> str | None:
    """The local a tensor expression is computed from by dtype-keeping steps (`x.view(...)`, `x[...]`,
    `x.reshape(...).contiguous()`): its name, or None."""
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def _fp32_name(func: ast.AST, name: str, line: int, depth: int) -> bool:
    """`name` holds fp32 values at ``line``: assigned before it from a cast, or from an fp32 local by
    dtype-keeping steps (a view, a reshape) or arithmetic with one (type promotion keeps fp32)."""
    if depth < 0:
        return False
    for a in _walk(func):
        if not (
            isinstance(a, ast.Assign)
            and a.lineno <= line
            and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
        ):
            continue
        if _is_upcast(a.value):
            return True
        operands = [a.value.left, a.value.right] if isinstance(a.value, ast.BinOp) else [a.value]
        for operand in operands:
            root = _root(operand)
            if root is not None and root != name and _fp32_name(func, root, a.lineno, depth - 1):
                return True
    return False


_DOWNCASTS = ("type_as", "half", "bfloat16")


def _is_downcast(node: ast.AST) -> bool:
    """A cast back to the input dtype: `.type_as(x)`, `.to(input_dtype)`, `.to(x.dtype)`, `.to(dtype=d)` (not
    to fp32), `.half()`, `.bfloat16()`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr = node.func.attr
    if attr in _DOWNCASTS:
        return True
    if attr not in ("to", "type"):
        return False
    args = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
    if not args or _is_upcast(args[0]):
        return False
    target = args[0]
    text = ast.unparse(target)
    return "dtype" in text or text in ("torch.bfloat16", "torch.float16", "torch.half")


def _weight_operand(func: ast.AST, node: ast.AST) -> bool:
    """`self.weight`, `1 + self.weight`, `(1.0 + self.weight.float())`, or a local holding one of them."""
    if isinstance(node, ast.Name):
        values = [
            a.value
            for a in _walk(func)
            if isinstance(a, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)
        ]
        if len(values) != 1:
            return False
        node = values[0]
    for n in _walk(node):
        if isinstance(n, ast.Attribute) and n.attr == "weight" and isinstance(n.value, ast.Name):
            return n.value.id == "self"
    return False


def _assigned_from(func: ast.AST, name: str, line: int) -> ast.AST | None:
    """The value last assigned to ``name`` before ``line`` (None: not assigned, or assigned in a loop)."""
    found = None
    for a in _walk(func):
        if (
            isinstance(a, ast.Assign)
            and a.lineno < line
            and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
        ):
            if found is None or a.lineno > found.lineno:
                found = a
    return found.value if found is not None else None


def scale_order(func: ast.AST) -> tuple[str, ast.BinOp] | None:
    """Where a forward applies its weight relative to the cast back to the input dtype: ("input", product) when
    it multiplies an already cast-back tensor (Llama: `w * x.to(input_dtype)`), ("fp32", product) when the
    product itself is cast back (Gemma: `(x * (1 + w)).type_as(x)`); None when neither is read."""
    parents: dict[int, ast.AST] = {}
    for node in _walk(func):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in _walk(func):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        sides = [(node.left, node.right), (node.right, node.left)]
        other = next((o for w, o in sides if _weight_operand(func, w)), None)
        if other is None:
            continue
        if isinstance(other, ast.Name):
            value = _assigned_from(func, other.id, node.lineno)
            if value is not None and _is_downcast(value):
                return "input", node
        elif _is_downcast(other):
            return "input", node
        # the product cast back: directly, or through the local it is assigned to
        up = parents.get(id(node))
        if up is not None and isinstance(up, ast.Attribute) and _is_downcast(parents.get(id(up), up)):
            return "fp32", node
        if isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name):
            name = up.targets[0].id
            for later in _walk(func):
                if (
                    isinstance(later, ast.Call)
                    and isinstance(later.func, ast.Attribute)
                    and isinstance(later.func.value, ast.Name)
                    and later.func.value.id == name
                    and later.lineno >= up.lineno
                    and _is_downcast(later)
                ):
                    return "fp32", node
    return None


def _liger_casting_mode(node: ast.AST) -> tuple[str, ast.expr] | None:
    """(mode, its node) of a Liger RMSNorm call given a literal `casting_mode` (`LigerRMSNormFunction.apply(x, w,
    eps, offset, casting_mode)`, `liger_rms_norm(..., casting_mode=...)`)."""
    if not isinstance(node, ast.Call):
        return None
    text = ast.unparse(node.func)
    if "liger" not in text.lower() or "rms" not in text.lower():
        return None
    arg = next((k.value for k in node.keywords if k.arg == "casting_mode"), None)
    if arg is None and len(node.args) > 4:
        arg = node.args[4]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value, arg
    return None


def _module_state(func: ast.FunctionDef) -> bool:
    """A module-level function written as an RMSNorm method (`def rms_norm_forward(self, x)`, bound onto a class
    by a patch): its first parameter is `self` and it reads the module's eps or weight."""
    params = _params(func)
    if not params or params[0] != "self":
        return False
    return any(
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and (n.attr in ("weight", "eps", "epsilon", "variance_epsilon") or n.attr.endswith("_eps"))
        for n in _walk(func)
    )


def _params(func: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args)]


def _bf16_statistic_param(helper: ast.AST | None, method: bool = True) -> int | None:
    """The index (after the receiver of a ``method``) of the parameter a norm helper squares for its mean of
    squares without casting it to fp32 itself (Wan's `def norm(self, x): return x * torch.rsqrt(x.pow(2).mean(-1)
    + eps)`, Gemma's `_norm`, a module's `def _rms(x, eps)`): its callers must hand it an fp32 tensor. None: not
    such a helper (one that takes no root of its mean of squares is a statistic, not a normaliser)."""
    if not isinstance(helper, ast.FunctionDef) or not squares_mean(helper) or _eager_math(helper) is None:
        return None
    if not any(isinstance(n, ast.Call) and call_name(n) in ("rsqrt", "sqrt") for n in _walk(helper)):
        return None
    squared = _squared_root(helper)
    params = _params(helper)[1:] if method else _params(helper)
    if squared is None or squared not in params or _squared_upcast(helper) is not False:
        return None
    return params.index(squared)


def _call_operand(call: ast.Call, index: int, helper: ast.FunctionDef, method: bool = True) -> ast.AST | None:
    """The argument ``call`` (a `self.helper(...)` call, or `helper(...)` when not a ``method``) gives the
    helper's parameter ``index``."""
    if index < len(call.args):
        arg = call.args[index]
        return None if isinstance(arg, ast.Starred) else arg
    name = (_params(helper)[1:] if method else _params(helper))[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def helper_calls(func: ast.FunctionDef, lookup) -> list[tuple[ast.Call, str, ast.AST]]:
    """`self.<helper>(x)` calls of ``func`` handing a norm helper that squares its argument in the input dtype
    (``lookup``: helper name -> its definition) a tensor that is not fp32: (call, helper name, operand)."""
    me = receiver(func)
    out = []
    for node in _walk(func):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == me
        ):
            continue
        helper = lookup(node.func.attr)
        index = _bf16_statistic_param(helper)
        if index is None:
            continue
        operand = _call_operand(node, index, helper)
        if operand is not None and not fp32_value(func, operand, node.lineno):
            out.append((node, node.func.attr, operand))
    return out


def function_calls(
    func: ast.FunctionDef, functions: dict[str, ast.FunctionDef]
) -> list[tuple[ast.Call, str, ast.AST]]:
    """`helper(x, ...)` calls of ``func`` handing a module-level norm helper of the file (``functions``) that
    squares its argument in the input dtype a tensor that is not fp32: (call, helper name, operand)."""
    out = []
    for node in _walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        helper = functions.get(node.func.id)
        index = _bf16_statistic_param(helper, method=False)
        if helper is None or index is None or helper is func:
            continue
        operand = _call_operand(node, index, helper, method=False)
        if operand is not None and not fp32_value(func, operand, node.lineno):
            out.append((node, node.func.id, operand))
    return out


class RmsNormUpcast(Rule):
    code = "NPU406"
    name = "rmsnorm-upcast"
    summary = (
        "A patched RMSNorm forward computes the variance, or applies the weight, in the input dtype where upstream "
        "works in fp32."
    )
    why = (
        "RMSNorm squares and averages the activations: in bf16/fp16 the mean of squares loses most of its "
        "mantissa and overflows for large activations, so transformers' RMSNorm classes upcast "
        "(`hidden_states.to(torch.float32)`, `x.float()`) before `pow(2).mean()` and cast back afterwards. A patched "
        "forward (an eager fallback next to a kernel handle, or a hand-written NPU variant) that keeps the eager "
        "math but drops the upcast changes the numerics of every layer. The upcast is read from the upstream "
        "class's forward; kernel calls are not judged (kernels upcast internally)."
        " An RMSNorm class the tree defines itself (no upstream class) is judged on its own forward: squaring (`pow(2)`, `square()`) a tensor never cast to fp32 is reported."
        " The order of the cast back is compared too: where the upstream forward scales in fp32 and casts the product back (Gemma-style `(x * (1 + w)).to(dtype)`), a patched forward (a spec or its generated copy) that casts back first and multiplies in bf16/fp16 is reported. Scaling in fp32 where upstream scales after the cast (a deliberate fp32 fallback) is not."
        " Liger's functional RMSNorm given a literal `casting_mode` of `llama` (or `none`) for a norm whose upstream forward scales in fp32 is reported the same way."
        " A kernel module's eager fallback (a public module-level function of `veomni/ops` or of model code that computes the mean of squares of its own argument, `def fallback(x, weight, eps)`, or a forward a patch binds onto an RMSNorm class, `def rms_norm_forward(self, x)` reading `self.eps`) is judged the same way; a private helper (`_norm(x)`) is given fp32 by its caller and is not."
        " The statistic computed by the class's own helper method (`self.norm(x)`, `self._norm(x)`: a method that squares its argument without casting it) is followed to its callers: a forward (in the tree's own RMSNorm, or a spec's or generated copy of an upstream one whose forward hands the helper an fp32 tensor) that passes the activations uncast is reported."
        " A spec's replacement is also held to what its patch's `description=` promises: a description that says fp32 (`\"... official eager FP32 fallback\"`, float32, full precision) with a forward that multiplies by the weight after the cast back is reported even where upstream scales after the cast (the author declared the fp32 product; the NPU sibling that reuses the replacement runs that eager path)."
        " A generated file is also held to its own spec: where the spec's replacement of the forward scales in fp32 (a deliberate fp32 fallback that upstream does not have), a generated copy that casts back first and multiplies in the input dtype is reported (the copy no longer computes what it was generated from)."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, hidden_states):
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight * hidden_states
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch


            class RMSNorm(torch.nn.Module):
                def __init__(self, dim, eps):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.nn.Parameter(torch.ones((dim,)))

                def forward(self, hidden_states):
                    variance = hidden_states.square().mean(-1, keepdim=True)
                    hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
                    return hidden_states * self.weight
            """,
            path="veomni/models/transformers/flux/modeling_flux.py",
            title="an RMSNorm the tree defines itself",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_patched(self, hidden):
                normed = self._norm(hidden.float()).to(hidden.dtype)
                return normed * (1 + self.weight)
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="the scale applied after the cast back where upstream scales in fp32",
        ),
        Example(
            """
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_patched(self, hidden):
                return LigerRMSNormFunction.apply(hidden, self.weight, self.eps, 1.0, "llama", False, None)
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="Liger's RMSNorm in Llama casting mode for a norm that scales in fp32 upstream",
        ),
        Example(
            """
            import torch


            def headless_norm_fallback(states, weight, eps):
                mean_sq = states.square().mean(-1, keepdim=True)
                return states * torch.rsqrt(mean_sq + eps).to(states.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
            title="a kernel module's eager fallback squaring its input in the input dtype",
        ),
        Example(
            """
            import torch
            from torch import nn


            class RMSNorm(nn.Module):
                def norm(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)

                def forward(self, x):
                    return self.norm(x).to(x.dtype) * self.weight
            """,
            path="veomni/models/transformers/wan/modeling_wan.py",
            title="the class's norm helper handed the activations uncast",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward", description="Kernel guard with an eager fp32 fallback")
            def qwen3_rmsnorm_forward_patched(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                input_dtype = hidden_states.dtype
                hidden_states = hidden_states.to(torch.float32)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight * hidden_states.to(input_dtype)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
            title="the weight applied after the cast back where the patch promises fp32",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, hidden_states):
                input_dtype = hidden_states.dtype
                hidden_states = hidden_states.to(torch.float32)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight * hidden_states.to(input_dtype)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch


            class RMSNorm(torch.nn.Module):
                def __init__(self, dim, eps):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.nn.Parameter(torch.ones((dim,)))

                def forward(self, hidden_states):
                    variance = hidden_states.to(torch.float32).square().mean(-1, keepdim=True)
                    hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
                    return hidden_states * self.weight
            """,
            path="veomni/models/transformers/flux/modeling_flux.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_patched(self, hidden):
                normed = self._norm(hidden.float())
                return (normed * (1 + self.weight.float())).to(hidden.dtype)
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch


            def headless_norm_fallback(states, weight, eps):
                mean_sq = states.float().square().mean(-1, keepdim=True)
                return states * torch.rsqrt(mean_sq + eps).to(states.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
        ),
        Example(
            """
            import torch
            from torch import nn


            class RMSNorm(nn.Module):
                def norm(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)

                def forward(self, x):
                    return self.norm(x.float()).to(x.dtype) * self.weight
            """,
            path="veomni/models/transformers/wan/modeling_wan.py",
        ),
    )
    fix_safety = "No fix: where to cast back depends on the patch."

    requires = (("RMSNorm", "rsqrt", "rms_norm"),)
    node_types = ()

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        self._function_helpers()
        module = file_source_module(ctx.tree, text, ctx.source.path)
        if module is None or not module.startswith("transformers."):
            self._in_tree()
            return
        for patched in patched_methods(
            ctx.tree, text, "forward", ("RMSNorm", "RMSNormGated"), path=ctx.source.path
        ):
            self._check(patched)

    @classmethod
    def applies_to(
        cls, ctx: Context
    ) -> bool:  # model code and the tree's kernels' eager fallbacks (veomni/ops)
        return not ctx.source.kind.test

    def _functions(self) -> None:
        """Module-level functions computing an RMSNorm of a tensor they are given (a kernel module's eager
        fallback, `def fallback(x, weight, eps)`): the mean of squares of the argument never cast to fp32. A
        private helper (`_norm(x)`) is given an fp32 tensor by its caller and is not judged."""
        for func in self.ctx.tree.body:
            if not isinstance(func, ast.FunctionDef) or func.name.startswith("_") or func.decorator_list:
                continue
            if not squares_mean(func) or not rms_function(func, self.ctx.source.path):
                continue
            params = {a.arg for a in (*func.args.posonlyargs, *func.args.args)}
            if not any(
                p in ("weight", "eps", "epsilon") or p.endswith(("_weight", "_eps")) for p in params
            ) and not _module_state(func):
                continue  # a norm kernel's fallback takes its weight or eps (or, a forward bound to an RMSNorm
                # class, `def rms_norm_forward(self, x)`, reads them off the module); a feature rescaling (LTX's
                # per-token RMS of text features, `torch.mean(x**2)` or `x.pow(2).mean()`) is not an RMSNorm
            math = _eager_math(func)
            squared = _squared_root(func)
            if math is None or squared not in params or _squared_upcast(func) is not False:
                continue
            self.report(
                math,
                f"`{func.name}` squares its input `{squared}` in the input dtype: upcast to fp32 "
                "(`x.float()`) before the mean of squares, as RMSNorm implementations and the fused kernels do",
            )

    def _function_helpers(self) -> None:
        """Calls handing a module-level norm helper that squares its argument without casting it (`def
        _rms(x, eps)`) an uncast tensor; a private module-level caller is itself a helper given its tensor by its
        own caller and is not judged."""
        path = self.ctx.source.path
        functions = {  # a public RMSNorm function squaring its own input is judged by `_functions`
            f.name: f
            for f in self.ctx.tree.body
            if isinstance(f, ast.FunctionDef) and (f.name.startswith("_") or not rms_function(f, path))
        }
        if not any(_bf16_statistic_param(f, method=False) is not None for f in functions.values()):
            return
        seen: set[int] = set()
        for func in nodes_of(self.ctx.tree, ast.FunctionDef):
            if functions.get(func.name) is func and func.name.startswith("_"):
                continue
            for call, helper, operand in function_calls(func, functions):
                if id(call) in seen:
                    continue
                seen.add(id(call))
                self.report(
                    call,
                    f"`{func.name}` hands `{self.ctx.source.segment(operand)}` to `{helper}`, which squares it for "
                    "the mean of squares without casting it: the RMS statistic is computed in the input dtype "
                    "(bf16/fp16); upcast the argument (`.float()`), as RMSNorm implementations do",
                )

    def _in_tree(self) -> None:
        """RMSNorm classes the tree defines itself (no upstream to compare with): a forward that squares the
        activations in the input dtype."""
        self._functions()
        for cls in nodes_of(
            self.ctx.tree, ast.ClassDef
        ):  # nested ones too (a quantised wrapper's own RMSNorm)
            if not (isinstance(cls, ast.ClassDef) and "rmsnorm" in cls.name.lower()):
                continue
            methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
            for func in cls.body:
                if isinstance(func, ast.FunctionDef) and func.name == "forward":
                    math = _eager_math(func)
                    if math is not None and _squared_upcast(func) is False:
                        self.report(
                            math,
                            f"`{cls.name}.forward` squares the activations in the input dtype: upcast to fp32 "
                            "(`x.to(torch.float32)`) before the mean of squares, as RMSNorm implementations do",
                        )
                    for call, helper, operand in helper_calls(func, methods.get):
                        self._report_helper(cls.name, call, helper, operand, "RMSNorm implementations upcast")

    def _report_helper(self, cls: str, call: ast.Call, helper: str, operand: ast.AST, reference: str) -> None:
        self.report(
            call,
            f"`{cls}.forward` hands `{self.ctx.source.segment(operand)}` to `self.{helper}`, which squares it for "
            f"the mean of squares without casting it: the RMS statistic is computed in the input dtype (bf16/fp16); "
            f"upcast the argument (`.float()`), as {reference}",
        )

    def _check(self, patched: PatchedMethod) -> None:
        self._cast_order(patched)
        self._helper_upcast(patched)
        if not _squared_upcast(patched.upstream):
            return
        math = _eager_math(patched.func)
        if math is None or _squared_upcast(patched.func) is not False:
            return
        self.report(
            math,
            f"`{patched.cls}.forward` computes the RMS in the input dtype; the upstream forward upcasts to fp32 first",
        )

    def _helper_upcast(self, patched: PatchedMethod) -> None:
        """A patched forward handing the class's norm helper an uncast tensor where the upstream forward hands it
        fp32 (`self._norm(x.float())`)."""
        local = {
            f.name: f
            for c in self.ctx.tree.body
            if isinstance(c, ast.ClassDef) and c.name == patched.cls
            for f in c.body
            if isinstance(f, ast.FunctionDef)
        }

        def lookup(name: str) -> ast.FunctionDef | None:
            found = local.get(name) or upstream_class_method(patched.module, patched.cls, name)
            return found if isinstance(found, ast.FunctionDef) else None

        def upstream_lookup(name: str) -> ast.FunctionDef | None:
            found = upstream_class_method(patched.module, patched.cls, name)
            return found if isinstance(found, ast.FunctionDef) else None

        mine = helper_calls(patched.func, lookup)
        if not mine:
            return
        theirs = {h for _, h, _ in helper_calls(patched.upstream, upstream_lookup)}
        upstream_helpers = {
            n.func.attr
            for n in _walk(patched.upstream)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
        }
        for call, helper, operand in mine:
            if helper in upstream_helpers and helper not in theirs:  # upstream hands it fp32
                self._report_helper(patched.cls, call, helper, operand, "the upstream forward does")

    def _spec_scales_in_fp32(self, patched: PatchedMethod) -> str | None:
        """In a generated file: the name of the spec's replacement of this forward when it scales in fp32 (the
        tree's own reference for the copy, which may deliberately differ from upstream)."""
        path = self.ctx.source.path.replace("\\", "/")
        if "/generated/" not in path or not path.endswith(".py"):
            return None
        spec = spec_for_generated(self.ctx.source.path)
        if spec is None:
            return None
        for patch in effective_patches(spec):
            if patch.target != f"{patched.cls}.{patched.name}" or not patch.replacement:
                continue
            ref = spec.resolve(patch.replacement)
            theirs = scale_order(ref.node) if ref is not None else None
            if theirs is not None and theirs[0] == "fp32":
                return patch.replacement
        return None

    def _cast_order(self, patched: PatchedMethod) -> None:
        """The weight applied on the other side of the cast back to the input dtype than upstream applies it."""
        upstream = scale_order(patched.upstream)
        if upstream is not None and upstream[0] == "fp32":
            for node in _walk(patched.func):
                mode = _liger_casting_mode(node)
                if mode is not None and mode[0] in ("llama", "none"):
                    self.report(
                        mode[1],
                        f"`{patched.cls}.forward` calls Liger's RMSNorm with `casting_mode={mode[0]!r}` (the weight "
                        "applied in the input dtype); the upstream forward scales in fp32 and casts the product back "
                        '(`casting_mode="gemma"`)',
                    )
                    return
        mine = scale_order(patched.func)
        if mine is not None and mine[0] == "input" and (upstream is None or upstream[0] != "fp32"):
            spec_name = self._spec_scales_in_fp32(patched)
            if spec_name is not None:
                self.report(
                    mine[1],
                    f"`{patched.cls}.forward` multiplies by the weight after casting back to the input dtype (in "
                    f"bf16/fp16), where its spec's `{spec_name}` scales in fp32 and casts the product back: this "
                    "generated copy computes the norm with other numerics than the code it is generated from",
                )
                return
            description = patch_description(patched.func)
            if description and _FP32_PROMISE.search(description):
                self.report(
                    mine[1],
                    f"`{patched.cls}.forward` multiplies by the weight after casting back to the input dtype (in "
                    f"bf16/fp16), where its patch promises fp32 numerics (description: {description!r}): the weight "
                    "is applied at the input precision, not in fp32 before the cast back (`(self.weight.float() * "
                    "hidden_states).to(input_dtype)`); the eager fallback no longer computes what the patch declares",
                )
                return
        # only the loss of precision: a patch that scales in fp32 where upstream scales after the cast back
        # (DeepSeek V4's official fp32 fallback) is deliberate
        if upstream is None or mine is None or upstream[0] != "fp32" or mine[0] != "input":
            return
        self.report(
            mine[1],
            f"`{patched.cls}.forward` multiplies by the weight after casting back to the input dtype (in bf16/fp16); "
            "the upstream forward scales in fp32 and casts the product back: the norm's numerics drift from the "
            "checkpoint's reference",
        )
