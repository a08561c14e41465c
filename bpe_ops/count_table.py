"""Pre-token count tables packed into bytes: how counts travel between the counting pipeline's steps.

A packed table is a run of records, each a uint32 key length, the key (a pre-token's UTF-8 bytes)
and an int64 count, both integers little-endian; records come in any order and a key may appear
more than once (its counts add up), so two packed tables concatenated are their sum. A Beam element
of one such `bytes` costs the same to move whatever it holds, where a `{pre-token: count}` dict is
coded entry by entry.

`CountTable` sums packed tables and hands back the sorted columns of a counts file. This module is
the specification; `bpe_ops._native.CountTable` (and `_pcre2.PieceCounter.drain_packed`) do the same
in C, holding no Python object per pre-token, and `new_count_table` picks that one when it is built.
"""
from __future__ import annotations

import struct
from array import array
from itertools import accumulate
from typing import Mapping

from .implementation import DEFAULT, Implementation

try:
    from ._native import CountTable as _CompiledCountTable    # optional: needs a C compiler only
except ImportError:
    _CompiledCountTable = None

_LENGTH = struct.Struct("<I")
_COUNT = struct.Struct("<q")


def pack_counts(counts: Mapping[bytes, int]) -> bytes:
    """`{key: count}` as one packed table."""
    return b"".join(_LENGTH.pack(len(key)) + key + _COUNT.pack(n) for key, n in counts.items())


def unpack_counts(packed: bytes) -> dict[bytes, int]:
    """The `{key: count}` sum of a packed table; ValueError when it is malformed."""
    counts: dict[bytes, int] = {}
    view, at = memoryview(packed), 0
    while at < len(view):
        if len(view) - at < 12:
            raise ValueError("not a packed count table")
        (length,) = _LENGTH.unpack_from(view, at)
        if length > len(view) - at - 12:
            raise ValueError("not a packed count table")
        key = bytes(view[at + 4:at + 4 + length])
        (n,) = _COUNT.unpack_from(view, at + 4 + length)
        counts[key] = counts.get(key, 0) + n
        at += 12 + length
    return counts


class CountTable:
    """A sum of packed count tables: `add_packed`, `absorb`, `packed`, `columns`; pickled as its packed
    table."""

    def __init__(self, packed: bytes = b""):
        self.counts: dict[bytes, int] = unpack_counts(packed) if packed else {}

    def add_packed(self, packed: bytes) -> None:
        get = self.counts.get
        for key, n in unpack_counts(packed).items():
            self.counts[key] = get(key, 0) + n

    def absorb(self, other: "CountTable") -> None:
        """Add `other`'s counts to this table and empty it."""
        if other is self:
            raise ValueError("absorb() takes another CountTable")
        self.add_packed(other.packed())
        other.counts = {}

    def packed(self) -> bytes:
        return pack_counts(self.counts)

    def __len__(self) -> int:
        return len(self.counts)

    def columns(self, min_count: int = 1, large: bool = False) -> tuple[int, bytes, bytes, bytes]:
        """`(rows, offsets, data, counts)` of the keys counted at least `min_count` times, in byte
        order: Arrow binary offsets (int32, rows + 1; int64 for large_binary with `large`) and data,
        and int64 counts, in this machine's byte order (what Arrow buffers hold). OverflowError
        when the keys pass 2 GiB without `large`."""
        keys = sorted(key for key, n in self.counts.items() if n >= min_count)
        data = b"".join(keys)
        if not large and len(data) > 2**31 - 1:
            raise OverflowError("the keys pass 2 GiB: ask for large (int64) offsets")
        offsets = array("q" if large else "i", accumulate(map(len, keys), initial=0))
        counts = array("q", (self.counts[key] for key in keys))
        return len(keys), offsets.tobytes(), data, counts.tobytes()

    def __reduce__(self):
        return CountTable, (self.packed(),)


def new_count_table(packed: bytes = b"", *, implementation: Implementation = DEFAULT):
    """A CountTable holding `packed`: the compiled one where `bpe_ops._native` is built and
    `implementation.compiled`, else this module's; both have the same methods and results.

    >>> new_count_table(pack_counts({b"ab": 2}), implementation=Implementation(compiled=False)).counts
    {b'ab': 2}
    """
    if implementation.compiled and _CompiledCountTable is not None:
        return _CompiledCountTable(packed)
    return CountTable(packed)
