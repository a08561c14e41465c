"""The peers' trainings, set up one way for every benchmark: Hugging Face `BpeTrainer` (ByteLevel
alphabet, our gpt4 split, min_frequency 2) and `rustbpe`, both on texts with the gpt4 pattern."""
from __future__ import annotations

from typing import Iterable

from bpe_ops.pretokenize import GPT4_PATTERN


def hf_train(texts: Iterable[str], vocab_size: int):
    """A Hugging Face `tokenizers.Tokenizer` trained on `texts` to `vocab_size` ids."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def rustbpe_train(texts: Iterable[str], vocab_size: int):
    """A `rustbpe.Tokenizer` trained on `texts` to `vocab_size` ids."""
    import rustbpe
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(texts), vocab_size, pattern=GPT4_PATTERN)
    return tok
