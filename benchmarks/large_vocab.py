"""Build a large byte-level tokenizer.json (default 131,072 ids) for the large-vocabulary benchmarks
and tests: Hugging Face `tokenizers` trained on en+multi+code with a Llama-3-style pre-tokenizer
(Split(regex, Isolated) + ByteLevel(use_regex=false)) and `ignore_merges`, the shape of many current
models' files. Real models' files are not on this machine; this stands in for them.

With --piece-mode it builds a SentencePiece-style file instead, in the layout `transformers` writes for
Llama 2 / Mistral 7B: a BPE over characters with byte_fallback (the 256 <0xNN> pieces in the vocabulary,
ids 3-258 after <unk> <s> </s>), unk_token <unk> with fuse_unk, normalizer Prepend("▁") + Replace(" ", "▁"),
no pre-tokenizer, decoder Replace + ByteFallback + Fuse + Strip. It is trained with a Metaspace
pre-tokenizer that splits at spaces (as SentencePiece's split_by_whitespace: a piece never spans a
space, and the trainer counts word types instead of whole documents, which is what makes 131k merges
finish here, in about a minute); the alphabet is limited (--limit-alphabet, 4,000 characters: rarer
ones fall back to their byte pieces, as with Llama 2's character_coverage). Unlike SentencePiece,
which is trained line by line, newlines are inside the words, so about 18k of the 131k pieces hold
one (`.\n\n`, `(self):\n`); the vocabulary has no runs of `▁` either (each `▁` starts a word).

    python benchmarks/large_vocab.py OUT.json [--vocab-size 131072] [--corpora ../shared/corpora]
    python benchmarks/large_vocab.py OUT.json --piece-mode [--limit-alphabet 4000] [--hold-out]

Training takes minutes (--piece-mode: about one, 1.7 GB of memory); the file is never committed
(~8 MB; --piece-mode ~5 MB).
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


def texts(corpora: Path, hold_out: bool = False):
    """Every document of en/, multi/ and code/; with `hold_out`, not those of each one's last shard
    (en-011, multi-003, code-005), so that they can check the file on text it was not trained on."""
    for sub in ("en", "multi", "code"):
        shards = sorted((corpora / sub).glob("*.jsonl"))
        for shard in shards[:-1] if hold_out else shards:
            with open(shard, encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)["text"]


def build(out: str, vocab_size: int = 131072, corpora: Path | None = None, hold_out: bool = False) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    corpora = corpora or Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
    hf = Tokenizer(models.BPE(ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS,
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts(corpora, hold_out), trainer)
    tmp = out + ".tmp"
    hf.save(tmp)
    os.replace(tmp, out)
    return out


PIECE_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]


def build_piece_mode(out: str, vocab_size: int = 131072, corpora: Path | None = None,
                     limit_alphabet: int = 4000, hold_out: bool = False) -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    corpora = corpora or Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
    hf = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    # The byte pieces are given as special tokens only so that they get ids 3-258 and are never merged;
    # they are taken out of added_tokens below (in Llama 2's file they are plain vocabulary entries).
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=PIECE_SPECIALS + BYTE_PIECES, limit_alphabet=limit_alphabet)
    hf.train_from_iterator(texts(corpora, hold_out), trainer)
    hf.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    hf.pre_tokenizer = None
    hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    doc = json.loads(hf.to_str())
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] in PIECE_SPECIALS]
    vocab = doc["model"]["vocab"]
    assert all(vocab[p] == i for i, p in enumerate(PIECE_SPECIALS + BYTE_PIECES)), "specials not at 0-258"
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    Tokenizer.from_file(tmp)                 # HF reads it back
    os.replace(tmp, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--vocab-size", type=int, default=131072)
    parser.add_argument("--corpora", type=Path, default=None)
    parser.add_argument("--piece-mode", action="store_true",
                        help="a SentencePiece-style file (Llama 2 layout) instead of a byte-level one")
    parser.add_argument("--limit-alphabet", type=int, default=4000, help="with --piece-mode")
    parser.add_argument("--hold-out", action="store_true",
                        help="do not train on the last shard of en/, multi/ and code/ (to check the file on them)")
    args = parser.parse_args()
    if args.piece_mode:
        build_piece_mode(args.out, args.vocab_size, args.corpora, args.limit_alphabet, args.hold_out)
    else:
        build(args.out, args.vocab_size, args.corpora, args.hold_out)


if __name__ == "__main__":
    main()
