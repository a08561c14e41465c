"""The token_ids column of a token Parquet file as tokenbeam writes it itself: Arrow writes every other
column (and, for token_ids, a placeholder of empty lists that nothing refers to), tokenbeam appends
each row group's token_ids column chunk after Arrow's, and the footer Arrow wrote is changed to point
at those chunks (`point_footer_at`). Arrow's writer spends as long on a list column's levels (two
int16 per id, then encoded) as on compressing its ids; here a page's levels are a handful of runs
per record, and its ids are copied as they are.

A chunk is a run of data pages (version 1, no dictionary), cut at record boundaries once a page holds
PAGE_IDS ids, each compressed with the file's codec. A page's body (`page_body_spec`; compiled,
`bpe_ops._native.list_page`) is what Arrow's reader expects of a required list column of an optional
int32 element: repetition levels (0 starts a record, 1 goes on with it), definition levels (2: an
id, 0: an empty list), each in Parquet's RLE/bit-packed hybrid after its length, then the ids as
PLAIN int32 (uint16 and uint32 are both stored as int32).

    >>> page_body_spec([5, 6, 7, 8], [2, 2, 3, 4], 0, 4).hex()
    '060000000200020106000600000004020200040205000000060000000700000008000000'

Read: levels `0200 0201 0600` (one 0, one 1, three 0s: records [5, 6], [], [7], [8]), definition
levels `0402 0200 0402` (2, 2, 0, 2, 2), then the four ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from schemas.thrift_compact import I32, I64, LIST, STRUCT, Struct

try:
    from bpe_ops._native import list_page as _list_page
except ImportError:                      # no compiler at install: the specification writes the pages
    _list_page = None

PAGE_IDS = 1 << 18        # ids a page holds before it is cut (1 MiB of values: Arrow's data page size)
PAGE_MAX_BYTES = (1 << 31) - 1            # a page's sizes are i32 in its header

# Parquet's enums (parquet.thrift): page type, encodings.
DATA_PAGE, PLAIN, RLE = 0, 0, 3


def _rle_runs(runs: Sequence[tuple[int, int]]) -> bytes:
    """Levels given as (level, how many) runs, written as RLE runs of the hybrid encoding (a level
    fits one byte), neighbouring runs of the same level made one; after the u32 of their length."""
    merged: list[list[int]] = []
    for level, count in runs:
        if count == 0:
            continue
        if merged and merged[-1][0] == level:
            merged[-1][1] += count
        else:
            merged.append([level, count])
    out = bytearray()
    for level, count in merged:
        header = count << 1                # low bit 0: a repeated run
        while header > 0x7F:
            out.append(header & 0x7F | 0x80)
            header >>= 7
        out += bytes([header, level])
    return len(out).to_bytes(4, "little") + bytes(out)


def page_body_spec(ids, ends, first: int, last: int) -> bytes:
    """The body of a data page holding records first..last-1, record i's ids being
    ids[ends[i - 1]:ends[i]] (0 for the first record). The specification of the compiled
    `list_page`: a record of n ids has repetition levels 0 then n - 1 ones and n definition levels
    of 2; an empty record one level 0 of each."""
    begin = int(ends[first - 1]) if first else 0
    counts = np.diff(np.asarray(ends[first:last], dtype=np.int64), prepend=begin).tolist()
    if begin < 0 or any(n < 0 for n in counts) or begin + sum(counts) > len(ids):
        raise ValueError("page_body_spec: ends must rise within the ids held")
    repetition = [run for n in counts for run in ((0, 1), (1, max(n - 1, 0)))]
    definition = [(2, n) if n else (0, 1) for n in counts]
    values = np.asarray(ids[begin:begin + sum(counts)], dtype="<u4").tobytes()
    return _rle_runs(repetition) + _rle_runs(definition) + values


def page_body(ids: np.ndarray, ends: np.ndarray, first: int, last: int) -> bytes:
    """`page_body_spec`, compiled where it can be."""
    if _list_page is None:
        return page_body_spec(ids, ends, first, last)
    return _list_page(ids, ends, first, last)


def page_cuts(ends: np.ndarray) -> list[int]:
    """Where the pages of records ending at `ends` end: a page takes records until it holds
    PAGE_IDS ids (the record that reaches it included), at least one record each.

    >>> page_cuts(np.array([PAGE_IDS - 1, PAGE_IDS + 5, PAGE_IDS + 6]))
    [2, 3]
    >>> page_cuts(np.array([], dtype=np.int64)), page_cuts(np.array([0, 0]))
    ([], [2])
    """
    cuts, at, n = [], 0, len(ends)
    while at < n:
        base = int(ends[at - 1]) if at else 0
        at = min(n, int(np.searchsorted(ends, base + PAGE_IDS, side="left")) + 1)
        cuts.append(at)
    return cuts


@dataclass(frozen=True)
class ChunkWritten:
    """Where a token_ids column chunk went and what its footer entry says of it.

    Args:
        offset: where its first page header starts in the file.
        levels: its levels (ids, plus one for each empty record): the column's num_values.
        uncompressed: its bytes with each page body uncompressed (headers counted).
        compressed: its bytes in the file.
        pages: its data pages.
        rows: its records; `empty` of them have no ids.
        ids: the ids it holds.
    """
    offset: int
    levels: int
    uncompressed: int
    compressed: int
    pages: int
    rows: int
    empty: int
    ids: int


def page_header(levels: int, body_bytes: int, stored_bytes: int) -> bytes:
    """A version 1 data page's header: its levels, its body's size before and after compression."""
    if max(body_bytes, stored_bytes) > PAGE_MAX_BYTES:
        raise OverflowError(f"a token_ids page of {body_bytes:,} bytes: Parquet's pages hold at most {PAGE_MAX_BYTES:,}")
    data_page = Struct([[1, I32, levels], [2, I32, PLAIN], [3, I32, RLE], [4, I32, RLE]])
    return Struct([[1, I32, DATA_PAGE], [2, I32, body_bytes], [3, I32, stored_bytes],
                   [5, STRUCT, data_page]]).to_bytes()


def write_chunk(sink, ids: np.ndarray, counts: np.ndarray, codec) -> ChunkWritten:
    """Write the token_ids column chunk of a row group whose records have `counts` ids each, one
    after the other in `ids` (uint32), to `sink` (a file with `tell` and `write`); `codec` compresses
    a page (a pyarrow Codec, or None for none). The pages are built, and compressed, without the GIL."""
    ids = np.ascontiguousarray(ids, dtype=np.uint32)
    counts = np.asarray(counts, dtype=np.int64)
    ends = np.cumsum(counts)
    offset = sink.tell()
    uncompressed = compressed = first = 0
    cuts = page_cuts(ends)
    for last in cuts:
        body = page_body(ids, ends, first, last)
        stored = body if codec is None else codec.compress(body, asbytes=True)
        levels = int(ends[last - 1] - (ends[first - 1] if first else 0)) + int(np.count_nonzero(counts[first:last] == 0))
        header = page_header(levels, len(body), len(stored))
        sink.write(header)
        sink.write(stored)
        uncompressed += len(header) + len(body)
        compressed += len(header) + len(stored)
        first = last
    empty = int(np.count_nonzero(counts == 0))
    return ChunkWritten(offset, len(ids) + empty, uncompressed, compressed, len(cuts), len(counts), empty, len(ids))


def point_footer_at(footer: bytes, column: int, chunks: Sequence[ChunkWritten]) -> bytes:
    """A file's footer (its FileMetaData, as Arrow wrote it) with leaf column `column` of each row
    group pointing at `chunks` (one per row group, in order) instead of Arrow's placeholder: the
    chunk's offset, sizes, levels, page count and level histograms; the row group's totals moved by
    the difference. Everything else is kept byte for byte."""
    meta, end = Struct.from_bytes(footer)
    if end != len(footer):
        raise ValueError("a Parquet footer with bytes after its FileMetaData")
    _, row_groups = meta.get(4, (STRUCT, []))
    if len(row_groups) != len(chunks):
        raise ValueError(f"{len(row_groups)} row groups in the footer, {len(chunks)} token_ids chunks written")
    for group, chunk in zip(row_groups, chunks):
        if group.get(3) != chunk.rows:
            raise ValueError(f"a row group of {group.get(3)} rows given a token_ids chunk of {chunk.rows}")
        column_meta = group.get(1)[1][column].get(3)
        was_uncompressed, was_compressed = column_meta.get(6), column_meta.get(7)
        column_meta.set(5, I64, chunk.levels)
        column_meta.set(6, I64, chunk.uncompressed)
        column_meta.set(7, I64, chunk.compressed)
        column_meta.set(9, I64, chunk.offset)
        column_meta.remove(11)              # no dictionary page
        stats = column_meta.get(13)
        if stats is not None:               # one kind of page: data pages, PLAIN
            column_meta.set(13, LIST, (STRUCT, [Struct([[1, I32, DATA_PAGE], [2, I32, PLAIN],
                                                        [3, I32, chunk.pages]])]))
        if column_meta.get(16) is not None:
            column_meta.set(16, STRUCT, Struct([
                [2, LIST, (I64, [chunk.rows, chunk.ids - (chunk.rows - chunk.empty)])],
                [3, LIST, (I64, [chunk.empty, 0, chunk.ids])]]))
        group.set(2, I64, group.get(2) + chunk.uncompressed - was_uncompressed)
        if group.get(6) is not None:
            group.set(6, I64, group.get(6) + chunk.compressed - was_compressed)
    return meta.to_bytes()
