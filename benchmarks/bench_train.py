"""Train side by side: `tokenbeam train` (the whole command; and the merge part alone, `tokenbeam
train --counts` on the counts the whole command wrote) vs gigatoken's `train_bpe` vs Hugging Face
`tokenizers` (train_from_iterator, ByteLevel) [vs `rustbpe`], on the same shards, the same split
pattern and the same vocabulary size.

    python benchmarks/bench_train.py [--corpus ../shared/corpora/en] [--vocab-size 32768] [--repeat 3]
    python benchmarks/bench_train.py --peers gigatoken hf rustbpe --mp --scales 1 2 4
    python benchmarks/bench_train.py --baseline /tmp/old    # also an older checkout, built, in the same rounds

Each tool runs in its own process, measured from outside: wall time, CPU time, peak RSS of the
process tree; the tools take turns run by run (the machine may be busy) and the least wall time of
`--repeat` runs is shown, with the ratios ours / peer (below 1: we are faster or smaller), and the
machine's load average before and after the runs. Our packages are byte-compiled first, as a
regular `pip install` leaves them (`_measure.compile_installed`).

What each figure holds:
  - tokenbeam: the whole command: start-up, the counting process (importing Beam, reading the JSONL,
    splitting, counting, writing counts/*.parquet), loading the counts, the merge loop, writing
    tokenizer.json, tokenizer.tiktoken, train_report.json and compression_curve.png. Its
    train_report.json's stages are printed below it; `merge_loop` is the merge part
    (`train_bpe` on the loaded counts: symbolizing the pre-tokens and learning the merges).
  - tokenbeam --counts: the same command from the written counts: start-up, loading the counts, the
    merge loop and the writing, without Beam.
  - gigatoken: `train_bpe(JsonlFileSource(files))`: reading the files (native threads), splitting,
    counting and merging; nothing is written. It splits with GPT-2's pattern only, so `--pattern`
    is gpt2 by default (and gigatoken is left out under any other).
  - hf / rustbpe: `train_from_iterator` over the texts, read and JSON-decoded in Python (that
    reading is in their time), then splitting, counting and merging (multi-threaded); nothing is
    written.
Every tool's merges are compared with tokenbeam's (trained with `--tie-break hf`, Hugging Face's
order of ties, which gigatoken follows too): equal merges mean they trained the same vocabulary.
`--scales` repeats the shards (1x, 2x, 4x the corpus) to show how time and memory grow.
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
from _measure import compile_installed, measure, python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bpe_ops.pretokenize import resolve_pattern, unicode_to_token  # noqa: E402

PEERS = ("gigatoken", "hf", "rustbpe")


def texts(pattern: str):
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)["text"]


def run_peer(name: str, files: str, vocab_size: int, pattern: str, merges_out: str) -> None:
    """Train one peer in this process (the parent measures it); its merges to `merges_out` (hex pairs),
    written after the training, as part of the time (a small share)."""
    from _peers import gigatoken_train, hf_train, rustbpe_train
    regex = resolve_pattern(pattern)
    if name == "gigatoken":
        merges = gigatoken_train(sorted(glob.glob(files)), vocab_size)
    elif name == "hf":
        tok = hf_train(texts(files), vocab_size, regex)
        merges = [tuple(unicode_to_token(p) for p in (m if isinstance(m, list) else m.split(" ")))
                  for m in json.loads(tok.to_str())["model"]["merges"]]
    elif name == "rustbpe":
        tok = rustbpe_train(texts(files), vocab_size, regex)
        ranks = sorted(tok.get_mergeable_ranks(), key=lambda item: item[1])
        merges = [(bytes(b),) for b, _ in ranks[256:]]        # rustbpe gives the merged tokens only
    else:
        raise SystemExit(f"unknown peer {name}")
    Path(merges_out).write_text(json.dumps([[p.hex() for p in m] for m in merges]))


def read_merges(path: Path) -> list[tuple[bytes, ...]]:
    return [tuple(bytes.fromhex(p) for p in m) for m in json.loads(path.read_text())]


def tokenbeam_merges(tokenizer_json: Path) -> list[tuple[bytes, bytes]]:
    merges = json.loads(tokenizer_json.read_text())["model"]["merges"]
    return [tuple(unicode_to_token(p) for p in (m if isinstance(m, list) else m.split(" "))) for m in merges]


def agreement(ours: list[tuple[bytes, bytes]], theirs: list[tuple[bytes, ...]]) -> str:
    """'equal', or how many merges agree and where the first difference is."""
    if theirs and len(theirs[0]) == 1:            # merged tokens only: compare those
        ours = [(a + b,) for a, b in ours]
    if ours == theirs:
        return f"merges equal ({len(ours):,})"
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"merges differ: {len(ours):,} vs {len(theirs):,}, first difference at merge {first:,}, "
            f"{len(set(ours) & set(theirs)):,} in common")


def load_average() -> str:
    """The machine's load (as `uptime` shows it): the wall times of a run mean little without it."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"


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
    parser.add_argument("--pattern", default="gpt2", help="split pattern of every tool (gigatoken: gpt2 only)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each tool, taking turns; the fastest is shown")
    parser.add_argument("--mp", action="store_true", help="also tokenbeam with --direct_running_mode multi_processing")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peers", nargs="*", default=["gigatoken", "hf"], choices=PEERS)
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run tokenbeam from this checkout (its compiled modules built), as 'baseline'")
    parser.add_argument("--run-peer", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--merges-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_peer:
        return run_peer(args.run_peer, args.input, args.vocab_size, args.pattern, args.merges_out)
    peers = [p for p in args.peers if p != "gigatoken" or args.pattern.lower() == "gpt2"]
    if peers != args.peers:
        print("gigatoken left out: its train_bpe splits with GPT-2's pattern only")

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    corpus = Path(args.corpus)
    size_mb = sum(p.stat().st_size for p in corpus.glob("*.jsonl")) / 1e6
    print(f"corpus {corpus} ({size_mb:.1f} MB), vocab {args.vocab_size}, pattern {args.pattern}, "
          f"{os.cpu_count()} cores, best of {args.repeat}; {load_average()}")
    print(f"{'scale':>5} {'tool':<20} {'wall s':>8} {'CPU s':>8} {'peak MB':>8}")
    # `python -m pipelines.cli` is the `tokenbeam` console script (which skips the interpreter's teardown).
    train = ("-m", "pipelines.cli", "train", "--vocab-size", str(args.vocab_size), "--pattern", args.pattern,
             "--tie-break", "hf", "--quiet")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for scale in args.scales:
            files = repeated_corpus(corpus, scale, tmp)
            out = {name: tmp / f"{name}-{scale}" for name in ("tokenbeam", "tokenbeam-mp", "tokenbeam-counts")}
            commands = {"tokenbeam": python(*train, "--input", files, "--output", str(out["tokenbeam"]))}
            roots = {"tokenbeam": ROOT}
            if args.baseline:
                out["baseline"], out["baseline-counts"] = tmp / f"baseline-{scale}", tmp / f"baseline-counts-{scale}"
                commands["baseline"] = python(*train, "--input", files, "--output", str(out["baseline"]))
                commands["baseline --counts"] = python(*train, "--counts", str(out["baseline"]),
                                                       "--output", str(out["baseline-counts"]))
                roots["baseline"] = roots["baseline --counts"] = Path(args.baseline).resolve()
            if args.mp:
                commands[f"tokenbeam-mp{args.workers}"] = python(
                    *train, "--input", files, "--output", str(out["tokenbeam-mp"]), "--direct_running_mode",
                    "multi_processing", "--direct_num_workers", str(args.workers))
            # From the counts the first tokenbeam run wrote (so it runs after it in every round).
            commands["tokenbeam --counts"] = python(*train, "--counts", str(out["tokenbeam"]),
                                                    "--output", str(out["tokenbeam-counts"]))
            for peer in peers:
                commands[peer] = python(__file__, "--run-peer", peer, "--input", files, "--vocab-size",
                                        str(args.vocab_size), "--pattern", args.pattern,
                                        "--merges-out", str(tmp / f"{peer}-{scale}.json"))
            for root in set(roots.values()) | {ROOT}:
                compile_installed(root)
            best, stages = {}, {}
            for _ in range(args.repeat):
                for name, cmd in commands.items():
                    root = roots.get(name, ROOT)
                    m = measure(cmd, env=dict(env, PYTHONPATH=str(root)), cwd=str(root))
                    if m.returncode:
                        raise SystemExit(f"{name} failed:\n{m.stderr[-3000:]}")
                    if name not in best or m.wall < best[name].wall:
                        best[name] = m
                        if name.startswith(("tokenbeam", "baseline")):
                            base = name.split(" ")[0].split("-mp")[0]
                            folder = out[f"{base}-counts" if "--counts" in name else
                                         f"{base}-mp" if "-mp" in name else base]
                            stages[name] = json.loads((folder / "train_report.json").read_text())["timing_seconds"]
            print(f"       after the runs: {load_average()}")
            for name, m in best.items():
                print(f"{scale:>4}x {name:<20} {m.wall:8.2f} {m.cpu:8.2f} {m.peak_rss_mb:8.0f}")
            for name, timing in stages.items():
                print(f"       {name} stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in timing.items()))
            ours = tokenbeam_merges(out["tokenbeam"] / "tokenizer.json")
            merge_part = stages["tokenbeam"]["merge_loop"]
            for peer in peers:
                m = best[peer]
                for name in [n for n in best if n.startswith(("tokenbeam", "baseline"))]:
                    mine = best[name]
                    print(f"       {name} / {peer}: wall {mine.wall / m.wall:.2f}, CPU {mine.cpu / m.cpu:.2f}, "
                          f"memory {mine.peak_rss_mb / m.peak_rss_mb:.2f}")
                print(f"       tokenbeam merge part ({merge_part:.2f}s) / {peer} wall: {merge_part / m.wall:.2f}")
                print(f"       {peer}: {agreement(ours, read_merges(tmp / f'{peer}-{scale}.json'))}")
            if args.baseline:
                same = all((out["tokenbeam"] / f).read_bytes() == (out["baseline"] / f).read_bytes()
                           for f in ("tokenizer.json", "tokenizer.tiktoken"))
                print(f"       baseline: tokenizer files {'byte-identical' if same else 'DIFFER'}; "
                      f"tokenbeam / baseline wall {best['tokenbeam'].wall / best['baseline'].wall:.2f}, "
                      f"CPU {best['tokenbeam'].cpu / best['baseline'].cpu:.2f}")


if __name__ == "__main__":
    main()
