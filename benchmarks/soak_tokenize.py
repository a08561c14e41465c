"""Soak: tokenize the English corpus N times over (shards repeated through symlinks) with the local
runner and 2 worker processes, sampling the resident memory of every process of the run.

    python benchmarks/soak_tokenize.py [--repeat 20] [--corpus ../shared/corpora/en] [--tokenizer T]

Memory must stay bounded by what one shard needs (a shard is ~4.4 MB of text), not grow with the
number of shards done: the script prints the peak of the whole process tree and of the largest worker
against the shard size, and the peak of each window of 10 finished shards, so that growth between
shard k and shard k+10 shows. The tokenizer defaults to GPT-2 (../shared/oracles/gpt2) as a real
50k vocabulary.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
WINDOW = 10          # finished shards per memory window


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it (children of all its threads, recursively), from /proc."""
    out = [pid]
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = [int(c) for c in children.read_text().split()]
        except OSError:
            continue
        for kid in kids:
            out += process_tree(kid)
    return out


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def is_worker(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"sdk_worker_main" in b" ".join(argv) and b"python" in os.path.basename(argv[0])


def link_shards(corpus: Path, repeat: int, folder: Path) -> list[Path]:
    """`repeat` symlinks to every shard of the corpus, named so that each makes its own output."""
    links = []
    for r in range(repeat):
        for shard in sorted(corpus.glob("*.jsonl")):
            link = folder / f"r{r:02d}-{shard.name}"
            link.symlink_to(shard.resolve())
            links.append(link)
    return links


def default_tokenizer(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from bpe_ops import Tokenizer
    gpt2 = SHARED / "oracles" / "gpt2"
    return Path(Tokenizer.from_gpt2_files(gpt2 / "gpt2_vocab.json", gpt2 / "gpt2_merges.txt").save(str(folder)))


def soak(tokenizer: Path, inputs: Path, output: Path, workers: int, interval: float) -> dict:
    argv = [sys.executable, "-m", "pipelines.tokenize", "--tokenizer", str(tokenizer), "--input", str(inputs / "*.jsonl"),
            "--output", str(output), "--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tail: list[str] = []
    reader = threading.Thread(target=lambda: tail.extend(proc.stderr.read().splitlines()[-5:]), daemon=True)
    reader.start()
    samples = []     # (seconds, shards finished, tree MB, largest worker MB, launcher MB)
    while proc.poll() is None:
        pids = process_tree(proc.pid)
        rss = {pid: rss_mb(pid) for pid in pids}
        worker = max((mb for pid, mb in rss.items() if is_worker(pid)), default=0.0)
        done = sum(1 for _ in output.glob("*.parquet")) if output.exists() else 0
        samples.append((time.perf_counter() - started, done, sum(rss.values()), worker, rss.get(proc.pid, 0.0)))
        time.sleep(interval)
    reader.join()
    if proc.returncode != 0:
        raise SystemExit(f"tokenize failed ({proc.returncode}):\n" + "\n".join(tail))
    return {"seconds": time.perf_counter() - started, "samples": samples,
            "stats": json.loads((output / "stats.json").read_text())}


def report(result: dict, shards: int, shard_mb: float) -> dict:
    samples = result["samples"]
    windows = []
    for k in range(0, shards, WINDOW):
        inside = [s for s in samples if k <= s[1] < k + WINDOW]
        if inside:
            windows.append({"shards": f"{k}-{min(k + WINDOW, shards) - 1}", "tree_mb": max(s[2] for s in inside),
                            "worker_mb": max(s[3] for s in inside), "launcher_mb": max(s[4] for s in inside)})
    stats = result["stats"]
    summary = {
        "shards": shards, "mean_shard_mb": round(shard_mb, 2), "text_mb": round(stats["bytes"] / 1e6, 1),
        "tokens": stats["tokens"], "seconds": round(result["seconds"], 1),
        "mb_per_s": round(stats["bytes"] / 1e6 / result["seconds"], 2),
        "peak_tree_mb": round(max(s[2] for s in samples), 1), "peak_worker_mb": round(max(s[3] for s in samples), 1),
        "peak_launcher_mb": round(max(s[4] for s in samples), 1),
        "windows": windows,
    }
    print(f"{shards} shards (mean {shard_mb:.2f} MB of text each), {summary['text_mb']:,} MB, "
          f"{stats['tokens']:,} tokens in {summary['seconds']:,} s ({summary['mb_per_s']} MB/s)")
    print(f"peak RSS: process tree {summary['peak_tree_mb']:,} MB, largest worker {summary['peak_worker_mb']:,} MB "
          f"({summary['peak_worker_mb'] / shard_mb:.0f}x a shard), launcher {summary['peak_launcher_mb']:,} MB")
    print(f"{'shards finished':>16} {'tree MB':>9} {'worker MB':>10} {'launcher MB':>12}")
    for w in windows:
        print(f"{w['shards']:>16} {w['tree_mb']:>9.0f} {w['worker_mb']:>10.0f} {w['launcher_mb']:>12.0f}")
    steady = windows[1:-1] or windows
    growth = steady[-1]["worker_mb"] - steady[0]["worker_mb"]
    summary["worker_growth_mb"] = round(growth, 1)
    print(f"largest worker, window {steady[0]['shards']} -> {steady[-1]['shards']}: {growth:+.0f} MB")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="times the corpus is repeated (default 20)")
    parser.add_argument("--corpus", default=str(SHARED / "corpora" / "en"))
    parser.add_argument("--tokenizer", default=None, help="tokenizer.json (default: GPT-2 from ../shared)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between memory samples")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        tmp = Path(tmp)
        (tmp / "in").mkdir()
        links = link_shards(Path(args.corpus), args.repeat, tmp / "in")
        shard_mb = sum(p.stat().st_size for p in links) / len(links) / 1e6
        tokenizer = Path(args.tokenizer) if args.tokenizer else default_tokenizer(tmp / "tok")
        summary = report(soak(tokenizer, tmp / "in", tmp / "out", args.workers, args.interval), len(links), shard_mb)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
