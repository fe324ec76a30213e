"""The tree's argument dataclasses: which fields ``args.train.*`` / ``args.model.*`` / ``args.data.*`` have.

VeOmni's trainers read their configuration as attribute chains on one ``VeOmniArguments`` object
(``args.train.accelerator.fsdp_config.mixed_precision.enable``). The fields are the dataclasses of
``veomni/arguments/arguments_types.py`` (and the trainers' subclasses of them: ``VLMTrainingArguments``). A chain
that names a field no class of that group defines (a field removed or moved by a refactor) raises
``AttributeError`` at run time, or reads a stale value where one was re-added.

* ``group_classes(path, tree)``: ``{"train": TrainingArguments-like class facts, ...}`` of the tree ``path`` lives
  in (read once per file stamps; the linted module's own classes replace its on-disk copy), or None outside a
  tree.
* ``ClassFacts``: the attributes a class (with its subclasses in the tree: a trainer's own arguments class adds
  fields) defines, and the class each annotated field holds.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass, field

from npu_lint.veomni.patchgen import load_file, veomni_root_of

__all__ = ["ClassFacts", "group_classes", "group_root", "own_classes", "root_class"]

_GROUPS = {"train": "TrainingArguments", "model": "ModelArguments", "data": "DataArguments"}


@dataclass
class ClassFacts:
    name: str
    attrs: set[str] = field(default_factory=set)
    holds: dict[str, str] = field(default_factory=dict)  # field -> class name of its annotation
    bases: list[str] = field(default_factory=list)
    # attributes its methods set on the objects its fields hold (``self.profile.this_rank = ...``,
    # ``acc = self.accelerator; acc.dp_size = ...``): (field, attribute)
    nested: set[tuple[str, str]] = field(default_factory=set)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _annotation_class(node: ast.expr | None) -> str | None:
    """The class a field annotated ``X`` / ``Optional[X]`` / ``Union[X, None]`` / ``X | None`` holds; None for
    containers (``List[X]`` holds a list, not an X) and other unions."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if _is_none(node.right):
            return _annotation_class(node.left)
        if _is_none(node.left):
            return _annotation_class(node.right)
        return None
    if isinstance(node, ast.Subscript):
        outer = node.value
        outer_name = outer.id if isinstance(outer, ast.Name) else getattr(outer, "attr", None)
        inner = node.slice
        if outer_name == "Optional":
            return _annotation_class(inner)
        if outer_name == "Union" and isinstance(inner, ast.Tuple):
            kept = [e for e in inner.elts if not _is_none(e)]
            if len(kept) == 1 and len(kept) < len(inner.elts):
                return _annotation_class(kept[0])
        return None
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _facts(cls: ast.ClassDef) -> ClassFacts:
    facts = ClassFacts(
        cls.name, bases=[b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]
    )
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            facts.attrs.add(stmt.target.id)
            held = _annotation_class(stmt.annotation)
            if held:
                facts.holds[stmt.target.id] = held
        elif isinstance(stmt, ast.Assign):
            facts.attrs.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.attrs.add(stmt.name)
            aliases: dict[str, str] = {}  # local -> the field of self it holds
            for n in ast.walk(stmt):
                if (
                    isinstance(n, ast.Assign)
                    and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name)
                    and isinstance(n.value, ast.Attribute)
                    and isinstance(n.value.value, ast.Name)
                    and n.value.value.id == "self"
                ):
                    aliases[n.targets[0].id] = n.value.attr
            for n in ast.walk(stmt):
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        if not isinstance(t, ast.Attribute):
                            continue
                        owner = t.value
                        if isinstance(owner, ast.Name) and owner.id == "self":
                            facts.attrs.add(t.attr)
                        elif isinstance(owner, ast.Name) and owner.id in aliases:
                            facts.nested.add((aliases[owner.id], t.attr))
                        elif (
                            isinstance(owner, ast.Attribute)
                            and isinstance(owner.value, ast.Name)
                            and owner.value.id == "self"
                        ):
                            facts.nested.add((owner.attr, t.attr))
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr":
                    facts.attrs.add("*")  # attributes set by name: anything may exist
        elif isinstance(stmt, ast.ClassDef):
            facts.attrs.add(stmt.name)
    if any(
        isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__getattr__" for s in cls.body
    ):
        facts.attrs.add("*")
    return facts


def _files(root: str) -> list[str]:
    out = []
    for sub in ("arguments", "trainer"):
        directory = os.path.join(root, "veomni", sub)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        out.extend(os.path.join(directory, n) for n in names if n.endswith(".py"))
    return out


def group_classes(path: str, tree: ast.Module | None = None) -> dict[str, ClassFacts] | None:
    """The classes of the tree ``path`` lives in (name -> facts, subclasses' attributes folded into their bases),
    or None when the tree has no argument dataclasses. With ``tree`` (the linted module, perhaps an unsaved
    buffer), its own classes count too and replace the on-disk copy of ``path``."""
    if not path or path.startswith("<"):
        return None
    root = veomni_root_of(path)
    if root is None:
        return None
    own = [s for s in tree.body if isinstance(s, ast.ClassDef)] if tree is not None else []
    this = os.path.realpath(path)
    stamps = []
    for f in _files(root):
        if tree is not None and os.path.realpath(f) == this:
            continue
        try:
            st = os.stat(f)
        except OSError:
            continue
        stamps.append((f, st.st_mtime_ns, st.st_size))
    if not own:
        return _read(tuple(stamps))
    classes: dict[str, ClassFacts] = {}
    for stmt in own:
        classes.setdefault(stmt.name, _facts(stmt))
    for f, mtime, size in stamps:
        for facts in _file_facts(f, mtime, size):
            if facts.name not in classes:
                classes[facts.name] = _copy(facts)
    return _link(classes)


def own_classes(tree: ast.Module) -> dict[str, ClassFacts] | None:
    """The argument classes a module defines itself (a standalone script or a file outside any tree), or None
    when it does not define all three groups."""
    classes = {s.name: _facts(s) for s in tree.body if isinstance(s, ast.ClassDef)}
    return _link(classes)


def _copy(facts: ClassFacts) -> ClassFacts:
    return ClassFacts(facts.name, set(facts.attrs), dict(facts.holds), list(facts.bases), set(facts.nested))


@functools.lru_cache(maxsize=64)
def _file_facts(f: str, mtime: int, size: int) -> tuple[ClassFacts, ...]:
    """One file's top-level classes, unlinked (never mutated: callers copy)."""
    parsed = load_file(f)  # the run's one parse of the file
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return ()
    return tuple(_facts(stmt) for stmt in tree.body if isinstance(stmt, ast.ClassDef))


@functools.lru_cache(maxsize=8)
def _read(stamps: tuple[tuple[str, int, int], ...]) -> dict[str, ClassFacts] | None:
    classes: dict[str, ClassFacts] = {}
    for f, mtime, size in stamps:
        for facts in _file_facts(f, mtime, size):
            if facts.name not in classes:
                classes[facts.name] = _copy(facts)
    return _link(classes)


def _link(classes: dict[str, ClassFacts]) -> dict[str, ClassFacts] | None:
    if not all(name in classes for name in _GROUPS.values()):
        return None
    for facts in list(classes.values()):
        for owner_field, attr in facts.nested:
            held = classes.get(facts.holds.get(owner_field, ""))
            if held is not None:
                held.attrs.add(attr)
    # a subclass's fields count for its bases (the trainer builds the subclass where the base is annotated),
    # and a base's fields for its subclasses
    changed = True
    while changed:
        changed = False
        for facts in classes.values():
            for base in facts.bases:
                parent = classes.get(base)
                if parent is None:
                    continue
                for target, source in ((parent, facts), (facts, parent)):
                    before = len(target.attrs) + len(target.holds)
                    target.attrs |= source.attrs
                    for k, v in source.holds.items():
                        target.holds.setdefault(k, v)
                    if len(target.attrs) + len(target.holds) != before:
                        changed = True
    return classes


def group_root(group: str) -> str | None:
    return _GROUPS.get(group)


def root_class(classes: dict[str, ClassFacts]) -> str | None:
    """The class the whole arguments object is (``VeOmniArguments``: fields ``model``, ``data`` and ``train``
    annotated with the group classes or their subclasses); its subclasses' fields (a trainer's own group,
    ``dpo_config``) are folded into it. None when the tree defines none."""

    def is_group(name: str | None, group: str) -> bool:
        seen: set[str] = set()
        while name and name not in seen:
            if name == group:
                return True
            seen.add(name)
            facts = classes.get(name)
            name = facts.bases[0] if facts is not None and facts.bases else None
        return False

    roots = [f for f in classes.values() if all(is_group(f.holds.get(g), c) for g, c in _GROUPS.items())]
    for facts in roots:  # the base-most one names the object in messages
        if not any(base in {r.name for r in roots} for base in facts.bases):
            return facts.name
    return roots[0].name if roots else None
