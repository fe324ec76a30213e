"""NPU631 deferred-init-weights-dropped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import own_nodes, resolve_relative
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.parallelgate import weights_parameter
from npu_lint.veomni.signatures import Signature, module_signatures


class DeferredInitWeightsDropped(Rule):
    code = "NPU631"
    name = "deferred-init-weights-dropped"
    summary = (
        "A model is handed to a builder with `init_device=` (built on meta / one rank and materialised inside) "
        "without the weights path the builder's signature takes (`weights_path=`)."
    )
    why = (
        "VeOmni builds large models on the meta device (or on rank 0) and lets the parallelizing builder "
        "materialise them: `build_parallelize_model(model, init_device='meta', weights_path=...)` shards "
        "the empty model, then loads the pretrained weights into the shards, or, when `weights_path` is None, "
        "allocates empty storage and runs a random `init_weights()`. A call that passes `init_device` and "
        "leaves out the weights path trains (or, for a frozen DPO reference model, scores) from random "
        "weights while the run looks normal. The check reads every call with an `init_device=` keyword whose "
        "callee (a definition of the tree, or of the file) accepts a weights-path parameter (`*_path` naming "
        "weights, a model or a checkpoint) that the call gives neither by keyword nor by position, and has no "
        "`**kwargs` splat that could carry it."
    )
    bad = (
        Example(
            """
            def build_parallelize_model(model, weights_path=None, **kwargs):
                ...


            def build_reference(model, args):
                return build_parallelize_model(model, init_device=args.train.init_device)
            """,
            path="veomni/trainer/toy_trainer.py",
            title="the frozen reference model is materialised without its checkpoint",
        ),
    )
    good = (
        Example(
            """
            def build_parallelize_model(model, weights_path=None, **kwargs):
                ...


            def build_reference(model, args):
                return build_parallelize_model(
                    model, init_device=args.train.init_device, weights_path=args.model.model_path
                )
            """,
            path="veomni/trainer/toy_trainer.py",
        ),
    )
    fix_safety = "No fix: which path holds the weights is the caller's to name."

    requires = ("init_device=",)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        given = {k.arg for k in node.keywords}
        if "init_device" not in given or any(isinstance(a, ast.Starred) for a in node.args):
            return
        for k in node.keywords:
            if k.arg is None:
                keys = self._dict_keys(k.value)
                if keys is None:
                    return  # a splat that may carry anything
                given |= keys
        sig = self._signature(node)
        if sig is None or sig.opaque:
            return
        for index, name in enumerate(sig.positional):
            if weights_parameter(name) and name not in given and index >= len(node.args):
                break
        else:
            name = next((k for k in sorted(sig.keywords) if weights_parameter(k) and k not in given), "")
            if not name or name in sig.positional:
                return
        self.report(
            node.func,
            f"`{sig.name}` gets `init_device=` but not `{name}`: the model it materialises is never given its "
            "pretrained weights and starts from empty or random parameters",
        )

    def _dict_keys(self, value: ast.expr) -> set[str] | None:
        """The keys a local ``kwargs = {}`` dict can hold: literal keys of its one binding and of its
        ``kwargs["key"] = ...`` stores (None when anything else touches it)."""
        func = self.ctx.function
        if not isinstance(value, ast.Name) or func is None:
            return None
        keys: set[str] = set()
        bound = 0
        for n in own_nodes(func):
            if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == value.id for t in n.targets
            ):
                if len(n.targets) != 1 or not isinstance(n.value, ast.Dict):
                    return None
                for key in n.value.keys:
                    if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                        return None
                    keys.add(key.value)
                bound += 1
            elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == value.id:
                if isinstance(n.ctx, ast.Store):
                    if not isinstance(n.slice, ast.Constant) or not isinstance(n.slice.value, str):
                        return None
                    keys.add(n.slice.value)
            elif (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == value.id
                and n.attr not in ("get", "pop", "items", "keys", "values")
            ):
                return None  # update(), setdefault(), ...
            elif isinstance(n, ast.arg) and n.arg == value.id:
                return None
        return keys if bound == 1 else None

    def _signature(self, call: ast.Call) -> Signature | None:
        func = call.func
        if isinstance(func, ast.Name) and func.id not in self.ctx.imports:
            own = self.ctx.memo.get("npu631-own")
            if own is None:
                own = self.ctx.memo["npu631-own"] = module_signatures(self.ctx.tree.body, arity=False)
            return own.get(func.id)  # type: ignore[no-any-return]
        if not self.ctx.project.root:
            return None
        qual = self.ctx.qualname(func)
        if qual is None or "." not in qual:
            return None
        if qual.startswith("."):
            qual = resolve_relative(self.ctx.source.path, qual)
        index = self.ctx.project.api.index
        module, name = qual.rsplit(".", 1)
        if not index.is_local(qual) or not index.has_module(module):
            return None
        origin = index.origin(module, name) or module
        return index.signatures(origin).get(name)
