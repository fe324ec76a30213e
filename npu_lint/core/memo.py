"""Bounded caches: what a run (or a long-lived language server) remembers about files is kept for the most
recently used entries only, each keyed by the file's state by its owner."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A mapping that keeps its ``maxsize`` most recently used entries (``get`` and assignment count as a use)."""

    __slots__ = ("maxsize", "_data")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        data = self._data
        if key not in data:
            return default
        data.move_to_end(key)
        return data[key]

    def __getitem__(self, key: K) -> V:
        self._data.move_to_end(key)
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        while len(data) > self.maxsize:
            data.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
