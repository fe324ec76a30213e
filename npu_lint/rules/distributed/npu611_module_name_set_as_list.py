"""NPU611 module-name-set-as-list."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule

# PreTrainedModel attributes that hold module or key names; transformers >= 5 turns each into a set when the model
# is built (``post_init`` merges the submodels' entries into it), whatever the class declared
_SET_ATTRS = frozenset(
    {
        "_no_split_modules",
        "_keep_in_fp32_modules",
        "_keep_in_fp32_modules_strict",
        "_skip_keys_device_placement",
        "_keys_to_ignore_on_load_unexpected",
        "_keys_to_ignore_on_load_missing",
        "_keys_to_ignore_on_save",
    }
)
_NAMES = "|".join(sorted(_SET_ATTRS))
# the cheap text pre-check: an instance's attribute (``model._no_split_modules``, ``getattr(model, "_no_...``), not
# a class's declaration (``_no_split_modules = [...]``, ``BaseModel._no_split_modules``)
_INSTANCE_READ = re.compile(rf"((?<![\w.])[a-z_][\w.]*\.|getattr\([^,()]*, *[\"'])({_NAMES})\b")
_NAME_AT = re.compile(rf"(?=(?:{_NAMES})\b)")  # every place one of the names starts (overlaps included)
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz_")


def _reads_instance_attr(text: str) -> bool:
    """Whether ``_INSTANCE_READ`` finds a match in ``text``, read backwards from each name instead of trying
    the pattern at every word (8x faster on veomni's files; tests/rules/test_precheck_equivalence.py)."""
    if not any(name in text for name in _SET_ATTRS):
        return False
    for m in _NAME_AT.finditer(text):
        q = m.start()
        before = text[q - 1] if q else ""
        if before == ".":  # `<lowercase or _>[\w.]*.` : the run of word characters and dots before the name
            p = q - 1
            while p and (text[p - 1] in "._" or text[p - 1].isalnum()):  # str.isalnum() or "_" is re's \w
                p -= 1
            if p <= q - 2 and text[p] in _LOWER:
                return True
        elif before in ("'", '"'):  # `getattr([^,()]*, *` and the quote
            j = q - 2
            while j >= 0 and text[j] == " ":
                j -= 1
            if j < 0 or text[j] != ",":
                continue
            k = j
            while k and text[k - 1] not in ",()":
                k -= 1
            if k >= 8 and text[k - 1] == "(" and text.startswith("getattr", k - 8):
                return True
    return False


_SEQUENCE_METHODS = frozenset({"append", "extend", "insert", "index", "sort", "reverse"})


def _outcomes(expr: ast.AST) -> list[ast.AST]:
    if isinstance(expr, ast.IfExp):
        return [*_outcomes(expr.body), *_outcomes(expr.orelse)]
    if isinstance(expr, ast.BoolOp):
        return [o for v in expr.values for o in _outcomes(v)]
    return [expr]


def _instance_read(expr: ast.AST) -> str | None:
    """``getattr(model, "_no_split_modules", ...)`` / ``model._no_split_modules`` of an instance (not a class named
    in CamelCase, whose declared value is still the list it wrote): the attribute's name, or None."""
    owner: ast.AST | None = None
    attr = ""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr":
        if (
            len(expr.args) >= 2
            and isinstance(expr.args[1], ast.Constant)
            and isinstance(expr.args[1].value, str)
        ):
            owner, attr = expr.args[0], expr.args[1].value
    elif isinstance(expr, ast.Attribute) and isinstance(expr.ctx, ast.Load):
        owner, attr = expr.value, expr.attr
    if attr not in _SET_ATTRS or owner is None:
        return None
    if isinstance(owner, ast.Name) and (owner.id == "cls" or owner.id[:1].isupper()):
        return None
    return attr


class ModuleNameSetAsList(Rule):
    code = "NPU611"
    name = "module-name-set-as-list"
    summary = (
        "A built model's `_no_split_modules` (or `_keep_in_fp32_modules`, `_skip_keys_device_placement`...) is "
        "combined as a list (`+`, `.extend`, `.append`, indexing): transformers >= 5 makes it a set."
    )
    why = (
        "transformers 5 gathers these name collections when a model is built: `post_init` turns the class's "
        "list into a set and merges every submodel's entries into it. Code written for transformers 4 that "
        "concatenates the model's `_no_split_modules` with extra module names (`getattr(model, "
        '"_no_split_modules", []) + basic_modules`), appends to it or indexes it raises TypeError (or '
        "AttributeError) on the built model, so FSDP2 wrapping (whose units come from these names) or "
        "fp32-module selection fails before the first step. Combine with set operations (`set(names) | "
        "set(extra)`) or convert first (`list(...)`). A class's own declaration (`Cls._no_split_modules + "
        "[...]`) is still the list it wrote and is not reported."
    )
    bad = (
        Example(
            """
            def fsdp_units(model, extra_modules=None):
                names = getattr(model, "_no_split_modules", None) or []
                return names + list(extra_modules or [])
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="concatenation through a local",
        ),
        Example(
            """
            def keep_fp32(model, always):
                kept = model._keep_in_fp32_modules
                kept.extend(always)
                return kept


            def first_block(model):
                return (getattr(model.language_model, "_no_split_modules") or ["Block"])[0]
            """,
            path="veomni/trainer/toy_setup.py",
            title="extended in place; indexed",
        ),
    )
    good = (
        Example(
            """
            class ToyPreTrainedModel:
                _no_split_modules = ["ToyBlock"]


            class ToyVLModel(ToyPreTrainedModel):
                _no_split_modules = ToyPreTrainedModel._no_split_modules + ["ToyVisionBlock"]


            def fsdp_units(model, extra_modules=None):
                names = set(getattr(model, "_no_split_modules", None) or [])
                return names | set(extra_modules or []) | set(list(model._skip_keys_device_placement) + ["cache"])
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="set union; a class's own declaration; converted first",
        ),
    )
    fix_safety = "No fix: whether the result should stay a set or be ordered is the caller's decision."
    requires = (_reads_instance_attr,)
    node_types = (ast.BinOp, ast.AugAssign, ast.Call, ast.Subscript)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._locals: dict[int, dict[str, str]] = {}

    def _local_reads(self) -> dict[str, str]:
        """Names bound (once) in the current function to such a read."""
        func = self.ctx.function
        if func is None:
            return {}
        cached = self._locals.get(id(func))
        if cached is None:
            cached = {}
            counts: dict[str, int] = {}
            for node in _walk(func):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    name = node.targets[0].id
                    counts[name] = counts.get(name, 0) + 1
                    read = next((r for r in map(_instance_read, _outcomes(node.value)) if r), None)
                    if read:
                        cached[name] = read
            cached = {k: v for k, v in cached.items() if counts.get(k) == 1}
            self._locals[id(func)] = cached
        return cached

    def _set_valued(self, expr: ast.AST) -> str | None:
        for outcome in _outcomes(expr):
            read = _instance_read(outcome)
            if read:
                return read
            if isinstance(outcome, ast.Name):
                read = self._local_reads().get(outcome.id)
                if read:
                    return read
        return None

    def visit(self, node: ast.AST) -> None:
        func = self.ctx.function
        if func is not None and getattr(func, "name", "") == "__init__":
            return  # before post_init the instance still sees the class's declared list
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, ast.Add):
                return
            read = self._set_valued(node.left) or self._set_valued(node.right)
            what = "concatenated with `+`"
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.op, ast.Add):
                return
            read = self._set_valued(node.target)
            what = "extended with `+=`"
        elif isinstance(node, ast.Call):
            callee = node.func
            if not isinstance(callee, ast.Attribute) or callee.attr not in _SEQUENCE_METHODS:
                return
            read = self._set_valued(callee.value)
            what = f"used as a list (`.{callee.attr}()`)"
        else:
            assert isinstance(node, ast.Subscript)
            if not isinstance(node.ctx, ast.Load) or isinstance(node.slice, ast.Slice):
                read = None
            else:
                read = self._set_valued(node.value)
            what = "indexed"
            if read is None and isinstance(node.slice, ast.Slice):
                read = self._set_valued(node.value)
                what = "sliced"
        if read is None:
            return
        self.report(
            node,
            f"the model's `{read}` is {what}, but transformers >= 5 makes it a set when the model is built "
            "(`post_init` merges the submodels' names into it): this raises there; combine with set operations "
            "(`set(names) | set(extra)`) or convert it first",
        )
