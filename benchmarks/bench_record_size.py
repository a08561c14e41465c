"""How tokenize's memory scales with the size of one record, and what --max-record-bytes saves.

One `.jsonl.gz` shard holding a single English record of N MB (the in-repo sample repeated), tokenized
by `tokenbeam tokenize` with a 32k-or-smaller tokenizer trained on the sample, in a process of its own;
peak resident memory of the whole process tree and wall time are printed per size, with the peak over
the record size, and the same for a record just above the bound (rejected before it is held whole).

    python benchmarks/bench_record_size.py [--sizes 1,4,16] [--vocab-size 8192]
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._measure import measure, python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def english(n_bytes: int) -> str:
    texts = [json.loads(line)["text"] for f in sorted((ROOT / "sample").glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines()]
    block = "\n\n".join(texts)
    return (block * (n_bytes // len(block.encode()) + 1)).encode()[:n_bytes].decode("utf-8", "ignore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,4,16", help="record sizes in MB (comma-separated)")
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tok = tmp / "tok"
        trained = measure(python("-m", "pipelines.cli", "train", "--input", str(ROOT / "sample" / "*.jsonl"),
                                 "--output", str(tok), "--vocab-size", str(args.vocab_size)), cwd=ROOT)
        assert trained.returncode == 0, trained.stderr
        print(f"{'record MB':>10} {'bound MB':>9} {'outcome':>9} {'wall s':>7} {'peak MB':>8} {'peak/record':>12}")
        sizes = [float(s) for s in args.sizes.split(",")]
        cases = [(mb, 0) for mb in sizes] + [(sizes[-1], sizes[-1] / 2)]     # the last one above a bound
        for mb, bound in cases:
            shard = tmp / f"one-{mb:g}.jsonl.gz"
            shard.write_bytes(gzip.compress(json.dumps({"id": "big", "text": english(int(mb * 2**20))}).encode()
                                            + b"\n", compresslevel=1))
            out = tmp / f"out-{mb:g}-{bound:g}"
            run = measure(python("-m", "pipelines.cli", "tokenize", "--tokenizer", str(tok), "--input", str(shard),
                                 "--output", str(out), "--max-record-bytes", f"{int(bound * 2**20)}"), cwd=ROOT)
            outcome = "written" if run.returncode == 0 else f"exit {run.returncode}"
            if run.returncode == 3 and "record_too_large" in (out / "rejected" / f"one-{mb:g}.jsonl").read_text():
                outcome = "rejected"
            print(f"{mb:>10g} {bound or float('inf'):>9g} {outcome:>9} {run.wall:>7.1f} {run.peak_rss_mb:>8.0f} "
                  f"{run.peak_rss_mb / mb:>12.1f}")


if __name__ == "__main__":
    main()
