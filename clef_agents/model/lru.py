"""A thread-safe least-recently-used cache keyed by text, shared by the encoder and the scorer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

V = TypeVar("V")


class LruCache(Generic[V]):
    """Values by key, oldest used first; the size is given per call so callers may read it late.

    Example:
        >>> cache = LruCache[int]()
        >>> cache.through(["a", "b", "a"], lambda chunk: [len(t) for t in chunk], size=1, chunk=64)
        {'a': 1, 'b': 1}
        >>> cache.keys()
        ['b']
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: V, size: int) -> None:
        """Store ``value`` as the most recent, dropping the oldest past ``size``."""
        with self._lock:
            self._items[key] = value
            self._evict(size)

    def through(
        self, keys: Sequence[str], compute: Callable[[list[str]], Sequence[V]], size: int, chunk: int
    ) -> dict[str, V]:
        """Each distinct key's value, the missing ones computed by ``compute`` in chunks of ``chunk``;
        all of them become the most recent (the oldest dropped past ``size``)."""
        wanted = list(dict.fromkeys(keys))
        with self._lock:
            found = {k: self._items[k] for k in wanted if k in self._items}
        missing = [k for k in wanted if k not in found]
        for start in range(0, len(missing), chunk):
            part = missing[start : start + chunk]
            found.update(zip(part, compute(part)))
        with self._lock:
            for key in wanted:
                self._items[key] = found[key]
                self._items.move_to_end(key)
            self._evict(size)
        return found

    def add_missing(self, items: Iterable[tuple[str, V]], size: int) -> None:
        """Store the items whose keys are not cached yet (cached ones keep their values and places)."""
        with self._lock:
            for key, value in items:
                self._items.setdefault(key, value)
            self._evict(size)

    def keys(self) -> list[str]:
        """The cached keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def items(self) -> list[tuple[str, V]]:
        """The cached (key, value) pairs, least recently used first."""
        with self._lock:
            return list(self._items.items())

    def values(self) -> list[V]:
        """The cached values, least recently used first."""
        with self._lock:
            return list(self._items.values())

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()

    def _evict(self, size: int) -> None:
        while len(self._items) > size:
            self._items.popitem(last=False)
