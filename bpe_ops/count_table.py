"""Pre-token count tables packed into bytes: how counts travel between the counting pipeline's steps.

A packed table is a run of records, each a uint32 key length, the key (a pre-token's UTF-8 bytes)
and an int64 count, both integers little-endian; records come in any order and a key may appear
more than once (its counts add up), so two packed tables concatenated are their sum. A Beam element
of one such `bytes` costs the same to move whatever it holds, where a `{pre-token: count}` dict is
coded entry by entry.

`CountTable` sums packed tables and hands back the sorted columns of a counts file, or its counts
alone (for a histogram of counts); `budget_cut` says which pre-tokens a budget of N keeps. This module is
the specification; `bpe_ops._native.CountTable` (and `_pcre2.PieceCounter.drain_packed`) do the same
in C, holding no Python object per pre-token, and `new_count_table` picks that one when it is built.
"""
from __future__ import annotations

import struct
import zlib
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

    def count_values(self) -> bytes:
        """The count of every key (int64, this machine's byte order), in no particular order."""
        return array("q", self.counts.values()).tobytes()

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


def tie_order(key: bytes) -> tuple[int, bytes]:
    """The order in which pre-tokens of the budget's threshold count are kept, within a bucket: by
    CRC-32 of the bytes, then by the bytes. Buckets come first (bucket 0 first; a bucket is the CRC-32
    modulo the number of buckets), so the kept ones are a pseudo-random sample, with no bias towards
    a script or a first letter, and the same whatever order the counts arrive in."""
    return zlib.crc32(key), key


def budget_cut(histograms: Mapping[int, Mapping[int, int]], max_unique: int, min_count: int = 1) -> dict:
    """Which pre-tokens a budget of `max_unique` keeps, from each bucket's exact histogram of counts
    (`{bucket: {count: pre-tokens with that count}}`; pre-tokens below `min_count` are dropped first):
    the `max_unique` most frequent, exactly (all of them when there are fewer).

    Every pre-token counted more than `threshold` times is kept; of those counted exactly `threshold`
    times, bucket b keeps its first `ties_kept_by_bucket[b]` by `tie_order` (a bucket not listed keeps
    all of its own). `threshold` is the largest count such that at most `max_unique` pre-tokens have a
    count above it. The result also holds the unique pre-tokens before and after, the ties at the
    threshold and those kept, and the occurrences (pre-tokens with repeats) kept, all exact.

    >>> cut = budget_cut({0: {5: 1, 2: 2}, 1: {2: 1, 1: 4}}, 2)
    >>> cut["threshold"], cut["ties_kept_by_bucket"], cut["unique_after"], cut["pretokens_kept"]
    (2, {0: 1, 1: 0}, 2, 7)
    """
    if max_unique < 1:
        raise ValueError(f"max_unique must be positive, got {max_unique}")
    total: dict[int, int] = {}
    for histogram in histograms.values():
        for count, n in histogram.items():
            if count >= min_count:
                total[count] = total.get(count, 0) + n
    unique = sum(total.values())
    kept_above = occurrences_above = 0
    threshold, ties, ties_kept, by_bucket = min(total, default=min_count), 0, 0, {}
    for count in sorted(total, reverse=True):
        if kept_above + total[count] > max_unique:        # the cut falls inside this count
            threshold, ties, ties_kept = count, total[count], max_unique - kept_above
            by_bucket = _share_ties(histograms, count, ties_kept)
            break
        kept_above += total[count]
        occurrences_above += count * total[count]
    else:                                                 # the budget keeps everything
        kept_above -= total.get(threshold, 0)
        occurrences_above -= threshold * total.get(threshold, 0)
        ties = ties_kept = total.get(threshold, 0)
    return {"max_unique": max_unique, "min_count": min_count, "unique_before": unique,
            "unique_after": kept_above + ties_kept, "threshold": threshold, "ties_at_threshold": ties,
            "ties_kept": ties_kept, "pretokens_kept": occurrences_above + threshold * ties_kept,
            "ties_kept_by_bucket": by_bucket}


def _share_ties(histograms: Mapping[int, Mapping[int, int]], count: int, keep: int) -> dict[int, int]:
    """`keep` pre-tokens of `count` taken from the buckets in order: {bucket: how many of its own}
    for every bucket that keeps fewer than all of them."""
    shares = {}
    for bucket in sorted(histograms):
        n = histograms[bucket].get(count, 0)
        if n > keep:
            shares[bucket] = keep
        keep -= min(n, keep)
    return shares
