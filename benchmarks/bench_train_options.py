"""Bytes per token on held-out text with and without the digit and normalization options of training.

    python benchmarks/bench_train_options.py [--train-shards 3] [--vocab-sizes 8192,32768]

Each option set trains on the first --train-shards shards of each of ../shared/corpora/{en,code,multi}
(the library's counting, `train_bpe(counts, ...)` per vocabulary size) and encodes the last shard of
each, which training never sees. Bytes are those of the raw held-out text (NFKC changes some texts'
length; the denominator stays the same for every row). Printed: bytes per token per corpus and over
all three, and the ratio to the run without options at the same size (below 1: more tokens).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import pretokenize, train_bpe  # noqa: E402
from bpe_ops.text_rules import text_rules  # noqa: E402

CORPORA = ("en", "code", "multi")
OPTION_SETS = {
    "none": {},
    "--split-digits": {"split_digits": True},
    "--normalize NFKC": {"normalize": "NFKC"},
}


def read(shard: Path) -> list[str]:
    with open(shard, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "corpora")
    parser.add_argument("--train-shards", type=int, default=3, help="shards of each corpus to train on")
    parser.add_argument("--vocab-sizes", default="8192,32768")
    parser.add_argument("--pattern", default="gpt4")
    args = parser.parse_args()
    sizes = [int(v) for v in args.vocab_sizes.split(",")]
    training, held_out = [], {}
    for name in CORPORA:
        shards = sorted((args.corpora / name).glob("*.jsonl"))
        for shard in shards[:args.train_shards]:
            training.extend(read(shard))
        held_out[name] = read(shards[-1])
    held_bytes = {name: sum(len(t.encode("utf-8")) for t in texts) for name, texts in held_out.items()}
    print(f"training: {sum(len(t.encode()) for t in training) / 1e6:.1f} MB ({args.train_shards} shard(s) each of "
          f"{', '.join(CORPORA)}); held out: " + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in held_bytes.items()))
    rows = []
    for label, options in OPTION_SETS.items():
        started = time.perf_counter()
        rules = text_rules(args.pattern, **options)
        counts = pretokenize.count_pretokens(training, rules.pattern, normalizer=rules.normalizer,
                                             pre_tokenizer=rules.pre_tokenizer)
        for size in sizes:
            tok = train_bpe(counts, vocab_size=size, pattern=args.pattern, **options)
            tokens = {name: sum(map(len, tok.encode_batch(texts))) for name, texts in held_out.items()}
            rows.append((label, size, {name: held_bytes[name] / tokens[name] for name in CORPORA},
                         sum(held_bytes.values()) / sum(tokens.values())))
        print(f"  {label}: counted and trained in {time.perf_counter() - started:.0f} s (measured beside other jobs)",
              file=sys.stderr)
    base = {size: (per, total) for label, size, per, total in rows if label == "none"}
    print(f"\n{'options':<18} {'ids':>7} " + " ".join(f"{n:>12}" for n in CORPORA) + f" {'all':>12}")
    for label, size, per, total in rows:
        cells = [f"{per[n]:.3f} ({per[n] / base[size][0][n]:.3f})" for n in CORPORA]
        print(f"{label:<18} {size:>7,} " + " ".join(f"{c:>12}" for c in cells)
              + f" {total:.3f} ({total / base[size][1]:.3f})")
    print("\nbytes per token on the held-out shards (ratio to no options at the same vocabulary size)")


if __name__ == "__main__":
    main()
