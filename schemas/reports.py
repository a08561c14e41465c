"""Layouts of the JSON files the train pipeline writes: `counts/_totals.json`, `counts/histogram.json`,
`train_report.json`."""
from __future__ import annotations

from schemas.accounts import ACCOUNT_KEY, UNKNOWN_REASON, Account

# Version 2 added "budget" (train_report.json) and "budget" (_totals.json); readers take version-1
# files as made without a budget. Version 3 holds the record and shard counts as the "account"
# (schemas.accounts) in place of version 2's shards, shards_failed (train_report.json), records
# (read), records_counted (written), records_rejected, rejected_by_reason and records_repaired;
# `upgrade_totals` and `upgrade_train_report` read versions 1 and 2 as version 3. train's _SUCCESS
# (version TRAIN_REPORT_VERSION) holds the same account.
TRAIN_REPORT_VERSION = 3
TOTALS_VERSION = 3
HISTOGRAM_VERSION = 1
HISTOGRAM_FILE = "histogram.json"
# counts/histogram.json: the exact histogram of counts of every unique pre-token counted (before
# --min-count and --max-unique): "histogram" is [[count, unique pre-tokens with that count], ...] by
# count, "unique" their sum and "pretokens" the occurrences (sum of count x unique).
HISTOGRAM_KEYS = ("version", "unique", "pretokens", "histogram")

# Keys every train_report.json has (tests and users depend on them).
TRAIN_REPORT_KEYS = (
    "version", "tokenizer_sha256", "vocab_size", "pattern", "special_tokens", "tie_break",
    "min_frequency", "min_count", "inputs", ACCOUNT_KEY, "shard_errors", "bytes", "pretokens",
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
    """The per-shard / whole-corpus totals of the counting stage (mergeable by `merge_totals`); the
    "account" is an `Account` until `totals_json` writes it out."""
    return {ACCOUNT_KEY: Account(), "bytes": 0, "pretokens": 0, "unique_pretokens_before_pruning": 0, "unique_pretokens_after_pruning": 0,
            "superword_units": 0, "unique_superword_units_before_pruning": 0, "unique_superword_units_after_pruning": 0,
            "shard_errors": []}


def merge_totals(a: dict, b: dict) -> dict:
    """Exact, associative and commutative merge of two totals dicts (shard errors kept sorted)."""
    out = empty_totals()
    for key in ("bytes", "pretokens",
                "unique_pretokens_before_pruning", "unique_pretokens_after_pruning", "superword_units",
                "unique_superword_units_before_pruning", "unique_superword_units_after_pruning"):
        out[key] = a.get(key, 0) + b.get(key, 0)
    out[ACCOUNT_KEY] = a[ACCOUNT_KEY] + b[ACCOUNT_KEY]
    out["shard_errors"] = sorted(a["shard_errors"] + b["shard_errors"], key=lambda e: (e["source"], e["reason"]))
    return out


def totals_json(totals: dict) -> dict:
    """The totals as _totals.json holds them (the account as its JSON object)."""
    return dict(totals, **{ACCOUNT_KEY: totals[ACCOUNT_KEY].to_json()})


_OLD_COUNTS = ("shards", "shards_failed", "records", "records_counted", "records_rejected", "rejected_by_reason",
               "records_repaired")


def _upgrade(d: dict, version: int, what: str) -> dict:
    if not isinstance(d, dict) or ACCOUNT_KEY in d or "records_counted" not in d:
        return d
    try:
        # train's _SUCCESS of version 2 kept only the totals: its rejected records' reasons and failed
        # shards' names are unknown.
        reasons = d.get("rejected_by_reason", {UNKNOWN_REASON: d["records_rejected"]})
        errors = d.get("shard_errors", [{"source": f"{UNKNOWN_REASON}-{i}"} for i in range(d.get("shards_failed", 0))])
        account = Account.of_shard(d["records"], d["records_counted"], reasons, d.get("records_repaired", 0), errors,
                                   shards=d["shards"])
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{what} of version {d.get('version')!r} lacks its record counts") from None
    if d.get("records_rejected", account.records_rejected) != account.records_rejected:
        raise ValueError(f"{what}: records_rejected is not the sum of rejected_by_reason")
    out = {k: v for k, v in d.items() if k not in _OLD_COUNTS}
    out.update({"version": version, ACCOUNT_KEY: account.to_json()})
    return out


def upgrade_totals(d):
    """A _totals.json object of version 1 or 2 as version 3 (its counts as the `account`); one of
    version 3 unchanged.

    >>> old = {"version": 2, "shards": 1, "records": 3, "records_counted": 2, "records_rejected": 1,
    ...        "records_repaired": 0, "rejected_by_reason": {"bad_json": 1}, "shard_errors": [], "bytes": 9}
    >>> new = upgrade_totals(old)
    >>> new["version"], new["account"]["records"]["written"], new["bytes"], "records_counted" in new
    (3, 2, 9, False)
    """
    return _upgrade(d, TOTALS_VERSION, "_totals.json")


def upgrade_train_report(d):
    """A train_report.json (or train's _SUCCESS) of version 1 or 2 as version 3; one of version 3 unchanged."""
    return _upgrade(d, TRAIN_REPORT_VERSION, "train_report.json")
