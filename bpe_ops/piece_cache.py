"""The bounded cache of pre-token ids: real text repeats its pre-tokens, so the encoder looks each one
up here before merging it.

A `PieceCache` is a dict (its `get` is dict's own: the encoder's hot path maps it over every piece)
holding at most `limit` entries; `remember` stores a short key and, when the cache is full, first
evicts: the older half of the entries (dicts keep insertion order, so that is amortised O(1) per
insert), or all of them when `halve` is False. A key longer than `MAX_CACHED_CHARS` is never
stored: it rarely repeats and would pin memory.

>>> cache = PieceCache(4)
>>> for word in ["a", "b", "c", "d", "e"]:
...     _ = cache.remember(word, (ord(word),))
>>> sorted(cache)                    # full at "e": "a" and "b" (the older half) made way
['c', 'd', 'e']
>>> cache.remember("x" * 300, (1,)), "x" * 300 in cache
((1,), False)
>>> PieceCache(0).remember("a", (97,)), len(PieceCache(0))
((97,), 0)

Threads share one cache with no lock: every step is one dict call, so a reader never meets a torn
entry. Eviction copies the keys in one call (an iterator made in one call and read in the next may
meet the dict resized by another thread) and skips a key another thread evicted first; the encoder
treats the pieces a lookup missed as its misses, whatever another thread stored since.
tests/bpe_ops/test_encoder_threads.py holds the encoder to that.
"""
from __future__ import annotations

from typing import TypeVar

MAX_CACHED_CHARS = 256
V = TypeVar("V")


class PieceCache(dict):
    """pre-token -> ids, at most `limit` entries (0: none kept)."""

    __slots__ = ("limit", "halve")

    def __init__(self, limit: int, *, halve: bool = True):
        super().__init__()
        self.limit = limit
        self.halve = halve

    def remember(self, key: str, ids: V) -> V:
        """`ids`, stored under `key` when the cache keeps any and `key` is short."""
        if self.limit > 0 and len(key) <= MAX_CACHED_CHARS:
            if len(self) >= self.limit:
                self.evict()
            self[key] = ids
        return ids

    def evict(self) -> None:
        """Drop the older half of the entries (`halve`), else all of them."""
        if not self.halve:
            self.clear()
            return
        keys = list(self)
        for key in keys[:(len(keys) + 1) // 2]:
            self.pop(key, None)

    def __reduce__(self):
        # Pickled with its entries (as the plain dict it replaces was).
        return (PieceCache, (self.limit,), {"halve": self.halve}, None, iter(self.items()))

    def __setstate__(self, state: dict) -> None:
        self.halve = state["halve"]
