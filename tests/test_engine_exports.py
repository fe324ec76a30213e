"""``npu_lint.engine`` names its lazily imported names three times, for three readers: the ``TYPE_CHECKING``
imports (type checkers, editors), the ``_SUBMODULE`` table (PEP 562 ``__getattr__`` at run time) and a literal
``__all__`` (linters). They must name the same names, from the same modules."""

from __future__ import annotations

import ast
from pathlib import Path

import npu_lint.engine as engine


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING":
            for imp in stmt.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.dump(imp)
                for alias in imp.names:
                    assert alias.asname is None, alias.name
                    found[alias.name] = imp.module
    return found


def test_type_checking_imports_and_the_lazy_table_agree() -> None:
    assert _type_checking_imports() == engine._SUBMODULE


def test_all_is_the_table_and_every_name_resolves() -> None:
    assert sorted(engine.__all__) == sorted(engine._SUBMODULE)
    assert len(engine.__all__) == len(set(engine.__all__))
    for name, module in engine._SUBMODULE.items():
        value = getattr(engine, name)
        assert getattr(__import__(module, fromlist=[name]), name) is value, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        engine.no_such_name  # noqa: B018
    except AttributeError:
        return
    raise AssertionError("engine.no_such_name resolved")
