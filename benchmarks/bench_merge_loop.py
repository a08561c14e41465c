"""Benchmark the BPE merge loop: compiled vs its pure-Python twin vs Hugging Face vs rustbpe.

    python benchmarks/bench_merge_loop.py [--corpus en] [--vocab-size 32768] [--tie-break hf]

Setup (not timed): the corpus's texts are read and counted with the gpt4 pattern.
Timed, in CPU seconds of this process (all threads; the stable figure on a shared machine):
- ours: `learn_merges` on the counts, compiled (`bpe_ops._merge_loop`) and with
  `Implementation(compiled=False)`; both include the Python setup (symbolizing the pre-tokens). Their
  results are checked identical.
- Hugging Face BpeTrainer and rustbpe train only from texts (they count pre-tokens themselves), so
  their merge loop is estimated as a full training minus a one-merge training on the same texts.
With `--tie-break hf` our merges are also compared with Hugging Face's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import pretokenize, trainer  # noqa: E402
from bpe_ops.implementation import Implementation  # noqa: E402
from bpe_ops.trainer import learn_merges  # noqa: E402
from _peers import hf_train, rustbpe_train  # noqa: E402  (this script's folder is on sys.path)

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))


def cpu(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def read_texts(folder: Path) -> list[str]:
    texts = []
    for shard in sorted(folder.glob("*.jsonl")):
        with open(shard, encoding="utf-8") as f:
            texts.extend(json.loads(line)["text"] for line in f)
    return texts


def ours(counts, num_merges: int, tie_break: str, pure: bool):
    implementation = Implementation(compiled=not pure)
    return cpu(lambda: learn_merges(counts, num_merges, tie_break=tie_break, implementation=implementation))


def hf_merge_pairs(texts: list[str], vocab_size: int) -> list[tuple[bytes, bytes]]:
    """HF's merges as byte pairs."""
    merges = json.loads(hf_train(texts, vocab_size).to_str())["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    return [(pretokenize.unicode_to_token(a), pretokenize.unicode_to_token(b)) for a, b in pairs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="en", help="a folder of ../shared/corpora")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--tie-break", default="hf", choices=trainer.TIE_BREAKS)
    args = parser.parse_args()
    if trainer._merge_loop is None:
        print("bpe_ops._merge_loop is not built: python setup.py build_ext --inplace")
        return 1

    texts = read_texts(SHARED / "corpora" / args.corpus)
    count_seconds, counts = cpu(lambda: pretokenize.count_pretokens(texts, "gpt4"))
    num_merges = args.vocab_size - 256
    print(f"corpus {args.corpus}: {len(texts)} docs, {sum(map(len, texts)) / 1e6:.1f} M chars, "
          f"{len(counts)} distinct pre-tokens (counted in {count_seconds:.1f} CPU-s, not timed); "
          f"{args.vocab_size} ids = {num_merges} merges, tie_break={args.tie_break}")

    c_seconds, c_result = ours(counts, num_merges, args.tie_break, pure=False)
    py_seconds, py_result = ours(counts, num_merges, args.tie_break, pure=True)
    assert c_result == py_result, "the compiled loop and its Python twin differ"
    hf_full, hf_merges = cpu(lambda: hf_merge_pairs(texts, args.vocab_size))
    hf_one, _ = cpu(lambda: hf_merge_pairs(texts, 257))
    rust_full, _ = cpu(lambda: rustbpe_train(texts, args.vocab_size))
    rust_one, _ = cpu(lambda: rustbpe_train(texts, 257))

    rows = [("ours, compiled (bpe_ops._merge_loop)", c_seconds),
            ("ours, pure-Python twin", py_seconds),
            (f"HF BpeTrainer ({hf_full:.1f} full - {hf_one:.1f} one merge)", hf_full - hf_one),
            (f"rustbpe ({rust_full:.1f} full - {rust_one:.1f} one merge)", rust_full - rust_one)]
    print(f"\n{'merge loop':62} {'CPU-s':>7} {'vs compiled':>12}")
    for name, seconds in rows:
        print(f"{name:62} {seconds:7.2f} {seconds / c_seconds:11.1f}x")
    print(f"\ncompiled == pure-Python twin: yes ({len(c_result.merges)} merges, "
          f"{c_result.tied_merges} decided by the tie rule)")
    if args.tie_break == "hf":
        print(f"our merges == Hugging Face's: {'yes' if c_result.merges == hf_merges else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
