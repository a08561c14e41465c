"""tiktoken rank files as input (`Tokenizer.from_tiktoken`, and `load_tokenizer(url, pattern=...,
special_tokens=...)` for the pipelines): the ids tiktoken's own `Encoding` gives on every document
of multi/ and code/, for GPT-2's ranks, for ranks we trained, and for ranks shuffled so that they no
longer follow merge order; refusals in one line."""
import base64
import json
import random

import pytest
import tiktoken

from bpe_ops import Implementation, Tokenizer, load, formats
from bpe_ops.pretokenize import GPT2_PATTERN, GPT4_PATTERN, unicode_to_token
from pipelines.datasets import tokenizer_files
from pipelines.core.errors import UserError
from tests.conftest import read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def documents(corpora):
    return read_jsonl_texts(corpora / "multi") + read_jsonl_texts(corpora / "code")


def write_ranks(path, ranks: dict):
    with open(path, "w", encoding="ascii") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode('ascii')} {rank}\n")
    return path


@pytest.fixture(scope="module")
def gpt2_ranks(gpt2_files):
    with open(gpt2_files[0], encoding="utf-8") as f:
        vocab = json.load(f)
    return {unicode_to_token(t): i for t, i in vocab.items() if t != EOT}


@pytest.fixture(scope="module")
def gpt2_rank_file(gpt2_ranks, tmp_path_factory):
    return write_ranks(tmp_path_factory.mktemp("gpt2") / "gpt2.tiktoken", gpt2_ranks)


def test_gpt2_rank_file_gives_tiktoken_ids(gpt2_rank_file, gpt2_ranks, documents):
    tok = Tokenizer.from_tiktoken(gpt2_rank_file, "gpt2", {EOT: 50256})
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=gpt2_ranks, special_tokens={EOT: 50256})
    assert tok.ignore_merges and tok.vocab_size == enc.n_vocab == 50257
    assert tok.encode_batch(documents) == enc.encode_ordinary_batch(documents)
    text = f"a{EOT}b {EOT}"
    assert tok.encode(text, allowed_special="all") == enc.encode(text, allowed_special="all")
    assert tok.encode(text) == enc.encode_ordinary(text)
    assert [tok.decode(ids) for ids in tok.encode_batch(documents[:50])] == documents[:50]


def test_trained_rank_file_with_its_pattern_and_through_the_cache(corpora, documents, tmp_path):
    trained = Tokenizer.from_file(_trained(corpora, tmp_path))
    ranks = {t: i for i, t in trained.vocab.items() if i not in trained.special_tokens.values()}
    path = write_ranks(tmp_path / "tokenizer.model", ranks)             # the name some models use
    enc = tiktoken.Encoding("t", pat_str=GPT4_PATTERN, mergeable_ranks=ranks, special_tokens={})
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    first = Tokenizer.from_tiktoken(path, "cl100k_base", implementation=impl)
    load._TABLES.clear()
    cached = Tokenizer.from_tiktoken(path, "gpt4", implementation=impl)
    assert cached._tables is not None and cached.pattern_name == first.pattern_name == "gpt4"
    expected = enc.encode_ordinary_batch(documents)
    assert first.encode_batch(documents) == expected and cached.encode_batch(documents) == expected
    assert (cached.merges, cached.vocab, cached.sha256) == (first.merges, first.vocab, first.sha256)
    # Another pattern or other special tokens are another key, not the cached tables.
    load._TABLES.clear()
    other = Tokenizer.from_tiktoken(path, "gpt2", {EOT: len(ranks)}, implementation=impl)
    assert other.pattern_name == "gpt2" and other.special_tokens == {EOT: len(ranks)}


def _trained(corpora, tmp_path):
    from bpe_ops import train_bpe
    texts = read_jsonl_texts(corpora / "en", limit=200)
    return train_bpe(texts, vocab_size=2000, pattern="gpt4").save(tmp_path / "trained")


def test_ranks_out_of_merge_order_still_give_tiktoken_ids(gpt2_ranks, documents, tmp_path):
    """Ranks shuffled among the first 3,000 multi-byte tokens: a merge may rank before the merges
    that make its parts, which only tiktoken's rule (rank of the concatenation) defines."""
    ordered = [t for t, i in sorted(gpt2_ranks.items(), key=lambda kv: kv[1]) if i >= 256][:3000]
    shuffled = [gpt2_ranks[t] for t in ordered]
    random.Random(7).shuffle(shuffled)
    ranks = {t: i for t, i in {**gpt2_ranks, **dict(zip(ordered, shuffled))}.items() if i < 3256}
    tok = Tokenizer.from_tiktoken(write_ranks(tmp_path / "shuffled.tiktoken", ranks), "gpt2")
    assert not tok._ranks_ascend
    enc = tiktoken.Encoding("s", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert tok.encode_batch(documents) == enc.encode_ordinary_batch(documents)
    python = Tokenizer.from_tiktoken(tmp_path / "shuffled.tiktoken", "gpt2", implementation=Implementation(compiled=False))
    assert python.encode_batch(documents[:200]) == enc.encode_ordinary_batch(documents[:200])


def test_rank_file_sniffing():
    assert formats.is_rank_file(b"IQ== 0\nIg== 1\n")
    assert formats.is_rank_file(b"IQ== 0")
    assert not formats.is_rank_file(b'{"model": {}}')
    assert not formats.is_rank_file(b"\n\x0a\x06<unk>")      # a SentencePiece protobuf


@pytest.mark.parametrize("content, message", [
    ("IQ== 0\nIQ== 0\n", "rank 0 given twice"),
    ("IQ== 0\n!!!! 1\n", "invalid base64"),
    ("IQ== 0\nIg==\n", "expected `base64 rank`"),
    ("IQ== 0\n", "must hold all 256 single bytes"),
])
def test_bad_rank_files_are_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.tiktoken"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_tiktoken(path, "gpt2")


def test_pipeline_loaders_take_pattern_and_special_tokens(gpt2_rank_file, tmp_path):
    url = str(gpt2_rank_file)
    tok, ref = tokenizer_files.identify_tokenizer(url, pattern="gpt2", special_tokens={EOT: 50256})
    assert ref.pattern == "gpt2" and ref.special_tokens == ((EOT, 50256),)
    worker = tokenizer_files.load_identified_tokenizer(ref)
    assert worker.special_tokens == {EOT: 50256} and worker.sha256 == tok.sha256 == ref.sha256
    with pytest.raises(UserError, match="does not record its split pattern; give --pattern"):
        tokenizer_files.load_tokenizer(url)
    json_path = tok.save(tmp_path / "json")
    with pytest.raises(UserError, match="apply to tiktoken rank files only"):
        tokenizer_files.load_tokenizer(json_path, pattern="gpt2")
    with pytest.raises(UserError, match="unknown pattern name 'gtp2'"):
        tokenizer_files.load_tokenizer(url, pattern="gtp2")
    assert tokenizer_files.parse_special_token("<|a=b|>=7") == ("<|a=b|>", 7)
    with pytest.raises(UserError, match="expected TOKEN=ID"):
        tokenizer_files.parse_special_token("<|a|>")
    # The file changed since the launcher identified it.
    write_ranks(gpt2_rank_file.parent / "changed.tiktoken", {bytes([b]): b for b in range(256)})
    moved = ref.__class__(str(gpt2_rank_file.parent / "changed.tiktoken"), ref.sha256, ref.file_sha256,
                          ref.implementation, ref.pattern, ref.special_tokens)
    with pytest.raises(UserError, match="changed since the run started"):
        tokenizer_files.load_identified_tokenizer(moved)
