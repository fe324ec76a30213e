"""Text pre-checks rewritten for speed answer exactly as the patterns they replace (the patterns are the spec).

NPU611's instance-read pre-check and the vendor families' vendor-word test scan backwards from each candidate
instead of trying a regular expression at every position; here both are compared with the original patterns on
every Python file of the shared VeOmni trees and on random texts built from the tokens that decide a match.
"""

from __future__ import annotations

import random

from corpus import shared_tree

from npu_lint.rules.distributed.npu611_module_name_set_as_list import _INSTANCE_READ, _reads_instance_attr
from npu_lint.rules.vendor._shared import _VENDOR_WORDS, _names_vendor_word


def _corpus_texts() -> list[str]:
    texts = []
    for name in ("veomni-main", "veomni-op-5d90dd16"):
        for path in sorted(shared_tree(name).rglob("*.py")):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return texts


def _random_texts(pieces: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(count)]


def test_npu611_precheck_equals_its_pattern() -> None:
    pieces = [
        "model", ".", "_no_split_modules", "_keep_in_fp32_modules", "_keep_in_fp32_modules_strict", "getattr(",
        ",", " ", '"', "'", "(", ")", "x", "A", "é", "\n", "_", "1", "self", "Model", "strict", "getattr", "._x",
    ]  # fmt: skip
    texts = _corpus_texts()
    found = [t for t in texts if _INSTANCE_READ.search(t)]
    assert found and len(found) < len(texts)  # both answers occur on the real trees
    for text in texts + _random_texts(pieces, 40_000, 611):
        assert _reads_instance_attr(text) == (_INSTANCE_READ.search(text) is not None), repr(text[:200])


def test_vendor_word_test_equals_its_pattern() -> None:
    pieces = [
        "apex", "flash_attn", "flash_attn_interface", "_interface", "npu_", "npu", "x", "_", "kernels", "kernel",
        "é", " ", ".", "\n", "1", "torch_npu", "torch", "fla", "flash", "\t", "liger_kernel", "triton",
    ]  # fmt: skip
    texts = _corpus_texts()
    found = [t for t in texts if _VENDOR_WORDS.search(t)]
    assert found and len(found) < len(texts)
    for text in texts + _random_texts(pieces, 40_000, 302):
        assert _names_vendor_word(text) == (_VENDOR_WORDS.search(text) is not None), repr(text[:200])
