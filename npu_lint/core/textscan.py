"""Which words a text contains, for the rules' text pre-checks (``Rule.requires``), each word searched once per
text; when the text is the previous one edited (the language server linting a buffer again after a change),
each word's answer is carried over from that text wherever the edit left the word's occurrence alone.

Sound by construction: with ``P`` the common prefix and ``S`` the common suffix of the previous and the new text,
an occurrence lying wholly in ``P`` or wholly in ``S`` is in both texts; a word absent from the previous text can
occur in the new one only across the edited span, which is all that is searched for it.
"""

from __future__ import annotations

import threading


def _common_prefix(a: str, b: str, limit: int) -> int:
    lo, hi = 0, limit  # a[:lo] == b[:lo]; the answer is at most hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    la, lb = len(a), len(b)
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class WordScan:
    """``contains(word)`` for one text at a time (``begin``); one instance per thread (``for_thread``)."""

    def __init__(self) -> None:
        self.key: object = None
        self.text = ""
        self.found: dict[str, int] = {}  # word -> an occurrence's index in ``text``, or -1
        self.old: dict[str, int] = {}  # the same for the previous text of the same key
        self.prefix = self.suffix = self.delta = self.old_len = 0

    def begin(self, key: object, text: str) -> None:
        """Answer for ``text`` from now on; ``key`` names the document (its path): an earlier text of the same
        key is the one edited into this one."""
        if text is self.text and key == self.key:
            return
        old_text, old_found = self.text, self.found
        self.found = {}
        self.old = {}
        if key == self.key and old_found and old_text:
            limit = min(len(old_text), len(text))
            prefix = _common_prefix(old_text, text, limit)
            suffix = _common_suffix(old_text, text, limit - prefix)
            if prefix + suffix >= limit // 2:  # an edit, not another text: carry the answers over
                self.old = old_found
                self.prefix, self.suffix = prefix, suffix
                self.delta, self.old_len = len(text) - len(old_text), len(old_text)
        self.key, self.text = key, text

    def contains(self, word: str) -> bool:
        found = self.found.get(word)
        if found is None:
            found = self.found[word] = self._find(word)
        return found >= 0

    def _find(self, word: str) -> int:
        text = self.text
        old = self.old.get(word)
        if old is None:
            return text.find(word)
        n = len(word)
        if old >= 0:
            if old + n <= self.prefix:
                return old  # wholly in the unchanged prefix
            if old >= self.old_len - self.suffix:
                return old + self.delta  # wholly in the unchanged suffix
            return text.find(word)
        # absent before: only an occurrence across the edited span is possible
        lo = max(0, self.prefix - n + 1)
        hi = min(len(text), len(text) - self.suffix + n - 1)
        return text.find(word, lo, hi)


_LOCAL = threading.local()


def for_thread() -> WordScan:
    scan = getattr(_LOCAL, "scan", None)
    if scan is None:
        scan = _LOCAL.scan = WordScan()
    return scan
