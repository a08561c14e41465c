"""Pack side by side: `tokenbeam pack` against the floor of any packer, reading the token Parquet with
pyarrow and writing the same ids with numpy (no shuffle, no split, no rows: the I/O alone).

    python benchmarks/bench_pack.py [--corpus ../shared/corpora/en] [--scales 1 10] [--seq-len 2048]

Trains a tokenizer and tokenizes the corpus first (or takes `--tokens DIR`, the output of
`tokenbeam tokenize`); the 10x dataset is ten copies of its files under new record ids. Checks that
pack's flat `.bin` holds exactly the floor's ids (as a multiset: pack shuffles), then prints M ids
per second (wall), CPU seconds, peak memory of the whole process tree and the ratio to the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import measure, python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def floor(tokens_dir: str, output: str) -> None:
    """pyarrow read + numpy write of every id, file by file: what no packer can beat."""
    import numpy as np
    import pyarrow.parquet as pq

    with open(output, "wb") as out:
        for path in sorted(Path(tokens_dir).rglob("*.parquet")):
            ids = pq.read_table(path, columns=["token_ids"]).column("token_ids").combine_chunks()
            np.asarray(ids.values.to_numpy(zero_copy_only=False)).tofile(out)


def repeat(tokens_dir: Path, times: int, output: Path) -> None:
    """`times` copies of the token files, each record id suffixed with its copy (so ids stay unique)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tokens_dir, times, output = Path(tokens_dir), int(times), Path(output)

    output.mkdir(parents=True, exist_ok=True)
    for path in sorted(tokens_dir.glob("*.parquet")):
        table = pq.read_table(path)
        footer = pq.ParquetFile(path).metadata.metadata      # tokenize's shard record: its --eos-token
        for k in range(times):
            copy = table.set_column(0, table.schema.field("id"), pc.binary_join_element_wise(
                table.column("id"), pa.scalar(f"@{k}"), ""))
            with pq.ParquetWriter(output / f"{path.stem}-copy{k:02d}.parquet", copy.schema, compression="zstd") as w:
                w.write_table(copy)
                w.add_key_value_metadata({k: v for k, v in footer.items() if k != b"ARROW:schema"})


def prepare_tokens(corpus: str, work: Path) -> Path:
    import subprocess

    tok, tokens = work / "tok", work / "tokens"
    subprocess.run(python("-m", "pipelines.cli", "train", "--input", f"{corpus}/*.jsonl", "--output", str(tok),
                          "--vocab-size", "32768", "--special-token", "<|endoftext|>"), check=True, cwd=ROOT)
    subprocess.run(python("-m", "pipelines.cli", "tokenize", "--tokenizer", str(tok / "tokenizer.json"), "--input",
                          f"{corpus}/*.jsonl", "--output", str(tokens), "--eos-token", "<|endoftext|>"),
                   check=True, cwd=ROOT)
    return tokens


def check_same_ids(pack_out: Path, floor_file: Path) -> int:
    import numpy as np

    pack_out = Path(pack_out)

    meta = json.loads((pack_out / "train" / "bin" / "bin.json").read_text())
    packed = np.concatenate([np.fromfile(pack_out / "train" / "bin" / f["name"], meta["dtype"]) for f in meta["files"]])
    reference = np.fromfile(floor_file, meta["dtype"])
    if not np.array_equal(np.bincount(packed, minlength=65536), np.bincount(reference, minlength=65536)):
        raise SystemExit("pack's ids differ from the floor's")
    return len(packed)


def in_child(env: dict, function: str, *args) -> str:
    """`bench_pack.function(*args)` in a child process, its printed result: the numpy arrays and Arrow
    tables of `repeat` and `check_same_ids` must not grow this process, whose resident memory at fork
    time the next measured command's peak (wait4's ru_maxrss, kept across exec) would include."""
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_pack; "
            f"print(bench_pack.{function}(*{tuple(str(a) for a in args)!r}))")
    return subprocess.run(python("-c", code), env=env, check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpora" / "en"))
    parser.add_argument("--tokens", default=None, help="token Parquet folder to pack (default: tokenize --corpus)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--seq-len", default="2048")
    parser.add_argument("--workers", type=int, default=0, help="also run multi_processing with this many workers")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(prefix="bench-pack-") as tmp:
        work = Path(tmp)
        tokens = Path(args.tokens) if args.tokens else prepare_tokens(args.corpus, work)
        print(f"| scale | what | wall s | CPU s | peak MB | M ids/s | ratio to floor (throughput) |")
        print("|---|---|---|---|---|---|---|")
        for scale in args.scales:
            source = tokens
            if scale != 1:
                source = work / f"tokens-x{scale}"
                in_child(env, "repeat", tokens, scale, source)
            floor_file = work / f"floor-x{scale}.bin"
            base = measure(python("-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                                        f"import bench_pack; bench_pack.floor({str(source)!r}, {str(floor_file)!r})"),
                           env=env)
            ids = os.path.getsize(floor_file) // 2
            runs = [("pack --format bin", ["--format", "bin"]),
                    ("pack, all three formats", ["--format", "parquet", "--format", "megatron", "--format", "bin"])]
            if args.workers:
                runs.append((f"pack --format bin, multi_processing x{args.workers}",
                             ["--format", "bin", "--direct_running_mode", "multi_processing",
                              "--direct_num_workers", str(args.workers)]))
            print(f"| {scale}x | floor: pyarrow read + numpy write | {base.wall:.1f} | {base.cpu:.1f} | "
                  f"{base.peak_rss_mb:.0f} | {ids / 1e6 / base.wall:.1f} | 1.00 |", flush=True)
            for name, extra in runs:
                out = work / f"pack-x{scale}"
                m = measure(python("-m", "pipelines.pack", "--input", str(source), "--output", str(out), "--seq-len",
                                   args.seq_len, "--validation-fraction", "0", "--tail", "keep", *extra), env=env,
                            cwd=str(ROOT))
                if m.returncode:
                    raise SystemExit(f"pack failed: {m.stderr[-2000:]}")
                assert int(in_child(env, "check_same_ids", out, floor_file)) == ids
                assert not (out / ".pack-spill").exists(), "pack left its spill files"
                print(f"| {scale}x | {name} | {m.wall:.1f} | {m.cpu:.1f} | {m.peak_rss_mb:.0f} | "
                      f"{ids / 1e6 / m.wall:.1f} | {base.wall / m.wall:.3f} |", flush=True)
                import shutil
                shutil.rmtree(out)


if __name__ == "__main__":
    main()
