"""NPU415 loss-vocab-size."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from npu_lint.core.astutil import nodes_of, walk
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.semantics._shared import (
    LossRule,
    PatchedMethod,
    class_methods,
    loss_calls,
)
from npu_lint.veomni.upstream import (
    composite_config_fields,
    composite_text_only_fields,
    file_source_module,
)

# classes that hold a sub-config (or, for the pretrained base, serve every sub-model) whatever they inherit
_SUB_MODEL_PARTS = (
    "PreTrained",
    "Text",
    "Vision",
    "Visual",
    "Audio",
    "Encoder",
    "Decoder",
    "Talker",
    "Tower",
)


def _vocab_arg(call: ast.Call) -> ast.expr | None:
    return call_arg(call, 2, "vocab_size")


def _chain_root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _consults_text_config(func: ast.AST) -> bool:
    for node in walk(func):
        if isinstance(node, ast.Attribute) and node.attr in (
            "text_config",
            "get_text_config",
        ):
            return True
        if isinstance(node, ast.Constant) and node.value in (
            "text_config",
            "get_text_config",
        ):
            return True
    return False


def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _passed_params(call: ast.Call, helper: ast.FunctionDef, wanted: Callable[[ast.expr], bool]) -> set[str]:
    """Parameters of `helper` that `call` binds to an argument for which `wanted` holds."""
    positional = [a.arg for a in [*helper.args.posonlyargs, *helper.args.args]]
    out = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(positional) and wanted(arg):
            out.add(positional[i])
    names = {a.arg for a in [*helper.args.posonlyargs, *helper.args.args, *helper.args.kwonlyargs]}
    for kw in call.keywords:
        if kw.arg in names and wanted(kw.value):
            out.add(kw.arg)
    return out


def _field_reads(func: ast.AST, names: set[str]) -> list[tuple[ast.AST, str]]:
    """`<name>.<field>` loads and `getattr(<name>, "<field>"...)` of the given local names."""
    out: list[tuple[ast.AST, str]] = []
    for node in walk(func):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            out.append((node, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in names
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            out.append((node, node.args[1].value))
    return out


def _generic_config(node: ast.expr) -> bool:
    """`<model>.config` where `<model>` is a parameter or local, not `self`/`cls`."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "config"
        and _chain_root(node) not in (None, "self", "cls")
    )


def _self_config(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "config"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _defaulted_model_config_reads(
    func: ast.FunctionDef | ast.AsyncFunctionDef, config_names: Iterable[str] = ()
) -> list[tuple[ast.Call, str]]:
    """`getattr(<model>.config, "<field>", <default>)` where `<model>` is reached from a parameter or a local of
    the function, not `self`/`cls` (a model handed to, or built by, code that serves every model type), or
    through a local bound to that config or a parameter in `config_names` (given such a config by a caller)."""
    aliases = set(config_names)
    for node in walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if _generic_config(node.value):
                aliases.add(node.targets[0].id)
    out = []
    for node in walk(func):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            continue
        obj = node.args[0]
        if _generic_config(obj) or (isinstance(obj, ast.Name) and obj.id in aliases):
            out.append((node, node.args[1].value))
    return out


def _text_config_locals(func: ast.AST) -> set[str]:
    """Local names bound (directly or through another such local) to the text sub-config or a field of it."""
    bound: dict[str, list[ast.expr]] = {}
    for node in walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            bound.setdefault(node.target.id, []).append(node.value)
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in bound.items():
            if name in found:
                continue
            for value in values:
                text = ast.unparse(value)
                names = {n.id for n in walk(value) if isinstance(n, ast.Name)}
                if "text_config" in text or names & found:
                    found.add(name)
                    changed = True
                    break
    return found


class LossVocabSize(LossRule):
    code = "NPU415"
    name = "loss-vocab-size"
    summary = "A vision-language model reads a text-model field (the vocabulary size, an MoE coefficient) from the composite multimodal config."
    why = (
        "A vision-language model's config nests the language model's: the vocabulary size is "
        "`config.text_config.vocab_size`, and the top-level config has no `vocab_size` (an AttributeError) or a "
        "stale one. The loss reshapes logits to `[-1, vocab_size]`: a wrong size mixes tokens across rows or "
        "fails. The expression is compared with the one the upstream forward passes to its loss."
        " Beyond the loss, every `self.config.<field>` read in a method of a class whose config (its `config:` annotation upstream) is a composite config with a `text_config` is checked: a field the composite config does not define but its text sub-config does is reported (the config classes are read from the installed transformers source). Code that handles any model (`getattr(<model>.config, '<field>', <default>)`, the model a parameter or a local, not `self`) and reads a field that some composite config lacks while its text sub-config defines it, without consulting the text sub-config anywhere in the function, is reported too: on such a config the default silently wins. Configs are followed through a local alias and into a module-level helper the file hands them to (`helper(model.config)`; for a composite model class, `helper(self.config)`, whose reads of text-model fields are then reported in the helper)."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
                return loss, logits
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeForConditionalGeneration.forward")
            def qwen3_vl_moe_forward_patched(self, input_ids=None, labels=None, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                loss = outputs.loss + self.config.router_aux_loss_coef * outputs.aux_loss
                return loss
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeForConditionalGeneration.forward")
            def qwen3_vl_moe_forward_patched(self, input_ids=None, labels=None, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                loss = outputs.loss + self.config.text_config.router_aux_loss_coef * outputs.aux_loss
                return loss
            """,
            path="veomni/models/transformers/qwen3_vl_moe/qwen3_vl_moe_gpu_patch_gen_config.py",
            title="a text-model field read from the composite config (any method, not only the loss)",
        ),
        Example(
            """
            def share_output_head(net):
                if getattr(net.backbone.config, "tie_word_embeddings", True):
                    net.get_output_embeddings().weight = net.get_input_embeddings().weight
            """,
            path="veomni/models/weight_sharing.py",
            title="a helper serving every model reads a text-model field from the outer config, with a default",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                logits = self.lm_head(hidden_states)
                text_cfg = self.config.get_text_config()
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=text_cfg.vocab_size)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="the text sub-config read through a local",
        ),
        Example(
            """
            def share_output_head(net):
                cfg = net.backbone.config
                inner = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
                if getattr(cfg, "tie_word_embeddings", True) and getattr(inner, "tie_word_embeddings", True):
                    net.get_output_embeddings().weight = net.get_input_embeddings().weight
            """,
            path="veomni/models/weight_sharing.py",
            title="the helper consults the text sub-config as well",
        ),
    )
    fix_safety = "Safe: the argument becomes the expression the upstream forward passes (`self.config.text_config.vocab_size`)."

    def finish(self) -> None:
        self._reported: set[tuple[int, int]] = set()
        super().finish()
        self._composite_fields()
        self._generic_model_config_reads()

    def _generic_model_config_reads(self) -> None:
        """Code that handles any model reads a text-model field from `<model>.config` with a default and
        never consults the text sub-config: on a composite config without the field the default wins."""
        ctx = self.ctx
        if "getattr" not in ctx.source.text or ".config" not in ctx.source.text:
            return
        # the reads are `getattr(x, "<field>", default)` calls: functions without one are skipped (one walk)
        lines = [
            n.lineno
            for n in nodes_of(ctx.tree, ast.Call)
            if isinstance(n.func, ast.Name)
            and n.func.id == "getattr"
            and len(n.args) == 3
            and isinstance(n.args[1], ast.Constant)
        ]
        if not lines:
            return
        fields: frozenset[str] | None = None
        helpers = _module_functions(ctx.tree)
        receives: dict[
            str, set[str]
        ] = {}  # helper -> its parameters given `<model>.config` somewhere in the file
        for call in nodes_of(ctx.tree, ast.Call):
            if isinstance(call.func, ast.Name) and call.func.id in helpers:
                passed = _passed_params(call, helpers[call.func.id], _generic_config)
                receives.setdefault(call.func.id, set()).update(passed)
        for func in nodes_of(ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            end = func.end_lineno or func.lineno
            if not any(func.lineno <= line <= end for line in lines):
                continue
            own = receives.get(func.name, set()) if helpers.get(func.name) is func else set()
            reads = _defaulted_model_config_reads(func, own)
            if not reads or _consults_text_config(func):
                continue
            if fields is None:
                fields = composite_text_only_fields()
            for call, field in reads:
                key = (call.lineno, call.col_offset)
                if field not in fields or key in self._reported:
                    continue
                self._reported.add(key)
                cfg = ast.unparse(call.args[0])
                self.report(
                    call,
                    f"`{cfg}` may be a composite multimodal config that lacks `{field}` (its text sub-config "
                    f"defines it): the default `{ast.unparse(call.args[2])}` then wins whatever the language "
                    f"model's config says; read `{field}` from `{cfg}.get_text_config(decoder=True)` too",
                )

    def _composite_fields(self) -> None:
        """`self.config.<field>` in a class whose config is a composite multimodal config that does not define
        the field (its text sub-config does), in every method of a spec or generated file."""
        ctx = self.ctx
        if "config" not in ctx.source.text:
            return
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        if module is None or not module.startswith("transformers.models."):
            return
        helpers = _module_functions(ctx.tree)
        for cls, func in class_methods(ctx.tree):
            if any(part in cls for part in _SUB_MODEL_PARTS):
                continue  # built with a sub-config (a tower, the text model) or shared by all of them
            found = composite_config_fields(module, cls)
            if found is None:
                continue
            cfg, mine, text = found
            params = {a.arg for a in func.args.args}
            for node in walk(func):
                if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
                    continue
                base = node.value
                is_config = (
                    isinstance(base, ast.Attribute)
                    and base.attr == "config"
                    and isinstance(base.value, ast.Name)
                    and base.value.id == "self"
                ) or (
                    func.name == "__init__"
                    and isinstance(base, ast.Name)
                    and base.id == "config"
                    and "config" in params
                )
                if not is_config or node.attr in mine or node.attr not in text:
                    continue
                key = (node.lineno, node.col_offset)
                if key in self._reported:
                    continue
                self._reported.add(key)
                self.report(
                    node,
                    f"`{cfg}` (the config of `{cls}`) has no `{node.attr}`: it is a field of its text sub-config; "
                    f"read `config.text_config.{node.attr}` (or `config.get_text_config().{node.attr}`)",
                    make_fix(
                        f"Read `text_config.{node.attr}`",
                        [self.ctx.replace(node, f"{ast.unparse(base)}.text_config.{node.attr}")],
                        Applicability.SAFE,
                    ),
                )
            for call in walk(func):
                if not (
                    isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in helpers
                ):
                    continue
                helper = helpers[call.func.id]
                passed = _passed_params(call, helper, _self_config)
                for read, field in _field_reads(helper, passed):
                    key = (read.lineno, read.col_offset)
                    if field in mine or field not in text or key in self._reported:
                        continue
                    self._reported.add(key)
                    self.report(
                        read,
                        f"`{helper.name}` is given `self.config` by `{cls}.{func.name}` (line {call.lineno}), a "
                        f"`{cfg}` that has no `{field}`: it is a field of its text sub-config; pass "
                        f"`self.config.get_text_config()` or read `text_config.{field}`",
                    )

    def check(self, patched: PatchedMethod) -> None:
        expected = None
        for call in loss_calls(patched.upstream):
            arg = _vocab_arg(call)
            if arg is not None and "text_config" in ast.unparse(arg):
                expected = ast.unparse(arg)
                break
        if expected is None:
            return
        text_locals = _text_config_locals(patched.func)
        for call in loss_calls(patched.func):
            arg = _vocab_arg(call)
            if arg is None or "text_config" in ast.unparse(arg):
                continue
            if isinstance(arg, ast.Name):
                continue  # a local computed earlier: not judged
            if any(isinstance(n, ast.Name) and n.id in text_locals for n in walk(arg)):
                continue  # read through a local bound to the text sub-config (`text_cfg = self.config.get_text_config()`)
            if (arg.lineno, arg.col_offset) in self._reported:
                continue
            self._reported.add((arg.lineno, arg.col_offset))
            fix = make_fix(
                f"Pass `{expected}`",
                [self.ctx.replace(arg, expected)],
                Applicability.SAFE,
            )
            self.report(
                arg,
                f"`{ast.unparse(arg)}` is not the language model's vocabulary size; the upstream forward passes "
                f"`{expected}`",
                fix,
            )
