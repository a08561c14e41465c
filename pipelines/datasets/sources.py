"""Sources: find the input shards once, then read each shard into records, streaming.

Both pipelines call `expand_inputs` at launch and `read_shard` once per shard inside a single
DoFn call, so this module is plain Python (fsspec + pyarrow, no Beam) and the per-record loop never
pays Beam's per-element cost.

Memory stays bounded by `max_record_bytes` (`--max-record-bytes`): text formats are read in chunks
and split on bytes, and a line or piece that grows past the bound is dropped as it is read (its
bytes are skipped up to the next separator) and rejected as `record_too_large`; a whole-file record
(`text_unit="file"`) is read only up to the bound. Parquet is read batch by batch over just the
needed columns; a text value past the bound is rejected before it becomes a Python string. Each record is decoded from UTF-8 here rather than by a text reader, so invalid bytes
make one repaired or rejected record instead of a crashed pipeline. A data problem never raises: a
bad row becomes a `Rejected`, a bad file a `ShardError` after the records read before it.

Large files are read in parts (pipelines/datasets/parts.py, `--split-size`): a part is a `Shard`
with a `Part`, read by `read_shard` like any other.
"""
from __future__ import annotations

import contextlib
import json
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import accumulate, chain
from types import NoneType
from typing import BinaryIO, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from fsspec.compression import compr
from fsspec.utils import infer_compression

from bpe_ops.utf8_texts import Utf8Texts
from pipelines.core.files import open_read
from pipelines.core.inputs import InputError, Sought, find_files
from schemas.records import (
    BAD_JSON, DEFAULT_MAX_RECORD_BYTES, INVALID_UTF8, MISSING_TEXT_COLUMN, MISSING_TEXT_FIELD, NOT_AN_OBJECT,
    RECORD_TOO_LARGE, TEXT_COLUMN_NOT_STRING, TEXT_NOT_A_STRING, TRUNCATED_OR_CORRUPT, UNREADABLE_FILE,
    RUNS, WRONG_FORMAT, Record, RecordRun, Rejected, ShardError, join_runs,
)

__all__ = ["SourceOptions", "Shard", "Record", "Rejected", "ShardError",
           "expand_inputs", "shard_format", "read_shard", "output_name"]

FORMATS = ("jsonl", "txt", "parquet")
FORMAT_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".txt": "txt", ".parquet": "parquet"}
COMPRESSION_EXTENSIONS = (".gz", ".zst", ".bz2")   # fsspec's compression="infer" knows them all
CHUNK_SIZE = 1 << 20          # bytes read at a time from a text shard
# A text shard's first read, at most: its first records reach the encoders without waiting for a
# whole CHUNK_SIZE to be read and split (the file's first read is split line by line: see _split_batches).
FIRST_READ_SIZE = 64 << 10
PARQUET_BATCH_ROWS = 1024     # rows decoded at a time from a Parquet shard
DETAIL_CHARS = 200            # details are one line, at most this long

BOM = b"\xef\xbb\xbf"
# A JSON \uD800-style escape decodes to a lone surrogate: a str that cannot be encoded as UTF-8.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")       # where a JSON line may escape one
# What a damaged or unreadable file raises while we open, decompress or parse it.
DATA_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError, zstandard.ZstdError,
                pa.ArrowException)
# Leading bytes of binary formats that never start UTF-8 text: a text shard that begins with one is
# compressed or encoded data under a wrong name, and reading it as lines would let garbage in.
BINARY_MAGIC = re.compile(rb"(\x1f\x8b)|(\x28\xb5\x2f\xfd)|(BZh[1-9](?:1AY&SY|\x17rE8P\x90))|(\xfd7zXZ\x00)"
                           rb"|(PK\x03\x04)|(PAR1\x15)|(\xff\xfe|\xfe\xff)")
_BINARY_NAMES = ("gzip", "zstd", "bzip2", "xz", "zip", "Parquet", "UTF-16/UTF-32 text")
ZSTD_READ_SIZE = 1 << 16      # compressed bytes fed to the zstd decompressor at a time


@dataclass(frozen=True)
class SourceOptions:
    """How to read the shards; the CLI's `--format`, `--text-field`, ... map onto these fields."""
    format: str = "auto"
    text_field: str = "text"
    id_field: str | None = "id"
    text_unit: str = "line"
    separator: str | None = None
    invalid_utf8: str = "replace"
    keep_fields: tuple[str, ...] = ()
    # Fields read for the statistics but not written (the --timestamp-field): they reach Record.keep too.
    extra_fields: tuple[str, ...] = ()
    max_record_bytes: int | None = DEFAULT_MAX_RECORD_BYTES     # None: no bound

    def __post_init__(self):
        if self.format not in ("auto", *FORMATS):
            raise InputError(f"unknown --format {self.format!r}: use auto, jsonl, txt or parquet")
        if self.text_unit not in ("line", "file"):
            raise InputError(f"unknown --text-unit {self.text_unit!r}: use line or file")
        if self.invalid_utf8 not in ("replace", "reject"):
            raise InputError(f"unknown --invalid-utf8 {self.invalid_utf8!r}: use replace or reject")
        if not self.text_field:
            raise InputError("--text-field must not be empty")
        if self.separator == "":
            raise InputError("--separator must not be empty")
        if self.separator is not None and self.text_unit == "file":
            raise InputError("--separator and --text-unit file exclude each other")
        if self.max_record_bytes is not None and self.max_record_bytes < 1:
            raise InputError("--max-record-bytes must be positive (or 0 for no bound)")
        object.__setattr__(self, "keep_fields", tuple(self.keep_fields))
        object.__setattr__(self, "extra_fields", tuple(self.extra_fields))

    @cached_property
    def fields(self) -> tuple[str, ...]:
        """Every field read besides the text and the id: kept ones, then the extra ones."""
        return tuple(dict.fromkeys(self.keep_fields + self.extra_fields))


@dataclass(frozen=True)
class Part:
    """A piece of a large file read as a shard of its own (`parts.plan_parts`): `index` of `count`, over
    bytes [start, end) of the file (kind "bytes": it holds the records that START there), row
    groups [start, end) (kind "row_groups"), or a run of zstd frames (kind "frames") starting at
    byte `stored` of the file and holding decompressed bytes [start, end). `first_row` is how many
    rows of the file come before it, so its row numbers and default ids are those of the whole
    file; None until counted."""
    index: int
    count: int
    kind: str
    start: int
    end: int
    first_row: int | None = None
    stored: int = 0

    def label(self) -> str:
        return f"part{self.index:05d}-of-{self.count:05d}"

    def to_json(self) -> dict:
        return {"index": self.index, "count": self.count, "kind": self.kind, "start": self.start, "end": self.end,
                **({"stored": self.stored} if self.kind == "frames" else {})}

    def numbered(self, first_row: int) -> "Part":
        return Part(self.index, self.count, self.kind, self.start, self.end, first_row, self.stored)


@dataclass(frozen=True)
class Shard:
    """One input file: its URL (or local path) as matched, its path relative to the common parent
    folder of all inputs ('/'-separated, names outputs and default ids), its size in bytes, and what
    the filesystem says of its version (an ETag, checksum or modification time; "" if none), by which
    a rerun tells a changed input from the one its output was made of."""
    url: str
    relpath: str
    size: int
    version: str = ""
    part: Part | None = None      # None: the whole file

    @property
    def name(self) -> str:
        """How progress lines and errors name it: the relpath, and its part if it is one."""
        return self.relpath if self.part is None else f"{self.relpath} ({self.part.label()})"

    def output_name(self, suffix: str = ".parquet") -> str:
        """Its output file: `output_name` of the file, with the part's label if it is one."""
        return output_name(self.relpath, suffix, self.part)


# ---------------------------------------------------------------------------- finding shards

def expand_inputs(patterns: Sequence[str], sought: Sought = Sought()) -> list[Shard]:
    """Expand the input globs once, at launch: every matched file (pipelines/core/inputs.py: what a
    pattern may name, `sought`), deduplicated, sorted by URL, each with its path relative to the
    deepest folder holding them all."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise InputError(f"no {sought.flag or 'input'} given")
    found = find_files(patterns, sought)
    relpaths = _relpaths(f.path for f in found)
    if len(set(relpaths)) < len(relpaths):
        raise InputError("two inputs have the same path under different protocols; "
                         "their outputs would collide")
    return [Shard(f.url, rel, f.size, f.version) for f, rel in zip(found, relpaths)]


def _relpaths(paths: Iterable[str]) -> list[str]:
    """Each path relative to the deepest folder holding all of them, '/'-separated, so that inputs
    from several folders keep the subfolders that tell them apart."""
    parts = [[c for c in p.replace(os.sep, "/").split("/") if c] for p in paths]
    common = os.path.commonprefix([p[:-1] for p in parts])
    return ["/".join(p[len(common):]) for p in parts]


def _strip_extensions(relpath: str) -> tuple[str, str | None]:
    """`a/en-000.jsonl.gz` -> (`a/en-000`, "jsonl"): the name without its compression and format
    extensions, and the format the extension names (None if it names none)."""
    stem, lower = relpath, relpath.lower()
    for ext in COMPRESSION_EXTENSIONS:
        if lower.endswith(ext):
            stem, lower = stem[:-len(ext)], lower[:-len(ext)]
            break
    for ext, fmt in FORMAT_EXTENSIONS.items():
        if lower.endswith(ext):
            return stem[:-len(ext)], fmt
    return stem, None


def output_name(relpath: str, suffix: str = ".parquet", part: Part | None = None) -> str:
    """The output file name for a shard: `a/en-000-of-012.jsonl.gz` -> `a/en-000-of-012.parquet`;
    a part of a split file: `a/big.part00003-of-00008.parquet`."""
    return _strip_extensions(relpath)[0] + (f".{part.label()}" if part is not None else "") + suffix


def shard_format(shard: Shard, options: SourceOptions) -> str:
    """The format to read a shard as, checked against the options. Pipelines call it for every
    shard at launch, so a wrong extension or a txt-only option on jsonl fails before any work."""
    fmt = options.format
    if fmt == "auto":
        fmt = _strip_extensions(shard.relpath)[1]
        if fmt is None:
            raise InputError(f"cannot tell the format of {shard.url} from its extension; "
                             "pass --format jsonl, txt or parquet")
    if fmt != "txt" and (options.separator is not None or options.text_unit != "line"):
        raise InputError(f"--separator and --text-unit apply to txt inputs; {shard.url} is {fmt}")
    if fmt == "txt" and options.keep_fields:
        raise InputError(f"--keep-field applies to jsonl and parquet inputs; {shard.url} is txt")
    if fmt == "txt" and options.extra_fields:
        raise InputError(f"--timestamp-field and --group-field apply to jsonl and parquet inputs; {shard.url} is txt")
    return fmt


# ---------------------------------------------------------------------------- reading a shard

def read_shard(shard: Shard, options: SourceOptions, chunk_size: int = CHUNK_SIZE,
               progress=None, batched: bool = False,
               utf8: bool = False) -> Iterator[Record | list[Record] | Rejected | ShardError]:
    """Stream a shard's records (and rejected rows); a file-level failure ends the stream with one
    `ShardError` after everything read before it. A shard whose format cannot be told or does not fit
    the options is one `ShardError` too: launch checks every shard given, so only a shard that
    appeared later (a watched folder) gets here, and it must not stop the others. A part of a file
    (`shard.part`) gives the records it owns, numbered as in the whole file. `progress(n)` is told
    of every `n` bytes read from storage (compressed bytes for a compressed file). With `batched`,
    the records of a JSONL shard that one read of the file completes, or of one batch of a Parquet
    shard, may come as one run (in order, the rejected rows between them one by one): a reader of
    short records pays its per-record steps (this generator's and its caller's) a run at a time.
    With `utf8` too, a run's texts may be the UTF-8 read (`Utf8Texts`: no str made of any), where the
    compiled JSONL pass or Arrow read them."""
    try:
        fmt = shard_format(shard, options)
    except InputError as exc:
        yield ShardError(shard.url, 0, WRONG_FORMAT, str(exc))
        return
    reader = {"jsonl": _read_jsonl, "txt": _read_txt, "parquet": _read_parquet}[fmt]
    if batched and fmt != "txt":
        reader = partial(reader, batched=True, utf8=utf8)
    first_row = _first_row(shard)
    rows = first_row
    # Failing to open is an unreadable file; Parquet damage always is (its footer says where data is).
    reason = UNREADABLE_FILE
    try:
        with open_decompressed(shard, progress) as f:
            if fmt != "parquet":
                reason = TRUNCATED_OR_CORRUPT
                if shard.part is None:
                    f = _Peeked(f)
                    head = f.head
                else:     # a part seeks to its own bytes; the file's first ones were checked at launch
                    head = b""
                binary = BINARY_MAGIC.match(head)
                if binary:
                    kind = _BINARY_NAMES[binary.lastindex - 1]
                    yield ShardError(shard.url, 0, WRONG_FORMAT, f"the content is {kind} data, not {fmt} "
                                     f"text: is the file's extension missing or wrong?")
                    return
            for item in reader(f, shard, options, chunk_size):
                rows += len(item) if type(item) in RUNS else not isinstance(item, ShardError)
                yield item
    except DATA_ERRORS as exc:
        yield ShardError(shard.url, rows, reason, _one_line(f"{type(exc).__name__}: {exc}"))


def _first_row(shard: Shard) -> int:
    """The row number of a shard's first record: 0, or the count of the file's rows before its part."""
    if shard.part is None or shard.part.index == 0:
        return 0
    if shard.part.first_row is None:
        raise ValueError(f"{shard.name}: the rows before this part were not counted")
    return shard.part.first_row


@contextlib.contextmanager
def open_decompressed(shard: Shard, progress=None) -> Iterator[BinaryIO]:
    """The shard's bytes, decompressed by extension (as fsspec's compression="infer" does), the
    stored bytes counted into `progress` on their way; a run of zstd frames from its first frame.
    zstandard's stream reader ends silently inside a truncated frame (the records of its last block
    vanish unreported), so .zst goes through `_ZstdReader`, which raises EOFError there like gzip
    and bz2 do."""
    url = shard.url
    with open_read(url) as raw:
        stored = raw if progress is None else _Counted(raw, progress)
        compression = None if url.lower().endswith(".zst") else infer_compression(url)
        if url.lower().endswith(".zst"):
            if shard.part is not None:
                raw.seek(shard.part.stored)
            yield _ZstdReader(stored)
        elif compression is not None:
            with compr[compression](stored, mode="rb") as f:
                yield f
        else:
            yield stored


class _Counted:
    """A binary file whose reads are counted: `progress(n)` after every read of n bytes."""

    def __init__(self, f: BinaryIO, progress):
        self.f = f
        self.progress = progress

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.progress(len(data))
        return data

    def read1(self, n: int = -1) -> bytes:
        data = getattr(self.f, "read1", self.f.read)(n)
        self.progress(len(data))
        return data

    def readinto(self, buffer) -> int:
        n = self.f.readinto(buffer)
        self.progress(n or 0)
        return n

    def __getattr__(self, name):     # seek, tell, size, closed, ...: the file's own
        return getattr(self.f, name)


class _ZstdReader:
    """A .zst stream of one or more frames, decompressed; EOFError if the data ends inside a frame."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.dctx = zstandard.ZstdDecompressor()
        self.frame = None            # the decompressor of the current frame
        self.pending = b""           # decompressed, not yet returned

    def _more(self) -> bytes | None:
        """The next non-empty decompressed bytes, or None at a clean end of the data."""
        out = b""
        while not out:
            data = self.raw.read(ZSTD_READ_SIZE)
            if not data:
                if self.frame is not None and not self.frame.eof:
                    raise EOFError("zstd data ends inside a frame (truncated file)")
                return None
            parts = []
            while data:
                if self.frame is None or self.frame.eof:
                    self.frame = self.dctx.decompressobj()
                parts.append(self.frame.decompress(data))
                data = self.frame.unused_data if self.frame.eof else b""
            out = b"".join(parts)
        return out

    def read1(self, n: int = -1) -> bytes:
        """At most `n` bytes, decompressing at most one step: all data before a failure gets out."""
        if not self.pending:
            self.pending = self._more() or b""
        out, self.pending = (self.pending, b"") if n < 0 else (self.pending[:n], self.pending[n:])
        return out

    def read(self, n: int = -1) -> bytes:
        parts, have = [self.pending], len(self.pending)
        while n < 0 or have < n:
            more = self._more()
            if more is None:
                break
            parts.append(more)
            have += len(more)
        data = b"".join(parts)
        out, self.pending = (data, b"") if n < 0 else (data[:n], data[n:])
        return out


class _Peeked:
    """A stream whose first bytes were read ahead (to recognise binary data) and are read again."""

    def __init__(self, f: BinaryIO, n: int = 16):
        self.f = f
        self.head = self.pending = f.read(n)

    def read(self, n: int = -1) -> bytes:
        return self._read(n, self.f.read)

    def read1(self, n: int = -1) -> bytes:
        return self._read(n, getattr(self.f, "read1", self.f.read))

    def _read(self, n: int, read) -> bytes:
        if not self.pending:
            return read(n)
        if n < 0:
            out, self.pending = self.pending + self.f.read(), b""
        else:
            out, self.pending = self.pending[:n], self.pending[n:]
        return out


def jsonl_lines(f: BinaryIO, shard: Shard, options: SourceOptions, chunk_size: int):
    return (jsonl_line(offset, raw) for offset, raw in _lines(f, chunk_size, options.max_record_bytes, shard.part))


def jsonl_line(offset: int, raw: bytes | Oversized) -> tuple[int, bytes | Oversized]:
    """A line (without its LF or CRLF) and its offset, without a UTF-8 BOM starting it: one left by
    `cat a.jsonl b.jsonl` of files that each start with one cannot begin JSON, so it is dropped
    rather than the record rejected."""
    return (offset + len(BOM), raw[len(BOM):]) if raw.startswith(BOM) else (offset, raw)


def _read_jsonl(f: BinaryIO, shard: Shard, options: SourceOptions, chunk_size: int, batched: bool = False,
                utf8: bool = False):
    """The records and rejected rows of a JSONL stream. Where `_native` is built and no other field is
    kept, the lines a read completes are read in one compiled pass (as `jsonl_record` reads a line:
    the specification): as one block of bytes (`_native.jsonl_block`, `_read_block`), or as a batch
    of lines (`_native.jsonl_lines_fields`) where a read cannot be a block (the file's first, which
    may start with a BOM; one ending a line past the limit; see `_split_batches`); only the
    lines it leaves (anything json.loads must judge, an oversized line) are read one by one here.
    With `batched`, the records of such a read come as lists (the rejected rows between them one by
    one); with `utf8` too, a block's texts as the UTF-8 read (`Utf8Texts`)."""
    row = _first_row(shard)
    keys = _compiled_keys(options)
    if keys is None:
        for row, (offset, raw) in enumerate(non_blank(jsonl_lines(f, shard, options, chunk_size)), start=row):
            yield _jsonl_item(offset, raw, row, shard, options)
        return
    relpath = shard.relpath
    for batch in _piece_batches(f, b"\n", chunk_size, options.max_record_bytes, shard.part,
                                blocks=_JSONL_BLOCK is not None):
        if type(batch) is LineBlock:
            items = _read_block(batch, row, shard, options, keys, utf8 and batched)
            row += sum(len(item) if type(item) in RUNS else 1 for item in items)
            yield from _as_read(items, batched)
            continue
        read = _JSONL_LINES_FIELDS(batch, *keys)
        kinds = set(map(type, read))            # tuple: read; None: blank; bool (True): for Python
        if bool not in kinds:                   # the compiled pass read every line: records only
            records = _read_records([fields for fields in read if fields is not None] if NoneType in kinds else read,
                                    row, relpath)
            row += len(records)
            if records:
                yield from (records,) if batched else records
            continue
        items = []
        for (offset, piece), fields in zip(batch, read):
            if fields is None:                  # a blank line: no record, no row
                continue
            if fields is True:
                items.append(_jsonl_item(*jsonl_line(offset, _without_cr(piece)), row, shard, options))
            else:
                items += _read_records([fields], row, relpath)
            row += 1
        yield from _as_read(_runs_of_records(items), batched)


def _runs_of_records(items: Iterable) -> list:
    """Items read in file order (records, runs or lists of records, rejected rows) as a batched read
    yields them: each stretch of records one non-empty run (`join_runs`: a `RecordRun` where every part
    is one, else a list of records), each rejected row alone between them.

    >>> r = [Record(str(k), "t", k) for k in range(3)]
    >>> [len(x) if type(x) is list else x for x in _runs_of_records([r[0], [r[1]], "rejected", [], r[2]])]
    [2, 'rejected', 1]
    """
    runs, stretch = [], []
    for item in items:
        if type(item) in RUNS:
            if len(item):
                stretch.append(item)
        elif type(item) is Record:
            stretch.append([item])
        else:
            if stretch:                         # the records before a rejected row come first
                runs.append(join_runs(stretch))
                stretch = []
            runs.append(item)
    if stretch:
        runs.append(join_runs(stretch))
    return runs


def _as_read(runs: list, batched: bool) -> Iterable:
    """`_runs_of_records`' runs as `_read_jsonl` yields them: as they are, batched; else one by one."""
    return runs if batched else chain.from_iterable(run if type(run) in RUNS else (run,) for run in runs)


def _read_records(read: list[tuple[str, str | None]], row: int, relpath: str) -> RecordRun | list:
    """The records of lines the compiled pass read, (text, id) each, numbered from `row`: what the
    line-by-line loop of `_read_jsonl` makes of them, in one call per batch (an id defaults to
    `relpath:row`).

    >>> [(r.id, r.text, r.row) for r in _read_records([("a", "x1"), ("b", None)], 7, "s.jsonl")]
    [('x1', 'a', 7), ('s.jsonl:8', 'b', 8)]
    """
    if not read:
        return []
    texts, ids = zip(*read)
    return _records_of(texts, ids, row, relpath)


def _records_of(texts: Sequence[str], ids: Sequence[str | None] | None, row: int, relpath: str) -> RecordRun:
    """The records of the texts and ids (None: the default id, `relpath:row`, for each) of rows
    numbered from `row`, as a run (no object per record).

    >>> [(r.id, r.text, r.row) for r in _records_of(["a", "b"], None, 3, "s.jsonl")]
    [('s.jsonl:3', 'a', 3), ('s.jsonl:4', 'b', 4)]
    """
    return RecordRun(texts if type(texts) in (list, Utf8Texts) else list(texts),
                     ids if ids is None or type(ids) is list else list(ids), range(row, row + len(texts)), relpath)


def _read_block(block: "LineBlock", row: int, shard: Shard, options: SourceOptions,
                keys: tuple[str, str | None], utf8: bool = False) -> list:
    """The items of a block of whole JSONL lines (`_split_batches`' `LineBlock`), rows numbered from
    `row`, as `_read_jsonl` makes them of the same lines given one by one: runs of records, each
    rejected row alone between them. `_native.jsonl_block` reads the lines in one call (their texts
    and ids as two columns); the lines it leaves (anything json.loads must judge, an oversized line)
    are read here. With `utf8`, the texts are the UTF-8 the pass read (`Utf8Texts`), no str each."""
    limit = options.max_record_bytes
    texts, ids, odd = _JSONL_BLOCK(block.data, block.end, *keys, -1 if limit is None else limit, block.begin, utf8)
    if utf8:
        data, offsets, chars = texts
        texts = Utf8Texts(data, np.frombuffer(offsets, dtype=np.int64), np.frombuffer(chars, dtype=np.int64))
    def item(index: int, position: int, line: bytes | int):
        offset = block.start + position - block.begin
        return (too_large(Oversized(offset, line), shard, row + index, options) if type(line) is int else
                _jsonl_item(*jsonl_line(offset, _without_cr(line)), row + index, shard, options))

    return _runs_around(texts, ids, row, shard.relpath, ((index, item(index, *rest)) for index, *rest in odd))


def _runs_around(texts: list, ids: list | None, row: int, relpath: str, odd: Iterable[tuple[int, object]]) -> list:
    """A batch read as columns (`texts`, `ids`, rows numbered from `row`) whose rows at the indexes
    `odd` gives, in order, were read apart (`(index, its item)`: a record, a rejected row): its items
    as runs (`_runs_of_records`), the columns' stretches between those rows a `RecordRun` each.

    >>> [len(x) if type(x) is RecordRun else x for x in _runs_around(["a", None, "c", "d"], None, 0, "s", [(1, "x")])]
    [1, 'x', 2]
    """
    items, at = [], 0
    for index, item in odd:
        items += [_records_of(texts[at:index], ids and ids[at:index], row + at, relpath), item]
        at = index + 1
    if at == 0:                            # nothing read apart: the batch is one run
        return [_records_of(texts, ids, row, relpath)] if texts else []
    items.append(_records_of(texts[at:], ids and ids[at:], row + at, relpath))
    return _runs_of_records(items)


def _jsonl_item(offset: int, raw: bytes | Oversized, row: int, shard: Shard, options: SourceOptions):
    """A non-blank line's record or rejection."""
    return too_large(raw, shard, row, options) if isinstance(raw, Oversized) else jsonl_record(raw, offset, row, shard,
                                                                                               options)


def _compiled_keys(options: SourceOptions) -> tuple[str, str | None] | None:
    """The text and id field names `_native.jsonl_lines_fields` reads, or None when it cannot read
    this stream's lines (not built, other fields kept, a name no UTF-8 line can hold)."""
    if _JSONL_LINES_FIELDS is None or options.fields:
        return None
    try:
        for name in (options.text_field, options.id_field):
            if name is not None:
                name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return options.text_field, options.id_field


def too_large(piece: "Oversized", shard: Shard, row: int, options: SourceOptions) -> Rejected:
    return Rejected(shard.url, row, RECORD_TOO_LARGE, f"{piece.length:,} bytes at byte {piece.offset:,} of the file, "
                    f"above --max-record-bytes {options.max_record_bytes:,}")


def _compiled_jsonl():
    """The compiled `_native.jsonl_text_id`, `_native.jsonl_lines_fields` and `_native.jsonl_block`,
    or None for each where bpe_ops._native is not built."""
    try:
        from bpe_ops._native import jsonl_block, jsonl_lines_fields, jsonl_text_id
    except ImportError:
        return None, None, None
    return jsonl_text_id, jsonl_lines_fields, jsonl_block


_JSONL_TEXT_ID, _JSONL_LINES_FIELDS, _JSONL_BLOCK = _compiled_jsonl()


def jsonl_record(raw: bytes, offset: int, row: int, shard: Shard,
                  options: SourceOptions) -> Record | Rejected:
    """One non-blank JSONL line -> a record, or the reason it cannot be one.

    A line that is valid UTF-8 and one strict JSON object whose text (and id, if any) are plain
    strings has them read by `_native.jsonl_text_id` straight from its bytes, when no other field is
    kept: the same str json.loads gives, without a str of the whole line and a dict of every member.
    Every other line, and every line when fields are kept, is read by json.loads below."""
    if _JSONL_TEXT_ID is not None and not options.fields:
        try:
            fields = _JSONL_TEXT_ID(raw, options.text_field, options.id_field)
        except UnicodeEncodeError:          # a field name no UTF-8 line can hold (a lone surrogate)
            fields = None
        if fields is not None:
            text, rid = fields
            return Record(f"{shard.relpath}:{row}" if rid is None else rid, text, row)
    return _jsonl_record_loaded(raw, offset, row, shard, options)


def _jsonl_record_loaded(raw: bytes, offset: int, row: int, shard: Shard,
                         options: SourceOptions) -> Record | Rejected:
    """`jsonl_record` by json.loads of the decoded line (the specification)."""
    def reject(reason, detail, rid=None):
        return Rejected(shard.url, row, reason, _one_line(detail), rid)

    try:
        line, repaired = _decode(raw, options)
    except UnicodeDecodeError as exc:
        return reject(INVALID_UTF8, utf8_detail(exc, f"at byte {offset + exc.start} of the file"))
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:     # RecursionError: absurdly deep nesting
        return reject(BAD_JSON, str(exc) or type(exc).__name__)
    if not isinstance(obj, dict):
        return reject(NOT_AN_OBJECT, f"a JSON {_json_type(obj)}, not an object")
    rid = _record_id(obj.get(options.id_field) if options.id_field else None, shard, row)
    if options.text_field not in obj:
        return reject(MISSING_TEXT_FIELD, f"no field {options.text_field!r} (fields: {', '.join(map(str, obj)) or 'none'}"
                      f"; is --text-field right?)", rid)
    text = obj[options.text_field]
    if not isinstance(text, str):
        return reject(TEXT_NOT_A_STRING, f"field {options.text_field!r} is {_json_type(text)}", rid)
    # Cheap tests before looking for lone surrogates: an ASCII str holds none (`isascii` is O(1)),
    # and one can only come from a \uD800-\uDFFF escape in the line.
    if not (text.isascii() and rid.isascii()) and _SURROGATE_ESCAPE.search(raw):
        lone = _LONE_SURROGATE.search(text) or _LONE_SURROGATE.search(rid)
        if lone:
            if options.invalid_utf8 == "reject":
                return reject(INVALID_UTF8, f"lone surrogate escape \\u{ord(lone.group()):04x}")
            text, rid = _LONE_SURROGATE.sub("\ufffd", text), _LONE_SURROGATE.sub("\ufffd", rid)
            repaired = True
    return Record(rid, text, row, repaired, {k: obj.get(k) for k in options.fields})


def txt_pieces(f: BinaryIO, shard: Shard, options: SourceOptions, chunk_size: int):
    limit = options.max_record_bytes
    if options.text_unit == "file":
        return _whole_file(f, limit)
    if options.separator is not None:
        return _pieces(f, options.separator.encode("utf-8"), chunk_size, limit, shard.part)
    return _lines(f, chunk_size, limit, shard.part)


def _read_txt(f: BinaryIO, shard: Shard, options: SourceOptions, chunk_size: int):
    pieces = txt_pieces(f, shard, options, chunk_size)
    for row, (offset, raw) in enumerate(non_blank(pieces), start=_first_row(shard)):
        if isinstance(raw, Oversized):
            yield too_large(raw, shard, row, options)
            continue
        try:
            text, repaired = _decode(raw, options)
        except UnicodeDecodeError as exc:
            detail = utf8_detail(exc, f"at byte {offset + exc.start} of the file")
            yield Rejected(shard.url, row, INVALID_UTF8, detail)
            continue
        yield Record(f"{shard.relpath}:{row}", text, row, repaired)


def _read_parquet(f: BinaryIO, shard: Shard, options: SourceOptions, chunk_size: int, batched: bool = False,
                  utf8: bool = False):
    """Parquet rows, reading only the text, id and kept columns. A missing id column means default
    ids and a missing kept column means None, as for JSONL keys; a missing text column fails the
    shard, since no row of it could be used. Where no other field is kept, a batch whose text is
    valid UTF-8 throughout becomes runs of records (`_parquet_runs`: columns, no object per
    record), each rejected row alone between them; with `batched` the runs come as they are (with
    `utf8` too, their texts Arrow's UTF-8 as it is: `Utf8Texts`), else one record at a time. Any
    other batch is read row by row (`_parquet_rows`, the specification)."""
    import pyarrow.compute as pc    # here: a costly import that no JSONL or text read needs

    pf = pq.ParquetFile(f)
    names = pf.schema_arrow.names
    name = options.text_field
    if name not in names:
        yield ShardError(shard.url, 0, MISSING_TEXT_COLUMN,
                         _one_line(f"no column {name!r}; columns: {', '.join(names)}"))
        return
    text_type = pf.schema_arrow.field(name).type
    if pa.types.is_dictionary(text_type):    # a categorical column (pandas) is text all the same
        text_type = text_type.value_type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        yield ShardError(shard.url, 0, TEXT_COLUMN_NOT_STRING, f"column {name!r} is {text_type}")
        return
    id_column = options.id_field if options.id_field in names else None
    kept = [k for k in options.fields if k in names]
    columns = list(dict.fromkeys([name] + ([id_column] if id_column else []) + kept))
    # Arrow does not check UTF-8 when it reads Parquet: take the bytes and decode them like text.
    as_bytes = pa.large_binary() if pa.types.is_large_string(text_type) else pa.binary()
    as_text = pa.large_string() if pa.types.is_large_string(text_type) else pa.string()
    row = _first_row(shard)
    limit = options.max_record_bytes
    part = shard.part
    row_groups = range(part.start, part.end) if part is not None else range(pf.num_row_groups)
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns, row_groups=row_groups):
        column = batch.column(name).cast(as_bytes)
        oversized: dict[int, int] = {}
        if limit is not None and len(column) and (pc.max(pc.binary_length(column)).as_py() or 0) > limit:
            lengths = pc.binary_length(column)
            too_long = pc.fill_null(pc.greater(lengths, limit), False)
            oversized = {i: n for i, (n, big) in enumerate(zip(lengths.to_pylist(), too_long.to_pylist())) if big}
            column = pc.if_else(too_long, pa.scalar(b"", as_bytes), column)
        ids = batch.column(id_column) if id_column else None
        texts = None if options.fields else _valid_texts(column, as_text, utf8 and batched)
        if texts is None:
            yield from _parquet_rows(column, ids, {k: batch.column(k) for k in kept}, oversized, row, shard, options)
        else:
            null_rows = (np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist()
                         if column.null_count else [])
            yield from _as_read(_parquet_runs(texts, null_rows, ids, oversized, row, shard, options), batched)
        row += len(column)


def _valid_texts(column: pa.Array, as_text: pa.DataType, utf8: bool = False) -> list[str | None] | Utf8Texts | None:
    """The texts of a batch's text column (bytes) as str (None where null), or None when any of
    them is not valid UTF-8 (its rows are then read one by one, which rejects or repairs them).
    With `utf8`, the column's own bytes and offsets as `Utf8Texts` (a null an empty text: the
    caller sets null rows aside by the column's nulls)."""
    try:
        text = column.cast(as_text)         # Arrow's cast checks the UTF-8 of every value
    except pa.ArrowInvalid:
        return None
    if not utf8:
        return text.to_pylist()
    if len(text) == 0:                      # (an empty array may have no buffers at all)
        return Utf8Texts(b"", np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    import pyarrow.compute as pc

    _, offsets, data = text.buffers()
    wide = pa.types.is_large_string(text.type)
    offsets = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32, count=len(text) + 1,
                            offset=text.offset * (8 if wide else 4))
    chars = pc.fill_null(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
    return Utf8Texts(data if data is not None else b"", offsets.astype(np.int64), chars)


def _parquet_runs(texts: list[str | None] | Utf8Texts, null_rows: list[int], ids: pa.Array | None,
                  oversized: dict[int, int], row: int, shard: Shard, options: SourceOptions) -> list:
    """What `_parquet_rows` makes of a batch whose texts are all valid UTF-8 (`texts`, None or empty
    at the indexes `null_rows`), as runs: each stretch of records one `RecordRun`, each rejected row
    (null text, oversized) alone between them."""
    if ids is None:
        record_ids = None
    elif pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        record_ids = ids.to_pylist()        # str, or None: the default id, as `_record_id` gives it
    else:
        record_ids = [None if v is None else _record_id(v, shard, row + k) for k, v in enumerate(ids.to_pylist())]
    odd = sorted(set(oversized).union(null_rows)) if oversized or null_rows else ()
    return _runs_around(texts, record_ids, row, shard.relpath,
                        ((i, _parquet_rejected(shard, row + i, _record_id(record_ids and record_ids[i], shard, row + i),
                                               oversized.get(i), options)) for i in odd))


def _parquet_rows(column: pa.Array, ids: pa.Array | None, keeps: dict[str, pa.Array], oversized: dict[int, int],
                  row: int, shard: Shard, options: SourceOptions) -> Iterator[Record | Rejected]:
    """A batch's rows one by one: its text column as bytes (`column`), its id column and kept
    columns (a kept field without a column is None), the oversized rows' byte counts; rows numbered
    from `row`."""
    texts = column.to_pylist()
    ids = ids.to_pylist() if ids is not None else [None] * len(texts)
    keeps = {k: values.to_pylist() for k, values in keeps.items()}
    for i, raw in enumerate(texts):
        rid = _record_id(ids[i], shard, row)
        if i in oversized or raw is None:
            yield _parquet_rejected(shard, row, rid, oversized.get(i), options)
        else:
            try:
                text, repaired = _decode(raw, options)
            except UnicodeDecodeError as exc:
                yield Rejected(shard.url, row, INVALID_UTF8,
                               utf8_detail(exc, f"at byte {exc.start} of the text"), rid)
            else:
                keep = {k: keeps[k][i] if k in keeps else None for k in options.fields}
                yield Record(rid, text, row, repaired, keep)
        row += 1


def _parquet_rejected(shard: Shard, row: int, rid: str, oversized: int | None, options: SourceOptions) -> Rejected:
    """A Parquet row set aside: its text above the limit (`oversized`, its bytes), else null."""
    if oversized is not None:
        return Rejected(shard.url, row, RECORD_TOO_LARGE, f"{oversized:,} bytes of text, above "
                        f"--max-record-bytes {options.max_record_bytes:,}", rid)
    return Rejected(shard.url, row, TEXT_NOT_A_STRING, f"column {options.text_field!r} is null", rid)


# ---------------------------------------------------------------------------- bytes -> records

@dataclass(frozen=True)
class LineBlock:
    """Whole pieces of a stream as read: `data[begin:end]`, the pieces separated by the one-byte
    separator (the byte at `end` the one after the last); the first starts at `data[begin]`, file
    offset `start`."""
    data: bytes
    end: int
    start: int
    begin: int = 0


@dataclass(frozen=True)
class Oversized:
    """A piece longer than the bound, in place of its bytes (which were skipped, never held)."""
    offset: int
    length: int

    def strip(self) -> bool:      # never blank: `non_blank` keeps it, and it takes a row number
        return True

    def startswith(self, prefix: bytes) -> bool:
        return False


def _pieces(f: BinaryIO, sep: bytes, chunk_size: int, limit: int | None,
            part: Part | None) -> Iterator[tuple[int, bytes | Oversized]]:
    """The pieces of `_piece_batches`, one at a time."""
    for batch in _piece_batches(f, sep, chunk_size, limit, part):
        yield from batch


def _piece_batches(f: BinaryIO, sep: bytes, chunk_size: int, limit: int | None,
                   part: Part | None, blocks: bool = False) -> Iterator[list[tuple[int, bytes | Oversized]]]:
    """The pieces between separators of the whole stream, or those of a byte-range part, in lists
    (`_split_batches`): the pieces STARTING in [part.start, part.end) (a piece starts at 0 or right
    after a separator), the last of them read past the end to its own end. Another part starts at
    the first separator ending at or after its start, so every piece belongs to exactly one part
    (`splittable_separator` keeps out separators whose occurrences could overlap). With `blocks`,
    reads may come as `LineBlock`s (see `_split_batches`)."""
    if part is None:
        yield from _split_batches(f, sep, chunk_size, limit, blocks=blocks)
        return
    if part.kind == "frames":
        yield from _frame_piece_batches(f, sep, chunk_size, limit, part, blocks)
        return
    begin = 0 if part.start == 0 else _boundary_after(f, sep, part.start, chunk_size)
    if begin is None or begin >= part.end:
        return
    f.seek(begin)
    yield from _batches_before(_split_batches(f, sep, chunk_size, limit, base=begin, blocks=blocks), part.end, sep)


def _batches_before(batches: Iterator[list | LineBlock], end: int, sep: bytes = b"\n") -> Iterator[list | LineBlock]:
    """The batches of pieces up to the first piece starting at `end` or after it, which ends them (a
    `LineBlock` is cut after its last piece starting before `end`; `sep` is its separator)."""
    for batch in batches:
        if type(batch) is LineBlock:
            before = end - batch.start          # the block's pieces start at `begin` and after each separator
            if before <= 0:
                return
            cut = batch.data.find(sep, batch.begin + before - 1, batch.end + 1)
            if 0 <= cut <= batch.end:           # the pieces after the separator at `cut` start at `end` or after
                yield LineBlock(batch.data, cut, batch.start, batch.begin)
                return
            yield batch
            continue
        if batch and batch[-1][0] >= end:
            yield [piece for piece in batch if piece[0] < end]
            return
        yield batch


def _frame_piece_batches(f: BinaryIO, sep: bytes, chunk_size: int, limit: int | None,
                         part: Part, blocks: bool = False) -> Iterator[list[tuple[int, bytes | Oversized]] | LineBlock]:
    """The lines of a run of zstd frames (`f` decompresses from its first frame, at decompressed
    offset part.start), in lists. The byte before the run is in another frame, so ownership is
    shifted by one: the first part holds the lines starting in [0, end], a later one those starting
    in (start, end]; each part still ends where the next begins. Lines only (`sep` one byte)."""
    begin = 0
    if part.index > 0:
        skipped = 0
        while True:
            chunk = f.read1(chunk_size)
            if not chunk:
                return
            found = chunk.find(sep)
            if found >= 0:
                f = _Resumed(chunk[found + 1:], f)
                begin = part.start + skipped + found + 1
                break
            skipped += len(chunk)
    if begin > part.end:
        return
    yield from _batches_before(_split_batches(f, sep, chunk_size, limit, base=begin, blocks=blocks), part.end + 1, sep)


class _Resumed:
    """A stream whose first bytes, `pending`, were read already."""

    def __init__(self, pending: bytes, f: BinaryIO):
        self.pending, self.f = pending, f

    def read1(self, n: int = -1) -> bytes:
        if self.pending:
            out, self.pending = (self.pending, b"") if n < 0 else (self.pending[:n], self.pending[n:])
            return out
        return self.f.read1(n)

    read = read1


def _boundary_after(f: BinaryIO, sep: bytes, start: int, chunk_size: int) -> int | None:
    """The first offset >= `start` where a piece starts (right after a separator), or None."""
    position = max(0, start - len(sep))
    f.seek(position)
    carry = b""
    while chunk := f.read(chunk_size):
        data = carry + chunk
        found = data.find(sep)
        if found >= 0:
            return position - len(carry) + found + len(sep)
        carry = data[-(len(sep) - 1):] if len(sep) > 1 else b""     # a separator may straddle chunks
        position += len(chunk)
    return None


def splittable_separator(sep: bytes) -> bool:
    """Whether pieces split on `sep` can be found from any offset: no proper prefix of it is also a
    suffix (as in `aa` or `abab`), so two of its occurrences never overlap and a search started
    mid-file finds the same ones as reading from the start."""
    return not any(sep[:k] == sep[-k:] for k in range(1, len(sep)))


def _split_stream(f: BinaryIO, sep: bytes, chunk_size: int, limit: int | None = None,
                  base: int = 0) -> Iterator[tuple[int, bytes | Oversized]]:
    """The pieces of `_split_batches`, one at a time."""
    for batch in _split_batches(f, sep, chunk_size, limit, base):
        yield from batch


def _split_batches(f: BinaryIO, sep: bytes, chunk_size: int, limit: int | None = None,
                   base: int = 0, blocks: bool = False) -> Iterator[list[tuple[int, bytes | Oversized]] | LineBlock]:
    """The pieces of a byte stream between separators, each with the stream offset where it
    starts, in lists: those a read completes (so a reader pays its per-piece work a list at a time);
    a UTF-8 BOM at the very start is dropped. The stream is read `chunk_size` bytes at a
    time: a separator may straddle two chunks, and a piece spanning many chunks is kept as a list
    of parts joined once, so a long piece costs linear time. A piece that grows past `limit` bytes
    is not kept: its parts are dropped as they come and it is yielded as `Oversized`, so memory
    stays bounded by `limit` plus a chunk. `base`: the file offset where the stream starts.

    With `blocks` (a one-byte separator), the pieces a read completes come as one `LineBlock` (their
    bytes as read, no bytes object per piece) where each is whole and none starts the stream: the
    reader then splits them itself, and judges the `limit` of each."""
    blocks = blocks and len(sep) == 1
    k = len(sep) - 1              # bytes of a separator that can end one chunk and go on in the next
    parts: list[bytes] = []       # the unfinished piece (only its last k bytes once it is oversized)
    held = 0                      # its length so far
    oversized = False
    tail = b""                    # its last k bytes
    start = base                  # its file offset
    # read1 returns what one step of decompression gives: when a compressed shard turns out to be
    # truncated, every complete piece before the damage has already been yielded.
    read = getattr(f, "read1", f.read)
    size, got = min(chunk_size, FIRST_READ_SIZE), 0
    while chunk := read(size):
        got += len(chunk)
        if got >= FIRST_READ_SIZE:       # (a format's few peeked bytes come back alone, first)
            size = chunk_size
        if sep not in chunk and sep not in tail + chunk[:k]:
            held += len(chunk)
            tail = (tail + chunk[-k:])[-k:] if k else b""
            # The last k bytes may begin a separator: the piece is at least held - k bytes long.
            if oversized or (limit is not None and held - k > limit):
                oversized, parts = True, [tail]
            else:
                parts.append(chunk)
            continue
        if blocks and not oversized and start != 0:
            # The unfinished piece is held whole (not oversized): it ends at the read's first separator,
            # and is a block of its own; the pieces after it are a block on the read as it is (joined
            # to the unfinished piece, the whole read would be copied once more).
            first, end = chunk.find(sep), chunk.rfind(sep)
            begin = 0
            if held:
                head = b"".join(parts + [chunk[:first + 1]])
                yield LineBlock(head, len(head) - 1, start)
                start += len(head)
                begin = first + 1
            batch, rest = LineBlock(chunk, end, start, begin) if end >= begin else None, chunk[end + 1:]
            start += end + 1 - begin
        else:
            kept = sum(map(len, parts))              # bytes of the unfinished piece still held
            *pieces, rest = b"".join(parts + [chunk]).split(sep)
            lengths = list(map(len, pieces))
            if not oversized and start != 0 and (limit is None or max(lengths) <= limit):
                # Every piece whole and within the limit, none at the file's start (its BOM): the
                # offsets by running sums, without a step of Python per piece (short records).
                starts = list(accumulate(map(len(sep).__add__, lengths[:-1]), initial=start))
                start = starts[-1] + lengths[-1] + len(sep)
                batch = list(zip(starts, pieces))
            else:
                batch = []
                for i, piece in enumerate(pieces):
                    length = held - kept + len(piece) if i == 0 else len(piece)
                    if i == 0 and oversized or limit is not None and length > limit:
                        batch.append((start, Oversized(start, length)))
                    else:
                        if start == 0 and piece.startswith(BOM):
                            piece, start, length = piece[len(BOM):], len(BOM), length - len(BOM)
                        batch.append((start, piece))
                    start += length + len(sep)
        if batch is not None:
            yield batch
        held, oversized, tail = len(rest), False, rest[-k:] if k else b""
        parts = [rest]
        if limit is not None and held - k > limit:
            oversized, parts = True, [tail]
    if oversized:
        yield [(start, Oversized(start, held))]
        return
    last = b"".join(parts)       # the final piece, which has no separator after it
    if limit is not None and len(last) > limit:
        yield [(start, Oversized(start, len(last)))]
        return
    if start == 0 and last.startswith(BOM):
        last, start = last[len(BOM):], len(BOM)
    yield [(start, last)]


def _lines(f: BinaryIO, chunk_size: int, limit: int | None = None,
           part: Part | None = None) -> Iterator[tuple[int, bytes | Oversized]]:
    """Lines without their LF or CRLF ending; a last line without a newline counts."""
    for offset, line in _pieces(f, b"\n", chunk_size, limit, part):
        yield offset, _without_cr(line)


def _without_cr(line: bytes | Oversized) -> bytes | Oversized:
    """A line without the CR of a CRLF ending (its LF is gone already)."""
    return line[:-1] if isinstance(line, bytes) and line.endswith(b"\r") else line


def _whole_file(f: BinaryIO, limit: int | None = None) -> Iterator[tuple[int, bytes | Oversized]]:
    """The whole file as one piece (text_unit="file"), read only up to `limit` bytes: a larger file
    is skipped to its end and yielded as `Oversized`."""
    if limit is None:
        data = f.read()
    else:
        parts, held = [], 0
        while held <= limit and (more := f.read(min(CHUNK_SIZE, limit + 1 - held))):
            parts.append(more)
            held += len(more)
        if held > limit:
            while more := f.read(CHUNK_SIZE):
                held += len(more)
            yield 0, Oversized(0, held)
            return
        data = b"".join(parts)
    yield (len(BOM), data[len(BOM):]) if data.startswith(BOM) else (0, data)


def non_blank(pieces: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    """Blank lines or pieces (only whitespace) are not records and take no row number."""
    return ((offset, raw) for offset, raw in pieces if raw.strip())


def _decode(raw: bytes, options: SourceOptions) -> tuple[str, bool]:
    """A record's text and whether invalid UTF-8 was replaced by U+FFFD; under
    invalid_utf8="reject" the UnicodeDecodeError propagates to the caller, who rejects the row."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        if options.invalid_utf8 == "reject":
            raise
        return raw.decode("utf-8", errors="replace"), True


def utf8_detail(exc: UnicodeDecodeError, where: str) -> str:
    return f"invalid UTF-8 byte 0x{exc.object[exc.start]:02x} {where}"


def _record_id(value, shard: Shard, row: int) -> str:
    """A record's own id as a string, or `<relpath>:<row>` when it has none (missing or null). A
    string is the id as it is; any other value is its compact JSON text (`["a",1]`, `12`, `true`),
    which any other tool writes alike, never a Python repr."""
    if value is None:
        return f"{shard.relpath}:{row}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _json_type(value) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 3] + "..."
