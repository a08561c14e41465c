"""Tokenize side by side: `tokenbeam tokenize` (Beam's local runner: its default in-process mode, and
`multi_processing` with `--workers` worker processes) vs the baseline a user
would otherwise write: tiktoken (`encode_ordinary_batch`, built from the same tokenizer) plus a
pyarrow Parquet write of the same columns, one file per shard.

    python benchmarks/bench_tokenize.py [--corpus ../shared/corpora/en ...] [--vocab-size 32768]
        [--tokenizer FOLDER | tokenizer.json | FILE.tiktoken --pattern NAME_OR_REGEX [--special-token T=ID]]

Trains the tokenizer first (or takes `--tokenizer`: any byte-level tokenizer.json bpe_ops reads, or a
tiktoken rank file with its pattern), checks that both produce the same ids, then prints MB/s,
tokens/s, peak memory and the ratio (ours / baseline throughput; above 1 is faster). Several
`--corpus` folders are tokenized together (their shards side by side). `--one-shard` adds the fixed
cost: the in-process run on the first two records of one shard.

Our runs share one bpe_ops cache folder (TOKENBEAM_CACHE_DIR, a fresh temporary one): the first run
("cold") parses the tokenizer file and stores its tables, the others load them, as a second run or
a worker does. The baseline gets its ranks from the same tokenizer saved as `.tiktoken`.
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


def run_baseline(tokenizer_dir: str, pattern: str, output: str) -> None:  # noqa: C901
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


def prepare_tokenizer(args, tmp: str, pattern: str, env: dict) -> tuple[str, str, list]:
    """(the file our pipeline reads, a folder with tokenizer.json + tokenizer.tiktoken for the
    baseline, the pipeline's extra flags: --pattern and --special-token for a rank file)."""
    sys.path.insert(0, str(ROOT))
    from bpe_ops import Tokenizer
    path = args.tokenizer
    if path is None:
        tok_dir = os.path.join(tmp, "tok")
        trained = measure(python("-m", "pipelines.train", "--input", pattern, "--output", tok_dir,
                                 "--vocab-size", str(args.vocab_size)), env=env, cwd=str(ROOT))
        if trained.returncode:
            raise SystemExit(trained.stderr[-3000:])
        return os.path.join(tok_dir, "tokenizer.json"), tok_dir, []
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    baseline_dir = os.path.join(tmp, "baseline-tok")
    with open(path, "rb") as f:
        head = f.read(4096)
    from bpe_ops.formats import is_rank_file
    if is_rank_file(head):
        if not args.pattern:
            raise SystemExit("a .tiktoken file needs --pattern")
        specials = dict((t, int(i)) for t, _, i in (s.rpartition("=") for s in args.special_token))
        Tokenizer.from_tiktoken(path, args.pattern, specials).save(baseline_dir)
        flags = ["--pattern", args.pattern] + [f for spec in args.special_token for f in ("--special-token", spec)]
        return path, baseline_dir, flags
    Tokenizer.from_file(path).save(baseline_dir)
    return path, baseline_dir, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", action="append", default=None,
                        help="a folder of *.jsonl shards; repeat for several (default ../shared/corpora/en)")
    parser.add_argument("--tokenizer", default=None,
                        help="a tokenizer folder, tokenizer.json or .tiktoken (default: train one on the corpus)")
    parser.add_argument("--pattern", default=None, help="the split pattern of a .tiktoken file")
    parser.add_argument("--special-token", action="append", default=[], help="TOKEN=ID of a .tiktoken file")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--one-shard", action="store_true", help="also time two records of one shard")
    parser.add_argument("--run-baseline", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_baseline:
        return run_baseline(*args.run_baseline)

    import pyarrow.parquet as pq
    corpora = [Path(c) for c in (args.corpus or [str(ROOT.parent / "shared" / "corpora" / "en")])]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENBEAM_CACHE_DIR=os.path.join(tmp, "cache"))
        # One input folder of links to every corpus's shards, so one glob names them all.
        inputs = Path(tmp, "inputs")
        inputs.mkdir()
        for corpus in corpora:
            for shard in sorted(corpus.glob("*.jsonl")):
                os.symlink(shard.resolve(), inputs / shard.name)
        pattern = str(inputs / "*.jsonl")
        size_mb = sum(len(json.loads(l)["text"].encode()) for p in sorted(inputs.glob("*.jsonl"))
                      for l in open(p, encoding="utf-8")) / 1e6
        tokenizer_file, tok_dir, tok_flags = prepare_tokenizer(args, tmp, pattern, env)
        vocab_size = json.loads(Path(tok_dir, "tokenizer.json").read_text(encoding="utf-8"))
        vocab_size = len(vocab_size["model"]["vocab"]) + len(vocab_size["added_tokens"])
        modes = {"tokenbeam tokenize (cold cache)": (), "tokenbeam tokenize": (),
                 f"tokenbeam tokenize (mp x{args.workers})": (
                     "--direct_running_mode", "multi_processing", "--direct_num_workers", str(args.workers))}
        ours = {}
        for name, flags in modes.items():
            out = os.path.join(tmp, f"ours{len(ours)}")
            ours[name] = measure(python("-m", "pipelines.tokenize", "--tokenizer", tokenizer_file, *tok_flags,
                                        "--input", pattern, "--output", out, *flags), env=env, cwd=str(ROOT))
            if ours[name].returncode:
                raise SystemExit(ours[name].stderr[-3000:])
        fixed = None
        if args.one_shard:
            first = sorted(inputs.glob("*.jsonl"))[0]
            small = Path(tmp, "small")
            small.mkdir()
            with open(first, encoding="utf-8") as f, open(small / "small.jsonl", "w", encoding="utf-8") as g:
                g.writelines([f.readline(), f.readline()])
            fixed = measure(python("-m", "pipelines.tokenize", "--tokenizer", tokenizer_file, *tok_flags, "--input",
                                   str(small / "small.jsonl"), "--output", os.path.join(tmp, "small-out")),
                            env=env, cwd=str(ROOT))
            if fixed.returncode:
                raise SystemExit(fixed.stderr[-3000:])
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
    print(f"corpus {', '.join(map(str, corpora))}: {size_mb:.1f} MB of text, {tokens:,} tokens, tokenizer "
          f"{args.tokenizer or 'trained'} ({vocab_size:,} ids), {os.cpu_count()} cores; ids identical")
    print(f"{'tool':<36} {'wall s':>7} {'CPU s':>7} {'MB/s':>7} {'Mtok/s':>7} {'peak MB':>8}")
    for name, m in (*ours.items(), ("tiktoken + pyarrow baseline", base)):
        print(f"{name:<36} {m.wall:7.1f} {m.cpu:7.1f} {size_mb / m.wall:7.2f} {tokens / m.wall / 1e6:7.2f} "
              f"{m.peak_rss_mb:8.0f}")
    for name, m in ours.items():
        print(f"{name}: throughput ratio ours/baseline {base.wall / m.wall:.2f} (wall), CPU ratio {m.cpu / base.cpu:.2f}")
    if fixed is not None:
        print(f"fixed cost: tokenize on 2 records of one shard {fixed.wall:.1f} s wall, {fixed.cpu:.1f} CPU s, "
              f"peak {fixed.peak_rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
