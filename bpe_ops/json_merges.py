"""A tokenizer.json's merges read from its text: `merge_ids`' id columns without a Python object per merge.

A 200k vocabulary has over 300k merges: `json.loads` makes a list and two strings of each (tens of
MB, a quarter of a cold load), and the load keeps only their ids. `read(data)` cuts the values of
`model.vocab` and `model.merges` out of the file's bytes (`model_spans`), reads the vocab with
`vocab_text` and the rest with `json.loads`, and puts a `MergesText` where the merges were: its
`ids(vocab)` reads the id columns straight from the text (`merge_text_ids`), or raises `Declined`
when it cannot tell (then the caller reads the whole file the usual way, which also names what is
wrong), as does anything else asked of it.

The specification is json.loads: `read(data)` is `json.loads(data)` but for the merges, and
`ids(vocab)` is `merge_ids.merge_ids_python` of `json.loads(data)["model"]["merges"]`
(`merge_text_ids_python`); the tests hold the compiled passes to that. They may decline where
json.loads answers (NaN, an escaped lone surrogate, an escaped or repeated key, an id that is not
an integer of at most 18 digits), never otherwise.

>>> data = b'{"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}, "x": null}'
>>> doc = read(data)
>>> doc["model"]["vocab"], doc["x"], [c.tolist() for c in doc["model"]["merges"].ids(doc["model"]["vocab"])]
({'a': 0, 'b': 1, 'ab': 2}, None, [[0], [1], [2]])
>>> merge_text_ids_python(b'["a b"]', 0, 7, {"a": 0, "b": 1, "ab": 2})
(array('q', [0]), array('q', [1]), array('q', [2]))
"""
from __future__ import annotations

import json
from array import array

from . import merge_ids

try:
    from ._native import merge_text_ids as _merge_text_ids, model_spans as _model_spans, vocab_text as _vocab_text
except ImportError:            # not built: no cut (the specification parses the whole text)
    _merge_text_ids = _model_spans = _vocab_text = None


class Declined(Exception):
    """The merges cannot be read from the text: read the whole file instead."""


class MergesText:
    """`model.merges` of a tokenizer.json, still as its text: `data[start:end]`."""

    def __init__(self, data: bytes, start: int, end: int):
        self.data, self.start, self.end = data, start, end

    def ids(self, vocab: dict) -> tuple[array, array, array]:
        """`merge_ids.merge_ids(json.loads(text), vocab)`; Declined instead of None."""
        try:
            got = _merge_text_ids(self.data, self.start, self.end, vocab) if type(vocab) is dict else None
        except UnicodeDecodeError:             # a string of the merges is not UTF-8
            got = None
        if got is None:
            raise Declined("the merges are not all found or not all well-formed")
        return array("q", got[0]), array("q", got[1]), array("q", got[2])

    def __iter__(self):
        raise Declined("the merges' list is not made")


def read(data: bytes) -> dict | None:
    """The JSON document in `data` with a `MergesText` as `model.merges`, or None when they cannot be
    cut out (not built; not one strict JSON object with one `model` object holding one `vocab` of
    integers and one `merges`; the rest not UTF-8 JSON). The vocab is read by `vocab_text`: the
    dict json.loads makes, without its key memo."""
    spans = _model_spans(data) if _model_spans is not None else None
    if spans is None:
        return None
    vocab_start, vocab_end, merges_start, merges_end = spans
    vocab = _vocab_text(data, vocab_start, vocab_end)
    if vocab is None:
        return None
    (a, b, fill_a), (c, d, fill_c) = sorted([(vocab_start, vocab_end, b"{}"), (merges_start, merges_end, b"[]")])
    try:
        doc = json.loads(b"".join([data[:a], fill_a, data[b:c], fill_c, data[d:]]).decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    doc["model"]["vocab"] = vocab
    doc["model"]["merges"] = MergesText(data, merges_start, merges_end)
    return doc


def merge_text_ids_python(data: bytes, start: int, end: int, vocab: dict):
    """The specification of `merge_text_ids`: `merge_ids_python` of the JSON array in data[start:end]."""
    try:
        merges = json.loads(data[start:end])
    except (ValueError, RecursionError):
        return None
    return merge_ids.merge_ids_python(merges, vocab) if type(merges) is list else None
