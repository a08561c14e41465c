"""`bpe_ops._native.ranks_ascend` (what `merging.ranks_ascend_of` runs for a loaded file's tables)
against its specification `ranks_ascend(first_ranks(...))`: the same answer on merge tables with
repeated pairs, products made twice and parts made after use; None outside 32-bit ids."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops.merging import first_ranks, ranks_ascend, ranks_ascend_of




def _specification(left, right, merged):
    return ranks_ascend(first_ranks(left, right), left, right, merged)


IDS = st.one_of(st.integers(0, 6), st.sampled_from([2**32 - 1, 2**32 - 2, 2**31]))
MERGES = st.lists(st.tuples(IDS, IDS, IDS), max_size=12)


@settings(max_examples=1000, deadline=None)
@given(MERGES)
def test_compiled_is_the_specification(native, merges):
    left, right, merged = ([m[k] for m in merges] for k in range(3))
    columns = [array("q", c) for c in (left, right, merged)]
    assert native.ranks_ascend(*columns) is _specification(left, right, merged)
    assert ranks_ascend_of(*columns) is _specification(left, right, merged)


@pytest.mark.parametrize("left, right, merged, expected", [
    ([97, 256], [98, 99], [256, 257], True),
    ([256, 97], [99, 98], [257, 256], False),            # 256 used before it is made
])
def test_worked_cases(native, left, right, merged, expected):
    assert native.ranks_ascend(*(array("q", c) for c in (left, right, merged))) is expected


def test_columns_of_different_lengths_are_refused(native):
    with pytest.raises(ValueError):
        native.ranks_ascend(array("q", [97, 256]), array("q", [98]), array("q", [256, 257]))


def test_a_repeated_pair_is_not_live(native):
    # Rank 2 repeats rank 0's pair: it never applies, so its use of 257 (made at rank 3) is no fault;
    # and the product 256 made again at rank 2 does not count as made there.
    left, right, merged = [97, 256, 97, 257], [98, 99, 98, 100], [256, 257, 256, 258]
    assert _specification(left, right, merged) is True
    assert native.ranks_ascend(*(array("q", c) for c in (left, right, merged))) is True
    left[2], right[2] = 257, 97                          # now live, and 257 is made at rank 1: fine
    assert native.ranks_ascend(*(array("q", c) for c in (left, right, merged))) is _specification(left, right, merged)


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40])
def test_ids_outside_32_bits_go_to_the_specification(native, bad):
    columns = [array("q", [97]), array("q", [bad]), array("q", [300])]
    assert native.ranks_ascend(*columns) is None
    assert ranks_ascend_of(*columns) is True
