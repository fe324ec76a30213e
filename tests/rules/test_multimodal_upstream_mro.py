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
    # Python's own answer, from a child process (this one must not import transformers: see test_semantics)
    probe = f"import json, {module} as m; print(json.dumps([c.__name__ for c in m.{cls}.__mro__]))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    runtime = json.loads(proc.stdout.strip().splitlines()[-1])
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


def test_main_tree_has_no_npu702() -> None:
    """Every dummy_forward of VeOmni main reads `self.dtype` (13 findings before); every tower registers its input
    layer first and keeps nothing in float32, so `self.dtype` is what that layer consumes."""
    assert _codes(corpus.VEOMNI_MAIN, "NPU702") == []


def _npu702(code: str, path: str = "veomni/models/transformers/toy/modeling_toy.py") -> list:
    import textwrap

    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source

    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return [d for d in lint_source(src, ["NPU702"], Settings()) if d.code == "NPU702"]


TOWER = """
import torch
from torch import nn


class ToyVisionModel(nn.Module):
    {keep}

    def __init__(self, config):
        super().__init__()
        self.rotary = ToyRotaryEmbedding(config)
        self.norm = nn.LayerNorm(config.hidden_size){cast}
        self.patch_embed = nn.Linear(1176, config.hidden_size)

    def forward(self, pixel_values):
        return self.norm(self.patch_embed(pixel_values))

    def dummy_forward(self):
        return self(torch.zeros((16, 1176), dtype=self.dtype, device=self.device))
"""


def test_npu702_fp32_cast_of_the_first_parameter() -> None:
    found = _npu702(TOWER.format(keep="pass", cast=".float()"))
    assert len(found) == 1
    message = found[0].message
    assert "first parameter (in `self.norm`)" in message and "input layer is `self.patch_embed`" in message
    assert "cast to float32 in `__init__`" in message
    assert (
        found[0].fix is not None
        and "next(self.patch_embed.parameters()).dtype" in found[0].fix.edits[0].content
    )


def test_npu702_input_layer_kept_in_fp32() -> None:
    found = _npu702(TOWER.format(keep='_keep_in_fp32_modules_strict = ["patch_embed"]', cast=""))
    assert len(found) == 1 and "kept in float32 by `_keep_in_fp32_modules_strict`" in found[0].message


def test_npu702_same_dtype_or_undecidable_is_silent() -> None:
    assert _npu702(TOWER.format(keep="pass", cast="")) == []  # both in the model dtype
    # a pattern that may match inside either layer: not provable either way
    assert _npu702(TOWER.format(keep='_keep_in_fp32_modules_strict = ["proj"]', cast="")) == []
    # both kept in float32
    assert _npu702(TOWER.format(keep='_keep_in_fp32_modules = ["patch_embed", "norm"]', cast="")) == []
