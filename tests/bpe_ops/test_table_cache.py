"""The tables a tokenizer file loads into, cached by the SHA-256 of its bytes (bpe_ops/table_cache.py):
a tokenizer rebuilt from them equals `Tokenizer(**formats.read_tokenizer_json(path))` (the
specification) in every table and gives the same ids, and a cache that is corrupt, foreign, stale or
unwritable never changes what loads."""
import hashlib
import os
import stat
from pathlib import Path

import pytest
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer, formats, load, table_cache
from tests.conftest import read_jsonl_texts

pytestmark = pytest.mark.slow

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.fixture(scope="module")
def texts(corpora):
    return read_jsonl_texts(corpora / "tiny")


@pytest.fixture(scope="module")
def hf_file(texts, tmp_path_factory):
    """A Llama-3-style file trained by HF (ignore_merges, special tokens first)."""
    hf = HFTokenizer(models.BPE(ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    hf.save(str(path))
    return hf, path


@pytest.fixture(autouse=True)
def no_process_memo(monkeypatch):
    """Each test sees an empty in-process memo, so loads come from disk or the file."""
    monkeypatch.setattr(load, "_TABLES", {})


def spec(path, implementation=Implementation()):
    return Tokenizer(**formats.read_tokenizer_json(path), implementation=implementation)


def assert_same_tokenizer(a: Tokenizer, b: Tokenizer, texts):
    assert (a.merges, a.vocab, a.special_tokens, a.vocab_size) == (b.merges, b.vocab, b.special_tokens, b.vocab_size)
    assert (a.pattern, a.pattern_name, a.ignore_merges, a.mode) == (b.pattern, b.pattern_name, b.ignore_merges, b.mode)
    assert (a._tokens, a._token_ids, a._ranks, a._pairs, a._merged) == (b._tokens, b._token_ids, b._ranks, b._pairs, b._merged)
    assert (a._byte_ids, a._ranks_ascend, a._identity_bytes) == (b._byte_ids, b._ranks_ascend, b._identity_bytes)
    assert a.encode_batch(texts) == b.encode_batch(texts)
    assert a.sha256 == b.sha256


@pytest.mark.parametrize("compiled", [True, False])
def test_loaded_from_the_cache_equals_the_specification(hf_file, texts, tmp_path, compiled):
    hf, path = hf_file
    impl = Implementation(compiled=compiled, cache_dir=str(tmp_path / "cache"))
    first = Tokenizer.from_file(path, implementation=impl)          # parses, then saves the tables
    assert os.listdir(tmp_path / "cache" / table_cache.SUBFOLDER)
    load._TABLES.clear()
    second = Tokenizer.from_file(path, implementation=impl)         # from the disk cache
    assert second._tables is not None and second._merges is None and second._ranks_table is None
    reference = spec(path, Implementation(compiled=compiled))
    assert_same_tokenizer(second, reference, texts)
    assert_same_tokenizer(first, reference, texts)
    assert second.encode_batch(texts) == [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert second.source_sha256 == table_cache.file_sha256(path.read_bytes())


def test_in_process_memo_serves_the_second_load_and_shares_the_sha256(hf_file, texts):
    _, path = hf_file
    first = Tokenizer.from_file(path)                               # no cache folder: memo only
    assert first._sha256 is None
    digest = first.sha256
    second = Tokenizer.from_file(path)
    assert second._tables is first._tables and second._sha256 == digest
    assert_same_tokenizer(second, spec(path), texts)


def test_gpt2_and_trained_files_round_trip_through_the_cache(gpt2_files, tmp_path, texts):
    gpt2 = Tokenizer.from_gpt2_files(*gpt2_files)
    json_path = gpt2.save(tmp_path / "gpt2")
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    Tokenizer.from_file(json_path, implementation=impl)
    load._TABLES.clear()
    cached = Tokenizer.from_file(json_path, implementation=impl)
    assert cached._tables is not None
    assert_same_tokenizer(cached, spec(json_path), texts)
    assert cached.sha256 == table_cache.file_sha256(open(json_path, "rb").read())   # our canonical file


def cache_file(tmp_path, path):
    return table_cache.cache_path(str(tmp_path / "cache"), table_cache.file_sha256(path.read_bytes()))


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage", "foreign", "old_format"])
def test_a_damaged_or_foreign_cache_file_is_ignored_and_replaced(hf_file, other_file, texts, tmp_path, damage):
    _, path = hf_file
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    Tokenizer.from_file(path, implementation=impl)
    target = cache_file(tmp_path, path)
    data = open(target, "rb").read()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
    elif damage == "empty":
        data = b""
    elif damage == "garbage":
        data = os.urandom(5000)
    elif damage == "foreign":           # another file's intact tables under this file's name
        Tokenizer.from_file(other_file, implementation=impl)
        data = open(cache_file(tmp_path, other_file), "rb").read()
    elif damage == "old_format":
        # Intact (its digest redone), but of another format.
        body = data[:-32].replace(b'"format": %d' % table_cache.FORMAT, b'"format": 0', 1)
        data = body + hashlib.sha256(body).digest()
    with open(target, "wb") as f:
        f.write(data)
    assert table_cache.load(str(tmp_path / "cache"), table_cache.file_sha256(path.read_bytes())) is None
    load._TABLES.clear()
    again = Tokenizer.from_file(path, implementation=impl)
    assert again._tables is not None
    assert_same_tokenizer(again, spec(path), texts)
    load._TABLES.clear()
    assert table_cache.load(str(tmp_path / "cache"), table_cache.file_sha256(path.read_bytes())) is not None


@pytest.fixture(scope="module")
def other_file(tmp_path_factory):
    path = Tokenizer([(b"a", b"b")], special_tokens=["<x>"]).save(tmp_path_factory.mktemp("other"))
    return type(tmp_path_factory.mktemp("p"))(path)


def test_an_unwritable_or_impossible_cache_folder_costs_only_the_saving(hf_file, texts, tmp_path):
    _, path = hf_file
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    tok = Tokenizer.from_file(path, implementation=Implementation(cache_dir=str(blocked)))
    assert_same_tokenizer(tok, spec(path), texts)
    if os.geteuid() != 0:          # root writes anywhere
        readonly = tmp_path / "readonly"
        readonly.mkdir()
        readonly.chmod(stat.S_IRUSR | stat.S_IXUSR)
        load._TABLES.clear()
        tok = Tokenizer.from_file(path, implementation=Implementation(cache_dir=str(readonly)))
        assert_same_tokenizer(tok, spec(path), texts)


def test_an_edited_file_is_a_new_key(hf_file, texts, tmp_path):
    _, path = hf_file
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(path.read_bytes())
    before = Tokenizer.from_file(copy, implementation=impl)
    Tokenizer(before.merges[:10], vocab=None).save(tmp_path)        # another tokenizer, same path
    load._TABLES.clear()
    after = Tokenizer.from_file(copy, implementation=impl)
    assert len(after.merges) == 10 and after.source_sha256 != before.source_sha256
    assert_same_tokenizer(after, spec(copy), texts)


def test_a_bad_file_is_refused_the_same_way_with_a_cache(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "Unigram"}}')
    with pytest.raises(ValueError, match="unsupported tokenizer.json: model Unigram"):
        Tokenizer.from_file(bad, implementation=Implementation(cache_dir=str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists()


SENTENCEPIECE_FILES = sorted((Path(__file__).resolve().parents[1] / "data" / "sentencepiece").glob("*.json"))


@pytest.mark.parametrize("path", SENTENCEPIECE_FILES, ids=lambda p: p.stem)
def test_sentencepiece_style_files_round_trip_through_the_cache(path, texts, tmp_path):
    """Piece-mode tables (Llama / Gemma-style files: byte fallback, unk, Metaspace) come back from
    the cache as the file's own tokenizer: the same piece model, vocabulary, decoder and ids."""
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    Tokenizer.from_file(path, implementation=impl)
    load._TABLES.clear()
    cached = Tokenizer.from_file(path, implementation=impl)
    reference = spec(path)
    assert cached._tables is not None and cached.mode == reference.mode == "piece"
    a, b = cached._piece_model, reference._piece_model
    assert (a.piece_ids, a.byte_ids, a.unk_id, a.fuse_unk, a.byte_fallback, a._joiners, a._candidates) == \
        (b.piece_ids, b.byte_ids, b.unk_id, b.fuse_unk, b.byte_fallback, b._joiners, b._candidates)
    assert (cached.merges, cached.vocab, cached.special_tokens, cached.decoder_spec, cached.unk_token) == \
        (reference.merges, reference.vocab, reference.special_tokens, reference.decoder_spec, reference.unk_token)
    hostile = ["", " ", "  two leading", "emoji 😀🤖 and 𝔘𝔫𝔦", "e\u0301", "<s> x </s>", "\t\n\n"]
    assert cached.encode_batch(texts + hostile) == reference.encode_batch(texts + hostile)
    ids = reference.encode(texts[0])
    assert cached.decode(ids) == reference.decode(ids)
    assert cached.sha256 == reference.sha256 and cached.raw_byte_ids == reference.raw_byte_ids
