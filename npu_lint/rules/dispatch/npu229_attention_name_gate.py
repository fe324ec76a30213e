"""NPU229 attention-name-gate."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import str_value, walk
from npu_lint.rules._handles import ATTENTION_FIELDS
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.layout import is_model_code
from npu_lint.veomni.vendor_map import (
    TRANSFORMERS_ATTENTION_KERNELS,
    is_transformers_attention_kernel,
    is_veomni_attention_name,
    veomni_attention_name,
)

_DIGITS = re.compile(r"\d+")


def _attention_value(node: ast.expr) -> bool:
    """``self.config._attn_implementation`` / ``config.attn_implementation`` / a local ``attn_implementation``."""
    if isinstance(node, ast.Attribute):
        return node.attr in ATTENTION_FIELDS
    return isinstance(node, ast.Name) and node.id in ATTENTION_FIELDS


def _kernel_name(value: str | None) -> bool:
    return is_transformers_attention_kernel(value)


def _maps_to_veomni_name(branch: list[ast.stmt]) -> bool:
    """Whether a branch stores one of VeOmni's own attention names (``self.attn_implementation =
    "veomni_flash_attention_2_with_sp"``): code translating transformers' name, not gating on it."""
    for stmt in branch:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            if is_veomni_attention_name(str_value(stmt.value)):
                return True
    return False


def _gated_names(node: ast.Compare) -> list[str] | None:
    """The transformers kernel names a one-operator test on the attention implementation admits (or excludes),
    when none of the names VeOmni itself runs under is among them; None for any other test."""
    if len(node.ops) != 1:
        return None
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if not _attention_value(left):
        if not (isinstance(op, (ast.Eq, ast.NotEq)) and _attention_value(right)):
            return None
        left, right = right, left
    if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
        name = str_value(right)
        return [name] if name is not None and _kernel_name(name) else None
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        names = [str_value(e) for e in right.elts]
        if not names or any(n is None for n in names):
            return None
        if any(is_veomni_attention_name(n) for n in names):  # the tree's own names are admitted too
            return None
        kernels = [n for n in names if _kernel_name(n)]
        return kernels or None
    return None


class AttentionNameGate(Rule):
    code = "NPU229"
    name = "attention-name-gate"
    summary = (
        "Model code tests the attention implementation against one of transformers' GPU kernel names "
        '(`_attn_implementation == "flash_attention_2"`) to choose a path, so every name VeOmni actually runs '
        "under (`veomni_flash_attention_2_with_sp`, an Ascend run's names) takes the other branch; or a table "
        "of attention names that such gates read skips one member of a numbered family its sibling family has."
    )
    why = (
        "transformers' own forwards test the attention implementation only against `eager` (or `sdpa`): "
        '`if self.config._attn_implementation != "eager": attention_interface = ALL_ATTENTION_FUNCTIONS[...]`, '
        "and a VeOmni spec calls its attention handle unconditionally. VeOmni replaces the transformers names by "
        "its own (`flash_attention_2` becomes `veomni_flash_attention_2_with_sp` when its modeling backend is "
        "used), and an Ascend run selects yet other rows. A branch gated on the literal transformers kernel name "
        '-- the attention handle only when `== "flash_attention_2"`, a fused loss only when the attention is '
        "FA2, a vision tower's kernel path -- is never taken on those runs: the layer silently runs the eager "
        "attention it keeps as the else branch (full attention matrices, no sequence parallelism), or loses the "
        "fused kernel the test guards. Test against `eager`, call the handle, or include the tree's own names."
    )
    bad = (
        Example(
            """
            def toy_attention_forward(self, hidden_states, attention_mask, **kwargs):
                if self.config._attn_implementation == "flash_attention_2":
                    attention_interface = self.veomni_attn
                else:
                    attention_interface = eager_attention_forward
                return attention_interface(self, hidden_states, attention_mask, **kwargs)
            """,
            path="veomni/models/transformers/toy/modeling_attn_gate.py",
            title="only the transformers FA2 name reaches the attention handle",
        ),
        Example(
            """
            def toy_lm_forward(self, hidden_states, labels):
                if self.config._attn_implementation in ("flash_attention_2", "flash_attention_3"):
                    return self.veomni_loss(hidden_states, self.lm_head.weight, labels)
                return self.loss_function(self.lm_head(hidden_states), labels)
            """,
            path="veomni/models/transformers/toy/modeling_attn_gate.py",
            title="the fused loss tied to transformers' attention names",
        ),
        Example(
            """
            VARLEN_ATTENTION_TYPES = (
                "flash_attention_2",
                "flash_attention_3",
                "flash_attention_4",
                "veomni_flash_attention_3_with_sp",
                "veomni_flash_attention_4_with_sp",
            )
            """,
            path="veomni/models/transformers/attention_utils.py",
            title="the table of varlen attention names skips VeOmni's FA2 name",
        ),
    )
    good = (
        Example(
            """
            def toy_attention_forward(self, hidden_states, attention_mask, **kwargs):
                attention_interface = eager_attention_forward
                if self.config._attn_implementation != "eager":
                    attention_interface = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
                if self.config._attn_implementation in ("flash_attention_2", "veomni_flash_attention_2_with_sp"):
                    kwargs["max_seqlen"] = hidden_states.shape[1]
                return attention_interface(self, hidden_states, attention_mask, **kwargs)
            """,
            path="veomni/models/transformers/toy/modeling_attn_gate.py",
        ),
    )
    fix_safety = (
        "No fix: whether the branch should test `eager` or admit the tree's names is the author's choice."
    )
    requires = ("attention", TRANSFORMERS_ATTENTION_KERNELS)
    node_types = (ast.Compare,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test  # the name tables (finish) anywhere; the gates in model code only

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        # gates in model code only: framework code (the arguments' __post_init__, the registry) maps these names
        project = ctx.project
        self.model_code = ctx.source.kind.model_code and is_model_code(
            ctx.source.path, project.root, project.model_packages, project.api.layouts
        )
        if not self.model_code:
            self.node_types = ()

    def finish(self) -> None:
        """A literal table of attention implementation names (a tuple, list or set of strings) that holds a
        numbered family of names for some versions and skips one its sibling family has
        (`flash_attention_2/3/4` with `veomni_flash_attention_3/4_with_sp` only): a gate reading the table
        (`in VARLEN_ATTENTION_TYPES`) sends runs under the skipped name down the other path."""
        for node in walk(self.ctx.tree):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < 4:
                continue
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(names) != len(node.elts) or not all("attention" in n for n in names):
                continue
            families: dict[str, set[str]] = {}
            for name in names:
                numbers = _DIGITS.findall(name)
                if len(numbers) == 1:
                    families.setdefault(_DIGITS.sub("#", name), set()).add(numbers[0])
            for family, versions in sorted(families.items()):
                if len(versions) < 2:
                    continue
                for other, more in sorted(families.items()):
                    missing = sorted(more - versions)
                    if other == family or not missing or not versions < more:
                        continue
                    skipped = family.replace("#", missing[0])
                    self.report(
                        node,
                        f"this table of attention implementations has `{family.replace('#', '<N>')}` for "
                        f"{', '.join(sorted(versions))} but not `{skipped}`, although it lists `{other.replace('#', missing[0])}`: "
                        f"a run under `{skipped}` (VeOmni's name for that kernel) misses whatever the table gates; "
                        "add it",
                    )
                    break

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Compare)
        if self.ctx.function is None:
            return
        names = _gated_names(node)
        if names is None:
            return
        branch = self.ctx.parent
        if isinstance(branch, ast.If) and branch.test is node and _maps_to_veomni_name(branch.body):
            return
        shown = ", ".join(f'"{n}"' for n in names)
        self.report(
            node,
            f"`{ast.unparse(node)}` gates this path on transformers' kernel name {shown}: VeOmni runs attention "
            f"under its own names (`{veomni_attention_name(names[0])}`, and other rows on Ascend), so those runs take the "
            "other branch (the eager path) silently; test against `eager` as transformers does, or admit the "
            "tree's names",
        )
