"""Sources: finding shards, and reading jsonl / txt / parquet (plain or compressed) into records.

Fixture files are written in tmp_path by each test; expected values come from the fixture's own
construction (or from json.loads on the real corpora), never from the code under test.
"""
import bz2
import contextlib
import gzip
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from bpe_ops.utf8_texts import Utf8Texts
from pipelines.datasets import sources
from pipelines.datasets.sources import (
    InputError, Record, Rejected, Shard, ShardError, SourceOptions, expand_inputs, output_name,
    read_shard, shard_format,
)
from schemas.records import (
    BAD_JSON, INVALID_UTF8, MISSING_TEXT_COLUMN, MISSING_TEXT_FIELD, NOT_AN_OBJECT, RECORD_TOO_LARGE,
    REJECTED_FIELDS, REJECTED_SCHEMA_VERSION, ROW_REASONS, SHARD_REASONS, TEXT_COLUMN_NOT_STRING,
    TEXT_NOT_A_STRING, TRUNCATED_OR_CORRUPT, UNREADABLE_FILE, RecordRun, rejected_to_json,
)
from tests.conftest import read_jsonl_texts

COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress,
               ".zst": lambda data: zstandard.ZstdCompressor().compress(data)}


def write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def shard_of(path, relpath=None) -> Shard:
    return Shard(str(path), relpath or path.name, path.stat().st_size)


def read_all(path, chunk_size=1 << 20, **options):
    return list(read_shard(shard_of(path), SourceOptions(**options), chunk_size=chunk_size))


def only(items, kind):
    return [x for x in items if isinstance(x, kind)]


def jsonl_bytes(objs) -> bytes:
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs).encode()


# ---------------------------------------------------------------------------- JSONL

def test_jsonl_bom_crlf_blank_lines_and_final_line_without_newline(tmp_path):
    data = (b"\xef\xbb\xbf" + b'{"id": "a", "text": "first"}\r\n'
            + b"\r\n   \n\n"
            + b'{"id": "b", "text": "second\\r\\nline"}\n'
            + b'{"text": "no id, no newline"}')
    items = read_all(write(tmp_path / "s.jsonl", data))
    assert all(isinstance(x, Record) for x in items)
    assert [(r.id, r.text, r.row, r.repaired) for r in items] == [
        ("a", "first", 0, False),
        ("b", "second\r\nline", 1, False),      # blank lines take no row number
        ("s.jsonl:2", "no id, no newline", 2, False),
    ]


def test_jsonl_ids_and_kept_fields(tmp_path):
    objs = [{"id": 7, "text": "x", "lang": "en"}, {"id": None, "text": "y"},
            {"doc": "d1", "text": "z", "meta": {"a": [1]}}]
    path = write(tmp_path / "s.jsonl", jsonl_bytes(objs))
    recs = read_all(path, keep_fields=("lang", "meta"))
    assert [r.id for r in recs] == ["7", "s.jsonl:1", "s.jsonl:2"]
    assert [r.keep for r in recs] == [{"lang": "en", "meta": None}, {"lang": None, "meta": None},
                                      {"lang": None, "meta": {"a": [1]}}]
    assert [r.id for r in read_all(path, id_field="doc")] == ["s.jsonl:0", "s.jsonl:1", "d1"]
    assert [r.id for r in read_all(path, id_field=None)] == ["s.jsonl:0", "s.jsonl:1", "s.jsonl:2"]
    by_doc = read_all(path, text_field="doc")
    assert [x.reason for x in only(by_doc, Rejected)] == [MISSING_TEXT_FIELD] * 2
    assert [r.text for r in only(by_doc, Record)] == ["d1"]


def test_jsonl_every_row_reason(tmp_path):
    lines = [
        b'{"id": "ok", "text": "fine"}',
        b'{"id": "x", "text": "unterminated',
        b'[1, 2, 3]',
        b'"just a string"',
        b'{"id": "m", "body": "no text"}',
        b'{"id": "n", "text": null}',
        b'{"id": "i", "text": 42}',
        b'{"id": "l", "text": ["a", "b"]}',
        b"[" * 100_000,                                     # nesting deep enough to blow recursion
        b'{"id": "ok2", "text": "also fine"}',
    ]
    items = read_all(write(tmp_path / "s.jsonl", b"\n".join(lines) + b"\n"))
    assert len(items) == len(lines)
    assert [x.row for x in items] == list(range(len(lines)))
    got = [(x.reason, x.id) if isinstance(x, Rejected) else ("record", x.id) for x in items]
    assert got == [
        ("record", "ok"), (BAD_JSON, None), (NOT_AN_OBJECT, None), (NOT_AN_OBJECT, None),
        (MISSING_TEXT_FIELD, "m"), (TEXT_NOT_A_STRING, "n"), (TEXT_NOT_A_STRING, "i"),
        (TEXT_NOT_A_STRING, "l"), (BAD_JSON, None), ("record", "ok2"),
    ]
    rejected = only(items, Rejected)
    # The others: invalid UTF-8 and size have tests of their own; a kept field's type is tokenize's check.
    assert {r.reason for r in rejected} | {INVALID_UTF8, RECORD_TOO_LARGE, "kept_field_type"} == set(ROW_REASONS)
    assert all(r.source == str(tmp_path / "s.jsonl") for r in rejected)
    assert all("\n" not in r.detail and len(r.detail) <= 200 for r in rejected)
    try:
        json.loads(lines[1])
    except json.JSONDecodeError as exc:
        assert items[1].detail == str(exc)
    assert "null" in items[5].detail and "number" in items[6].detail and "array" in items[7].detail


@pytest.mark.parametrize("policy", ["replace", "reject"])
def test_jsonl_invalid_utf8(tmp_path, policy):
    good = b'{"text": "ok"}\n'
    bad = b'{"id": "b", "text": "caf\xe9 \xff"}\n'
    data = good + bad + good
    items = read_all(write(tmp_path / "s.jsonl", data), invalid_utf8=policy)
    assert [x.row for x in items] == [0, 1, 2]
    assert isinstance(items[0], Record) and isinstance(items[2], Record)
    assert not items[0].repaired and not items[2].repaired
    if policy == "replace":
        assert isinstance(items[1], Record) and items[1].repaired
        assert items[1].text == "caf\ufffd \ufffd" and items[1].id == "b"
    else:
        assert isinstance(items[1], Rejected) and items[1].reason == INVALID_UTF8
        offset = len(good) + bad.index(b"\xe9")             # the first bad byte, in the file
        assert f"0xe9 at byte {offset} " in items[1].detail
        assert data[offset] == 0xE9


def test_jsonl_lone_surrogate_escape(tmp_path):
    data = b'{"id": "p", "text": "pair \\ud83d\\ude00"}\n{"id": "s", "text": "lone \\udc80!"}\n'
    path = write(tmp_path / "s.jsonl", data)
    pair, lone = read_all(path)
    assert pair.text == "pair \U0001F600" and not pair.repaired
    assert lone.text == "lone \ufffd!" and lone.repaired
    lone.text.encode("utf-8")                                # what the tokenizer will need
    pair, lone = read_all(path, invalid_utf8="reject")
    assert isinstance(pair, Record)
    assert isinstance(lone, Rejected) and lone.reason == INVALID_UTF8 and "udc80" in lone.detail


# ---------------------------------------------------------------------------- txt

def test_txt_lines(tmp_path):
    data = b"\xef\xbb\xbfone\r\ntwo  \n\n \t \nthree"
    recs = read_all(write(tmp_path / "a.txt", data))
    assert [(r.id, r.text, r.row) for r in recs] == [
        ("a.txt:0", "one", 0), ("a.txt:1", "two  ", 1), ("a.txt:2", "three", 2)]


def test_txt_whole_file(tmp_path):
    text = "first line\n\nsecond paragraph\n"
    (rec,) = read_all(write(tmp_path / "doc.txt", text.encode()), text_unit="file")
    assert (rec.id, rec.text, rec.row) == ("doc.txt:0", text, 0)
    assert read_all(write(tmp_path / "blank.txt", b" \n\n"), text_unit="file") == []


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 5, 7, 64])
def test_txt_separator_across_chunk_boundaries(tmp_path, chunk_size):
    sep = "<|doc|>"
    pieces = ["alpha", "", "beta\nwith newline", "", "gamma <|doc", "δ é", "last"]
    data = sep + sep.join(pieces) + sep + sep
    path = write(tmp_path / "s.txt", data.encode())
    recs = read_all(path, chunk_size=chunk_size, separator=sep)
    assert [r.text for r in recs] == [p for p in pieces if p]
    assert [r.row for r in recs] == list(range(len(recs)))


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.text(alphabet="ab\n ", max_size=8), max_size=8),
       sep=st.sampled_from(["\n", "ab", "aab", "\n\n", "é"]), chunk_size=st.integers(1, 9))
def test_txt_separator_matches_str_split(tmp_path_factory, pieces, sep, chunk_size):
    data = sep.join(pieces)
    path = write(tmp_path_factory.mktemp("sep") / "s.txt", data.encode())
    expected = [p for p in data.split(sep) if p.strip()]
    assert [r.text for r in read_all(path, chunk_size=chunk_size, separator=sep)] == expected


@pytest.mark.parametrize("chunk_size", [1, 3, 1 << 20])
def test_txt_invalid_utf8_offsets(tmp_path, chunk_size):
    data = b"fine\nbad \xc3\x28 here\n\nalso \x80\n"
    path = write(tmp_path / "s.txt", data)
    items = read_all(path, chunk_size=chunk_size, invalid_utf8="reject")
    assert [type(x) for x in items] == [Record, Rejected, Rejected]
    assert [x.row for x in items] == [0, 1, 2]
    for rej, bad in zip(items[1:], [b"\xc3\x28", b"\x80"]):
        offset = data.index(bad)
        assert rej.reason == INVALID_UTF8 and f"at byte {offset} " in rej.detail
    repaired = read_all(path, chunk_size=chunk_size)
    assert [(r.text, r.repaired) for r in repaired] == [
        ("fine", False), ("bad \ufffd( here", True), ("also \ufffd", True)]


# ---------------------------------------------------------------------------- compression

@pytest.mark.parametrize("ext", sorted(COMPRESSORS))
@pytest.mark.parametrize("fmt", ["jsonl", "txt"])
def test_compressed_shards_read_like_plain(tmp_path, ext, fmt):
    texts = [f"record {i} ünïcode" for i in range(500)]
    data = jsonl_bytes({"text": t} for t in texts) if fmt == "jsonl" else "\n".join(texts).encode()
    path = write(tmp_path / f"s.{fmt}{ext}", COMPRESSORS[ext](data))
    assert [r.text for r in read_all(path, chunk_size=100)] == texts


def test_truncated_gz_keeps_earlier_records(tmp_path):
    texts = [f"document number {i} " + "x" * (i % 50) for i in range(2000)]
    whole = gzip.compress(jsonl_bytes({"id": str(i), "text": t} for i, t in enumerate(texts)))
    path = write(tmp_path / "s.jsonl.gz", whole[: len(whole) // 2])
    items = read_all(path, chunk_size=4096)
    *records, error = items
    assert isinstance(error, ShardError) and error.reason == TRUNCATED_OR_CORRUPT
    assert all(isinstance(r, Record) for r in records)
    assert 0 < len(records) < len(texts)
    assert [r.text for r in records] == texts[: len(records)]
    assert error.rows_read == len(records)
    assert "\n" not in error.detail and error.source == str(path)


def test_corrupt_and_missing_files_are_shard_errors(tmp_path):
    not_gzip = write(tmp_path / "s.jsonl.gz", b'{"text": "plain, not gzip"}\n')
    (error,) = read_all(not_gzip)
    assert isinstance(error, ShardError) and error.reason == TRUNCATED_OR_CORRUPT
    assert error.rows_read == 0
    missing = Shard(str(tmp_path / "gone.jsonl"), "gone.jsonl", 0)
    (error,) = read_shard(missing, SourceOptions())
    assert isinstance(error, ShardError) and error.reason == UNREADABLE_FILE


@pytest.mark.parametrize("options", [{}, {"separator": "\n\n"}])
def test_text_shards_are_streamed_in_chunks(tmp_path, monkeypatch, options):
    """A shard is never read whole: every read asks for at most chunk_size bytes."""
    texts = [f"line {i} " + "y" * 100 for i in range(20_000)]            # ~2.2 MB
    path = write(tmp_path / "big.txt.gz", gzip.compress("\n\n".join(texts).encode()))
    reads = []
    real_open = sources.open_read

    class CountingFile:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

    @contextlib.contextmanager
    def counting_open(url, compression=None):
        with real_open(url, compression=compression) as f:
            yield CountingFile(f)

    monkeypatch.setattr(sources, "open_read", counting_open)
    chunk = 64 * 1024
    assert [r.text for r in read_all(path, chunk_size=chunk, **options)] == texts
    assert len(reads) > 30 and all(0 < n <= chunk for n in reads)


# ---------------------------------------------------------------------------- Parquet

def write_parquet(path, table: pa.Table, **kwargs):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **kwargs)
    return path


def test_parquet_records(tmp_path):
    n = 2500                                                  # several batches and row groups
    table = pa.table({"text": [f"text {i}" if i % 7 else None for i in range(n)],
                      "id": [f"doc-{i}" for i in range(n)],
                      "lang": ["en", "fr"] * (n // 2),
                      "unused": list(range(n))})
    path = write_parquet(tmp_path / "s.parquet", table, row_group_size=1000)
    items = read_all(path, keep_fields=("lang", "absent"))
    assert [x.row for x in items] == list(range(n))
    for i, x in enumerate(items):
        assert x.id == f"doc-{i}"
        if i % 7:
            assert isinstance(x, Record) and x.text == f"text {i}" and not x.repaired
            assert x.keep == {"lang": "en" if i % 2 == 0 else "fr", "absent": None}
        else:
            assert isinstance(x, Rejected) and x.reason == TEXT_NOT_A_STRING


def test_parquet_ids_default_large_string_and_other_text_column(tmp_path):
    table = pa.table({"body": pa.array(["a", "b"], pa.large_string()), "n": [5, 6]})
    path = write_parquet(tmp_path / "d" / "s.parquet", table)
    assert [(r.id, r.text) for r in read_all(path, text_field="body")] == [
        ("s.parquet:0", "a"), ("s.parquet:1", "b")]
    assert [r.id for r in read_all(path, text_field="body", id_field="n")] == ["5", "6"]


def test_parquet_missing_or_non_string_text_column(tmp_path):
    path = write_parquet(tmp_path / "s.parquet", pa.table({"body": ["a"], "num": [1]}))
    (error,) = read_all(path)
    assert isinstance(error, ShardError) and error.reason == MISSING_TEXT_COLUMN
    assert "'text'" in error.detail and "body" in error.detail
    (error,) = read_all(path, text_field="num")
    assert isinstance(error, ShardError) and error.reason == TEXT_COLUMN_NOT_STRING
    assert "int64" in error.detail


def test_parquet_truncated_or_not_parquet(tmp_path):
    good = write_parquet(tmp_path / "good.parquet", pa.table({"text": ["a"] * 100}))
    for name, data in [("cut.parquet", good.read_bytes()[:-100]), ("junk.parquet", b"nope")]:
        (error,) = read_all(write(tmp_path / name, data))
        assert isinstance(error, ShardError) and error.reason == UNREADABLE_FILE
        assert error.rows_read == 0 and "\n" not in error.detail


@pytest.mark.parametrize("policy", ["replace", "reject"])
def test_parquet_invalid_utf8(tmp_path, policy):
    raw = pa.array([b"ok", b"bad \xff"], pa.binary())
    # Arrow lets a string column hold invalid UTF-8 (it does not check on write or read).
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())
    path = write_parquet(tmp_path / "s.parquet", pa.table({"text": text}))
    ok, bad = read_all(path, invalid_utf8=policy)
    assert isinstance(ok, Record) and ok.text == "ok"
    if policy == "replace":
        assert isinstance(bad, Record) and bad.repaired and bad.text == "bad \ufffd"
    else:
        assert isinstance(bad, Rejected) and bad.reason == INVALID_UTF8
        assert "0xff at byte 4 of the text" in bad.detail and bad.id == "s.parquet:1"


def parquet_rows_one_by_one(monkeypatch):
    """Make every Parquet batch read row by row (`_parquet_rows`, the specification of the runs)."""
    monkeypatch.setattr(sources, "_valid_texts", lambda column, as_text, utf8=False: None)


def flattened(items) -> list:
    return [x for item in items for x in (item if type(item) in (list, RecordRun) else [item])]


PARQUET_TEXTS = st.one_of(st.none(), st.text(max_size=12), st.binary(max_size=12),
                          st.sampled_from(["", "x" * 40, "日本語のテキスト", "a\x00b", "\ud7ff\ue000\U0010ffff"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PARQUET_TEXTS, max_size=40), ids=st.sampled_from(["none", "str", "int", "absent"]),
       text_type=st.sampled_from(["string", "large_string", "dictionary"]), limit=st.sampled_from([None, 10]),
       batch_rows=st.sampled_from([1, 3, 1024]))
def test_parquet_read_as_runs_gives_the_items_of_reading_it_row_by_row(
        tmp_path_factory, monkeypatch, values, ids, text_type, limit, batch_rows):
    # A batch valid UTF-8 throughout is read as runs of records (columns); any other row by row.
    # Both give the same records and rejected rows, in order, batched or not: null texts, texts
    # above the limit, invalid UTF-8 (a batch holding one is read row by row), ids of every kind.
    raw = [v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v for v in values]
    column = pa.array(raw, pa.binary())
    large = text_type == "large_string"
    text = pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(column),
                                 column.cast(pa.large_binary() if large else pa.binary()).buffers())
    if text_type == "dictionary" and all(v is None or isinstance(v, str) and v.isprintable() for v in values):
        text = pa.array(values, pa.string()).dictionary_encode()
    columns = {"text": text}
    if ids != "absent":
        columns["id"] = (pa.array([None if i % 3 == 0 else f"d{i}" for i in range(len(values))], pa.string())
                         if ids == "str" else pa.array([None if i % 4 == 1 else i * 10 for i in range(len(values))])
                         if ids == "int" else pa.nulls(len(values), pa.string()))
    path = write_parquet(tmp_path_factory.mktemp("pq") / "s.parquet", pa.table(columns), row_group_size=7)
    monkeypatch.setattr(sources, "PARQUET_BATCH_ROWS", batch_rows)
    options = dict(max_record_bytes=limit, invalid_utf8="reject")
    as_runs = read_all(path, **options)
    batched = flattened(read_shard(shard_of(path), SourceOptions(**options), batched=True))
    as_utf8 = list(read_shard(shard_of(path), SourceOptions(**options), batched=True, utf8=True))
    # With utf8, each run's texts are Arrow's UTF-8 as read, their characters counted as str counts them.
    assert all(type(x.texts) is Utf8Texts and x.texts.chars.tolist() == list(map(len, x.texts))
               for x in as_utf8 if type(x) is RecordRun)
    with monkeypatch.context() as m:
        parquet_rows_one_by_one(m)
        expected = read_all(path, **options)
    assert as_runs == expected and batched == expected and flattened(as_utf8) == expected
    assert [x.row for x in expected] == list(range(len(values)))


@pytest.mark.parametrize("fail_fast", [False, True])
def test_a_parquet_shard_read_in_batches_gives_the_records_and_account_of_reading_it_record_by_record(
        tmp_path, monkeypatch, fail_fast):
    # ShardReader.batches (tokenize's: runs) and iterating it (the other commands': records) set
    # aside, list and count the same rows of a Parquet shard, with fail-fast too.
    from pipelines.core.errors import ShardFailure
    from pipelines.datasets.shards import ShardReader

    monkeypatch.setattr(sources, "PARQUET_BATCH_ROWS", 16)
    texts = [None if i % 13 == 5 else "y" * 300 if i % 17 == 3 else f"text {i} é" for i in range(100)]
    path = write_parquet(tmp_path / "s.parquet", pa.table({"text": texts, "id": [f"r{i}" for i in range(100)]}))

    def read(batched: bool):
        reader = ShardReader(shard_of(path), SourceOptions(max_record_bytes=200), str(tmp_path / f"out-{batched}"),
                             fail_fast)
        try:
            records = [r for batch in reader.batches() for r in batch] if batched else list(reader)
        except ShardFailure as exc:
            return str(exc)
        return records, vars(reader.finish()), (tmp_path / f"out-{batched}" / "rejected" / "s.jsonl").read_text()

    expected = read(False)
    assert read(True) == expected
    if fail_fast:
        assert "--fail-fast" in expected and "record_too_large" in expected
    else:
        records, account, rejected = expected
        assert [r.text for r in records] == [t for i, t in enumerate(texts) if t is not None and i % 17 != 3]
        assert account["records_read"] == 100 and rejected.count("\n") == 100 - len(records) == 14


def test_parquet_batches_of_valid_text_come_as_runs(tmp_path, monkeypatch):
    # No object per record: a batch's records are one RecordRun, a rejected row between two runs.
    monkeypatch.setattr(sources, "PARQUET_BATCH_ROWS", 4)
    table = pa.table({"text": ["a", "b", None, "c", "d", "e"], "id": ["x", None, "y", "z", "w", "v"]})
    items = list(read_shard(shard_of(write_parquet(tmp_path / "s.parquet", table)), SourceOptions(), batched=True))
    assert [type(x).__name__ for x in items] == ["RecordRun", "Rejected", "RecordRun", "RecordRun"]
    assert [r.id for r in flattened(items) if isinstance(r, Record)] == ["x", "s.parquet:1", "z", "w", "v"]
    assert items[1].reason == TEXT_NOT_A_STRING and items[1].id == "y"
    # a kept field: row by row, every record keeping it
    kept = list(read_shard(shard_of(tmp_path / "s.parquet"), SourceOptions(keep_fields=("id",)), batched=True))
    assert all(type(x) in (Record, Rejected) for x in kept)
    assert [x.keep for x in kept if isinstance(x, Record)][:2] == [{"id": "x"}, {"id": None}]


# ---------------------------------------------------------------------------- finding shards

def test_expand_inputs_multi_folder_relpaths_dedup_and_sort(tmp_path):
    for rel in ["en/a-001.jsonl", "en/a-000.jsonl", "fr/deep/b.jsonl.gz", "fr/notes.md"]:
        write(tmp_path / "corpus" / rel, b"{}\n" * (len(rel)))
    (tmp_path / "corpus" / "en" / "dir.jsonl").mkdir()          # a folder is never a shard
    root = tmp_path / "corpus"
    shards = expand_inputs([f"{root}/en/*.jsonl*", f"{root}/**/*.jsonl.gz", f"{root}/en/a-000.jsonl"])
    assert [s.relpath for s in shards] == ["en/a-000.jsonl", "en/a-001.jsonl", "fr/deep/b.jsonl.gz"]
    assert [s.url for s in shards] == [str(root / s.relpath) for s in shards]
    assert [s.size for s in shards] == [os.path.getsize(s.url) for s in shards]
    (one,) = expand_inputs([str(root / "fr/deep/b.jsonl.gz")])       # plain path, no glob chars
    assert one.relpath == "b.jsonl.gz"


def test_expand_inputs_file_url(tmp_path):
    path = write(tmp_path / "s.jsonl", jsonl_bytes([{"text": "via file url"}]))
    (shard,) = expand_inputs([f"file://{tmp_path}/*.jsonl"])
    assert shard.url == f"file://{path}" and shard.relpath == "s.jsonl"
    assert [r.text for r in read_shard(shard, SourceOptions())] == ["via file url"]


def test_expand_inputs_errors(tmp_path):
    write(tmp_path / "a.jsonl", b"{}\n")
    missing = f"{tmp_path}/*.parquet"
    with pytest.raises(InputError, match=r"\*\.parquet.*matched no files"):
        expand_inputs([f"{tmp_path}/*.jsonl", missing])
    with pytest.raises(InputError, match="folder"):
        expand_inputs([str(tmp_path)])
    with pytest.raises(InputError):
        expand_inputs([])


def test_options_and_format_checks(tmp_path):
    for bad in [dict(format="csv"), dict(text_unit="word"), dict(invalid_utf8="ignore"),
                dict(separator=""), dict(separator="\n\n", text_unit="file"), dict(text_field="")]:
        with pytest.raises(InputError):
            SourceOptions(**bad)
    assert SourceOptions(keep_fields=["a"]).keep_fields == ("a",)
    jsonl, txt, odd = (Shard(f"/x/{n}", n, 0) for n in ["a.JSONL.ZST", "b.txt.bz2", "c.csv"])
    assert shard_format(jsonl, SourceOptions()) == "jsonl"
    assert shard_format(txt, SourceOptions(separator="\n\n")) == "txt"
    assert shard_format(odd, SourceOptions(format="txt")) == "txt"
    with pytest.raises(InputError, match="--format"):
        shard_format(odd, SourceOptions())
    with pytest.raises(InputError, match="--separator"):
        shard_format(jsonl, SourceOptions(separator="\n\n"))
    with pytest.raises(InputError, match="--keep-field "):
        shard_format(txt, SourceOptions(keep_fields=("lang",)))


@pytest.mark.parametrize("relpath, expected", [
    ("en-000-of-012.jsonl.gz", "en-000-of-012.parquet"),
    ("a/b.txt", "a/b.parquet"),
    ("x/y.parquet", "x/y.parquet"),
    ("data.json.zst", "data.parquet"),
    ("raw.bz2", "raw.parquet"),
    ("v1.2/notes.csv", "v1.2/notes.csv.parquet"),
])
def test_output_name(relpath, expected):
    assert output_name(relpath) == expected


def test_output_name_suffix():
    assert output_name("a/b.jsonl", ".rejected.jsonl") == "a/b.rejected.jsonl"


def test_rejected_layout():
    rej = Rejected("s3://b/x.jsonl", 3, BAD_JSON, "Expecting value", None)
    err = ShardError("s3://b/y.jsonl.gz", 41, TRUNCATED_OR_CORRUPT, "EOFError: ended early")
    assert REJECTED_SCHEMA_VERSION == 1
    assert tuple(rejected_to_json(rej)) == REJECTED_FIELDS
    assert rejected_to_json(rej) == {"source": "s3://b/x.jsonl", "row": 3, "id": None,
                                     "reason": BAD_JSON, "detail": "Expecting value"}
    assert rejected_to_json(err) == {"source": "s3://b/y.jsonl.gz", "row": 41, "id": None,
                                     "reason": TRUNCATED_OR_CORRUPT, "detail": "EOFError: ended early"}
    assert not set(ROW_REASONS) & set(SHARD_REASONS)


# ---------------------------------------------------------------------------- real corpus

def test_tiny_corpus_matches_json_loads(corpora):
    expected = []
    for path in sorted((corpora / "tiny").glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            expected += [(path.name, json.loads(line)) for line in f if line.strip()]
    options = SourceOptions(keep_fields=("lang", "source"))
    got = [(s.relpath, r) for s in expand_inputs([f"{corpora}/tiny/*.jsonl"])
           for r in read_shard(s, options, chunk_size=4096)]
    assert len(got) == len(expected) == 40
    for (relpath, rec), (name, obj) in zip(got, expected):
        assert isinstance(rec, Record) and relpath == name
        assert (rec.id, rec.text, rec.repaired) == (obj["id"], obj["text"], False)
        assert rec.keep == {"lang": obj["lang"], "source": obj["source"]}


def test_tiny_corpus_same_texts_in_every_format(corpora, tmp_path):
    texts = read_jsonl_texts(corpora / "tiny")
    sep = "\n\x1e\n"                                          # ASCII record separator: in no text
    assert not any(sep in t for t in texts)
    write_parquet(tmp_path / "p" / "tiny.parquet",
                  pa.table({"id": [f"t{i}" for i in range(len(texts))], "text": texts}),
                  row_group_size=7)
    write(tmp_path / "s" / "tiny.txt.zst", COMPRESSORS[".zst"](sep.join(texts).encode()))
    write(tmp_path / "j" / "tiny.jsonl.gz", gzip.compress(jsonl_bytes({"text": t} for t in texts)))

    def texts_of(pattern, **options):
        (shard,) = expand_inputs([str(tmp_path / pattern)])
        items = list(read_shard(shard, SourceOptions(**options), chunk_size=999))
        assert all(isinstance(r, Record) for r in items)
        return [r.text for r in items]

    assert texts_of("p/*.parquet") == texts
    assert texts_of("s/*.txt.zst", separator=sep) == texts
    assert texts_of("j/*.jsonl.gz") == texts
    # A record per line: the non-blank lines of the texts, in order.
    write(tmp_path / "l" / "tiny.txt", "\n".join(texts).encode())
    lines = [ln.removesuffix("\r") for t in texts for ln in t.split("\n") if ln.strip()]
    assert texts_of("l/*.txt") == lines


# ---------------------------------------------------------------------------- JSONL read from bytes

JSONL_CORNERS = [
    b'{"id": "a", "text": "hi\\nthere \\u00e9 \\ud83d\\ude00 \\"q\\" \\/ \\t \\b\\f\\r\\\\"}',
    b'{"text":"x"}', b' {"text" : "x" , "id":"y" } \r', b'\t{"text":"x"}\n', b'{"text":"x","id":1}',
    b'{"text":"x","id":null}', b'{"text":"x","id":["a",1]}', b'{"text":null}', b'{"text":12}',
    b'{"text":"x","meta":{"a":[1,2,{"b":null}]},"n":-1.5e3,"t":true,"f":false,"z":0}',
    b'{"text":"x",}', b'{"text":"x"} x', b'{"text":"x"}{}', b'{"text":"\\ud800"}', b'{"text":"\\udc00x"}',
    b'{"text":"\\ud800\\u0041"}', b'{"id":"\\udfff","text":"x"}', b'{"text":"a\xff"}', b'{"text":"x","o":"\xc0\xaf"}',
    b'{"text":"\xed\xa0\x80"}', b'{"text":"\xf4\x90\x80\x80"}', b'{"text":"\xe2\x82"}', b'{"te\\u0078t":"x"}',
    b'{"text":"x","n":NaN}', b'{"text":"x","n":-Infinity}', b'{"text":"caf\xc3\xa9","text":"second"}',
    b'{"text":"a","text":1}', b'{"id":"a","id":"b","text":"t"}', b'{}', b'[1]', b'"text"', b'{"text":"a\tb"}',
    b'{"id":"x"}', b'{"text":""}', b'{"text":"\\u0000\\u001f\\u007f\\u0080\\u2028\\uffff"}', b'{"text":"\\x"}',
    b'{"text":"\\u12"}', b'{"text":"abc', b'{"text" "x"}', b'{text:"x"}', b'{"text":"x" "id":"y"}',
    b'{"text":"x","n":01}', b'{"text":"x","n":1.}', b'{"text":"x","n":.5}', b'{"text":"x","n":+1}',
    b'{"text":"x","a":[1,]}', b'{"text":"x","a":' + b'[' * 600 + b']' * 600 + b'}', b'{"text":"x","t":tru}',
    b'\xef\xbb\xbf{"text":"x"}', b'{"text":"\xf0\x9f\x98\x80 \xe4\xb8\xad"}', b'{"text":"x","id":"\\u00e9\xc3\xa9"}',
    # Long lines (read without the GIL): plain, escaped, with bad bytes or bad JSON far from the start.
    b'{"id":"long","text":"' + b'abc\\n\xc3\xa9 \\u00e9\\ud83d\\ude00 ' * 600 + b'"}',
    b'{"text":"' + b'x' * 9000 + b'","id":"y"}', b'{"text":"' + b'x' * 9000 + b'\xff"}',
    b'{"text":"' + b'x' * 9000 + b'","n":[1,2,}', b'{"text":"' + b'x' * 9000 + b'\\ud800"}',
    # Long texts of every str kind, at each kind's edges (their str is sized, then filled without the GIL).
    *(b'{"text":"' + (prefix + ch * 3000).encode() + b'","id":"k"}'
      for prefix in ("", "plain ascii first ") for ch in ("\x7f", "\x80", "\xff", "\u0100", "caf\u00e9 ", "\u2019",
                                                           "\uffff", "\U00010000", "\U0010ffff", "a\U0001f600")),
    b'{"text":"' + b'\\u00ff' * 1000 + b'"}', b'{"text":"' + b'\\ud83d\\ude00x' * 700 + b'"}',
]


@pytest.mark.parametrize("text_field, id_field", [("text", "id"), ("text", None), ("id", "id"), ("te\u00e9", "id")])
def test_jsonl_records_from_bytes_equal_json_loads(text_field, id_field):
    """`jsonl_record` (the compiled read of a line's text and id where it may) gives exactly what
    reading the line with json.loads gives, on lines of every kind: plain, escaped, invalid UTF-8,
    bad JSON, NaN, deep nesting, repeated keys, lone surrogates."""
    if sources._JSONL_TEXT_ID is None:
        pytest.skip("bpe_ops._native not built")
    shard = Shard("mem/a.jsonl", "a.jsonl", 0)
    lines = JSONL_CORNERS + [line.replace(b'"text"', '"te\u00e9"'.encode()) for line in JSONL_CORNERS]
    fast = 0
    for policy in ("replace", "reject"):
        options = SourceOptions(text_field=text_field, id_field=id_field, invalid_utf8=policy)
        for row, line in enumerate(lines):
            got = sources.jsonl_record(line, 7, row, shard, options)
            assert got == sources._jsonl_record_loaded(line, 7, row, shard, options), line
            fast += sources._JSONL_TEXT_ID(line, text_field, id_field) is not None
    assert fast >= 10         # the compiled read took many of them



def _text_read_from(payload: bytes) -> str | None:
    """The text the compiled read gives for a line whose text member holds `payload` as it is (None:
    the line is left to json.loads)."""
    read = sources._JSONL_TEXT_ID(b'{"text":"' + payload + b'"}', "text", None)
    return None if read is None else read[0]


def _plain(payload: bytes) -> bytes:
    """`payload` with nothing that ends or escapes a JSON string: no '"', no '\\', no control byte."""
    return bytes(b"x"[0] if c in b'"\\' or c < 0x20 else c for c in payload)


def _decoded(payload: bytes) -> str | None:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_a_text_s_utf8_is_judged_as_python_s_decoder_judges_it_at_every_place():
    """A line's text is read only where it is UTF-8 as Python's strict decoder takes it (no overlong
    form, surrogate, code point past U+10FFFF or sequence cut short), checked 32 bytes at a time
    after its first 64 non-ASCII bytes where the machine has AVX2: every lead byte, then a byte of
    each range that decides the pair's errors, then none to two continuation bytes or ASCII, at places
    around the blocks' edges, at the text's end or before more of it; each is read, and read as
    the decoder reads it, exactly where the decoder takes it."""
    if sources._JSONL_TEXT_ID is None:
        pytest.skip("bpe_ops._native not built")
    seconds = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xF4, 0xFF]
    line_start = len(b'{"text":"') + len("é".encode())     # the payload's bytes before its ASCII run
    read = refused = 0
    for lead in range(0x80, 0x100):
        for second in seconds:
            for tail in (b"", b"\x80", b"\xbf\xbf", b"\x80a", b"a"):
                sequence = bytes([lead, second]) + tail
                # the lead byte 1 to 3 bytes before a 32-byte block's end, at its end, or after it
                for place in (93, 94, 95, 96, 97, 100, 124, 127):
                    for after in (b"", "中".encode() * 20):
                        payload = "é".encode() + b"a" * (place - line_start) + sequence + after
                        expected = _decoded(payload)
                        assert _text_read_from(payload) == expected, (sequence, place, after[:3])
                        read += expected is not None
                        refused += expected is None
    assert read > 1_000 and refused > 100_000


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(st.sampled_from(["a", "\u00e9", "\u4e2d", "\U0001f600", "\u0800", "\uffff", "\U0010ffff",
                                        "\ud7ff", "\ue000"]), max_size=120),
       damage=st.sampled_from(["none", "byte", "cut", "insert"]), where=st.integers(0, 10_000),
       byte=st.integers(0x80, 0xFF), ascii_before=st.sampled_from([0, 1, 31, 63, 64, 65, 200]))
def test_a_text_s_utf8_with_damage_anywhere_is_judged_as_python_s_decoder_judges_it(pieces, damage, where, byte,
                                                                                      ascii_before):
    """Texts of characters of every UTF-8 length, whole or with one byte changed, cut or added
    anywhere: the compiled read takes exactly the texts Python's strict decoder takes, as it reads them."""
    if sources._JSONL_TEXT_ID is None:
        pytest.skip("bpe_ops._native not built")
    payload = b"a" * ascii_before + "".join(pieces).encode()
    at = where % (len(payload) + 1)
    if damage == "byte" and at < len(payload):
        payload = payload[:at] + bytes([byte]) + payload[at + 1:]
    elif damage == "cut":
        payload = payload[:at]
    elif damage == "insert":
        payload = payload[:at] + bytes([byte]) + payload[at:]
    payload = _plain(payload)
    assert _text_read_from(payload) == _decoded(payload)

# Lines around the corners above: blank ones (every byte bytes.strip() drops, a lone CR, a BOM
# alone), CRLF endings, a BOM starting a line, and a line past --max-record-bytes.
STREAM_EXTRAS = [b"", b"   ", b" \t\x0b\x0c\r", b"\r", b"\xef\xbb\xbf", b"\xef\xbb\xbf  \r", b'{"text":"crlf"}\r',
                 b'\xef\xbb\xbf{"text":"bom","id":"b"}\r', b"\x85", b'{"text":"' + b"y" * 300 + b'"}', b"[1]\r"]


@pytest.mark.parametrize("chunk_size", [5, 64, 1 << 20])
@pytest.mark.parametrize("text_field, id_field", [("text", "id"), ("text", None), ("te\u00e9", "id")])
def test_jsonl_streams_read_in_batches_equal_line_by_line(monkeypatch, chunk_size, text_field, id_field):
    """`_read_jsonl` reads the lines a read completes in one compiled pass
    (`_native.jsonl_lines_fields`); it yields exactly the records and rejections (rows, offsets in
    the details, CR and BOM dropped, blank lines skipped) that reading line by line gives."""
    if sources._JSONL_LINES_FIELDS is None:
        pytest.skip("bpe_ops._native not built")
    lines = [line.replace(b'"text"', f'"{text_field}"'.encode()) for line in JSONL_CORNERS + STREAM_EXTRAS]
    data = b"\xef\xbb\xbf" + b"\n".join(lines + lines[::-1])      # a BOM starting the file, no final LF
    shard = Shard("mem/a.jsonl", "a.jsonl", 0)
    for policy in ("replace", "reject"):
        options = SourceOptions(text_field=text_field, id_field=id_field, invalid_utf8=policy, max_record_bytes=200)
        got = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size))
        with monkeypatch.context() as m:
            m.setattr(sources, "_JSONL_LINES_FIELDS", None)
            expected = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size))
        assert got == expected
        assert sum(isinstance(item, Record) for item in got) >= 20
        assert any(isinstance(item, Rejected) and item.reason == "record_too_large" for item in got)
        # Batched: the same items in the same order, the records a read completes as non-empty lists.
        batched = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size, batched=True))
        assert [x for item in batched for x in (item if type(item) in sources.RUNS else [item])] == got
        assert all(len(item) and all(type(r) is Record for r in item) for item in batched if type(item) in sources.RUNS)
        assert not any(type(item) is Record for item in batched)
    batch = [(0, b" \t"), (3, b'{"text":"a","id":"i"}\r'), (9, b"{bad"), (20, sources.Oversized(20, 999))]
    assert sources._JSONL_LINES_FIELDS(batch, "text", "id") == [None, ("a", "i"), True, True]


@pytest.mark.parametrize("chunk_size", [5, 64, 4096, 1 << 16])
@pytest.mark.parametrize("text_field, id_field", [("text", "id"), ("text", None), ("id", "id")])
def test_blocks_of_lines_read_as_their_lines_one_by_one(monkeypatch, chunk_size, text_field, id_field):
    """The lines a read completes, handed to `_native.jsonl_block` as one block of bytes (texts and ids
    back as two columns, their str objects filled without the GIL), give the records and rejections
    of reading the same lines one by one and of the per-line batch (`jsonl_lines_fields`): rows,
    ids, offsets in the details, every str kind, escapes, CRLF, BOMs, blank and oversized lines."""
    if sources._JSONL_BLOCK is None:
        pytest.skip("bpe_ops._native not built")
    corners = [line.replace(b'"text"', f'"{text_field}"'.encode()) for line in JSONL_CORNERS + STREAM_EXTRAS]
    oversized = b'{"%s":"%s"}' % (text_field.encode(), b"o" * 30_000)
    data = (b"\n".join(corners * 3 + [oversized] + corners[::-1]) + b"\n" +
            b'{"%s":"last, no LF"}' % text_field.encode())
    shard = Shard("mem/b.jsonl", "b.jsonl", 0)
    split = list(sources._split_batches(io.BytesIO(data), b"\n", chunk_size, 20_000, blocks=True))
    assert sum(type(b) is sources.LineBlock for b in split) >= (3 if chunk_size < len(data) // 4 else 1)
    for policy in ("replace", "reject"):
        options = SourceOptions(text_field=text_field, id_field=id_field, invalid_utf8=policy,
                                max_record_bytes=20_000)
        got = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size, batched=True))
        with monkeypatch.context() as m:
            m.setattr(sources, "_JSONL_BLOCK", None)           # the per-line batches
            per_line = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size, batched=True))
            m.setattr(sources, "_JSONL_LINES_FIELDS", None)    # line by line, json.loads the specification
            one_by_one = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size))
        flat = [x for item in got for x in (item if type(item) in sources.RUNS else [item])]
        assert flat == [x for item in per_line for x in (item if type(item) in sources.RUNS else [item])] == one_by_one
        assert [x.row for x in flat] == list(range(len(flat)))
        assert all(len(item) and all(type(r) is Record for r in item) for item in got if type(item) in sources.RUNS)
        assert sum(isinstance(x, Rejected) and x.reason == "record_too_large" for x in flat) == 1
        assert sum(type(x) is Record and len(x.text) > 2000 and max(x.text) > "\uffff" for x in flat) >= 4
        unbatched = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size))
        assert unbatched == one_by_one
        # Kept as the UTF-8 read: a block's runs hold `Utf8Texts` (the same records, characters counted
        # as str counts them); a per-line batch's runs stay str.
        as_utf8 = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size, batched=True, utf8=True))
        assert [x for item in as_utf8 for x in (item if type(item) in sources.RUNS else [item])] == one_by_one
        utf8_runs = [item.texts for item in as_utf8 if type(item) is RecordRun and type(item.texts) is Utf8Texts]
        assert len(utf8_runs) >= (2 if chunk_size < len(data) // 4 else 1)
        assert all(texts.chars.tolist() == list(map(len, texts)) for texts in utf8_runs)


def test_a_block_s_columns_name_the_lines_python_reads():
    """`jsonl_block`'s own answer: a text (and id) per row, None for a row Python reads, and for those
    the row, the line's offset and its bytes (or its length, past the limit); blank lines no row."""
    if sources._JSONL_BLOCK is None:
        pytest.skip("bpe_ops._native not built")
    data = (b'{"text":"a\\u00e9","id":"x"}\r\n \n{"text":"p"}\n{bad}\n\xef\xbb\xbf{"text":"bom"}\n'
            b'{"text":"' + b"z" * 40 + b'"}\n{"text":"unfinished')
    end, bad, long = data.rfind(b"\n"), data.index(b"{bad}"), data.index(b'{"text":"z')
    assert sources._JSONL_BLOCK(data, end, "text", "id", 30) == (
        ["a\u00e9", "p", None, "bom", None], ["x", None, None, None, None],
        [(2, bad, b"{bad}"), (4, long, 51)])
    assert sources._JSONL_BLOCK(data, end, "text", None, -1)[1:] == (None, [(2, bad, b"{bad}")])
    assert sources._JSONL_BLOCK(b"", 0, "text", "id", -1) == ([], [], [])
    with pytest.raises(ValueError, match="within data"):
        sources._JSONL_BLOCK(b"ab", 3, "text", "id", -1)
    # Lines that start further into the data (`begin`: a read whose first bytes end another line):
    # the same columns, the offsets still where the lines are in the data.
    before = b'{"text":"not this one"}\n{"te'
    shifted = len(before)
    assert sources._JSONL_BLOCK(before + data, shifted + end, "text", "id", 30, shifted) == (
        ["a\u00e9", "p", None, "bom", None], ["x", None, None, None, None],
        [(2, shifted + bad, b"{bad}"), (4, shifted + long, 51)])
    assert sources._JSONL_BLOCK(data, end, "text", "id", 30, end) == ([], [], [])       # no line: no row
    with pytest.raises(ValueError, match="begin first"):
        sources._JSONL_BLOCK(data, 3, "text", "id", -1, 4)


def test_a_block_s_strs_of_every_kind_with_ascii_runs_of_every_length():
    """The texts' strs are filled from their UTF-8 with runs of ASCII eight bytes at a time: runs of 0
    to 20 ASCII characters between characters of each str kind (Latin-1, two-byte, four-byte), at a
    line's start and end, are the str json.loads gives."""
    if sources._JSONL_BLOCK is None:
        pytest.skip("bpe_ops._native not built")
    texts = []
    for wide in ("é", "’", "中", "😀", "ÿ"):
        for n in range(21):
            run = "abcdefghijklmnopqrstu"[:n]
            texts += [run + wide + run, wide + run, run + wide, wide + run + wide + run[::-1] + wide, run]
    lines = [json.dumps({"text": t}, ensure_ascii=bool(k % 2)).encode() for k, t in enumerate(texts)]
    data = b"\n".join(lines) + b"\n"
    got, _, odd = sources._JSONL_BLOCK(data, len(data) - 1, "text", None, -1)
    assert odd == [] and got == texts


def test_a_block_reads_what_ends_a_run_of_plain_bytes_wherever_it_falls():
    """The texts are read sixteen bytes at a time and the first byte that ends a run of plain bytes
    (a '"', an escape, a raw control character) is found by a mask: each of them at every place of
    two blocks, after runs of ASCII, of wide characters and of both, followed by another member whose
    wide value (after the closing quote) must not change the text's str kind, and lines longer than
    4,080 bytes of continuation bytes (the count of 16 byte lanes is summed before one overflows);
    the records and rejections are those of json.loads."""
    if sources._JSONL_BLOCK is None:
        pytest.skip("bpe_ops._native not built")
    enders = [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\ud83d\\ude00", b"\\/", b"\t", b"\x1f", b"\\q"]
    runs = [b"a" * 40, "é’".encode() * 8 + b"x" * 16, "😀".encode() * 10]
    lines = []
    for run in runs:
        for place in range(33):
            if place < len(run) and run[place] & 0xC0 == 0x80:
                continue                        # not a character's start
            for ender in enders:
                lines.append(b'{"text":"' + run[:place] + ender + run[place:] + b'","wide":"\xe4\xb8\xad\xf0\x9f\x98\x80"}')
    lines += [b'{"text":"' + "é".encode() * 5000 + b'"}', b'{"text":"' + "中".encode() * 3000 + b'x"}',
              b'{"text":"' + b"x" * 4100 + "ÿ".encode() + b'"}']
    data = b"\n".join(lines) + b"\n"
    texts, _, odd = sources._JSONL_BLOCK(data, len(data) - 1, "text", None, -1)
    rejected, loaded = {row for row, _, _ in odd}, []
    for row, line in enumerate(lines):
        try:
            loaded.append(json.loads(line)["text"])
        except json.JSONDecodeError:            # a raw tab or 0x1f, the bad escape \q: Python reads the row
            loaded.append(None)
    assert texts == loaded and rejected == {row for row, text in enumerate(loaded) if text is None}
    assert len(rejected) == 3 * len(lines[:-3]) // len(enders)


@pytest.mark.parametrize("chunk_size", [7, 200, 1 << 20])
def test_batches_of_good_lines_become_the_records_read_line_by_line(monkeypatch, chunk_size):
    """A batch whose every line the compiled pass reads becomes its records in one call
    (`_read_records`): the same records, rows and ids (given, or `relpath:row`) as reading line by
    line, blank lines taking no row, a read's pieces offset by running sums (`_split_batches`)."""
    if sources._JSONL_LINES_FIELDS is None:
        pytest.skip("bpe_ops._native not built")
    lines = [b'{"id": "a%d", "text": "t\u00e9xt %d"}' % (k, k) if k % 3 else b'{"text": "no id %d"}\r' % k
             for k in range(300)]
    lines[40:40] = [b"", b"  ", b"\r"]
    data = b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n"
    shard = Shard("mem/g.jsonl", "g.jsonl", 0)
    options = SourceOptions()
    batched = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size, batched=True))
    with monkeypatch.context() as m:
        m.setattr(sources, "_JSONL_LINES_FIELDS", None)
        expected = list(sources._read_jsonl(io.BytesIO(data), shard, options, chunk_size))
    got = [r for batch in batched for r in batch]
    assert got == expected
    assert [r.row for r in got] == list(range(300))
    assert got[0].id == "g.jsonl:0" and got[1].id == "a1" and got[297].id == "g.jsonl:297"
    assert got[0].text == "no id 0" and got[1].text == "t\u00e9xt 1"
    split = [piece for batch in sources._split_batches(io.BytesIO(data), b"\n", chunk_size) for piece in batch]
    assert split == split_reference(data, b"\n", None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["text", "id", "x", "t\u00e9"]),
                       st.one_of(st.text(), st.integers(), st.none(), st.floats(allow_nan=True),
                                 st.lists(st.text(max_size=3), max_size=3)), max_size=4),
       st.booleans(), st.booleans())
def test_jsonl_records_from_bytes_equal_json_loads_generated(obj, ascii_only, spaced):
    line = json.dumps(obj, ensure_ascii=ascii_only, separators=(", ", " : ") if spaced else (",", ":"))
    raw = line.encode("utf-8", "surrogatepass")
    shard = Shard("mem/a.jsonl", "a.jsonl", 0)
    options = SourceOptions()
    assert sources.jsonl_record(raw, 0, 3, shard, options) == sources._jsonl_record_loaded(raw, 0, 3, shard, options)


def split_reference(data: bytes, sep: bytes, limit: int | None) -> list:
    """The pieces of `data` between separators with their offsets, as `_split_stream` gives them from
    a stream read in any chunks: a BOM starting the data dropped, a piece past `limit` an Oversized."""
    out, start = [], 0
    for piece in data.split(sep):
        length = len(piece)
        if limit is not None and length > limit:
            out.append((start, sources.Oversized(start, length)))
        else:
            if start == 0 and piece.startswith(b"\xef\xbb\xbf"):
                piece, start, length = piece[3:], 3, length - 3
            out.append((start, piece))
        start += length + len(sep)
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\xef\xbb\xbf", b"--", b"x" * 7]), max_size=40),
       st.sampled_from([b"\n", b"\r\n", b"--"]), st.integers(1, 24), st.one_of(st.none(), st.integers(0, 12)))
def test_split_batches_give_the_pieces_of_the_whole_data(parts, sep, chunk_size, limit):
    """`_split_batches`, reading the data `chunk_size` bytes at a time, gives in order exactly the
    pieces splitting the whole data gives: offsets, the BOM, oversized pieces (read anywhere: first
    in a read, wholly inside one, spanning several)."""
    data = b"".join(parts)
    got = [piece for batch in sources._split_batches(io.BytesIO(data), sep, chunk_size, limit) for piece in batch]
    assert got == split_reference(data, sep, limit)


@pytest.mark.parametrize("fail_fast", [False, True])
@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("ext", [".jsonl", ".txt"])
def test_a_shard_read_in_batches_gives_the_records_and_account_of_reading_it_record_by_record(
        tmp_path, ext, checked, fail_fast):
    # ShardReader.batches (tokenize's) and iterating it (the other commands') set aside, list and
    # count the same rows: records in order, rejected rows, a kept field's check, fail-fast.
    from pipelines.core.errors import ShardFailure
    from pipelines.datasets.shards import ShardReader

    lines = [b'{"id": "a", "text": "one", "n": 1}', b'{"id": "b", "text": "two", "n": "x"}', b"{bad",
             b"", b'{"text": "' + b"z" * 300 + b'"}', b'{"id": "c", "text": "three \u00e9", "n": 3}'] * 40
    path = write(tmp_path / f"s{ext}", b"\n".join(lines) + b"\n")
    options = SourceOptions(max_record_bytes=200)
    check = (lambda r: ("kept_field_type", "not two") if "two" in r.text else None) if checked else None

    def read(batched: bool):
        reader = ShardReader(shard_of(path), options, str(tmp_path / f"out-{batched}"), fail_fast, check=check)
        try:
            records = ([r for batch in reader.batches() for r in batch] if batched else list(reader))
        except ShardFailure as exc:
            return str(exc)
        account = reader.finish()
        rejected = (tmp_path / f"out-{batched}" / "rejected" / "s.jsonl")
        return records, vars(account), rejected.read_text() if rejected.exists() else None

    expected = read(False)
    assert read(True) == expected
    if not fail_fast:
        records, account, rejected = expected
        assert account["records"] == len(records) > 0
        if ext == ".jsonl":
            assert [r.id for r in records][:2] == ["a", "b" if not check else "c"]
            assert account["records_read"] > len(records)
        assert rejected.count("\n") == sum(account["rejected_by_reason"].values()) > 0
    else:
        # the first row set aside raised
        first = "kept_field_type" if checked else "record_too_large" if ext == ".txt" else "bad_json"
        assert "--fail-fast" in expected and first in expected, expected
