"""Helpers shared by the multimodal rules (private to the family)."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, scoped_memo, walk_pairs
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Context, Rule
from npu_lint.veomni.upstream import PatchedMethod, patched_methods, upstream_class_method

MEDIA = re.compile(
    r"^(pixel_values\w*|image_\w+|video_\w+|audio_\w+|\w*token_type_ids|input_features|feature_attention_mask"
    r"|second_per_grid_ts|\w*_grid_thw)$"
)
TOWERS = ("visual", "vision_tower", "audio_tower", "vision_model", "audio_model")
WRAPPERS = ("ForConditionalGeneration", "Model")


BACK_WORDS = ("slice", "split", "narrow", "chunk", "scatter_seq")  # calls that cut a gathered sequence back


def gathers(value: ast.AST) -> bool:
    """Whether ``value`` all-gathers something (`gather_outputs(x, ...)`, `dist.all_gather(...)`), not a call
    that scatters or cuts back."""
    for node in _walk(value):
        if isinstance(node, ast.Call):
            name = call_name(node).lower()
            if "gather" in name and "scatter" not in name and not any(w in name for w in BACK_WORDS):
                return True
    return False


def patched_wrappers(ctx: Context) -> list[PatchedMethod]:
    """Patched ``forward`` methods of multimodal wrapper classes (``...ForConditionalGeneration``, ``...Model``)."""
    found = ctx.memo.get("mm_patched")
    if found is None:
        text = ctx.source.text
        if "forward" not in text or ("Model" not in text and "ForConditionalGeneration" not in text):
            found = []
        else:
            found = [
                p
                for p in patched_methods(ctx.tree, text, "forward", WRAPPERS, path=ctx.source.path)
                if not p.cls.endswith("TextModel")
            ]
        ctx.memo["mm_patched"] = found
    return found  # type: ignore[return-value]


def params_of(func: ast.FunctionDef) -> list[str]:
    args = func.args
    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


def body_names(func: ast.FunctionDef) -> set[str]:
    return {n.id for stmt in func.body for n in _walk(stmt) if isinstance(n, ast.Name)}


def forwards_kwargs(func: ast.FunctionDef) -> bool:
    """The function takes ``**kwargs`` and passes it on to some call."""
    if func.args.kwarg is None:
        return False
    name = func.args.kwarg.arg
    for node in _walk(func):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == name:
                    return True
    return False


def upstream_towers(patched: PatchedMethod) -> list[str]:
    """Modality towers the upstream class builds in ``__init__`` (``self.visual = ...``)."""
    init = upstream_class_method(patched.module, patched.cls, "__init__")
    if init is None:
        return []
    out = []
    for node in _walk(init):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr in TOWERS
                    and t.attr not in out
                ):
                    out.append(t.attr)
    return out


class WrapperRule(Rule):
    node_types = ()

    def finish(self) -> None:
        for patched in patched_wrappers(self.ctx):
            self.check(patched)

    def check(self, patched: PatchedMethod) -> None:  # pragma: no cover - interface
        pass


def def_span(ctx: Context, func: ast.FunctionDef) -> tuple[int, int, int, int]:
    text = ctx.source.line_text(
        func.lineno
    )  # the line `ast` numbers (str.splitlines also breaks at form feeds)
    col = max(text.find("def "), 0)
    return func.lineno, col, func.lineno, col + 4 + len(func.name)


def _parents(func: ast.AST) -> dict[ast.AST, ast.AST]:
    """Child -> parent map of a function (kept for the file: rules ask about several parameters in a row)."""
    memo = scoped_memo("multimodal.parents")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    parents: dict[ast.AST, ast.AST] = dict(walk_pairs(func))
    memo[id(func)] = (func, parents)
    return parents


def name_nodes(func: ast.AST) -> dict[str, list[ast.Name]]:
    """Every ``Name`` of a function by identifier (kept for the file)."""
    memo = scoped_memo("multimodal.names")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    out: dict[str, list[ast.Name]] = {}
    for node in _walk(func):
        if isinstance(node, ast.Name):
            out.setdefault(node.id, []).append(node)
    memo[id(func)] = (func, out)
    return out


def passed_on(func: ast.FunctionDef, name: str, depth: int = 0) -> bool:
    """Whether the parameter ``name`` reaches a call argument, a returned value or a container (directly, or
    through a local it is assigned to); a name only tested (``if x is not None``) is not passed on."""
    parents = _parents(func)
    for node in name_nodes(func).get(name, []):
        if not isinstance(node.ctx, ast.Load):
            continue
        child: ast.AST = node
        parent = parents.get(child)
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.Call) and child is not parent.func:
                return True
            if isinstance(parent, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
                return True
            child, parent = parent, parents.get(parent)
        if isinstance(parent, ast.Return) or isinstance(parent, ast.Expr) and isinstance(child, ast.Yield):
            return True
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and depth < 2:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for target in targets:
                for t in _walk(target):
                    if isinstance(t, ast.Name) and t.id != name and passed_on(func, t.id, depth + 1):
                        return True
                    if isinstance(t, (ast.Attribute, ast.Subscript)):
                        return True  # stored on an object or into a mapping
    return False


def overwritten_before_read(func: ast.FunctionDef, name: str) -> ast.AST | None:
    """The assignment that overwrites parameter ``name`` before any statement reads it (None: read first)."""
    first_load: tuple[int, int] | None = None
    first_store: tuple[int, int, ast.AST] | None = None
    for node in name_nodes(func).get(name, []):
        key = (node.lineno, node.col_offset)
        if isinstance(node.ctx, ast.Load):
            if first_load is None or key < first_load:
                first_load = key
        elif first_store is None or key < first_store[:2]:
            first_store = (*key, node)
    if first_store is None:
        return None
    if first_load is not None and first_load[0] <= first_store[0]:
        return None  # read on an earlier line, or on the same line (`x = f(x)`)
    return first_store[2]
