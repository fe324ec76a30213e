"""NPU458 upstream-copy-numerics."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import transformers_version
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import copyequiv, losspath, normflow, refedits
from npu_lint.veomni.patchgen import generated_banner, load_file
from npu_lint.veomni.upstream import (
    decorator_target,
    file_source_module,
    replaced_function,
    same_node,
    upstream_class_method,
    upstream_function,
    upstream_path,
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _same_body(mine: ast.AST, theirs: ast.AST) -> bool:
    a, b = mine.body, theirs.body  # type: ignore[attr-defined]
    return len(a) == len(b) and all(same_node(x, y) for x, y in zip(a, b, strict=True))


class UpstreamCopyNumerics(Rule):
    code = "NPU458"
    name = "upstream-copy-numerics"
    summary = (
        "A generated module's copy of upstream code (an RMSNorm, a router, a loss head) computes other numerics "
        "than the installed transformers: an fp32 upcast dropped, eps no longer added, a norm submodule "
        "skipped, a reduction's op or axis changed, a flag tested the other way, a loss keyword changed; so does "
        "a spec's replacement of an upstream method or function (a statement kept from upstream with one small "
        "edit: an operator, a number, a comparison, an operand, an argument, an upcast, a name of the pair), or "
        "any edit of a method no patch names."
    )
    why = (
        "A generated module is the upstream modeling code with the spec's patches applied; the code no patch "
        "rewrites is upstream's, statement for statement, and a patch that guards a kernel keeps upstream's "
        "eager body below the guard. That is the code the NPU build runs when no kernel is bound (and the GPU "
        "build's reference): when a copy squares bf16 activations, clamps the variance at eps instead of adding "
        "it, skips `q_a_layernorm`, renormalises the top-k weights over another axis or when the config says "
        "not to, or builds its cross-entropy with another ignore index, the model silently diverges from the "
        "checkpoint it loads, and no spec review sees it. Each method of a generated file (whose banner names the "
        "installed transformers version) is aligned statement by statement with upstream's, and each run of "
        "upstream statements the copy changed or deleted is compared with its replacement on what it computes "
        "(fp32 upcasts, eps additions, norm calls, `1 + weight` offsets, reductions and their axes, flag "
        "polarity, loss keywords); a rewrite that keeps all of them (`square()` for `pow(2)`, a keyword axis) "
        "and the statements a patch only adds (a kernel guard) are not reported. A method no patch names is "
        "upstream's code outright: any other change (a slice taken from the other end, an argument dropped, a "
        "constant changed) is reported, equivalent spellings aside. A spec's `override_method` replacement is "
        "compared with the upstream method it replaces the same way (its kept eager body), and a rewrite must "
        "still call the norm submodule upstream calls on each tensor (not `self.q_norm` on the keys), scale "
        "the terms upstream scales by a loss coefficient, and form `1 + weight` in fp32 where upstream does. A "
        "`replace_function` replacement is compared with the upstream function it replaces. A rewrite's statement "
        "that is one of upstream's with exactly one small change (`+` for `-`, `is None` for `is not None`, a "
        "number, an operand, a positional argument or keyword left out, arguments reordered, `.float()` dropped, "
        "another dtype or reduction, `self.gate_proj` read where upstream reads `self.up_proj`) is reported: a "
        "deliberate rewrite calls something else or adds, it rarely changes one token of upstream's statement. "
        "A callee upstream hands a norm's output (the DSA indexer given the normalised query residual) that the "
        "copy still calls with the un-normalised tensor is reported too, patched or not. An unpatched copy is read "
        "with its function as context: a temporary it introduces is written out at its uses, SiLU spelled "
        "`x * sigmoid(x)`, a top-k or argmax whose values are dropped taken on the logits instead of their "
        "softmax over the same axis, and a norm submodule applied after a transpose of two leading axes of a head "
        "split are upstream's computation and not reported."
    )
    bad = (
        Example(
            """
            # ==============================================================================
            #  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # ==============================================================================
            #
            #  Source: transformers.models.llama.modeling_llama
            #  Based on: transformers==5.9.0
            #
            #  Patches applied:
            #    - method_override: LlamaModel.forward

            import torch
            from torch import nn


            class LlamaRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    input_dtype = hidden_states.dtype
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                    return self.weight * hidden_states.to(input_dtype)
            """,
            path="veomni/models/transformers/llama/generated/patched_modeling_llama_gpu.py",
            title="the copied RMSNorm no longer upcasts to fp32",
        ),
    )
    good = (
        Example(
            """
            # ==============================================================================
            #  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
            # ==============================================================================
            #
            #  Source: transformers.models.llama.modeling_llama
            #  Based on: transformers==5.9.0
            #
            #  Patches applied:
            #    - method_override: LlamaModel.forward

            import torch
            from torch import nn


            class LlamaRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    input_dtype = hidden_states.dtype
                    hidden_states = hidden_states.to(torch.float32)
                    variance = hidden_states.square().mean(dim=-1, keepdim=True)
                    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                    return self.weight * hidden_states.to(input_dtype)
            """,
            path="veomni/models/transformers/llama/generated/patched_modeling_llama_gpu.py",
            title="an equivalent spelling of upstream's norm",
        ),
    )
    fix_safety = "No fix: restore upstream's code (regenerate), or move an intended change into the spec."
    requires = (("Based on:", "override_method", "modify_init", "replace_function"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        return bool(kind.generated or kind.spec) and not kind.test

    def finish(self) -> None:
        if self.ctx.source.kind.generated:
            self._generated()
        else:
            self._spec()

    def _report(self, site: ast.AST, name: str, kind: str, detail: str, reference: str) -> None:
        extra = f" ({detail})" if detail else ""
        self.report(
            site,
            f"`{name}` {losspath.feature_message(kind)}{extra}: {reference}; restore upstream's code or move the "
            "change into the spec",
        )

    def _spec(self) -> None:
        """A spec's ``override_method`` / ``modify_init`` replacements against the upstream method each replaces:
        the eager body a patch keeps below its kernel guard is upstream's, and a rewrite keeps what upstream
        computes (which norm submodule normalises which tensor, what a loss coefficient scales)."""
        ctx = self.ctx
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        if not module or not module.startswith("transformers."):
            return
        replaced_here = {
            t[1]
            for s in ctx.tree.body
            if isinstance(s, ast.FunctionDef) and (t := decorator_target(s)) is not None
        }
        for stmt in ctx.tree.body:
            if not isinstance(stmt, ast.FunctionDef):
                continue
            target = decorator_target(stmt)
            if target is not None:
                their = upstream_class_method(module, target[0], target[1])
                name = f"{target[0]}.{target[1]}"
            else:
                replaced = replaced_function(stmt)
                their = upstream_function(module, replaced) if replaced else None
                name = replaced or ""
            if their is None or _same_body(stmt, their):
                continue
            reference = f"upstream `{name}` (`{module}`) computes otherwise"
            faults = self._faults(stmt, their, True) if target is not None else []
            for site, kind, detail in faults:
                self._report(site, name, kind, detail, reference)
                break
            else:
                for site, what in refedits.function_edits(stmt, their):
                    if any(what.startswith(f"`self.{m}(") for m in replaced_here):
                        continue  # a call of a method this spec replaces too: its signature is the spec's
                    self.report(
                        site,
                        f"`{name}`: this statement is upstream's with one edit: {what}; upstream `{module}` "
                        "computes it otherwise; restore upstream's statement or write the change as a rewrite",
                    )
                    break

    @staticmethod
    def _faults(mine: ast.AST, their: ast.AST, patched: bool) -> list[tuple[ast.AST, str, str]]:
        faults: list[tuple[ast.AST, str, str]] = [
            (site, "flag", f"`{flag}` is tested the other way round")
            for site, flag in losspath.inverted_flags(mine, their)
        ]
        offset = losspath.added_offset(mine, their)
        if offset is not None:
            faults.append((offset, "offset", "upstream multiplies by the weight itself"))
        faults += losspath.copy_numeric_faults(mine.body, their.body, patched)  # type: ignore[attr-defined]
        faults += [
            (site, "norm", f"`{callee}` no longer receives `self.{norm}`'s output, which upstream hands it")
            for site, norm, callee in normflow.lost_consumers(mine, their)
        ]
        if patched:
            faults += losspath.rewritten_copy_faults(mine, their)
        return faults

    def _generated(self) -> None:
        ctx = self.ctx
        banner = generated_banner(ctx.source.path, ctx.source.text)
        module = banner.source_module
        if not module or not module.startswith("transformers.") or not banner.based_on:
            return
        if transformers_version() != banner.based_on:
            return
        path = upstream_path(module)
        parsed = load_file(str(path)) if path is not None else None
        if parsed is None or parsed.tree is None:
            return
        theirs = {n.name: n for n in parsed.tree.body if isinstance(n, (*_FUNCS, ast.ClassDef))}
        replaced = {t for kind, t, _ in banner.banner_patches if kind == "class_replacement"}
        patched = {t for _kind, t, _ in banner.banner_patches}
        reference = (
            f"the generated copy no longer computes what transformers=={banner.based_on} `{module}` does"
        )
        for node in ctx.tree.body:
            up = theirs.get(getattr(node, "name", ""))
            if up is None or type(up) is not type(node) or node.name in replaced:  # type: ignore[attr-defined]
                continue
            if isinstance(node, ast.ClassDef):
                methods = {m.name: m for m in up.body if isinstance(m, _FUNCS)}  # type: ignore[attr-defined]
                pairs = [
                    (f"{node.name}.{m.name}", m, methods[m.name])
                    for m in node.body
                    if isinstance(m, _FUNCS) and m.name in methods
                ]
            else:
                pairs = [(node.name, node, up)]  # type: ignore[attr-defined]
            for name, mine, their in pairs:
                if _same_body(mine, their):
                    continue
                is_patched = name in patched or node.name in patched  # type: ignore[attr-defined]
                faults = self._faults(mine, their, is_patched)
                if faults:
                    site, kind, detail = faults[0]
                    self._report(site, name, kind, detail, reference)
                    continue
                if is_patched:
                    continue
                # No patch names this method: it is upstream's code, and any other computation is an edit.
                keys = copyequiv.Keys(mine, their)
                for site, was, now in losspath.copy_differences(mine.body, their.body, keys):
                    self.report(
                        site,
                        f"`{name}` is not patched by the spec, yet it differs from transformers=={banner.based_on} "
                        f"`{module}`: upstream `{was}`, here `{now}`; restore upstream's code or move the change "
                        "into the spec",
                    )
                    break
