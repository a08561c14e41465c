"""SuperBPE against plain BPE at the same vocabulary size: bytes per token on held-out text, training cost.

    python benchmarks/bench_superbpe.py [--vocab-size 32768] [--transitions 0.8 0.9] [--corpora en code multi]
                                        [--max-words 4] [--skip-oracles] [--pipeline]

Per corpus of ../shared/corpora, train on its first shards and measure on all the others (no document
is in both): en 000-003 / 004-011, code 000-001 / 002-005, multi 000-001 / 002-003. Plain BPE and
SuperBPE (`train_bpe(..., superword_transition=T)`, T a share of the vocabulary) learn from the same
pre-token counts; SuperBPE also counts its superword units. Bytes per token is UTF-8 bytes / tokens
over every held-out document, encoded by our encoder. Before any figure is printed, every held-out
document is encoded by Hugging Face `tokenizers` (tokenizer.json) and tiktoken (tokenizer.tiktoken with
the recorded pattern) and must give our ids (`--skip-oracles` skips that). Times are CPU seconds of
this process: counting (pre-tokens; pre-tokens + units) and training (the merge loop; both phases).
`--pipeline` also times `tokenbeam train` on en's training shards with and without
`--superword-transition` (wall, CPU of the process tree, peak memory of the tree).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer, pretokenize, train_bpe  # noqa: E402
from _measure import measure, python  # noqa: E402  (this script's folder is on sys.path)

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))
SPLITS = {"en": (range(0, 4), range(4, 12), 12), "code": (range(0, 2), range(2, 6), 6),
          "multi": (range(0, 2), range(2, 4), 4)}


def shard_texts(corpus: str, numbers) -> list[str]:
    total = SPLITS[corpus][2]
    texts = []
    for k in numbers:
        with open(SHARED / "corpora" / corpus / f"{corpus}-{k:03d}-of-{total:03d}.jsonl", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def cpu(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def oracle_mismatches(tok: Tokenizer, documents: list[str], ours: list[list[int]]) -> tuple[int, int]:
    """Documents on which Hugging Face `tokenizers` and tiktoken, loading the files `tok` writes,
    give other ids than ours."""
    import tiktoken
    import tokenizers
    with tempfile.TemporaryDirectory() as folder:
        tok.save(folder)
        loaded = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        hf = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        with open(os.path.join(folder, "tokenizer.tiktoken"), encoding="ascii") as f:
            ranks = {base64.b64decode(token): int(rank) for token, rank in map(str.split, f)}
    tik = tiktoken.Encoding("superbpe", pat_str=loaded.pattern, mergeable_ranks=ranks, special_tokens={})
    hf_ids = [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)]
    loaded_ids = loaded.encode_batch(documents)
    return (sum(a != b or a != c for a, b, c in zip(ours, hf_ids, loaded_ids)),
            sum(a != b for a, b in zip(ours, tik.encode_ordinary_batch(documents))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--transitions", type=float, nargs="+", default=[0.8, 0.9],
                        help="superword transitions as shares of the vocabulary size")
    parser.add_argument("--corpora", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    parser.add_argument("--max-words", type=int, default=pretokenize.SUPERWORD_MAX_WORDS)
    parser.add_argument("--skip-oracles", action="store_true")
    parser.add_argument("--pipeline", action="store_true", help="also time tokenbeam train on en with and without")
    args = parser.parse_args()
    units_pattern = pretokenize.superword_pattern("gpt4", args.max_words)
    rows, failed = [], False
    for corpus in args.corpora:
        train_shards, held_shards, _ = SPLITS[corpus]
        texts, held = shard_texts(corpus, train_shards), shard_texts(corpus, held_shards)
        held_bytes = sum(len(t.encode("utf-8")) for t in held)
        count_s, counts = cpu(lambda: pretokenize.count_pretokens(texts))
        units_s, units = cpu(lambda: pretokenize.count_pretokens(texts, units_pattern))
        plain_s, plain = cpu(lambda: train_bpe(counts, args.vocab_size))
        plain_tokens = sum(map(len, plain.encode_batch(held)))
        print(f"{corpus}: train {sum(len(t.encode()) for t in texts) / 1e6:.1f} MB ({len(counts):,} unique "
              f"pre-tokens, {len(units):,} unique units), held out {held_bytes / 1e6:.1f} MB, {len(held):,} docs; "
              f"plain BPE {held_bytes / plain_tokens:.3f} bytes/token", flush=True)
        rows.append((corpus, "plain BPE", "-", held_bytes / plain_tokens, 0.0, count_s, plain_s, "-"))
        for share in args.transitions:
            transition = int(args.vocab_size * share)
            super_s, tok = cpu(lambda: train_bpe(counts, args.vocab_size, superword_transition=transition,
                                                 superword_max_words=args.max_words, superword_counts=units))
            ids = tok.encode_batch(held)
            tokens = sum(map(len, ids))
            oracles = "skipped"
            if not args.skip_oracles:
                hf_bad, tik_bad = oracle_mismatches(tok, held, ids)
                oracles = f"{len(held) - max(hf_bad, tik_bad):,}/{len(held):,}"
                failed |= bool(hf_bad or tik_bad)
            rows.append((corpus, "SuperBPE", f"{transition:,}", held_bytes / tokens, 1 - tokens / plain_tokens,
                         count_s + units_s, super_s, oracles))
            print(f"  T={transition:,}: {held_bytes / tokens:.3f} bytes/token, {1 - tokens / plain_tokens:.1%} fewer "
                  f"tokens; oracles equal on {oracles} docs", flush=True)
    print(f"\nvocabulary {args.vocab_size:,}, gpt4 pattern, superword units of at most {args.max_words} pre-tokens; "
          f"CPU seconds of this process (measured beside other jobs)\n")
    print("| corpus | tokenizer | T | bytes/token (held out) | fewer tokens | count CPU-s | train CPU-s "
          "| train time vs plain | HF = tiktoken = ours |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    plain_train = {}
    for corpus, name, transition, bpt, fewer, count_s, train_s, oracles in rows:
        if name == "plain BPE":
            plain_train[corpus] = count_s + train_s
        ratio = (count_s + train_s) / plain_train[corpus]
        print(f"| {corpus} | {name} | {transition} | {bpt:.3f} | {fewer:.1%} | {count_s:.1f} | {train_s:.1f} "
              f"| {ratio:.2f}x | {oracles} |")
    if args.pipeline:
        time_pipeline(args)
    if failed:
        print("\nFAILED: an oracle encoded a held-out document differently", file=sys.stderr)
    return 1 if failed else 0


def time_pipeline(args) -> None:
    """`tokenbeam train` on en's training shards, plain and with each transition."""
    inputs = [str(SHARED / "corpora" / "en" / f"en-{k:03d}-of-012.jsonl") for k in SPLITS["en"][0]]
    print("\n| `tokenbeam train` on en 000-003 | wall s | CPU s (tree) | peak MB (tree) | wall vs plain |")
    print("|---|---:|---:|---:|---:|")
    plain = None
    for share in [None, *args.transitions]:
        extra = [] if share is None else ["--superword-transition", str(int(args.vocab_size * share)),
                                          "--superword-max-words", str(args.max_words)]
        with tempfile.TemporaryDirectory() as out:
            run = measure(python("-m", "pipelines.train", "--input", *inputs, "--output", out, "--vocab-size",
                                 str(args.vocab_size), *extra), cwd=str(ROOT))
        if run.returncode:
            raise SystemExit(f"tokenbeam train failed: {run.stderr[-500:]}")
        plain = plain or run.wall
        name = "plain" if share is None else f"--superword-transition {int(args.vocab_size * share):,}"
        print(f"| {name} | {run.wall:.1f} | {run.cpu:.1f} | {run.peak_rss_mb:.0f} | {run.wall / plain:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
