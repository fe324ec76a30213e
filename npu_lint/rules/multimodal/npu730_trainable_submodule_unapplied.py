"""NPU730 trainable-submodule-unapplied."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import resolve_relative
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules._calls import _index, _resolve_dotted
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.patchgen import load_file

# what a module attribute may be the receiver of without being applied to data
_BOOKKEEPING = frozenset(
    {
        "requires_grad_",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "train",
        "eval",
        "to",
        "apply",
        "state_dict",
        "load_state_dict",
        "modules",
        "named_modules",
        "children",
        "zero_grad",
        "half",
        "float",
        "bfloat16",
        "cuda",
        "cpu",
        "register_forward_hook",
        "register_forward_pre_hook",
    }
)


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _built(init: ast.FunctionDef) -> dict[str, ast.Assign]:
    """``self.x = Something(...)``: attributes ``__init__`` builds from a call (a submodule)."""
    out: dict[str, ast.Assign] = {}
    for node in _walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in node.targets:
                name = _self_attr(target)
                if name is not None:
                    out.setdefault(name, node)
    return out


def _trained(node: ast.AST) -> str | None:
    """The attribute ``self.x.requires_grad_(True)`` / ``self.x.requires_grad_()`` makes trainable."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "requires_grad_"
        and not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False)
    ):
        return _self_attr(node.func.value)
    if (  # `for p in self.x.parameters(): p.requires_grad = True`
        isinstance(node, ast.For)
        and isinstance(node.iter, ast.Call)
        and isinstance(node.iter.func, ast.Attribute)
        and node.iter.func.attr == "parameters"
        and any(
            isinstance(a, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in a.targets)
            and isinstance(a.value, ast.Constant)
            and a.value.value is True
            for a in node.body
        )
    ):
        return _self_attr(node.iter.func.value)
    return None


def _abstract(cls: ast.ClassDef) -> bool:
    """A class with an ``@abstractmethod`` or a method whose body only raises ``NotImplementedError``."""
    for f in cls.body:
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(
            (getattr(d, "attr", None) or getattr(d, "id", None)) == "abstractmethod" for d in f.decorator_list
        ):
            return True
        body = [s for s in f.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Raise):
            exc = body[0].exc
            name = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(name, ast.Name) and name.id == "NotImplementedError":
                return True
    return False


def _called_through_others(tree: ast.Module) -> set[str]:
    """Attributes the file calls through another object (``self.vision_tower.projector(x)``,
    ``model.projector(x)``): an owner or a helper applies them."""
    out: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ("forward", "__call__") and isinstance(func.value, ast.Attribute):
                func = func.value
            if not (isinstance(func.value, ast.Name) and func.value.id == "self"):
                out.add(func.attr)
    return out


class TrainableSubmoduleUnapplied(Rule):
    code = "NPU730"
    name = "trainable-submodule-unapplied"
    summary = (
        "A class builds a submodule in `__init__` and makes it trainable (`self.projector.requires_grad_(True)`), "
        "but no method of the class (or of a subclass in the file) ever applies it to data."
    )
    why = (
        "Encoders and towers of a multimodal model (a seed-omni encoder's `projector`, an aligner, a merger) are "
        "built in `__init__` and unfrozen by a `set_*_trainable` method, and the forward path (`lm_encode`, "
        "its dummy twin, `forward`) applies them. When the path stops calling one, its features keep the tower's "
        "width (a shape mismatch with the language model's hidden size, or silently the wrong space when the "
        "widths agree) and the parameters the trainer unfroze get no gradient: FSDP/DDP then report unused "
        "parameters, or the optimizer steps a module that never trains. A submodule the class builds itself, "
        "makes trainable, and never calls, passes on, iterates or returns in any method (its own or a subclass's "
        "in the same file) is reported; a submodule only a parent class or an outside caller applies is not built "
        "by the class and is not judged, nor one the tree's parent class applies, one an owner in the file calls "
        "(`self.tower.projector(x)`), nor an abstract base's (its path lives in subclasses)."
    )
    bad = (
        Example(
            """
            from torch import nn


            class ToyVisionEncoder(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.merger = nn.Linear(config.hidden_size, config.out_size)
                    self.projector = nn.Linear(config.out_size, config.output_size)

                def set_projector_trainable_only(self):
                    self.requires_grad_(False)
                    self.projector.requires_grad_(True)

                def lm_encode(self, features):
                    return self.merger(features)
            """,
            path="veomni/models/seed_omni/encoder/toy_vision/modeling_toy_vision.py",
            title="the projector made trainable and never applied",
        ),
    )
    good = (
        Example(
            """
            from torch import nn


            class ToyVisionEncoder(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.merger = nn.Linear(config.hidden_size, config.out_size)
                    self.projector = nn.Linear(config.out_size, config.output_size)

                def set_projector_trainable_only(self):
                    self.requires_grad_(False)
                    self.projector.requires_grad_(True)

                def lm_encode(self, features):
                    return self.projector(self.merger(features))
            """,
            path="veomni/models/seed_omni/encoder/toy_vision/modeling_toy_vision.py",
        ),
    )
    fix_safety = "No fix: where the submodule belongs in the forward path is the author's to say."
    requires = ("requires_grad_",)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return not ctx.source.kind.test

    def finish(self) -> None:
        classes = [c for c in _walk(self.ctx.tree) if isinstance(c, ast.ClassDef)]
        called_elsewhere = _called_through_others(self.ctx.tree)
        for cls in classes:
            init = next(
                (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None
            )
            if init is None or _abstract(cls):
                continue  # an abstract base: its forward path lives in subclasses (other files, perhaps)
            built = _built(init)
            if not built:
                continue
            family = [cls] + [
                c
                for c in classes
                if c is not cls and any(isinstance(b, ast.Name) and b.id == cls.name for b in c.bases)
            ]
            trained: set[str] = set()
            applied: set[str] = set(called_elsewhere) | self._parents_apply(cls)
            dynamic = False
            for member in family:
                for node in _walk(member):
                    name = _trained(node)
                    if name is not None:
                        trained.add(name)
                    applied |= self._applied(node)
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Name)
                        and node.func.id in ("getattr", "setattr", "hasattr")
                        and len(node.args) >= 2
                    ):
                        if isinstance(node.args[1], ast.Constant):
                            applied.add(str(node.args[1].value))  # reached by name: not followed
                        elif isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
                            dynamic = (
                                True  # `getattr(self, f"{kind}_projector")`: any attribute may be reached
                            )
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("get_submodule", "get_parameter")
                        and node.args
                        and isinstance(node.args[0], ast.Constant)
                    ):
                        applied.add(str(node.args[0].value).split(".")[0])
                    if (
                        isinstance(node, ast.Subscript)
                        and _self_attr(node.value) in ("_modules", "_parameters")
                        and isinstance(node.slice, ast.Constant)
                    ):
                        applied.add(str(node.slice.value))  # `self._modules["projector"]`
            if dynamic:
                continue
            for name in sorted(trained - applied):
                if name in built:
                    self.report(
                        built[name],
                        f"`self.{name}` is built here and made trainable, but no method of `{cls.name}` applies it: "
                        "the forward path skips it (its features keep the previous width) and the unfrozen "
                        f"parameters get no gradient; call `self.{name}(...)` where the path used to",
                    )

    def _parents_apply(self, cls: ast.ClassDef) -> set[str]:
        """What the tree's direct parent classes of ``cls`` (resolved through the shared resolver) apply: a
        parent's ``forward`` may apply the submodule a subclass rebuilds."""
        out: set[str] = set()
        own = {c.name: c for c in _walk(self.ctx.tree) if isinstance(c, ast.ClassDef)}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in own and own[base.id] is not cls:
                for node in _walk(own[base.id]):  # a parent in the same file
                    out |= self._applied(node)
        index = _index(self.ctx)
        if index is None:
            return out
        for base in cls.bases:
            qual = self.ctx.qualname(base)
            if not qual or "." not in qual:
                continue
            if qual.startswith("."):
                qual = resolve_relative(self.ctx.source.path, qual)
            resolved = _resolve_dotted(index, qual)
            if resolved is None or resolved[1].kind != "class":
                continue
            located = index.module_path(resolved[0])
            parsed = load_file(str(located[0])) if located else None
            if parsed is None or parsed.tree is None:
                continue
            for stmt in parsed.tree.body:
                if isinstance(stmt, ast.ClassDef) and stmt.name == resolved[1].name:
                    for node in _walk(stmt):
                        out |= self._applied(node)
        return out

    @staticmethod
    def _applied(node: ast.AST) -> set[str]:
        """Attributes ``node`` uses other than as the receiver of bookkeeping (``self.x(...)``, ``f(self.x)``,
        ``for m in self.x``, ``return self.x``, ``self.x.forward(...)``)."""
        out: set[str] = set()
        for child in ast.iter_child_nodes(node):
            name = _self_attr(child)
            if name is None or not isinstance(child.ctx, ast.Load):  # type: ignore[attr-defined]
                continue
            if isinstance(node, ast.Attribute) and node.attr in _BOOKKEEPING:
                continue  # ``self.x.requires_grad_``: bookkeeping
            if isinstance(node, ast.Assign) and child in node.targets:
                continue
            out.add(name)
        return out
