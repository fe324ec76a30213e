"""Round-5 adversarial findings on the language server (bench/accuracy/adversary-round5.md)."""

from __future__ import annotations

import math

import pytest

from npu_lint.lsp.settings import ServerSettings, merge_settings, settings_from_init_options


@pytest.mark.parametrize("value", [1e300, 10**12, math.nan, -5])
def test_debounce_is_bounded(value: float) -> None:
    """A5-40: `initializationOptions: {"settings": {"lint": {"debounce": 1e300}}}` was taken as is: after the
    first change the document was never linted again while typing."""
    merged = merge_settings(ServerSettings(), {"lint": {"debounce": value}})
    assert merged.debounce_ms is None
    assert any("debounce" in p for p in merged.problems)
    assert settings_from_init_options({"settings": {"lint": {"debounce": value}}}).debounce_ms is None
    assert merge_settings(ServerSettings(), {"lint": {"debounce": 750}}).debounce_ms == 750


def test_a_create_action_never_writes_into_an_existing_file(tmp_path) -> None:  # noqa: ANN001
    """A5-45: the create-file quick fix (NPU501's NPU spec) said `ignoreIfExists: true` and then inserted the
    whole spec at 0:0: applied when the file exists (made meanwhile, a second action for the same file), the
    client skips the create and prepends a second copy of the spec to the existing file."""
    from pathlib import Path

    from lsprotocol import types
    from pygls.workspace import PositionCodec

    from npu_lint.core.diagnostics import Applicability, CreateFile, Diagnostic, Edit, Fix
    from npu_lint.core.source import SourceFile
    from npu_lint.lsp.actions import ActionContext, diagnostic_actions

    src = SourceFile.from_text(str(tmp_path / "m.py"), "x = y.cuda()\n")
    new_file = tmp_path / "toy_npu_patch_gen_config.py"
    fix = Fix(
        "Create",
        (Edit(4, 12, "y"),),
        Applicability.UNSAFE,
        (CreateFile(str(new_file), "spec\n"),),
        "new file",
    )
    diag = Diagnostic("NPU501", "n", "m", src.path, 1, 6, 1, 12, fix=fix)
    codec = PositionCodec(encoding=types.PositionEncodingKind.Utf16)
    ctx = ActionContext(Path(src.path).as_uri(), 1, src, codec, [diag], can_create_files=True)
    (action,) = diagnostic_actions(ctx, [diag], show_disable=False)
    create = action.edit.document_changes[0]
    assert isinstance(create, types.CreateFile)
    assert create.options is not None and not create.options.overwrite and not create.options.ignore_if_exists
