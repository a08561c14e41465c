"""How often `tokenbeam estimate`'s 95% intervals hold the exact figures, and what share of the bytes
it reads, over seeded runs on each corpus (the exact figures: every record encoded, as tokenize does).

    python benchmarks/bench_estimate.py                      # en, code, multi; seeds 0-99; GPT-2's tokenizer
    python benchmarks/bench_estimate.py --runs 200 --sample 1%
    python benchmarks/bench_estimate.py --corpus code --window 512 --min-draws 300   # other designs
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer  # noqa: E402
from bpe_ops.sample_estimate import t_quantile_975  # noqa: E402
from bpe_ops.stats import count_words, utf8_length  # noqa: E402
from pipelines import estimate  # noqa: E402
from pipelines.datasets.shards import expand  # noqa: E402
from pipelines.datasets.byte_windows import offset_readable  # noqa: E402
from pipelines.datasets.sources import Record, SourceOptions, read_shard  # noqa: E402


def exact(tok, shards, options) -> dict[str, float]:
    tokens = words = size = 0
    for shard in shards:
        for item in read_shard(shard, options):
            if isinstance(item, Record):
                tokens += len(tok.encode(item.text))
                words += count_words(item.text)
                size += utf8_length(item.text)
    return {"tokens": tokens, "words": words, "bytes per token": size / tokens, "tokens per word": tokens / words}


def z_score(figure, truth: float, df: int) -> float:
    """(estimate - exact) / its standard error (the interval's half width over its t quantile)."""
    half = (figure.high - figure.value) / t_quantile_975(df)
    return (figure.value - truth) / half if half > 0 else 0.0


def spread(values) -> float:
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"))
    parser.add_argument("--corpus", action="append", default=None)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + runs - 1")
    parser.add_argument("--sample", type=estimate.sample_fraction, default=estimate.sample_fraction(estimate.DEFAULT_SAMPLE))
    parser.add_argument("--window", type=int, default=estimate.WINDOW, help="bytes of a window drawn by offset")
    parser.add_argument("--min-draws", type=int, default=estimate.MIN_DRAWS)
    args = parser.parse_args(argv)
    estimate.WINDOW, estimate.MIN_DRAWS = args.window, args.min_draws
    gpt2 = Path(args.shared) / "oracles" / "gpt2"
    with tempfile.TemporaryDirectory() as tmp:
        Tokenizer.from_gpt2_files(gpt2 / "gpt2_vocab.json", gpt2 / "gpt2_merges.txt").save(tmp)
        tok = Tokenizer.from_file(Path(tmp) / "tokenizer.json")
    print(f"bench_estimate: GPT-2's tokenizer, --sample {args.sample:.2%}, windows of {args.window} bytes, at least "
          f"{args.min_draws} drawn, seeds {args.first_seed}-{args.first_seed + args.runs - 1}, {time.strftime('%Y-%m-%d')}")
    print("covered: runs (of the seeds) whose 95% interval held the exact figure; error: mean relative error of "
          "the tokens estimate, and the spread of (estimate - exact) / standard error (1 if the intervals are honest)")
    print(f"{'corpus':<8}{'tokens':>8}{'words':>8}{'bytes/token':>13}{'tokens/word':>13}{'read (mean, max)':>18}"
          f"{'draws':>7}{'error':>9}{'sd z (the four)':>21}{'s/run':>7}")
    options = SourceOptions()
    for corpus in args.corpus or ["en", "code", "multi"]:
        shards = expand([str(Path(args.shared) / "corpora" / corpus / "*.jsonl")], options)
        truth = exact(tok, shards, options)
        covered = dict.fromkeys(truth, 0)
        reads, draws, errors, zs, start = [], [], [], [], time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.runs):
            sampler = estimate.Sampler(tok, options, random.Random(seed))
            strata = [sampler.by_offset([s for s in shards if offset_readable(s, options)], args.sample, [])]
            est = estimate.Estimate(strata)
            figures = {"tokens": est.total("tokens"), "words": est.total("words"),
                       "bytes per token": est.ratio("bytes", "tokens"), "tokens per word": est.ratio("tokens", "words")}
            for name, figure in figures.items():
                covered[name] += figure.low <= truth[name] <= figure.high
            errors.append(figures["tokens"].value / truth["tokens"] - 1)
            zs.append([z_score(figure, truth[name], est.df) for name, figure in figures.items()])
            reads.append(strata[0].bytes_read / sum(s.size for s in shards))
            draws.append(len(strata[0].draws))
        per_run = (time.perf_counter() - start) / args.runs
        sd_z = "/".join(f"{spread(column):.2f}" for column in zip(*zs))
        print(f"{corpus:<8}" + "".join(f"{covered[n]:>{w}}" for n, w in
                                       (("tokens", 8), ("words", 8), ("bytes per token", 13), ("tokens per word", 13)))
              + f"{f'{sum(reads) / len(reads):.1%}, {max(reads):.1%}':>18}{sum(draws) / len(draws):>7.0f}"
              + f"{sum(errors) / len(errors):>+9.4f}{sd_z:>21}{per_run:>7.2f}")


if __name__ == "__main__":
    main()
