"""NPU705 checkpoint-conversion-mapping."""

from __future__ import annotations

import ast
from collections.abc import Callable

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.multimodal._shared import PatchedMethod, def_span
from npu_lint.veomni.registration import device_module
from npu_lint.veomni.selection import device_probe
from npu_lint.veomni.upstream import patched_methods, super_inits, upstream_class_method, upstream_mro


def _module_attrs(init: ast.AST) -> dict[str, str]:
    """`self.<attr> = <Class>(...)` / `<Class>._from_config(...)` / `nn.<Layer>(...)`: attr -> class name."""
    out: dict[str, str] = {}
    for node in _walk(init):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "_from_config"
            and isinstance(func.value, ast.Name)
        ):
            cls = func.value.id
        elif isinstance(func, ast.Name):
            cls = func.id
        elif isinstance(func, ast.Attribute):
            cls = func.attr
        else:
            continue
        if not cls[:1].isupper():
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                out.setdefault(target.attr, cls)
    return out


def _built_attrs(module: str, cls: str, init: ast.FunctionDef, owner: str | None = None) -> dict[str, str]:
    """What running ``init`` (an ``__init__`` of ``owner``, default ``cls``) builds on an instance of upstream
    ``module.cls``: its own assignments and those of every ``__init__`` its ``super().__init__`` calls reach in
    the class's MRO (``GenericForSequenceClassification.__init__`` builds ``score`` for
    ``Qwen3ForSequenceClassification``)."""
    out = _module_attrs(init)
    for inherited in super_inits(module, cls, init, owner):
        for attr, kind in _module_attrs(inherited).items():
            out.setdefault(attr, kind)
    return out


def _owner(module: str, cls: str, init: ast.FunctionDef) -> str | None:
    """The class of ``module.cls``'s MRO whose body holds ``init``."""
    for entry in upstream_mro(module, cls):
        if entry.node is not None and any(s is init for s in entry.node.body):
            return entry.name
    return None


def _prechecked(text: str) -> bool:
    return "__init__" in text or ("REGISTRY" in text and ".register(" in text)


def _registered_loaders(tree: ast.Module) -> list[ast.FunctionDef]:
    return [
        stmt
        for stmt in tree.body
        if isinstance(stmt, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call)
            and isinstance(d.func, ast.Attribute)
            and d.func.attr == "register"
            and "REGISTRY" in ast.unparse(d.func.value)
            for d in stmt.decorator_list
        )
    ]


def _attr_targets(stmt: ast.Assign, owner: Callable[[str], bool]) -> list[ast.Attribute]:
    """The `<name>.<attr> = ...` targets of ``stmt`` whose name ``owner`` accepts."""
    return [
        t
        for t in stmt.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and owner(t.value.id)
    ]


def _loader(func: ast.FunctionDef) -> tuple[set[str], dict[str, list[tuple[str, ast.AST]]]]:
    """One walk of a registered loader: (the generated classes it returns -- names imported from a
    ``patched_modeling_*`` module and returned by name --, the class attributes it attaches: `Cls.attr = ...`, or
    for each class of a literal tuple it loops over, attr -> [(class, the statement or the loop's tuple)])."""
    generated: set[str] = set()
    returns: list[str] = []
    hooks: dict[str, list[tuple[str, ast.AST]]] = {}
    for node in _walk(func):
        if isinstance(node, ast.ImportFrom):
            if (node.module or "").rsplit(".", 1)[-1].startswith("patched_modeling_"):
                generated.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Return):
            if isinstance(node.value, ast.Name):
                returns.append(node.value.id)
        elif (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and isinstance(node.iter, (ast.Tuple, ast.List))
        ):
            classes = [e.id for e in node.iter.elts if isinstance(e, ast.Name)]
            loop_var = node.target.id
            for stmt in node.body:
                if isinstance(stmt, ast.Assign):
                    for target in _attr_targets(stmt, loop_var.__eq__):
                        hooks.setdefault(target.attr, []).extend((c, node.iter) for c in classes)
        elif isinstance(node, ast.Assign):
            for target in _attr_targets(node, lambda name: name[:1].isupper()):
                hooks.setdefault(target.attr, []).append((target.value.id, node))  # type: ignore[attr-defined]
    return {name for name in returns if name in generated}, hooks


def _checkpoint_hook(attr: str) -> bool:
    """A class hook that loading a checkpoint reads: a tensor converter, a key conversion mapping."""
    lowered = attr.lower()
    return "checkpoint" in lowered or lowered.endswith("mapping")


def _expr_nodes(test: ast.expr) -> list[ast.expr]:
    return [n for n in ast.walk(test) if isinstance(n, ast.expr)]


def _one_word_apart(a: str, b: str) -> bool:
    """``_convert_x_model_targets`` / ``_convert_x_wrapped_targets``: same words but one."""
    wa, wb = a.strip("_").split("_"), b.strip("_").split("_")
    return len(wa) == len(wb) >= 3 and sum(x != y for x, y in zip(wa, wb, strict=True)) == 1


class CheckpointConversionMapping(Rule):
    code = "NPU705"
    name = "checkpoint-conversion-mapping"
    summary = (
        "A patched `__init__` renames or re-nests submodules without a `_checkpoint_conversion_mapping`, or a "
        "registered loader attaches checkpoint hooks to some of the classes it returns and not to another (or "
        "not to a generated class it equips with a hook of its own)."
    )
    why = (
        "Checkpoint keys are module attribute paths (`model.language_model.layers.0...`). A patched "
        "`ForConditionalGeneration`/`Model.__init__` that stores a submodule under another name, or builds a "
        "nested wrapper of another class whose own attribute names differ, changes those paths: loading the "
        "upstream checkpoint leaves the renamed weights at their random initialisation (transformers only warns "
        "about missing keys). A `_checkpoint_conversion_mapping` (regex -> replacement) must map the upstream "
        "prefixes to the new ones. The attribute paths of the upstream and the patched class trees are compared "
        "statically (one level, and one nested level for a submodule whose class changed), each side with what "
        "its `super().__init__` calls build through the class's MRO, read from the transformers source."
        " A registered loader in a package `__init__.py` that attaches checkpoint hooks (a tensor converter, a "
        "key mapping: `Cls._create_checkpoint_tensor_converter = ...`) to several of the generated classes it can "
        "return must attach them to every one it returns: a checkpoint whose architecture selects the class "
        "without the hook loads unconverted (per-expert weights never fused, keys never renamed). A generated "
        "class the loader equips with a hook of its own (a text model given its LoRA-target converter) is built "
        "from a checkpoint too, so it needs the checkpoint hooks (`*checkpoint*`, `*_mapping`) its siblings get."
    )
    bad = (
        Example(
            """
            from torch import nn
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.__init__")
            def qwen3_vl_init_patched(self, config):
                super().__init__(config)
                self.backbone = Qwen3VLModel(config)
                self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
                self.post_init()
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="`model` renamed to `backbone`",
        ),
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy_omni")
            def register_toy_omni_modeling(architecture: str):
                from .checkpoint_tensor_converter import create_converter
                from .generated.patched_modeling_toy_omni_gpu import ToyOmniForConditionalGeneration, ToyOmniThinker, ToyOmniText

                for model_cls in (ToyOmniForConditionalGeneration, ToyOmniThinker):
                    model_cls._create_checkpoint_tensor_converter = staticmethod(create_converter)
                if "Text" in architecture:
                    return ToyOmniText
                if "Thinker" in architecture:
                    return ToyOmniThinker
                return ToyOmniForConditionalGeneration
            """,
            path="veomni/models/transformers/toy_omni/__init__.py",
            title="the text model the loader returns gets no checkpoint converter",
        ),
    )
    good = (
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy_omni")
            def register_toy_omni_modeling(architecture: str):
                from .checkpoint_tensor_converter import create_converter
                from .generated.patched_modeling_toy_omni_gpu import ToyOmniForConditionalGeneration, ToyOmniThinker, ToyOmniText

                for model_cls in (ToyOmniForConditionalGeneration, ToyOmniThinker, ToyOmniText):
                    model_cls._create_checkpoint_tensor_converter = staticmethod(create_converter)
                if "Text" in architecture:
                    return ToyOmniText
                if "Thinker" in architecture:
                    return ToyOmniThinker
                return ToyOmniForConditionalGeneration
            """,
            path="veomni/models/transformers/toy_omni/__init__.py",
        ),
        Example(
            """
            from torch import nn
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.__init__")
            def qwen3_vl_init_patched(self, config):
                super().__init__(config)
                self._checkpoint_conversion_mapping = {"^model": "backbone"}
                self.backbone = Qwen3VLModel(config)
                self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
                self.post_init()
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from functools import partial

            from transformers.loss.loss_utils import ForSequenceClassificationLoss
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3ForSequenceClassification.__init__")
            def qwen3_seq_cls_init_patched(self, config):
                super(Qwen3ForSequenceClassification, self).__init__(config)
                self.loss_op = LossOp("cross_entropy_loss")
                self.loss_function = partial(ForSequenceClassificationLoss, op=self.loss_op)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
            title="`super()` runs `GenericForSequenceClassification.__init__`, which still builds `model` and `score`",
        ),
    )
    fix_safety = "No fix: the mapping's regexes depend on the checkpoint's layout."

    requires = (_prechecked,)
    node_types = ()

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        if "REGISTRY" in text and ".register(" in text:
            self._loader_hooks()
        if "__init__" not in text:
            return
        mapping = (
            [n.value for n in _walk(ctx.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            if "_checkpoint_conversion_mapping" in text
            else None
        )
        for patched in patched_methods(ctx.tree, text, "__init__", ("",), path=ctx.source.path):
            self._check(patched, mapping)

    def _loader_hooks(self) -> None:
        """A registered loader that attaches checkpoint hooks (a tensor converter, a key mapping) to several of the
        generated classes it can return must attach them to every one: the class built for a checkpoint whose
        architecture selects it otherwise loads without them (per-expert weights never fused, keys never
        renamed)."""
        for func in _registered_loaders(self.ctx.tree):
            returned, hooks = _loader(func)
            self._shared_hook_values(func, hooks)
            if any("ForConditionalGeneration" in name for name in self._generated(func)):
                self._mixed_device_modules(func)  # a multimodal loader (the dispatch side is NPU237's)
            hooked = {c for given in hooks.values() for c, _ in given}
            if len(returned | (hooked & self._generated(func))) < 3:
                continue
            generated = self._generated(func)
            # the classes the loader builds for: those it returns and the generated ones it equips with a hook of
            # their own (a text model given its LoRA-target converter is built from a checkpoint too)
            prepared = returned | (hooked & generated)
            checkpointed = {c for a, g in hooks.items() if _checkpoint_hook(a) for c, _w in g}
            found: dict[int, tuple[ast.AST, list[str], set[str], str, str]] = {}
            for attr, given in sorted(hooks.items()):
                classes = {c for c, _ in given}
                if len(classes & (returned | generated)) < 2:
                    continue
                # a hook given one value (a shared converter) is owed to every class built from a checkpoint; a
                # hook written per class (each wrapper's own key mapping) to an equipped class only when the loader
                # gives it no checkpoint hook at all (one that has its converter needs no wrapper's key renaming)
                shared = (
                    len({ast.unparse(w.value) if isinstance(w, ast.Assign) else "" for _c, w in given}) == 1
                )
                owed = returned
                if _checkpoint_hook(attr):
                    owed = returned | {c for c in prepared if shared or c not in checkpointed}
                missing = sorted(owed - classes)
                if not missing:
                    continue
                other = next(
                    (a for a, g in sorted(hooks.items()) if a != attr and missing[0] in {c for c, _ in g}), ""
                )
                role = (
                    "which it also returns" if missing[0] in returned else f"which it also equips (`{other}`)"
                )
                at = next(
                    (where for c, where in given if isinstance(where, (ast.Tuple, ast.List))), given[0][1]
                )
                entry = found.setdefault(id(at), (at, [], classes & prepared, missing[0], role))
                entry[1].append(attr)
            for at, attrs, classes, missing, role in found.values():
                named = ", ".join(f"`{a}`" for a in attrs)
                self.report(
                    at,
                    f"`{func.name}` attaches {named} to {', '.join(f'`{c}`' for c in sorted(classes))} but not to "
                    f"`{missing}`, {role}: a checkpoint whose architecture selects `{missing}` loads "
                    "without that hook (weights not converted, keys not mapped)",
                )

    def _generated(self, func: ast.FunctionDef) -> set[str]:
        """The names ``func`` imports from a generated ``patched_modeling_*`` module."""
        return {
            a.asname or a.name
            for node in _walk(func)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").rsplit(".", 1)[-1].startswith("patched_modeling_")
            for a in node.names
        }

    def _mixed_device_modules(self, func: ast.FunctionDef) -> None:
        """A device branch of the loader (``if IS_NPU_AVAILABLE:`` and its ``else``) that imports some of the
        classes it returns from the other device's generated module: every class a loader returns comes from the
        module its device test chose."""
        for node in _walk(func):
            if not isinstance(node, ast.If):
                continue
            on_npu = next((p for p in map(device_probe, _expr_nodes(node.test)) if p is not None), None)
            if on_npu is None:
                continue
            for branch, npu in ((node.body, on_npu), (node.orelse, not on_npu)):
                imports = [
                    (stmt, device_module(stmt))
                    for stmt in branch
                    if isinstance(stmt, ast.ImportFrom)
                    and "patched_modeling_" in ast.unparse(stmt)
                    and device_module(stmt) is not None
                ]
                want = "npu" if npu else "gpu"
                if not any(kind == want for _, kind in imports):
                    continue  # an inverted switch is NPU508's, a lone import another rule's
                for stmt, kind in imports:
                    if kind == want:
                        continue
                    names = ", ".join(f"`{a.asname or a.name}`" for a in stmt.names)
                    self.report(
                        stmt,
                        f"on {'Ascend' if npu else 'non-Ascend'} hosts `{func.name}` builds {names} from the "
                        f"{kind.upper()} generated module while the other classes it returns come from the "
                        f"{want.upper()} one: take every class from the module the device test chose",
                    )

    def _shared_hook_values(self, func: ast.FunctionDef, hooks: dict[str, list[tuple[str, ast.AST]]]) -> None:
        """Per-class hooks set one by one (`A._hook = f_a`, `B._hook = f_b`, ...): two classes given the same
        module-level function while a sibling function defined beside it for that hook is referenced nowhere --
        the class that should get the unused one gets its sibling's (another module prefix, another layout)."""
        tree = self.ctx.tree
        defined = {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}
        loaded = {n.id for n in _walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unused = defined - loaded
        if not unused:
            return
        for attr, given in sorted(hooks.items()):
            values: dict[str, list[tuple[str, ast.AST]]] = {}
            for cls, where in given:
                if not isinstance(where, ast.Assign):
                    continue
                names = [n.id for n in ast.walk(where.value) if isinstance(n, ast.Name) and n.id in defined]
                if len(names) == 1:
                    values.setdefault(names[0], []).append((cls, where))
            texts = {ast.unparse(where.value) for _c, where in given if isinstance(where, ast.Assign)}
            if len(texts) < 2:
                continue  # one function for every class is a shared hook, not a per-class one
            for used, sites in sorted(values.items()):
                if len(sites) < 2:
                    continue
                sibling = next((u for u in sorted(unused) if _one_word_apart(u, used)), None)
                if sibling is None:
                    continue
                cls, where = sites[-1]
                self.report(
                    where,
                    f"`{func.name}` gives `{attr}` the same `{used}` to "
                    f"{', '.join(f'`{c}`' for c, _ in sites)} while `{sibling}`, defined beside it for another "
                    f"class, is used nowhere: `{cls}` probably needs `{sibling}` (its own module prefix)",
                )

    def _nested(self, patched: PatchedMethod, cls: str) -> dict[str, str] | None:
        init = upstream_class_method(patched.module, cls, "__init__")
        if init is not None:
            return _built_attrs(patched.module, cls, init, _owner(patched.module, cls, init))
        for node in self.ctx.tree.body:  # a class the file defines itself
            if isinstance(node, ast.ClassDef) and node.name == cls:
                init = next(
                    (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
                )
        return _module_attrs(init) if init is not None else None

    def _check(self, patched: PatchedMethod, mapping: list[str] | None) -> None:
        module, cls = patched.module, patched.cls
        before = _built_attrs(module, cls, patched.upstream, _owner(module, cls, patched.upstream))
        after = _built_attrs(module, cls, patched.func)
        if not before or not after:
            return
        lost = sorted(set(before) - set(after))
        new = sorted(set(after) - set(before))
        renamed: list[tuple[str, str]] = []
        if lost and new:
            renamed.extend((old, ", ".join(new)) for old in lost)
        for attr in sorted(set(before) & set(after)):
            if before[attr] == after[attr]:
                continue
            inner_before = self._nested(patched, before[attr])
            inner_after = self._nested(patched, after[attr])
            if not inner_before or not inner_after:
                continue
            gone = sorted(set(inner_before) - set(inner_after))
            added = sorted(set(inner_after) - set(inner_before))
            if gone and added:
                renamed.extend((f"{attr}.{g}", ", ".join(f"{attr}.{a}" for a in added)) for g in gone)
        for old, new_paths in renamed:
            leaf = old.split(".")[-1]
            if mapping is not None and any(leaf in s for s in mapping):
                continue
            head = new_paths.split(", ")[0].split(".")[0]
            at = next(
                (
                    n
                    for n in _walk(patched.func)
                    if isinstance(n, ast.Assign)
                    and any(
                        isinstance(t, ast.Attribute)
                        and t.attr == head
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        for t in n.targets
                    )
                ),
                None,
            )
            self.report(
                at if at is not None else def_span(self.ctx, patched.func),
                f"`{patched.cls}.__init__` moves the upstream checkpoint keys `{old}.*` (now {new_paths}) and no "
                "`_checkpoint_conversion_mapping` maps them: those weights load as random initialisation",
            )
