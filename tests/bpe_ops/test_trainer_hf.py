"""tie_break="hf" reproduces Hugging Face's BpeTrainer merge for merge on real text."""
import json

import pytest

from bpe_ops import pretokenize, train_bpe
from bpe_ops.implementation import Implementation
from bpe_ops.trainer import _merge_loop
from tests.conftest import read_jsonl_texts

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, models, pre_tokenizers, trainers  # noqa: E402

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

VOCAB_SIZE = 8192


def corpus_slice(corpora, max_bytes=2_000_000):
    texts, size = [], 0
    for text in read_jsonl_texts(corpora / "en"):
        texts.append(text)
        size += len(text.encode("utf-8"))
        if size >= max_bytes:
            break
    return texts


def hf_merges(texts, vocab_size=VOCAB_SIZE, **trainer_options):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pretokenize.GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[], **trainer_options)
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


def dna_texts(n_records=300, seed=7):
    """Repetitive DNA-like records (the data max_token_length is for): repeats of a few motifs with
    point mutations, one record per line, no spaces, so each record is one long pre-token."""
    import random
    rng = random.Random(seed)
    motifs = ["ACGTTGCA", "GATTACA", "TTAGGG", "CCCGGGAT"]
    texts = []
    for _ in range(n_records):
        seq = "".join(rng.choice(motifs) * rng.randint(1, 6) for _ in range(20))
        seq = "".join(c if rng.random() > 0.02 else rng.choice("ACGT") for c in seq)
        texts.append(seq)
    return texts


LOOPS = [pytest.param(False, id="python"),
         pytest.param(True, id="compiled", marks=pytest.mark.skipif(_merge_loop is None, reason="not built"))]


@pytest.mark.parametrize("compiled", LOOPS)
@pytest.mark.parametrize("max_token_length", [1, 3, 8])
def test_max_token_length_equals_hugging_face_on_dna(compiled, max_token_length):
    texts = dna_texts()
    expected = hf_merges(texts, vocab_size=1024, max_token_length=max_token_length)
    tok = train_bpe(texts, vocab_size=1024, pattern="gpt4", tie_break="hf", max_token_length=max_token_length,
                    implementation=Implementation(compiled=compiled))
    assert tok.merges == expected
    # HF's rule: no token of max_token_length symbols or more, except pairs of two bytes.
    assert max(len(a + b) for a, b in tok.merges) == max(2, max_token_length - 1)
    unlimited = train_bpe(texts, vocab_size=1024, pattern="gpt4", tie_break="hf",
                          implementation=Implementation(compiled=compiled))
    assert max(len(a + b) for a, b in unlimited.merges) > 16      # the limit did something


@pytest.mark.parametrize("compiled", LOOPS)
def test_max_token_length_equals_hugging_face_on_text(corpora, compiled):
    texts = corpus_slice(corpora, max_bytes=1_000_000)
    expected = hf_merges(texts, max_token_length=6)
    tok = train_bpe(texts, vocab_size=VOCAB_SIZE, pattern="gpt4", tie_break="hf", max_token_length=6,
                    implementation=Implementation(compiled=compiled))
    assert len(expected) > 4000
    for rank, (ours, theirs) in enumerate(zip(tok.merges, expected)):
        assert ours == theirs, f"merge {rank} differs: ours {ours!r}, Hugging Face {theirs!r}"
    assert len(tok.merges) == len(expected)
    assert max(len(a + b) for a, b in tok.merges) == 5
