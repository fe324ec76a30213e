"""Configuration: ``[tool.npu-lint]`` in the nearest pyproject.toml, or an ``npu-lint.toml``.

The command line overrides the file. Unknown keys and unknown rule codes are errors naming the culprit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TARGET_APIS = ("auto", "veomni-op", "op-slot", "veomni-kernel")
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".npu_lint_cache",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
)
KNOWN_KEYS = {
    "select",
    "ignore",
    "extend-select",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "target-api",
    "cache-dir",
}


class ConfigError(Exception):
    """A usage or configuration problem: reported as one line, exit code 2."""


@dataclass
class Settings:
    select: list[str] | None = None  # None: the default set (every default-enabled rule)
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = field(default_factory=list)
    target_api: str = "auto"
    cache_dir: str | None = None
    config_path: str | None = None  # the file the settings came from
    root: str = "."  # directory holding the config file (or cwd): base of relative patterns

    def fingerprint(self, selected: list[str]) -> str:
        data = {
            "selected": selected,
            "per_file_ignores": self.per_file_ignores,
            "target_api": self.target_api,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def find_config_file(start: Path) -> Path | None:
    """Nearest ``npu-lint.toml`` or ``pyproject.toml`` with a ``[tool.npu-lint]`` table, walking up."""
    start = start.resolve()
    if start.is_file() or not start.exists():
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / "npu-lint.toml"
        if candidate.is_file():
            return candidate
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = candidate.read_bytes()
            except OSError:
                continue
            if b"npu-lint" in data:
                try:
                    parsed = tomllib.loads(data.decode("utf-8"))
                except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                    raise ConfigError(f"{candidate}: malformed TOML: {exc}") from None
                if "npu-lint" in parsed.get("tool", {}):
                    return candidate
    return None


def _str_list(key: str, value: Any, path: Path) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: `{key}` must be a list of strings")
    return list(value)


def load_config(path: Path) -> Settings:
    try:
        raw = path.read_bytes().decode("utf-8")
        data = tomllib.loads(raw)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    table = data if path.name == "npu-lint.toml" else data.get("tool", {}).get("npu-lint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.npu-lint] must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown configuration key `{unknown[0]}` in [tool.npu-lint]")
    settings = Settings(config_path=str(path), root=str(path.parent))
    if "select" in table:
        settings.select = _str_list("select", table["select"], path)
    if "ignore" in table:
        settings.ignore = _str_list("ignore", table["ignore"], path)
    if "extend-select" in table:
        settings.extend_select = _str_list("extend-select", table["extend-select"], path)
    if "exclude" in table:
        settings.exclude = _str_list("exclude", table["exclude"], path)
    if "extend-exclude" in table:
        settings.extend_exclude = _str_list("extend-exclude", table["extend-exclude"], path)
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{path}: `per-file-ignores` must be a table of pattern = [codes]")
        settings.per_file_ignores = {k: _str_list(f"per-file-ignores.{k}", v, path) for k, v in pfi.items()}
    if "target-api" in table:
        value = table["target-api"]
        if value not in TARGET_APIS:
            raise ConfigError(f"{path}: `target-api` must be one of {', '.join(TARGET_APIS)}, got {value!r}")
        settings.target_api = value
    if "cache-dir" in table:
        if not isinstance(table["cache-dir"], str):
            raise ConfigError(f"{path}: `cache-dir` must be a string")
        settings.cache_dir = str((path.parent / table["cache-dir"]).resolve())
    return settings


def resolve_settings(start: Path, config_file: str | None = None) -> Settings:
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"configuration file not found: {config_file}")
        return load_config(path)
    found = find_config_file(start)
    if found is None:
        return Settings(root=str(Path.cwd()))
    return load_config(found)


def expand_codes(patterns: list[str], known: list[str], where: str) -> set[str]:
    """Expand codes / prefixes / ``ALL`` into known codes; an unknown selector is an error."""
    out: set[str] = set()
    for pattern in patterns:
        pat = pattern.strip().upper()
        if not pat:
            continue
        if pat == "ALL":
            out.update(known)
            continue
        matched = [code for code in known if code.startswith(pat)]
        if not matched:
            raise ConfigError(f"unknown rule code or prefix `{pattern}` in {where}")
        out.update(matched)
    return out


def selected_codes(settings: Settings, known: dict[str, bool]) -> list[str]:
    """The rule codes in effect. ``known`` maps code -> enabled by default."""
    codes = sorted(known)
    if settings.select is None:
        active = {c for c, on in known.items() if on}
    else:
        active = expand_codes(settings.select, codes, "select")
    active |= expand_codes(settings.extend_select, codes, "extend-select")
    active -= expand_codes(settings.ignore, codes, "ignore")
    for pattern, values in settings.per_file_ignores.items():
        expand_codes(values, codes, f"per-file-ignores `{pattern}`")
    return sorted(active)


def with_overrides(settings: Settings, **overrides: Any) -> Settings:
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})
