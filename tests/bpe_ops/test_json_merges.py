"""Merges read from a tokenizer.json's text (bpe_ops/json_merges.py) against json.loads, the
specification: `read(data)` is `json.loads(data)` but for the merges, whose `ids` are
`merge_ids_python`'s; the compiled passes may decline (None), never answer otherwise."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import formats, json_merges
from bpe_ops import merge_ids as mi

pytestmark = pytest.mark.skipif(json_merges._model_spans is None, reason="bpe_ops._native is not built")

TOKENS = st.text(alphabet='ab Ġé😀"\\\n\x01\ud800', max_size=3)
PAIR = st.tuples(TOKENS, TOKENS).map(list)


def columns(got):
    return None if got is None else [mi.array("q", c).tolist() for c in got]


def spelled(value, style: int) -> bytes:
    """`value` as JSON text in one of several layouts (escaped or raw non-ASCII, indents, separators)."""
    if style == 0:
        return json.dumps(value).encode()
    if style == 1:
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if style == 2:
        return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8", "surrogatepass")
    return json.dumps(value, separators=(",", ":"), indent="\t").encode()


@st.composite
def documents(draw):
    words = draw(st.lists(PAIR, max_size=8))
    vocab = {}
    for a, b in words:
        for token in (a, b, a + b):
            vocab.setdefault(token, len(vocab) + draw(st.integers(-1, 1)))
    extra = draw(st.dictionaries(TOKENS, st.one_of(st.integers(-2**63, 2**63), st.booleans(), st.text(max_size=2),
                                                   st.floats(0, 9)), max_size=2))
    vocab.update(extra)
    merges = words if draw(st.booleans()) else [" ".join(w) for w in words]
    model = {"type": "BPE", "vocab": vocab, "merges": merges, "decoy": {"merges": [["x", "y"]]}}
    keys = list(model)
    order = draw(st.permutations(keys))
    doc = {"version": "1.0", "added_tokens": [{"merges": "a b"}], "model": {k: model[k] for k in order}, "x": [[[]]]}
    return doc, draw(st.integers(0, 3))


@settings(max_examples=400, deadline=None)
@given(case=documents())
def test_read_is_json_loads_but_for_the_merges(case):
    doc, style = case
    data = spelled(doc, style)
    got = json_merges.read(data)
    # A lone surrogate (every merge's token is in the vocab), raw (not UTF-8) or escaped, or an id that
    # is not an integer: json.loads reads the whole file.
    lone = any("\ud800" in token for token in doc["model"]["vocab"])
    odd = any(type(v) is not int or abs(v) >= 10**18 for v in doc["model"]["vocab"].values())   # 19 digits too
    if lone or odd:
        assert got is None
        return
    assert got is not None                                   # what json.dumps writes is always cut
    merges = got["model"]["merges"]
    assert isinstance(merges, json_merges.MergesText)
    expected = json.loads(data)
    got["model"]["merges"] = expected["model"]["merges"]
    assert got == expected
    vocab = expected["model"]["vocab"]
    assert list(got["model"]["vocab"].items()) == list(vocab.items())       # the same order too
    try:
        spec = columns(mi.merge_ids_python(expected["model"]["merges"], vocab))
    except (TypeError, OverflowError):        # a value array("q") does not take
        spec = TypeError
    try:
        assert columns(merges.ids(vocab)) == spec
    except json_merges.Declined:
        assert spec is None                 # only where the specification has no columns


@settings(max_examples=400, deadline=None)
@given(case=documents(), cut=st.integers(0, 400), insert=st.sampled_from([b"", b",", b"]", b"[", b'"', b"\\", b" ", b"\x00",
                                                                       b"\xff", b"NaN", b"\\u0041", b"{}"]),
       drop=st.integers(0, 3))
def test_damaged_text_is_declined_or_read_as_json_loads_reads_it(case, cut, insert, drop):
    doc, style = case
    data = spelled(doc, style)
    cut = min(cut, len(data))
    data = data[:cut] + insert + data[cut + drop:]
    got = json_merges.read(data)
    try:
        expected = json.loads(data)
    except (ValueError, RecursionError):
        # not JSON (or not UTF-8) outside the merges: not cut; inside: they are declined when read
        if got is not None:
            with pytest.raises(json_merges.Declined):
                got["model"]["merges"].ids(got["model"].get("vocab") if type(got["model"].get("vocab")) is dict else {})
        return
    if got is None:
        return
    merges = got["model"]["merges"]
    got["model"]["merges"] = expected["model"]["merges"]
    assert got == expected and list(got["model"]["vocab"].items()) == list(expected["model"]["vocab"].items())
    vocab = expected["model"].get("vocab")
    if type(vocab) is not dict:
        return
    spec = json_merges.merge_text_ids_python(data, merges.start, merges.end, vocab)
    assert columns(json_merges._merge_text_ids(data, merges.start, merges.end, vocab)) in (None, columns(spec))
    if spec is None:
        assert json_merges._merge_text_ids(data, merges.start, merges.end, vocab) is None


@pytest.mark.parametrize("text", [
    b'{"model": {"vocab": {}, "merges": [["a", "b"]], "merges": []}}',            # json.loads keeps the last
    b'{"model": {"vocab": {}, "vocab": {}, "merges": []}}',
    b'{"model": {"vocab": {}, "merges": [["a", "b"]]}, "model": {"vocab": {}, "merges": []}}',
    b'{"model": {"vocab": {}, "merg\\u0065s": [["a", "b"]]}}',                    # an escaped key may be the one
    b'{"model": {"voc\\u0061b": {}, "merges": [["a", "b"]]}}',
    b'{"mod\\u0065l": {"vocab": {}, "merges": [["a", "b"]]}}',
    b'{"model": {"vocab": {}, "merges": [["a", "b"]]}} x',
    b'{"model": {"vocab": {}, "merges": [["a", "b"]]}',
    b'{"model": {"vocab": {}, "merges": [["a", "b"]]}, "x": NaN}',
    b'{"model": {"vocab": {}, "merges": [["a", "b"]]}, "x": 01}',
    b'{"model": {"vocab": {"a": 1.0}, "merges": []}}',                            # not an integer: json.loads reads it
    b'{"model": {"vocab": {"a": 1e3}, "merges": []}}',
    b'{"model": {"vocab": {"a": 01}, "merges": []}}',
    b'{"model": {"vocab": {"a": 1234567890123456789}, "merges": []}}',            # 19 digits
    b'{"model": {"vocab": {"a": "1"}, "merges": []}}',
    b'{"model": {"vocab": {"\\ud800": 1}, "merges": []}}',
    b'{"model": {"vocab": {"\xff": 1}, "merges": []}}',
    b'{"model": [], "merges": []}',
    b'[{"model": {"vocab": {}, "merges": []}}]',
    b'{"model": {"vocab": {}}}',
])
def test_what_is_not_cut(text):
    assert json_merges.read(text) is None


@pytest.mark.parametrize("merges, vocab, expected", [
    ('[["a", "b"], ["ab", "c"]]', {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, [[0, 3], [1, 2], [3, 4]]),
    ('["a b", "ab c"]', {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, [[0, 3], [1, 2], [3, 4]]),
    ('[ ]', {"a": 0}, [[], [], []]),
    ('[["\\u0120", "\\ud83d\\ude00"]]', {"\u0120": 5, "\U0001F600": 6, "\u0120\U0001F600": 7}, [[5], [6], [7]]),
    ('["a\\u0020b"]', {"a": 0, "b": 1, "ab": 2}, [[0], [1], [2]]),
    ('[["a", "b"], "a b"]', {"a": 0, "b": 1, "ab": 2}, None),           # two forms
    ('["a b c"]', {"a": 0, "b c": 1, "ab c": 2}, None),
    ('[["a", "b", "c"]]', {"a": 0, "b": 1, "ab": 2}, None),
    ('[["a", "b"]]', {"a": 0, "b": 1, "ab": True}, None),               # not a plain int: the specification decides
    ('[["a", "b"]]', {"a": 0, "b": 1}, None),                           # no join
    ('[["a", "\\ud800"]]', {"a": 0, "\ud800": 1, "a\ud800": 2}, None),  # an escaped lone surrogate
])
def test_merge_text_ids(merges, vocab, expected):
    data = merges.encode()
    assert columns(json_merges._merge_text_ids(data, 0, len(data), vocab)) == expected

