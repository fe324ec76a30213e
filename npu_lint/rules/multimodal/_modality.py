"""Which medium (image, video, audio) a name, a string key or an expression belongs to, read from its spelling,
and the places where one medium's data meets another medium's mask, index, metadata key or handler (private to
the multimodal family)."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, walk_pairs
from npu_lint.core.astutil import walk as _walk

_TOKENS = {
    "image": "image",
    "images": "image",
    "img": "image",
    "imgs": "image",
    "video": "video",
    "videos": "video",
    "vid": "video",
    "vids": "video",
    "audio": "audio",
    "audios": "audio",
    "aud": "audio",
}
_SPLIT = re.compile(r"[^a-z0-9]+")
_AUDIO_NAMES = ("input_features", "feature_attention_mask")  # audio inputs whose names say no medium
_SPELLINGS: dict[str, list[str]] = {}
for _token, _medium in _TOKENS.items():
    _SPELLINGS.setdefault(_medium, []).append(_token)
_SPELLINGS["audio"].extend(_AUDIO_NAMES)


def media_named(text: str) -> int:
    """How many media a lower-cased text may name, as ``modality`` spells them (a superset test: `vid` is also
    in `provide`): a function whose text names fewer than two cannot cross one medium's data with another's."""
    return sum(any(s in text for s in spellings) for spellings in _SPELLINGS.values())


def modality(name: str | None) -> str | None:
    """The one medium a spelling names (`pixel_values_videos` -> video, `vit_image_cu_seqlens` -> image,
    `input_features` -> audio); None when it names none or several (plain `pixel_values` carries video frames
    in many models)."""
    if not name:
        return None
    low = name.lower()
    if low in _AUDIO_NAMES:
        return "audio"
    found = {_TOKENS[t] for t in _SPLIT.split(low) if t in _TOKENS}
    return found.pop() if len(found) == 1 else None


def root_name(expr: ast.AST) -> ast.Name | None:
    """The variable an expression is computed from along its method/attribute/subscript chain
    (`video_mask.unsqueeze(-1).to(dev)` -> `video_mask`, `embeds[:n]` -> `embeds`)."""
    node = expr
    while True:
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        else:
            return None


class Media:
    """The medium of locals in one function: from the name itself, else from what its reaching assignment (the
    last one on an earlier line) is computed from."""

    def __init__(self, func: ast.AST) -> None:
        self.defs: dict[str, list[tuple[int, ast.AST]]] = {}
        for node in _walk(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                self.defs.setdefault(node.targets[0].id, []).append((node.lineno, node.value))
        for entries in self.defs.values():
            entries.sort(key=lambda e: e[0])

    def of(self, expr: ast.AST, depth: int = 0) -> str | None:
        name = root_name(expr)
        if name is None:
            return None
        own = modality(name.id)
        if own is not None or depth > 2:
            return own
        value = None
        for line, node in self.defs.get(name.id, []):
            if line < name.lineno:
                value = node
        return self.of(value, depth + 1) if value is not None else None


def _spelled(expr: ast.AST) -> str | None:
    """The medium of an expression's own variable, by its spelling only (data is often renamed across media,
    `language_model_inputs` from video frames scattered at image placeholders; masks and keys are not)."""
    name = root_name(expr)
    return modality(name.id) if name is not None else None


def _reads(media: Media, expr: ast.AST, name: str, depth: int = 0) -> bool:
    """Whether ``expr`` is computed from ``name`` (through the locals' reaching assignments, a few steps): values
    selected with a mask and written back at that same mask are paired by construction, whatever they are called."""
    for n in _walk(expr):
        if not isinstance(n, ast.Name):
            continue
        if n.id == name:
            return True
        if depth < 3:
            value = None
            for line, node in media.defs.get(n.id, []):
                if line < n.lineno:
                    value = node
            if value is not None and _reads(media, value, name, depth + 1):
                return True
    return False


def _paired(media: Media, index: ast.AST, value: ast.AST) -> bool:
    root = root_name(index)
    return root is not None and _reads(media, value, root.id)


def _key_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return None


def crossings(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """Where one medium's data meets another medium's: the mask of a `masked_scatter`, the index of an indexed
    assignment, the holder of a metadata lookup, a handler of one medium given another's data. (node, message)."""
    media: Media | None = (
        None  # built at the first mask, condition or indexed write (most functions have none)
    )
    own = modality(func.name)
    parents: dict[
        ast.AST, ast.AST
    ] = {}  # filled at the first lookup key of a medium (most functions have none)
    keys: set[int] = set()  # the string lookup keys: `md["k"]`, `md.get("k")`, `md.pop("k")`
    out: list[tuple[ast.AST, str]] = []
    for node in _walk(func):  # breadth first: a key's subscript or call comes before the key
        if isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and node.args
        ):
            keys.add(id(node.args[0]))
        if (
            isinstance(node, ast.Call)
            and call_name(node) in ("masked_scatter", "masked_scatter_")
            and len(node.args) >= 2
        ):
            media = media or Media(func)
            mask, src = media.of(node.args[0]), _spelled(node.args[1])
            if mask and src and mask != src and not _paired(media, node.args[0], node.args[1]):
                out.append(
                    (
                        node.args[0],
                        f"`{ast.unparse(node.args[1])}` ({src}) is scattered into the positions of "
                        f"`{ast.unparse(node.args[0])}` ({mask}): the {src} features land on the {mask} placeholders",
                    )
                )
        elif isinstance(node, ast.Call) and call_name(node) == "where" and len(node.args) == 3:
            media = media or Media(func)
            mask, src = media.of(node.args[0]), _spelled(node.args[1])
            if mask and src and mask != src and not _paired(media, node.args[0], node.args[1]):
                out.append(
                    (
                        node.args[0],
                        f"`torch.where` takes `{ast.unparse(node.args[1])}` ({src}) at the positions of "
                        f"`{ast.unparse(node.args[0])}` ({mask}): the {src} values land on the {mask} positions",
                    )
                )
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
        ):
            index = node.targets[0].slice
            first = index.elts[0] if isinstance(index, ast.Tuple) and index.elts else index
            media = media or Media(func)
            where, what = media.of(first), _spelled(node.value)
            if (
                where
                and what
                and where != what
                and isinstance(first, (ast.Name, ast.Attribute, ast.Subscript))
                and not _paired(media, first, node.value)
            ):
                out.append(
                    (
                        first,
                        f"`{ast.unparse(node.value)}` ({what}) is written at the positions of "
                        f"`{ast.unparse(first)}` ({where}): the {what} values land on the {where} positions",
                    )
                )
        elif isinstance(node, ast.Call) and own is None and modality(call_name(node)):
            # a mapping of one medium's keyword arguments splatted into another medium's handler
            handler = modality(call_name(node))
            for kw in node.keywords:
                got = _spelled(kw.value) if kw.arg is None else None
                if got and got != handler:
                    out.append(
                        (
                            kw.value,
                            f"`{ast.unparse(node.func)}` handles {handler} but gets `**{ast.unparse(kw.value)}` "
                            f"({got}): the {handler} path runs with the {got} arguments",
                        )
                    )
        elif id(node) in keys and (got := modality(_key_text(node))) is not None:
            if not parents:
                _parents(func, parents)
            holder = _holder(node, parents)
            if holder is not None and holder[1] != got:
                out.append(
                    (
                        node,
                        f"`{holder[0]}` is {holder[1]} data but reads `{_key_text(node)}` ({got}): the {holder[1]} path "
                        f"gets the {got} metadata",
                    )
                )
    return out


def _parents(func: ast.AST, into: dict[ast.AST, ast.AST]) -> dict[ast.AST, ast.AST]:
    into.update(walk_pairs(func))
    return into


def _holder(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[str, str] | None:
    """The nearest enclosing name that says which medium a looked-up value is for: the dict key or keyword it is
    given under, the call it is given to, the local it is stored in."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Dict):
            for key, value in zip(parent.keys, parent.values):
                if value is child and key is not None:
                    text = _key_text(key)
                    if modality(text):
                        return text, modality(text)  # type: ignore[return-value]
        elif isinstance(parent, ast.keyword) and parent.arg and modality(parent.arg):
            return parent.arg, modality(parent.arg)  # type: ignore[return-value]
        elif isinstance(parent, ast.Call) and child is not parent.func and modality(call_name(parent)):
            return call_name(parent), modality(call_name(parent))  # type: ignore[return-value]
        child, parent = parent, parents.get(parent)
    if (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        name = parent.targets[0].id
        if modality(name):
            return name, modality(name)  # type: ignore[return-value]
    return None


_SP_WORDS = (
    "gather",
    "slice_input",
    "sp_pad",
    "sp_slice",
    "sp_split",
    "split_sp",
    "all_to_all",
    "scatter_heads",
)
_SWAP = {"image": ("video",), "video": ("image",), "images": ("videos",), "videos": ("images",)}
_SWAP.update({"img": ("vid",), "vid": ("img",)})


def _swapped(name: str) -> list[str]:
    parts = name.split("_")
    return [
        "_".join([*parts[:i], other, *parts[i + 1 :]])
        for i, part in enumerate(parts)
        for other in _SWAP.get(part, ())
    ]


def _sp_step(call: ast.Call) -> bool:
    low = call_name(call).lower()
    return "masked" not in low and any(w in low for w in _SP_WORDS)


def one_sided_sp(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """A sequence-parallel step (`gather_outputs`, `slice_input_tensor`, ...) applied to one visual medium's
    tensor (`image_embeds`, directly or element-wise in a comprehension) while the same tensor of the other medium
    (`video_embeds`, assigned in the same function) never goes through it. (the sibling's first assignment,
    message)."""
    comp_iter: dict[ast.AST, dict[str, ast.AST]] = {}
    for node in _walk(func):
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            binds = {gen.target.id: gen.iter for gen in node.generators if isinstance(gen.target, ast.Name)}
            for inner in _walk(node.elt):
                comp_iter[inner] = binds
    stepped: dict[str, set[str]] = {}
    for node in _walk(func):
        if not (isinstance(node, ast.Call) and node.args and _sp_step(node)):
            continue
        root = root_name(node.args[0])
        if root is None:
            continue
        name = root.id
        binds = comp_iter.get(node, {})
        if name in binds:
            outer = root_name(binds[name])
            if outer is None:
                continue
            name = outer.id
        stepped.setdefault(call_name(node), set()).add(name)
    first: dict[str, ast.AST] = {}
    for node in _walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and (
                    target.id not in first or node.lineno < first[target.id].lineno  # type: ignore[attr-defined]
                ):
                    first[target.id] = node
    out: list[tuple[ast.AST, str]] = []
    for callee, names in stepped.items():
        for name in sorted(names):
            if modality(name) not in ("image", "video"):
                continue
            for sibling in _swapped(name):
                if sibling in first and sibling not in names:
                    out.append(
                        (
                            first[sibling],
                            f"`{name}` goes through `{callee}` (sequence parallelism) but `{sibling}` never does: "
                            f"under SP the {modality(sibling)} tensor keeps another layout than the "
                            f"{modality(name)} one it mirrors",
                        )
                    )
    return out


def _twin_call(func: ast.FunctionDef, name: str) -> ast.Call | None:
    """Where an unread mapping belongs: the call of this medium's method (`get_video_features`) whose sibling
    call (`get_image_features`) receives the other medium's mapping (`image_vit_kwargs`)."""
    twins = set(_swapped(name))
    calls = [n for n in _walk(func) if isinstance(n, ast.Call)]
    for call in calls:
        if not any(isinstance(n, ast.Name) and n.id in twins for n in _walk(call)):
            continue
        siblings = set(_swapped(call_name(call)))
        for other in calls:
            if call_name(other) in siblings:
                return other
    return None


def unused_media_mappings(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """A mapping built for one medium (`video_vit_kwargs = {...}`, `audio_opts = dict(...)`) that the function
    never reads: that medium's metadata or options never reach its tower."""
    loaded = {n.id for n in _walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out: list[tuple[ast.AST, str]] = []
    for node in _walk(func):
        if not (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name = node.targets[0].id
        value = node.value
        mapping = isinstance(value, (ast.Dict, ast.DictComp)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict"
        )
        if mapping and modality(name) and name not in loaded and not name.startswith("_"):
            twin = _twin_call(func, name)
            where = (
                f" (`{ast.unparse(twin.func)}(...)` does not get it, its sibling call gets the other medium's)"
                if twin
                else ""
            )
            out.append(
                (
                    twin or node,
                    f"`{name}` is built for the {modality(name)} inputs but never read{where}: what it carries "
                    f"never reaches the {modality(name)} path",
                )
            )
    return out


def _keyed_medium(expr: ast.AST) -> str | None:
    """The medium of a value looked up by a string key: `grids["video"]`, `cfg.get("image_grid_thw")`."""
    if isinstance(expr, ast.Subscript):
        key = _key_text(expr.slice)
    elif (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in ("get", "pop")
        and expr.args
    ):
        key = _key_text(expr.args[0])
    else:
        return None
    return modality(key) if key is not None else None


def keyed_crossings(func: ast.FunctionDef) -> list[tuple[ast.AST, str]]:
    """One medium's slot (a string key, a keyword, a local named for it) filled with a value looked up under
    another medium's key: `out["video_grid_thw"] = grids["image"]`, `f(video_grid_thw=grids.get("image"))`."""
    out: list[tuple[ast.AST, str]] = []

    def check(slot: str | None, value: ast.AST) -> None:
        want, got = modality(slot), _keyed_medium(value)
        if want and got and want != got:
            key = value.slice if isinstance(value, ast.Subscript) else value.args[0]  # type: ignore[attr-defined]
            out.append(
                (
                    key,  # the key constant: where the lookup-key check reports the same crossing
                    f"the {want} slot `{slot}` is filled with `{ast.unparse(value)}`, looked up under a key of the "
                    f"{got} medium: the {want} inputs get the {got} data",
                )
            )

    for node in _walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Subscript):
                check(_key_text(target.slice), node.value)
            elif isinstance(target, ast.Name):
                check(target.id, node.value)
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is not None:
                    check(kw.arg, kw.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None:
                    check(_key_text(key), value)
    return out
