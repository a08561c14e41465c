"""The summaries every tokenize run combines: `MergeSummaries`, the exact merge of partial `Summary`s
(the whole run's stats.json, each window's, each group's) on any runner, and `count_ids`, a batch's
token ids into a Summary's id frequencies. The breakdowns kept beside the dataset's summary (per
window, per group) are `pipelines/statistics/breakdowns.py`, above windows.py and groups.py, which use these.
"""
from __future__ import annotations

import pickle
from typing import Sequence

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning
import numpy as np

from bpe_ops.stats import Summary

# Below this many ids in a batch (or a window's part of one), ids are counted sparsely (a dict of the
# ids used); above it, densely (one bincount over the whole vocabulary is cheaper than a large dict).
_SPARSE_FRACTION = 8


class SummaryCoder(beam.coders.Coder):
    """A Summary as pickled, its size estimated without pickling it (`Summary.pickled_size_estimate`).
    Beam samples the size of the elements each output of a step carries (the first ten, then fewer)
    by encoding them; a Summary's pickle packs its dense tables (a vocabulary's worth of counts), and
    a tokenize job's shard summary passes two such outputs: pickles on the reading thread for a
    metric alone."""

    def encode(self, value: Summary) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> Summary:
        return pickle.loads(encoded)

    def estimate_size(self, value: Summary) -> int:
        return value.pickled_size_estimate()


beam.coders.registry.register_coder(Summary, SummaryCoder)


def count_ids(summary: Summary, id_arrays: Sequence[Sequence[int]]) -> None:
    """Add the token ids of a batch's records to `summary`'s id frequencies."""
    arrays = [np.asarray(ids, dtype=np.uint32) for ids in id_arrays if len(ids)]
    if not arrays:
        return
    values = np.concatenate(arrays)
    if len(values) * _SPARSE_FRACTION < summary.vocab_size:
        ids, counts = np.unique(values, return_counts=True)
        summary.add_id_counts(dict(zip(ids.tolist(), counts.tolist())))
    else:
        summary.add_dense_id_counts(np.bincount(values, minlength=summary.vocab_size))


class MergeSummaries(beam.CombineFn):
    """The exact merge of partial Summaries. Its empty accumulator is a valid, empty Summary: an
    early-firing trigger can fire a pane with no input, and that pane must combine to something."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def create_accumulator(self):
        return Summary(self.vocab_size)

    def add_input(self, acc, summary):
        return acc.merge(summary)

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs, None)
        if out is None:
            return Summary(self.vocab_size)
        for acc in accs:
            out.merge(acc)
        return out

    def extract_output(self, acc):
        return acc
