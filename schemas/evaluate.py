"""The layout of `evaluate.json` (written by `tokenbeam evaluate`), its version and definitions.

Layout (version 1; ratios are null where their denominator is zero):

    kind: "tokenbeam.evaluate", schema_version: 1
    inputs: [globs], group_field: str | null
    definitions: {figure name: what it is}            (DEFINITIONS below, so the file explains itself)
    tokenizers: [{name, path, sha256, vocab_size, merges (null: not a merge list),
                  truncated_from (the name of the tokenizer whose first `merges` merges this is) | null}]
    rows: [{tokenizer, group (null: the whole dataset), <every key of ROW_FIGURES>}]
          one per tokenizer and group, tokenizers in the order given, the whole dataset first
    records_read, records, rejected: {total, by_reason}, repaired_records
    shards: {count, failed}, shard_errors: [{source, rows_read, reason, detail}]
    timing: {started_at, elapsed_seconds}            the only part that differs between runs
"""
from __future__ import annotations

EVALUATE_KIND = "tokenbeam.evaluate"
EVALUATE_SCHEMA_VERSION = 1

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
                 "records_read", "records", "rejected", "repaired_records", "shards", "shard_errors")


def validate_evaluate(d) -> None:
    """Raise ValueError with one line if `d` is not an evaluate.json of this version."""
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
    if d["records"] + d["rejected"]["total"] != d["records_read"]:
        raise ValueError("records + rejected.total != records_read")
