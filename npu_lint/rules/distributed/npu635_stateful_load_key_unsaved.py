"""NPU635 stateful-load-key-unsaved."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.statefuls import FLAT, key_faults


def _describe(shape: frozenset[str] | str) -> str:
    if shape == FLAT:
        return "the flat model state dict (`get_model_state_dict`: parameter names)"
    keys = ", ".join(f'"{k}"' for k in sorted(shape))
    return f"a dict with the keys {keys}" if shape else "an empty dict"


class StatefulLoadKeyUnsaved(Rule):
    code = "NPU635"
    name = "stateful-load-key-unsaved"
    summary = (
        "A checkpoint `Stateful`'s `load_state_dict` reads the dict in a shape its own `state_dict` never "
        'returns: a literal key no return holds (`state_dict["model"]` after the save stopped wrapping the '
        "model state), or the whole dict handed to `set_model_state_dict` while the save wraps it under keys."
    )
    why = (
        "DCP saves what a `Stateful`'s `state_dict()` returns and, on resume, hands its `load_state_dict` the same "
        "structure back. VeOmni's `ModelState` and `OptimizerState` are such wrappers; when one side changes (the "
        'save returns the flat `get_model_state_dict` result, the load still indexes `state_dict["model"]`), '
        "every save succeeds and the first resume fails with `KeyError`, or loads nothing where the whole "
        "wrapper is handed to `set_model_state_dict`. Judged only where every return of `state_dict` is read "
        "(a dict display with literal keys, `get_model_state_dict`, `get_optimizer_state_dict`, or a local bound "
        'to one of them and to calls handed it); a load that tests `"key" in state_dict` copes with both shapes '
        "and is left alone."
    )
    bad = (
        Example(
            """
            from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
            from torch.distributed.checkpoint.stateful import Stateful


            class ModelState(Stateful):
                def __init__(self, model):
                    self.model = model

                def state_dict(self):
                    return get_model_state_dict(self.model)

                def load_state_dict(self, state_dict):
                    set_model_state_dict(self.model, model_state_dict=state_dict["model"])
            """,
            path="veomni/checkpoint/toy_state.py",
            title="the save returns the flat model state, the load still unwraps `model`",
        ),
    )
    good = (
        Example(
            """
            from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
            from torch.distributed.checkpoint.stateful import Stateful


            class ModelState(Stateful):
                def __init__(self, model):
                    self.model = model

                def state_dict(self):
                    return {"model": get_model_state_dict(self.model)}

                def load_state_dict(self, state_dict):
                    set_model_state_dict(self.model, model_state_dict=state_dict["model"])
            """,
            path="veomni/checkpoint/toy_state.py",
        ),
    )
    fix_safety = "No fix: which side holds the intended layout (and the checkpoints already written) is for the author."
    node_types = (ast.ClassDef,)
    requires = ("load_state_dict",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        for fault in key_faults(node):
            saved = " or ".join(_describe(s) for s in fault.shapes)
            if fault.key is not None:
                self.report(
                    fault.node,
                    f'`{node.name}.load_state_dict` reads the key "{fault.key}", but `{node.name}.state_dict` '
                    f"returns {saved}: DCP hands the load what the save returned, so resuming raises KeyError",
                )
            else:
                self.report(
                    fault.node,
                    f"`{node.name}.load_state_dict` hands the whole incoming dict on, but `{node.name}.state_dict` "
                    f"returns {saved}: the wrapper's keys are loaded as state (nothing is restored, or the "
                    "load fails)",
                )
