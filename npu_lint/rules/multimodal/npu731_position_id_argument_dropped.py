"""NPU731 position-id-argument-dropped."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.posargs import is_position_method, needed_parameters, reached_definitions
from npu_lint.veomni.upstream import file_source_module

# a parameter carrying a medium's layout (the call is on the media path when it passes one)
_LAYOUT = re.compile(r"grid|seqlens|lengths|second_per|media|multimodal")


def _dict_keys(name: str, scope: ast.AST) -> set[str] | None:
    """The keys of a mapping built in ``scope`` from a dict literal with constant keys and ``name["k"] = v``
    stores, read nowhere else but by subscript or ``.get`` (else None: it may hold anything)."""
    keys: set[str] = set()
    literal = False
    for node in _walk(scope):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            if literal or not isinstance(node.value, ast.Dict) or len(node.targets) != 1:
                return None
            for key in node.value.keys:
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    return None
                keys.add(key.value)
            literal = True
    if not literal:
        return None
    parents = {id(child): parent for parent in _walk(scope) for child in ast.iter_child_nodes(parent)}
    for node in _walk(scope):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(id(node))
        if isinstance(node.ctx, ast.Store):
            continue
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Store):
                if not (isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, str)):
                    return None
                keys.add(parent.slice.value)
            continue
        if isinstance(parent, ast.Attribute) and parent.attr == "get":
            continue
        if isinstance(parent, ast.keyword) and parent.arg is None:
            continue  # the spread itself
        return None  # handed on, updated, popped: unknown
    return keys


def _passed(call: ast.Call, func: ast.FunctionDef, scope: ast.AST) -> set[str] | None:
    """The parameters of ``func`` the call binds (None when a ``*`` or ``**`` spread may bind any; a spread of a
    mapping built in ``scope`` from constant keys binds those keys)."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    out: set[str] = set()
    for k in call.keywords:
        if k.arg is not None:
            out.add(k.arg)
            continue
        keys = _dict_keys(k.value.id, scope) if isinstance(k.value, ast.Name) else None
        if keys is None:
            return None
        out |= keys
    params = _positional(call, func)
    out.update(params[: len(call.args)])
    return out


def _positional(call: ast.Call, func: ast.FunctionDef) -> list[str]:
    """The positional parameters a call's positional arguments bind (``self`` dropped for a bound call)."""
    params = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    unbound = (
        isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id[:1].isupper()  # `Cls.get_rope_index(fake_self, ...)`
    )
    if not unbound and params and params[0] in ("self", "cls"):
        params = params[1:]
    return params


def _required(call: ast.Call, func: ast.FunctionDef) -> set[str]:
    """Parameters without a default (``self`` of a bound call excluded)."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    without = {a.arg for a in positional[: len(positional) - len(args.defaults)]}
    without &= set(_positional(call, func))
    without |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is None}
    return without


def _own(call: ast.Call, func: ast.AST) -> bool:
    for node in _walk(func):
        if node is not func and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if any(sub is call for sub in _walk(node)):
                return False
    return True


def _use(func: ast.FunctionDef, name: str) -> str:
    for node in _walk(func):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
            return ast.unparse(node)
    return name


class PositionIdArgumentDropped(Rule):
    code = "NPU731"
    name = "position-id-argument-dropped"
    summary = (
        "A call of the model's position-id function (`get_rope_index`, a data transform's `position_id_func`) "
        "passes the media layout but leaves out an argument the function needs: one it requires "
        "(`mm_token_type_ids` in transformers 5.9), or one it indexes without a None check "
        "(`second_per_grids[video_idx]`, `audio_seqlens[audio_idx]`): optional in the signature, needed by "
        "every sample that holds that medium."
    )
    why = (
        "The position-id functions of the omni and video models take each medium's layout as optional "
        "parameters, and some of them are optional in the signature only: Qwen-Omni's `get_rope_index` reads "
        "`second_per_grids[video_idx]` (the seconds each temporal grid covers, which spaces the video's "
        "temporal positions against the interleaved audio) and `audio_seqlens[audio_idx]` without testing them "
        "for None. A call that drops one works on text and image samples and breaks on the first video or audio "
        "sample: a TypeError in a dataloader worker, or, when the caller passes a stand-in, temporal M-RoPE ids "
        "on the default frame interval that drift from the audio positions. The function the call reaches is "
        "read statically: the file's own definition (a spec's replacement, a generated file's method), the "
        "upstream module the file copies, or, for a data transform's `position_id_func`, the `get_rope_index` "
        "of every model type the transform is registered for, from the installed transformers. A parameter the "
        "function tests for None (`if second_per_grid_ts is not None`) is truly optional and not asked for; a "
        "parameter without a default is needed by every sample. A `**` spread of a mapping the function builds from "
        'constant keys (a dict literal, `kwargs["k"] = v`) binds those keys; any other spread, and a call that '
        "passes no media layout at all (NPU711), is not judged."
    )
    bad = (
        Example(
            """
            def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None,
                               audio_seqlens=None, second_per_grids=None):
                positions = []
                for video_idx, grid in enumerate(video_grid_thw):
                    positions.append(grid[0] * second_per_grids[video_idx])
                for audio_idx in range(len(positions)):
                    positions.append(audio_seqlens[audio_idx])
                return positions


            def prepare_positions(self, input_ids, grids, audio_lengths):
                return self.get_rope_index(
                    input_ids, grids["image"], grids["video"], None, audio_seqlens=audio_lengths
                )
            """,
            path="veomni/models/seed_omni/toy_omni/modeling.py",
            title="the video grids passed, their seconds per grid left out",
        ),
    )
    good = (
        Example(
            """
            def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None,
                               second_per_grid_ts=None):
                intervals = iter(second_per_grid_ts) if second_per_grid_ts is not None else iter([1] * 64)
                return [grid[0] * next(intervals) for grid in video_grid_thw]


            def prepare_positions(self, input_ids, grids):
                return self.get_rope_index(input_ids, grids["image"], grids["video"])


            def prepare_with_spread(self, input_ids, grids):
                return self.get_rope_index(input_ids, **grids)
            """,
            path="veomni/models/seed_omni/toy_vl/modeling.py",
            title="a parameter with a None fallback may be left out; a spread may carry anything",
        ),
    )
    fix_safety = (
        "No fix: where the caller finds the missing layout (the processor's output, the batch) varies."
    )
    requires = (("rope_index", "position_id", "pos_ids"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        source: list[str | None] = []
        for func in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
            for call in nodes_of(func, ast.Call):
                if (
                    not isinstance(call, ast.Call)
                    or not is_position_method(last_name(call.func) or "")
                    or not _own(call, func)
                ):
                    continue
                if not source:
                    source.append(file_source_module(tree, self.ctx.source.text, self.ctx.source.path))
                self._check(call, func, source[0])

    def _check(
        self, call: ast.Call, scope: ast.FunctionDef | ast.AsyncFunctionDef, source: str | None
    ) -> None:
        missing: dict[str, tuple[str, ast.FunctionDef, bool]] = {}
        for label, definition in reached_definitions(call, scope, self.ctx.tree, source):
            passed = _passed(call, definition, scope)
            if passed is None:
                return
            if not any(_LAYOUT.search(p) for p in passed):
                continue  # no media layout passed at all: NPU711's case
            for param in sorted(_required(call, definition) - passed):
                missing.setdefault(param, (label, definition, True))
            for param in sorted(needed_parameters(definition) - passed):
                missing.setdefault(param, (label, definition, False))
        if not missing:
            return
        shown = ", ".join(f"`{p}`" for p in missing)
        param, (label, definition, required) = next(iter(missing.items()))
        why = (
            f"`{label}` requires `{param}` (no default), so every sample fails with a TypeError in the data "
            "pipeline"
            if required
            else f"`{label}` indexes `{_use(definition, param)}` without a None check, so the first sample "
            "holding that medium fails (or gets positions on a default interval) in the data pipeline"
        )
        # at the call's last argument, where the missing one belongs
        last = max(
            [*call.args, *(k.value for k in call.keywords)],
            key=lambda n: (n.lineno, n.col_offset),
            default=call,
        )
        self.report(
            last,
            f"`{ast.unparse(call.func)}(...)` passes the media layout but not {shown}: {why}; pass it on",
        )
