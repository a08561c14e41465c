"""tie_break="hf" reproduces Hugging Face's BpeTrainer merge for merge on real text."""
import json

import pytest

from bpe_ops import pretokenize, train_bpe
from tests.conftest import read_jsonl_texts

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, models, pre_tokenizers, trainers  # noqa: E402

VOCAB_SIZE = 8192


def corpus_slice(corpora, max_bytes=2_000_000):
    texts, size = [], 0
    for text in read_jsonl_texts(corpora / "en"):
        texts.append(text)
        size += len(text.encode("utf-8"))
        if size >= max_bytes:
            break
    return texts


def hf_merges(texts):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pretokenize.GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    # tokenizers >= 0.20 writes pairs; older versions "a b" strings.
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    return [(pretokenize.unicode_to_token(a), pretokenize.unicode_to_token(b)) for a, b in pairs]


def test_hf_tie_break_equals_hugging_face(corpora):
    texts = corpus_slice(corpora)
    expected = hf_merges(texts)
    tok = train_bpe(texts, vocab_size=VOCAB_SIZE, pattern="gpt4", tie_break="hf")
    assert len(expected) == VOCAB_SIZE - 256
    # Ties decide many merges here, so this compares the tie rule, not only the counts.
    assert tok.training.tied_merges > 1000
    for rank, (ours, theirs) in enumerate(zip(tok.merges, expected)):
        assert ours == theirs, f"merge {rank} differs: ours {ours!r}, Hugging Face {theirs!r}"
    assert len(tok.merges) == len(expected)
