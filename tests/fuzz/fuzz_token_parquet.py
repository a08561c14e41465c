"""Fuzz target: a token Parquet file as `tokenbeam stats` reads it back (`pipelines.stats_cmd.rebuild`,
with --group-field or --window when a recipe asks) and as `tokenbeam pack` checks its inputs
(`pipelines.datasets.pack_inputs.find_inputs`, then the records' last id when the footer says they end with an EOS),
held to tests/fuzz/harness.py's contract. Run from the worktree:

    mkdir -p /tmp/fuzz-token_parquet && python3 tests/fuzz/fuzz_token_parquet.py -max_total_time=600 \
        /tmp/fuzz-token_parquet tests/fuzz/corpus/token_parquet

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py).

An input is either a whole file (it starts with `PAR1`: byte mutations reach Parquet's own footer),
or a recipe (see `build`) for a file pyarrow writes from the seed's rows: the schema metadata, the
footer's key-value metadata (the shard record tokenize leaves there) and changes to the columns, so
that mutations reach what tokenbeam reads from a well-formed Parquet file.
"""
import contextlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from pipelines.datasets import pack_inputs
    from pipelines import stats_cmd
    from schemas import tables  # noqa: F401

CORPUS = Path(__file__).resolve().parent / "corpus"
TOKENIZER = CORPUS / "tokenizer_json" / "trained.json"       # the seeds' tokenizer
ROWS = CORPUS / "token_parquet" / "kept_eos-0.parquet"
ID_TYPES = {"uint16": pa.uint16(), "uint32": pa.uint32(), "int64": pa.int64(), "int8": pa.int8(),
            "string": pa.string(), "float": pa.float32()}


def _change(table: pa.Table, op: str) -> pa.Table:
    """One column change of a recipe's `V` line."""
    name, _, arg = op.partition(":")
    if name == "ids" and arg in ID_TYPES:
        ids = table.column("token_ids").cast(pa.list_(ID_TYPES[arg]), safe=False)
        return table.set_column(table.schema.get_field_index("token_ids"), "token_ids", ids)
    if name in ("string", "int64", "float") and arg in table.column_names:
        target = {"string": pa.string(), "int64": pa.int64(), "float": pa.float64()}[name]
        return table.set_column(table.schema.get_field_index(arg), arg, table.column(arg).cast(target, safe=False))
    if name == "drop" and arg in table.column_names:
        return table.drop_columns([arg])
    if name == "null" and arg in table.column_names:
        column = table.column(arg)
        nulls = pa.nulls(1, column.type)
        return table.set_column(table.schema.get_field_index(arg), pa.field(arg, column.type, nullable=True),
                                pa.concat_arrays([nulls, column.combine_chunks()[1:]]))
    if name == "add" and arg.isdigit():            # every id + arg (ids beyond the vocabulary)
        ids = table.column("token_ids").combine_chunks()
        shifted = pc.add(ids.values.cast(pa.int64()), int(arg)).cast(ids.type.value_type, safe=False)
        return table.set_column(1, "token_ids", pa.ListArray.from_arrays(ids.offsets, shifted))
    if name == "neg" and arg in table.column_names:
        return table.set_column(table.schema.get_field_index(arg), arg,
                                pc.negate(table.column(arg)).cast(table.column(arg).type, safe=False))
    if name == "rows" and arg.isdigit():
        return table.slice(0, int(arg))
    if name == "event_time":
        times = pa.array([None if arg == "null" else 1_700_000_000_000_000 + k * 60_000_000 * 60
                          for k in range(table.num_rows)], tables.EVENT_TIME_TYPE)
        return table.append_column(pa.field(tables.EVENT_TIME_COLUMN, tables.EVENT_TIME_TYPE), times)
    if name == "group":
        return table.append_column(tables.GROUP_COLUMN, pa.array([arg] * table.num_rows, pa.string()))
    return table


_SEED: list = []
# `tokenbeam stats` options a recipe's `A` line adds.
OPTIONS = {"group": ["--group-field", "lang"], "window": ["--window", "1h"]}


def build(recipe: bytes, path: str) -> list[str]:
    """Write the file a recipe describes: lines `S<key>=<value>` (schema metadata; without any, the
    seed's), `F<key>=<value>` (footer metadata), `V<change>` (see `_change`), `G<rows>` (rows per
    row group), `A<option>` (see OPTIONS). Keys and values are taken as Latin-1, so any byte can be
    in them. Returns the options for `tokenbeam stats`."""
    if not _SEED:
        _SEED.append(pq.read_table(ROWS))
    seed = _SEED[0]
    schema_meta, footer, table, group_rows, options = {}, {}, seed, None, []
    for line in recipe.decode("latin-1").split("\n"):
        kind, body = line[:1], line[1:]
        key, _, value = body.partition("=")
        if kind == "S":
            schema_meta[key.encode("latin-1")] = value.encode("latin-1")
        elif kind == "F":
            footer[key] = value
        elif kind == "V":
            table = _change(table, body)
        elif kind == "G" and body.isascii() and body.isdigit():
            # Capped: Arrow takes a C long, and any count above the table's rows is one group.
            group_rows = min(max(1, int(body)), 1 << 20)
        elif kind == "A" and body in OPTIONS:
            options += OPTIONS[body]
    table = table.replace_schema_metadata(schema_meta or seed.schema.metadata)
    with pq.ParquetWriter(path, table.schema) as writer:
        writer.write_table(table, row_group_size=group_rows)
        if footer:
            writer.add_key_value_metadata(footer)
    return options


def check(data: bytes) -> None:
    path, options = harness.scratch("part.parquet", data, folder="token_parquet"), []
    if not data.startswith(b"PAR1"):
        try:
            options = build(data, path)
        except (pa.ArrowException, ValueError, UnicodeEncodeError):
            return                              # a recipe pyarrow cannot write: no file to read
    output = harness.scratch("stats.json", b"", folder="token_parquet_output")
    with contextlib.redirect_stderr(io.StringIO()):
        harness.expect_refusal_or(
            lambda: stats_cmd.rebuild([path, "--tokenizer", str(TOKENIZER), "--output", output, *options]), path)
        files = harness.expect_refusal_or(lambda: pack_inputs.find_inputs([path])[0], path)
        if files and files[0].eos_token is not None:
            harness.expect_refusal_or(lambda: pack_inputs.first_record_last_id(files), path)


if __name__ == "__main__":
    harness.fuzz(check)
