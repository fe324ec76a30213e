"""Round-10 attacks (bench/accuracy/adversary-round10.md): each test fails without the fix it names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from npu_lint.cli import main

GPU_CALL = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"


def _tiny_tree(root: Path) -> Path:
    """The smallest VeOmni tree a device fix applies in: `veomni/ops` (the tree marker), the device helper the
    fix imports, one model module with a `.cuda()`."""
    for package in ("veomni", "veomni/ops", "veomni/utils", "veomni/models", "veomni/models/m"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("", encoding="utf-8")
    (root / "veomni/utils/device.py").write_text(
        'def get_device_type():\n    return "cpu"\n', encoding="utf-8"
    )
    (root / "veomni/models/m/mod.py").write_text(GPU_CALL, encoding="utf-8")
    return root


# -- A10-03/A10-06: a FIFO or a socket inside the tree stopped `--diff` and `migrate` ---------------------------


def test_a10_03_a_fifo_in_the_tree_does_not_stop_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--diff` copies the tree to stage its further passes; `shutil.copytree` refuses a named pipe, and the
    run ended with `internal error: Error: [(...pipe...)]`, exit 2. Special files are now left out of staging
    copies (`--diff` and `migrate` alike) and the real one is untouched."""
    root = _tiny_tree(tmp_path / "tree")
    os.mkfifo(root / "veomni/models/pipe")
    monkeypatch.chdir(root)
    code = main(["check", "--diff", "--no-cache", "veomni/models/m"])
    out, err = capsys.readouterr()
    assert "internal error" not in err
    assert code == 1
    assert "+    return x.to(get_device_type())" in out
    assert (root / "veomni/models/m/mod.py").read_text(encoding="utf-8") == GPU_CALL
    assert (root / "veomni/models/pipe").is_fifo()


def test_a10_03_staging_ignores_special_files_only(tmp_path: Path) -> None:
    from npu_lint.engine.write import staging_ignore

    (tmp_path / "a.py").write_text("", encoding="utf-8")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("a.py")
    (tmp_path / "w.safetensors").write_text("", encoding="utf-8")
    names = ["a.py", "d", "l", "w.safetensors", "gone"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "p")
        names.append("p")
    expected = {"w.safetensors"} | ({"p"} if hasattr(os, "mkfifo") else set())
    assert staging_ignore(str(tmp_path), names) == expected


# -- A10-16: thousands of findings on one long line (a minified or generated module) --------------------------


def _long_line_module(calls: int) -> str:
    return "import torch\nx = [" + ",".join(["torch.zeros(1).cuda()"] * calls) + "]\n"


def test_a10_16_text_excerpts_of_a_long_line_are_cut_around_the_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each finding's excerpt printed the whole line: 2,000 findings on a 44 kB line gave 133 MB of text (10,000
    on a 220 kB line: over 5 minutes and 9.7 GB of memory). The excerpt is now a window around the column."""
    from npu_lint.report.text import MAX_EXCERPT_CHARS

    path = tmp_path / "wide.py"
    path.write_text(_long_line_module(400), encoding="utf-8")
    main(["check", "--no-cache", str(path)])
    out = capsys.readouterr().out
    assert out.count("NPU101") == 400
    assert len(out) < 400 * 1500  # was 400 x 8.8 kB of line
    excerpts = [line for line in out.splitlines() if line.startswith(" 2 | ")]
    assert excerpts and all(len(line) <= MAX_EXCERPT_CHARS + 10 for line in excerpts)
    # the caret stays under the finding: the 200th `cuda()` of the line
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{path}:2:{6 + 199 * 22 + 15}:"))
    shown, caret = lines[at + 2], lines[at + 3]
    column = caret.index("^")
    assert shown[column : column + 6] == "cuda()"


def test_a10_16_the_cache_stores_a_long_line_once(tmp_path: Path) -> None:
    """The cache index kept each finding's `source_line`: 2,000 findings on one 44 kB line made an 86 MB index
    (and past the index cap, no cache at all for the whole tree). A line is now stored once per entry."""
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine.cache import Cache
    from npu_lint.engine.lint import lint_source

    text = _long_line_module(300)
    path = tmp_path / "wide.py"
    path.write_text(text, encoding="utf-8")
    diags = lint_source(SourceFile(str(path), text), ["NPU101"], Settings(root=str(tmp_path)))
    assert len(diags) == 300 and all(d.source_line for d in diags)
    cache = Cache(str(tmp_path / "cache"), "fp")
    st = os.stat(path)
    cache.store(str(path), "k", st, diags)
    cache.flush()
    (index,) = (tmp_path / "cache").rglob("index-*.json")
    assert index.stat().st_size < 300 * 1000 + 2 * len(text)  # was 300 x 6.6 kB of line
    again = Cache(str(tmp_path / "cache"), "fp").lookup_content(str(path), "k", st)
    assert again == diags
    assert [d.source_line for d in again] == [d.source_line for d in diags]


def test_a10_16_the_language_server_converts_positions_on_a_long_line_in_linear_time() -> None:
    """The server converted each finding's columns with the codec's per-character count of the line up to the
    column: 2,000 findings on a 44 kB line took 29 s to publish over stdio (3,000: over 40 s, nothing shown).
    ASCII text now counts as its length; the positions are the codec's."""
    from lsprotocol import types
    from pygls.workspace import PositionCodec

    from npu_lint.core.source import SourceFile
    from npu_lint.lsp.convert import client_position, offset_of_client_position

    class CountingCodec(PositionCodec):
        counted = 0

        def client_num_units(self, chars: str) -> int:
            CountingCodec.counted += len(chars)
            return super().client_num_units(chars)

    codec = CountingCodec(encoding=types.PositionEncodingKind.Utf16)
    wide = SourceFile("w.py", _long_line_module(3000))
    line = wide.lines[1]
    for col in range(0, len(line), 22):
        assert client_position(wide, codec, 2, col).character == col
    assert CountingCodec.counted == 0  # an ASCII line is not walked character by character (was 44 M chars)
    astral = SourceFile("a.py", 'x = "\U0001f600é" + y\n')
    assert client_position(astral, codec, 1, 8).character == 9  # the emoji is two UTF-16 units
    position = types.Position(line=1, character=45)
    assert offset_of_client_position(wide, codec, position) == wide.line_starts[1] + 45
    assert offset_of_client_position(astral, codec, types.Position(line=0, character=9)) == 8


# -- A10-58: the language server answered an unknown method with InternalError ----------------------------------


def test_a10_58_an_unknown_request_method_is_method_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """`{"id": 4, "method": "foo/bar"}` (no `params`, which JSON-RPC makes optional) was answered -32603
    "Internal Error"; the answer is -32601 MethodNotFound. A known method with bad params keeps its error."""
    from npu_lint.lsp.server import create_server

    protocol = create_server().protocol
    sent: list[tuple[object, object]] = []
    monkeypatch.setattr(
        protocol, "_send_response", lambda msg_id, error=None, **_: sent.append((msg_id, error))
    )
    protocol.structure_message({"jsonrpc": "2.0", "id": 4, "method": "foo/bar"})
    protocol.structure_message({"jsonrpc": "2.0", "id": 6, "method": "textDocument/codeAction"})
    codes = {msg_id: error.code for msg_id, error in sent}  # type: ignore[attr-defined]
    assert codes == {4: -32601, 6: -32602}


# -- A10-60: `--diff --output-format json -o FILE` wrote nothing, silently --------------------------------------


def test_a10_60_diff_goes_to_the_output_file_whatever_the_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a format other than text, `--diff` printed the diff on stdout and never created `-o`'s file (no
    word said). The diff is `--diff`'s output: it goes to `-o`, and the unused format is named once."""
    root = _tiny_tree(tmp_path / "tree")
    monkeypatch.chdir(root)
    out_file = tmp_path / "fixes.out"
    code = main(
        ["check", "--diff", "--no-cache", "--output-format", "json", "-o", str(out_file), "veomni/models/m"]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert out_file.read_text(encoding="utf-8").startswith("--- a/veomni/models/m/mod.py")
    assert "--- a/" not in out
    assert "--output-format json is not used" in err


# -- A10-61: a diff header with `..` in it ----------------------------------------------------------------------


def test_a10_61_diff_headers_are_normalised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--diff ../models/m/mod.py` from `veomni/models` printed `--- a/../models/m/mod.py`, which `git apply` and
    `patch` refuse; the header is now the normalised path, `a/m/mod.py`."""
    root = _tiny_tree(tmp_path / "tree")
    monkeypatch.chdir(root / "veomni" / "models")
    main(["check", "--diff", "--no-cache", "../models/m/mod.py"])
    out = capsys.readouterr().out
    assert "--- a/m/mod.py\n+++ b/m/mod.py\n" in out


# -- A10-57: `--fix` said "0 remaining" and exited 0 while the specs it created carried findings ----------------


def test_a10_57_fix_reports_the_findings_of_the_files_it_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the VeomniOp tree, `--fix --unsafe-fixes` on llama's package creates its NPU spec and said "Found 1 error
    (1 fixed, 0 remaining)", exit 0, while the next check reports the new spec's NPU505 (not generated yet), exit
    1: a later pass that changed nothing had its findings dropped. The summary is now a check's."""
    import corpus

    root = corpus.shared_tree_copy("veomni-op-5d90dd16", tmp_path / "op")
    package = root / "veomni" / "models_kernel" / "transformers" / "llama"
    fixed = main(
        ["check", "--fix", "--unsafe-fixes", "--no-cache", "--output-format", "concise", str(package)]
    )
    out = capsys.readouterr().out
    assert (package / "llama_npu_patch_gen_config.py").is_file()
    checked = main(["check", "--no-cache", "--output-format", "concise", str(package)])
    after = capsys.readouterr().out
    assert checked == 1 and "NPU505" in after
    assert fixed == 1 and "0 remaining" not in out
    assert sorted(line for line in out.splitlines() if "NPU5" in line) == sorted(
        line for line in after.splitlines() if "NPU5" in line
    )
