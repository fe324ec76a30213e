"""NPU715 dummy-skips-submodule."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.astutil import walk as _walk
from npu_lint.core.astutil import walk_pairs
from npu_lint.rules.base import Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _submodules(cls: ast.ClassDef) -> set[str]:
    """``self.<name>`` attributes the class assigns a module-like value to (a call) in its methods."""
    out: set[str] = set()
    for n in _walk(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            for t in n.targets:
                d = _dotted(t)
                if d is not None and d.startswith("self.") and d.count(".") == 1:
                    out.add(d)
    return out


class DummySkipsSubmodule(Rule):
    code = "NPU715"
    name = "dummy-skips-submodule"
    summary = (
        "A text-only dummy pass (`tower.dummy_forward()`, a fake encode) skips a submodule that the real media "
        "path applies to the same tower's output (a projector/aligner): on text-only micro-batches that "
        "submodule gets no gradient."
    )
    why = (
        "Under FSDP2 every rank must produce a gradient for every parameter at every step, or the reduce-scatter "
        "goes out of step and training hangs or errors. Multimodal wrappers therefore run their media towers "
        "on a dummy input when a micro-batch has no media and add the result times zero. The dummy has to go "
        "through the same chain as the real path: if the real path is `self.aligner(self.vision_model(x))` and "
        "the dummy only `self.vision_model.dummy_forward()`, the aligner's parameters are missing from the "
        "graph on text-only ranks while image ranks produce theirs. The check compares, in one function, the "
        "submodules of the class (attributes it assigns a constructed module to) that wrap a tower's real call, "
        "directly or through a local, with those that wrap the same tower's dummy call."
    )
    bad = (
        Example(
            """
            class ToyVLM:
                def __init__(self, config):
                    self.siglip = build_tower(config)
                    self.bridge = build_projector(config)
                    self.llm = build_llm(config)

                def forward(self, input_ids, pixels=None, mask=None):
                    embeds = self.llm.embed(input_ids)
                    if pixels is not None:
                        feats = self.siglip(pixels)
                        picture_embeds = self.bridge(feats)
                        embeds = embeds.masked_scatter(mask, picture_embeds)
                    elif self.training:
                        fake = self.siglip.dummy_forward()
                        embeds = embeds + fake.sum() * 0.0
                    return self.llm(inputs_embeds=embeds)
            """,
            path="veomni/models/transformers/toy_vlm/modeling_toy_vlm.py",
            title="the projector is applied through a local on the real path, skipped on the dummy one",
        ),
    )
    good = (
        Example(
            """
            class ToyVLM:
                def __init__(self, config):
                    self.siglip = build_tower(config)
                    self.bridge = build_projector(config)
                    self.llm = build_llm(config)

                def forward(self, input_ids, pixels=None, mask=None):
                    embeds = self.llm.embed(input_ids)
                    if pixels is not None:
                        embeds = embeds.masked_scatter(mask, self.bridge(self.siglip(pixels)))
                    elif self.training:
                        fake_feats = self.siglip.dummy_forward()
                        embeds = embeds + self.bridge(fake_feats).sum() * 0.0
                    return self.llm(inputs_embeds=embeds)
            """,
            path="veomni/models/transformers/toy_vlm/modeling_toy_vlm.py",
            title="the dummy goes through the projector too",
        ),
    )
    fix_safety = "No fix: the dummy's output must be fed to the skipped submodule by hand."
    requires = ("dummy",)
    node_types = (ast.ClassDef,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        subs: set[str] | None = None
        for func in node.body:
            if not isinstance(func, _FUNCS):
                continue
            dummies = [
                n
                for n in _walk(func)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and "dummy" in n.func.attr
                and (_dotted(n.func.value) or "").startswith("self.")
            ]
            if not dummies:
                continue
            if subs is None:
                subs = _submodules(node)
            parents = dict(walk_pairs(func))
            binds = self._binds(func)
            for dummy in dummies:
                tower = _dotted(dummy.func.value) or ""  # type: ignore[union-attr]
                real = [
                    n
                    for n in _walk(func)
                    if isinstance(n, ast.Call)
                    and n is not dummy
                    and "dummy" not in (_dotted(n.func) or "")
                    and ((_dotted(n.func) or "") == tower or (_dotted(n.func) or "").startswith(tower + "."))
                ]
                if not real:
                    continue
                want: dict[str, int] = {}
                for r in real:
                    for w in self._wrappers(r, parents, binds, subs - {tower}):
                        want.setdefault(w, r.lineno)
                have = set(self._wrappers(dummy, parents, binds, subs - {tower}))
                missing = sorted(w for w in want if w not in have)
                if missing:
                    self.report(
                        dummy,
                        f"the dummy pass `{ast.unparse(dummy.func)}()` skips `{missing[0]}`, which the real path "
                        f"applies to `{tower}`'s output at line {want[missing[0]]}: on micro-batches without media "
                        f"`{missing[0]}` gets no gradient while the other ranks' does (FSDP2 goes out of step); "
                        "feed the dummy output through it too",
                    )

    @staticmethod
    def _binds(func: ast.AST) -> dict[str, list[ast.Assign]]:
        out: dict[str, list[ast.Assign]] = {"": [func]}  # type: ignore[list-item]  # the function itself
        for n in _walk(func):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for name in _walk(t):
                        if isinstance(name, ast.Name):
                            out.setdefault(name.id, []).append(n)
        return out

    @staticmethod
    def _wrappers(
        call: ast.Call, parents: dict[ast.AST, ast.AST], binds: dict[str, list[ast.Assign]], subs: set[str]
    ) -> list[str]:
        """Submodules applied to ``call``'s result before it meets other data: enclosing calls of submodules
        and plain functions, method chains on it, and the same on locals bound from it (a few hops). The walk
        stops at arithmetic and at a method of another object (`embeds.masked_scatter(mask, x)`)."""
        out: list[str] = []
        frontier: list[ast.AST] = [call]
        for _ in range(4):
            nxt: list[ast.AST] = []
            for expr in frontier:
                node = expr
                while node in parents:
                    parent = parents[node]
                    if isinstance(parent, ast.Call):
                        if node is parent.func:
                            node = parent  # `x.mean()`: the method's call
                            continue
                        d = _dotted(parent.func) or ""
                        head = ".".join(d.split(".")[:2])
                        if head in subs:
                            out.append(head)
                        elif not isinstance(parent.func, ast.Name):
                            break  # an argument of another object's method
                    elif isinstance(parent, ast.Assign):
                        for t in parent.targets:
                            for name in _walk(t):
                                if isinstance(name, ast.Name):
                                    nxt.extend(_walk_uses(binds, name.id, parent))
                        break
                    elif isinstance(parent, (ast.BinOp, ast.stmt)):
                        break
                    elif not isinstance(parent, (ast.Attribute, ast.Subscript, ast.keyword, ast.Starred)):
                        break
                    node = parent
            frontier = nxt
        return out


def _walk_uses(binds: dict[str, list[ast.Assign]], name: str, origin: ast.Assign) -> list[ast.AST]:
    """Loads of ``name`` after ``origin`` in the function (the next hop of a chain of locals)."""
    func = binds.get("", [origin])[0]
    return [
        n
        for n in _walk(func)
        if isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, ast.Load)
        and n.lineno > origin.lineno
    ]
