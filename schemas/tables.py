"""Parquet layouts: the counts table (train) and the token table (tokenize).

Every Parquet file tokenbeam writes is described here and nowhere else; pipelines build their Arrow
tables with these schemas and readers validate against them.
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping

import pyarrow as pa

from schemas.accounts import ACCOUNT_KEY, UNKNOWN_REASON, Account

COUNTS_SCHEMA_VERSION = 1
# 2: kept fields are typed columns (version 1 stored every kept field as JSON text); both are read.
TOKENS_SCHEMA_VERSION = 2
READABLE_TOKENS_SCHEMA_VERSIONS = ("1", "2")

# counts/*.parquet: one row per distinct pre-token (UTF-8 bytes), sorted by pretoken within a file.
COUNTS_SCHEMA = pa.schema(
    [pa.field("pretoken", pa.binary(), nullable=False), pa.field("count", pa.int64(), nullable=False)],
    metadata={b"tokenbeam.schema": b"counts", b"tokenbeam.schema_version": str(COUNTS_SCHEMA_VERSION).encode()},
)
# counts/superword/*.parquet: SuperBPE's phase-two units (train --superword-transition), same schema.
SUPERWORD_DIR = "superword"

# Key-value metadata of a token Parquet file: the tokenizer it was made with (schema metadata) and,
# in the footer written last, the shard's accounting (records read, rows, rejected by reason, ...).
TOKENIZER_SHA256_KEY = "tokenbeam.tokenizer_sha256"
VOCAB_SIZE_KEY = "tokenbeam.vocab_size"
SHARD_KEY = "tokenbeam.shard"

# The largest vocabulary whose ids fit list<uint16>.
UINT16_MAX_VOCAB = 65_536
STAT_COLUMNS = ("n_tokens", "n_bytes", "n_chars", "n_words")
# With --timestamp-field: each record's event time (UTC; null when the field is missing or unusable),
# from which a rerun rebuilds the windows of a shard it does not redo.
EVENT_TIME_COLUMN = "event_time"
EVENT_TIME_TYPE = pa.timestamp("us", tz="UTC")
# With --group-field: each record's group (the field's value as text; "(none)" without one).
GROUP_COLUMN = "group"


# --keep-field columns. Each kept field has one type for the whole dataset (every shard's file has the
# same schema): the one given as `--keep-field NAME:TYPE`, else the one inferred from every value of
# the field in every input record (`kept_type`). "json" is a string column of each value's compact
# JSON text, for nested values (lists, objects) and fields whose values mix kinds.
KEPT_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
              "json": pa.string()}
KEPT_TYPE_KEY = b"tokenbeam.kept_type"      # field metadata of a kept column: its KEPT_TYPES name
_INT64 = (-2**63, 2**63 - 1)


def value_kind(value) -> str:
    """What a kept value is, for `kept_type`: "null", "bool", "int64", "float64", "string", or "json"
    (a list, an object, an integer beyond int64, anything else)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if _INT64[0] <= value <= _INT64[1] else "json"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "json"


def kept_type(kinds: Iterable[str]) -> str:
    """The column type of a field whose values are of these kinds (`value_kind`), by a fixed rule
    that any order of shards and records gives alike: nulls fit every type; one kind is its own
    type; integers and floats together widen to float64; any other mix is json; a field with no
    value at all (missing or null everywhere) is a string column of nulls."""
    kinds = set(kinds) - {"null"}
    if kinds == {"int64", "float64"}:
        return "float64"
    if len(kinds) == 1:
        return kinds.pop()
    return "json" if kinds else "string"


def fits(value, type_name: str) -> bool:
    """Whether a value can be stored in a kept column of this type (null fits every type; an
    integer fits float64)."""
    kind = value_kind(value)
    return kind == "null" or type_name == "json" or kind == type_name or (type_name, kind) == ("float64", "int64")


def kept_value(value, type_name: str):
    """A value as its kept column of this type stores it (`fits` must hold): json -> its compact JSON
    text (keys sorted; lone surrogates, valid in JSON but not in UTF-8, stay escaped); float64 ->
    a float; the rest as they are."""
    if value is None:
        return None
    if type_name == "json":
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return float(value) if type_name == "float64" else value


def kept_column_is_json(field: pa.Field) -> bool:
    """Whether a kept column of a token Parquet file holds JSON text: a json column, and every kept
    column of a version 1 file (which has no type in its field metadata)."""
    return (field.metadata or {}).get(KEPT_TYPE_KEY, b"json") == b"json"


def token_id_type(vocab_size: int) -> pa.DataType:
    """uint16 when every id fits (vocab_size <= 65,536), else uint32."""
    return pa.uint16() if vocab_size <= UINT16_MAX_VOCAB else pa.uint32()


def tokens_schema(vocab_size: int, keep_fields: Mapping[str, str] = {}, metadata: dict[str, str] | None = None,
                  event_time: bool = False, group: bool = False) -> pa.Schema:
    """Schema of a token Parquet file: id, token_ids, the per-record statistics, the event time (with
    `event_time`), pass-through fields (`--keep-field`) given as {name: KEPT_TYPES name}, each
    column's type name in its field metadata.
    """
    fields = [
        pa.field("id", pa.string(), nullable=False),
        pa.field("token_ids", pa.list_(token_id_type(vocab_size)), nullable=False),
    ] + [pa.field(name, pa.int32(), nullable=False) for name in STAT_COLUMNS]
    if event_time:
        fields.append(pa.field(EVENT_TIME_COLUMN, EVENT_TIME_TYPE, nullable=True))
    if group:
        fields.append(pa.field(GROUP_COLUMN, pa.string(), nullable=False))
    reserved = {f.name for f in fields}
    for name in keep_fields:
        if name in reserved:
            raise ValueError(f"--keep-field {name!r} clashes with a column tokenbeam writes; rename it")
        fields.append(pa.field(name, KEPT_TYPES[keep_fields[name]], nullable=True,
                               metadata={KEPT_TYPE_KEY: keep_fields[name].encode()}))
    meta = {"tokenbeam.schema": "tokens", "tokenbeam.schema_version": str(TOKENS_SCHEMA_VERSION)}
    meta.update(metadata or {})
    return pa.schema(fields, metadata={k.encode(): v.encode() for k, v in meta.items()})


def file_metadata(schema_metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    """Decode a Parquet file's key-value metadata to str -> str. A byte that is not UTF-8 becomes
    U+FFFD: no value tokenbeam writes has one, and the checks of the values refuse what it spoils."""
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (schema_metadata or {}).items()}


def repeated_column(names: list[str]) -> str | None:
    """A column name a Parquet schema holds twice (tokenbeam never writes one; readers look columns
    up by name), or None."""
    seen: set[str] = set()
    return next((name for name in names if name in seen or seen.add(name)), None)


def vocab_size_of(meta: dict[str, str]) -> int:
    """The `tokenbeam.vocab_size` of a token Parquet's schema metadata; ValueError (one line) unless it
    is a whole number of ids that fits the token id types (1 to 2**32)."""
    text = meta.get(VOCAB_SIZE_KEY, "")
    if not (text.isascii() and text.isdigit() and 0 < int(text) <= 2**32):
        raise ValueError(f"metadata {VOCAB_SIZE_KEY} is {text[:40]!r}, not a number of token ids")
    return int(text)


# The shard record's fields that readers use, and their JSON types (each may be absent).
_SHARD_FIELDS = {"fingerprint": dict, "rejected_by_reason": dict, "repaired": int, "shard_errors": list,
                 "relpath": str}
_SHARD_ERROR_FIELDS = {"source": str, "rows_read": int, "reason": str, "detail": str}


def shard_record(footer: dict[str, str]) -> dict:
    """The shard record `tokenbeam tokenize` leaves in a token Parquet's footer (`{}` without one),
    decoded and checked; ValueError (one line) naming what is malformed. The readers may then take
    its fields as they are: `fingerprint` (with `eos_token`, `dropout`, `source_options.extra_fields`),
    `rejected_by_reason` {reason: count}, `repaired`, `shard_errors`, `relpath`."""
    text = footer.get(SHARD_KEY)
    if text is None:
        return {}
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(f"footer {SHARD_KEY} is not JSON (a truncated or edited file?)") from None
    if not isinstance(record, dict):
        raise ValueError(f"footer {SHARD_KEY} is not a JSON object")
    problem = _shard_problem(record)
    if problem:
        raise ValueError(f"footer {SHARD_KEY}: {problem}")
    return record


def _is(value, kind) -> bool:
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _count(value) -> bool:
    return _is(value, int) and value >= 0


def _shard_problem(record: dict) -> str | None:
    for field, kind in _SHARD_FIELDS.items():
        if field in record and not _is(record[field], kind):
            return f"{field} is not a JSON {kind.__name__}"
    if not all(isinstance(k, str) and _count(n) for k, n in record.get("rejected_by_reason", {}).items()):
        return "rejected_by_reason must map reasons to counts"
    if not _count(record.get("repaired", 0)):
        return "repaired must be a count"
    for error in record.get("shard_errors", []):
        if not (isinstance(error, dict) and all(_is(error.get(k), t) for k, t in _SHARD_ERROR_FIELDS.items())
                and error["rows_read"] >= 0):
            return "shard_errors must hold {source, rows_read, reason, detail} objects"
    fingerprint = record.get("fingerprint", {})
    if fingerprint.get("eos_token") is not None and not isinstance(fingerprint["eos_token"], str):
        return "fingerprint.eos_token must be a string or null"
    dropout = fingerprint.get("dropout")
    if dropout is not None and not (isinstance(dropout, dict) and set(dropout) == {"p", "seed"}
                                    and _is(dropout["p"], (int, float)) and 0 < dropout["p"] <= 1
                                    and _count(dropout["seed"])):
        return "fingerprint.dropout must be null or {p: a probability in (0, 1], seed: a count}"
    options = fingerprint.get("source_options", {})
    if not isinstance(options, dict) or not (isinstance(options.get("extra_fields", []), list)
                                             and all(isinstance(f, str) for f in options.get("extra_fields", []))):
        return "fingerprint.source_options.extra_fields must be a list of field names"
    return None


# --- tokenize's _SUCCESS ---------------------------------------------------------------------------
#
# Version 2: {version, tokenizer_sha256, stats: "stats.json", account (schemas.accounts),
# shards: [{relpath, output | parts, input, shard_errors, account}], repeated_ids?, untimed_records?}.
# Version 1 had, in place of the accounts, records_read / rows / rejected per shard and in total and
# shards_failed; `upgrade_success` reads it as version 2. (The shard records of the footers keep their
# own layout: `shard_account` reads one.)
SUCCESS_VERSION = 2


def shard_account(record: Mapping, shards: int = 1) -> Account:
    """The Account of one shard record of a token Parquet's footer (`shards` 0 for a split file's
    later parts: the file is one shard)."""
    return Account.of_shard(record["records_read"], record["rows"], record.get("rejected_by_reason", {}),
                            record.get("repaired", 0), record.get("shard_errors", []), shards=shards)


def upgrade_success(d):
    """A tokenize `_SUCCESS` of version 1 as version 2 (each count into the accounts); any other
    object unchanged. Version 1 listed no reasons for the rejected records: they are kept as
    `unknown` (and nothing was listed as repaired)."""
    if not isinstance(d, dict) or d.get("version") != 1 or "records_read" not in d:
        return d
    shards = []
    for entry in d.get("shards", []):
        rejected = {UNKNOWN_REASON: entry["rejected"]} if entry["rejected"] else {}
        account = Account.of_shard(entry["records_read"], entry["rows"], rejected, 0, entry.get("shard_errors", []))
        shards.append(dict({k: v for k, v in entry.items() if k not in ("records_read", "rows", "rejected")},
                           account=account.to_json()))
    total = Account.total(Account.from_json(e["account"], e.get("shard_errors", [])) for e in shards)
    out = {k: v for k, v in d.items() if k not in ("records_read", "rows", "rejected", "shards_failed")}
    out.update(version=SUCCESS_VERSION, shards=shards, **{ACCOUNT_KEY: total.to_json()})
    return out
