"""NPU710 trainer-module-path."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.multimodal.npu705_checkpoint_conversion_mapping import _built_attrs, _owner
from npu_lint.veomni.upstream import module_path, upstream_class, upstream_class_method, upstream_class_names

_MODEL_ROOTS = ("model",)  # `<...>.model.<path>`: the trainer's model object


def _types_of(test: ast.AST) -> tuple[str, ...] | None:
    """`<x>.model_type in ("a", "b")` / `<x>.model_type == "a"`: the literal model types."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left = test.left
    if not (
        isinstance(left, ast.Attribute)
        and left.attr == "model_type"
        or isinstance(left, ast.Name)
        and left.id == "model_type"
    ):
        return None
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return (right.value,)
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        values = [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if values and len(values) == len(right.elts):
            return tuple(values)
    return None


def _guard_types(test: ast.AST, flags: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The model types an `if` test restricts its body to (directly, through a local flag, or one operand of an
    `and`)."""
    found = _types_of(test)
    if found is not None:
        return found
    if isinstance(test, ast.Name):
        return flags.get(test.id)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            found = _guard_types(value, flags)
            if found is not None:
                return found
    return None


def _path(node: ast.Attribute) -> list[str] | None:
    """`self.base.model.thinker.audio_tower.proj` -> ["thinker", "audio_tower", "proj"] (after the model root)."""
    parts: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    parts.reverse()
    for i, part in enumerate(parts[:-1]):
        if part in _MODEL_ROOTS and i + 1 < len(parts):
            return parts[i + 1 :]
    return None


def _wrapper(model_type: str) -> tuple[str, str] | None:
    """The upstream module and multimodal wrapper class of a model type (the shortest `...ForConditionalGeneration`
    of `transformers.models.<type>.modeling_<type>`)."""
    module = f"transformers.models.{model_type}.modeling_{model_type}"
    if module_path(module) is None:
        return None
    names = [n for n in upstream_class_names(module) if n.endswith("ForConditionalGeneration")]
    if not names:
        return None
    return module, min(names, key=len)


def _attrs(module: str, cls: str) -> dict[str, str] | None:
    init = upstream_class_method(module, cls, "__init__")
    if init is None:
        return None
    return _built_attrs(module, cls, init, _owner(module, cls, init))


def _missing(module: str, cls: str, path: list[str]) -> tuple[str, str] | None:
    """The first attribute of ``path`` the class tree does not build: (the class lacking it, the attribute)."""
    for attr in path:
        if upstream_class(module, cls) is None:
            return None
        attrs = _attrs(module, cls)
        if not attrs:
            return None
        if attr not in attrs:
            if upstream_class_method(module, cls, attr) is not None:
                return None  # a method or property (own or inherited)
            return cls, attr
        cls = attrs[attr]
    return None


class TrainerModulePath(Rule):
    code = "NPU710"
    name = "trainer-module-path"
    summary = (
        "A trainer names a submodule path (`model.thinker.audio_tower.proj`) for some model types that the "
        "model class of one of those types does not have."
    )
    why = (
        "Trainers freeze and unfreeze towers by attribute path (`freeze_vit`, `freeze_audio_tower`, projector "
        'groups) in branches for named model types (`if model_type in ("qwen2_5_omni", "qwen3_omni_moe")`). '
        "Submodule names differ between models that look alike (Qwen2.5-Omni's audio tower ends in `proj`, "
        "Qwen3-Omni-MoE's in `proj1`/`proj2`), so a path written for one raises `AttributeError` when the other "
        "is trained, or, behind a `getattr` default, silently leaves the intended part frozen. Each path under "
        "a model-type guard is resolved on every named type's multimodal wrapper, read from the transformers "
        "source (what each `__init__` builds, through the class's MRO); a path reached through `getattr(..., "
        "default)` or after an `or` fallback is not reported."
    )
    bad = (
        Example(
            """
            def unfreeze_audio_projector(self, model_type):
                if model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                    self.model.thinker.audio_tower.proj.requires_grad_(True)
            """,
            path="veomni/trainer/omni_trainer.py",
            title="Qwen3-Omni-MoE's audio tower has `proj1`/`proj2`, not `proj`",
        ),
        Example(
            """
            def freeze(self):
                omni = self.model_config.model_type == "qwen3_omni_moe"
                if self.args.freeze_projector and omni:
                    for p in self.base.model.thinker.audio_projector.parameters():
                        p.requires_grad = False
            """,
            path="veomni/trainer/vlm_trainer.py",
            title="through a local flag",
        ),
    )
    good = (
        Example(
            """
            def unfreeze_audio_projector(self, model_type):
                if model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                    tower = self.model.thinker.audio_tower
                    (getattr(tower, "proj1", None) or tower.proj).requires_grad_(True)
                    self.model.thinker.visual.merger.requires_grad_(True)
            """,
            path="veomni/trainer/omni_trainer.py",
        ),
    )
    fix_safety = "No fix: the right submodule of each model is for the author to name."

    requires = ("model_type", ".model.")

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return not ctx.source.kind.test and "/trainer/" in "/" + ctx.source.path.replace("\\", "/")

    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        flags: dict[str, tuple[str, ...]] = {}
        for stmt in _walk(node):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                found = _types_of(stmt.value)
                if found is not None:
                    flags[stmt.targets[0].id] = found
        for stmt in _walk(node):
            if isinstance(stmt, ast.If):
                types = _guard_types(stmt.test, flags)
                if types:
                    for inner in stmt.body:
                        self._check(inner, types)

    def _check(self, stmt: ast.stmt, types: tuple[str, ...]) -> None:
        skip: set[int] = set()
        for node in _walk(stmt):
            if isinstance(node, ast.BoolOp):
                for value in node.values[1:]:
                    skip.update(id(n) for n in _walk(value))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
            ):
                skip.update(id(n) for n in _walk(node))
            elif isinstance(node, ast.Attribute):
                # only the longest chain: its inner attributes are prefixes of it
                cur = node.value
                while isinstance(cur, ast.Attribute):
                    skip.add(id(cur))
                    cur = cur.value
        called = {id(n.func) for n in _walk(stmt) if isinstance(n, ast.Call)}
        for node in _walk(stmt):
            if not isinstance(node, ast.Attribute) or id(node) in skip:
                continue
            path = _path(node)
            if path and id(node) in called:
                path = path[:-1]  # `<module>.requires_grad_(...)`: the method is nn.Module's
            if not path:
                continue
            for model_type in types:
                wrapper = _wrapper(model_type)
                if wrapper is None:
                    continue
                lacking = _missing(wrapper[0], wrapper[1], path)
                if lacking is None:
                    continue
                self.report(
                    node,
                    f"`{'.'.join(path)}` does not exist on `{model_type}`'s model (`{wrapper[1]}`): "
                    f"`{lacking[0]}` builds no `{lacking[1]}` (read from the transformers source), so this "
                    f"branch fails or misses the module when `{model_type}` is trained",
                )
                break
