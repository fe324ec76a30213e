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
