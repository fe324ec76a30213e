"""Round-11 attacks (bench/accuracy/adversary-round11.md): each test fails without the fix it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.cli import main

# a chat-template encoder (NPU439's shape) whose supervision default CPython evaluates to `int(inf)`, beside a
# device finding of another rule (NPU102) in the same file
CHAT = """import torch


def encode(tokenizer, messages):
    labels = []
    device = torch.device("cuda")
    for message in messages:
        role = message["role"]
        loss_mask = {mask} if role == "assistant" else 0
        labels += tokenizer.encode(message["content"]) if loss_mask else [-100]
    return labels, device
"""


def _check(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["check", "--no-cache", "--select", "ALL", "--output-format", "concise", *extra, str(path)])
    out, err = capsys.readouterr()
    return code, out, err


# -- A11-02: NPU439 raised OverflowError on `int(1e999)` (valid Python), and the file's other findings were lost --


def test_a11_02_int_of_an_infinite_literal_is_unreadable_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`losspath._role_default_fault` evaluated `int(1e999)` and let the OverflowError out: "internal error in
    NPU439", exit 2, and the NPU102 finding on the same file was not reported. The value is now unreadable,
    like any other expression it cannot evaluate."""
    f = tmp_path / "chat.py"
    f.write_text(CHAT.format(mask="int(1e999)"), encoding="utf-8")
    code, out, err = _check(f, capsys)
    assert "internal error" not in err
    assert "NPU102" in out
    assert code == 1


# -- A11-05: one rule that raises hid every other rule's findings in the file ------------------------------------


def test_a11_05_a_rule_that_raises_hides_no_other_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine turned any exception of the walk into one internal error for the file: the findings of every
    other rule were dropped. Now the failing rule is named (exit 2) and the file is walked again without it."""
    from npu_lint.veomni import losspath

    def boom(*args: object, **kwargs: object) -> object:
        raise KeyError("injected")

    monkeypatch.setattr(losspath, "supervision_default_faults", boom)
    f = tmp_path / "chat.py"
    f.write_text(CHAT.format(mask="1"), encoding="utf-8")
    code, out, err = _check(f, capsys)
    assert "internal error in NPU439: KeyError: 'injected'" in err
    assert "NPU102" in out  # another rule's finding in the same file survives
    assert code == 2


def test_a11_05_a_rule_whose_constructor_raises_is_isolated_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules were built outside the isolation: a constructor that raised lost the other rules' findings and the
    failing rule was not named (found by the review of the round-12 merge)."""
    from npu_lint.rules.semantics import npu439_prompt_turn_supervised as mod

    cls = next(v for v in vars(mod).values() if isinstance(v, type) and getattr(v, "code", None) == "NPU439")

    def boom(self: object, ctx: object) -> None:
        raise KeyError("injected in the constructor")

    monkeypatch.setattr(cls, "__init__", boom)
    f = tmp_path / "chat.py"
    f.write_text(CHAT.format(mask="1"), encoding="utf-8")
    code, out, err = _check(f, capsys)
    assert "internal error in NPU439" in err
    assert "NPU102" in out
    assert code == 2


def test_a11_05_a_rule_too_deep_for_recursion_is_npu001_for_that_rule_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A supervision default of 1,500 nested conditionals (CPython parses it) exceeded the recursion limit in
    NPU439's evaluator: the whole file became "NPU001 could not be analysed", hiding NPU102. Now the NPU001
    names the rule and the other rules' findings stay."""
    deep = "".join(f'0 if role == "r{i}" else ' for i in range(1500)) + "1"
    f = tmp_path / "chat.py"
    f.write_text(CHAT.format(mask=f"({deep})"), encoding="utf-8")
    code, out, err = _check(f, capsys)
    assert "internal error" not in err
    assert "NPU001 file could not be analysed by NPU439: nesting too deep" in out
    assert "NPU102" in out
    assert code == 1


# -- A11-17: an integer literal CPython parses but will not print crashed every rule that unparsed it ----------


LONG_HEX = "0x" + "f" * 5000  # 6,021 decimal digits: parsed, but str() refuses past 4,300


def test_a11_17_a_long_hex_literal_does_not_crash_the_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`.cuda(0xfff...)` with 5,000 hex digits: NPU101 (and NPU407, and the fix builders) call `ast.unparse` /
    format the constant, and CPython raises "Exceeds the limit (4300 digits) for integer string conversion":
    internal errors, exit 2, findings lost. The engine now lifts the limit for such a file (up to 30,000
    digits; a longer literal is NPU001), and restores it afterwards."""
    import sys

    limit = sys.get_int_max_str_digits()
    f = tmp_path / "m.py"
    f.write_text(
        f"import torch\n\nBIG = {LONG_HEX}\nt = torch.zeros(BIG).cuda({LONG_HEX})\n", encoding="utf-8"
    )
    code, out, err = _check(f, capsys)
    assert "internal error" not in err
    assert "NPU101" in out
    assert code == 1
    assert sys.get_int_max_str_digits() == limit


def test_a11_17_a_literal_past_the_cap_fails_only_the_rule_that_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past 30,000 digits the limit is kept (printing such an int is quadratic): NPU101, which prints the
    `.cuda(...)` argument, fails alone (exit 2); the `"cuda"` of another rule (NPU102) is still reported."""
    f = tmp_path / "m.py"
    big = "0x" + "f" * 40_000
    f.write_text(
        f'import torch\n\nt = torch.zeros(1).cuda({big})\nd = torch.device("cuda")\n', encoding="utf-8"
    )
    code, out, err = _check(f, capsys)
    assert "internal error in NPU101: ValueError" in err
    assert "NPU102" in out
    assert code == 2


def test_a11_18_stdin_keeps_the_other_rules_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--stdin-filename`: a rule that failed ended the run with `npu-lint: internal error: InternalError: ...`
    and no finding at all; now the other rules' findings are reported, the failure named in one line, exit 2."""
    import io
    import sys

    big = "0x" + "f" * 40_000
    text = f'import torch\n\nt = torch.zeros(1).cuda({big})\nd = torch.device("cuda")\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code = main(
        ["check", "--select", "ALL", "--output-format", "concise", "--stdin-filename", str(tmp_path / "x.py")]
    )
    out, err = capsys.readouterr()
    assert "NPU102" in out
    assert "error: standard input: internal error in NPU101: ValueError" in err
    assert "InternalError" not in err
    assert code == 2


# -- A11-13: the language server logged a traceback for a JSON-RPC message that is not an object ---------------


def test_a11_13_server_ignores_batches_and_bare_values_in_one_line() -> None:
    """A batch (`[...]`), a bare JSON value or an object without `jsonrpc` reached pygls' dispatcher, which
    raised AttributeError (`'list' object has no attribute 'jsonrpc'`) and logged a traceback per message. LSP has
    no batches: each is now ignored with one warning line, and the session goes on (shutdown, exit 0)."""
    import json
    import subprocess
    import sys

    def frame(body: bytes) -> bytes:
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"processId": None, "capabilities": {}},
    }
    data = frame(json.dumps(init).encode())
    for body in (
        b"[]",
        b'[{"jsonrpc": "2.0", "id": 7, "method": "shutdown"}]',
        b'"x"',
        b"42",
        b"null",
        b'{"a": 1}',
    ):
        data += frame(body)
    data += frame(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}).encode())
    data += frame(json.dumps({"jsonrpc": "2.0", "method": "exit"}).encode())
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "server"],
        input=data,
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in err
    assert err.count("ignored a message that is not a JSON-RPC object") == 6
    assert b'"id": 2' in proc.stdout or b'"id":2' in proc.stdout  # the shutdown after them is answered
    assert proc.returncode == 0
