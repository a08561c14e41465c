"""A byte-level tokenizer.json loaded with no table cache is read straight into its tables
(`formats.read_tokenizer_data(..., as_tables=True)`), without building the Tokenizer from byte
pairs first: the tables must equal those of `Tokenizer(**formats.read_tokenizer_json(path))`, the
specification, for every kind of byte-level file; any other file is read as before."""
import json

import pytest

from bpe_ops import Implementation, Tokenizer, json_merges, load, formats, table_cache
from tests.conftest import read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

TEXTS = ["Hello world, 1234 567!\t\n  x", "naïve café 日本語 👍🏽", "<|endoftext|> after", ""]


@pytest.fixture(scope="module")
def gpt2_json(gpt2_files, tmp_path_factory):
    """GPT-2's files as HF writes them: the special token in the vocab too, merges as "a b" strings."""
    vocab_json, merges_txt = gpt2_files
    vocab = json.loads(vocab_json.read_text(encoding="utf-8"))
    merges = [line for line in merges_txt.read_text(encoding="utf-8").splitlines()[1:] if line]
    doc = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": merges}}
    return doc


def variants(doc):
    """Byte-level files of every shape the fast read takes: merges as strings or pairs, a
    normalizer and a pre-tokenizer chain, added tokens HF matches itself, ignore_merges."""
    pairs = {**doc, "model": {**doc["model"], "merges": [m.split(" ") for m in doc["model"]["merges"]]}}
    chain = {**pairs, "normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}}
    added = {**pairs, "added_tokens": doc["added_tokens"] + [
        {"id": len(doc["model"]["vocab"]), "content": "[MASK]", "special": False, "lstrip": True, "rstrip": False,
         "single_word": False, "normalized": False}]}
    ignore = {**pairs, "model": {**pairs["model"], "ignore_merges": True}}
    return {"strings": doc, "pairs": pairs, "chain": chain, "added": added, "ignore_merges": ignore}


def written(doc, folder, name):
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def test_tables_read_straight_from_the_file_equal_the_tokenizers(gpt2_json, tmp_path):
    for name, doc in variants(gpt2_json).items():
        path = written(doc, tmp_path, name)
        data = path.read_bytes()
        fast = formats.read_tokenizer_data(data, path, as_tables=True)
        assert isinstance(fast, table_cache.Tables), name
        expected = Tokenizer(**formats.read_tokenizer_data(data, path))
        rebuilt = load.tokenizer_of_tables(Tokenizer, fast)
        assert load.tables_of(rebuilt) == load.tables_of(expected), name
        assert fast == load.tables_of(rebuilt), name          # what a cold load keeps as they are
        assert rebuilt.sha256 == expected.sha256, name
        assert [rebuilt.encode(t, allowed_special="all") for t in TEXTS] == \
            [expected.encode(t, allowed_special="all") for t in TEXTS], name


@pytest.mark.parametrize("asker", ["cold", "warm"])
def test_a_cold_load_gives_the_specified_tokenizer_and_caches_its_sha256_once_asked(gpt2_json, tmp_path, corpora,
                                                                                      asker):
    """A cold load does not build the canonical text (its sha256 is for whoever asks); once a
    tokenizer of the cached tables is asked for it, the cache holds it for the next process."""
    path = written(variants(gpt2_json)["pairs"], tmp_path, "pairs")
    expected = Tokenizer(**formats.read_tokenizer_json(path))
    load._TABLES.clear()
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    cold = Tokenizer.from_file(path, implementation=impl)
    docs = read_jsonl_texts(corpora / "multi", limit=20)
    assert cold.encode_batch(docs) == expected.encode_batch(docs)
    assert cold._tables.sha256 is None and cold._tables == load.tables_of(expected)
    load._TABLES.clear()
    warm = Tokenizer.from_file(path, implementation=impl)
    assert warm._tables.sha256 is None
    assert (cold if asker == "cold" else warm).sha256 == expected.sha256
    load._TABLES.clear()
    later = Tokenizer.from_file(path, implementation=impl)
    assert later._tables.sha256 == expected.sha256 == later.sha256
    assert later.encode_batch(docs) == expected.encode_batch(docs)


@pytest.mark.parametrize("change, message", [
    (lambda doc: doc["model"]["merges"].append("Ġthe Ġthe"), "makes"),        # a product not in the vocab
    (lambda doc: doc["model"]["merges"].append("Ġ zzzq"), "neither in the vocab"),
    (lambda doc: doc["model"]["vocab"].pop("ġ"), "missing: 0x7f"),             # DEL, which no merge uses
])
def test_files_outside_the_fast_read_are_refused_as_before(gpt2_json, tmp_path, change, message):
    doc = json.loads(json.dumps(gpt2_json))
    change(doc)
    path = written(doc, tmp_path, "bad")
    read = formats.read_tokenizer_data(path.read_bytes(), path, as_tables=True)
    assert isinstance(read, dict)
    load._TABLES.clear()
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_file(path)


def test_malformed_merges_are_still_named(gpt2_json, tmp_path):
    doc = json.loads(json.dumps(gpt2_json))
    doc["model"]["merges"][5] = "a b c"
    path = written(doc, tmp_path, "bad")
    with pytest.raises(ValueError, match=r"model.merges\[5\]"):
        formats.read_tokenizer_data(path.read_bytes(), path, as_tables=True)


def test_gpt2s_file_is_read_from_its_text_and_equals_the_full_read(gpt2_json):
    # bpe_ops/json_merges.py: no list of the merges is made (its vocab holds a special token: the
    # merges are read twice, over the whole vocab and over the ordinary tokens)
    data = json.dumps(gpt2_json, ensure_ascii=False).encode("utf-8")
    assert isinstance(json_merges.read(data)["model"]["merges"], json_merges.MergesText)
    fast = formats._tables_of_text(data, "gpt2.json")
    assert fast is not None
    doc = json.loads(data)
    assert fast == formats._read_tokenizer_doc(doc, "gpt2.json", True, formats._check_document(doc))
