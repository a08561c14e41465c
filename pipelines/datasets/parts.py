"""Parts of large files (`--split-size`).

Large files are read in parts (`plan_parts`), planned once at launch rather than
split dynamically by a splittable DoFn: the plan is deterministic (it depends only on each file and
the split size, so output names and resumes do not depend on the runner or its workers), it needs
no SDF support from the portable runners (Flink, Spark), and Beam's Reshuffle after Create spreads
the parts over the workers; rebalancing comes from having many parts. A byte-range part of an
uncompressed JSONL or text file owns the records that START in its range: a record starting exactly
at the range's start is its own, a part that does not start at 0 skips to the first record boundary
after start-1, and its last record is read past the end to its own end. A Parquet part is a run of
row groups; a multi-frame zstd file is cut at frame boundaries. A compressed text file of one stream
(gzip, bzip2, single-frame zstd: a stream that cannot be entered mid-file),
a whole-file record (`--text-unit file`) and a separator that can overlap itself stay whole, and
stats.json's `read_whole` says so. Row numbers and default ids (`<relpath>:<row>`) of a part are
those of the unsplit read: Parquet parts know their first row from the footer; for byte ranges a
first pass counts each part's rows (non-blank pieces, found without decoding or parsing them), and
each part starts from the sum of the counts before it (`count_rows`, `with_first_row`).
"""
from __future__ import annotations

from typing import BinaryIO, Sequence

import pyarrow.parquet as pq

from pipelines.core.files import open_read
from pipelines.datasets.sources import (BINARY_MAGIC, CHUNK_SIZE, COMPRESSION_EXTENSIONS, DATA_ERRORS, Part, Shard,
                                        SourceOptions, jsonl_lines, non_blank, open_decompressed, shard_format,
                                        splittable_separator, txt_pieces)


def plan_parts(shards: Sequence[Shard], options: SourceOptions,
               split_size: int | None) -> tuple[list[Shard], dict[str, str]]:
    """The work units of a run: each shard as it is, or, when it is larger than `split_size` bytes
    and its format allows, its parts (`Part`). Returns them with {relpath: why it is read whole}
    for each file above the split size that stays whole. The plan depends only on each file (its
    size, its Parquet row groups) and `split_size`: never on the runner or its workers."""
    units: list[Shard] = []
    whole: dict[str, str] = {}
    for shard in shards:
        parts, reason = ([], None) if not split_size or shard.size <= split_size else _split(shard, options, split_size)
        if reason is not None:
            whole[shard.relpath] = reason
        units += parts or [shard]
    return units, whole


def _split(shard: Shard, options: SourceOptions, split_size: int) -> tuple[list[Shard], str | None]:
    """A large file's parts, or ([], why it must be read whole)."""
    fmt = shard_format(shard, options)
    if fmt == "parquet":
        return _row_group_parts(shard, split_size)
    if shard.relpath.lower().endswith(".zst") and (fmt == "jsonl" or options.text_unit == "line"
                                                   and options.separator is None):
        return _frame_parts(shard, split_size)
    if shard.relpath.lower().endswith(COMPRESSION_EXTENSIONS):
        return [], "compressed: a gzip or bzip2 stream (or zstd with --separator) cannot be entered mid-file"
    if fmt == "txt" and options.text_unit == "file":
        return [], "--text-unit file: the file is one record"
    if fmt == "txt" and options.separator is not None and not splittable_separator(options.separator.encode("utf-8")):
        return [], "its --separator can overlap itself, so a record boundary cannot be found mid-file"
    with open_read(shard.url) as f:
        if BINARY_MAGIC.match(f.read(16)):
            return [], "its content is not text"     # the whole read reports it, once
    count = -(-shard.size // split_size)
    return [_with_part(shard, Part(i, count, "bytes", i * split_size, min(shard.size, (i + 1) * split_size)))
            for i in range(count)], None


def _row_group_parts(shard: Shard, split_size: int) -> tuple[list[Shard], str | None]:
    """A Parquet file's runs of row groups of about `split_size` stored bytes each; their first rows
    are known from the footer."""
    try:
        with open_read(shard.url) as f:
            meta = pq.ParquetFile(f).metadata
    except DATA_ERRORS:
        return [], "its footer cannot be read"     # the whole read reports it
    if meta.num_row_groups < 2:
        return [], "Parquet with a single row group"
    runs = [[]]
    held = 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        runs[-1].append((i, group.num_rows))
        held += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        if held >= split_size and i < meta.num_row_groups - 1:
            runs.append([])
            held = 0
    parts, first_row = [], 0
    for index, run in enumerate(runs):
        parts.append(_with_part(shard, Part(index, len(runs), "row_groups", run[0][0], run[-1][0] + 1, first_row)))
        first_row += sum(rows for _, rows in run)
    return (parts, None) if len(parts) > 1 else ([], "Parquet whose row groups are not larger than the split size")


def _frame_parts(shard: Shard, split_size: int) -> tuple[list[Shard], str | None]:
    """A multi-frame .zst file's runs of frames of about `split_size` stored bytes each, found from
    the frame and block headers (nothing is decompressed); every frame must state its content size,
    which places each run in the decompressed stream."""
    try:
        with open_read(shard.url) as f:
            frames = zstd_frames(f)
    except DATA_ERRORS:
        return [], "its zstd frames cannot be walked (the whole read reports why)"
    if len(frames) < 2:
        return [], "zstd with a single frame: it cannot be entered mid-stream"
    if any(content is None for _, _, content in frames):
        return [], "zstd frames that do not state their content size"
    runs, held = [[]], 0
    for i, frame in enumerate(frames):
        runs[-1].append(frame)
        held += frame[1]
        if held >= split_size and i < len(frames) - 1:
            runs.append([])
            held = 0
    if len(runs) < 2:
        return [], "zstd whose frames are not larger than the split size"
    parts, start = [], 0
    for index, run in enumerate(runs):
        end = start + sum(content for _, _, content in run)
        parts.append(_with_part(shard, Part(index, len(runs), "frames", start, end, stored=run[0][0])))
        start = end
    return parts, None


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50      # its low 4 bits are free


def zstd_frames(f: BinaryIO) -> list[tuple[int, int, int | None]]:
    """(stored offset, stored size, content size or None) of each frame of a zstd file, from the frame
    header and the 3-byte block headers (RFC 8878), seeking over the blocks; skippable frames are
    left out. ValueError or EOFError for data that is not zstd or ends inside a frame."""
    frames, offset = [], 0
    while True:
        f.seek(offset)
        head = f.read(18)         # magic, descriptor, window, dictionary id (<= 4), content size (<= 8)
        if not head:
            return frames
        if len(head) < 8:
            raise EOFError("zstd data ends inside a frame header")
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
            offset += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError(f"no zstd frame at byte {offset}")
        descriptor = head[4]
        single_segment = descriptor >> 5 & 1
        size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
        at = 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3]
        content = None
        if size_bytes:
            content = int.from_bytes(head[at:at + size_bytes], "little") + (256 if size_bytes == 2 else 0)
        block = offset + at + size_bytes
        while True:
            f.seek(block)
            header = f.read(3)
            if len(header) < 3:
                raise EOFError("zstd data ends inside a frame")
            value = int.from_bytes(header, "little")
            block += 3 + (1 if (value >> 1 & 3) == 1 else value >> 3)      # an RLE block stores one byte
            if value & 1:                                                  # the frame's last block
                break
        end = block + 4 * (descriptor >> 2 & 1)                            # + its checksum
        frames.append((offset, end - offset, content))
        offset = end


def _with_part(shard: Shard, part: Part) -> Shard:
    return Shard(shard.url, shard.relpath, shard.size, shard.version, part)


def count_rows(shard: Shard, options: SourceOptions, chunk_size: int = CHUNK_SIZE) -> int:
    """The rows a byte-range part holds, as its reader numbers them (non-blank pieces), without
    decoding or parsing them: the first pass that gives each later part its first row number. A
    read error ends the count; the part's own read reports it."""
    fmt = shard_format(shard, options)
    pieces_of = jsonl_lines if fmt == "jsonl" else txt_pieces
    rows = 0
    try:
        with open_decompressed(shard) as f:
            for _ in non_blank(pieces_of(f, shard, options, chunk_size)):
                rows += 1
    except DATA_ERRORS:
        pass
    return rows


def with_first_row(shard: Shard, rows: dict[tuple[str, int], int]) -> Shard:
    """A byte-range part with `first_row` set from `rows` {(url, part index): rows that part holds};
    any other shard as it is."""
    part = shard.part
    if part is None or part.first_row is not None:
        return shard
    return _with_part(shard, part.numbered(sum(rows[(shard.url, i)] for i in range(part.index))))
