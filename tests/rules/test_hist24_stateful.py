"""NPU635: a checkpoint Stateful's load side reads a shape its save side never returns (hist24, VeOmni 021c54e3)."""

from __future__ import annotations

import textwrap

from tests.rules.snippets import lint_snippet

PATH = "veomni/checkpoint/toy_checkpointer.py"

HEAD = """
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful


class ModelState(Stateful):
    def __init__(self, model, extra=None):
        self.model = model
        self.extra = extra
"""


def _lines(body: str) -> list[int]:
    text = HEAD + textwrap.indent(textwrap.dedent(body), "    ")
    return [d.line for d in lint_snippet(PATH, text, ["NPU635"])]


def _line(body: str, marker: str) -> int:
    text = textwrap.dedent(HEAD + textwrap.indent(textwrap.dedent(body), "    ")).lstrip("\n")
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


# the real ModelState: the save's flat dict passed through a key-keeping transform, the load aliases the dict
MODEL_STATE = """
def state_dict(self):
    model_state_dict = get_model_state_dict(model=self.model)
    if self.extra is not None:
        model_state_dict = self.restore(model_state_dict, "restore")
    return model_state_dict

def load_state_dict(self, state_dict):
    model_state_dict = {load}
    if self.extra is not None:
        model_state_dict = self.restore(model_state_dict, "drop")
    set_model_state_dict(model=self.model, model_state_dict=model_state_dict)
"""


def test_a_flat_save_loaded_through_a_wrapper_key_is_reported() -> None:
    body = MODEL_STATE.format(load='state_dict["model"]')
    assert _lines(body) == [_line(body, 'state_dict["model"]')]


def test_a_flat_save_loaded_flat_is_quiet() -> None:
    assert _lines(MODEL_STATE.format(load="state_dict")) == []


WRAPPED = """
def state_dict(self):
    return {{"model": get_model_state_dict(self.model)}}

def load_state_dict(self, state_dict):
    sd = state_dict
    set_model_state_dict(self.model, model_state_dict={load})
"""


def test_a_wrapped_save_loaded_whole_is_reported() -> None:
    body = WRAPPED.format(load="sd")
    assert _lines(body) == [_line(body, "set_model_state_dict(self.model")]


def test_a_wrapped_save_unwrapped_on_load_is_quiet() -> None:
    assert _lines(WRAPPED.format(load='sd["model"]')) == []


FILLED = """
def state_dict(self):
    state = {{"step": 0}}
    {fill}
    return state

def load_state_dict(self, state_dict):
    self.step = state_dict["step"]
    {read}
"""


def test_a_literal_key_no_return_holds_is_reported() -> None:
    body = FILLED.format(fill="pass", read='self.buffer = state_dict["buffer"]')
    assert _lines(body) == [_line(body, 'state_dict["buffer"]')]


def test_a_dict_filled_in_place_or_a_tested_key_is_not_judged() -> None:
    assert _lines(FILLED.format(fill='state["buffer"] = []', read='self.buffer = state_dict["buffer"]')) == []
    assert (
        _lines(FILLED.format(fill="state.update(self.extra)", read='self.buffer = state_dict["buffer"]'))
        == []
    )
    tested = 'self.buffer = state_dict["buffer"] if "buffer" in state_dict else []'
    assert _lines(FILLED.format(fill="pass", read=tested)) == []
