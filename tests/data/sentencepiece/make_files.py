"""Make the SentencePiece BPE models and their tokenizer.json conversions that
tests/bpe_ops/test_sentencepiece_bpe.py checks (the files beside this script).

`transformers`' converter reads the SentencePiece model through protobuf >= 7, newer than Apache Beam
allows, so this runs in a separate virtual environment; the generated files are committed:

    python -m venv /tmp/spvenv && /tmp/spvenv/bin/pip install sentencepiece transformers tokenizers 'protobuf>=7'
    /tmp/spvenv/bin/python tests/data/sentencepiece/make_files.py ../shared/corpora

Each model is trained on the first documents of the first shard of en/, multi/ and code/ (the
tests encode the other shards), small enough to commit. The families, as transformers 5 converts them:

  llama     byte_fallback, split_digits (Llama 2 / Mistral 7B's trainer options), converted by
            `LlamaTokenizer.from_pretrained` (Metaspace prepend_scheme=first, split=false, no normalizer);
  llama-legacy  the same model in the layout of Llama 2's and Mistral 7B's published files (what
            `LlamaConverter` writes with legacy=True: normalizer Prepend + Replace, no pre-tokenizer,
            unk_token <unk>); transformers 5's LlamaConverter no longer runs on its own, so the
            layout is written from its code onto the `llama` file;
  gemma     byte_fallback, split_digits, no dummy prefix, user-defined symbols (Gemma's options),
            converted by `GemmaTokenizer.from_pretrained` (normalizer Replace, Split on spaces);
  unk       no byte_fallback, character_coverage < 1 (unknown characters: fuse_unk), a user-defined
            symbol, converted by `SpmConverter.build_tokenizer_from_spm_proto` (the converter that follows
            the model's own normalizer settings; Metaspace, Split of user-defined symbols, ignore_merges).

llama32k (tests/test_spm_compiled.py, benchmarks/bench_sentencepiece.py --race) is the llama options at
Llama 2's size: vocab_size=32000, trained on every line of en-000, en-001, multi-000 and code-000
(input_sentence_size=400000, shuffled), converted by `LlamaTokenizer.from_pretrained` as llama is:

    python make_files.py CORPORA --llama32k
"""
import json
import os
import shutil
import sys
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS_PER_SHARD = 400
CHARS_PER_DOC = 20_000


def training_text(corpora: str) -> str:
    lines = []
    for shard in ("en/en-000-of-012.jsonl", "multi/multi-000-of-004.jsonl", "code/code-000-of-006.jsonl"):
        with open(os.path.join(corpora, shard), encoding="utf-8") as f:
            for n, line in enumerate(f):
                if n >= DOCS_PER_SHARD:
                    break
                lines.extend(t for t in json.loads(line)["text"][:CHARS_PER_DOC].split("\n") if t.strip())
    return "\n".join(lines)


def train(name: str, text_file: str, **options) -> str:
    prefix = os.path.join(HERE, name)
    spm.SentencePieceTrainer.train(input=text_file, model_prefix=prefix, model_type="bpe", vocab_size=4000,
                                   max_sentence_length=1 << 20, num_threads=2, minloglevel=2, **options)
    os.remove(prefix + ".vocab")
    return prefix + ".model"


def from_pretrained(cls, model: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(model, os.path.join(tmp, "tokenizer.model"))
        cls.from_pretrained(tmp).save_pretrained(os.path.join(tmp, "out"))
        doc = json.load(open(os.path.join(tmp, "out", "tokenizer.json"), encoding="utf-8"))
    write(name, doc)


def write(name: str, doc: dict) -> None:
    with open(os.path.join(HERE, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def main(corpora: str) -> None:
    from transformers import GemmaTokenizer, LlamaTokenizer
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    with tempfile.TemporaryDirectory() as tmp:
        text_file = os.path.join(tmp, "train.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write(training_text(corpora))
        llama = train("llama", text_file, byte_fallback=True, split_digits=True, normalization_rule_name="identity",
                      remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, character_coverage=0.9995)
        gemma = train("gemma", text_file, byte_fallback=True, split_digits=True, normalization_rule_name="identity",
                      remove_extra_whitespaces=False, add_dummy_prefix=False, allow_whitespace_only_pieces=True,
                      user_defined_symbols=["<start_of_turn>", "<end_of_turn>", "\t\t", "<tool>"],
                      character_coverage=0.9995)
        unk = train("unk", text_file, byte_fallback=False, normalization_rule_name="identity",
                    character_coverage=0.99, user_defined_symbols=["<tool>"])
    from_pretrained(LlamaTokenizer, llama, "llama")
    from_pretrained(GemmaTokenizer, gemma, "gemma")
    doc = json.load(open(os.path.join(HERE, "llama.json"), encoding="utf-8"))
    doc["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    doc["pre_tokenizer"] = None
    doc["model"]["unk_token"] = "<unk>"
    write("llama-legacy", doc)
    proto = import_protobuf().ModelProto()
    with open(unk, "rb") as f:
        proto.ParseFromString(f.read())
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    tok = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, legacy=False)
    for i, p in enumerate(proto.pieces):        # control and user-defined pieces, as the extractor adds them
        if p.type in (3, 4):
            from tokenizers import AddedToken
            tok.add_tokens([AddedToken(p.piece, normalized=False, special=p.type == 3)])
    write("unk", json.loads(tok.to_str()))


def llama32k(corpora: str) -> None:
    from transformers import LlamaTokenizer

    lines = []
    for shard in ("en/en-000-of-012.jsonl", "en/en-001-of-012.jsonl", "multi/multi-000-of-004.jsonl",
                  "code/code-000-of-006.jsonl"):
        with open(os.path.join(corpora, shard), encoding="utf-8") as f:
            for line in f:
                lines.extend(t for t in json.loads(line)["text"].split("\n") if t.strip())
    with tempfile.TemporaryDirectory() as tmp:
        text_file = os.path.join(tmp, "train.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        prefix = os.path.join(HERE, "llama32k")
        spm.SentencePieceTrainer.train(
            input=text_file, model_prefix=prefix, model_type="bpe", vocab_size=32000, byte_fallback=True,
            split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True, character_coverage=0.9995, max_sentence_length=1 << 16,
            input_sentence_size=400000, shuffle_input_sentence=True, num_threads=2, minloglevel=2)
        os.remove(prefix + ".vocab")
    from_pretrained(LlamaTokenizer, prefix + ".model", "llama32k")


if __name__ == "__main__":
    corpora = next((a for a in sys.argv[1:] if not a.startswith("--")),
                   os.path.join(HERE, "..", "..", "..", "..", "shared", "corpora"))
    llama32k(corpora) if "--llama32k" in sys.argv else main(corpora)
