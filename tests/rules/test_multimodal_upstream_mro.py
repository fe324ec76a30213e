"""NPU705 and NPU702 read what a class's MRO builds from the transformers source (5.9.0 installed):
the maintainers' migrated VeomniOp tree gives no false positive."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from npu_lint.veomni.upstream import super_inits, upstream_class_method, upstream_mro
from tests import corpus

QWEN3 = "transformers.models.qwen3.modeling_qwen3"


@pytest.mark.parametrize(
    "module,cls",
    [
        (QWEN3, "Qwen3ForSequenceClassification"),
        (QWEN3, "Qwen3ForCausalLM"),
        ("transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLForConditionalGeneration"),
        ("transformers.models.gemma3.modeling_gemma3", "Gemma3ForSequenceClassification"),
    ],
)
def test_mro_is_pythons(module: str, cls: str) -> None:
    """The statically read MRO is the runtime one, up to the first base the reader cannot follow."""
    import importlib

    runtime = [c.__name__ for c in getattr(importlib.import_module(module), cls).__mro__]
    static = [e.name for e in upstream_mro(module, cls)]
    # a prefix of Python's order: it ends where a base the reader cannot follow hides its own bases
    assert len(static) >= 5 and static == runtime[: len(static)]


def test_super_init_of_sequence_classification() -> None:
    init = upstream_class_method(QWEN3, "Qwen3ForSequenceClassification", "__init__")
    assert init is not None and init.lineno  # GenericForSequenceClassification.__init__, inherited
    body = "\n".join(ast_unparse(s) for s in init.body)
    assert "self.score" in body
    # the chain that init's own super().__init__ reaches: PreTrainedModel.__init__
    chain = super_inits(QWEN3, "Qwen3ForSequenceClassification", init, "GenericForSequenceClassification")
    assert chain and all(f.name == "__init__" for f in chain)


def ast_unparse(node: object) -> str:
    import ast

    return ast.unparse(node)  # type: ignore[arg-type]


def _codes(tree: str, select: str) -> list[dict]:
    root = corpus.shared_tree(tree)
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--exit-zero", "--select", select,
         "--output-format", "json", str(root / "veomni")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_veomniop_tree_has_no_npu705() -> None:
    """The maintainers' Qwen3/Llama ForSequenceClassification overrides call super(Cls, self).__init__, which
    runs GenericForSequenceClassification.__init__: `score` is still built (5 false positives before)."""
    assert _codes(corpus.VEOMNI_OP, "NPU705") == []
