"""Editor settings of the language server (section ``npu-lint``).

They arrive in ``initializationOptions.settings`` and through ``workspace/configuration``; the later source
wins key by key. Keys are camelCase as editors send them; nested (``{"lint": {"run": ...}}``) and dotted
(``{"lint.run": ...}``) spellings are both accepted. A bad value is reported and the default kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

RUN_ON_TYPE = "onType"
RUN_ON_SAVE = "onSave"
MAX_DEBOUNCE_MS = 60_000  # a minute: beyond it a typed change would wait for good (1e300 ms was accepted)
DEFAULT_DEBOUNCE_MS = 200  # the adaptive debounce's ceiling, and its value before a document's first lint
ADAPTIVE_MIN_MS = 30


@dataclass(frozen=True)
class ServerSettings:
    select: tuple[str, ...] | None = None  # replaces the configuration's selection when given
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool = False  # also apply unsafe fixes in the fix-all action
    fix_all: bool = True  # offer the source.fixAll.npu-lint action
    show_disable_action: bool = True  # offer "Disable NPUxxx for this line"
    run: str = RUN_ON_TYPE  # lint while typing, or only when the document is opened / saved
    # push mode: delay after the last change; None (the default): adaptive, the document's measured lint time
    # (``NpuLintServer.debounce``) between ADAPTIVE_MIN_MS and DEFAULT_DEBOUNCE_MS
    debounce_ms: int | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)  # messages about rejected values

    def key(self) -> tuple[Any, ...]:
        return (self.select, self.extend_select, self.ignore, self.unsafe_fixes)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _codes(name: str, value: Any, problems: list[str]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append(f"npu-lint setting `{name}` must be a list of rule codes; ignored")
    return None


def _bool(name: str, value: Any, problems: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    problems.append(f"npu-lint setting `{name}` must be true or false; ignored")
    return None


def merge_settings(base: ServerSettings, data: Any) -> ServerSettings:
    """``base`` updated with the keys present in ``data`` (a settings object from the client)."""
    if not isinstance(data, dict):
        return base
    flat = _flatten(data)
    problems: list[str] = []
    changes: dict[str, Any] = {}
    for key, value in flat.items():
        if value is None:
            continue
        if key == "select":
            codes = _codes(key, value, problems)
            if codes is not None:
                changes["select"] = codes
        elif key in ("extendSelect", "ignore"):
            codes = _codes(key, value, problems)
            if codes is not None:
                changes["extend_select" if key == "extendSelect" else "ignore"] = codes
        elif key in ("unsafeFixes", "fixAll", "showDisableAction"):
            flag = _bool(key, value, problems)
            if flag is not None:
                changes[
                    {"unsafeFixes": "unsafe_fixes", "fixAll": "fix_all"}.get(key, "show_disable_action")
                ] = flag
        elif key in ("lint.run", "run"):
            if value in (RUN_ON_TYPE, RUN_ON_SAVE):
                changes["run"] = value
            else:
                problems.append(
                    f"npu-lint setting `lint.run` must be `onType` or `onSave`, got {value!r}; ignored"
                )
        elif key in ("lint.debounce", "debounce"):
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and 0 <= value <= MAX_DEBOUNCE_MS
            ):
                changes["debounce_ms"] = int(value)
            else:  # nan, a negative delay, or one so long the document would never be linted while typing
                problems.append(
                    f"npu-lint setting `lint.debounce` must be a number of milliseconds from 0 to {MAX_DEBOUNCE_MS}"
                    "; ignored"
                )
        # unknown keys are ignored: editors send their own keys in the same section
    return replace(base, problems=tuple(problems), **changes)


def settings_from_init_options(options: Any) -> ServerSettings:
    """``initializationOptions``: ``{"settings": {...}}`` (also accepted: the settings object itself)."""
    if not isinstance(options, dict):
        return ServerSettings()
    data = options.get("settings", options)
    if isinstance(data, dict) and "npu-lint" in data and isinstance(data["npu-lint"], dict):
        data = data["npu-lint"]
    return merge_settings(ServerSettings(), data)
