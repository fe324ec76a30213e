"""``core.textscan.WordScan``: the rules' pre-check words found in a text, carried over from the previous text of
the same document across an edit; always the answer of ``word in text``."""

from __future__ import annotations

import random

from npu_lint.core.textscan import WordScan, _common_prefix, _common_suffix

WORDS = ["cuda", "torch.", "all_reduce", "npu", "(", "a", "xyz", "cuda()", "\n\n", "sp_enabled", "import"]
ALPHABET = "abcdnpux.()_\n torch cuda all_reduce sp_enabled"


def test_common_prefix_and_suffix() -> None:
    assert _common_prefix("abcdef", "abcxef", 6) == 3
    assert _common_suffix("abcdef", "abcxef", 3) == 2
    assert _common_prefix("abc", "abc", 3) == 3
    assert _common_suffix("abc", "zbc", 3) == 2


def test_answers_equal_a_search_across_random_edits() -> None:
    rng = random.Random(19)
    for _ in range(300):
        scan = WordScan()
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 120)))
        for _ in range(8):
            scan.begin("doc.py", text)
            asked = rng.sample(WORDS, rng.randrange(1, len(WORDS)))
            for word in asked:
                assert scan.contains(word) == (word in text), (text, word)
            start = rng.randrange(0, len(text) + 1)
            end = rng.randrange(start, min(len(text), start + 6) + 1)
            insert = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 8)))
            text = text[:start] + insert + text[end:]


def test_another_document_is_searched_afresh() -> None:
    scan = WordScan()
    scan.begin("a.py", "import torch\nx.cuda()\n")
    assert scan.contains("cuda")
    scan.begin("b.py", "import torch\nx.npu()\n")
    assert not scan.contains("cuda") and scan.contains("npu")
