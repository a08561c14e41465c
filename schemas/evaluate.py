"""The layout of `evaluate.json` (written by `tokenbeam evaluate`), its version and definitions.

Layout (version 2; ratios are null where their denominator is zero):

    kind: "tokenbeam.evaluate", schema_version: 2
    inputs: [globs], group_field: str | null
    definitions: {figure name: what it is}            (DEFINITIONS below, so the file explains itself)
    tokenizers: [{name, path, sha256, vocab_size, merges (null: not a merge list),
                  truncated_from (the name of the tokenizer whose first `merges` merges this is) | null}]
    rows: [{tokenizer, group (null: the whole dataset), <every key of ROW_FIGURES>}]
          one per tokenizer and group, tokenizers in the order given, the whole dataset first
    account: {shards: {read, failed}, records: {read, written, rejected, rejected_by_reason, repaired}}
             (schemas.accounts: the same object as every other file's account)
    records: the records evaluated (= account.records.written)
    shard_errors: [{source, rows_read, reason, detail}]
    timing: {started_at, elapsed_seconds}            the only part that differs between runs

Version 1 had records_read, rejected: {total, by_reason}, repaired_records and shards: {count,
failed} in place of the account; `upgrade_evaluate` reads it as version 2.
"""
from __future__ import annotations

from schemas.accounts import ACCOUNT_KEY, Account, account_of

EVALUATE_KIND = "tokenbeam.evaluate"
EVALUATE_SCHEMA_VERSION = 2

DEFINITIONS = {
    "bytes_per_token": "UTF-8 bytes / tokens over the records encoded whole (stats.json's bytes_per_token.overall)",
    "tokens_per_char": "tokens / characters (code points)",
    "tokens_per_word": "tokens / whitespace words (str.split; stats.json's tokens_per_word): fertility",
    "raw_byte_share": "single-byte tokens / tokens (stats.json's raw_byte_tokens.share): byte fallback",
    "used_ids": "distinct token ids in the encoded records (pieces in use)",
    "vocab_utilisation": "used_ids / vocab_size (stats.json's vocabulary.utilisation)",
    "word_types": "distinct whitespace words",
    "pieces_per_word_type": "mean over word types of their pieces: the tokens of ' ' + word encoded alone, "
                            "not counting tokens made only of whitespace",
    "word_types_kept_whole": "share of word types of one piece",
    "pieces_per_word": "pieces per word weighted by occurrences",
    "words_kept_whole": "share of word occurrences whose type is one piece",
}

ROW_FIGURES = ("records", "tokens", "bytes", "chars", "words", "bytes_per_token", "tokens_per_char",
               "tokens_per_word", "raw_byte_tokens", "raw_byte_share", "used_ids", "vocab_size",
               "vocab_utilisation", "word_types", "word_occurrences", "pieces_per_word_type",
               "word_types_kept_whole", "pieces_per_word", "words_kept_whole")
TOKENIZER_KEYS = ("name", "path", "sha256", "vocab_size", "merges", "truncated_from")
REQUIRED_KEYS = ("kind", "schema_version", "inputs", "group_field", "definitions", "tokenizers", "rows",
                 ACCOUNT_KEY, "records", "shard_errors")


def validate_evaluate(d) -> None:
    """Raise ValueError with one line if `d` is not an evaluate.json of this version (read a version-1
    file through `upgrade_evaluate` first)."""
    if not isinstance(d, dict) or d.get("kind") != EVALUATE_KIND:
        raise ValueError("not a tokenbeam evaluate.json")
    if d.get("schema_version") != EVALUATE_SCHEMA_VERSION:
        raise ValueError(f"evaluate.json schema_version {d.get('schema_version')!r} is not supported "
                         f"(this tokenbeam reads version {EVALUATE_SCHEMA_VERSION})")
    for key in REQUIRED_KEYS:
        if key not in d:
            raise ValueError(f"missing key {key!r}")
    names = [t.get("name") for t in d["tokenizers"]]
    for t in d["tokenizers"]:
        missing = [k for k in TOKENIZER_KEYS if k not in t]
        if missing:
            raise ValueError(f"tokenizer {t.get('name')!r} lacks {missing[0]!r}")
    for row in d["rows"]:
        missing = [k for k in ("tokenizer", "group", *ROW_FIGURES) if k not in row]
        if missing:
            raise ValueError(f"row {row.get('tokenizer')!r}/{row.get('group')!r} lacks {missing[0]!r}")
        if row["tokenizer"] not in names:
            raise ValueError(f"row names tokenizer {row['tokenizer']!r}, which the file does not list")
    if account_of(d).records_written != d["records"]:
        raise ValueError("records != account.records.written")


def upgrade_evaluate(d):
    """An evaluate.json object of version 1 as version 2 (its record and shard counts as the `account`);
    any other object unchanged (validate_evaluate judges it)."""
    if not isinstance(d, dict) or d.get("kind") != EVALUATE_KIND or d.get("schema_version") != 1:
        return d
    try:
        account = Account.of_shard(d["records_read"], d["records"], d["rejected"]["by_reason"],
                                   d["repaired_records"], d["shard_errors"], shards=d["shards"]["count"])
    except (KeyError, TypeError, AttributeError):
        raise ValueError("evaluate.json schema_version 1 lacks its record counts") from None
    out = {k: v for k, v in d.items() if k not in ("records_read", "rejected", "repaired_records", "shards")}
    out.update({"schema_version": EVALUATE_SCHEMA_VERSION, ACCOUNT_KEY: account.to_json()})
    return out


def success_json(report: dict) -> dict:
    """evaluate's `_SUCCESS`: which file is the report, and its account."""
    return {"evaluate": "evaluate.json", ACCOUNT_KEY: report[ACCOUNT_KEY]}


def upgrade_success(success, report: dict):
    """An evaluate `_SUCCESS` written before the account ({evaluate, records, shards: {count, failed}})
    as today's, from the evaluate.json beside it (of either version), whose figures it must repeat;
    any other object unchanged."""
    if not isinstance(success, dict) or "evaluate" not in success or ACCOUNT_KEY in success:
        return success
    report = upgrade_evaluate(report)
    account = account_of(report)
    if (success.get("records"), success.get("shards")) != (account.records_written, {
            "count": account.shards_read, "failed": account.shards_failed}):
        raise ValueError("evaluate _SUCCESS disagrees with the evaluate.json beside it")
    return success_json(report)
