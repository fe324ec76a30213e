"""NPU405 rmsnorm-eps-attribute."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import walk as _walk
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.semantics._shared import _rms_norm_methods, _RmsNormCalls, is_torch_rms, receiver_of
from npu_lint.veomni.norms import EPS_NAMES
from npu_lint.veomni.upstream import last_name, patched_methods, upstream_class_method

_EPS_KEYWORDS = ("eps", "epsilon")


def _eps_argument(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in _EPS_KEYWORDS:
            return kw.value
    return call_arg(call, 3 if is_torch_rms(call) else 2, "eps")


class RmsNormEpsAttribute(_RmsNormCalls):
    code = "NPU405"
    name = "rmsnorm-eps-attribute"
    summary = (
        "An RMSNorm kernel call reads an eps attribute that the model's RMSNorm class never sets, or is given a fixed "
        "epsilon instead of the class's own."
    )
    why = (
        "Standard RMSNorm classes keep eps in `self.variance_epsilon`, Gemma-style ones in `self.eps`. A migration "
        "that copies a handle call from one family to the other passes an attribute the class does not have: "
        "an AttributeError on the first step at best, or a class attribute of the same name with another value. "
        "The attributes are read from the class's effective `__init__` (the spec's `__init__` patch, the class "
        "in the file, or the upstream transformers class), and the right one from the upstream forward."
        " A kernel wrapper written as a module-level forward of an in-tree norm (`def norm_forward_npu(self, x)`, "
        "or with the module under another name as its first parameter) is read against the one norm class its "
        "package defines."
        " A kernel call of an RMSNorm class given a fixed epsilon (a literal, or a module constant bound to one) while the class keeps its own is reported too: a model configured with another eps normalises differently on the fused path. So is a method-style kernel of the tree (`kernel(self, x)`, read from its source) that reads an eps attribute the class never sets, and a forward another model's spec defines, registered here (`override_method(..., replacement=imported)`) for a class that keeps its eps under another name."
        " The eager math of a norm class (in the file, or a spec's replacement of its forward) adding a literal epsilon under the root (`torch.rsqrt(variance + 1e-6)`) while the class keeps its own is reported the same way."
        " A patched `__init__` (a spec's replacement or a generated copy) that builds a norm submodule with a fixed eps, another config field, or no eps at all (the class default), where the upstream `__init__` passes the config's eps to the same submodule, is reported at the construction."
        ' A forward a device patch builds for the norm it dispatches (`apply_per_model_patches(targets={"rms_norm": "FooRMSNorm"})`, a factory\'s inner `def forward(self, x)`, or a backend `entry=` naming a method-style kernel of the tree with `replace_forward=True`) is read against that class (the model package\'s own, or transformers\' class of the same model).'
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.variance_epsilon)
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.eps)
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="a Llama-style eps attribute in Gemma 3's RMSNorm",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyDecoderNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.variance_epsilon = eps
                    self.fused = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.fused(x, self.weight, eps=1e-5)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyDecoderNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.variance_epsilon = eps
                    self.fused = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.fused(x, self.weight, eps=self.variance_epsilon)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="a literal epsilon where the norm keeps its own",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_norm_forward_patched(self, h):
                dtype = h.dtype
                h = h.to(torch.float32)
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
                return self.weight * h.to(dtype)
            """,
            fixed="""
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_norm_forward_patched(self, h):
                dtype = h.dtype
                h = h.to(torch.float32)
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
                return self.weight * h.to(dtype)
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="a literal epsilon in the eager math of a patched norm",
        ),
        Example(
            """
            from torch import nn
            from transformers.models.mistral.modeling_mistral import MistralRMSNorm
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralDecoderLayer.__init__")
            def mistral_layer_init_patched(self, config, layer_idx):
                nn.Module.__init__(self)
                self.hidden_size = config.hidden_size
                self.post_attention_layernorm = MistralRMSNorm(config.hidden_size, eps=1e-6)
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="a patched __init__ builds a norm with a fixed eps where upstream passes the config's",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.variance_epsilon)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyAttention(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.k_scale = nn.Parameter(torch.ones(dim))
                    self.k_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, k):
                    return self.k_norm(k, self.k_scale, eps=1e-6)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
        Example(
            """
            from torch import nn
            from transformers.models.mistral.modeling_mistral import MistralRMSNorm
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralDecoderLayer.__init__")
            def mistral_layer_init_patched(self, config, layer_idx):
                nn.Module.__init__(self)
                self.hidden_size = config.hidden_size
                self.post_attention_layernorm = MistralRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "Safe: the attribute becomes the one the class's `__init__` assigns and the upstream forward reads "
        "(`self.variance_epsilon` <-> `self.eps`); offered only when the class's `__init__` was read and sets it."
    )

    def finish(self) -> None:
        ctx = self.ctx
        for call, _func, cls, qual, kernel in self.method_kernel_calls():
            attrs = self.assigned_attrs(cls)
            if attrs is None or not kernel.eps_attrs or any(a in attrs for a in kernel.eps_attrs):
                continue
            contract = self.class_contract(cls)
            right = contract.eps_attr if contract is not None else None
            if right is None or right not in attrs:
                continue
            self.report(
                call,
                f"`{qual}` reads `{kernel.eps_attrs[0]}` from the module, but `{cls}` never sets it: its eps lives "
                f"in `self.{right}`",
            )
        self._reused()
        self._eager_literal()
        self._constructed()
        calls = [(c, f, cls) for c, f, cls, _h in self.rms_calls()]
        calls += [(c, f, cls) for c, f, cls, _q in self.vendor_rms_calls()]
        for call, func, cls in calls:
            arg = _eps_argument(call)
            if arg is not None and self._fixed_eps(arg, func, cls):
                continue
            if not (
                isinstance(arg, ast.Attribute)
                and isinstance(arg.value, ast.Name)
                and arg.value.id == receiver_of(func)
            ):
                continue
            attrs = self.assigned_attrs(cls)
            if attrs is None or arg.attr in attrs:
                continue
            contract = self.class_contract(cls)
            right = contract.eps_attr if contract is not None else None
            if right is None or right == arg.attr or right not in attrs:
                continue
            recv = arg.value.id  # type: ignore[attr-defined]
            fix = make_fix(
                f"Read `{recv}.{right}`", [ctx.replace(arg, f"{recv}.{right}")], Applicability.SAFE
            )
            self.report(
                arg,
                f"`{cls}` never sets `self.{arg.attr}`: its eps lives in `self.{right}`",
                fix,
            )

    def _constructed(self) -> None:
        """A patched ``__init__`` (a spec's replacement, a generated copy) that builds a norm with a fixed eps, a
        different config field, or none at all, where the upstream ``__init__`` passes the config's eps to the
        same submodule."""
        text = self.ctx.source.text
        if "Norm(" not in text or "__init__" not in text:
            return
        for patched in patched_methods(self.ctx.tree, text, "__init__", ("",), path=self.ctx.source.path):
            mine = _norm_constructions(patched.func)
            if not mine:
                continue
            theirs = _norm_constructions(patched.upstream)
            for attr, (call, eps) in mine.items():
                if attr not in theirs:
                    continue
                up_eps = theirs[attr][1]
                if up_eps is None or _fixed_number(self.ctx.tree, up_eps) is not None:
                    continue  # upstream itself passes a constant (or the class default)
                up_text = ast.unparse(up_eps)
                if eps is None:
                    where: ast.AST = call
                    what = "without an eps (the class default)"
                elif _fixed_number(self.ctx.tree, eps) is not None:
                    where, what = eps, f"with the fixed eps `{self.ctx.source.segment(eps)}`"
                elif _config_field(eps) is not None and _config_field(up_eps) not in (
                    None,
                    _config_field(eps),
                ):
                    where, what = eps, f"with `{self.ctx.source.segment(eps)}`"
                else:
                    continue
                self.report(
                    where,
                    f"`{patched.cls}.__init__` builds `self.{attr}` {what}, but the upstream class passes "
                    f"`{up_text}`: the norm ignores the model's configured epsilon",
                )

    def _eager_literal(self) -> None:
        """The eager math of an RMSNorm class (in the file, or a spec's replacement of its forward) adding a
        literal epsilon under the root (`torch.rsqrt(variance + 1e-6)`) while the class keeps its own eps."""
        text = self.ctx.source.text
        if "sqrt" not in text or ("RMSNorm" not in text and "RmsNorm" not in text):
            return
        for cls, func in _rms_norm_methods(self.ctx.tree):
            for node in _walk(func):
                if not (isinstance(node, ast.Call) and last_name(node.func) in ("rsqrt", "sqrt")):
                    continue
                root = node.args[0] if node.args else getattr(node.func, "value", None)
                if not (isinstance(root, ast.BinOp) and isinstance(root.op, ast.Add)):
                    continue
                literal = next(
                    (
                        side
                        for side in (root.left, root.right)
                        if isinstance(side, ast.Constant)
                        and type(side.value) is float
                        and 0 < side.value < 1e-2
                    ),
                    None,
                )
                if literal is None or self._upstream_has_literal(cls, literal.value):
                    continue
                attrs = self.assigned_attrs(cls)
                contract = self.class_contract(cls)
                right = contract.eps_attr if contract is not None else None
                if attrs is None or right is None or right not in attrs:
                    continue
                recv = receiver_of(func)
                self.report(
                    literal,
                    f"the eager RMSNorm math of `{cls}` adds the literal `{self.ctx.source.segment(literal)}` as "
                    f"epsilon, but `{cls}` is built with its own eps (`self.{right}`): a model configured with "
                    "another eps normalises differently",
                    make_fix(
                        f"Use `{recv}.{right}`",
                        [self.ctx.replace(literal, f"{recv}.{right}")],
                        Applicability.UNSAFE,
                        "changes the epsilon to the one the model is configured with",
                    ),
                )

    def _upstream_has_literal(self, cls: str, value: object) -> bool:
        """The upstream forward of a patched copy adds the same literal itself (then the copy is faithful)."""
        module = self._module_of_file()
        if not module or not module.startswith("transformers."):
            return False
        up = upstream_class_method(module, cls, "forward")
        return up is not None and any(isinstance(n, ast.Constant) and n.value == value for n in _walk(up))

    def _reused(self) -> None:
        """A forward another spec defines, registered here for a class that keeps its eps elsewhere."""
        for name_node, cls, func, path in self.reused_functions():
            recv = receiver_of(func)
            read = sorted(
                {
                    n.attr
                    for n in _walk(func)
                    if isinstance(n, ast.Attribute)
                    and n.attr in EPS_NAMES
                    and isinstance(n.value, ast.Name)
                    and n.value.id == recv
                }
            )
            attrs = self.assigned_attrs(cls)
            if not read or attrs is None:
                continue
            missing = [a for a in read if a not in attrs]
            contract = self.class_contract(cls)
            right = contract.eps_attr if contract is not None else None
            if not missing or right is None or right not in attrs:
                continue
            self.report(
                name_node,
                f"`{name_node.id}` (from {os.path.basename(path)}) reads `{recv}.{missing[0]}`, but `{cls}`, which it "
                f"is registered for here, never sets it: its eps lives in `self.{right}`",
            )

    def _fixed_eps(self, arg: ast.expr, func: ast.AST | None, cls: str | None) -> bool:
        """A kernel call of an RMSNorm class given a fixed epsilon (a literal, a module constant) while the class
        keeps its own (set from its config): reported; True when reported."""
        value = _fixed_number(self.ctx.tree, arg)
        if value is None or cls is None or "norm" not in cls.lower():
            return False
        attrs = self.assigned_attrs(cls)
        contract = self.class_contract(cls)
        right = contract.eps_attr if contract is not None else None
        if attrs is None or right is None or right not in attrs:
            return False
        recv = receiver_of(func)
        shown = self.ctx.source.segment(arg)
        what = f"the literal `{shown}`" if isinstance(arg, ast.Constant) else f"`{shown}` (= {value!r})"
        self.report(
            arg,
            f"the RMSNorm kernel of `{cls}` is given {what} as epsilon, but `{cls}` is built with its own eps "
            f"(`self.{right}`, the value it is constructed with): a model configured with another eps normalises "
            "differently on this path",
            make_fix(
                f"Pass `{recv}.{right}`",
                [self.ctx.replace(arg, f"{recv}.{right}")],
                Applicability.UNSAFE,
                "changes the epsilon to the one the model is configured with",
            ),
        )
        return True


def _fixed_number(tree: ast.Module, node: ast.expr) -> float | None:
    """The value of a numeric literal, or of a module-level name bound once to one (`EPS = 1e-6`)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.Name):
        values = [
            stmt.value
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets)
        ]
        if len(values) == 1 and isinstance(values[0], ast.Constant) and type(values[0].value) in (int, float):
            return float(values[0].value)
    return None


def _norm_constructions(func: ast.AST) -> dict[str, tuple[ast.Call, ast.expr | None]]:
    """``self.<attr> = FooRMSNorm(dim, eps=...)`` in ``func``: attr -> (the call, its eps argument or None)."""
    out: dict[str, tuple[ast.Call, ast.expr | None]] = {}
    for node in _walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        target, call = node.targets[0], node.value
        name = last_name(call.func) or ""
        if not (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and "rmsnorm" in name.lower()
        ):
            continue
        if any(k.arg is None for k in call.keywords):
            continue  # **kwargs: not read
        eps = next((k.value for k in call.keywords if k.arg in ("eps", "epsilon")), None)
        if eps is None and len(call.args) > 1:
            eps = call.args[1]
        out[target.attr] = (call, eps)
    return out


def _config_field(node: ast.AST) -> str | None:
    """`config.rms_norm_eps`, `self.config.text_config.rms_norm_eps` -> the field name."""
    if isinstance(node, ast.Attribute) and "config" in ast.unparse(node.value):
        return node.attr
    return None
