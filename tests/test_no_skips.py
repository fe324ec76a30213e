"""The suite's policy on skips, enforced on its source: a test never skips for lack of a corpus, a network, a
dependency ``make test`` installs or a machine path (it fails, saying what is missing), and an expected failure is
strict (it cannot pass unnoticed).

Only the files in ``MAY_SKIP`` may skip, each for the reason given there (one a CI machine cannot meet).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAY_SKIP = {
    "lsp/test_neovim.py": "a docs recipe for a Neovim newer than the installed one",
}
SKIPS = {"skip", "skipif", "importorskip"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _uses(path: Path) -> list[tuple[int, str, ast.AST]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) in called:
            continue  # seen as its call
        if isinstance(node, (ast.Attribute, ast.Call)):
            target = node.func if isinstance(node, ast.Call) else node
            name = _dotted(target)
            if name.startswith("pytest.") and name.rsplit(".", 1)[-1] in SKIPS | {"xfail"}:
                out.append((node.lineno, name, node))
    return out


def _files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def test_no_test_skips_outside_the_allowed_files() -> None:
    found = []
    for path in _files():
        rel = path.relative_to(TESTS).as_posix()
        if rel in MAY_SKIP or path == Path(__file__).resolve():
            continue
        found += [
            f"{rel}:{line}: {name}" for line, name, _ in _uses(path) if name.rsplit(".", 1)[-1] in SKIPS
        ]
    assert found == [], "a test skips: make it fail, naming what is missing (see this module's docstring)"


def test_every_xfail_is_strict() -> None:
    loose = []
    for path in _files():
        for line, name, node in _uses(path):
            if not name.endswith("xfail"):
                continue
            strict = (
                [k.value for k in node.keywords if k.arg == "strict"] if isinstance(node, ast.Call) else []
            )
            if not (strict and isinstance(strict[0], ast.Constant) and strict[0].value is True):
                loose.append(f"{path.relative_to(TESTS).as_posix()}:{line}")
    assert loose == [], "a non-strict xfail passes either way: add strict=True or fix the cause"


def test_the_guard_sees_a_skip(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.skipif(True, reason='x')\n"
        "def test_a():\n    pytest.skip('no network')\n"
        "@pytest.mark.xfail(reason='y')\ndef test_b():\n    pass\n"
        "@pytest.mark.xfail\ndef test_c():\n    pass\n"
    )
    assert sorted((line, name) for line, name, _ in _uses(sample)) == [
        (2, "pytest.mark.skipif"),
        (4, "pytest.skip"),
        (5, "pytest.mark.xfail"),
        (8, "pytest.mark.xfail"),
    ]
