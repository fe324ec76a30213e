"""Within-function data flow of media tensors (read statically, never imported).

A multimodal forward (or a helper it calls) receives modality inputs (pixels, audio features, a medium's
placeholder mask or positions) and media features (`visual_embeds`, `deepstack_image_embeds`, `audio_features`);
the contracts the multimodal rules hold it to are about where those go: into a tower, into `**kwargs` handed to the
wrapped model, into a dummy forward, and whether each result reaches the text path (`hidden_states`,
`inputs_embeds`) on every rank. This module answers those questions for one function:

- `media_inputs(func)`: the parameters that carry a medium, with their medium and role (input, layout, feature);
- `derived(stmts, sources)`: the local names computed from ``sources`` (a name-level, flow-insensitive closure
  over the assignments of ``stmts``: enough for the straight-line bodies of these methods);
- `reaches(stmts, sources, expr)`: whether ``expr`` reads anything derived from ``sources``;
- `no_media_exits(func)`: the early returns a function takes when a medium is absent (`if <mask> is None:
  ... return hidden_states`) together with the media features that path leaves out of its result;
- `kwargs_spread(call, name)`: whether a call spreads the function's `**kwargs`.

Media words follow VeOmni's and transformers' spellings (`pixel_values*`, `image_*`, `video_*`, `audio_*`,
`visual_*`, `vision_*`, `deepstack_*`, `input_features`); the roles are read from the rest of the name."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from npu_lint.core.astutil import none_tested

# The method a VeOmni tower runs on a fake input on the ranks without its medium (FSDP needs every rank to run
# every tower), and the word its helpers are spelled with (`lm_dummy_encode`, `run_dummy`).
DUMMY_FORWARD = "dummy_forward"


def is_dummy_callee(name: str) -> bool:
    """A tower method or helper that runs the fake-input pass (`dummy_forward`, `lm_dummy_encode`)."""
    return "dummy" in name


_MEDIUM = (
    ("video", re.compile(r"(^|_)(video|videos|vid)(_|$)|pixel_values_videos")),
    ("audio", re.compile(r"(^|_)(audio|audios|speech)(_|$)|^input_features$|^feature_attention_mask$")),
    ("image", re.compile(r"(^|_)(image|images|img|visual|vision|vit)(_|$)|^pixel_values$")),
    ("side", re.compile(r"(^|_)deepstack(_|$)")),
)
_FEATURE_WORDS = ("embeds", "embed", "features", "feature", "feats", "outputs")
_LAYOUT_WORDS = (
    "mask",
    "masks",
    "pos",
    "position",
    "positions",
    "grid",
    "index",
    "indices",
    "lengths",
    "lens",
)
TEXT_STREAMS = ("hidden_states", "inputs_embeds", "hidden", "embeds", "x")


def medium_of(name: str) -> str | None:
    """The medium a name carries (`visual_pos_masks` -> image, `deepstack_visual_embeds` -> side)."""
    low = name.lower()
    if re.search(r"(^|_)deepstack(_|$)", low):
        return "side"
    for medium, pattern in _MEDIUM:
        if pattern.search(low):
            return medium
    return None


def role_of(name: str) -> str | None:
    """`feature` (embeddings or outputs of a tower), `layout` (a mask, positions, a grid) or `input` (pixels, raw
    audio features) for a media name; None for a name that carries no medium."""
    if medium_of(name) is None:
        return None
    parts = set(name.lower().split("_"))
    if name in ("input_features",) or name.startswith("pixel_values"):
        return "input"
    if parts & set(_LAYOUT_WORDS):
        return "layout"
    if parts & set(_FEATURE_WORDS) or "deepstack" in parts:
        return "feature"
    return None


@dataclass(frozen=True)
class MediaInput:
    name: str
    medium: str
    role: str | None


def params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = func.args
    return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]


def media_inputs(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[MediaInput]:
    """The parameters of ``func`` that carry a medium."""
    out = []
    for name in params(func):
        medium = medium_of(name)
        if medium is not None:
            out.append(MediaInput(name, medium, role_of(name)))
    return out


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _assignments(stmts: list[ast.stmt]) -> list[tuple[set[str], ast.AST]]:
    """(names stored, value read) for every assignment in ``stmts`` at any block depth (nested scopes skipped);
    a method call on a name (`x.append(v)`, `x.update(v)`) stores into that name."""
    out: list[tuple[set[str], ast.AST]] = []
    todo: list[ast.AST] = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            out.append((set().union(*(_stores(t) for t in node.targets)), node.value))
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    out.append(({t.value.id}, node.value))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            base = node.target
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                out.append(({base.id}, node.value))
        elif isinstance(node, ast.NamedExpr):
            out.append(({node.target.id}, node.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.args
        ):
            out.append(({node.func.value.id}, ast.Tuple(elts=list(node.args), ctx=ast.Load())))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            out.append((_stores(node.target), node.iter))
        todo.extend(ast.iter_child_nodes(node))
    return out


def derived(stmts: list[ast.stmt], sources: set[str]) -> set[str]:
    """``sources`` and every local name computed from them in ``stmts`` (to a fixpoint)."""
    names = set(sources)
    pairs = _assignments(stmts)
    changed = True
    while changed:
        changed = False
        for stored, value in pairs:
            if stored - names and _loads(value) & names:
                names |= stored
                changed = True
    return names


def reaches(stmts: list[ast.stmt], sources: set[str], expr: ast.AST) -> bool:
    """Whether ``expr`` reads a name derived from ``sources`` in ``stmts``."""
    return bool(_loads(expr) & derived(stmts, sources))


def kwargs_spread(call: ast.Call, name: str) -> bool:
    return any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == name for k in call.keywords)


def _absent_test(test: ast.AST) -> str | None:
    """The name an `if <name> is None:` (or `if not <name>:`) test finds absent."""
    name = none_tested(test)
    if name is not None:
        return name
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return test.operand.id
    return None


@dataclass(frozen=True)
class NoMediaExit:
    """An early return taken when a medium's layout is absent, whose result leaves out a media feature that the
    rest of the function adds to the text stream."""

    test: ast.If
    ret: ast.Return
    absent: str  # the layout parameter found absent (`visual_pos_masks`)
    feature: str  # the media feature the early return drops (`visual_embeds`)
    stream: str  # the text stream it returns (`hidden_states`)
    computed: bool  # the feature is read on that path (a zero term computed) but does not reach the result


def no_media_exits(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[NoMediaExit]:
    """Early returns of ``func`` under `if <media layout> is None:` that return the text stream without the media
    features the function otherwise merges into it: on the ranks without that medium the features (a dummy
    forward's output) never join the autograd graph."""
    inputs = media_inputs(func)
    layouts = {m.name for m in inputs if m.role == "layout"}
    features = [m.name for m in inputs if m.role == "feature"]
    streams = [p for p in params(func) if p in TEXT_STREAMS]
    if not layouts or not features or not streams:
        return []
    out: list[NoMediaExit] = []
    for index, stmt in enumerate(func.body):
        if not isinstance(stmt, ast.If) or stmt.orelse:
            continue
        absent = _absent_test(stmt.test)
        if absent not in layouts:
            continue
        last = stmt.body[-1] if stmt.body else None
        if not isinstance(last, ast.Return) or last.value is None:
            continue
        if not _loads(last.value) & derived(stmt.body[:-1], set(streams)):
            continue  # the branch returns something else (a tuple of masks, None)
        rest = func.body[index + 1 :]
        from_streams = derived(rest, set(streams))
        for feature in features:
            both = derived(rest, {feature}) & from_streams
            merged = [
                r
                for r in ast.walk(ast.Module(body=rest, type_ignores=[]))
                if isinstance(r, ast.Return) and r.value is not None and _loads(r.value) & both
            ]
            if not merged:
                continue  # the media path does not merge this feature into the text stream either
            if reaches(stmt.body[:-1], {feature}, last.value):
                continue
            computed = feature in {n for s in stmt.body[:-1] for n in _loads(s)}
            stream = next(s for s in streams if reaches(stmt.body[:-1], {s}, last.value))
            out.append(NoMediaExit(stmt, last, absent, feature, stream, computed))
    return out
