"""bpe_ops: pure byte-pair encoding (no Beam, no fsspec).

    from bpe_ops import Tokenizer, train_bpe
    tok = train_bpe(texts_or_counts, vocab_size=8192, pattern="gpt4")
    ids = tok.encode("Hello world")
"""
from .encoder import Tokenizer
from .trainer import TrainResult, learn_merges, train_bpe

__all__ = ["Tokenizer", "train_bpe", "learn_merges", "TrainResult"]
