"""Kept fields (`tokenize --keep-field`) are typed columns, one schema for the whole dataset: a string
stays a string (DuckDB's `WHERE pkg = 'git-man'` finds it), a number a number; JSON text only for
nested values and fields whose values mix kinds. Files of the earlier layout (every kept field as JSON
text) are still read by `stats` and `pack`."""
import itertools
import json

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import pack, stats_cmd, tokenize
from pipelines.core.errors import UserError
from schemas import tables

pytestmark = pytest.mark.slow

KEEP = ["pkg", "n", "x", "flag", "meta", "mix", "never"]


@pytest.fixture(scope="module")
def tokenizer_json(trained_tokenizer):
    return str(trained_tokenizer("sample", 300) / "tokenizer.json")


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def corpus(folder):
    """Shard a: strings, ints, bools, nested values, a field mixing a string and a number; shard b: a
    float where a has ints, and only nulls or nothing for the others."""
    write_jsonl(folder / "a.jsonl", [
        {"id": "a0", "text": "git manual pages", "pkg": "git-man", "n": 1, "x": 1, "flag": True,
         "meta": {"deps": ["perl", "less"]}, "mix": "one", "never": None},
        {"id": "a1", "text": "the shell", "pkg": "bash", "n": 2, "x": 2, "flag": False, "meta": [1, 2], "mix": 2}])
    write_jsonl(folder / "b.jsonl", [
        {"id": "b0", "text": "more git", "pkg": "git-man", "n": None, "x": 2.5, "flag": None, "meta": None}])


def run(tokenizer_json, folder, out, *keep):
    return tokenize.run(["--tokenizer", tokenizer_json, "--input", str(folder / "*.jsonl"), "--output", str(out),
                         "--quiet", *[a for k in keep for a in ("--keep-field", k)]])


def kept_schema(path):
    schema = pq.read_schema(path)
    return [(f.name, f.type, f.metadata) for f in schema if f.name in KEEP]


def test_kept_fields_are_typed_columns_with_one_schema_for_every_shard(tmp_path, tokenizer_json):
    corpus(tmp_path / "in")
    run(tokenizer_json, tmp_path / "in", tmp_path / "out", *KEEP)
    a, b = tmp_path / "out" / "a.parquet", tmp_path / "out" / "b.parquet"
    assert kept_schema(a) == kept_schema(b)
    types = {name: (t, meta[tables.KEPT_TYPE_KEY].decode()) for name, t, meta in kept_schema(a)}
    assert types == {"pkg": (pa.string(), "string"), "n": (pa.int64(), "int64"), "x": (pa.float64(), "float64"),
                     "flag": (pa.bool_(), "bool"), "meta": (pa.string(), "json"), "mix": (pa.string(), "json"),
                     "never": (pa.string(), "string")}
    rows = pq.read_table(a).to_pylist() + pq.read_table(b).to_pylist()
    assert [r["pkg"] for r in rows] == ["git-man", "bash", "git-man"]
    assert [r["n"] for r in rows] == [1, 2, None]
    assert [r["x"] for r in rows] == [1.0, 2.0, 2.5]
    assert [r["flag"] for r in rows] == [True, False, None]
    assert [r["meta"] for r in rows] == ['{"deps":["perl","less"]}', "[1,2]", None]
    assert [r["mix"] for r in rows] == ['"one"', "2", None]
    found = duckdb.sql(f"SELECT id FROM read_parquet('{tmp_path / 'out'}/*.parquet') WHERE pkg = 'git-man' "
                       f"ORDER BY id").fetchall()
    assert found == [("a0",), ("b0",)]
    assert duckdb.sql(f"SELECT sum(n) FROM read_parquet('{tmp_path / 'out'}/*.parquet')").fetchall() == [(3,)]


def test_a_shard_that_widens_a_type_redoes_every_shard_and_the_same_inputs_reuse_them(tmp_path, tokenizer_json):
    corpus(tmp_path / "in")
    run(tokenizer_json, tmp_path / "in", tmp_path / "out", "n", "pkg")
    a = tmp_path / "out" / "a.parquet"
    first = a.stat().st_mtime_ns
    run(tokenizer_json, tmp_path / "in", tmp_path / "out", "n", "pkg")
    assert a.stat().st_mtime_ns == first                       # same inputs, same types: reused
    write_jsonl(tmp_path / "in" / "c.jsonl", [{"id": "c0", "text": "x", "n": "three"}])
    run(tokenizer_json, tmp_path / "in", tmp_path / "out", "n", "pkg")
    assert a.stat().st_mtime_ns != first                       # n is now json in every file
    assert len({tuple(map(str, kept_schema(tmp_path / "out" / f"{s}.parquet"))) for s in "abc"}) == 1
    assert pq.read_table(a).column("n").to_pylist() == ["1", "2"]


def test_a_declared_type_fixes_the_column_and_rejects_a_value_that_does_not_fit(tmp_path, tokenizer_json):
    corpus(tmp_path / "in")
    stats = run(tokenizer_json, tmp_path / "in", tmp_path / "out", "mix:string", "x:float64", "pkg:json")
    assert stats["account"]["records"]["rejected_by_reason"] == {"kept_field_type": 1}
    rejected = json.loads((tmp_path / "out" / "rejected" / "a.jsonl").read_text())
    assert rejected["id"] == "a1" and "'mix' holds a int64 value, not string" in rejected["detail"]
    table = pq.read_table(tmp_path / "out" / "a.parquet")
    assert table.column("mix").to_pylist() == ["one"] and table.column("pkg").to_pylist() == ['"git-man"']


def test_watching_needs_every_kept_field_typed(tmp_path, tokenizer_json):
    corpus(tmp_path / "in")
    with pytest.raises(UserError, match="--watch: give --keep-field pkg its type"):
        tokenize.run(["--tokenizer", tokenizer_json, "--input", str(tmp_path / "in" / "*.jsonl"), "--output",
                      str(tmp_path / "out"), "--watch", "--stop-when-idle", "1s", "--keep-field", "n:int64",
                      "--keep-field", "pkg"])


def test_keep_field_names_and_types_are_parsed():
    assert tokenize.parse_keep_fields(["a", "b:int64", "c:d", "e:f:json", "b:int64"]) == {
        "a": None, "b": "int64", "c:d": None, "e:f": "json"}
    with pytest.raises(UserError, match="given twice"):
        tokenize.parse_keep_fields(["a:int64", "a:string"])


@pytest.mark.parametrize("kinds, expected", [
    ({"int64"}, "int64"), ({"int64", "null"}, "int64"), ({"int64", "float64"}, "float64"), ({"null"}, "string"),
    (set(), "string"), ({"string", "int64"}, "json"), ({"bool", "int64"}, "json"), ({"json"}, "json"),
    ({"string"}, "string"), ({"bool"}, "bool")])
def test_the_type_rule_does_not_depend_on_the_order_of_values(kinds, expected):
    for order in itertools.permutations(sorted(kinds)):
        assert tables.kept_type(order) == expected
    assert tables.value_kind(True) == "bool" and tables.value_kind(2**63) == "json"


def as_version_1(path):
    """Rewrite a token Parquet file as the first layout wrote it: every kept column JSON text, no
    field metadata, schema version 1."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"tokenbeam.schema_version"] = b"1"
    columns = [pa.array([None if v is None else json.dumps(v) for v in table.column(f.name).to_pylist()], pa.string())
               if f.name in KEEP else table.column(f.name) for f in table.schema]
    fields = [pa.field(f.name, pa.string()) if f.name in KEEP else f for f in table.schema]
    footer = pq.read_metadata(path).metadata
    with pq.ParquetWriter(path, pa.schema(fields, metadata=meta)) as writer:
        writer.write_table(pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=meta)))
        writer.add_key_value_metadata({tables.SHARD_KEY: footer[tables.SHARD_KEY.encode()].decode()})


def test_files_of_the_first_layout_are_still_read_by_stats_and_pack(tmp_path, tokenizer_json):
    corpus(tmp_path / "in")
    run(tokenizer_json, tmp_path / "in", tmp_path / "out", "pkg")
    new = tmp_path / "new" / "stats.json"
    assert stats_cmd.main([str(tmp_path / "out" / "*.parquet"), "--tokenizer", tokenizer_json, "--group-field", "pkg",
                           "--output", str(new), "--quiet"]) == 0
    for f in ("a", "b"):
        as_version_1(tmp_path / "out" / f"{f}.parquet")
    assert pq.read_schema(tmp_path / "out" / "a.parquet").field("pkg").metadata is None
    old = tmp_path / "old" / "stats.json"
    assert stats_cmd.main([str(tmp_path / "out" / "*.parquet"), "--tokenizer", tokenizer_json, "--group-field", "pkg",
                           "--output", str(old), "--quiet"]) == 0
    assert json.loads(old.read_text())["groups"].keys() == json.loads(new.read_text())["groups"].keys() == {
        "git-man", "bash"}
    manifest = pack.run(["--input", str(tmp_path / "out"), "--output", str(tmp_path / "packed"), "--seq-len", "4",
                         "--eos-token", "0", "--quiet"])
    assert manifest["splits"]["train"]["documents"] == 3
