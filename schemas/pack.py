"""Layouts `tokenbeam pack` writes: the packed Parquet rows, Megatron's `.bin` + `.idx`, the flat
`.bin` with its `bin.json`, `pack.json`, and the folder they live in. The single source of truth:
the pipeline writes through these functions and readers (tests, users) read against them.

    OUT/pack.json                                   what was packed, how, and the figures (last but one)
    OUT/_SUCCESS                                    written last, when every file below is complete
    OUT/<split>/parquet/part-00000-of-00003.parquet rows of exactly seq_len ids (PACKED_SCHEMA)
    OUT/<split>/megatron/part-00000-of-00003.bin    the same ids, as Megatron-LM's indexed dataset
    OUT/<split>/megatron/part-00000-of-00003.idx
    OUT/<split>/bin/part-00000-of-00003.bin         the same ids as one flat little-endian stream
    OUT/<split>/bin/bin.json                        its dtype, token count, files, tokenizer sha256
    OUT/.pack-spill/.*.tmp-*                        during a run only: the shuffles' spill files

Every format of a split holds the same stream of ids: the documents in pack order, each as
[BOS] ids [EOS], cut into files at the same row boundaries. Parquet rows are exactly `seq_len`
long except, with `--tail pad`, the last one, padded; `.bin` files never hold padding.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from schemas.accounts import ACCOUNT_KEY, Account
from schemas.tables import UINT16_MAX_VOCAB

PACKED_SCHEMA_VERSION = 1
# 2: the input files and records counted as the "account" (schemas.accounts) in place of version 1's
# inputs.files and inputs.records; `upgrade_pack_json` reads version 1 as version 2.
PACK_JSON_VERSION = 2
# What a run's fingerprint says of the layout: the packed files' and pack.json version 1's. Version 2
# changed only how pack.json keeps its counts (read back through upgrade_pack_json), not what a run
# writes, so an earlier output stays reusable.
FINGERPRINT_LAYOUT = (PACKED_SCHEMA_VERSION, 1)
BIN_JSON_VERSION = 1

SPLITS = ("train", "validation")
FORMATS = ("parquet", "megatron", "bin")
TAILS = ("drop", "pad", "keep")
PACK_JSON = "pack.json"
BIN_JSON = "bin.json"
SUCCESS = "_SUCCESS"
SPILL_FOLDER = ".pack-spill"     # hidden: clear_outputs and the readers of outputs pass it by

# Schema metadata of a packed Parquet file (the footer adds PACK_FILE_KEY: this file's place).
PACKED_SCHEMA_NAME = "packed"
PACK_FILE_KEY = "tokenbeam.pack_file"


def id_dtype(vocab_size: int) -> np.dtype:
    """The ids' numpy type in every pack format: uint16 when every id fits, else uint32 (as the
    token Parquet's `token_ids`). `id_dtype(50257)` -> uint16, `id_dtype(100277)` -> uint32."""
    return np.dtype("<u2") if vocab_size <= UINT16_MAX_VOCAB else np.dtype("<u4")


def packed_schema(vocab_size: int, metadata: dict[str, str] | None = None) -> pa.Schema:
    """Schema of a packed Parquet file, one row per sequence:

    - `input_ids`   list<uint16|uint32>: exactly seq_len ids (the last row of a split may be shorter
                    with `--tail keep`, or end in padding with `--tail pad`)
    - `doc_starts`  list<int32>: the positions in the row where a document begins (its BOS, or its
                    first id); a row that starts inside a document does not list 0
    - `n_tokens`    int32: the real ids of the row; positions from n_tokens on are padding (mask them)
    - `row`         int64: the row's index in its split (0, 1, 2, ... across the files)

    Example: documents [5 6 7] and [8 9], EOS 0, seq_len 4, `--tail pad` with pad 0 give the rows
    `[5 6 7 0] doc_starts [0]` and `[8 9 0 0] doc_starts [0], n_tokens 3`.
    """
    ids = pa.uint16() if id_dtype(vocab_size).itemsize == 2 else pa.uint32()
    fields = [pa.field("input_ids", pa.list_(ids), nullable=False),
              pa.field("doc_starts", pa.list_(pa.int32()), nullable=False),
              pa.field("n_tokens", pa.int32(), nullable=False),
              pa.field("row", pa.int64(), nullable=False)]
    meta = {"tokenbeam.schema": PACKED_SCHEMA_NAME, "tokenbeam.schema_version": str(PACKED_SCHEMA_VERSION)}
    meta.update(metadata or {})
    return pa.schema(fields, metadata={k.encode(): v.encode() for k, v in meta.items()})


def part_name(index: int, count: int, extension: str) -> str:
    """`part_name(0, 3, ".parquet")` -> `part-00000-of-00003.parquet`."""
    return f"part-{index:05d}-of-{count:05d}{extension}"


def format_folder(split: str, fmt: str) -> str:
    """Where a split's files of one format go, relative to the output: `train/megatron`."""
    return f"{split}/{fmt}"


# --- Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py) ---------------------
#
# `.bin`: the ids of every sequence back to back, in the index's dtype.
# `.idx`: the header, `<Q` version 1, `<B` dtype code, `<Q` sequence count, `<Q` document count,
# then the int32 sequence lengths, the int64 byte offsets of the sequences in `.bin`, and the int64
# document indices (sequence numbers where documents begin, from 0, ending with the sequence count).
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
MEGATRON_DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
                        "float32": 7, "uint16": 8}


def megatron_dtype(vocab_size: int) -> np.dtype:
    """Megatron's index knows no uint32: ids above uint16 are written as int32 (its own choice too)."""
    return np.dtype("<u2") if vocab_size <= UINT16_MAX_VOCAB else np.dtype("<i4")


def megatron_index(sequence_lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """The `.idx` bytes for sequences of these lengths, one document per sequence (as Megatron's
    `preprocess_data.py` writes a corpus of whole documents).

    Example: lengths [3, 2] in uint16 -> header, version 1, code 8, 2 sequences, 3 document
    indices, lengths [3 2], pointers [0 6], document indices [0 1 2].
    """
    lengths = np.asarray(sequence_lengths, dtype="<i4")
    pointers = np.zeros(len(lengths), dtype="<i8")
    np.cumsum(lengths[:-1].astype("<i8") * dtype.itemsize, out=pointers[1:])
    documents = np.arange(len(lengths) + 1, dtype="<i8")
    head = MEGATRON_HEADER + struct.pack("<Q", MEGATRON_VERSION) + struct.pack("<B", MEGATRON_DTYPE_CODES[dtype.name])
    head += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(documents))
    return head + lengths.tobytes() + pointers.tobytes() + documents.tobytes()


# --- the flat `.bin` ------------------------------------------------------------------------------

def bin_json(dtype: np.dtype, files: list[dict], tokenizer_sha256: str, vocab_size: int, eos_id: int | None,
             bos_id: int | None) -> dict:
    """`<split>/bin/bin.json`: how to read the flat files (`numpy.memmap(path, dtype, mode="r")`),
    in order; `files` is `[{"name": ..., "tokens": ...}, ...]`."""
    return {"version": BIN_JSON_VERSION, "dtype": dtype.name, "byte_order": "little",
            "tokens": sum(f["tokens"] for f in files), "files": files, "tokenizer_sha256": tokenizer_sha256,
            "vocab_size": vocab_size, "eos_id": eos_id, "bos_id": bos_id}


# --- pack.json ------------------------------------------------------------------------------------

# Per split: `documents` packed, `tokens` (real ids written, separators included), `separators`
# added, `rows`, `documents_split` (documents whose ids lie in more than one row), `padding_tokens`,
# `padding_share` (padding / all positions of the rows), `tokens_dropped` (the tail with `--tail
# drop`), `files` (format -> names, relative to the output).
SPLIT_KEYS = ("documents", "tokens", "separators", "rows", "documents_split", "padding_tokens", "padding_share",
              "tokens_dropped", "files")
PACK_JSON_KEYS = ("version", "tokenizer_sha256", "vocab_size", "id_dtype", "seq_len", "options", "inputs",
                  ACCOUNT_KEY, "inputs_stats_sha256", "fingerprint", "splits", "timing")


def pack_account(files: int, records: int) -> Account:
    """pack.json's account: every token Parquet file read (a shard each; none fails: pack refuses an
    unreadable input at launch) and every record laid in a split's stream as a document (pack rejects
    none; `--tail drop` drops ids, counted as the split's tokens_dropped, not records).

    >>> pack_account(2, 10).to_json()["records"]["written"]
    10
    """
    return Account(shards_read=files, records_read=records, records_written=records)


def upgrade_pack_json(d):
    """A pack.json object of version 1 as version 2 (inputs.files and inputs.records as the account);
    any other object unchanged."""
    if not isinstance(d, dict) or d.get("version") != 1 or ACCOUNT_KEY in d:
        return d
    try:
        inputs = d["inputs"]
        account = pack_account(inputs["files"], inputs["records"])
    except (KeyError, TypeError):
        raise ValueError("pack.json version 1 lacks inputs.files or inputs.records") from None
    return dict(d, version=PACK_JSON_VERSION, inputs={k: v for k, v in inputs.items() if k not in ("files", "records")},
                **{ACCOUNT_KEY: account.to_json()})
