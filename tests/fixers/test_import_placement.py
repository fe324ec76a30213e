"""An added import lands where the target tree's isort (ruff I001) wants it, in the file's own style, merged
into an existing import of the module, and always before the first use of the name (no NameError).

Each case is fixed as a file of a VeOmni-shaped tree with a VeOmni-like ruff configuration (line length 119,
isort with known-first-party veomni and two lines after imports); ruff must report nothing new afterwards."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.imports import ruff_style
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source
from npu_lint.rules.base import REGISTRY, load_rule_modules
from npu_lint.veomni.project import load_project

load_rule_modules()
CODES = sorted(c for c in REGISTRY if c.startswith("NPU1"))

RUFF_CONFIG = """\
[tool.ruff]
line-length = 119

[tool.ruff.lint]
select = ["E", "F", "I", "W"]

[tool.ruff.lint.isort]
lines-after-imports = 2
known-first-party = ["veomni"]
known-third-party = ["torch"]
"""

MODEL = "veomni/models/transformers/toy"
CASES = {
    # name: (path in the tree, source, expected fixed source)
    "compound-line": (
        "veomni/trainer/compound.py",
        "import torch; X = torch.ones(2).cuda()  # noqa: E702\n",
        "from veomni.utils.device import get_device_type\n"
        "import torch; X = torch.ones(2).to(get_device_type())  # noqa: E702\n",
    ),
    "type-checking-only": (
        "veomni/trainer/tc.py",
        "from typing import TYPE_CHECKING\n\nimport torch\n\n\nif TYPE_CHECKING:\n"
        "    from veomni.utils.device import get_device_type\n\n\ndef f(m):\n    return m.cuda()\n",
        "from typing import TYPE_CHECKING\n\nimport torch\n\nfrom veomni.utils.device import get_device_type\n\n\n"
        "if TYPE_CHECKING:\n    from veomni.utils.device import get_device_type\n\n\n"
        "def f(m):\n    return m.to(get_device_type())\n",
    ),
    "future-and-docstring": (
        "veomni/trainer/future.py",
        '"""Doc."""\n\nfrom __future__ import annotations\n\n\ndef f(m):\n    return m.cuda()\n',
        '"""Doc."""\n\nfrom __future__ import annotations\n\nfrom veomni.utils.device import get_device_type\n\n\n'
        "def f(m):\n    return m.to(get_device_type())\n",
    ),
    "docstring-only": (
        "veomni/trainer/doc.py",
        '"""Doc."""\n\n\ndef f(m):\n    return m.cuda()\n',
        '"""Doc."""\n\nfrom veomni.utils.device import get_device_type\n\n\ndef f(m):\n    return m.to(get_device_type())\n',
    ),
    "licence-header": (
        "veomni/trainer/lic.py",
        "# Copyright 2025 the authors.\n# Licensed under the Apache License.\n\n\ndef f(m):\n    return m.cuda()\n",
        "# Copyright 2025 the authors.\n# Licensed under the Apache License.\n\n"
        "from veomni.utils.device import get_device_type\n\n\ndef f(m):\n    return m.to(get_device_type())\n",
    ),
    "relative-style": (
        f"{MODEL}/modeling_toy.py",
        "import torch\n\nfrom ....utils import logging\nfrom ...module_utils import init_weights\n\n\n"
        "logger = logging.get_logger(__name__)\n\n\ndef f(m):\n    init_weights(m)\n    return torch.compile(m.cuda())\n",
        "import torch\n\nfrom ....utils import logging\nfrom ....utils.device import get_device_type\n"
        "from ...module_utils import init_weights\n\n\nlogger = logging.get_logger(__name__)\n\n\n"
        "def f(m):\n    init_weights(m)\n    return torch.compile(m.to(get_device_type()))\n",
    ),
    "merged-in-order": (
        f"{MODEL}/merge.py",
        "import torch\n\nfrom ....utils.device import IS_NPU_AVAILABLE\n\n\ndef f(m):\n"
        "    torch.cuda.synchronize()\n    return m.cuda() if IS_NPU_AVAILABLE else m\n",
        # the fix replaced the last use of ``torch``: its import goes too (no F401 left behind)
        "from ....utils.device import IS_NPU_AVAILABLE, get_device_type, synchronize\n\n\n"
        "def f(m):\n    synchronize()\n    return m.to(get_device_type()) if IS_NPU_AVAILABLE else m\n",
    ),
    "absolute-style-first-party": (
        f"{MODEL}/absolute.py",
        "import os\n\nimport torch\n\nfrom veomni.utils import logging\n\n\n"
        "def f(m):\n    logging.info(os.sep)\n    return torch.compile(m.cuda())\n",
        "import os\n\nimport torch\n\nfrom veomni.utils import logging\nfrom veomni.utils.device import get_device_type\n\n\n"
        "def f(m):\n    logging.info(os.sep)\n    return torch.compile(m.to(get_device_type()))\n",
    ),
    "new-first-party-section": (
        f"{MODEL}/third.py",
        "import os\n\nimport torch\n\n\ndef f(m):\n    print(os.sep)\n    return torch.compile(m.cuda())\n",
        "import os\n\nimport torch\n\nfrom veomni.utils.device import get_device_type\n\n\n"
        "def f(m):\n    print(os.sep)\n    return torch.compile(m.to(get_device_type()))\n",
    ),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    (root / "pyproject.toml").write_text(RUFF_CONFIG)
    for sub in ("veomni/ops", "veomni/utils", MODEL, "veomni/trainer"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def ruff_findings(root: Path, path: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "json", str(path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return sorted(d["code"] for d in json.loads(proc.stdout))


def _first_binding_before_use(text: str, name: str) -> bool:
    """The module binds ``name`` (at run time) before a top-level statement uses it."""
    tree = ast.parse(text)
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name for a in stmt.names):
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If)):
            continue
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt)):
            return False
    return True


@pytest.mark.parametrize("case", sorted(CASES))
def test_added_import(tree: Path, case: str) -> None:
    rel, source, expected = CASES[case]
    path = tree / rel
    path.write_text(source)
    before = ruff_findings(tree, path)
    project = load_project([str(path)])
    out = fix_source(SourceFile.from_text(str(path), source), CODES, Settings(), project, unsafe=True)
    assert out.text == expected
    assert _first_binding_before_use(out.text, "get_device_type")
    path.write_text(out.text)
    after = ruff_findings(tree, path)
    assert [c for c in after if c not in before or after.count(c) > before.count(c)] == []


def test_ruff_style_read_from_the_tree(tree: Path) -> None:
    style = ruff_style(str(tree / MODEL))
    assert (style.line_length, style.lines_after_imports) == (119, 2)
    assert "veomni" in style.known_first_party


def test_long_merge_wraps_like_ruff(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 60\n")
    (tmp_path / "veomni" / "ops").mkdir(parents=True)
    path = tmp_path / "veomni" / "m.py"
    text = "from veomni.utils.device import get_device_id, synchronize\n\n\ndef f(m):\n    return m.cuda()\n"
    out = fix_source(SourceFile.from_text(str(path), text), CODES, Settings(), load_project([str(path)]))
    assert out.text.startswith(
        "from veomni.utils.device import (\n    get_device_id,\n    get_device_type,\n    synchronize,\n)\n"
    )
