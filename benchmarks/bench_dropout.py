"""BPE-dropout: tokens per byte against p, ours (seeded per record) and Hugging Face's BPE(dropout=p).

    python benchmarks/bench_dropout.py [--train-files 10] [--vocab-size 16384] [--held-out-mb 1]

A tokenizer is trained by `train_bpe` on the first --train-files shards of ../shared/corpora/en and
measured on held-out text: whole records of the last shard up to --held-out-mb MB. For each p in
0, 0.05, 0.1, 0.2, 0.5, 1: tokens per byte of ours (`encode(text, dropout=p, seed=0, record_id=i)`,
record i of the held-out text) and of HF (the same tokenizer.json with `model.dropout = p`), their
ratio, and the CPU seconds of each (this process, all threads; HF's encode_batch uses several).
Every one of our records is checked to decode back to its text; p = 0 equals HF's ids exactly.
The last line is the speed cost of dropout at p = 0.1: our deterministic encoder (compiled, cached)
against our dropout encoder (no cache; compiled, and all in Python).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer, saving, train_bpe  # noqa: E402
from bpe_ops.implementation import Implementation  # noqa: E402

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))
PROBABILITIES = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)


def read_texts(paths: list[Path], max_bytes: int | None = None) -> list[str]:
    texts, size = [], 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                if max_bytes is not None and size >= max_bytes:
                    return texts
                texts.append(text)
                size += len(text.encode("utf-8"))
    return texts


def cpu(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def hf_tokenizer(tok, p: float):
    from tokenizers import Tokenizer as HFTokenizer
    data = json.loads(saving.json_text(tok))
    data["model"]["dropout"] = p or None
    return HFTokenizer.from_str(json.dumps(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-files", type=int, default=10)
    parser.add_argument("--vocab-size", type=int, default=16384)
    parser.add_argument("--held-out-mb", type=float, default=1.0)
    args = parser.parse_args()
    shards = sorted((SHARED / "corpora" / "en").glob("*.jsonl"))
    if len(shards) <= args.train_files:
        sys.exit(f"need more than {args.train_files} shards in {SHARED / 'corpora' / 'en'}")
    train_seconds, tok = cpu(lambda: train_bpe(read_texts(shards[:args.train_files]), args.vocab_size))
    held_out = read_texts(shards[-1:], int(args.held_out_mb * 1e6))
    n_bytes = sum(len(t.encode("utf-8")) for t in held_out)
    print(f"tokenizer: {args.vocab_size:,} ids trained on {shards[0].name} .. {shards[args.train_files - 1].name} "
          f"({train_seconds:.1f} CPU-s); held out: {len(held_out)} records, {n_bytes / 1e6:.2f} MB of {shards[-1].name}")
    print(f"{'p':>5}  {'ours tok/B':>10}  {'HF tok/B':>9}  {'ours/HF':>7}  {'ours CPU-s':>10}  {'HF CPU-s':>8}")
    ours_by_p = {}
    ours_at = ours_by_p.__getitem__
    for p in PROBABILITIES:
        ours_s, ours = cpu(lambda: [tok.encode(t, dropout=p, seed=0, record_id=i) for i, t in enumerate(held_out)])
        hf = hf_tokenizer(tok, p)
        hf_s, theirs = cpu(lambda: [e.ids for e in hf.encode_batch(held_out, add_special_tokens=False)])
        if any(tok.decode(ids) != text for ids, text in zip(ours, held_out)):
            sys.exit(f"p={p}: a record does not decode back to its text")
        if p == 0 and ours != theirs:
            sys.exit("p=0: our ids differ from HF's")
        ours_by_p[p] = ours
        ours_tpb, hf_tpb = sum(map(len, ours)) / n_bytes, sum(map(len, theirs)) / n_bytes
        print(f"{p:>5}  {ours_tpb:>10.4f}  {hf_tpb:>9.4f}  {ours_tpb / hf_tpb:>7.4f}  {ours_s:>10.2f}  {hf_s:>8.2f}")
    pure = Tokenizer(tok.merges, pattern=tok.pattern, implementation=Implementation(compiled=False))
    plain_s, _ = cpu(lambda: [tok.encode(t) for t in held_out])
    speeds = [f"deterministic {n_bytes / 1e6 / plain_s:.2f} MB/CPU-s"]
    for name, encoder in (("compiled", tok), ("Python", pure)):
        seconds, ids = cpu(lambda: [encoder.encode(t, dropout=0.1, seed=0, record_id=i) for i, t in enumerate(held_out)])
        if ids != ours_at(0.1):
            sys.exit(f"the {name} dropout encoder's ids differ")
        speeds.append(f"dropout {name} {n_bytes / 1e6 / seconds:.2f} MB/CPU-s ({seconds / plain_s:.0f}x)")
    print("speed at p=0.1: " + ", ".join(speeds))


if __name__ == "__main__":
    main()
