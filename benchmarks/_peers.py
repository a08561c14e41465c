"""The peers' trainings, set up one way for every benchmark: Hugging Face `BpeTrainer` (ByteLevel
alphabet, our split, min_frequency 2), `rustbpe` and `gigatoken.train_bpe`, each on the same texts.

gigatoken's `train_bpe` takes no pattern: it splits with GPT-2's pattern (its `pretokenizer` gives
the pieces of `regex.findall(GPT2 pattern)` on English text), and breaks ties as Hugging Face does;
compare it with the others on `pattern="gpt2"` only.
"""
from __future__ import annotations

from typing import Iterable

from bpe_ops.pretokenize import GPT4_PATTERN


def hf_train(texts: Iterable[str], vocab_size: int, pattern: str = GPT4_PATTERN):
    """A Hugging Face `tokenizers.Tokenizer` trained on `texts` to `vocab_size` ids."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def rustbpe_train(texts: Iterable[str], vocab_size: int, pattern: str = GPT4_PATTERN):
    """A `rustbpe.Tokenizer` trained on `texts` to `vocab_size` ids."""
    import rustbpe
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(texts), vocab_size, pattern=pattern)
    return tok


def gigatoken_train(files: list[str], vocab_size: int) -> list[tuple[bytes, bytes]]:
    """gigatoken's merges (byte pairs) trained on JSONL `files` (their "text" field), which it reads
    itself (in native threads): reading, splitting (GPT-2's pattern), counting and merging."""
    import gigatoken
    _, merges = gigatoken.train_bpe(gigatoken.JsonlFileSource(files, field="text"), vocab_size, [],
                                    tie_breaking="huggingface")
    return merges
