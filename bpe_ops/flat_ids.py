"""The token ids of a batch of records as one flat uint32 column and each record's count: what the
compiled encoder hands back for many texts in one call, kept that way to the Parquet file, so that a
batch of short records costs no array object per record on the way.

    >>> batch = FlatIds.of([[5, 6], [], [7]])
    >>> len(batch), batch.counts.tolist(), batch.ends.tolist()
    (3, [2, 0, 1], [2, 2, 3])
    >>> [ids.tolist() for ids in batch]
    [[5, 6], [], [7]]
    >>> batch.with_appended(0).ids.tolist()      # an EOS id after each record
    [5, 6, 0, 0, 7, 0]
    >>> FlatIds.joined([batch, FlatIds.of([[8]])]).counts.tolist()
    [2, 0, 1, 1]
"""
from __future__ import annotations

from array import array
from typing import Iterable, Sequence

import numpy as np


class FlatIds:
    """Records' token ids, flat: record i's are `ids[ends[i] - counts[i]:ends[i]]`. A sequence of
    records (len, indexing and iteration give each record's ids as a uint32 numpy view).

    Args:
        ids: every record's ids one after the other (uint32).
        counts: how many ids each record has (int64).
    """
    __slots__ = ("ids", "counts", "_ends")

    def __init__(self, ids: np.ndarray, counts: np.ndarray):
        self.ids = np.asarray(ids, dtype=np.uint32)
        self.counts = np.asarray(counts, dtype=np.int64)
        self._ends: np.ndarray | None = None
        if self.ids.ndim != 1 or self.counts.ndim != 1 or int(self.counts.sum()) != len(self.ids) or (
                len(self.counts) and int(self.counts.min()) < 0):
            raise ValueError(f"{len(self.ids)} ids do not split into records of {len(self.counts)} counts")

    @classmethod
    def of(cls, arrays: Iterable[Sequence[int]]) -> "FlatIds":
        """Each record's ids given apart (uint32 `array`s, numpy arrays or lists), made flat."""
        arrays = [a if isinstance(a, np.ndarray) else np.frombuffer(a, dtype=np.uint32)
                  if isinstance(a, array) and a.typecode == "I" else np.asarray(a, dtype=np.uint32) for a in arrays]
        counts = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        ids = np.concatenate(arrays).astype(np.uint32, copy=False) if arrays else np.zeros(0, dtype=np.uint32)
        return cls(ids, counts)

    @classmethod
    def joined(cls, batches: Sequence["FlatIds"]) -> "FlatIds":
        """The records of `batches`, in order, as one batch."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return cls(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64))
        return cls(np.concatenate([b.ids for b in batches]), np.concatenate([b.counts for b in batches]))

    @property
    def ends(self) -> np.ndarray:
        """Where each record's ids end in `ids` (int64, the running sum of `counts`)."""
        if self._ends is None:
            self._ends = np.cumsum(self.counts)
        return self._ends

    def with_appended(self, token_id: int) -> "FlatIds":
        """The same records with `token_id` after each one's ids (an EOS token)."""
        out = np.empty(len(self.ids) + len(self.counts), dtype=np.uint32)
        # Record i's ids move i places on; its new last place, ends[i] + i, takes the id.
        last = self.ends + np.arange(len(self.counts))
        keep = np.ones(len(out), dtype=bool)
        keep[last] = False
        out[keep] = self.ids
        out[last] = token_id
        return FlatIds(out, self.counts + 1)

    def split(self, k: int) -> tuple["FlatIds", "FlatIds"]:
        """The first `k` records and the rest, as two batches (views of this one's ids).

        >>> [[ids.tolist() for ids in part] for part in FlatIds.of([[1], [2, 3], [4]]).split(2)]
        [[[1], [2, 3]], [[4]]]
        """
        at = int(self.ends[k - 1]) if k else 0
        return FlatIds(self.ids[:at], self.counts[:k]), FlatIds(self.ids[at:], self.counts[k:])

    def arrays(self) -> list[array]:
        """Each record's ids as a uint32 `array` of its own (for callers that hold records apart)."""
        out = []
        for ids in self:
            one = array("I")
            one.frombytes(ids.tobytes())
            out.append(one)
        return out

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, i: int) -> np.ndarray:
        end = int(self.ends[i])
        return self.ids[end - int(self.counts[i]):end]

    def __iter__(self):
        return iter(np.split(self.ids, self.ends[:-1])) if len(self.counts) else iter(())
