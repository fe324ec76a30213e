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
        "reported unless a test of the whole group dominates it (a refinement: inside its `if`, after it in an "
        "`and`, after a guard `if model_type not in GROUP: return` or an `assert`, through a flag or helper bound "
        "from it), its own types are a group tested together twice, or other tests of the module name the missing "
        "types apart from it (per-model handling)."
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
            if types in groups:
                continue  # a group of its own (a layout a subset of the types shares, tested together twice)
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
        """Comparisons a test of a whole group dominates (refinements of it): the body of an ``if`` (or of a
        conditional expression) on the group, the later operands of an ``and`` after it, and the rest of a block
        after a guard (``if model_type not in GROUP: return``, ``assert model_type in GROUP``); the group test may
        be spelled through a flag bound from it (``is_omni = model_type in GROUP``) or a helper that returns it."""

        def group_compare(node: ast.AST, positive: bool) -> bool:
            if not isinstance(node, ast.Compare):
                return False
            found = _tested(node, constants)
            if found is None or frozenset(found) not in groups:
                return False
            return isinstance(node.ops[0], (ast.NotIn, ast.NotEq)) != positive

        flags: set[str] = set()
        helpers: set[str] = set()
        for node in _walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and group_compare(node.value, True)
            ):
                flags.add(node.targets[0].id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = [
                    b
                    for b in node.body
                    if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))
                ]
                if len(body) == 1 and isinstance(body[0], ast.Return) and group_compare(body[0].value, True):
                    helpers.add(node.name)

        def positive(test: ast.AST) -> bool:
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
                return any(positive(v) for v in test.values)
            if isinstance(test, ast.Name):
                return test.id in flags
            if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
                return test.func.id in helpers
            return group_compare(test, True)

        def negative(test: ast.AST) -> bool:
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                return positive(test.operand)
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
                return any(negative(v) for v in test.values)
            return group_compare(test, False)

        out: set[int] = set()

        def mark(nodes: list[ast.AST]) -> None:
            for stmt in nodes:
                out.update(id(n) for n in _walk(stmt) if isinstance(n, ast.Compare))

        for node in _walk(tree):
            if isinstance(node, (ast.If, ast.IfExp)) and positive(node.test):
                mark(node.body if isinstance(node.body, list) else [node.body])
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
                for k, value in enumerate(node.values):
                    if positive(value):
                        mark(list(node.values[k + 1 :]))
                        break
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for k, stmt in enumerate(block):
                    guard = (isinstance(stmt, ast.Assert) and positive(stmt.test)) or (
                        isinstance(stmt, ast.If)
                        and negative(stmt.test)
                        and bool(stmt.body)
                        and isinstance(stmt.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
                    )
                    if guard:
                        mark(list(block[k + 1 :]))
                        if isinstance(stmt, ast.If):
                            mark(list(stmt.orelse))
        return out
