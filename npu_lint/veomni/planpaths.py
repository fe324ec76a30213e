"""Parallel-plan paths: which model a package's ``ParallelPlan`` is applied to, and whether a plan key's module
path exists in that model.

A model package's ``parallel_plan.py`` (expert-parallel shards, FSDP no-shard modules) names parameters by
their fully qualified name in the model the trainer builds (``model.language_model.layers.*.mlp.experts.
gate_up_proj``); ``ParallelPlan.apply`` matches the patterns against ``named_parameters()``. A pattern whose
module path does not exist in the model matches nothing, silently: the experts are never sharded.

* ``plan_roots(plan_path)``: the ``(upstream module, class)`` pairs whose ``get_parallel_plan`` a patch spec
  of the same package binds (``"Qwen3_5MoeForConditionalGeneration.get_parallel_plan"``).
* ``missing_segment(module, cls, segments)``: the first module-path segment no ``__init__`` of the class chain
  assigns, walking the upstream classes (``self.model = XModel(config)``, ``self.layers = nn.ModuleList(...)``),
  or None when the path exists or the walk cannot follow it (an attribute of an unknown class, a patched
  ``__init__``). Only the segments before the first wildcard are walked.
"""

from __future__ import annotations

import ast
import functools
import os

from npu_lint.core.astutil import last_name
from npu_lint.veomni.patchgen import effective_patches, load_spec, package_specs
from npu_lint.veomni.upstream import upstream_class, upstream_mro

__all__ = ["missing_segment", "plan_roots"]

_FRAMEWORK = frozenset(
    {"transformers.modeling_utils", "transformers.generation.utils", "transformers.integrations.peft"}
)
_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict"})


def plan_roots(plan_path: str) -> list[tuple[str, str, Inits]]:
    """``(upstream module, class, the spec's __init__ overrides)`` for every class whose ``get_parallel_plan`` a
    spec of ``plan_path``'s package overrides (the plan module's callers). The overrides map a class name to
    the replacing ``__init__`` (None when the spec changes the class in a way the walk cannot read)."""
    package_dir = os.path.dirname(os.path.abspath(plan_path))
    return list(_roots(package_dir, _stamps(package_dir)))


def _stamps(package_dir: str) -> tuple[tuple[str, int, int], ...]:
    """The package's specs with their stat stamps: an edited spec (in the editor, between runs) is read again."""
    out = []
    for spec_path in package_specs(package_dir):
        try:
            st = os.stat(spec_path)
        except OSError:
            continue
        out.append((str(spec_path), st.st_mtime_ns, st.st_size))
    return tuple(out)


Inits = tuple[tuple[str, "ast.FunctionDef | None"], ...]


@functools.lru_cache(maxsize=64)
def _roots(package_dir: str, stamps: tuple[tuple[str, int, int], ...]) -> tuple[tuple[str, str, Inits], ...]:
    out: list[tuple[str, str, Inits]] = []
    seen: set[tuple[str, str]] = set()
    for spec_path in package_specs(package_dir):
        spec = load_spec(spec_path)
        if spec is None or not spec.source_module:
            continue
        patches = effective_patches(spec)
        inits: dict[str, ast.FunctionDef | None] = {}
        for p in patches:
            if p.kind in ("class_replacement", "init_modification"):
                inits[p.cls] = None
            elif p.method == "__init__":
                ref = spec.resolve(p.replacement) if p.replacement else None
                node = ref.node if ref is not None else None
                inits[p.cls] = node if isinstance(node, ast.FunctionDef) else None
        for patch in patches:
            if patch.method == "get_parallel_plan" and (spec.source_module, patch.cls) not in seen:
                seen.add((spec.source_module, patch.cls))
                out.append((spec.source_module, patch.cls, tuple(inits.items())))
    return tuple(out)


def missing_segment(module: str, cls: str, segments: list[str], inits: Inits = ()) -> int | None:
    """The index of the first of ``segments`` (a plan key split on dots) that the model rooted at upstream
    ``module.cls`` does not have, or None (the path exists, or the walk cannot tell). ``inits``: the
    package spec's ``__init__`` overrides (``plan_roots``)."""
    overrides = dict(inits)
    current: tuple[str, str] | None = (module, cls)
    for i, seg in enumerate(segments):
        if seg == "*" or any(c in seg for c in "*?[") or current is None:
            return None
        if current[1] in overrides:
            init = overrides[current[1]]
            if init is None:
                return None
            attrs = _attributes_of(current[0], current[1], init)
        else:
            attrs = _attributes(*current)
        if attrs is None:
            return None
        if seg not in attrs:
            return i
        current = attrs[seg]
    return None


@functools.lru_cache(maxsize=256)
def _attributes(module: str, cls: str) -> dict[str, tuple[str, str] | None] | None:
    return _attributes_of(module, cls, None)


def _attributes_of(
    module: str, cls: str, override: ast.FunctionDef | None
) -> dict[str, tuple[str, str] | None] | None:
    """The attributes ``self.<name> = ...`` the class chain's ``__init__`` methods assign, each with the
    upstream class it holds when that is known (a container's element class for ``nn.ModuleList([...])``).
    None when the class, or a base the reader cannot follow that may assign attributes, is unknown."""
    mro = upstream_mro(module, cls)
    if not mro:
        return None
    out: dict[str, tuple[str, str] | None] = {}
    for n, entry in enumerate(mro):
        if entry.node is None:
            if entry.name not in ("Module", "object") and not entry.name.endswith("Mixin"):
                return None
            continue
        if entry.module in _FRAMEWORK:  # PreTrainedModel and its mixins hold no submodules of the model
            continue
        for item in entry.node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__getattr__", "__setattr__"):
                return None
        init = next(
            (s for s in entry.node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
        )
        if n == 0 and override is not None:
            init = override
        if init is None:
            continue
        for node in ast.walk(init):
            if isinstance(node, ast.Call) and last_name(node.func) in (
                "setattr",
                "add_module",
                "register_module",
            ):
                return None
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and target.attr not in out
                ):
                    out[target.attr] = _held_class(entry.module or module, value)
    return out


def _held_class(module: str, value: ast.expr | None) -> tuple[str, str] | None:
    if not isinstance(value, ast.Call):
        return None
    name = last_name(value.func)
    if name in ("_from_config", "from_config", "from_pretrained") and isinstance(value.func, ast.Attribute):
        name = last_name(value.func.value)
    if name in _CONTAINERS and value.args:
        arg = value.args[0]
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            return _held_class(module, arg.elt)
        if isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
            return _held_class(module, arg.elts[0])
        return None
    if name is None or not name[:1].isupper():
        return None
    found = upstream_class(module, name)
    return (found[0], found[1].name) if found is not None else None
