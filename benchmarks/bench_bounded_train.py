"""What `train --max-unique N` costs and saves.

    python benchmarks/bench_bounded_train.py budgets [--budgets 30K,100K,300K] [--vocab-size 8192] [--recount]
    python benchmarks/bench_bounded_train.py memory [--unique 1M,3M] [--merges 2000] [--hf]

budgets: `tokenbeam train` on every shard but the last of corpora/{en,code,multi} without a budget,
    then `train --counts` of its counts with each budget (the same tokenizer as counting with it, which
    the tests check; `--recount` counts the corpus again each time, to see the counting process's
    peak with a budget); bytes per token of each tokenizer on the held-out last shards, the unique
    pre-tokens kept and the share of occurrences kept (from train_report.json).
memory: the merge loop on synthetic Zipf counts (benchmarks/synthetic_corpus.py: exactly U unique
    pre-tokens in five scripts), one subprocess per measurement: its peak RSS beyond the counts
    table it was given (both tools get the same dict first), and its time per merge (setup included).
    Hugging Face's BpeTrainer cannot take counts: it is fed each word max(1, round(count * s)) times,
    s chosen so that the words fed are about 3x the unique ones (its memory is per unique word,
    its word map included; the counts differ, so its merges do too).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CORPORA = Path(os.environ.get("TOKENBEAM_CORPORA", ROOT.parent / "shared" / "corpora"))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(tool: str, unique: int, merges: int) -> dict:
    """One measurement, in its own process: the counts, then the tool's training on them. Ours times
    its loop from the first merge to the last (the progress callback); Hugging Face's is timed whole
    (its word counting and setup included)."""
    from synthetic_corpus import zipf_counts

    counts = zipf_counts(unique)
    before = rss_mb()
    started, cpu_started = time.perf_counter(), time.process_time()
    loop = {}
    if tool == "ours":
        from bpe_ops import train_bpe

        def progress(done, pair, count):
            loop.setdefault("first", (done, time.perf_counter(), time.process_time()))
            loop["last"] = (done, time.perf_counter(), time.process_time())

        tok = train_bpe(counts, vocab_size=256 + merges, pattern="gpt4", progress=progress)
        made = len(tok.merges)
    else:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        scale = 2 * unique / sum(counts.values())
        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=256 + merges, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

        def texts():
            batch = []
            for key, n in counts.items():
                batch.append(key.decode() * max(1, round(n * scale)))
                if len(batch) == 1000:
                    yield batch
                    batch = []
            yield batch

        hf.train_from_iterator(texts(), trainer=trainer)
        made = hf.get_vocab_size() - 256
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    result = {"tool": tool, "unique": unique, "merges": made, "counts_rss_mb": round(before, 1),
              "peak_rss_mb": round(peak_mb(), 1), "own_mb": round(peak_mb() - before, 1),
              "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
              "ms_per_merge": round(1000 * seconds / max(made, 1), 3)}
    if loop:
        (d0, t0, c0), (d1, t1, c1) = loop["first"], loop["last"]
        result.update(loop_ms_per_merge=round(1000 * (t1 - t0) / max(d1 - d0, 1), 3),
                      loop_cpu_ms_per_merge=round(1000 * (c1 - c0) / max(d1 - d0, 1), 3),
                      setup_seconds=round(t0 - started, 2))
    return result


def run_worker(tool: str, unique: int, merges: int) -> dict:
    out = subprocess.run(["nice", sys.executable, __file__, "worker", tool, str(unique), str(merges)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory(args) -> None:
    from pipelines.datasets.shards import unique_count
    sizes = [unique_count(s) for s in args.unique.split(",")]
    print("| tool | unique | merges | counts dict MB | training MB (peak - counts) | MB per M unique | "
          "whole s (CPU s) | setup s | loop ms/merge (CPU) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for unique in sizes:
        for tool in ["ours"] + (["hf"] if args.hf else []):
            r = run_worker(tool, unique, args.merges)
            loop = (f"{r['setup_seconds']:.1f} | {r['loop_ms_per_merge']:.2f} ({r['loop_cpu_ms_per_merge']:.2f})"
                    if "setup_seconds" in r else "- | -")
            print(f"| {tool} | {unique:,} | {r['merges']:,} | {r['counts_rss_mb']:,.0f} | {r['own_mb']:,.0f} | "
                  f"{r['own_mb'] / (unique / 1e6):,.0f} | {r['seconds']:.1f} ({r['cpu_seconds']:.1f}) | {loop} |",
                  flush=True)


def held_out_texts() -> list[str]:
    texts = []
    for name in ("en", "code", "multi"):
        with open(sorted((CORPORA / name).glob("*.jsonl"))[-1], encoding="utf-8") as f:
            texts.extend(json.loads(line)["text"] for line in f)
    return texts


def budgets(args) -> None:
    from bpe_ops import Tokenizer
    from pipelines.datasets.shards import unique_count

    inputs = [str(p) for name in ("en", "code", "multi") for p in sorted((CORPORA / name).glob("*.jsonl"))[:-1]]
    held = held_out_texts()
    held_bytes = sum(len(t.encode()) for t in held)
    print(f"train on {len(inputs)} shards of corpora/{{en,code,multi}}, vocab {args.vocab_size}; held out: "
          f"{held_bytes / 1e6:.1f} MB (the last shard of each)")
    print("| budget | unique kept | of | occurrences kept | threshold | held-out bytes/token | vs none | "
          "launcher peak MB | counting peak MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for budget in [None] + [unique_count(b) for b in args.budgets.split(",")]:
            out = os.path.join(tmp, str(budget))
            cmd = ["nice", sys.executable, "-m", "pipelines.train", "--output", out, "--vocab-size", str(args.vocab_size)]
            if budget is None or args.recount:
                cmd += [a for i in inputs for a in ("--input", i)]
            else:
                cmd += ["--counts", os.path.join(tmp, "None")]
            if budget:
                cmd += ["--max-unique", str(budget)]
            subprocess.run(cmd, check=True, cwd=ROOT, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
            report = json.loads(Path(out, "train_report.json").read_text())
            tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
            bpt = held_bytes / sum(len(ids) for ids in tok.encode_batch(held))
            rows.append(bpt)
            b = report["budget"] or {"unique_after": report["unique_pretokens_after_pruning"],
                                     "unique_before": report["unique_pretokens_before_pruning"],
                                     "share_kept": 1.0, "threshold": 1}
            peaks = report["peak_rss_mb_by_process"]
            print(f"| {budget or 0:,} | {b['unique_after']:,} | {b['unique_before']:,} | {b['share_kept']:.2%} | "
                  f"{b['threshold']} | {bpt:.3f} | {bpt / rows[0] - 1:+.2%} | {peaks['launcher']:,.0f} | "
                  f"{peaks.get('counting', 0):,.0f} |", flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("budgets")
    b.add_argument("--budgets", default="30K,100K,300K")
    b.add_argument("--vocab-size", type=int, default=8192)
    b.add_argument("--recount", action="store_true", help="count the corpus again for each budget")
    m = sub.add_parser("memory")
    m.add_argument("--unique", default="1M,3M")
    m.add_argument("--merges", type=int, default=2000)
    m.add_argument("--hf", action="store_true", help="Hugging Face's BpeTrainer on the same counts too")
    args = parser.parse_args()
    (budgets if args.what == "budgets" else memory)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
