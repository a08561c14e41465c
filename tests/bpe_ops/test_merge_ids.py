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



@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.text(alphabet="abĠé😀", min_size=2, max_size=4), min_size=1, max_size=12),
       cuts=st.lists(st.integers(1, 3), min_size=12, max_size=12), twice=st.lists(st.booleans(), min_size=12,
                                                                                  max_size=12),
       gap=st.integers(-3, 1))
def test_joins_guessed_from_the_last_id_are_the_vocabs(native, words, cuts, twice, gap):
    # The compiled pass compares a merge's halves with the tokens of the last join's id and the next
    # before it looks the join up: here the joins mostly take consecutive ids in merge order (a word
    # twice: one token of two merges), their strings of every kind (ASCII, Latin-1, BMP, astral) and
    # length; a negative `gap` gives some tokens the id of another (each is still its own token).
    merges = []
    for word, cut, again in zip(words, cuts, twice):
        cut = min(cut, len(word) - 1)
        merges.append([word[:cut], word[cut:]])
        if again and len(word) > 2:
            merges.append([word[:len(word) - cut], word[len(word) - cut:]])
    vocab: dict = {}
    for a, b in merges:
        vocab.setdefault(a, len(vocab))
        vocab.setdefault(b, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab) + gap)
    for form in (merges, [" ".join(m) for m in merges if " " not in "".join(m)]):
        expected = _outcome(mi.merge_ids_python, form, vocab)
        got = native.merge_ids(form, vocab)
        assert (None if got is None else [mi.array("q", c).tolist() for c in got]) == expected
