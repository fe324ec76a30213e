"""NPU431 rmsnorm-eps-upstream."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.upstream import file_source_module, last_name, upstream_class_method

_EPS_PARAMS = ("eps", "epsilon", "variance_epsilon", "norm_eps")


def _norm_class(name: str | None) -> bool:
    return bool(name) and "rmsnorm" in name.lower()  # type: ignore[union-attr]


def _eps_default(init: ast.FunctionDef | None) -> ast.expr | None:
    """The default of the ``eps`` parameter of a norm's ``__init__``."""
    if init is None:
        return None
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False):
        if arg.arg in _EPS_PARAMS:
            return default
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
        if arg.arg in _EPS_PARAMS and default is not None:
            return default
    return None


def _eps_position(init: ast.FunctionDef | None) -> int | None:
    """The positional index (self excluded) of the ``eps`` parameter of a norm's ``__init__``."""
    if init is None:
        return None
    names = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
    return next((i for i, n in enumerate(names) if n in _EPS_PARAMS), None)


def _number(node: ast.expr | None) -> float | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def _meaning(node: ast.expr | None, default: ast.expr | None) -> tuple[str, object] | None:
    """What an eps argument means: ("num", value), ("field", config attribute) or ("expr", text); the
    class default when the argument is absent; None when unknown."""
    if node is None:
        if default is None:
            return None
        node = default
    value = _number(node)
    if value is not None:
        return ("num", value)
    if isinstance(node, ast.Attribute):
        return ("field", node.attr)
    if isinstance(node, ast.Call) and last_name(node.func) == "getattr" and len(node.args) >= 2:
        key = node.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return ("field", key.value)
    return ("expr", ast.unparse(node))


def _shown(node: ast.expr | None, default: ast.expr | None) -> str:
    if node is not None:
        return f"`{ast.unparse(node)}`"
    return f"the class default ({ast.unparse(default)})" if default is not None else "the class default"


def _norm_builds(init: ast.FunctionDef) -> dict[str, ast.Call]:
    """``self.<attr> = <...RMSNorm>(...)`` of an ``__init__`` (the last one per attribute)."""
    out: dict[str, ast.Call] = {}
    for node in _walk(init):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        if not _norm_class(last_name(node.value.func)):
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                out[target.attr] = node.value
    return out


def _through_local(got: ast.expr | None, init: ast.FunctionDef, call: ast.Call) -> ast.expr | None:
    """A local handed as the eps (`norm_eps = config.rms_norm_eps`, then `RMSNorm(dim, norm_eps)`): the value of
    its last plain assignment in the ``__init__`` before the build (followed through further locals)."""
    seen: set[str] = set()
    while isinstance(got, ast.Name) and got.id not in seen:
        seen.add(got.id)
        bound = [
            n
            for n in _walk(init)
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            and n.value is not None
            and n.lineno < call.lineno
            and any(
                isinstance(t, ast.Name) and t.id == got.id
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
        ]
        if not bound:
            return got  # a parameter or a name of the module: taken as it is spelled
        got = max(bound, key=lambda n: n.lineno).value
    return got


def _through_sibling(
    got: ast.expr | None, builds: dict[str, ast.Call], call: ast.Call, position: int | None
) -> ast.expr | None:
    """``self.q_norm.variance_epsilon`` read from a norm of the same class built before this one in the same
    ``__init__``: the eps that norm was built with (the class default when it was built without one)."""
    if not (
        isinstance(got, ast.Attribute)
        and got.attr in _EPS_PARAMS
        and isinstance(got.value, ast.Attribute)
        and isinstance(got.value.value, ast.Name)
        and got.value.value.id == "self"
    ):
        return got
    sibling = builds.get(got.value.attr)
    if sibling is None or sibling is call or sibling.lineno > call.lineno:
        return got
    if last_name(sibling.func) != last_name(call.func):
        return got
    return RmsNormEpsUpstream._eps_arg(sibling, position)


class RmsNormEpsUpstream(Rule):
    code = "NPU431"
    name = "rmsnorm-eps-upstream"
    summary = (
        "An RMSNorm is built with another epsilon than upstream's: a patched `__init__` passes a different eps "
        "(or a config field where upstream relies on the class default), or the norm class's default eps "
        "differs from upstream's, or one branch of a norm's kernel/eager choice is built without the eps the "
        "other passes."
    )
    why = (
        "Every RMSNorm of a checkpoint was trained with one epsilon, chosen per norm by the upstream modeling "
        "code: most read `config.rms_norm_eps`, but some (DeepSeek/GLM MLA `q_a_layernorm`/`kv_a_layernorm`, "
        "vision towers) rely on the class default (1e-6) or another field. A VeOmni spec or generated copy "
        "that rebuilds a norm with another eps, or changes the norm class's default that such norms rely on, "
        "normalises differently from the checkpoint on every device, silently (GPU and NPU generated modules "
        "then disagree with the reference too). The patched `__init__` (a spec's override, a generated or "
        "in-tree copy) is compared norm by norm with the upstream transformers `__init__` of the same class, and "
        "each norm class's default eps with the upstream class's. The eps is read by keyword or by its position in "
        "the norm's signature, and through the `__init__`'s locals (`norm_eps = config.rms_norm_eps`, then "
        "`RMSNorm(dim, norm_eps)`); a positional argument of a norm whose signature is unknown is not judged."
    )
    bad = (
        Example(
            """
            from transformers.models.llama.modeling_llama import LlamaRMSNorm
            from veomni.patchgen import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaDecoderLayer.__init__")
            def llama_decoder_layer_init_patched(self, config, layer_idx):
                super().__init__()
                self.hidden_size = config.hidden_size
                self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=1e-5)
                self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="a fixed epsilon where upstream reads the config",
        ),
        Example(
            """
            # Source: transformers.models.llama.modeling_llama
            import torch
            from torch import nn


            class LlamaRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps: float = 1e-5) -> None:
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps
            """,
            path="veomni/models/transformers/llama/generated/patched_modeling_llama_npu.py",
            title="a generated copy of the norm class with another default epsilon",
        ),
    )
    good = (
        Example(
            """
            # Source: transformers.models.llama.modeling_llama
            import torch
            from torch import nn


            class LlamaRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps: float = 1e-6) -> None:
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps
            """,
            path="veomni/models/transformers/llama/generated/patched_modeling_llama_npu.py",
        ),
    )
    fix_safety = "No fix: use upstream's epsilon for the norm by hand."
    requires = (("RMSNorm", "RmsNorm"), ("eps", "epsilon"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        for _cls, init in self._inits():
            self._branch_eps(init)
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        if module is None or not module.startswith("transformers."):
            return
        for cls, init in self._inits():
            norm = _norm_class(cls)
            if not norm and not _norm_builds(init):
                continue  # neither a norm class nor an __init__ that builds one: nothing to compare
            upstream = upstream_class_method(module, cls, "__init__")
            if not isinstance(upstream, ast.FunctionDef):
                continue
            if norm:
                self._class_default(module, cls, init, upstream)
            else:
                self._builds(module, cls, init, upstream)

    def _inits(self) -> list[tuple[str, ast.FunctionDef]]:
        """(class, __init__) the file holds: class bodies, and spec overrides of ``Cls.__init__``."""
        out: list[tuple[str, ast.FunctionDef]] = []
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, ast.ClassDef):
                init = next(
                    (s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
                )
                if init is not None:
                    out.append((stmt.name, init))
            elif isinstance(stmt, ast.FunctionDef):
                for deco in stmt.decorator_list:
                    if not (
                        isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.args
                    ):
                        continue
                    target = deco.args[0]
                    if not (isinstance(target, ast.Constant) and isinstance(target.value, str)):
                        continue
                    if deco.func.attr == "modify_init":
                        out.append((target.value, stmt))
                    elif deco.func.attr == "override_method" and target.value.endswith(".__init__"):
                        out.append((target.value.rpartition(".")[0], stmt))
        return out

    def _branch_eps(self, init: ast.FunctionDef) -> None:
        """One attribute's norm built in two branches (a kernel and the eager class, `if`/`else` or a conditional
        expression) where one build passes an eps and the other none: the kernel path normalises with its class
        default, not the configured eps the other path uses."""
        builds: dict[str, list[ast.Call]] = {}
        for node in _walk(init):
            if not isinstance(node, ast.Assign):
                continue
            values = (
                [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
            )
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    for value in values:
                        if isinstance(value, ast.Call) and "norm" in (last_name(value.func) or "").lower():
                            builds.setdefault(target.attr, []).append(value)
        for attr, calls in builds.items():
            if len(calls) < 2:
                continue
            given = [c for c in calls if self._eps_arg(c, None) is not None or len(c.args) >= 2]
            if not given:
                continue
            for call in calls:
                if call in given or any(kw.arg is None for kw in call.keywords) or len(call.args) != 1:
                    continue
                other = self._eps_arg(given[0], None)
                shown = ast.unparse(other) if other is not None else ast.unparse(given[0].args[1])
                self.report(
                    call,
                    f"`self.{attr}` is built here without an eps, while the other branch builds it with eps "
                    f"`{shown}`: this path normalises with `{last_name(call.func)}`'s default eps instead of the "
                    "configured one; pass the same eps",
                )

    def _class_default(self, module: str, cls: str, init: ast.FunctionDef, upstream: ast.FunctionDef) -> None:
        mine, theirs = _eps_default(init), _eps_default(upstream)
        if mine is None or theirs is None:
            return
        a, b = _number(mine), _number(theirs)
        if a is None or b is None or a == b:
            return
        self.report(
            mine,
            f"`{cls}.__init__` defaults eps to {ast.unparse(mine)}, but upstream `{module}.{cls}` defaults it to "
            f"{ast.unparse(theirs)}: every norm built without an explicit eps (upstream relies on the default "
            "for some) now normalises differently from the checkpoint; keep upstream's default",
        )

    def _builds(self, module: str, cls: str, init: ast.FunctionDef, upstream: ast.FunctionDef) -> None:
        mine, theirs = _norm_builds(init), _norm_builds(upstream)
        for attr, call in sorted(mine.items(), key=lambda kv: kv[1].lineno):
            ref = theirs.get(attr)
            norm = last_name(call.func)
            if ref is None or norm is None or last_name(ref.func) != norm:
                continue
            norm_init = self._norm_init(module, norm)
            default = _eps_default(norm_init)
            position = _eps_position(norm_init)
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                continue  # the eps may come in `*args` / `**kwargs`: not readable here
            if position is None and norm_init is None and len(call.args) + len(ref.args) > 2:
                continue  # the norm's signature is unknown: a positional eps cannot be told from the size
            got, want = self._eps_arg(call, position), self._eps_arg(ref, position)
            mine_eps = _through_sibling(_through_local(got, init, call), mine, call, position)
            m, u = _meaning(mine_eps, default), _meaning(_through_local(want, upstream, ref), default)
            if m is None or u is None or m == u:
                continue
            self.report(
                got if got is not None else call,
                f"`self.{attr}` is built with eps {_shown(got, default)}, but upstream `{cls}.__init__` ({module}) "
                f"builds it with {_shown(want, default)}: this norm normalises differently from the checkpoint "
                "on every device; pass upstream's eps",
            )

    def _norm_init(self, module: str, norm: str) -> ast.FunctionDef | None:
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == norm:
                found = next(
                    (s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
                )
                if found is not None:
                    return found
        found = upstream_class_method(module, norm, "__init__")
        return found if isinstance(found, ast.FunctionDef) else None

    @staticmethod
    def _eps_arg(call: ast.Call, position: int | None) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg in _EPS_PARAMS:
                return kw.value
        if position is not None and len(call.args) > position:
            return call.args[position]
        return None
