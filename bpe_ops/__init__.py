"""bpe_ops: pure byte-pair encoding (no Beam, no fsspec).

    from bpe_ops import Tokenizer, train_bpe
    tok = train_bpe(texts_or_counts, vocab_size=8192, pattern="gpt4")
    ids = tok.encode("Hello world")

Which code runs (the compiled twins or the Python specifications, PCRE2 or `regex`) is an
`implementation=` argument (bpe_ops/implementation.py); bpe_ops reads no environment variable.
"""
from .encoder import Tokenizer
from .implementation import Implementation
from .trainer import TrainResult, learn_merges, train_bpe

__all__ = ["Tokenizer", "train_bpe", "learn_merges", "TrainResult", "Implementation"]
