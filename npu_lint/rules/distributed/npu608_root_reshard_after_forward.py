"""NPU608 root-reshard-after-forward."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, str_value
from npu_lint.rules.base import Context, Example, Rule

_KEY = "reshard_after_forward"


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = func.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _filters_key(value: ast.AST) -> bool:
    """``{k: v for k, v in d.items() if k != "reshard_after_forward"}`` (or ``not in (...)``): the key dropped."""
    if not isinstance(value, ast.DictComp):
        return False
    for gen in value.generators:
        for cond in gen.ifs:
            for sub in ast.walk(cond):
                if isinstance(sub, ast.Compare) and any(
                    isinstance(op, (ast.NotEq, ast.NotIn)) for op in sub.ops
                ):
                    if any(str_value(c) == _KEY for n in sub.comparators for c in ast.walk(n)):
                        return True
    return False


def _carries_key(func: ast.AST, name: str, before: int) -> ast.AST | None:
    """Where the dict ``name`` gets a ``reshard_after_forward`` entry before line ``before``: a literal key,
    ``dict(reshard_after_forward=...)``, ``d["reshard_after_forward"] = ...``, ``d.update(reshard_after_forward=...)``;
    None when its last binding drops the key (a comprehension filtering it out) or no binding sets it."""
    found: ast.AST | None = None
    for sub in ast.walk(func):
        line = getattr(sub, "lineno", 0)
        if line >= before:
            continue
        if isinstance(sub, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in sub.targets):
            value = sub.value
            if _filters_key(value):
                found = None
            elif isinstance(value, ast.Dict) and any(
                str_value(k) == _KEY for k in value.keys if k is not None
            ):
                found = sub
            elif isinstance(value, ast.Call) and call_name(value) == "dict":
                if any(k.arg == _KEY for k in value.keywords):
                    found = sub
        elif isinstance(sub, ast.Assign):
            for target in sub.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == name
                    and str_value(target.slice) == _KEY
                ):
                    found = sub
        elif (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("update", "setdefault")
            and isinstance(sub.func.value, ast.Name)
            and sub.func.value.id == name
        ):
            if any(k.arg == _KEY for k in sub.keywords) or (sub.args and str_value(sub.args[0]) == _KEY):
                found = sub
    return found


class RootReshardAfterForward(Rule):
    code = "NPU608"
    name = "root-reshard-after-forward"
    summary = (
        "The root `fully_shard(model, ...)` of an FSDP2 wrap receives `reshard_after_forward` (directly or "
        "through the keyword dict its layers use)."
    )
    why = (
        "FSDP2 keeps the root module's parameters (embeddings, final norm, lm_head) unsharded from the forward "
        "to the backward only when `reshard_after_forward` is left unset on the root (its automatic no-reshard "
        "for the root). A wrap that builds one keyword dict for the decoder layers, `reshard_after_forward` "
        "included, and passes the same dict to the root frees the root's unsharded weights after the forward. A "
        "fused linear-loss kernel (chunked cross-entropy or log-probs) that saved the lm_head weight for its "
        "backward then reads freed storage ('storage of size 0'), and otherwise the weights are all-gathered "
        "twice per step. The root is the module the wrapping function received and shards last, after "
        "sharding other modules in the same function. `reshard_after_forward=False` on the root is fine."
    )
    bad = (
        Example(
            """
            from torch.distributed.fsdp import fully_shard


            def wrap_model(model, mesh, reshard=True):
                shard_kwargs = {"mesh": mesh, "reshard_after_forward": reshard}
                for block in model.model.layers:
                    fully_shard(block, **shard_kwargs)
                fully_shard(model, **shard_kwargs)
                return model
            """,
            path="veomni/distributed/toy_fsdp.py",
        ),
        Example(
            """
            from torch.distributed.fsdp import fully_shard


            def wrap_model(model, mesh, policy):
                kwargs = dict(mesh=mesh, mp_policy=policy)
                for block in model.blocks:
                    fully_shard(block, reshard_after_forward=True, **kwargs)
                fully_shard(model, reshard_after_forward=True, **kwargs)
                return model
            """,
            path="veomni/distributed/toy_fsdp.py",
            title="an explicit keyword on the root",
        ),
    )
    good = (
        Example(
            """
            from torch.distributed.fsdp import fully_shard


            def wrap_model(model, mesh, reshard=True):
                shard_kwargs = {"mesh": mesh, "reshard_after_forward": reshard}
                for block in model.model.layers:
                    fully_shard(block, **shard_kwargs)
                root_kwargs = {k: v for k, v in shard_kwargs.items() if k != "reshard_after_forward"}
                fully_shard(model, **root_kwargs)
                return model
            """,
            path="veomni/distributed/toy_fsdp.py",
        ),
    )
    fix_safety = "No fix: the keyword dict may be shared; drop the key for the root call."
    requires = ("fully_shard", _KEY)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if call_name(node) != "fully_shard" or not node.args or not isinstance(node.args[0], ast.Name):
            return
        func = self.ctx.function
        if func is None or isinstance(func, ast.Lambda):
            return
        root = node.args[0].id
        if root not in _params(func):
            return
        others = [
            sub
            for sub in ast.walk(func)
            if isinstance(sub, ast.Call)
            and sub is not node
            and call_name(sub) == "fully_shard"
            and sub.args
            and not (isinstance(sub.args[0], ast.Name) and sub.args[0].id == root)
            and sub.lineno < node.lineno
        ]
        if not others:
            return  # not a root wrapped after its layers
        explicit = next((k for k in node.keywords if k.arg == _KEY), None)
        if explicit is not None:
            if isinstance(explicit.value, ast.Constant) and explicit.value.value in (False, None):
                return
            how = f"`{self.ctx.source.segment(explicit)}`"
        else:
            via = None
            for kw in node.keywords:
                if kw.arg is None and isinstance(kw.value, ast.Name):
                    if _carries_key(func, kw.value.id, node.lineno) is not None:
                        via = kw.value.id
                        break
            if via is None:
                return
            how = f"`{_KEY}` through `**{via}` (the keywords of the layers' `fully_shard`)"
        self.report(
            node,
            f"the root `fully_shard({root}, ...)` receives {how}: FSDP2 then frees the root's unsharded parameters "
            "(embeddings, lm_head) after the forward instead of keeping them for the backward, and a fused "
            "linear-loss kernel that saved the lm_head weight for its backward reads freed storage; leave "
            f"`{_KEY}` unset on the root",
        )
