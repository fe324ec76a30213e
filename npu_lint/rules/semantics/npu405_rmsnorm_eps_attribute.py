"""NPU405 rmsnorm-eps-attribute."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import dotted_name as dotted
from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Context, Example, make_fix
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
        Example(
            """
            import torch
            import torch_npu


            def toy_norm_forward_npu(self, x):
                return torch_npu.npu_rms_norm(x, self.weight, epsilon=getattr(self, "eps", 1e-6))[0]


            class ToyQkNorm(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q, weight, eps):
                    out, _rstd = torch_npu.npu_rms_norm(q, weight, 1e-6)
                    return out


            class ToyGatedNorm(torch.nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.weight = torch.nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = 1e-6
            """,
            path="veomni/ops/kernels/toy_norm/npu.py",
            title="a getattr fallback eps, a literal where the function receives eps, a constructor ignoring eps",
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

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and the kernel modules that define RMSNorm forwards (``ops/kernels/rms_norm/npu.py``)."""
        return ctx.source.kind.model_code or (
            ctx.source.kind.kernel and not ctx.source.kind.test and "rms_norm" in ctx.source.text
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
        if ctx.source.kind.kernel:
            self._owner_eps()
        self._eager_literal()
        self._constructed()
        self._init_ignores_eps()
        self._norm_built_fixed()
        calls = [(c, f, cls) for c, f, cls, _h in self.rms_calls()]
        calls += [(c, f, cls) for c, f, cls, _q in self.vendor_rms_calls()]
        seen = {id(c) for c, _f, _cls in calls}
        if "getattr(" in ctx.source.text:  # a kernel call the readers above leave out (a kernel module's own)
            for call in nodes_of(ctx.tree, ast.Call):
                assert isinstance(call, ast.Call)
                if id(call) not in seen and "rms_norm" in (last_name(call.func) or ""):
                    arg = _eps_argument(call)
                    if isinstance(arg, ast.Call):
                        self._scope_eps(call, arg, None, None)
        for call, func, cls in calls:
            arg = _eps_argument(call)
            if arg is not None and self._fixed_eps(arg, func, cls):
                continue
            if self._scope_eps(call, arg, func, cls):
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

    def _scope_eps(self, call: ast.Call, arg: ast.expr | None, func: ast.AST | None, cls: str | None) -> bool:
        """The eps of a kernel call, read against what its function has: a literal while the function receives
        an eps (``def forward(ctx, q, k, ..., eps)``); ``getattr(module, "x", 1e-6)``, a fixed eps whenever the
        module spells its eps otherwise; no eps at all while the class keeps one (the kernel's default
        replaces it). True when reported."""
        if arg is not None and _fixed_number(self.ctx.tree, arg) is not None:
            params = _eps_params(func)
            if params:
                self.report(
                    arg,
                    f"the RMSNorm kernel is given the fixed eps `{self.ctx.source.segment(arg)}`, but its function "
                    f"receives `{params[0]}`: a model configured with another eps normalises differently on "
                    f"this path; pass `{params[0]}`",
                )
                return True
            return False
        if (
            isinstance(arg, ast.Call)
            and isinstance(arg.func, ast.Name)
            and arg.func.id == "getattr"
            and len(arg.args) == 3
            and isinstance(arg.args[1], ast.Constant)
            and _fixed_number(self.ctx.tree, arg.args[2]) is not None
        ):
            self.report(
                arg,
                f"the RMSNorm kernel's eps is `{self.ctx.source.segment(arg)}`: a module that keeps its eps "
                f"under another name than `{arg.args[1].value}` (`variance_epsilon` in transformers' classes, "
                "`eps` in Gemma-style and many in-tree ones) silently runs with the fixed "
                f"`{self.ctx.source.segment(arg.args[2])}`; read the module's own eps attribute",
            )
            return True
        if arg is None and cls is not None and not is_torch_rms(call):
            attrs = self.assigned_attrs(cls)
            kept = sorted(a for a in (attrs or ()) if a in EPS_NAMES)
            if kept and func is not None and receiver_of(func):
                self.report(
                    call,
                    f"this RMSNorm kernel call passes no eps, but `{cls}` keeps its own (`self.{kept[0]}`, the "
                    "value it is constructed with): the kernel's default replaces the model's configured eps; "
                    f"pass `{receiver_of(func)}.{kept[0]}`",
                )
                return True
        return False

    def _owner_eps(self) -> None:
        """A kernel module's RMSNorm computation (a kernel call's eps, or the eps added to a mean of squares under
        a root) that uses a fixed number while its function has the owner's eps at hand: an autograd
        Function's ``backward`` whose ``forward`` saved it on ``ctx`` (``eps = 1e-5`` instead of ``ctx.eps``), or
        a method-style forward of the module (``def f(self, x)`` scaling by ``self.weight``), whose class carries
        its eps. The fixed value may be written in place or in a local bound once to it."""
        tree = self.ctx.tree
        forwards_saving: dict[str, str] = {}  # autograd class -> the eps attribute its forward saves on ctx
        for cls in nodes_of(tree, ast.ClassDef):
            assert isinstance(cls, ast.ClassDef)
            for stmt in cls.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "forward" and stmt.args.args:
                    ctx_name = stmt.args.args[0].arg
                    for node in _walk(stmt):
                        if isinstance(node, ast.Assign):
                            for t in node.targets:
                                if (
                                    isinstance(t, ast.Attribute)
                                    and isinstance(t.value, ast.Name)
                                    and t.value.id == ctx_name
                                    and (t.attr in EPS_NAMES or t.attr.endswith("eps"))
                                ):
                                    forwards_saving[cls.name] = t.attr
        for cls_name, func, kind in self._owner_functions(forwards_saving):
            literals = _literal_locals(func)
            for node in _walk(func):
                fixed: ast.expr | None = None
                if isinstance(node, ast.Call) and "rms" in (last_name(node.func) or "").lower():
                    arg = _eps_argument(node)
                    if arg is not None and (
                        _fixed_number(tree, arg) is not None
                        or (isinstance(arg, ast.Name) and arg.id in literals)
                    ):
                        fixed = arg
                elif isinstance(node, ast.Call) and (last_name(node.func) or "") in ("rsqrt", "sqrt"):
                    inner = node.args[0] if node.args else getattr(node.func, "value", None)
                    if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add):
                        for side, other in ((inner.right, inner.left), (inner.left, inner.right)):
                            if _mean_of_squares(other, func) and (
                                (isinstance(side, ast.Name) and side.id in literals)
                                or (isinstance(side, ast.Constant) and kind == "ctx")
                            ):
                                fixed = side
                                break
                if fixed is None:
                    continue
                at: ast.AST = literals.get(fixed.id, fixed) if isinstance(fixed, ast.Name) else fixed
                shown = self.ctx.source.segment(at)
                owner = (
                    f"`ctx.{forwards_saving[cls_name]}` (saved by `{cls_name}.forward`)"
                    if kind == "ctx"
                    else f"the module's own eps (`{receiver_of(func)}.variance_epsilon` or `.eps`)"
                )
                self.report(
                    at,
                    f"`{func.name}` computes the RMSNorm with the fixed `{shown}` while {owner} is at hand: a model "
                    "configured with another eps normalises differently on this path",
                )
                break

    def _owner_functions(self, forwards_saving: dict[str, str]):  # noqa: ANN202
        """(class or "", function, "ctx" | "module") for backward methods of autograd classes whose forward saves
        an eps, and module-level method-style forwards (first parameter ``self``/``module``, reading its weight)."""
        tree = self.ctx.tree
        for cls in nodes_of(tree, ast.ClassDef):
            assert isinstance(cls, ast.ClassDef)
            if cls.name not in forwards_saving:
                continue
            for stmt in cls.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "backward":
                    yield cls.name, stmt, "ctx"
        for stmt in tree.body:
            if not isinstance(stmt, ast.FunctionDef) or not stmt.args.args or _eps_params(stmt):
                continue
            recv = stmt.args.args[0].arg
            if recv not in ("self", "module"):
                continue
            if any(
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == recv
                and n.attr == "weight"
                for n in _walk(stmt)
            ):
                yield "", stmt, "module"

    def _init_ignores_eps(self) -> None:
        """A norm class's ``__init__`` that receives an eps and stores a literal as its eps instead."""
        if "__init__" not in self.ctx.source.text:
            return
        for cls in nodes_of(self.ctx.tree, ast.ClassDef):
            assert isinstance(cls, ast.ClassDef)
            if "norm" not in cls.name.lower():
                continue
            init = next(
                (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
            )
            params = _eps_params(init)
            if init is None or not params:
                continue
            if any(isinstance(n, ast.Name) and n.id == params[0] for n in _walk(init)):
                continue  # the parameter is read
            for stmt in _walk(init):
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                    continue
                target = stmt.targets[0]
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in EPS_NAMES
                    and _fixed_number(self.ctx.tree, stmt.value) is not None
                ):
                    self.report(
                        stmt.value,
                        f"`{cls.name}.__init__` receives `{params[0]}` but stores the fixed "
                        f"`{self.ctx.source.segment(stmt.value)}` as `self.{target.attr}`: the norm ignores the "
                        f"eps it is built with; store `{params[0]}`",
                    )

    def _norm_built_fixed(self) -> None:
        """A norm class built with a fixed eps (or none, for ``torch.nn.RMSNorm``, whose default is the dtype's
        machine epsilon) where the function has an eps parameter to give it. (A fixed eps beside a config eps
        elsewhere in the file is not read: vision towers legitimately fix theirs.)"""
        text = self.ctx.source.text
        if "Norm(" not in text:
            return
        built: dict[str, list[tuple[ast.Call, ast.expr | None, ast.AST]]] = {}
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            for call in nodes_of(func, ast.Call):
                assert isinstance(call, ast.Call)
                name = last_name(call.func) or ""
                if not name.endswith("RMSNorm"):
                    continue
                eps = next((k.value for k in call.keywords if k.arg in _EPS_KEYWORDS), None)
                if eps is None and len(call.args) >= 2:
                    eps = call.args[1]
                built.setdefault(name, []).append((call, eps, func))
        for name, uses in built.items():
            for call, eps, func in uses:
                params = _eps_params(func)
                if eps is not None and _fixed_number(self.ctx.tree, eps) is not None:
                    have = params[0] if params else None
                    if have is not None:
                        self.report(
                            eps,
                            f"`{name}` is built with the fixed eps `{self.ctx.source.segment(eps)}`, but "
                            f"`{have}` is there to give it: the norm ignores the model's configured eps",
                        )
                elif (
                    eps is None
                    and params
                    and name == "RMSNorm"
                    and (dotted(call.func) or "").startswith(("torch.", "nn."))
                ):
                    self.report(
                        call,
                        f"`{dotted(call.func)}` is built without an eps while `{params[0]}` is in scope: its "
                        "default is the input dtype's machine epsilon (0.0078 in bf16), not the model's",
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


def _eps_params(func: ast.AST | None) -> list[str]:
    """The parameters of ``func`` named for an epsilon (``eps``, ``norm_eps``, ``rms_norm_eps``)."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    return [a.arg for a in args if a.arg in EPS_NAMES or a.arg.endswith("_eps")]


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


def _literal_locals(func: ast.FunctionDef) -> dict[str, ast.expr]:
    """Locals named for an epsilon bound exactly once, to a numeric literal (``eps = 1e-5``): name -> the literal."""
    bound: dict[str, list[ast.expr]] = {}
    for node in _walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
    return {
        name: values[0]
        for name, values in bound.items()
        if (name in EPS_NAMES or name.endswith("eps") or name.endswith("epsilon"))
        and len(values) == 1
        and isinstance(values[0], ast.Constant)
        and type(values[0].value) in (int, float)
    }


def _mean_of_squares(node: ast.expr, func: ast.FunctionDef) -> bool:
    """``x.pow(2).mean(-1)``, ``x.square().mean(...)``, or a local bound to one (``variance``)."""
    if isinstance(node, ast.Name):
        for sub in _walk(func):
            if (
                isinstance(sub, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == node.id for t in sub.targets)
                and _mean_of_squares(sub.value, func)
            ):
                return True
        return False
    text = ast.unparse(node)
    return "mean" in text and ("pow(2" in text or "square" in text or "**2" in text.replace(" ", ""))
