"""The layout of `stats.json`: version, fixed histogram bins, validation, loading and writing.

`stats.json` is the exact summary of a tokenized dataset (see `bpe_ops.stats.Summary`). Drift
comparison works from two of these files alone, so everything it needs is here and the histogram
bins are defined once, in this file: every stats.json of one schema version is comparable bin for bin.

Layout (version 1; `...` = a JSON number, `null` where the figure is undefined for an empty set):

    kind: "tokenbeam.stats", schema_version: 1
    tokenizer_sha256, vocab_size (ids 0 .. vocab_size-1, special tokens included)
    records (written), records_read (= records + rejected.total), tokens, bytes, chars, words,
    repaired_records (invalid UTF-8 replaced by U+FFFD)
    rejected: {total, by_reason: {reason: count}}
    tokens_per_record: {mean, min, max, p50, p90, p99, quantile_rule, histogram: {edges, counts}}
    bytes_per_token: {overall, records_without_tokens, histogram: {edges, counts}}
    tokens_per_word
    raw_byte_tokens: {count, share}
    vocabulary: {used_ids, utilisation (= used_ids / vocab_size)}
    token_frequency: {counts: [count of id 0, id 1, ...] (dense, length vocab_size),
                      top: [{id, count, token}] (most frequent first, `token` a repr of its bytes)}
    shards: {count, names}
    shard_errors: [{source, rows_read, reason, detail}]   files that could not be read (completely):
                  the first rows_read rows of source were read, the rest is lost; sorted
    timing: {elapsed_seconds, created_at, ...}   optional; the only part that differs between runs
    + free keys added by the writer (input globs, output path, ...)

Histogram bin i counts values v with edges[i] <= v < edges[i+1]; the last bin is open-ended.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from bpe_ops.stats import _ratio, bin_counts, nearest_rank, token_label

STATS_KIND = "tokenbeam.stats"
STATS_SCHEMA_VERSION = 1


def _tokens_per_record_edges() -> list[int]:
    # Two bins per octave (v, 1.5v) from 2 up to 3*2**23 tokens: exact for tiny records (0, 1, 2, 3
    # tokens each have their own bin), ~40% wide for long ones, so a 5-token record and a
    # 100k-token document are both resolved while a few hundred records still fill the bins well
    # enough for a stable population stability index.
    edges = [0, 1]
    v = 2
    while v <= 2 ** 23:
        edges += [v, v * 3 // 2]
        v *= 2
    return edges


TOKENS_PER_RECORD_EDGES: list[int] = _tokens_per_record_edges()

# Bytes per token of a record, in quarters of a byte up to 8 bytes/token (byte-level BPE on prose
# sits between 2 and 6), then coarser up to 32. Bins are assigned with integer arithmetic on
# quarters (floor(4 * n_bytes / n_tokens)), so the result is exact and identical on every machine.
BYTES_PER_TOKEN_QUARTER_EDGES: list[int] = list(range(0, 33)) + [36, 40, 48, 64, 96, 128]
BYTES_PER_TOKEN_EDGES: list[float] = [q / 4 for q in BYTES_PER_TOKEN_QUARTER_EDGES]

QUANTILE_RULE = "nearest-rank"   # pXX = smallest n with at least ceil(XX% of records) records <= n
QUANTILES = (50, 90, 99)
TOP_TOKENS = 1000                # decoded most frequent tokens kept for drift reports

_INT = (int,)
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))

# (dotted path, accepted types). `bool` is rejected wherever a number is expected.
REQUIRED_KEYS: list[tuple[str, tuple]] = [
    ("kind", (str,)),
    ("schema_version", _INT),
    ("tokenizer_sha256", (str,)),
    ("vocab_size", _INT),
    ("records", _INT),
    ("records_read", _INT),
    ("tokens", _INT),
    ("bytes", _INT),
    ("chars", _INT),
    ("words", _INT),
    ("repaired_records", _INT),
    ("rejected", (dict,)),
    ("rejected.total", _INT),
    ("rejected.by_reason", (dict,)),
    ("tokens_per_record", (dict,)),
    ("tokens_per_record.mean", _OPT_NUM),
    ("tokens_per_record.min", _OPT_INT),
    ("tokens_per_record.max", _OPT_INT),
    ("tokens_per_record.p50", _OPT_INT),
    ("tokens_per_record.p90", _OPT_INT),
    ("tokens_per_record.p99", _OPT_INT),
    ("tokens_per_record.histogram", (dict,)),
    ("tokens_per_record.histogram.edges", (list,)),
    ("tokens_per_record.histogram.counts", (list,)),
    ("bytes_per_token", (dict,)),
    ("bytes_per_token.overall", _OPT_NUM),
    ("bytes_per_token.records_without_tokens", _INT),
    ("bytes_per_token.histogram", (dict,)),
    ("bytes_per_token.histogram.edges", (list,)),
    ("bytes_per_token.histogram.counts", (list,)),
    ("tokens_per_word", _OPT_NUM),
    ("raw_byte_tokens", (dict,)),
    ("raw_byte_tokens.count", _INT),
    ("raw_byte_tokens.share", _OPT_NUM),
    ("vocabulary", (dict,)),
    ("vocabulary.used_ids", _INT),
    ("vocabulary.utilisation", _NUM),
    ("token_frequency", (dict,)),
    ("token_frequency.counts", (list,)),
    ("token_frequency.top", (list,)),
    ("shards", (dict,)),
    ("shards.count", _INT),
    ("shards.names", (list,)),
]


def _lookup(d: dict, path: str):
    node = d
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"missing key {path!r}")
        node = node[part]
    return node


def _type_name(types: tuple) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_counts(path: str, counts: list, length: int) -> None:
    if len(counts) != length:
        raise ValueError(f"{path} has {len(counts)} entries, expected {length}")
    if counts and (set(map(type, counts)) != {int} or min(counts) < 0):
        raise ValueError(f"{path} must hold non-negative integers")


def validate_stats(d) -> None:
    """Raise ValueError with one line naming the first problem: wrong kind or version, a missing
    key, a wrong type, or figures that contradict each other (a truncated or hand-edited file)."""
    if not isinstance(d, dict):
        raise ValueError("not a stats.json object")
    if d.get("kind") != STATS_KIND:
        raise ValueError(f"not a tokenbeam stats.json (kind is {d.get('kind')!r}, expected {STATS_KIND!r})")
    version = d.get("schema_version")
    if version != STATS_SCHEMA_VERSION:
        raise ValueError(f"stats.json schema_version {version!r} is not supported "
                         f"(this tokenbeam reads version {STATS_SCHEMA_VERSION})")
    for path, types in REQUIRED_KEYS:
        value = _lookup(d, path)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"key {path!r} must be {_type_name(types)}, got {type(value).__name__}")

    tpr, bpt = d["tokens_per_record"]["histogram"], d["bytes_per_token"]["histogram"]
    if tpr["edges"] != TOKENS_PER_RECORD_EDGES:
        raise ValueError("tokens_per_record.histogram.edges differ from this schema version's bins")
    if bpt["edges"] != BYTES_PER_TOKEN_EDGES:
        raise ValueError("bytes_per_token.histogram.edges differ from this schema version's bins")
    _check_counts("tokens_per_record.histogram.counts", tpr["counts"], len(TOKENS_PER_RECORD_EDGES))
    _check_counts("bytes_per_token.histogram.counts", bpt["counts"], len(BYTES_PER_TOKEN_EDGES))
    vocab_size = d["vocab_size"]
    freq = d["token_frequency"]["counts"]
    _check_counts("token_frequency.counts", freq, vocab_size)

    if sum(tpr["counts"]) != d["records"]:
        raise ValueError("tokens_per_record.histogram.counts do not add up to records")
    if sum(bpt["counts"]) + d["bytes_per_token"]["records_without_tokens"] != d["records"]:
        raise ValueError("bytes_per_token.histogram.counts do not add up to records")
    if sum(freq) != d["tokens"]:
        raise ValueError("token_frequency.counts do not add up to tokens")
    if d["records"] + d["rejected"]["total"] != d["records_read"]:
        raise ValueError("records + rejected.total != records_read")
    # Optional: files written before shard errors were recorded here lack the key.
    errors = d.get("shard_errors", [])
    if not isinstance(errors, list) or not all(
            isinstance(e, dict) and isinstance(e.get("rows_read"), int) and not isinstance(e["rows_read"], bool)
            and all(isinstance(e.get(k), str) for k in ("source", "reason", "detail")) for e in errors):
        raise ValueError("key 'shard_errors' must be a list of {source, rows_read, reason, detail} objects")


def load_stats(path) -> dict:
    """Read and validate a stats.json. OSError if unreadable, ValueError (one line, naming the file)
    if it is not valid JSON or not a valid stats.json of this schema version."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    try:
        validate_stats(d)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return d


def _is_scalar(v) -> bool:
    return not isinstance(v, (dict, list))


def _dump(v, indent: str) -> str:
    # Containers of scalars stay on one line (a 50k-entry frequency list is one line, not 50k),
    # containers of containers are expanded; keys are sorted so equal stats give equal bytes.
    if _is_scalar(v) or all(_is_scalar(x) for x in (v.values() if isinstance(v, dict) else v)):
        return json.dumps(v, sort_keys=True, allow_nan=False)
    inner = indent + "  "
    if isinstance(v, dict):
        items = [f"{inner}{json.dumps(k)}: {_dump(v[k], inner)}" for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    items = [inner + _dump(x, inner) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + indent + "]"


def dump_stats(d: dict) -> str:
    """stats.json text: sorted keys, indented, numeric lists on one line, trailing newline.

    Byte-identical for equal summaries; only the `timing` object differs between runs.
    """
    return _dump(d, "") + "\n"


@dataclass(frozen=True)
class TokenizerFacts:
    """What `stats_json` needs of a tokenizer, without the tokenizer: its id range, sha256 and token
    bytes. A process that has the tokenizer loaded (the tokenize launcher) hands this to the Beam
    step that writes stats.json, so that step does not load the tokenizer again (0.4-1.4 s at 32k
    ids; this pickles in milliseconds)."""
    vocab_size: int
    sha256: str
    vocab: Mapping[int, bytes]

    @classmethod
    def of(cls, tokenizer) -> "TokenizerFacts":
        return cls(tokenizer.vocab_size, tokenizer.sha256, dict(tokenizer.vocab))


def stats_json(summary, tokenizer, extra: Mapping | None = None) -> dict:
    """The stats.json object of a `bpe_ops.stats.Summary`, for a tokenizer (or `TokenizerFacts`)
    with `vocab: dict[int, bytes]`, `vocab_size` and `sha256`. `extra` adds top-level keys (input
    globs, a `timing` object, ...); it may not replace a computed figure."""
    if tokenizer.vocab_size != summary.vocab_size:
        raise ValueError(f"summary counts {summary.vocab_size} ids, tokenizer has {tokenizer.vocab_size}")
    id_total = sum(summary.id_counts)
    if id_total != summary.tokens:
        raise ValueError(f"token id counts add up to {id_total}, records to {summary.tokens} tokens")

    tpr = summary.tokens_per_record
    quantiles = {f"p{p}": nearest_rank(tpr, p) for p in QUANTILES}
    used = sum(1 for c in summary.id_counts if c)
    raw_bytes = sum(summary.id_counts[i] for i, b in tokenizer.vocab.items()
                    if len(b) == 1 and i < summary.vocab_size)
    ranked = sorted((i for i, c in enumerate(summary.id_counts) if c),
                    key=lambda i: (-summary.id_counts[i], i))[:TOP_TOKENS]
    rejected_total = sum(summary.rejected.values())
    out = {
        "kind": STATS_KIND,
        "schema_version": STATS_SCHEMA_VERSION,
        "tokenizer_sha256": tokenizer.sha256,
        "vocab_size": summary.vocab_size,
        "records": summary.records,
        "records_read": summary.records + rejected_total,
        "tokens": summary.tokens,
        "bytes": summary.bytes,
        "chars": summary.chars,
        "words": summary.words,
        "repaired_records": summary.repaired,
        "rejected": {"total": rejected_total, "by_reason": summary.rejected_by_reason()},
        "tokens_per_record": {
            "mean": _ratio(summary.tokens, summary.records),
            "min": min(tpr) if tpr else None,
            "max": max(tpr) if tpr else None,
            **quantiles,
            "quantile_rule": QUANTILE_RULE,
            "histogram": {"edges": TOKENS_PER_RECORD_EDGES,
                          "counts": bin_counts(tpr, TOKENS_PER_RECORD_EDGES)},
        },
        "bytes_per_token": {
            "overall": _ratio(summary.bytes, summary.tokens),
            "records_without_tokens": tpr.get(0, 0),
            "histogram": {"edges": BYTES_PER_TOKEN_EDGES,
                          "counts": bin_counts(summary.quarter_bytes_per_token,
                                               BYTES_PER_TOKEN_QUARTER_EDGES)},
        },
        "tokens_per_word": _ratio(summary.tokens, summary.words),
        "raw_byte_tokens": {"count": raw_bytes, "share": _ratio(raw_bytes, summary.tokens)},
        "vocabulary": {"used_ids": used, "utilisation": used / summary.vocab_size},
        "token_frequency": {
            "counts": list(summary.id_counts),
            "top": [{"id": i, "count": summary.id_counts[i],
                     "token": token_label(tokenizer.vocab[i])} for i in ranked],
        },
        "shards": {"count": len(summary.shards), "names": sorted(summary.shards)},
        "shard_errors": [dict(e) for e in summary.shard_errors],
    }
    for key, value in (extra or {}).items():
        if key in out:
            raise ValueError(f"extra key {key!r} would replace a computed stats.json figure")
        out[key] = value
    return out
