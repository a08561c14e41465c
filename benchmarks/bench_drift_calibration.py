"""Calibration of `tokenbeam drift`: false alarms on same-distribution samples, detection of real shifts.

    python benchmarks/bench_drift_calibration.py [--sizes 20 40 100 300 600] [--repeats 100]
        [--shift-repeats 20] [--tokenizer DIR]

One 8,192-id tokenizer is trained in-process on the texts of ../shared/corpora/en/en-000..003
(or loaded with --tokenizer), every document of the held-out shards en-004..011, of code/ and of
multi/ is encoded once, and each compared sample is built in-process as the pipeline builds it
(`Summary.add_batch` with record ids, token ids and digit runs, `stats_json`), no Beam. Then, at each size N
(records per side):

- false alarms: seeded disjoint splits of one corpus into two samples of N documents (held-out
  English, and code/ and multi/, which nothing was tuned on): the share of comparisons that
  `drift_judging.compare` with the default settings calls drift;
- detection: N held-out English documents against N other documents changed one way: python
  code (code/), multilingual text (multi/), English with 30% of its documents replaced by code,
  upper-cased English, English with every whitespace run collapsed to one space or newline,
  English with thousands separators in every number of 4+ digits. The share flagged, and which
  figures flagged it.

Prints the two tables (and the median of the constructed shifts' main figures). Figures vary
with --repeats; the rates are binomial (at 100 repeats a 5% rate has a standard error of ~2%).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer, train_bpe  # noqa: E402
from bpe_ops.stats import Summary, batch_stats, digit_runs_batch, single_byte_ids  # noqa: E402
from pipelines.monitoring import drift_judging  # noqa: E402
from schemas.stats import TokenizerFacts, stats_json, validate_stats  # noqa: E402

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))
VOCAB_SIZE = 8192


def read_docs(folder: Path, shards: slice = slice(None)) -> list[tuple[str, str]]:
    """(id, text) of every document of the folder's *.jsonl shards (sorted), restricted to `shards`."""
    docs = []
    for shard in sorted(folder.glob("*.jsonl"))[shards]:
        with open(shard, encoding="utf-8") as f:
            docs += [(d["id"], d["text"]) for d in map(json.loads, f)]
    return docs


# ---- constructed shifts ------------------------------------------------------------------------

def collapse_whitespace(text: str) -> str:
    """Every whitespace run becomes one newline if it holds one, else one space."""
    return re.sub(r"\s+", lambda m: "\n" if "\n" in m.group() else " ", text)


def thousands_separators(text: str) -> str:
    """Every number of 4+ digits written with commas: 65536 -> 65,536."""
    return re.sub(r"\d{4,}", lambda m: f"{int(m.group()):,}", text)


TRANSFORMS = {"upper-cased English": str.upper, "whitespace collapsed": collapse_whitespace,
              "thousands separators": thousands_separators}


# ---- encoded documents and samples ---------------------------------------------------------------

class Encoded:
    """Documents encoded once: id, batch_stats columns and the token ids of each (as uint32 arrays)."""

    def __init__(self, tok: Tokenizer, docs: list[tuple[str, str]], suffix: str = ""):
        self.ids = [doc_id + suffix for doc_id, _ in docs]
        texts = [text for _, text in docs]
        self.arrays = tok.encode_arrays(texts, 2)
        self.stats = batch_stats(texts, self.arrays)
        self.digit_runs = digit_runs_batch(texts)

    def __len__(self) -> int:
        return len(self.ids)


class Sampler:
    """Builds the stats.json of any selection of encoded documents, as the tokenize pipeline does."""

    def __init__(self, tok: Tokenizer):
        self.facts = TokenizerFacts.of(tok)
        self.raw = single_byte_ids(tok.vocab)

    def stats(self, picks: list[tuple[Encoded, int]]) -> dict:
        summary = Summary(self.facts.vocab_size, raw_byte_ids=self.raw)
        columns = [[enc.stats[c][i] for enc, i in picks] for c in range(4)]
        arrays = [enc.arrays[i] for enc, i in picks]
        summary.add_batch(*columns, record_ids=[enc.ids[i] for enc, i in picks], id_arrays=arrays,
                          digit_runs=[enc.digit_runs[i] for enc, i in picks])
        flat = np.frombuffer(b"".join(arrays), dtype=np.uint32)
        summary.add_dense_id_counts(np.bincount(flat, minlength=self.facts.vocab_size).tolist())
        return stats_json(summary, self.facts)


def disjoint_split(pool: Encoded, n: int, rng: random.Random, m: int | None = None) -> tuple[list, list]:
    """Two disjoint random samples of the pool, of n and m (default n) documents."""
    m = n if m is None else m
    order = rng.sample(range(len(pool)), n + m)
    return [(pool, i) for i in order[:n]], [(pool, i) for i in order[n:]]


def shifted_sample(name: str, n: int, rng: random.Random, english: Encoded, taken: set[int],
                   others: dict[str, Encoded]) -> list:
    """N documents of shift `name`, disjoint from the English documents `taken` by the baseline."""
    free = [i for i in range(len(english)) if i not in taken]
    if name in ("python code", "multilingual"):
        pool = others[name]
        return [(pool, i) for i in rng.sample(range(len(pool)), n)]
    if name == "30% code mixed in":
        k = round(0.3 * n)
        code = others["python code"]
        return [(english, i) for i in rng.sample(free, n - k)] + [(code, i) for i in rng.sample(range(len(code)), k)]
    pool = others[name]                       # a transformed copy of the English pool, same order
    return [(pool, i) for i in rng.sample(free, n)]


SHIFTS = ("python code", "multilingual", "30% code mixed in", "upper-cased English", "whitespace collapsed",
          "thousands separators")


# ---- the runs ---------------------------------------------------------------------------------------

def false_alarm_rate(sampler: Sampler, pool: Encoded, n: int, repeats: int, seed: int,
                     thresholds: drift_judging.Thresholds = drift_judging.Thresholds(), m: int | None = None) -> tuple[float, Counter]:
    """Share of same-distribution comparisons (n baseline documents, m current ones) called drift,
    and which figures fired."""
    rng = random.Random(seed)
    alarms, fired = 0, Counter()
    for _ in range(repeats):
        a, b = disjoint_split(pool, n, rng, m)
        report = drift_judging.compare(sampler.stats(a), sampler.stats(b), thresholds)
        alarms += report.drift
        fired.update(m.name for m in report.flagged)
    return alarms / repeats, fired


def detection_rate(sampler: Sampler, name: str, n: int, repeats: int, seed: int, english: Encoded,
                   others: dict[str, Encoded], thresholds: drift_judging.Thresholds = drift_judging.Thresholds()):
    """Share of comparisons (N English vs N shifted) called drift, which figures fired, and the
    reports (for the figures' medians)."""
    rng = random.Random(seed)
    hits, fired, reports = 0, Counter(), []
    for _ in range(repeats):
        base_idx = rng.sample(range(len(english)), n)
        base = [(english, i) for i in base_idx]
        cur = shifted_sample(name, n, rng, english, set(base_idx), others)
        report = drift_judging.compare(sampler.stats(base), sampler.stats(cur), thresholds)
        hits += report.drift
        fired.update(m.name for m in report.flagged)
        reports.append(report)
    return hits / repeats, fired, reports


def load_or_train(path: str | None) -> Tokenizer:
    if path:
        return Tokenizer.from_file(path)
    texts = [text for _, text in read_docs(SHARED / "corpora" / "en", slice(0, 4))]
    return train_bpe(texts, vocab_size=VOCAB_SIZE, pattern="gpt4")


def prepare(tok: Tokenizer, english_limit: int | None = None, other_limit: int | None = None):
    """The encoded pools: held-out English, code, multi, and the transformed English pools."""
    english_docs = read_docs(SHARED / "corpora" / "en", slice(4, None))[:english_limit]
    english = Encoded(tok, english_docs)
    others = {"python code": Encoded(tok, read_docs(SHARED / "corpora" / "code")[:other_limit]),
              "multilingual": Encoded(tok, read_docs(SHARED / "corpora" / "multi")[:other_limit])}
    for name, fn in TRANSFORMS.items():
        others[name] = Encoded(tok, [(i, fn(t)) for i, t in english_docs], suffix="#shifted")
    return english, others


def _top(fired: Counter, k: int = 3) -> str:
    return ", ".join(f"{name} {n}" for name, n in fired.most_common(k)) or "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 40, 100, 300, 600])
    parser.add_argument("--repeats", type=int, default=100, help="same-distribution splits per size and corpus")
    parser.add_argument("--shift-repeats", type=int, default=20, help="comparisons per shift and size")
    parser.add_argument("--tokenizer", help="load this tokenizer instead of training one")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["false-alarms", "unequal", "shifts"], help="run one of the tables")
    parser.add_argument("--unequal", nargs="+", default=["600:40", "40:600", "300:20"], metavar="N:M",
                        help="baseline:current sizes of the unequal-size false-alarm table")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    tok = load_or_train(args.tokenizer)
    print(f"tokenizer: {tok.vocab_size} ids ({time.perf_counter() - started:.1f} s)", flush=True)
    started = time.perf_counter()
    english, others = prepare(tok)
    sampler = Sampler(tok)
    validate_stats(sampler.stats([(english, i) for i in range(20)]))
    print(f"encoded {len(english)} held-out English, {len(others['python code'])} code, "
          f"{len(others['multilingual'])} multilingual documents ({time.perf_counter() - started:.1f} s)\n",
          flush=True)

    pools = {"en (held out)": english, "code": others["python code"], "multi": others["multilingual"]}
    if args.only in (None, "false-alarms"):
        false_alarm_table(sampler, pools, args)
    if args.only in (None, "unequal"):
        unequal_table(sampler, pools, args)
    if args.only in (None, "shifts"):
        shift_table(sampler, english, others, args)
    return 0


def false_alarm_table(sampler: Sampler, pools: dict, args) -> None:
    print("False alarms (two disjoint samples of one corpus, default settings)\n")
    print("| records per side | " + " | ".join(pools) + " | figures that fired (all corpora) |")
    print("|---|" + "---|" * len(pools) + "---|")
    for n in args.sizes:
        cells, fired_all = [], Counter()
        for k, (name, pool) in enumerate(pools.items()):
            if 2 * n > len(pool):
                cells.append("-")
                continue
            rate, fired = false_alarm_rate(sampler, pool, n, args.repeats, args.seed * 1000 + n * 10 + k)
            cells.append(f"{100 * rate:.0f}% ({round(rate * args.repeats)}/{args.repeats})")
            fired_all += fired
        print(f"| {n} | " + " | ".join(cells) + f" | {_top(fired_all)} |", flush=True)



def unequal_table(sampler: Sampler, pools: dict, args) -> None:
    print("\nFalse alarms at unequal sizes (baseline:current documents, disjoint, one corpus)\n")
    print("| baseline:current | " + " | ".join(pools) + " | figures that fired (all corpora) |")
    print("|---|" + "---|" * len(pools) + "---|")
    for pair in args.unequal:
        n, m = map(int, pair.split(":"))
        cells, fired_all = [], Counter()
        for k, (name, pool) in enumerate(pools.items()):
            if n + m > len(pool):
                cells.append("-")
                continue
            rate, fired = false_alarm_rate(sampler, pool, n, args.repeats, args.seed * 3001 + n * 7 + m + k, m=m)
            cells.append(f"{100 * rate:.0f}% ({round(rate * args.repeats)}/{args.repeats})")
            fired_all += fired
        print(f"| {n}:{m} | " + " | ".join(cells) + f" | {_top(fired_all)} |", flush=True)


def shift_table(sampler: Sampler, english: Encoded, others: dict, args) -> None:
    print("\nDetection (N held-out English documents vs N shifted documents, default settings)\n")
    print("| shift | " + " | ".join(f"N={n}" for n in args.sizes) + " | figures that fired most (largest N) "
          "| bytes/token, tokens/word, JS excess (median, largest N) |")
    print("|---|" + "---|" * len(args.sizes) + "---|---|")
    for name in SHIFTS:
        cells, last = [], None
        for n in args.sizes:
            rate, fired, reports = detection_rate(sampler, name, n, args.shift_repeats,
                                                  args.seed * 7919 + n, english, others)
            cells.append(f"{100 * rate:.0f}%")
            last = fired, reports
        fired, reports = last
        medians = [float(np.median([r.metric(m).change for r in reports]))
                   for m in ("bytes_per_token", "tokens_per_word", "js_token_ids")]
        print(f"| {name} | " + " | ".join(cells) + f" | {_top(fired)} | {100 * medians[0]:+.1f}%, "
              f"{100 * medians[1]:+.1f}%, {medians[2]:.3f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
