"""NPU473 noising-target-inconsistent."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import noising


class NoisingTargetInconsistent(Rule):
    code = "NPU473"
    name = "noising-target-inconsistent"
    summary = (
        "A diffusion / flow-matching loss disagrees with the noising it trains on: the velocity target is "
        "`x0 - noise` for `x_t = (1 - s) * x0 + s * noise`, x0 is rebuilt as `x_t + s * v`, or a noise "
        "prediction is regressed onto the clean sample."
    )
    why = (
        "A flow-matching objective noises `x_t = (1 - s) * x0 + s * noise` (diffusers' `scale_noise(sample, t, "
        "noise)`, VeOmni's flow-match `add_noise(x0, noise, ...)`) and regresses the model onto the velocity "
        "`d x_t / d s = noise - x0`, which the sampler integrates (`prev = x + v * (s_next - s)`). The "
        "interpolation in the same function (or the scheduler class's own `add_noise`) fixes what the target "
        "must be: a target written the other way round, scheduler arguments swapped so the data rises with `s`, "
        "an x0 reconstruction `x_t + s * v` instead of `x_t - s * v`, or an epsilon prediction regressed onto the "
        "clean sample all train a model the sampler cannot use, on every device and with a finite, decreasing "
        "loss. Checked in every function of any file against the interpolation it (or its class) builds (a "
        "target bound to a local or written inline in the loss call, `mse_loss(pred, x0 - noise)`); a "
        "target written `-(x0 - noise)` is the velocity again and is not reported. A DDPM-style mix "
        "`a * x0 + b * noise` (any coefficients, the noise being the function's Gaussian draw) fixes which operand "
        "is the noise: a noise prediction regressed onto the other is reported."
    )
    bad = (
        Example(
            """
            def training_step(self, latents, t):
                noise = torch.randn_like(latents)
                noisy = (1 - t) * latents + t * noise
                pred = self.transformer(noisy, t)
                target = latents - noise
                return F.mse_loss(pred, target)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        ),
    )
    good = (
        Example(
            """
            def training_step(self, latents, t):
                noise = torch.randn_like(latents)
                noisy = (1 - t) * latents + t * noise
                pred = self.transformer(noisy, t)
                target = noise - latents
                return F.mse_loss(pred, target)
            """,
            path="veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        ),
    )
    fix_safety = "No fix: which side is wrong (the noising or the target) is the author's decision."
    requires = (("target", "velocity", "noise", "sigma", "loss"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _methods(self) -> list[tuple[ast.AST, list[ast.AST]]]:
        """Each function with the other methods of its class (none for a module-level function)."""
        out: list[tuple[ast.AST, list[ast.AST]]] = []
        for node in nodes_of(self.ctx.tree, ast.ClassDef):  # walk order (the file index's lists)
            if isinstance(node, ast.ClassDef):
                methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
                out.extend((m, [o for o in methods if o is not m]) for m in methods)
        in_class = {id(f) for f, _ in out}
        out.extend(
            (n, [])
            for n in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(n) not in in_class
        )
        return out

    def finish(self) -> None:
        if not noising.may_noise(self.ctx.tree):
            return
        memo: dict[int, list[noising.Interpolation]] = {}

        def of(func: ast.AST) -> list[noising.Interpolation]:
            if id(func) not in memo:
                memo[id(func)] = noising.interpolations(func)
            return memo[id(func)]

        for func, others in self._methods():
            own = of(func)
            siblings = [it for o in others for it in of(o)]
            if not own and not siblings:
                continue
            found = list(noising.reversed_targets(func, own, siblings))
            found += list(noising.reconstruction_faults(func, own))
            found += list(noising.epsilon_onto_data(func, own))
            for site, detail in found:
                if first_report(self, site):
                    self.report(
                        site,
                        f"the loss target disagrees with the noising it trains on: {detail}",
                    )
