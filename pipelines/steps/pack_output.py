"""What `tokenbeam pack` writes and what shapes it: `PackOptions` (decided once by the launcher), each
output file's rows in the formats asked for, and the run's report (pack.json, bin.json, _SUCCESS).

A split's stream of ids is cut into files of `tokens_per_file` ids (the last may be shorter); each
file is written in each format: Parquet rows of `seq_len` ids with their document starts
(`write_parquet`), a Megatron `.bin` + `.idx` with one sequence per document (`write_megatron`), or
the flat ids (`write_flat`), each under a temporary name, then renamed (`open_atomic`). The output
folder: an earlier complete run of the same fingerprint is kept (`done_before`); otherwise what an
earlier run wrote is removed first (`clear_outputs`).
"""
from __future__ import annotations

import dataclasses
import json
import posixpath
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.core.errors import UserError
from pipelines.core.files import (filesystem, join, names_in, open_atomic, read_json, remove, remove_tree,
                             write_text_atomic, writing)
from pipelines.datasets.pack_inputs import TokenFile
from schemas import pack as layout
from schemas import tables

ROW_GROUP_ROWS = 1_024           # packed rows per Parquet row group: readers stream them
TRAIN, VALIDATION = layout.SPLITS


@dataclasses.dataclass(frozen=True)
class PackOptions:
    """Everything the workers need, decided by the launcher (ids, not token names)."""
    seq_len: int
    seed: int
    shuffle: bool
    eos_id: int | None               # the separator after each document, if pack adds one
    bos_id: int | None
    pad_id: int | None
    tail: str
    formats: tuple[str, ...]
    tokens_per_file: int             # a multiple of seq_len
    vocab_size: int
    tokenizer_sha256: str
    buckets: int                     # per split; shapes only the grouping, never the output

    @property
    def dtype(self) -> np.dtype:
        return layout.id_dtype(self.vocab_size)

    def separators(self) -> int:
        return (self.eos_id is not None) + (self.bos_id is not None)


def stream_files(end: int, options: PackOptions) -> int:
    """How many files a split's stream of `end` ids fills (each `tokens_per_file` ids but the last)."""
    return -(-end // options.tokens_per_file)


def write_parquet(url: str, ids: np.ndarray, starts: np.ndarray, first_row: int, split: str, file_index: int,
                  options: PackOptions) -> None:
    """One file's Parquet rows: `seq_len` ids each (the split's last row short, or padded with
    `--tail pad`), each row's document starts within it, its id count and its row number in the split
    (from `first_row`); the file's place in the split in the footer. Example, seq_len 4, ids
    [5 6 7 0 8 9 0] with documents at 0 and 4, `--tail pad`, pad 0: rows `[5 6 7 0]` (doc_starts [0],
    n_tokens 4) and `[8 9 0 0]` (doc_starts [0], n_tokens 3)."""
    o = options
    n_rows = -(-len(ids) // o.seq_len)
    short = n_rows * o.seq_len - len(ids)       # only the split's last row can be short
    n_tokens = np.full(n_rows, o.seq_len, np.int32)
    if short:
        n_tokens[-1] = o.seq_len - short
        if o.tail == "pad":
            ids = np.concatenate([ids, np.full(short, o.pad_id, o.dtype)])
    row_offsets = np.minimum(np.arange(n_rows + 1, dtype=np.int64) * o.seq_len, len(ids)).astype(np.int32)
    start_rows = starts // o.seq_len
    start_offsets = np.searchsorted(start_rows, np.arange(n_rows + 1), side="left").astype(np.int32)
    schema = layout.packed_schema(o.vocab_size, {tables.TOKENIZER_SHA256_KEY: o.tokenizer_sha256,
                                                 tables.VOCAB_SIZE_KEY: str(o.vocab_size),
                                                 "tokenbeam.seq_len": str(o.seq_len)})
    id_type = schema.field("input_ids").type
    table = pa.Table.from_arrays([
        pa.ListArray.from_arrays(pa.array(row_offsets), pa.array(ids)).cast(id_type),
        pa.ListArray.from_arrays(pa.array(start_offsets), pa.array((starts % o.seq_len).astype(np.int32))),
        pa.array(n_tokens), pa.array(np.arange(first_row, first_row + n_rows, dtype=np.int64))], schema=schema)
    with open_atomic(url) as f, pq.ParquetWriter(f, schema, compression="zstd", use_dictionary=False,
                                                 write_statistics=False) as writer:
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        writer.add_key_value_metadata({layout.PACK_FILE_KEY: json.dumps(
            {"split": split, "index": file_index, "first_row": int(first_row), "rows": n_rows}, sort_keys=True)})


def write_megatron(url: str, ids: np.ndarray, starts: np.ndarray, vocab_size: int) -> None:
    """One Megatron sequence per document (a document cut by a file boundary: one piece in each)."""
    dtype = layout.megatron_dtype(vocab_size)
    bounds = np.unique(np.concatenate([[0], starts, [len(ids)]]))
    with open_atomic(url + ".bin") as f:
        f.write(ids.astype(dtype, copy=False).tobytes())
    with open_atomic(url + ".idx") as f:
        f.write(layout.megatron_index(np.diff(bounds), dtype))


def write_flat(url: str, ids: np.ndarray) -> None:
    """The ids alone, back to back, in the ids' dtype: `url` + ".bin"."""
    with open_atomic(url + ".bin") as f:
        f.write(ids.tobytes())


def split_figures(split: str, stream: dict, docs: dict, files: list[dict], options: PackOptions) -> dict:
    """The pack.json figures of one split."""
    length, end = stream["length"], stream["end"]
    rows = -(-end // options.seq_len)
    padding = rows * options.seq_len - end if options.tail == "pad" else 0
    by_format = {fmt: [name for f in sorted(files, key=lambda f: f["index"]) for name in f["files"][fmt]]
                 for fmt in options.formats}
    return {"documents": docs.get("documents", 0), "tokens": end, "separators": docs.get("separators", 0),
            "rows": rows, "documents_split": docs.get("documents_split", 0), "padding_tokens": padding,
            "padding_share": round(padding / (rows * options.seq_len), 6) if rows else 0.0,
            "tokens_dropped": length - end, "files": by_format}


def write_pack_json(files: list[dict], stream: dict, figures: dict, options: PackOptions, output: str,
                    header: dict, started_at: float) -> dict:
    """pack.json (and each split's bin.json), then _SUCCESS, when every file is written."""
    splits = {}
    for split in layout.SPLITS:
        mine = [f for f in files if f["split"] == split]
        if split == VALIDATION and not stream[split]["length"] and not figures.get(split):
            continue
        splits[split] = split_figures(split, stream[split], figures.get(split, {}), mine, options)
        expected = stream_files(stream[split]["end"], options)
        if len(mine) != expected:
            raise RuntimeError(f"{split}: {len(mine)} files written, {expected} expected")
        if "bin" in options.formats and mine:
            entries = [{"name": posixpath.basename(f["files"]["bin"][0]), "tokens": f["tokens"]}
                       for f in sorted(mine, key=lambda f: f["index"])]
            url = join(output, layout.format_folder(split, "bin"), layout.BIN_JSON)
            # The EOS in the stream: pack's own, or the one tokenize already ended each record with.
            eos_id = options.eos_id if options.eos_id is not None else header["options"].get("inputs_end_with")
            meta = layout.bin_json(options.dtype, entries, options.tokenizer_sha256, options.vocab_size,
                                   eos_id, options.bos_id)
            with writing(url):
                write_text_atomic(url, json.dumps(meta, indent=1, sort_keys=True) + "\n")
            splits[split]["files"]["bin"].append(f"{layout.format_folder(split, 'bin')}/{layout.BIN_JSON}")
    manifest = dict(header, splits=splits, timing={"started_at": started_at,
                                                   "elapsed_seconds": round(time.time() - started_at, 3)})
    if splits.get(TRAIN, {}).get("rows"):
        for name, text in ((layout.PACK_JSON, json.dumps(manifest, indent=1, sort_keys=True) + "\n"),
                           (layout.SUCCESS, json.dumps({"pack": layout.PACK_JSON, "fingerprint": header["fingerprint"]},
                                                       sort_keys=True) + "\n")):
            url = join(output, name)
            with writing(url):
                write_text_atomic(url, text)
    else:
        url = join(output, layout.PACK_JSON)
        with writing(url):
            write_text_atomic(url, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


# --- the output folder ----------------------------------------------------------------------------

def done_before(output: str, fingerprint: str) -> dict | None:
    """pack.json of an earlier complete run with this fingerprint whose files are all there, or None."""
    fs, root = filesystem(output)
    try:
        if not fs.isfile(posixpath.join(root, layout.SUCCESS)):
            return None
        manifest = layout.upgrade_pack_json(read_json(join(output, layout.PACK_JSON)))
    except (OSError, ValueError):
        return None
    if manifest.get("fingerprint") != fingerprint:
        return None
    names = [n for s in manifest.get("splits", {}).values() for group in s["files"].values() for n in group]
    return manifest if all(fs.isfile(posixpath.join(root, n)) for n in names) else None


def clear_outputs(output: str, inputs: list[TokenFile]) -> None:
    """Remove an earlier run's outputs (`_SUCCESS` first, so a failed run never leaves one vouching for
    it); refuse a folder holding anything pack does not write (say, the token Parquet itself)."""
    ours = {layout.PACK_JSON, layout.SUCCESS, *layout.SPLITS}
    foreign = [name for name in names_in(output) if name not in ours and not name.startswith(".")]
    if foreign:
        raise UserError(f"--output {output} holds files tokenbeam pack did not write ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); give an empty folder or an earlier pack output")
    remove(join(output, layout.SUCCESS))
    remove(join(output, layout.PACK_JSON))
    for split in layout.SPLITS:
        remove_tree(join(output, split))
