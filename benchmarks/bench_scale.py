"""Sizing figures for "Running at scale": how the count table grows with the corpus, what
`--min-count` pruning removes, and what memory the merge loop needs per million unique pre-tokens.

    python benchmarks/bench_scale.py [--corpora ../shared/corpora] [--vocab-size 32768] [--pure]

1. Growth: en/ shards are counted one by one (gpt4 pattern, as the train pipeline does on its
   workers) and summed over the first 1, 2, 4, 8 and 12 shards; multi/ and code/ whole, and all three
   together. For each: MB of text, pre-token occurrences, unique pre-tokens, and how many survive
   `--min-count` 2 and 5 (and what share of the occurrences those keep). A log-log fit of unique
   against occurrences over the en/ points (Heaps' law, unique ~ K * n^beta) gives the exponent to
   extrapolate with.
2. Memory: `learn_merges` (the loop the launcher runs after the Beam count) on several count tables,
   each in a fresh process. The process unpickles the table (a plain dict, as the launcher holds it),
   then Linux's peak-RSS counter is reset (`/proc/self/clear_refs`) so that peak minus current RSS is
   exactly what the loop adds; the table's own size is RSS after loading minus before. With `--pure`,
   the pure-Python loop is measured too.
3. What pruning costs: the merges learned from the pruned en/ tables are compared with the unpruned
   ones (shared merges) and used to encode the whole unpruned en/ count table (each unique pre-token
   encoded once, weighted by its count): tokens per byte, against the unpruned tokenizer's.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer, pretokenize  # noqa: E402

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))
EN_PREFIXES = (1, 2, 4, 8, 12)
MIN_COUNTS = (2, 5)


# --- 1. growth of the count table -----------------------------------------------------------------

def count_shard(path: Path) -> tuple[Counter, int]:
    """{pretoken bytes: count} of one JSONL shard and its UTF-8 text bytes."""
    texts, size = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            texts.append(text)
            size += len(text.encode("utf-8", "replace"))
    return pretokenize.count_pretokens(texts, "gpt4"), size


def summarize(name: str, shards: int, counts: Counter, size: int) -> dict:
    occurrences = sum(counts.values())
    row = {"corpus": name, "shards": shards, "mb": size / 1e6, "occurrences": occurrences,
           "unique": len(counts)}
    for m in MIN_COUNTS:
        kept = [n for n in counts.values() if n >= m]
        row[f"unique_ge{m}"] = len(kept)
        row[f"kept_occ_ge{m}"] = sum(kept) / occurrences
    return row


def growth(corpora: Path) -> tuple[list[dict], dict[str, Counter]]:
    """The growth rows, and the count tables the memory part trains on."""
    rows, tables = [], {}
    total, total_size = Counter(), 0
    en = sorted((corpora / "en").glob("*.jsonl"))
    for i, shard in enumerate(en, start=1):
        counts, size = count_shard(shard)
        total.update(counts)
        total_size += size
        if i in EN_PREFIXES:
            rows.append(summarize("en", i, total, total_size))
            print(f"  counted en x{i}", file=sys.stderr, flush=True)
        if i in (1, 4, len(en)):
            tables[f"en x{i}"] = Counter(total)
    everything, everything_size = Counter(total), total_size
    for name in ("multi", "code"):
        counts, size = Counter(), 0
        shards = sorted((corpora / name).glob("*.jsonl"))
        for shard in shards:
            c, s = count_shard(shard)
            counts.update(c)
            size += s
        rows.append(summarize(name, len(shards), counts, size))
        everything.update(counts)
        everything_size += size
        print(f"  counted {name}", file=sys.stderr, flush=True)
    rows.append(summarize("en+multi+code", len(en) + 10, everything, everything_size))
    tables["en+multi+code"] = everything
    full = tables[f"en x{len(en)}"]
    for m in MIN_COUNTS:
        tables[f"en x{len(en)} min-count {m}"] = Counter({k: v for k, v in full.items() if v >= m})
    return rows, tables


def heaps_fit(rows: list[dict]) -> tuple[float, float]:
    """Least-squares fit of log(unique) = log(K) + beta * log(occurrences) over the en/ rows."""
    points = [(math.log(r["occurrences"]), math.log(r["unique"])) for r in rows if r["corpus"] == "en"]
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    beta = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return math.exp(my - beta * mx), beta


# --- 2. memory of the merge loop (in a child process) ------------------------------------------------

def rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(counts_file: str, num_merges: int, pure: bool) -> None:
    """Load a count table, then run the merge loop alone; print what each took, as JSON."""
    from bpe_ops.implementation import Implementation
    from bpe_ops.trainer import learn_merges

    gc.collect()
    before = rss_kb("VmRSS")
    with open(counts_file, "rb") as f:
        counts = pickle.load(f)
    gc.collect()
    loaded = rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:     # peak RSS := current RSS (Linux >= 4.0)
        f.write("5")
    start = time.process_time()
    result = learn_merges(counts, num_merges, implementation=Implementation(compiled=not pure))
    cpu = time.process_time() - start
    print(json.dumps({"table_mb": (loaded - before) / 1024, "loop_mb": (rss_kb("VmHWM") - loaded) / 1024,
                      "cpu": cpu, "merges": [[a.hex(), b.hex()] for a, b in result.merges]}))


def measure_loop(counts: Counter, num_merges: int, pure: bool, tmp: Path) -> dict:
    path = tmp / "counts.pickle"
    with open(path, "wb") as f:
        pickle.dump(dict(counts), f, protocol=pickle.HIGHEST_PROTOCOL)
    out = subprocess.run([sys.executable, __file__, "--child", str(path), "--num-merges", str(num_merges)]
                         + (["--pure"] if pure else []), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def tokens_per_byte(merges_hex: list, counts: Counter) -> float:
    """Tokens per byte of a count table under the tokenizer of these merges."""
    tok = Tokenizer([(bytes.fromhex(a), bytes.fromhex(b)) for a, b in merges_hex])
    tokens = sum(n * len(tok.encode(piece.decode("utf-8"))) for piece, n in counts.items())
    return tokens / sum(n * len(piece) for piece, n in counts.items())


# --- report --------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", default=str(SHARED / "corpora"))
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--pure", action="store_true", help="also measure the pure-Python merge loop")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--num-merges", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.num_merges, args.pure)

    print(f"counting pre-tokens (gpt4) in {args.corpora} ...", file=sys.stderr, flush=True)
    rows, tables = growth(Path(args.corpora))
    print("\n## Count table growth (gpt4 pattern)\n")
    print("| corpus | shards | text MB | pre-tokens | unique | unique, min-count 2 | unique, min-count 5 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pruned = [f"{r[f'unique_ge{m}']:,} ({r[f'unique_ge{m}'] / r['unique']:.0%} of unique, "
                  f"{r[f'kept_occ_ge{m}']:.2%} of occurrences)" for m in MIN_COUNTS]
        print(f"| {r['corpus']} | {r['shards']} | {r['mb']:.1f} | {r['occurrences']:,} | {r['unique']:,} | "
              f"{pruned[0]} | {pruned[1]} |")
    k, beta = heaps_fit(rows)
    print(f"\nHeaps' law fit on en/: unique ~ {k:.1f} * occurrences^{beta:.3f}")

    num_merges = args.vocab_size - 256
    print(f"\n## Merge loop memory ({num_merges:,} merges, vocabulary {args.vocab_size:,})\n")
    print("| count table | loop | unique | table MB | loop MB | table MB per M unique | loop MB per M unique | CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    loops = [False, True] if args.pure else [False]
    merges = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, counts in tables.items():
            for pure in loops:
                m = measure_loop(counts, num_merges, pure, Path(tmp))
                merges.setdefault(name, m["merges"])
                millions = len(counts) / 1e6
                print(f"| {name} | {'pure Python' if pure else 'compiled'} | {len(counts):,} | "
                      f"{m['table_mb']:.0f} | {m['loop_mb']:.0f} | {m['table_mb'] / millions:.0f} | "
                      f"{m['loop_mb'] / millions:.0f} | {m['cpu']:.1f} |", flush=True)

    full = max((n for n in tables if n.startswith("en x") and "min-count" not in n), key=lambda n: len(tables[n]))
    print(f"\n## What --min-count costs ({full}, {num_merges:,} merges)\n")
    print("| --min-count | unique pre-tokens | merges shared with min-count 1 | tokens per byte on all of en/ |")
    print("|---:|---:|---:|---:|")
    base = tokens_per_byte(merges[full], tables[full])
    print(f"| 1 | {len(tables[full]):,} | all | {base:.4f} |")
    for m in MIN_COUNTS:
        name = f"{full} min-count {m}"
        shared = len(set(map(tuple, merges[name])) & set(map(tuple, merges[full])))
        tpb = tokens_per_byte(merges[name], tables[full])
        print(f"| {m} | {len(tables[name]):,} | {shared / len(merges[full]):.1%} | {tpb:.4f} "
              f"({tpb / base - 1:+.2%}) |", flush=True)


if __name__ == "__main__":
    main()
