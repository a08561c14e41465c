"""`Utf8Texts`: texts held as one UTF-8 buffer and offsets read back as the str they were, sliced and
joined as lists of str are, their characters counted as `len` counts them."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from bpe_ops.utf8_texts import Utf8Texts

TEXTS = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=12)


@given(texts=TEXTS, start=st.integers(-14, 14), stop=st.integers(-14, 14))
def test_texts_as_utf8_read_back_slice_and_count_as_a_list_of_str(texts, start, stop):
    held = Utf8Texts.of(texts)
    assert list(held) == texts and [held[k] for k in range(len(texts))] == texts and len(held) == len(texts)
    assert held.chars.tolist() == [len(t) for t in texts]
    # Counted from the bytes when the reader gave no counts, a slice of a buffer as well.
    counted = Utf8Texts(held.data, held.offsets)
    assert counted.chars.tolist() == [len(t) for t in texts]
    part = counted[start:stop]
    assert list(part) == texts[start:stop] and part.chars.tolist() == [len(t) for t in texts[start:stop]]
    # A slice of uncounted texts counts only its own bytes, from where they start in the buffer.
    fresh = Utf8Texts(held.data, held.offsets)[start:stop]
    assert fresh.chars.tolist() == [len(t) for t in texts[start:stop]]
    if texts:
        assert held[-1] == texts[-1]


@given(texts=TEXTS, cuts=st.lists(st.integers(0, 12), max_size=4))
def test_slices_joined_are_their_texts_in_order(texts, cuts):
    bounds = sorted({0, len(texts), *(min(c, len(texts)) for c in cuts)})
    held = Utf8Texts.of(texts)
    parts = [held[a:b] for a, b in zip(bounds, bounds[1:])] or [held]
    joined = Utf8Texts.joined(parts[::-1])
    assert list(joined) == [t for a, b in reversed(list(zip(bounds, bounds[1:]))) for t in texts[a:b]] or not texts
    assert joined.offsets[0] == 0 and joined.offsets[-1] == len(bytes(joined.data))
    assert joined.chars.tolist() == [len(t) for t in joined]


def test_a_known_buffer():
    held = Utf8Texts(b"h\xc3\xa9llo\xe6\x97\xa5!", np.array([0, 6, 9, 10]))
    assert list(held) == ["h\u00e9llo", "\u65e5", "!"] and held.chars.tolist() == [5, 1, 1]
    with pytest.raises(IndexError):
        held[3]
    with pytest.raises(ValueError, match="step 1"):
        held[::2]
    assert list(held[2:1]) == [] and held[2:1].offsets.tolist() == [9]
