"""Tokenize side by side: `tokenbeam tokenize` (Beam's local runner: its default in-process mode, and
`multi_processing` with `--workers` worker processes) vs the baseline a user
would otherwise write: tiktoken (`encode_ordinary_batch`, built from the same tokenizer) plus a
pyarrow Parquet write of the same columns, one file per shard.

    python benchmarks/bench_tokenize.py [--corpus ../shared/corpora/en] [--vocab-size 32768]

Trains the tokenizer first (or takes `--tokenizer`), checks that both produce the same ids, then
prints MB/s, tokens/s, peak memory and the ratio (ours / baseline throughput; above 1 is faster).
"""
from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import measure, python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run_baseline(tokenizer_dir: str, pattern: str, output: str) -> None:
    """tiktoken + pyarrow, per shard: what the pipeline replaces."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tiktoken

    meta = json.loads(Path(tokenizer_dir, "tokenizer.json").read_text(encoding="utf-8"))
    ranks = {}
    for line in Path(tokenizer_dir, "tokenizer.tiktoken").read_text().splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    regex = meta["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    enc = tiktoken.Encoding("bench", pat_str=regex, mergeable_ranks=ranks, special_tokens={})
    os.makedirs(output, exist_ok=True)
    for shard in sorted(glob.glob(pattern)):
        with open(shard, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
        texts = [r["text"] for r in records]
        ids = enc.encode_ordinary_batch(texts)
        table = pa.table({
            "id": [r["id"] for r in records],
            "token_ids": pa.array(ids, pa.list_(pa.uint16() if enc.n_vocab <= 65536 else pa.uint32())),
            "n_tokens": pa.array([len(x) for x in ids], pa.int32()),
            "n_bytes": pa.array([len(t.encode()) for t in texts], pa.int32()),
            "n_chars": pa.array([len(t) for t in texts], pa.int32()),
            "n_words": pa.array([len(t.split()) for t in texts], pa.int32()),
        })
        pq.write_table(table, os.path.join(output, Path(shard).stem + ".parquet"), compression="zstd")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpora" / "en"))
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: train one on the corpus)")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--run-baseline", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_baseline:
        return run_baseline(*args.run_baseline)

    import pyarrow.parquet as pq
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    corpus = Path(args.corpus)
    pattern = str(corpus / "*.jsonl")
    size_mb = sum(len(json.loads(l)["text"].encode()) for p in sorted(corpus.glob("*.jsonl"))
                  for l in open(p, encoding="utf-8")) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = args.tokenizer
        if tok_dir is None:
            tok_dir = os.path.join(tmp, "tok")
            trained = measure(python("-m", "pipelines.train", "--input", pattern, "--output", tok_dir,
                                     "--vocab-size", str(args.vocab_size)), env=env, cwd=str(ROOT))
            if trained.returncode:
                raise SystemExit(trained.stderr[-3000:])
        modes = {"tokenbeam tokenize": (), f"tokenbeam tokenize (mp x{args.workers})": (
            "--direct_running_mode", "multi_processing", "--direct_num_workers", str(args.workers))}
        ours = {}
        for name, flags in modes.items():
            out = os.path.join(tmp, f"ours{len(ours)}")
            ours[name] = measure(python("-m", "pipelines.tokenize", "--tokenizer", os.path.join(tok_dir, "tokenizer.json"),
                                        "--input", pattern, "--output", out, *flags), env=env, cwd=str(ROOT))
            if ours[name].returncode:
                raise SystemExit(ours[name].stderr[-3000:])
        base = measure(python(__file__, "--run-baseline", tok_dir, pattern, os.path.join(tmp, "base")), env=env)
        if base.returncode:
            raise SystemExit(base.stderr[-3000:])
        tokens = 0
        for p in sorted(Path(tmp, "base").glob("*.parquet")):
            theirs = pq.read_table(p).column("token_ids").to_pylist()
            for k in range(len(ours)):
                mine = pq.read_table(Path(tmp, f"ours{k}", p.name)).column("token_ids").to_pylist()
                if mine != theirs:
                    raise SystemExit(f"ids differ in {p.name}")
            tokens += sum(map(len, theirs))
    print(f"corpus {corpus}: {size_mb:.1f} MB of text, {tokens:,} tokens, {os.cpu_count()} cores; ids identical")
    print(f"{'tool':<32} {'wall s':>7} {'CPU s':>7} {'MB/s':>7} {'Mtok/s':>7} {'peak MB':>8}")
    for name, m in (*ours.items(), ("tiktoken + pyarrow baseline", base)):
        print(f"{name:<32} {m.wall:7.1f} {m.cpu:7.1f} {size_mb / m.wall:7.2f} {tokens / m.wall / 1e6:7.2f} "
              f"{m.peak_rss_mb:8.0f}")
    for name, m in ours.items():
        print(f"{name}: throughput ratio ours/baseline {base.wall / m.wall:.2f} (wall), CPU ratio {m.cpu / base.cpu:.2f}")

if __name__ == "__main__":
    main()
