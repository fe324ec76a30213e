"""One medium's spelling rewritten as another's (image -> video -> audio), for the rules that compare the steps or
records a function or table keeps for one medium with its twins for the others (private to the multimodal family).

Spellings are rewritten as whole words between non-alphanumerics (`image_mask` -> `video_mask`,
`IMAGE_INPUT_INDEX` -> `VIDEO_INPUT_INDEX`, `"<|image_pad|>"` -> `"<|video_pad|>"`), plus the one key pair whose
name does not say its medium on one side (`pixel_values` <-> `pixel_values_videos`, VeOmni's and transformers'
convention)."""

from __future__ import annotations

import ast
import functools
import re

from npu_lint.core.astutil import (
    walk as _walk,
)  # ast.walk's order, as a list (faster; shared within a file's run)

MEDIA = ("image", "video", "audio")
_WORDS = {
    "image": ("image", "images", "img", "imgs"),
    "video": ("video", "videos", "vid", "vids"),
    "audio": ("audio", "audios", "aud", "auds"),
}
_PATTERNS: dict[str, re.Pattern[str]] = {
    m: re.compile(r"(?<![A-Za-z0-9])(" + "|".join(w for w in words) + r")(?![A-Za-z0-9])", re.IGNORECASE)
    for m, words in _WORDS.items()
}
_PIXELS = {"image": "pixel_values", "video": "pixel_values_videos"}


def media_of(text: str) -> set[str]:
    """The media a spelling names (`pixel_values` counts as the image's); a fresh set (callers may change it)."""
    return set(_media_of(text))


@functools.lru_cache(maxsize=4096)
def _media_of(text: str) -> frozenset[str]:
    """``media_of``, once per spelling (a function's names repeat across the rules and the files)."""
    found = {m for m, pattern in _PATTERNS.items() if pattern.search(text)}
    if re.search(r"(?<![A-Za-z0-9_])pixel_values(?![A-Za-z0-9_])", text):
        found.add("image")
    return frozenset(found)


def rewrite(text: str, src: str, dst: str) -> str:
    """``text`` with medium ``src``'s spellings replaced by ``dst``'s, keeping plural and case."""
    if src in _PIXELS and dst in _PIXELS:
        pixel_src, pixel_dst = _PIXELS[src], _PIXELS[dst]
        text = re.sub(rf"(?<![A-Za-z0-9_]){pixel_src}(?![A-Za-z0-9_])", "\0PIX\0", text)
    else:
        pixel_dst = ""
    src_words, dst_words = _WORDS[src], _WORDS[dst]

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        index = src_words.index(word.lower())
        out = dst_words[index]
        if word.isupper():
            return out.upper()
        if word[:1].isupper():
            return out.capitalize()
        return out

    text = _PATTERNS[src].sub(swap, text)
    return text.replace("\0PIX\0", pixel_dst) if pixel_dst else text


def spellings(node: ast.AST) -> set[str]:
    """The identifiers, attribute names and string constants ``node`` holds."""
    out: set[str] = set()
    for sub in _walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) < 80:
            out.add(sub.value)
        elif isinstance(sub, ast.keyword) and sub.arg:
            out.add(sub.arg)
        elif isinstance(sub, ast.arg):
            out.add(sub.arg)
    return out


def medium_words(node: ast.AST, medium: str) -> set[str]:
    """The spellings in ``node`` that name ``medium``."""
    return {s for s in spellings(node) if medium in media_of(s)}
