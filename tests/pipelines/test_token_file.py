"""pipelines.steps.token_file: a token Parquet file written by TokenFileWriter (Arrow's columns, our
token_ids chunks, Arrow's footer pointed at them) reads as the same table Arrow writes on its own,
in Arrow and in DuckDB, row group by row group."""
import random

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_ops.flat_ids import FlatIds
from schemas.tables import STAT_COLUMNS, tokens_schema
from pipelines.steps.token_file import TokenFileWriter


def groups_of(rng: random.Random, vocab: int, sizes):
    for g, rows in enumerate(sizes):
        records = [[rng.randrange(vocab) for _ in range(rng.choice([0, 1, 3, rng.randint(0, 2000)]))]
                   for _ in range(rows)]
        yield g, records


def table_of(schema, g, records, token_ids=True):
    columns = {"id": [f"g{g}-{i}" for i in range(len(records))],
               "token_ids": pa.array(records if token_ids else [[]] * len(records), schema.field("token_ids").type)}
    columns.update({c: pa.array([len(r) + k for r in records], pa.int32()) for k, c in enumerate(STAT_COLUMNS)})
    return pa.table(columns, schema=schema)


@pytest.mark.parametrize("vocab, sizes", [(50_000, [5, 300, 1]), (128_000, [2000, 0, 17]), (128_000, [0]),
                                          (300, [1, 1, 1, 1])])
def test_the_file_reads_as_arrow_writes_it(tmp_path, vocab, sizes):
    rng = random.Random(vocab + len(sizes))
    schema = tokens_schema(vocab, metadata={"tokenbeam.vocab_size": str(vocab)})
    ours, arrow = tmp_path / "ours.parquet", tmp_path / "arrow.parquet"
    with open(ours, "wb") as f, TokenFileWriter(f, schema) as writer, \
            pq.ParquetWriter(arrow, schema, compression="zstd", use_dictionary=False) as reference:
        for g, records in groups_of(rng, vocab, sizes):
            half = len(records) // 2
            # The table's own token_ids are not read: the batches are.
            writer.write_row_group(table_of(schema, g, records, token_ids=False),
                                   [FlatIds.of(records[:half]), FlatIds.of(records[half:])])
            reference.write_table(table_of(schema, g, records))
        writer.add_key_value_metadata({"tokenbeam.shard": "{}"})
    got, want = pq.ParquetFile(ours), pq.ParquetFile(arrow)
    assert got.metadata.num_row_groups == want.metadata.num_row_groups == len(sizes)
    for g in range(len(sizes)):
        assert got.read_row_group(g).equals(want.read_row_group(g))
    assert got.schema_arrow.remove_metadata().equals(schema.remove_metadata())
    assert schema.metadata.items() <= got.schema_arrow.metadata.items()
    assert got.metadata.metadata[b"tokenbeam.shard"] == b"{}"
    # A second reader, and a query on the list column itself.
    rows = duckdb.sql(f"SELECT id, token_ids, len(token_ids) FROM read_parquet('{ours}') ORDER BY id").fetchall()
    want_rows = sorted(zip(*(want.read().column(c).to_pylist() for c in ("id", "token_ids", "n_tokens"))))
    assert rows == want_rows


def test_a_row_group_whose_ids_do_not_match_its_rows_is_refused(tmp_path):
    schema = tokens_schema(1000)
    with open(tmp_path / "x.parquet", "wb") as f, TokenFileWriter(f, schema) as writer:
        with pytest.raises(ValueError, match="3 rows given the token ids of 2 records"):
            writer.write_row_group(table_of(schema, 0, [[1], [2], [3]]), [FlatIds.of([[1], [2]])])
        writer.write_row_group(table_of(schema, 0, [[1]]), [FlatIds.of([[1]])])
    assert pq.read_table(tmp_path / "x.parquet").column("token_ids").to_pylist() == [[1]]


def test_an_id_past_uint16_in_a_uint16_column_is_refused(tmp_path):
    schema = tokens_schema(1000)        # list<uint16>
    with open(tmp_path / "x.parquet", "wb") as f, pytest.raises(OverflowError, match="70000"):
        with TokenFileWriter(f, schema) as writer:
            writer.write_row_group(table_of(schema, 0, [[1]]), [FlatIds.of([[70_000]])])


def test_a_writer_left_on_an_error_closes_its_file_unfinished(tmp_path):
    schema = tokens_schema(1000)
    f = open(tmp_path / "x.parquet", "wb")
    with pytest.raises(RuntimeError, match="boom"):
        with TokenFileWriter(f, schema) as writer:
            writer.write_row_group(table_of(schema, 0, [[1]]), [FlatIds.of([[1]])])
            raise RuntimeError("boom")
    assert f.closed
    with pytest.raises(Exception):
        pq.read_table(tmp_path / "x.parquet").column("token_ids").to_pylist()
