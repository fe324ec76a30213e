"""NPU723 spatial-dims-swapped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, nodes_of, own_nodes
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.dims import axis_of, layout_letters, shape_index, shape_source, upstream_params

_NAMES = {"h": "height", "w": "width", "t": "frames"}
# torch / torchvision resizes whose ``size`` lists (..., H, W); PIL's ``Image.resize`` takes (W, H) and is not one
_SIZE_CALLS = frozenset({"interpolate", "upsample", "resized_crop"})
# methods that keep a layout-named value's dimension order
_REORDER = frozenset({"permute", "transpose", "swapaxes", "movedim", "mT"})
_KEEP_ORDER = frozenset({"tolist", "cpu", "numpy", "unbind", "long", "int", "to", "clone", "detach"})


def _axis(expr: ast.expr) -> str | None:
    name = last_name(expr)
    return None if name is None else axis_of(name)


def _targets(target: ast.expr) -> list[ast.expr] | None:
    if isinstance(target, (ast.Tuple, ast.List)):
        return list(target.elts)
    return None


class SpatialDimsSwapped(Rule):
    code = "NPU723"
    name = "spatial-dims-swapped"
    summary = (
        "A height and a width are read or passed in each other's place: unpacked from a tensor's shape, from "
        "a layout-named grid (`grid_thw`), or handed to a function whose parameters name them, in the wrong "
        "order."
    )
    why = (
        "Image and video preprocessing (resizing, patching, the vision tower's grids) works on `(height, width)` "
        "pairs. In every tensor layout a VeOmni transform sees, channels first or last, the height axis comes "
        "before the width axis of `shape`, and a grid named after its layout (`image_grid_thw`) lists its axes "
        "in that order. Unpacking `width, height = video.shape[2], video.shape[3]`, reading `t, w, h` from a "
        "`grid_thw` row or calling `smart_resize(width, height)` on a function declared `(height, width)` "
        "transposes every non-square sample: frames are resized to the wrong aspect, the patch grid and the "
        "media token count no longer match the sample, and training runs on distorted media (or fails on a "
        "token-count mismatch) on every device. PIL's `Image.size`, the one common `(width, height)` pair, is "
        "an attribute, never a shape, and is not read."
    )
    bad = (
        Example(
            """
            def resize_video(video, smart_resize, factor):
                _, _, width, height = video.shape
                return smart_resize(height, width, factor)
            """,
            path="veomni/data/multimodal/toy_video.py",
            title="a (T, C, H, W) video's last two axes unpacked as width, height",
        ),
        Example(
            """
            def smart_resize(height, width, factor=28):
                return round(height / factor) * factor, round(width / factor) * factor


            def fetch_image(image, factor):
                height, width = image.shape[-2:]
                return smart_resize(width, height, factor)
            """,
            path="veomni/data/multimodal/toy_image.py",
            title="a call handing the width to the height parameter and back",
        ),
        Example(
            """
            def patch_counts(image_grid_thw):
                counts = []
                for t, w, h in image_grid_thw.tolist():
                    counts.append(t * h * w)
                return counts
            """,
            path="veomni/data/multimodal/toy_grid.py",
            title="a (t, h, w) grid row unpacked as t, w, h",
        ),
    )
    good = (
        Example(
            """
            def resize_video(video, smart_resize, factor, image):
                _, _, height, width = video.shape
                img_w, img_h = image.size
                for t, h, w in video_grid_thw.tolist():
                    pass
                return smart_resize(height, width, factor), smart_resize(height=img_h, width=img_w)
            """,
            path="veomni/data/multimodal/toy_video.py",
            title="shape order, PIL's (width, height) size, grid order, keywords matching",
        ),
    )
    fix_safety = "No fix: whether the names or the positions are wrong needs a reader."
    requires = (("width", "thw", "_hw", "w,", ", w", "_w"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        return not kind.test and not kind.generated

    def finish(self) -> None:
        tree = self.ctx.tree
        aliases = self._layout_aliases(tree)
        functions = self._functions(tree)
        for node in nodes_of(tree, ast.Assign, ast.For, ast.comprehension, ast.Call):
            if isinstance(node, ast.Assign):
                if len(node.targets) == 1:
                    self._unpack(node.targets[0], node.value, aliases, node)
            elif isinstance(node, ast.For):
                self._unpack(node.target, node.iter, aliases, node.target, iterated=True)
            elif isinstance(node, ast.comprehension):
                self._unpack(node.target, node.iter, aliases, node.target, iterated=True)
            else:
                self._call(node, functions)

    # -- unpacking ------------------------------------------------------------------------------------------

    def _unpack(
        self,
        target: ast.expr,
        value: ast.expr,
        aliases: dict[str, str],
        at: ast.AST,
        *,
        iterated: bool = False,
    ) -> None:
        names = _targets(target)
        if names is None:
            return
        axes = [None if isinstance(t, ast.Starred) else _axis(t) for t in names]
        if "h" not in axes or "w" not in axes:
            return
        if not iterated:
            source = shape_source(value)
            if source is not None:
                if axes.index("w") < axes.index("h") and not self._reordered(source[0], at):
                    self.report(
                        at,
                        f"`{ast.unparse(target)}` unpacks `{ast.unparse(value)}` with the width before the "
                        "height: a tensor's shape lists height before width in every layout (channels first or "
                        "last), so every non-square sample is transposed (PIL's `Image.size` is the (width, "
                        "height) pair, a tensor's `shape` is not).",
                    )
                return
            if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
                self._parallel(names, value.elts, axes, at)
                return
        letters = self._letters(value, aliases)
        if letters is None or any(isinstance(t, ast.Starred) for t in names) or len(letters) != len(names):
            return
        for i, axis in enumerate(axes):
            if axis in ("h", "w") and letters[i] in ("h", "w") and axis != letters[i]:
                self.report(
                    at,
                    f"`{ast.unparse(target)}` reads `{ast.unparse(value)}`, whose rows hold the layout "
                    f"`{letters}` (by its name or the value it was bound to), in another order: `{ast.unparse(names[i])}` gets the "
                    f"{_NAMES[letters[i]]}, so height and width are swapped for every non-square sample.",
                )
                return

    def _parallel(
        self, names: list[ast.expr], values: list[ast.expr], axes: list[str | None], at: ast.AST
    ) -> None:
        read: dict[str, tuple[str, int]] = {}
        for axis, value in zip(axes, values):
            if axis in ("h", "w"):
                found = shape_index(value)
                if found is not None:
                    read[axis] = found
        if len(read) != 2:
            return
        (h_base, h_axis), (w_base, w_axis) = read["h"], read["w"]
        if (
            h_base == w_base
            and (h_axis < 0) == (w_axis < 0)
            and w_axis < h_axis
            and not self._reordered(h_base, at)
        ):
            self.report(
                at,
                f"the width is read from axis {w_axis} and the height from axis {h_axis} of `{h_base}`: a "
                "tensor's shape lists height before width in every layout, so every non-square sample is "
                "transposed.",
            )

    def _reordered(self, base: str, at: ast.AST) -> bool:
        """Whether the function around ``at`` reorders ``base``'s axes itself (``permute``, ``transpose``): the
        unpacked names then label a layout the function handles on purpose (a pixel shuffle that reads
        ``(batch, width, height, channels)`` and permutes back)."""
        line = getattr(at, "lineno", 0)
        around = None
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            if func.lineno <= line <= (func.end_lineno or func.lineno) and (
                around is None or func.lineno >= around.lineno
            ):
                around = func
        if around is None:
            return False
        for node in own_nodes(around):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _REORDER
                and ast.unparse(node.func.value) == base
            ):
                return True
        return False

    def _letters(self, value: ast.expr, aliases: dict[str, str]) -> str | None:
        """The dimension order a value's rows hold, from its name (``image_grid_thw``, ``grid_thw.tolist()``,
        ``grid_thw[i]``, ``grid_thw[:, 1:]``) or a local bound to one (``grid_list = grid_thw.tolist()``)."""
        while True:
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                if value.func.attr not in _KEEP_ORDER:
                    return None
                value = value.func.value
                continue
            if isinstance(value, ast.Subscript):
                sl = value.slice
                if isinstance(sl, ast.Tuple) and sl.elts and isinstance(sl.elts[-1], ast.Slice):
                    letters = self._letters(value.value, aliases)
                    last = sl.elts[-1]
                    if letters is None or last.step is not None or last.upper is not None:
                        return None
                    low = last.lower
                    if low is None:
                        return letters
                    if (
                        isinstance(low, ast.Constant)
                        and type(low.value) is int
                        and 0 <= low.value < len(letters)
                    ):
                        return letters[low.value :]
                    return None
                if isinstance(sl, ast.Slice):
                    return None
                value = value.value
                continue
            break
        name = last_name(value)
        if name is None:
            return None
        return layout_letters(name) or (aliases.get(name) if isinstance(value, ast.Name) else None)

    def _layout_aliases(self, tree: ast.AST) -> dict[str, str]:
        found: dict[str, str | None] = {}
        for node in nodes_of(tree, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            if layout_letters(name) is not None:
                continue
            letters = self._letters(node.value, {})
            if letters is None:
                continue
            found[name] = letters if found.get(name, letters) == letters else None
        return {k: v for k, v in found.items() if v is not None}

    # -- calls ----------------------------------------------------------------------------------------------

    def _functions(self, tree: ast.Module) -> dict[str, list[str]]:
        """The parameter names of the file's functions and methods, by name (a name defined twice with
        different parameters is left out)."""
        out: dict[str, list[str] | None] = {}
        for node in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
            params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
            if params and params[0] in ("self", "cls"):
                params = params[1:]
            prev = out.get(node.name, params)
            out[node.name] = params if prev == params else None
        return {k: v for k, v in out.items() if v is not None}

    def _call(self, call: ast.Call, functions: dict[str, list[str]]) -> None:
        callee = last_name(call.func)
        if callee is None:
            return
        if callee in _SIZE_CALLS:
            self._size(call)
            return
        slots: list[tuple[str, ast.expr]] = []  # (parameter name, argument)
        params = None
        if isinstance(call.func, ast.Name) or (
            isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id in ("self", "cls")
        ):
            params = functions.get(callee)
            if params is None and isinstance(call.func, ast.Name):
                target = self.ctx.imports.get(callee)
                if target is not None and any(_axis(a) in ("h", "w") for a in call.args):
                    params = upstream_params(target)
        if params is not None and not any(isinstance(a, ast.Starred) for a in call.args):
            slots.extend(zip(params, call.args))
        slots.extend((kw.arg, kw.value) for kw in call.keywords if kw.arg is not None)
        crossed = correct = 0
        first: tuple[str, ast.expr] | None = None
        for param, arg in slots:
            want, got = axis_of(param), _axis(arg)
            if want not in ("h", "w") or got not in ("h", "w"):
                continue
            if want == got:
                correct += 1
            else:
                crossed += 1
                first = first or (param, arg)
        if crossed and not correct and first is not None:
            param, arg = first
            self.report(
                call,
                f"`{ast.unparse(arg)}` is passed as `{callee}`'s `{param}`: the {_NAMES[_axis(arg) or 'h']} "
                f"goes where the {_NAMES[axis_of(param) or 'h']} is expected, so the result is transposed for "
                "every non-square sample.",
            )

    def _size(self, call: ast.Call) -> None:
        size = next((kw.value for kw in call.keywords if kw.arg == "size"), None)
        if size is None and len(call.args) > 1:
            size = call.args[1]
        if not isinstance(size, (ast.Tuple, ast.List)):
            return
        axes = [_axis(e) for e in size.elts]
        if "h" in axes and "w" in axes and axes.index("w") < axes.index("h"):
            self.report(
                call,
                f"`size={ast.unparse(size)}` lists the width before the height: torch's resizes take "
                "`(..., height, width)`, so the output is transposed for every non-square input.",
            )
