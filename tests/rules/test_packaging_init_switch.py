"""The NPU502 rewrite (npu_lint.fixers.init_switch) on shapes the fixture tree does not have."""

from __future__ import annotations

import ast

import pytest

from npu_lint.engine import apply_edits
from npu_lint.fixers import init_switch
from npu_lint.veomni import registration

HEAD = "from ...loader import MODELING_REGISTRY\n"


def _fix(text: str, module: str = "veomni.utils.device") -> str:
    newline = "\r\n" if "\r\n" in text else "\n"
    tree = ast.parse(text)
    edits = [
        e
        for e in (init_switch.switch_edit(text, item) for item in registration.find_static_imports(tree))
        if e
    ]
    if edits and not registration.flag_bound(tree):
        edits.append(init_switch.flag_import_edit(text, tree, module))
    out = apply_edits(text, edits, newline) if edits else text
    ast.parse(out)
    return out


@pytest.mark.parametrize(
    "name,source,expected",
    [
        (
            "tabs",
            HEAD + "def f(a):\n\tfrom .generated.patched_modeling_t_gpu import A\n\treturn A\n",
            "from veomni.utils.device import IS_NPU_AVAILABLE\n"
            + HEAD
            + "def f(a):\n\tif IS_NPU_AVAILABLE:\n\t\tfrom .generated.patched_modeling_t_npu import A\n"
            "\telse:\n\t\tfrom .generated.patched_modeling_t_gpu import A\n\treturn A\n",
        ),
        (
            "crlf and a trailing comment",
            HEAD.replace("\n", "\r\n")
            + "def f(a):\r\n    from .generated.patched_modeling_t_gpu import A  # keep\r\n",
            "from veomni.utils.device import IS_NPU_AVAILABLE\r\n"
            + HEAD.replace("\n", "\r\n")
            + "def f(a):\r\n    if IS_NPU_AVAILABLE:\r\n        from .generated.patched_modeling_t_npu import A  # keep\r\n"
            "    else:\r\n        from .generated.patched_modeling_t_gpu import A  # keep\r\n",
        ),
        (
            "module imported from generated/, with and without an alias",
            HEAD + "def f(a):\n    from .generated import patched_modeling_t_gpu\n"
            "    from .generated import patched_modeling_t_gpu as gen\n    return gen.A\n",
            "from veomni.utils.device import IS_NPU_AVAILABLE\n"
            + HEAD
            + "def f(a):\n    if IS_NPU_AVAILABLE:\n"
            "        from .generated import patched_modeling_t_npu as patched_modeling_t_gpu\n"
            "    else:\n        from .generated import patched_modeling_t_gpu\n"
            "    if IS_NPU_AVAILABLE:\n        from .generated import patched_modeling_t_npu as gen\n"
            "    else:\n        from .generated import patched_modeling_t_gpu as gen\n    return gen.A\n",
        ),
        (
            "inside try, relative flag import placed before shallower relative imports",
            HEAD
            + "try:\n    from .generated.patched_modeling_t_gpu import A\nexcept ImportError:\n    A = None\n",
            "from ....utils.device import IS_NPU_AVAILABLE\n"
            + HEAD
            + "try:\n    if IS_NPU_AVAILABLE:\n        from .generated.patched_modeling_t_npu import A\n"
            "    else:\n        from .generated.patched_modeling_t_gpu import A\nexcept ImportError:\n    A = None\n",
        ),
        (
            "no final newline",
            HEAD + "from .generated.patched_modeling_t_gpu import A",
            "from veomni.utils.device import IS_NPU_AVAILABLE\n"
            + HEAD
            + "if IS_NPU_AVAILABLE:\n    from .generated.patched_modeling_t_npu import A\n"
            "else:\n    from .generated.patched_modeling_t_gpu import A",
        ),
    ],
)
def test_switch(name: str, source: str, expected: str) -> None:
    module = "....utils.device" if "try" in name else "veomni.utils.device"
    assert _fix(source, module) == expected


@pytest.mark.parametrize(
    "source",
    [
        HEAD + "if True: from .generated.patched_modeling_t_gpu import A\n",  # shares its line
        HEAD + "from .generated.patched_modeling_t_gpu import A; x = 1\n",  # shares its line
    ],
)
def test_no_fix_when_the_import_shares_its_line(source: str) -> None:
    assert _fix(source) == source


def test_already_switched_and_npu_only_imports_are_not_static() -> None:
    text = HEAD + (
        "from ....utils.device import IS_NPU_AVAILABLE\n"
        "if not IS_NPU_AVAILABLE:\n    from .generated.patched_modeling_t_gpu import A\n"
        "from .generated.patched_modeling_t_npu import B\n"
    )
    assert registration.find_static_imports(ast.parse(text)) == []
