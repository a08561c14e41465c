"""What a source yields for each shard, and the layout of `rejected/*.jsonl`.

`pipelines.datasets.sources.read_shard` turns a shard into a stream of `Record`s (text to tokenize),
`Rejected`s (one row that cannot be used, with a reason from a fixed vocabulary) and at most one
final `ShardError` (the rest of the file cannot be read). Both pipelines count rejections by reason
and write them out with `rejected_to_json`, so the reasons and the file layout live here, once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from dataclasses import dataclass

from bpe_ops.utf8_texts import Utf8Texts

REJECTED_SCHEMA_VERSION = 1

# The default of --max-record-bytes (RECORD_TOO_LARGE below). A record this large is no use for
# training and costs many times its size to tokenize; a whole novel is far smaller, so the bound
# rejects only what is almost surely not one document. Here, not in pipelines.datasets.sources, so that
# building a command's flags imports no pyarrow or fsspec (train's launcher starts its counting
# process only once its flags are parsed).
DEFAULT_MAX_RECORD_BYTES = 16 << 20

# Row-level reasons: one row of a shard could not become a record; the rows around it are fine.
BAD_JSON = "bad_json"                       # the line is not JSON
NOT_AN_OBJECT = "not_an_object"             # JSON, but an array, string, number... not {...}
MISSING_TEXT_FIELD = "missing_text_field"   # an object without the text field
TEXT_NOT_A_STRING = "text_not_a_string"     # the text field is null, a number, a list...
INVALID_UTF8 = "invalid_utf8"               # bytes that are not UTF-8, under invalid_utf8="reject"
RECORD_TOO_LARGE = "record_too_large"       # above --max-record-bytes: rejected before it is held whole
KEPT_FIELD_TYPE = "kept_field_type"         # tokenize: a kept field's value does not fit --keep-field NAME:TYPE
ROW_REASONS = (BAD_JSON, NOT_AN_OBJECT, MISSING_TEXT_FIELD, TEXT_NOT_A_STRING, INVALID_UTF8, RECORD_TOO_LARGE,
               KEPT_FIELD_TYPE)

# Shard-level reasons: the file (or what is left of it) cannot be read.
TRUNCATED_OR_CORRUPT = "truncated_or_corrupt"       # a compressed stream ends early or is damaged
UNREADABLE_FILE = "unreadable_file"                 # cannot be opened, or not valid Parquet
MISSING_TEXT_COLUMN = "missing_text_column"         # Parquet without the text column
TEXT_COLUMN_NOT_STRING = "text_column_not_string"   # Parquet text column of another type
WRONG_FORMAT = "wrong_format"                       # e.g. gzip or UTF-16 bytes in a file named .jsonl
SHARD_REASONS = (TRUNCATED_OR_CORRUPT, UNREADABLE_FILE, MISSING_TEXT_COLUMN, TEXT_COLUMN_NOT_STRING,
                 WRONG_FORMAT)

# One JSON object per line of rejected/*.jsonl, with exactly these keys.
REJECTED_FIELDS = ("source", "row", "id", "reason", "detail")


class _NoFields(Mapping):
    """The kept fields of a record that keeps none: one empty, read-only mapping shared by all such
    records, so that a record costs no dict of its own (a short-record job makes hundreds of thousands
    a second on its reading thread). Equal to `{}`; hashable, so a dataclass takes it as a default."""
    __slots__ = ()

    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self):
        return "NO_FIELDS"          # unpickles as the one instance below


NO_FIELDS = _NoFields()


@dataclass(slots=True)
class Record:
    """One text to process: its id, its text, its 0-based row in the shard, whether invalid UTF-8
    was replaced with U+FFFD, and the pass-through fields the user asked to keep (read-only: a record
    that keeps none shares `NO_FIELDS`). Slotted, with no dict of its own: ~60% of the time to make.

    >>> r = Record("s.jsonl:3", "Hello", 3)
    >>> r, r.keep.get("lang"), r == Record("s.jsonl:3", "Hello", 3, keep={})
    (Record(id='s.jsonl:3', text='Hello', row=3, repaired=False, keep={}), None, True)
    """
    id: str
    text: str
    row: int
    repaired: bool = False
    keep: Mapping = NO_FIELDS


class RecordRun(Sequence):
    """Consecutive records of one shard held as columns, with no object per record: their texts,
    their ids (None: each the default `relpath:row`), their rows; none repaired, none keeping a field.
    What a compiled read of JSONL lines gives (`sources._read_block`): a short-record job makes no
    `Record` at all on its reading thread, where making and freeing them was a quarter of its time.
    A sequence of `Record`s all the same: an item is made as it is asked for; a slice is a run.
    The texts are a list of str, or `Utf8Texts` where the reader was asked to keep them as the UTF-8
    it read (`read_shard(utf8=True)`: no str made of any text the encoder reads as UTF-8).

    >>> run = RecordRun(["a", "b", "c"], None, range(7, 10), "s.jsonl")
    >>> run[1], run[1:].ids, run.texts[:2]
    (Record(id='s.jsonl:8', text='b', row=8, repaired=False, keep={}), ['s.jsonl:8', 's.jsonl:9'], ['a', 'b'])
    >>> RecordRun.joined([run[:1], RecordRun(["d"], ["x"], range(12, 13), "s.jsonl")]).ids
    ['s.jsonl:7', 'x']
    """
    __slots__ = ("texts", "_ids", "rows", "relpath")
    repaired = 0                        # records whose invalid UTF-8 was replaced: none

    def __init__(self, texts: list[str] | Utf8Texts, ids: list[str | None] | None, rows: range | list[int],
                 relpath: str):
        self.texts, self._ids, self.rows, self.relpath = texts, ids, rows, relpath

    @property
    def ids(self) -> list[str]:
        """Each record's id, the default one (`relpath:row`) where it has none."""
        if self._ids is None:
            self._ids = [f"{self.relpath}:{r}" for r in self.rows]
        elif None in self._ids:
            self._ids = [f"{self.relpath}:{r}" if i is None else i for r, i in zip(self.rows, self._ids)]
        return self._ids

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, at):
        if isinstance(at, slice):
            if at.step not in (None, 1):
                raise ValueError("a run of records is sliced with step 1")
            return RecordRun(self.texts[at], None if self._ids is None else self._ids[at], self.rows[at], self.relpath)
        row = self.rows[at]
        rid = None if self._ids is None else self._ids[at]
        return Record(f"{self.relpath}:{row}" if rid is None else rid, self.texts[at], row)

    def __iter__(self):
        return map(self.__getitem__, range(len(self.texts)))

    @classmethod
    def joined(cls, runs: Sequence["RecordRun"]) -> "RecordRun":
        """The records of `runs` (of one shard), in order, as one run."""
        if len(runs) == 1:
            return runs[0]
        if all(type(run.texts) is Utf8Texts for run in runs):
            texts = Utf8Texts.joined([run.texts for run in runs])
        else:
            texts = list(chain.from_iterable(run.texts for run in runs))
        rows = runs[0].rows
        for run in runs[1:]:
            if type(rows) is range and type(run.rows) is range and rows.stop == run.rows.start:
                rows = range(rows.start, run.rows.stop)
            else:
                rows = [*rows, *run.rows]
        ids = None if all(run._ids is None for run in runs) else list(chain.from_iterable(run.ids for run in runs))
        return cls(texts, ids, rows, runs[0].relpath)


# What a batched read yields records in: a list of them, or a run of them as columns.
RUNS = (list, RecordRun)


def join_runs(runs: Sequence[Sequence[Record]]) -> Sequence[Record]:
    """Runs of records (`RecordRun`s or lists) read one after the other, as one: a `RecordRun` where
    every one is, else a list of records."""
    if all(type(run) is RecordRun for run in runs):
        return RecordRun.joined(runs)
    return [record for run in runs for record in run]


def texts_of(records: Sequence[Record]) -> list[str] | Utf8Texts:
    """The texts of records (a `RecordRun`'s as they are: a list of str, or `Utf8Texts`)."""
    return records.texts if type(records) is RecordRun else [r.text for r in records]


def ids_of(records: Sequence[Record]) -> list[str]:
    """The ids of records (a `RecordRun`'s, the defaults made on first use)."""
    return records.ids if type(records) is RecordRun else [r.id for r in records]


@dataclass
class Rejected:
    """One row that could not become a record. `id` is set when the row was readable enough to
    have one."""
    source: str
    row: int | None
    reason: str
    detail: str
    id: str | None = None


@dataclass
class ShardError:
    """The rest of a shard could not be read. The `rows_read` rows yielded before it stay valid."""
    source: str
    rows_read: int
    reason: str
    detail: str


def rejected_to_json(rej: Rejected | ShardError) -> dict:
    """The rejected/*.jsonl line for a rejected row or a shard error. A shard error's `row` is
    `rows_read`: the first row that was lost, so "from this row on" is exact."""
    if isinstance(rej, ShardError):
        return {"source": rej.source, "row": rej.rows_read, "id": None,
                "reason": rej.reason, "detail": rej.detail}
    return {"source": rej.source, "row": rej.row, "id": rej.id,
            "reason": rej.reason, "detail": rej.detail}
