"""Parquet layouts: the counts table (train) and the token table (tokenize).

Every Parquet file tokenbeam writes is described here and nowhere else; pipelines build their Arrow
tables with these schemas and readers validate against them.
"""
from __future__ import annotations

import pyarrow as pa

COUNTS_SCHEMA_VERSION = 1
TOKENS_SCHEMA_VERSION = 1

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


def token_id_type(vocab_size: int) -> pa.DataType:
    """uint16 when every id fits (vocab_size <= 65,536), else uint32."""
    return pa.uint16() if vocab_size <= UINT16_MAX_VOCAB else pa.uint32()


def tokens_schema(vocab_size: int, keep_fields: tuple[str, ...] = (), metadata: dict[str, str] | None = None,
                  event_time: bool = False, group: bool = False) -> pa.Schema:
    """Schema of a token Parquet file: id, token_ids, the per-record statistics, the event time (with
    `event_time`), pass-through fields.

    Pass-through (`--keep-field`) columns are stored as JSON-encoded strings, so a field whose type
    varies across records (a number here, a list there) never breaks a file.
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
        fields.append(pa.field(name, pa.string(), nullable=True))
    meta = {"tokenbeam.schema": "tokens", "tokenbeam.schema_version": str(TOKENS_SCHEMA_VERSION)}
    meta.update(metadata or {})
    return pa.schema(fields, metadata={k.encode(): v.encode() for k, v in meta.items()})


def file_metadata(schema_metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    """Decode a Parquet file's key-value metadata to str -> str."""
    return {k.decode(): v.decode() for k, v in (schema_metadata or {}).items()}
