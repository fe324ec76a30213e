"""NPU729 model-type-group-split."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Example, Rule


def _constants(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """Module-level tuples/lists/sets of string literals (``OMNI_TYPES = ("qwen2_5_omni", "qwen3_omni_moe")``)."""
    out: dict[str, tuple[str, ...]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values = _literals(stmt.value, {})
            if values is not None and len(values) > 1:
                out[stmt.targets[0].id] = values
    return out


def _literals(node: ast.AST, constants: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("set", "frozenset")
    ):
        return _literals(node.args[0], constants) if len(node.args) == 1 else None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return tuple(values) if len(values) == len(node.elts) else None
    return None


def _model_type(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "model_type") or (
        isinstance(node, ast.Name) and node.id == "model_type"
    )


def _tested(test: ast.AST, constants: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The model types a comparison names (``model_type in (...)``, ``== "x"``, ``not in``, ``!=``)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and _model_type(test.left)):
        return None
    op, right = test.ops[0], test.comparators[0]
    if (
        isinstance(op, (ast.Eq, ast.NotEq))
        and isinstance(right, ast.Constant)
        and isinstance(right.value, str)
    ):
        return (right.value,)
    if isinstance(op, (ast.In, ast.NotIn)):
        return _literals(right, constants)
    return None


class ModelTypeGroupSplit(Rule):
    code = "NPU729"
    name = "model-type-group-split"
    summary = (
        "A model-type test names only part of a group of model types that the same file tests together "
        'elsewhere (`model_type == "qwen2_5_omni"` where every other test says `in ("qwen2_5_omni", '
        '"qwen3_omni_moe")`), and no test of the file treats the rest on its own.'
    )
    why = (
        "Trainers, data transforms, builders and checkpoint converters route model families by their "
        "`model_type`: the omni models whose towers sit under `thinker`, the VL models with a `visual` tower, the "
        "MoE models with a router. Where a file tests a group of types together in several places, that group "
        "shares a layout; a test that names only some of them sends the others down the other path (a flat "
        "`visual` lookup that raises, a freeze or a processor step silently skipped) for that one step. A group "
        "counts when two or more tests of the module name exactly it; a test naming a strict part of it is "
        "reported unless it sits inside a test of the whole group (a refinement) or other tests of the module "
        "name the missing types apart from it (per-model handling)."
    )
    bad = (
        Example(
            """
            def freeze(self, model_config, args):
                if model_config.model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                    self.model.disable_talker()
                is_omni = model_config.model_type == "qwen2_5_omni"
                visual = self.model.thinker.visual if is_omni else self.model.visual
                if args.freeze_audio and model_config.model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                    self.model.thinker.audio_tower.requires_grad_(False)
                return visual
            """,
            path="veomni/trainer/toy_trainer.py",
            title="Qwen3-Omni-MoE left out of one test of the omni group",
        ),
    )
    good = (
        Example(
            """
            def freeze(self, model_config, args):
                if model_config.model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                    self.model.disable_talker()
                    if model_config.model_type == "qwen3_omni_moe":
                        self.model.thinker.audio_tower.proj1.requires_grad_(True)
                is_omni = model_config.model_type in ("qwen2_5_omni", "qwen3_omni_moe")
                return self.model.thinker.visual if is_omni else self.model.visual
            """,
            path="veomni/trainer/toy_trainer.py",
        ),
    )
    fix_safety = "No fix: whether the type belongs to the group here is the author's to say."
    requires = ("model_type",)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        constants = _constants(tree)
        tests: list[tuple[ast.Compare, frozenset[str]]] = []
        for node in _walk(tree):
            if isinstance(node, ast.Compare):
                found = _tested(node, constants)
                if found:
                    tests.append((node, frozenset(found)))
        groups: dict[frozenset[str], int] = {}
        for _node, types in tests:
            if len(types) > 1:
                groups[types] = groups.get(types, 0) + 1
        groups = {g: n for g, n in groups.items() if n >= 2}
        if not groups:
            return
        inside = self._inside_group_tests(tree, constants, set(groups))
        for node, types in tests:
            for group in groups:
                if not (types < group) or id(node) in inside:
                    continue
                missing = sorted(group - types)
                others: set[str] = set()
                for other, other_types in tests:
                    if other is not node and other_types < group and not other_types & types:
                        others |= other_types
                if set(missing) <= others:
                    continue  # the module handles the missing types in a test of their own (per-type handling)
                names = ", ".join(f"`{t}`" for t in sorted(group))
                self.report(
                    node,
                    f"this test names only part of the model-type group this module tests together elsewhere "
                    f"({names}, {groups[group]} times): {', '.join(f'`{m}`' for m in missing)} takes the other path "
                    "here; name the whole group, or handle the missing type on its own",
                )
                break

    @staticmethod
    def _inside_group_tests(
        tree: ast.Module, constants: dict[str, tuple[str, ...]], groups: set[frozenset[str]]
    ) -> set[int]:
        """Comparisons inside the body of an ``if`` that tests a whole group (refinements of it)."""
        out: set[int] = set()
        for node in _walk(tree):
            if isinstance(node, ast.If):
                test_nodes = [n for n in _walk(node.test) if isinstance(n, ast.Compare)]
                if any(
                    (found := _tested(c, constants)) is not None
                    and frozenset(found) in groups
                    and not isinstance(c.ops[0], (ast.NotIn, ast.NotEq))
                    for c in test_nodes
                ):
                    for stmt in node.body:
                        out.update(id(n) for n in _walk(stmt) if isinstance(n, ast.Compare))
        return out
