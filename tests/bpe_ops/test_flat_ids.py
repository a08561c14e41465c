"""bpe_ops.flat_ids.FlatIds, and a batch's calibration taken from one flat buffer
(`_native.calibrate_flat`) against the same batch given record by record (`_native.calibrate_ids`
and the numpy specification)."""
import random
from array import array

import numpy as np
import pytest

from bpe_ops import stats
from bpe_ops.flat_ids import FlatIds
from bpe_ops.stats import Summary

needs_native = pytest.mark.skipif(stats._CALIBRATE_FLAT is None, reason="bpe_ops._native not built (optional)")


def records(seed: int, n: int, vocab_size: int) -> list[list[int]]:
    """n records of random ids, empty ones and long ones among them."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(rng.choice([0, 1, 3, 40, 700]))] for _ in range(n)]


def test_a_flat_batch_holds_each_record_s_ids_in_order():
    lists = records(1, 50, 1000)
    flat = FlatIds.of([array("I", x) for x in lists])
    assert len(flat) == 50 and flat.counts.tolist() == [len(x) for x in lists]
    assert [ids.tolist() for ids in flat] == lists
    assert [flat[i].tolist() for i in range(50)] == lists and flat[-1].tolist() == lists[-1]
    assert [a.tolist() for a in flat.arrays()] == lists and all(a.typecode == "I" for a in flat.arrays())
    assert FlatIds.of(lists).ids.tolist() == [i for x in lists for i in x]      # lists and arrays alike


def test_joined_batches_are_their_records_in_order():
    parts = [records(seed, 7, 500) for seed in range(4)]
    joined = FlatIds.joined([FlatIds.of(p) for p in parts])
    assert [ids.tolist() for ids in joined] == [x for p in parts for x in p]
    assert len(FlatIds.joined([])) == 0 and list(FlatIds.joined([])) == []


def test_an_appended_id_follows_every_record_empty_ones_too():
    lists = [[], [1, 2], [], [3]]
    assert [ids.tolist() for ids in FlatIds.of(lists).with_appended(9)] == [[9], [1, 2, 9], [9], [3, 9]]
    assert FlatIds.of([]).with_appended(9).ids.tolist() == []


def test_counts_that_do_not_split_the_ids_are_refused():
    with pytest.raises(ValueError, match="do not split"):
        FlatIds(np.array([1, 2, 3], np.uint32), np.array([1, 1], np.int64))
    with pytest.raises(ValueError, match="do not split"):
        FlatIds(np.array([1, 2], np.uint32), np.array([3, -1], np.int64))


@needs_native
@pytest.mark.parametrize("vocab_size", [300, 8192, 128_000])
@pytest.mark.parametrize("with_tallies", [False, True])
def test_a_flat_batch_calibrates_as_its_records_do(vocab_size, with_tallies):
    """The same records calibrated from one flat buffer, from an array each (compiled) and from lists
    (the numpy specification): the same raw-byte counts, cells and id counts."""
    lists = records(vocab_size, 120, vocab_size)
    record_ids = [f"r{k}" for k in range(len(lists))]
    n_tokens = [len(x) for x in lists]
    results = []
    for ids in (FlatIds.of(lists), [array("I", x) for x in lists], lists):
        summary = Summary(vocab_size, raw_byte_ids=list(range(0, min(vocab_size, 256), 3)))
        tallies = summary.tallies() if with_tallies else None
        calibration = summary.batch_calibration(n_tokens, record_ids, ids, tallies=tallies)
        summary.add_batch(n_tokens, n_tokens, n_tokens, n_tokens, record_ids=record_ids, id_arrays=ids,
                          calibration=calibration)
        if tallies is not None:
            summary.add_tallies(tallies)
        results.append((calibration.raw_byte_tokens.tolist(), summary.group_classes.tolist(),
                        summary.id_counts.tolist(), summary.moment_sums))
    assert results[0] == results[1] == results[2]
    assert sum(results[0][0]) > 0 and sum(map(sum, results[0][1])) == sum(n_tokens)


@needs_native
def test_tallies_near_their_limit_move_their_counts_and_lose_none():
    """A thread's tallies count in uint32: a batch that could take a counter past 2**32 - 1 first
    moves every count to int64 totals. Tallies told they are near that limit (before each of three
    batches) give the summary the counts of tallies that are not."""
    lists = records(8192, 60, 8192)
    batches = [lists[:20], lists[20:40], lists[40:]]
    results = []
    for near_limit in (False, True):
        summary = Summary(8192, raw_byte_ids=range(0, 256, 5))
        tallies = summary.tallies()
        for k, batch in enumerate(batches):
            if near_limit:
                tallies.counted = tallies.LIMIT - 3
            names = [f"r{k}-{i}" for i in range(len(batch))]
            n_tokens = [len(x) for x in batch]
            calibration = summary.batch_calibration(n_tokens, names, FlatIds.of(batch), tallies=tallies)
            summary.add_batch(n_tokens, n_tokens, n_tokens, n_tokens, record_ids=names,
                              id_arrays=FlatIds.of(batch), calibration=calibration)
        assert (tallies.moved is not None) == near_limit
        summary.add_tallies(tallies)
        assert tallies.moved is None and not tallies.id_counts.any()
        results.append((summary.group_classes.tolist(), summary.id_counts.tolist()))
    assert results[0] == results[1]
    assert sum(results[0][1]) == sum(map(len, lists))


def test_a_batch_past_what_tallies_hold_at_once_is_refused():
    tallies = Summary(300).tallies()
    with pytest.raises(ValueError, match="at most"):
        tallies.make_room(1 << 32)


@needs_native
def test_a_flat_batch_with_an_id_outside_the_vocabulary_counts_nothing():
    summary = Summary(300, raw_byte_ids=[1, 2])
    tallies = summary.tallies()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        summary.batch_calibration([2, 1], ["a", "b"], FlatIds.of([[1, 2], [300]]), tallies=tallies)
    assert not tallies.id_counts.any() and not tallies.cells.any()


@needs_native
def test_a_flat_batch_whose_counts_disagree_with_n_tokens_is_refused():
    summary = Summary(300, raw_byte_ids=[1])
    with pytest.raises(ValueError, match="disagree"):
        summary.batch_calibration([2, 2], ["a", "b"], FlatIds.of([[1, 2], [3]]))


@needs_native
def test_ends_that_fall_or_pass_the_ids_are_refused():
    rows, mask = np.zeros(2, np.int32), np.zeros(10, np.uint8)
    raw, cells = np.zeros(2, np.int64), np.zeros(64, np.int64)
    ids = np.arange(4, dtype=np.uint32)
    for ends in ([3, 2], [2, 5], [-1, 2]):
        with pytest.raises(ValueError, match="ends must rise"):
            stats._CALIBRATE_FLAT(ids, np.array(ends, np.int64), rows, mask, 8, raw, cells)
    with pytest.raises(ValueError, match="uint32"):
        stats._CALIBRATE_FLAT(b"\0\0\0", np.array([0, 0], np.int64), rows, mask, 8, raw, cells)
