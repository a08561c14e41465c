"""Train side by side: `tokenbeam train` (Beam's local runner: its default in-process mode, and
`multi_processing` with `--workers` worker processes) vs Hugging Face `tokenizers`
(train_from_iterator, ByteLevel, same vocabulary size) vs `rustbpe`, on the same shards.

    python benchmarks/bench_train.py [--corpus ../shared/corpora/en] [--vocab-size 32768] [--scales 1 2 4]

Prints wall time, CPU time, peak RSS and the ratios (ours / peer; below 1 means we are faster or
smaller). Each tool runs in its own process, measured from outside. `--scales` repeats the shards
(1x, 2x, 4x the corpus) to show how time and memory grow.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import measure, python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def texts(pattern: str):
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)["text"]


def run_peer(name: str, pattern: str, vocab_size: int) -> None:
    """Train one peer in this process (the parent measures it)."""
    from _peers import hf_train, rustbpe_train
    if name not in ("hf", "rustbpe"):
        raise SystemExit(f"unknown peer {name}")
    (hf_train if name == "hf" else rustbpe_train)(texts(pattern), vocab_size)


def repeated_corpus(corpus: Path, scale: int, tmp: Path) -> str:
    """A folder holding the corpus shards `scale` times (symlinks), as a glob."""
    if scale == 1:
        return str(corpus / "*.jsonl")
    folder = tmp / f"x{scale}"
    folder.mkdir()
    for copy in range(scale):
        for shard in sorted(corpus.glob("*.jsonl")):
            (folder / f"c{copy}-{shard.name}").symlink_to(shard)
    return str(folder / "*.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpora" / "en"))
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--scales", type=int, nargs="+", default=[1])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peers", nargs="*", default=["hf", "rustbpe"])
    parser.add_argument("--run-peer", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_peer:
        return run_peer(args.run_peer, args.input, args.vocab_size)

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    corpus = Path(args.corpus)
    size_mb = sum(p.stat().st_size for p in corpus.glob("*.jsonl")) / 1e6
    print(f"corpus {corpus} ({size_mb:.1f} MB), vocab {args.vocab_size}, {os.cpu_count()} cores")
    print(f"{'scale':>5} {'tool':<14} {'wall s':>8} {'CPU s':>8} {'peak MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for scale in args.scales:
            pattern = repeated_corpus(corpus, scale, tmp)
            results, ours = {}, {}
            modes = {"tokenbeam": (), f"tokenbeam-mp{args.workers}": (
                "--direct_running_mode", "multi_processing", "--direct_num_workers", str(args.workers))}
            for name, flags in modes.items():
                out = tmp / f"{name}-{scale}"
                ours[name] = measure(python("-m", "pipelines.train", "--input", pattern, "--output", str(out),
                                            "--vocab-size", str(args.vocab_size), *flags), env=env, cwd=str(ROOT))
                if ours[name].returncode:
                    raise SystemExit(f"tokenbeam train ({name}) failed:\n{ours[name].stderr[-3000:]}")
                results[name] = ours[name]
            for peer in args.peers:
                results[peer] = measure(python(__file__, "--run-peer", peer, "--input", pattern,
                                               "--vocab-size", str(args.vocab_size)), env=env)
            for name, m in results.items():
                print(f"{scale:>4}x {name:<14} {m.wall:8.1f} {m.cpu:8.1f} {m.peak_rss_mb:8.0f}")
            for name, mine in ours.items():
                for peer in args.peers:
                    m = results[peer]
                    print(f"       {name} / {peer}: wall {mine.wall / m.wall:.2f}, CPU {mine.cpu / m.cpu:.2f}, "
                          f"memory {mine.peak_rss_mb / m.peak_rss_mb:.2f}")
                report = json.loads((tmp / f"{name}-{scale}" / "train_report.json").read_text())
                stages = ", ".join(f"{k} {v:.1f}s" for k, v in report["timing_seconds"].items())
                print(f"       {name} stages: {stages}; {report['unique_pretokens_after_pruning']:,} unique pre-tokens")


if __name__ == "__main__":
    main()
