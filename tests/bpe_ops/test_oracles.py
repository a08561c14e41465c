"""Identical ids to the peers on every document of the real held-out-style corpora `multi/` and `code/`:

- GPT-2's own vocab.json + merges.txt, loaded by us, against tiktoken built offline from the same files;
- a tokenizer trained here by `train_bpe` (gpt4 pattern, 8,192 ids) and saved, loaded back by
  Hugging Face `tokenizers` (from tokenizer.json) and by tiktoken (from tokenizer.tiktoken).

Training uses a fixed slice of `en/` (its first 2 of 12 shards, about 8.7 MB) so that this file runs
in about a minute on 2 cores; the merge loop is the same at any size.
"""
import base64
import json

import pytest
import tiktoken
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Tokenizer, train_bpe
from bpe_ops.pretokenize import GPT2_PATTERN, unicode_to_token
from tests.conftest import read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

TRAIN_SHARDS = 2


@pytest.fixture(scope="module")
def documents(corpora):
    docs = read_jsonl_texts(corpora / "multi") + read_jsonl_texts(corpora / "code")
    assert len(docs) == 927 + 837
    return docs


def assert_same_ids(ours, theirs, docs, who):
    assert len(ours) == len(theirs) == len(docs)
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not bad, f"{who}: {len(bad)} documents differ, first {docs[bad[0]][:80]!r}"


def test_gpt2_files_match_tiktoken(gpt2_files, documents):
    vocab_json, merges_txt = gpt2_files
    tok = Tokenizer.from_gpt2_files(vocab_json, merges_txt)
    with open(vocab_json, encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = {unicode_to_token(t): i for t, i in vocab.items() if t != "<|endoftext|>"}
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    assert tok.special_tokens == {"<|endoftext|>": 50256} and tok.vocab_size == 50257
    ours = tok.encode_batch(documents)
    assert_same_ids(ours, enc.encode_ordinary_batch(documents), documents, "tiktoken")
    assert [tok.decode(ids) for ids in ours] == documents


@pytest.fixture(scope="module")
def trained(corpora, tmp_path_factory):
    """Trained on the en/ slice without special tokens (HF would treat their strings in the text
    as specials), saved, and loaded back from disk."""
    shards = sorted((corpora / "en").glob("*.jsonl"))[:TRAIN_SHARDS]
    texts = []
    for shard in shards:
        with open(shard, encoding="utf-8") as f:
            texts.extend(json.loads(line)["text"] for line in f)
    tok = train_bpe(texts, vocab_size=8192, pattern="gpt4")
    assert tok.vocab_size == 8192 and tok.training.stop_reason == "vocab_size"
    directory = tmp_path_factory.mktemp("trained")
    json_path = tok.save(directory)
    return tok, directory, json_path


@pytest.fixture(scope="module")
def trained_ids(trained, documents):
    tok, _, json_path = trained
    loaded = Tokenizer.from_file(json_path)
    assert loaded.merges == tok.merges and loaded.vocab == tok.vocab
    return loaded.encode_batch(documents)


def test_trained_tokenizer_loads_in_hf(trained, trained_ids, documents):
    hf = HFTokenizer.from_file(str(trained[2]))
    theirs = [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)]
    assert_same_ids(trained_ids, theirs, documents, "tokenizers")


def test_trained_tokenizer_loads_in_tiktoken(trained, trained_ids, documents):
    tok, directory, _ = trained
    ranks = {}
    with open(directory / "tokenizer.tiktoken", encoding="ascii") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    enc = tiktoken.Encoding("trained", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})
    assert_same_ids(trained_ids, enc.encode_ordinary_batch(documents), documents, "tiktoken")
    assert [tok.decode(ids) for ids in trained_ids] == documents
