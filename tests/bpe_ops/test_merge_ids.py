"""`bpe_ops._native.merge_ids` against its specification `merge_ids_python` (bpe_ops/merge_ids.py):
the same id columns, None in the same cases, and well-formed merges whenever it gives columns (the
tokenizer.json check relies on that)."""
from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import merge_ids as mi


TOKENS = st.text(alphabet="ab cĠ", max_size=3)
MERGE = st.one_of(TOKENS,                                      # "a b" (or malformed: no space, two)
                  st.lists(TOKENS, min_size=1, max_size=3),     # ["a", "b"] (or a list of 1 or 3)
                  st.tuples(TOKENS, TOKENS).map(list),
                  st.tuples(TOKENS, TOKENS).map(" ".join),
                  st.integers(0, 3), st.none())
VALUE = st.one_of(st.integers(0, 2**32), st.integers(-2**70, 2**70), st.booleans(), st.floats(0, 9), st.text(max_size=1))



def _outcome(f, *args):
    try:
        got = f(*args)
    except Exception as exc:                  # the same exception type, if any
        return type(exc)
    return None if got is None else [column.tolist() for column in got]


@settings(max_examples=400, deadline=None)
@given(merges=st.lists(MERGE, max_size=6),
       vocab=st.dictionaries(TOKENS, st.integers(0, 2**32 - 1), max_size=20),
       odd=st.dictionaries(TOKENS, VALUE, max_size=3))
def test_compiled_is_the_specification(native, merges, vocab, odd):
    for v in (vocab, {**vocab, **odd}):
        expected = _outcome(mi.merge_ids_python, merges, v)
        assert _outcome(mi.merge_ids, merges, v) == expected
        got = native.merge_ids(merges, v)
        if got is not None:                   # the compiled pass says yes only where the specification does
            assert expected == [mi.array("q", column).tolist() for column in got]
            assert mi.merge_halves(merges) is not None


def test_every_merge_found_in_both_forms(native):
    vocab = {t: i for i, t in enumerate(["a", "b", "c", "ab", "abc", "Ġ", "ĠĠ", "", "x y"])}
    for merges in ([["a", "b"], ["ab", "c"], ["Ġ", "Ġ"], ["", "a"]], ["a b", "ab c", "Ġ Ġ", " a"]):
        assert [c.tolist() for c in native_columns(native, merges, vocab)] == [[0, 3, 5, 7], [1, 2, 5, 0],
                                                                                 [3, 4, 6, 0]]
    assert native.merge_ids([], vocab) == (b"", b"", b"")


def native_columns(native, merges, vocab):
    return [mi.array("q", column) for column in native.merge_ids(merges, vocab)]


@pytest.mark.parametrize("merges", [["a b", ["a", "b"]], [["a", "b"], "a b"], ["a b c"], ["ab"], [["a", "b", "c"]],
                                    [["a", 1]], [("a", "b")], ["a b", None], [["a", "x"]], ["a b", "b x"]])
def test_none_when_malformed_or_missing(native, merges):
    vocab = {"a": 0, "b": 1, "ab": 2, "ba": 3}
    assert native.merge_ids(merges, vocab) is None
    assert mi.merge_ids_python(merges, vocab) is None


def test_values_it_does_not_take_go_to_the_specification(native):
    # A bool id (an int to array("q")) or one past 64 bits: the compiled pass declines, the
    # specification decides (columns, or the OverflowError the tables would have raised).
    assert native.merge_ids([["a", "b"]], {"a": True, "b": 1, "ab": 2}) is None
    assert [c.tolist() for c in mi.merge_ids([["a", "b"]], {"a": True, "b": 1, "ab": 2})] == [[1], [1], [2]]
    with pytest.raises(OverflowError):
        mi.merge_ids([["a", "b"]], {"a": 2**64, "b": 1, "ab": 2})


def test_a_string_merge_has_exactly_one_space(native):
    # "a b c" could be read as "a" + "b c" (both tokens here): a malformed merge all the same.
    vocab = {"a": 0, "b c": 1, "ab c": 2, "a b": 3, "c": 4, "a bc": 5}
    for merges in (["a b c"], [["a", "b c"], "a b c"]):
        assert native.merge_ids(merges, vocab) is None
        assert mi.merge_ids_python(merges, vocab) is None
    assert [c.tolist() for c in native_columns(native, [["a", "b c"], ["a b", "c"]], vocab)] == [[0, 3], [1, 4], [2, 5]]
