"""Configuration: ``[tool.npu-lint]`` in the nearest pyproject.toml, or an ``npu-lint.toml``.

The command line overrides the file. Unknown keys and unknown rule codes are errors naming the culprit.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
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


def _config_candidate(path: Path) -> bool:
    """Whether ``path`` is a configuration file to read; a name that is there but is not a regular file
    (a directory, a FIFO, a device, a dangling or looping link) is an error, never silently passed over."""
    if path.is_file():
        return True
    if os.path.lexists(path):
        raise ConfigError(f"{path}: not a regular file (a directory, FIFO, device or broken link)")
    return False


def find_config_file(start: Path) -> Path | None:
    """Nearest ``npu-lint.toml`` or ``pyproject.toml`` with a ``[tool.npu-lint]`` table, walking up."""
    start = start.resolve()
    if start.is_file() or not start.exists():
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / "npu-lint.toml"
        if _config_candidate(candidate):
            return candidate
        candidate = directory / "pyproject.toml"
        if _config_candidate(candidate):
            try:
                from npu_lint.core.safeio import read_regular

                data, _ = read_regular(candidate, limit=MAX_CONFIG_BYTES)
            except OSError as exc:  # never skipped without a word: the project's settings would not apply
                raise ConfigError(f"{candidate}: cannot read: {exc.strerror or exc}") from None
            if b"npu-lint" in data:
                parsed = _parse_toml(data, candidate)
                tool = parsed.get("tool", {})
                if not isinstance(tool, dict):
                    raise ConfigError(f"{candidate}: `tool` must be a table, got {type(tool).__name__}")
                if "npu-lint" in tool:
                    return candidate
    return None


def _str_list(key: str, value: Any, path: Path) -> list[str]:
    if isinstance(value, str):  # as ruff: a bare string is a mistake, not a one-element list
        raise ConfigError(
            f"{path}: `{key}` must be a list of strings, got the string {value[:60]!r} (write [{value[:60]!r}])"
        )
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: `{key}` must be a list of strings")
    return list(value)


def _anchored(pattern: str) -> str:
    """``./src/*`` as ``/src/*``: a pattern relative to the configuration's directory, as ruff reads it
    (gitignore matching alone would never match ``./``, so such a pattern silently excluded nothing)."""
    negated = pattern.startswith("!")
    body = pattern[1:] if negated else pattern
    parts = body.split("/")
    # `a/**/**/b` matches what `a/**/b` matches: adjacent `**` components are one (and cost one in the matcher)
    body = "/".join(p for i, p in enumerate(parts) if not (p == "**" and i and parts[i - 1] == "**"))
    pattern = ("!" if negated else "") + body
    if not body.startswith("./"):
        return pattern
    while body.startswith("./"):
        body = body[2:]
    return ("!" if negated else "") + "/" + body


MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _parse_toml(data: bytes, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"{path}: malformed TOML: nested too deeply") from None


def cache_dir_setting(value: Any, base: Path, where: str, inside: bool = True) -> str:
    """``cache-dir``: ``~`` expanded; an empty value is an error; a relative path is taken from ``base`` and,
    when ``inside`` (the configuration file), must stay inside it (an absolute path may go anywhere)."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: `cache-dir` must be a string")
    if not value.strip():
        raise ConfigError(f"{where}: `cache-dir` must not be empty")
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return os.path.normpath(expanded)
    resolved = (base / expanded).resolve()
    if inside:
        root = base.resolve()
        if resolved != root and root not in resolved.parents:
            raise ConfigError(
                f"{where}: `cache-dir` {value!r} is outside the project ({root}); give an absolute path to "
                "put the cache elsewhere"
            )
        if resolved == root:
            raise ConfigError(f"{where}: `cache-dir` must not be the project root itself")
    return str(resolved)


def _unclosed_bracket(pattern: str) -> bool:
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "[":
            close = pattern.find("]", i + 2)  # `[]...]`: a leading `]` is part of the set
            if close < 0:
                return True
            i = close
        i += 1
    return False


MAX_DOUBLE_STARS = 3


def check_patterns(key: str, patterns: list[str], where: str) -> None:
    """Every gitignore-style pattern compiles (``!``, a lone backslash, ``[z-a]`` do not): ``ConfigError``."""
    import pathspec

    for pattern in patterns:
        if pattern.lstrip("!").strip() == "":  # git matches nothing with it: a silent no-op, as `[` is
            raise ConfigError(f"{where}: invalid `{key}` pattern {pattern!r}: empty, it matches no file")
        stars = sum(part == "**" for part in pattern.split("/"))
        if stars > MAX_DOUBLE_STARS:  # each `**` is a `(?:/.+)?` in the regex: the search backtracks
            # exponentially on deep paths (five took minutes on a 40-level path): refused, not waited on
            raise ConfigError(
                f"{where}: `{key}` pattern {pattern!r} has {stars} `**` components; at most "
                f"{MAX_DOUBLE_STARS} are allowed (matching more backtracks exponentially on deep paths)"
            )
        if _unclosed_bracket(pattern):  # git (and pathspec) match nothing with it: a silent no-op is a trap
            raise ConfigError(f"{where}: invalid `{key}` pattern {pattern!r}: `[` without a closing `]`")
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except Exception as exc:  # pathspec raises its own errors, re.error, ValueError, ...
            raise ConfigError(
                f"{where}: invalid `{key}` pattern {pattern!r}: {str(exc).splitlines()[0][:120]}"
            ) from None


def load_config(path: Path) -> Settings:
    from npu_lint.core.safeio import read_regular

    try:
        raw, _ = read_regular(path, limit=MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc.strerror or exc}") from None
    data = _parse_toml(raw, path)
    if path.name == "npu-lint.toml":
        table = data
    else:
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: `tool` must be a table, got {type(tool).__name__}")
        table = tool.get("npu-lint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.npu-lint] must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if (
        unknown
        and path.name == "npu-lint.toml"
        and isinstance(table.get("tool"), dict)
        and "npu-lint" in table["tool"]
    ):
        raise ConfigError(  # the pyproject.toml spelling in npu-lint.toml: say what to write, not "unknown `tool`"
            f"{path}: npu-lint.toml takes its settings at the top level: drop the [tool.npu-lint] header"
        )
    if unknown:
        where = "npu-lint.toml" if path.name == "npu-lint.toml" else "[tool.npu-lint]"
        raise ConfigError(f"{path}: unknown configuration key `{unknown[0]}` in {where}")
    settings = Settings(config_path=str(path), root=str(path.parent))
    if "select" in table:
        settings.select = _str_list("select", table["select"], path)
    if "ignore" in table:
        settings.ignore = _str_list("ignore", table["ignore"], path)
    if "extend-select" in table:
        settings.extend_select = _str_list("extend-select", table["extend-select"], path)
    if "exclude" in table:
        settings.exclude = [_anchored(p) for p in _str_list("exclude", table["exclude"], path)]
    if "extend-exclude" in table:
        settings.extend_exclude = [
            _anchored(p) for p in _str_list("extend-exclude", table["extend-exclude"], path)
        ]
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{path}: `per-file-ignores` must be a table of pattern = [codes]")
        settings.per_file_ignores = {
            _anchored(k): _str_list(f"per-file-ignores.{k}", v, path) for k, v in pfi.items()
        }
    for key, patterns in (
        ("exclude", settings.exclude),
        ("extend-exclude", settings.extend_exclude),
        ("per-file-ignores", list(settings.per_file_ignores)),
    ):
        check_patterns(key, patterns, str(path))
    if "target-api" in table:
        value = table["target-api"]
        if value not in TARGET_APIS:
            raise ConfigError(f"{path}: `target-api` must be one of {', '.join(TARGET_APIS)}, got {value!r}")
        settings.target_api = value
    if "cache-dir" in table:
        settings.cache_dir = cache_dir_setting(table["cache-dir"], path.parent, str(path))
    return settings


def resolve_settings(start: Path, config_file: str | None = None) -> Settings:
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            if path.exists():
                # there, but a directory, FIFO, device (or a link to one): "not found" would be untrue
                raise ConfigError(f"{config_file}: not a regular file (a directory, FIFO or device)")
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
            raise ConfigError(f"empty rule code in {where}")
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
    if not active:
        where = f" ({settings.config_path})" if settings.config_path else ""
        raise ConfigError(f"no rule is selected{where}: check `select`, `extend-select` and `ignore`")
    return sorted(active)
