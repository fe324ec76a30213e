"""NPU720 medium-table-asymmetry."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.multimodal._twins import MEDIA, media_of, rewrite


def _keys(node: ast.Dict) -> list[str] | None:
    """The dict display's keys when every key is a string."""
    out = []
    for key in node.keys:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        out.append(key.value)
    return out


def _paths(
    table: ast.Dict, medium: str, other: str, prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], str] | None:
    """Every key path of a dict display (nested displays followed), each renamed from ``medium`` to ``other``,
    with the value's text; None when a key is not a string."""
    out: dict[tuple[str, ...], str] = {}
    for key, value in zip(table.keys, table.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        path = (*prefix, rewrite(key.value, medium, other) if medium != other else key.value)
        if isinstance(value, ast.Dict):
            inner = _paths(value, medium, other, path)
            if inner is None:
                return None
            out.update(inner)
        else:
            text = ast.unparse(value)
            out[path] = (rewrite(text, medium, other) if medium != other else text, key)
    return out


# Roles of a per-medium bundle's key every medium needs (grids, lengths, counts, metadata, geometry).
_SHARED_ROLES = (
    "grid",
    "thw",
    "seqlen",
    "len",
    "num_",
    "token",
    "count",
    "meta",
    "cu_",
    "size",
    "position",
    "fps",
)


def _reads_entry_of(value: str, medium: str) -> bool:
    """The value looks up the medium's entry by its key (`metadata.get("vit_image_cu_seqlens")`,
    `batch["image_grid_thw"]`); a setting shared on purpose (`args.image_size` for the video frames) names the
    medium only in an attribute."""
    try:
        tree = ast.parse(value, mode="eval")
    except SyntaxError:
        return medium in media_of(value)
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and medium in media_of(n.value)
        for n in nodes_of(tree, ast.Constant)
    )


def _one(text: str) -> str | None:
    media = media_of(text)
    return media.pop() if len(media) == 1 else None


class MediumTableAsymmetry(Rule):
    code = "NPU720"
    name = "medium-table-asymmetry"
    summary = (
        "A per-medium table treats one medium unlike its twin: a collate/pad record of a video key that differs "
        "from the image key's (after renaming), or a per-medium dict that lists the image key but not the video "
        "key another table of the file lists beside it."
    )
    why = (
        "Collators keep per-key tables (pack dimension, sequence-parallel slicing, pad value, pad scale) and "
        "per-medium counters (the sequence-parallel pad added to `pixel_values` and `pixel_values_videos`), and "
        "the model reads every medium the same way: masks gathered whole, patches padded to a whole number of "
        "merged tokens, pad counts reported to the metadata hook. A video record that slices its mask for "
        "sequence parallelism where the image record keeps it whole, pads patches to another multiple, or a "
        "counter dict that drops the video key, breaks only the video path, and only under sequence parallelism "
        "or with video data. Checked per file: within one dict display, two entries whose keys are one medium's "
        "and its twin's (`image_mask` / `video_mask`, `pixel_values` / `pixel_values_videos`) and whose record "
        "values (calls of one record type, or tuples) differ after renaming the medium; and a dict display keyed only by media whose "
        "key lacks the twin that another dict display of the file lists next to the same key."
        " Also the twin bundles one function builds for an image and a video (`image_vit_kwargs` / `video_vit_kwargs`, processor or metadata dicts): every key path of the image's (nested dicts too) must be in the video's after renaming the medium (the video's may add its own, such as `fps`) when it names a grid, length, count, size or metadata role, or names the medium and its video spelling is used elsewhere in the file (tiling options such as `crop_to_patches` and `image_flags` are the image's own); and a video value must not look up the image's entry by its key (`metadata.get(\"vit_image_cu_seqlens\")`)."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass


            @dataclass
            class Rule:
                dim: int
                shard: bool
                fill: int
                scale: int


            RULES = {
                "pixel_values": Rule(0, True, 0, 4),
                "pixel_values_videos": Rule(0, True, 0, 2),
                "image_mask": Rule(-1, False, 0, 1),
                "video_mask": Rule(-1, True, 0, 1),
            }
            """,
            path="veomni/data/toy_rules.py",
            title="the video records differ from the image ones",
        ),
        Example(
            """
            def pads(batch, pad):
                added = {"pixel_values": 0}
                for key in ("pixel_values", "pixel_values_videos"):
                    if key in added:
                        added[key] = pad(batch, key)
                return added


            def hook(batch, fn):
                fn(batch, {"pixel_values": 0, "pixel_values_videos": 0})
            """,
            path="veomni/data/toy_collator.py",
            title="the video pad count is never recorded",
        ),
    )
    good = (
        Example(
            """
            from dataclasses import dataclass


            @dataclass
            class Rule:
                dim: int
                shard: bool
                fill: int
                scale: int


            RULES = {
                "pixel_values": Rule(0, True, 0, 4),
                "pixel_values_videos": Rule(0, True, 0, 4),
                "image_mask": Rule(-1, False, 0, 1),
                "video_mask": Rule(-1, False, 0, 1),
                "image_grid_hw": Rule(0, False, None, None),
            }
            MARKERS = {"image": -200, "video": -201}
            """,
            path="veomni/data/toy_rules.py",
        ),
    )
    fix_safety = "No fix: which entry is meant is the author's call."
    requires = (("pixel_values", "image"), ("video", "audio"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        self._twin_bundles()
        tables = [
            (node, keys) for node in nodes_of(self.ctx.tree, ast.Dict) for keys in [_keys(node)] if keys
        ]
        if not tables:
            return
        for node, keys in tables:
            self._records(node, keys)
        together: set[tuple[str, str]] = set()
        for _, keys in tables:
            present = set(keys)
            for key in keys:
                medium = _one(key)
                for other in MEDIA:
                    if medium is None or other == medium:
                        continue
                    twin = rewrite(key, medium, other)
                    if twin != key and twin in present:
                        together.add((key, twin))
        for node, keys in tables:
            if not all(_one(k) for k in keys):
                continue
            present = set(keys)
            for key in keys:
                medium = _one(key)
                missing = [
                    twin
                    for other in MEDIA
                    if other != medium
                    for twin in [rewrite(key, medium, other)]  # type: ignore[arg-type]
                    if twin != key and twin not in present and (key, twin) in together
                ]
                if missing:
                    self.report(
                        node,
                        f"this table lists `{key}` but not `{missing[0]}`, which another table of this file lists "
                        f"beside it: the {_one(missing[0])} entry is never counted or passed on here",
                    )
                    break

    def _twin_bundles(self) -> None:
        """Two dict displays one function builds for an image and a video (`image_vit_kwargs` /
        `video_vit_kwargs`, a per-medium kwargs or metadata bundle handed to each tower): every key path (nested
        dicts too) of the image's must be in the video's after renaming the medium (the video's may add its own,
        such as `fps`), and a video value must not read the image's entry where the image's reads its own."""
        seen: set[int] = set()
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            bundles: dict[str, ast.Dict] = {}
            for node in nodes_of(func, ast.Assign):
                assert isinstance(node, ast.Assign)
                target = node.targets[0] if len(node.targets) == 1 else None
                if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict) and _one(target.id):
                    bundles.setdefault(target.id, node.value)
            for name, table in bundles.items():
                medium = _one(name)
                if medium != "image":
                    continue  # the image bundle is the reference; a video one may add its own keys (fps)
                for other in ("video",):
                    twin = rewrite(name, medium, other)
                    twin_table = bundles.get(twin)
                    if twin == name or twin_table is None or id(twin_table) in seen:
                        continue
                    mine = _paths(table, medium, other)  # type: ignore[arg-type]
                    theirs = _paths(twin_table, other, other)
                    if mine is None or theirs is None:
                        continue
                    order = list(mine)
                    for index, path in enumerate(order):
                        if path in theirs:
                            value = theirs[path][0]
                            if value != mine[path][0] and _reads_entry_of(value, medium):
                                seen.add(id(twin_table))
                                self.report(
                                    theirs[path][1],
                                    f"`{twin}`'s `{'.'.join(path)}` reads `{value}`, the {medium}'s entry, where "
                                    f"`{name}` implies the {other}'s (`{mine[path][0]}`): the {other} path runs "
                                    f"with the {medium} metadata",
                                )
                                break
                            continue
                        if not self._shared_key(path, other):
                            continue  # an option of the image path alone (`crop_to_patches`, `image_flags`)
                        seen.add(id(twin_table))
                        before = [theirs[p][1] for p in order[:index] if p in theirs]
                        self.report(
                            before[-1] if before else twin_table,
                            f"`{twin}` has no `{'.'.join(path)}`, which its twin `{name}` carries "
                            f"(`{mine[path][0]}`): the {other} path runs without it (a fallback recomputation, "
                            f"or arguments out of step with the rest of the bundle) while the {medium} path gets it",
                        )
                        break

    def _shared_key(self, path: tuple[str, ...], other: str) -> bool:
        """A key every medium's bundle needs: one naming a grid, length or metadata role (`grid_thw`,
        `max_seqlen`, `num_tokens`, `vit_metadata`, `do_resize`), or one naming the medium whose renamed spelling
        (`video_grid_thw`) the file uses elsewhere. Tiling options (`max_patches`, `crop_to_patches`) and
        image-only flags (`image_flags`, no `video_flags` anywhere) are the image path's own."""
        joined = ".".join(path).lower()
        if any(role in joined for role in _SHARED_ROLES):
            return True
        return any(other in media_of(key) and key in self.ctx.source.text for key in path)

    def _records(self, node: ast.Dict, keys: list[str]) -> None:
        values = dict(zip(keys, node.values))
        for key, value in values.items():
            if not isinstance(value, (ast.Call, ast.Tuple)):
                continue
            medium = _one(key)
            if medium is None:
                continue
            for other in MEDIA:
                if other == medium or (medium != "image" and other != "image"):
                    continue  # the image entry is the reference the others are compared with
                twin = rewrite(key, medium, other)
                twin_value = values.get(twin)
                if twin == key or twin_value is None or medium != "image":
                    continue
                if isinstance(value, ast.Call) and not (
                    isinstance(twin_value, ast.Call)
                    and ast.unparse(twin_value.func) == ast.unparse(value.func)
                ):
                    continue  # records of one type only (not one class per medium)
                if isinstance(value, ast.Call):
                    mine, theirs = self._bound(value), self._bound(twin_value)  # type: ignore[arg-type]
                    if mine is None or theirs is None or set(mine) != set(theirs):
                        continue  # spelt differently and the record type's fields unknown: not compared
                    renamed = {k: rewrite(v, medium, other) for k, v in mine.items()}
                    differ = renamed != theirs
                else:
                    differ = ast.unparse(twin_value) != rewrite(ast.unparse(value), medium, other)
                if differ:
                    self.report(
                        twin_value,
                        f"the record of `{twin}` (`{ast.unparse(twin_value)}`) and the one of `{key}` "
                        f"(`{ast.unparse(value)}`) differ beyond the medium's name: the {other} data and the "
                        f"{medium}'s are packed, sliced or padded differently, though the model reads both the same "
                        "way",
                    )

    def _bound(self, call: ast.Call) -> dict[str | int, str] | None:
        """A record call's arguments by field: keywords by name, positionals by the field they bind when the
        record type is a class of this file with annotated fields (a dataclass, a NamedTuple), else by
        position; None with a starred or ``**`` argument."""
        name = ast.unparse(call.func).rsplit(".", 1)[-1]
        fields: list[str] = []
        for cls in nodes_of(self.ctx.tree, ast.ClassDef):
            if cls.name == name:  # type: ignore[attr-defined]
                fields = [
                    s.target.id
                    for s in cls.body  # type: ignore[attr-defined]
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                ]
        out: dict[str | int, str] = {}
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                return None
            out[fields[i] if i < len(fields) else i] = ast.unparse(arg)
        for kw in call.keywords:
            if kw.arg is None:
                return None
            out[kw.arg] = ast.unparse(kw.value)
        return out
