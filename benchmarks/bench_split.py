"""One huge file against the same text in many shards: does `--split-size` spread a single file over
the workers as well as sharding does, with the same outputs?

    python benchmarks/bench_split.py [--repeat 10] [--workers 2] [--split-size 64M] [--work /tmp/tokenbeam-bench-split]

The en/ corpus (12 shards, ~54 MB) repeated `--repeat` times is written twice under --work: as ONE
JSONL file, and as 12 x repeat shards holding the same lines in the same order. `tokenize` (with the
GPT-2 tokenizer from the oracle files, converted into --work) and `train` (vocabulary 8192) run on
each with `--direct_num_workers N --direct_running_mode multi_processing`. Printed: wall time of
each run, the one-file/sharded ratio (the goal: within 1.2x), and whether the outputs are identical
(tokenize: stats.json but its timing, and every row in order, hashed column by column; train: the
tokenizer files and counts/). Run it on a quiet machine for figures worth quoting.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))


def write_inputs(work: Path, repeat: int) -> tuple[Path, Path]:
    """`work/one/all.jsonl` and `work/sharded/rNN-en-XXX.jsonl`: the same lines in the same order."""
    shards = sorted((SHARED / "corpora" / "en").glob("*.jsonl"))
    one, sharded = work / "one" / "all.jsonl", work / "sharded"
    if not one.exists():
        one.parent.mkdir(parents=True, exist_ok=True)
        sharded.mkdir(parents=True, exist_ok=True)
        with open(one.with_suffix(".tmp"), "wb") as out:
            for r in range(repeat):
                for shard in shards:
                    data = shard.read_bytes()
                    data += b"" if data.endswith(b"\n") else b"\n"
                    out.write(data)
                    (sharded / f"r{r:02d}-{shard.name}").write_bytes(data)
        one.with_suffix(".tmp").rename(one)
    return one, sharded


def gpt2_tokenizer(work: Path) -> Path:
    from bpe_ops import Tokenizer

    path = work / "gpt2" / "tokenizer.json"
    if not path.exists():
        oracle = SHARED / "oracles" / "gpt2"
        Tokenizer.from_gpt2_files(str(oracle / "gpt2_vocab.json"), str(oracle / "gpt2_merges.txt")).save(str(path.parent))
    return path


def run(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipelines.cli", *argv, "--quiet"], cwd=ROOT, check=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return time.perf_counter() - started


def rows_digest(out: Path) -> str:
    """A hash of every row of a tokenize output, in file-name order (parts sort in order), column by
    column, independent of how rows fall into files and row groups."""
    digests = {name: hashlib.sha256() for name in ("id", "token_ids", "n_tokens", "n_bytes", "n_chars", "n_words")}
    lengths = hashlib.sha256()
    for path in sorted(out.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
            for name, digest in digests.items():
                column = batch.column(name)
                if name == "id":
                    digest.update("\n".join(column.to_pylist()).encode() + b"\n")
                elif name == "token_ids":
                    digest.update(column.flatten().cast("uint32").to_numpy().tobytes())
                    lengths.update(column.value_lengths().to_numpy().tobytes())
                else:
                    digest.update(column.to_numpy().tobytes())
    return "".join(d.hexdigest()[:16] for d in [*digests.values(), lengths])


def stats_without_timing(out: Path) -> dict:
    stats = json.loads((out / "stats.json").read_text())
    for key in ("timing", "inputs", "shards"):     # the two runs read different input files
        stats.pop(key)
    return stats


def same_files(a: Path, b: Path, names: list[str]) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def identical_tokenize(a: Path, b: Path) -> bool:
    return stats_without_timing(a) == stats_without_timing(b) and rows_digest(a) == rows_digest(b)


def identical_train(a: Path, b: Path) -> bool:
    counts = sorted(str(p.relative_to(a)) for p in (a / "counts").glob("*.parquet"))
    return same_files(a, b, ["tokenizer.json", "tokenizer.tiktoken", *counts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--split-size", default="64M")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tokenbeam-bench-split"))
    parser.add_argument("--compare-only", action="store_true", help="compare the outputs of the last run, run nothing")
    args = parser.parse_args()
    if args.compare_only:
        out = args.work / "out"
        print("tokenize identical:", identical_tokenize(out / "tokenize-sharded", out / "tokenize-one-file"))
        print("train identical:", identical_train(out / "train-sharded", out / "train-one-file"))
        return
    one, sharded = write_inputs(args.work, args.repeat)
    tok = gpt2_tokenizer(args.work)
    beam = ["--direct_num_workers", str(args.workers), "--direct_running_mode", "multi_processing"]
    size = one.stat().st_size
    print(f"input: {size / 1e6:.0f} MB as one file and as {len(list(sharded.glob('*.jsonl')))} shards; "
          f"{args.workers} workers, --split-size {args.split_size}", flush=True)
    rows = []
    outs = {}
    for command, extra in (("tokenize", ["--tokenizer", str(tok)]), ("train", ["--vocab-size", "8192"])):
        times = {}
        for layout, inputs in (("sharded", [str(sharded / "*.jsonl")]), ("one file", [str(one)])):
            out = args.work / "out" / f"{command}-{layout.replace(' ', '-')}"
            subprocess.run(["rm", "-rf", str(out)], check=True)
            times[layout] = run([command, *extra, "--input", *inputs, "--output", str(out),
                                 "--split-size", args.split_size, *beam])
            outs[command, layout] = out
            print(f"  {command} {layout}: {times[layout]:.1f} s", flush=True)
        a, b = outs[command, "sharded"], outs[command, "one file"]
        identical = identical_tokenize(a, b) if command == "tokenize" else identical_train(a, b)
        rows.append((command, times["sharded"], times["one file"], identical))
    print(f"\n| command | {len(list(sharded.glob('*.jsonl')))} shards (s) | one {size / 1e6:.0f} MB file (s) "
          f"| ratio | outputs identical |")
    print("|---|---|---|---|---|")
    for command, t_sharded, t_one, identical in rows:
        print(f"| {command} | {t_sharded:.1f} | {t_one:.1f} | {t_one / t_sharded:.2f}x | {'yes' if identical else 'NO'} |")


if __name__ == "__main__":
    main()
