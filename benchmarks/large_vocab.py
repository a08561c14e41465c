"""Build a large byte-level tokenizer.json (default 131,072 ids) for the large-vocabulary benchmarks
and tests: Hugging Face `tokenizers` trained on en+multi+code with a Llama-3-style pre-tokenizer
(Split(regex, Isolated) + ByteLevel(use_regex=false)) and `ignore_merges`, the shape of many current
models' files. Real models' files are not on this machine; this stands in for them.

    python benchmarks/large_vocab.py OUT.json [--vocab-size 131072] [--corpora ../shared/corpora]

Training takes minutes; the file is never committed (it is ~8 MB).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def texts(corpora: Path):
    for sub in ("en", "multi", "code"):
        for shard in sorted((corpora / sub).glob("*.jsonl")):
            with open(shard, encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)["text"]


def build(out: str, vocab_size: int = 131072, corpora: Path | None = None) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    corpora = corpora or Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
    hf = Tokenizer(models.BPE(ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS,
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts(corpora), trainer)
    tmp = out + ".tmp"
    hf.save(tmp)
    os.replace(tmp, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--vocab-size", type=int, default=131072)
    parser.add_argument("--corpora", type=Path, default=None)
    args = parser.parse_args()
    build(args.out, args.vocab_size, args.corpora)


if __name__ == "__main__":
    main()
