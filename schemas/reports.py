"""Layouts of the JSON files the train pipeline writes: `counts/_totals.json`, `counts/histogram.json`,
`train_report.json`."""
from __future__ import annotations

# Version 2 added "budget" (train_report.json) and "budget" (_totals.json); readers take version-1
# files as made without a budget.
TRAIN_REPORT_VERSION = 2
TOTALS_VERSION = 2
HISTOGRAM_VERSION = 1
HISTOGRAM_FILE = "histogram.json"
# counts/histogram.json: the exact histogram of counts of every unique pre-token counted (before
# --min-count and --max-unique): "histogram" is [[count, unique pre-tokens with that count], ...] by
# count, "unique" their sum and "pretokens" the occurrences (sum of count x unique).
HISTOGRAM_KEYS = ("version", "unique", "pretokens", "histogram")

# Keys every train_report.json has (tests and users depend on them).
TRAIN_REPORT_KEYS = (
    "version", "tokenizer_sha256", "vocab_size", "pattern", "special_tokens", "tie_break",
    "min_frequency", "min_count", "inputs", "records", "records_counted", "records_rejected",
    "rejected_by_reason", "records_repaired", "shard_errors", "bytes", "pretokens",
    "unique_pretokens_before_pruning", "unique_pretokens_after_pruning", "merges", "tied_merges",
    "duplicate_merges", "stop_reason", "compression_curve", "timing_seconds", "peak_rss_mb",
    "peak_rss_mb_by_process", "max_token_length", "text_options", "normalizer", "pre_tokenizer", "tiktoken",
    "superword", "budget",
)
# train_report.json and _totals.json "budget" (null without --max-unique): the budget N, the unique
# pre-tokens before it (at or above --min-count) and after (N, or all when fewer), the threshold count
# (all above it kept; at it, `ties_kept` of `ties_at_threshold`, by bpe_ops.count_table.tie_order),
# the occurrences kept and counted, and their exact share. counts/*.parquet holds the kept pre-tokens.
BUDGET_KEYS = ("max_unique", "min_count", "unique_before", "unique_after", "threshold", "ties_at_threshold",
               "ties_kept", "pretokens_kept", "pretokens", "share_kept")
# train_report.json "superword" (null without --superword-transition): SuperBPE's transition T and
# unit bound W, the units' split regex (the tokenizer's), the merges of each phase, and the units
# counted (repeats included) and unique before / after --min-count.
SUPERWORD_KEYS = ("transition", "max_words", "units_pattern", "phase_one_merges", "phase_two_merges", "units",
                  "unique_units_before_pruning", "unique_units_after_pruning")
# train_report.json "tiktoken": whether tokenizer.tiktoken was written, the pattern tiktoken needs, and
# whether it then gives the same ids (bpe_ops.formats.tiktoken_recipe).
TIKTOKEN_KEYS = ("written", "pattern", "identical", "note")


def text_options(normalize: str | None = None, lowercase: bool = False, split_digits: bool = False,
                 digit_group: int | None = None) -> dict:
    """The counting options that change the counts, as `_totals.json` ("text_options", absent in
    counts made before them: all off) and train_report.json record them; `train --counts` refuses
    counts made with other ones. `digit_group` 1 is the same rule as `split_digits`, and recorded as it."""
    if digit_group == 1 and not split_digits:
        split_digits, digit_group = True, None
    return {"normalize": normalize, "lowercase": bool(lowercase), "split_digits": bool(split_digits),
            "digit_group": digit_group}


def budget_report(cut: dict, pretokens: int) -> dict:
    """The "budget" (BUDGET_KEYS) of a cut (bpe_ops.count_table.budget_cut) of a corpus of
    `pretokens` occurrences."""
    report = dict(cut, pretokens=pretokens, share_kept=cut["pretokens_kept"] / pretokens if pretokens else 1.0)
    return {key: report[key] for key in BUDGET_KEYS}


def histogram_file(histogram: dict[int, int]) -> dict:
    """counts/histogram.json of a `{count: unique pre-tokens}` histogram (HISTOGRAM_KEYS)."""
    rows = sorted(histogram.items())
    return {"version": HISTOGRAM_VERSION, "unique": sum(n for _, n in rows),
            "pretokens": sum(c * n for c, n in rows), "histogram": [list(row) for row in rows]}


def empty_totals() -> dict:
    """The per-shard / whole-corpus totals of the counting stage (mergeable by `merge_totals`)."""
    return {"shards": 0, "records": 0, "records_counted": 0, "records_rejected": 0, "records_repaired": 0,
            "bytes": 0, "pretokens": 0, "unique_pretokens_before_pruning": 0, "unique_pretokens_after_pruning": 0,
            "superword_units": 0, "unique_superword_units_before_pruning": 0, "unique_superword_units_after_pruning": 0,
            "rejected_by_reason": {}, "shard_errors": []}


def merge_totals(a: dict, b: dict) -> dict:
    """Exact, associative and commutative merge of two totals dicts (shard errors kept sorted)."""
    out = empty_totals()
    for key in ("shards", "records", "records_counted", "records_rejected", "records_repaired", "bytes", "pretokens",
                "unique_pretokens_before_pruning", "unique_pretokens_after_pruning", "superword_units",
                "unique_superword_units_before_pruning", "unique_superword_units_after_pruning"):
        out[key] = a.get(key, 0) + b.get(key, 0)
    reasons = dict(a["rejected_by_reason"])
    for reason, n in b["rejected_by_reason"].items():
        reasons[reason] = reasons.get(reason, 0) + n
    out["rejected_by_reason"] = dict(sorted(reasons.items()))
    out["shard_errors"] = sorted(a["shard_errors"] + b["shard_errors"], key=lambda e: (e["source"], e["reason"]))
    return out
