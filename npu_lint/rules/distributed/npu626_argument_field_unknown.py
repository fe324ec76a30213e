"""NPU626 argument-field-unknown."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name, nodes_of
from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.argfields import group_classes, group_root, own_classes, root_class


def _is_self(node: ast.AST) -> bool:
    """``self`` or one attribute of it (``self.base``)."""
    if isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _chain(node: ast.Attribute) -> list[str] | None:
    """``args.train.accelerator.fsdp_config`` / ``self.args.train.seed`` / ``self.base.args.dpo_config`` (a
    trainer's composed base trainer) -> ["train", "accelerator", ...]."""
    parts: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
        if isinstance(cur, ast.Name) and cur.id == "args":
            break
        if isinstance(cur, ast.Attribute) and cur.attr == "args" and _is_self(cur.value):
            break
    else:
        return None
    if not isinstance(cur, (ast.Name, ast.Attribute)):
        return None
    parts.reverse()
    return parts


def _trainer_args(node: ast.Attribute) -> bool:
    """Whether the chain is rooted at a trainer's ``self.args`` / ``self.base.args``."""
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        if cur.attr == "args" and _is_self(cur.value):
            return True
        cur = cur.value
    return False


def _self_chain(node: ast.Attribute) -> list[str] | None:
    """``self.data.dataloader_batch_size`` -> ["data", "dataloader_batch_size"]; None for other roots."""
    name = dotted_name(node)
    return name.split(".")[1:] if name is not None and name.startswith("self.") else None


class ArgumentFieldUnknown(Rule):
    code = "NPU626"
    name = "argument-field-unknown"
    summary = (
        "A trainer reads a configuration field (`args.train.enable_mixed_precision`) that the tree's argument "
        "dataclasses do not define."
    )
    why = (
        "Trainers and tasks read the parallel and precision setup as attribute chains on the parsed "
        "`VeOmniArguments` (`args.train.accelerator.fsdp_config.mixed_precision.enable`). Refactors move fields "
        "(`train.enable_mixed_precision` became `train.accelerator.fsdp_config.mixed_precision.enable`); a "
        "chain left on the old name raises `AttributeError` when the model is built, or, where someone re-adds "
        "the field to silence it, reads a value out of step with the FSDP `MixedPrecision` policy (weights "
        "loaded in one dtype, sharded in another). Each chain is resolved on the tree's own dataclasses "
        "(`veomni/arguments/`, with the trainers' subclasses, whose fields count for every trainer), through "
        "the class each field is annotated with; a class with `__getattr__` or `setattr` ends the walk. A method of an "
        "argument class is held to the same fields: `self.data.dataloader_batch_size` in `VeOmniArguments` is "
        "walked from the class `data` is annotated with (a field of `TrainingArguments` read there raises when "
        "the trainer computes its step count), and a trainer's `self.args.<field>` (or its composed base "
        "trainer's `self.base.args`) is walked from the class holding the three groups, its subclasses' fields "
        'included (`getattr(self.args, "dpo", None) and self.args.dpo.average_log_prob` after `dpo` became '
        "`dpo_config` is always falsy)."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass, field


            @dataclass
            class MixedPrecisionConfig:
                enable: bool = True


            @dataclass
            class FSDPConfig:
                mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


            @dataclass
            class AcceleratorConfig:
                fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


            @dataclass
            class TrainingArguments:
                accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)


            @dataclass
            class ModelArguments:
                config_path: str = ""


            @dataclass
            class DataArguments:
                train_path: str = ""


            def build_model(args, build_foundation_model):
                return build_foundation_model(
                    config_path=args.model.config_path,
                    torch_dtype="float32" if args.train.enable_mixed_precision else "bfloat16",
                )
            """,
            path="tasks/toy_train.py",
            title="a precision flag read from where a refactor removed it (the script's own dataclasses here)",
        ),
    )
    good = (
        Example(
            """
            def build_model(args, build_foundation_model):
                mp = args.train.accelerator.fsdp_config.mixed_precision
                return build_foundation_model(torch_dtype="float32" if mp.enable else "bfloat16")
            """,
            path="veomni/trainer/toy_trainer.py",
        ),
    )
    fix_safety = "No fix: where the field moved is for the author to name."

    requires = (("args.", "Arguments"),)
    node_types = (ast.Attribute,)

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._classes = None
        self._looked = False

    def _stored(self) -> set[str]:
        stored = self.ctx.memo.get("npu626-stored")
        if stored is None:
            stored = set()
            for n in nodes_of(self.ctx.tree, ast.Attribute):
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                    chain = _chain(n)
                    if chain:
                        stored.add(".".join(chain))
            self.ctx.memo["npu626-stored"] = stored
        return stored  # type: ignore[return-value]

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Attribute)
        parent = self.ctx.parent
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # only the longest chain
        if isinstance(node.ctx, ast.Del):
            return
        store = isinstance(node.ctx, ast.Store)
        chain = _chain(node)
        if chain is not None:
            if len(chain) < 2 or not self._load():
                return
            if group_root(chain[0]) is not None:
                self._walk(node, chain, group_root(chain[0]), "args", store)
                return
            # a top-level field of a trainer's arguments object (`self.args.dpo_config.beta`, a trainer's own
            # group): walked from the class holding the three groups, its subclasses' fields included (a bare
            # `args` may be an argparse namespace or a model's own argument tuple: left alone)
            root = root_class(self._classes)  # type: ignore[arg-type]
            if root is not None and _trainer_args(node):
                self._walk(node, chain, root, "", store)
            return
        chain = _self_chain(node)
        if chain is None or len(chain) < 2:
            return
        owner = self._owner()
        if owner is None or not self._load():
            return
        facts = self._classes.get(owner)  # type: ignore[union-attr]
        if facts is None or chain[0] not in facts.holds or "*" in facts.attrs:
            return
        # a method of an argument class reading a field's nested field (`self.data.dataloader_batch_size` in
        # `VeOmniArguments.compute_train_steps`): the same walk, from the class the field is annotated with
        self._walk(node, chain[1:], facts.holds[chain[0]], f"self.{chain[0]}", store)

    def _load(self) -> bool:
        if not self._looked:
            self._looked = True
            self._classes = group_classes(self.ctx.source.path, self.ctx.tree) or own_classes(self.ctx.tree)
        return self._classes is not None

    def _owner(self) -> str | None:
        """The class whose method the node is in, when `self` is that method's first parameter."""
        func, cls = self.ctx.function, self.ctx.class_
        if func is None or cls is None or func not in cls.body:
            return None
        params = func.args.posonlyargs + func.args.args
        if not params or params[0].arg != "self":
            return None
        return cls.name

    def _walk(self, node: ast.Attribute, chain: list[str], root: str | None, label: str, store: bool) -> None:
        classes = self._classes
        assert classes is not None
        cls_name = root
        prefix = "args." if label in ("args", "") else ""
        if label == "args":
            walked, rest = [chain[0]], chain[1:]
        elif label == "":
            walked, rest = [], chain
        else:
            walked, rest = [label], chain
        for attr in rest:
            facts = classes.get(cls_name or "")
            if facts is None or "*" in facts.attrs:
                return
            if attr not in facts.attrs:
                if attr.startswith("__"):
                    return
                full = ".".join([*walked, attr])
                if store:
                    self.report(
                        node,
                        f"`{prefix}{full}` is set, but `{facts.name}` (and its subclasses in this tree) define no "
                        f"`{attr}`: the code that reads the configuration reads the dataclass's fields, so this "
                        "setting has no effect (a field a refactor moved?)",
                    )
                    return
                if prefix and full in self._stored():
                    return  # read back what this file set (reported at the assignment)
                self.report(
                    node,
                    f"`{(prefix + '.'.join(walked)).rstrip('.') or 'args'}` has no field `{attr}`: `{facts.name}` (and its subclasses in "
                    f"this tree) define none, so `{prefix}{full}` raises AttributeError or "
                    "reads a field a refactor moved",
                )
                return
            walked.append(attr)
            cls_name = facts.holds.get(attr)
            if cls_name is None:
                return
