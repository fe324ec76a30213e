"""NPU408 rmsnorm-eps-placement."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_arg, nodes_of, str_value
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._rms_math import (
    EPS_WORDS,
    RmsSite,
    eps_after_root,
    rms_sites,
    roots_without_eps,
    upstream_method,
)
from npu_lint.veomni.upstream import file_source_module


def _init_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """(class, `__init__`) of the file's RMSNorm classes and a spec's replacements of one
    (`@config.override_method("FooRMSNorm.__init__")`, `@config.modify_init("FooRMSNorm")`)."""
    out: list[tuple[str, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and "rmsnorm" in stmt.name.lower():
            out.extend(
                (stmt.name, f) for f in stmt.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            )
        elif isinstance(stmt, ast.FunctionDef):
            for deco in stmt.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.args):
                    continue
                target = str_value(deco.args[0]) or ""
                if deco.func.attr == "modify_init":
                    cls = target
                elif deco.func.attr == "override_method" and target.endswith(".__init__"):
                    cls = target.rpartition(".")[0]
                else:
                    continue
                if "rmsnorm" in cls.lower():
                    out.append((cls, stmt))
    return out


def _eps_param(func: ast.FunctionDef) -> str | None:
    args = func.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        if arg.arg in EPS_WORDS:
            return arg.arg
    return None


def _reads(func: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in _walk(func))


def _fixed_eps_store(func: ast.FunctionDef) -> tuple[ast.Assign, str] | None:
    """`self.variance_epsilon = 1e-6`: the assignment of a literal to an eps attribute, with the attribute."""
    for node in _walk(func):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and target.attr in EPS_WORDS
                and type(node.value.value) in (int, float)
            ):
                return node, target.attr
    return None


class RmsNormEpsPlacement(Rule):
    code = "NPU408"
    name = "rmsnorm-eps-placement"
    summary = (
        "An RMSNorm adds its epsilon after the square root instead of under it, or its `__init__` stores a fixed "
        "epsilon and ignores the `eps` it is given."
    )
    why = (
        "RMSNorm is `x * rsqrt(mean(x^2) + eps)` with the model config's eps (`rms_norm_eps`), and the fused "
        "kernels (`torch_npu.npu_rms_norm`, Liger) use the same definition. `x / (sqrt(mean(x^2)) + eps)` is a "
        "different normalisation for rows of small variance (low-rank q/kv norms in particular): the eager path "
        "then disagrees with the checkpoint's reference and with the fused path of the other device. An `__init__` "
        "that keeps a literal epsilon while its `eps` parameter goes unread normalises every layer with that "
        "literal, whatever the checkpoint's config says, on every path that reads the attribute (the NPU kernel "
        "wrappers included). Every function the tree runs as an RMSNorm is read: a spec's or generated file's "
        "replacement of an RMSNorm class's method (reported only where the upstream method does not do the same), "
        "the methods and `__init__` of an RMSNorm class the tree defines itself, and a module-level function "
        "computing the mean of squares (a kernel module's eager fallback)."
        " A root of the mean of squares with no epsilon at all (`torch.rsqrt(variance)`) is reported the same way, "
        "and so is a fused kernel called without one (`torch_npu.npu_rms_norm(x, w)`, `F.rms_norm(x, shape, w)`): "
        "the kernel's default replaces the config's eps."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn


            class StateRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.eps = eps

                def forward(self, x):
                    dtype = x.dtype
                    x = x.float()
                    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
                    return self.weight * (x / (rms + self.eps)).to(dtype)
            """,
            path="veomni/models/transformers/state/modeling_state.py",
        ),
        Example(
            """
            def fallback_norm(x, weight, eps):
                x32 = x.float()
                normed = x32 / (torch.sqrt(x32.square().mean(-1, keepdim=True)) + eps)
                return weight * normed.to(x.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
            title="a kernel module's eager fallback",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.__init__")
            def mistral_norm_init_patched(self, hidden_size, eps=1e-6):
                nn.Module.__init__(self)
                self.weight = nn.Parameter(torch.ones(hidden_size))
                self.variance_epsilon = 1e-5
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="an `__init__` patch that ignores its eps",
        ),
        Example(
            """
            import torch


            def tokenwise_norm(x, weight, eps):
                x32 = x.float()
                inv = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True))
                return weight * (x32 * inv).to(x.dtype)
            """,
            path="veomni/ops/kernels/rms_norm/eager.py",
            title="no epsilon at all",
        ),
        Example(
            """
            import torch_npu


            def fused_norm_npu(module, states):
                return torch_npu.npu_rms_norm(states, module.weight)[0]
            """,
            path="veomni/models/transformers/toy/npu_patch.py",
            title="a fused kernel left at its default epsilon",
        ),
        Example(
            """
            import torch


            def offload_norms(model):
                class OffloadedRMSNorm(torch.nn.Module):
                    def __init__(self, inner):
                        super().__init__()
                        self.inner = inner

                    def forward(self, x):
                        rms = x.float().pow(2).mean(-1, keepdim=True).sqrt()
                        return (x / (rms + self.inner.eps)).to(x.dtype) * self.inner.weight

                return OffloadedRMSNorm
            """,
            path="veomni/models/transformers/toy/modeling_offload.py",
            title="a wrapper class defined inside a function, eps read from the wrapped module",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn


            class StateRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.eps = eps

                def forward(self, x):
                    dtype = x.dtype
                    x = x.float()
                    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
                    return self.weight * x.to(dtype)
            """,
            path="veomni/models/transformers/state/modeling_state.py",
        ),
        Example(
            """
            import torch
            from torch import nn


            class FixedRMSNorm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.eps = 1e-6
            """,
            path="veomni/models/transformers/fixed/modeling_fixed.py",
            title="a class that takes no eps keeps its own",
        ),
    )
    fix_safety = (
        "No fix: moving eps under the root or reading the argument changes the numerics of the model."
    )

    requires = (("sqrt", "eps", "epsilon", "rms_norm"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # model code and the tree's kernels (veomni/ops)
        return not ctx.source.kind.test

    def finish(self) -> None:
        for site in rms_sites(self.ctx):
            self._missing(site)
            found = eps_after_root(site.func)
            if not found:
                continue
            if site.upstream is not None and eps_after_root(site.upstream):
                continue
            add, root = found[0]
            where = site.label
            self.report(
                add,
                f"{where} adds the epsilon after the square root (`{ast.unparse(add)}`): RMSNorm (and the fused "
                "kernels) compute `x * rsqrt(mean(x^2) + eps)`, with eps under the root",
            )
        self._fixed_eps()
        self._kernel_default()

    def _kernel_default(self) -> None:
        """A fused RMSNorm kernel called without an epsilon: its own default replaces the config's."""
        ctx = self.ctx
        if "rms_norm" not in ctx.source.text:
            return
        for node in nodes_of(ctx.tree, ast.Call):
            qual = ctx.qualname(node.func) or ""
            if qual == "torch_npu.npu_rms_norm" or qual.endswith(".npu_rms_norm") and "torch_npu" in qual:
                given = call_arg(node, 2, "epsilon") or call_arg(node, 2, "eps")
                default = "its default epsilon (1e-6)"
            elif qual in ("torch.nn.functional.rms_norm", "torch.rms_norm"):
                given = call_arg(node, 3, "eps")
                default = "torch's default (the dtype's machine epsilon)"
            else:
                continue
            if (
                given is not None
                or any(k.arg is None for k in node.keywords)
                or any(isinstance(a, ast.Starred) for a in node.args)
            ):
                continue
            self.report(
                node,
                f"`{ast.unparse(node.func)}` is called without an epsilon: it normalises with {default}, not the "
                "model config's eps",
            )

    def _missing(self, site: RmsSite) -> None:
        """A root of the mean of squares with no epsilon at all (a zero row divides by zero)."""
        found = roots_without_eps(site.func)
        if not found or (site.upstream is not None and roots_without_eps(site.upstream)):
            return
        self.report(
            found[0],
            f"{site.label} takes the root of the mean of squares with no epsilon (`{ast.unparse(found[0])}`): "
            "RMSNorm adds the config's eps under the root, and an all-zero row (padding) divides by zero",
        )

    def _fixed_eps(self) -> None:
        ctx = self.ctx
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        for cls, init in _init_functions(ctx.tree):
            param = _eps_param(init)
            if param is None or _reads(init, param):
                continue
            store = _fixed_eps_store(init)
            if store is None:
                continue
            upstream = upstream_method(module, cls, "__init__")
            if upstream is not None and _fixed_eps_store(upstream) is not None:
                continue
            assign, attr = store
            value = ast.unparse(assign.value)
            self.report(
                assign,
                f"`{cls}.__init__` stores a fixed epsilon ({value}) in `self.{attr}` and never reads its `{param}` "
                f"argument: every norm built with the config's eps normalises with {value}",
            )
