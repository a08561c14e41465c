"""pack's steps on their own, without a pipeline: the hashes of a record id, the order of a bucket's
documents, the stream they make, each bucket's place in it, the three DoFns run by hand on a tiny token
Parquet (known rows), the writers, the figures' sum, and the command line checked once into a request.
The whole command, its runners and its outputs are tests/pipelines/test_pack.py's."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.core import command

from pipelines import pack
from pipelines.core.beam_options import beam
from pipelines.core.errors import UserError
from pipelines.datasets.pack_inputs import TokenFile, read_units
from pipelines.steps.pack_output import PackOptions, write_flat, write_megatron, write_parquet
from pipelines.steps.pack_steps import (HASH_BITS, PackBucket, SpillDocuments, SumFigures, WriteFile, check_pieces,
                                  document_order, lay_out, read_pieces, record_hashes, seed_key, spill_url,
                                  stream_layout)
from schemas import pack as layout
from schemas import tables

EOS = 0


def options(**changes) -> PackOptions:
    base = dict(seq_len=4, seed=1234, shuffle=False, eos_id=EOS, bos_id=None, pad_id=None, tail="keep",
                formats=("parquet",), tokens_per_file=4, vocab_size=1000, tokenizer_sha256="a" * 64, buckets=1)
    base.update(changes)
    return PackOptions(**base)


def token_parquet(path, row_groups, vocab_size: int = 1000) -> TokenFile:
    """A token Parquet of `row_groups` ([[(id, ids), ...], ...]: one row group each) and its TokenFile."""
    schema = tables.tokens_schema(vocab_size, (), {tables.TOKENIZER_SHA256_KEY: "a" * 64,
                                                   tables.VOCAB_SIZE_KEY: str(vocab_size)})
    with pq.ParquetWriter(path, schema) as writer:
        for records in row_groups:
            lengths = pa.array([len(ids) for _, ids in records], pa.int32())
            writer.write_table(pa.Table.from_arrays(
                [pa.array([r for r, _ in records], pa.string()),
                 pa.array([ids for _, ids in records], schema.field("token_ids").type)] + [lengths] * 4, schema=schema))
    return TokenFile(str(path), path.stat().st_size, "1", tuple(len(g) for g in row_groups),
                     tuple(sum(len(ids) for _, ids in g) for g in row_groups), "a" * 64, vocab_size, None, "")


def table(orders, ids, lists) -> pa.Table:
    return pa.table({"order": pa.array(orders, pa.int64()), "id": ids,
                     "token_ids": pa.array(lists, pa.list_(pa.uint16()))})


# ---------------------------------------------------------------------------- hashing and order

def test_record_hashes_are_fixed_numbers_of_the_seed_and_the_id():
    assert record_hashes("doc-1", seed_key(1234)) == (5334266118846201058, 8989917830415267640)
    assert record_hashes("doc-1", seed_key(1235)) == (9119741940007252352, 5882919097271623372)
    assert record_hashes("doc-2", seed_key(1234)) == (734915532508494266, 861798198113999958)
    assert all(0 <= h < 1 << HASH_BITS for h in record_hashes("\udcff lone surrogate", seed_key(0)))


def test_documents_sort_by_order_then_id_then_content():
    assert document_order(table([9, 2, 9], ["b", "a", "a"], [[1], [2], [3]]), np.dtype(np.uint16)).tolist() == [1, 2, 0]
    # A repeated record id under one order hash: its ids decide, whichever row came first.
    repeated = table([5, 5, 1], ["x", "x", "y"], [[7, 1], [3, 9], [4]])
    assert document_order(repeated, np.dtype(np.uint16)).tolist() == [2, 1, 0]


# ---------------------------------------------------------------------------- the stream

def test_lay_out_puts_the_separators_around_each_document():
    lists = pa.array([[5, 6], [], [7]], pa.list_(pa.uint16()))
    stream, starts = lay_out(lists, options(bos_id=1, eos_id=0))
    assert stream.tolist() == [1, 5, 6, 0, 1, 0, 1, 7, 0] and starts.tolist() == [0, 4, 6]
    stream, starts = lay_out(lists, options())
    assert stream.tolist() == [5, 6, 0, 0, 7, 0] and starts.tolist() == [0, 3, 4]
    stream, starts = lay_out(lists, options(eos_id=None))      # inputs tokenized with their EOS: none added
    assert stream.tolist() == [5, 6, 7] and starts.tolist() == [0, 2, 2]
    assert stream.dtype == np.uint16


def test_lay_out_reads_a_slice_of_a_list_array_from_its_offsets():
    lists = pa.array([[9], [5, 6], [7]], pa.list_(pa.uint16())).slice(1)
    stream, starts = lay_out(lists, options())
    assert stream.tolist() == [5, 6, 0, 7, 0] and starts.tolist() == [0, 3]


def test_each_bucket_starts_where_the_buckets_before_it_end():
    sizes = {("train", 0): 5, ("train", 2): 3, ("validation", 1): 6}
    assert stream_layout(sizes, options(tail="drop")) == {
        "train": {"offsets": {0: 0, 2: 5}, "length": 8, "end": 8},
        "validation": {"offsets": {1: 0}, "length": 6, "end": 4}}
    assert stream_layout(sizes, options(tail="keep"))["validation"] == {"offsets": {1: 0}, "length": 6, "end": 6}


# ---------------------------------------------------------------------------- the DoFns by hand

def spill(o: PackOptions, output: str, units, threshold: int) -> list:
    """SpillDocuments over `units` in one bundle: its references."""
    step = SpillDocuments(o, output, spill_bytes=1 << 30)
    step.setup()
    step.start_bundle()
    refs = [ref for unit in units for ref in step.process(unit, threshold)]
    return refs + [w.value for w in step.finish_bundle()]


def grouped(pairs) -> dict:
    out: dict = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out


def test_the_steps_by_hand_give_the_known_rows(tmp_path):
    """Two row groups, kept in order (--no-shuffle), EOS 0, rows of 4, a file per row: spilling, packing
    a bucket per row group and writing each file give the rows of the stream 5 6 0 7 | 8 9 0 0, the
    second document cut by the row boundary, the third empty but for its EOS."""
    f = token_parquet(tmp_path / "a.parquet", [[("d1", [5, 6]), ("d2", [7, 8, 9])], [("d3", [])]])
    out = str(tmp_path / "out")
    o = options(tail="keep")
    refs = spill(o, out, read_units([f]), threshold=0)
    # One spill file; a reference per bucket (row group): (file, first batch, batches, documents, stream ids).
    assert sorted((key, r[1:]) for key, r in refs) == [(("train", 0), (0, 1, 2, 7)), (("train", 1), (1, 1, 1, 1))]
    stream = stream_layout({key: r[4] for key, r in refs}, o)
    assert stream["train"] == {"offsets": {0: 0, 1: 7}, "length": 8, "end": 8}
    pieces, figures = [], []
    for key, bucket_refs in sorted(grouped(refs).items()):
        for out_element in PackBucket(o, out).process((key, bucket_refs), stream):
            (figures if isinstance(out_element, beam.pvalue.TaggedOutput) else pieces).append(out_element)
    assert [t.value for t in figures] == [{"train": {"documents": 2, "documents_split": 1, "separators": 2}},
                                          {"train": {"documents": 1, "documents_split": 0, "separators": 1}}]
    # Bucket 0's 7 ids are cut at the file boundary 4; bucket 1's one id (its EOS) starts at 7.
    assert sorted((key, r[0]) for key, r in pieces) == [(("train", 0), 0), (("train", 1), 4), (("train", 1), 7)]
    writer = WriteFile(o, out)
    writer.setup()
    entries = [e for key, file_refs in sorted(grouped(pieces).items())
               for e in writer.process((key, file_refs), stream)]
    assert [(e["index"], e["tokens"], e["rows"]) for e in entries] == [(0, 4, 1), (1, 4, 1)]
    rows = [pq.read_table(tmp_path / "out" / name).to_pylist() for e in entries for name in e["files"]["parquet"]]
    assert [[r["input_ids"] for r in file_rows] for file_rows in rows] == [[[5, 6, 0, 7]], [[8, 9, 0, 0]]]
    assert [[r["doc_starts"] for r in file_rows] for file_rows in rows] == [[[0, 3]], [[3]]]
    assert [[r["row"] for r in file_rows] for file_rows in rows] == [[0], [1]]


def test_the_split_hash_threshold_sends_records_to_validation(tmp_path):
    f = token_parquet(tmp_path / "a.parquet", [[(f"r{n}", [n + 2]) for n in range(6)]])
    every = spill(options(), str(tmp_path / "o"), read_units([f]), threshold=1 << HASH_BITS)
    assert {key for key, _ in every} == {("validation", 0)}
    split_hashes = sorted(record_hashes(f"r{n}", seed_key(1234))[1] for n in range(6))
    two = spill(options(), str(tmp_path / "p"), read_units([f]), threshold=split_hashes[1] + 1)
    assert {key: r[3] for key, r in two} == {("train", 0): 4, ("validation", 0): 2}


def test_shuffled_records_go_to_the_bucket_of_their_order_hash(tmp_path):
    f = token_parquet(tmp_path / "a.parquet", [[(f"r{n}", [n + 2]) for n in range(20)]])
    refs = spill(options(shuffle=True, buckets=4), str(tmp_path / "o"), read_units([f]), threshold=0)
    expected: dict = {}
    for n in range(20):
        bucket = record_hashes(f"r{n}", seed_key(1234))[0] * 4 >> HASH_BITS
        expected[bucket] = expected.get(bucket, 0) + 1
    assert {key[1]: r[3] for key, r in refs} == expected


def test_a_file_whose_pieces_do_not_meet_is_refused():
    check_pieces([(0, "a", 0, 8, 8), (4, "b", 0, 4, 0)], 0, 2, "train file 0")
    with pytest.raises(RuntimeError, match="train file 0: the stream starts at 4, not 0"):
        check_pieces([(4, "b", 0, 4, 0)], 0, 2, "train file 0")
    with pytest.raises(RuntimeError, match="a gap or overlap in the stream at 3"):
        check_pieces([(0, "a", 0, 8, 8), (3, "b", 0, 4, 0)], 0, 2, "train file 0")


def test_read_pieces_gathers_ids_and_starts_and_refuses_a_short_spill_file(tmp_path):
    out = str(tmp_path)
    (tmp_path / layout.SPILL_FOLDER).mkdir()
    data = np.array([5, 6], np.uint16).tobytes() + np.array([0], np.int64).tobytes()
    (tmp_path / layout.SPILL_FOLDER / "p").write_bytes(b"xx" + data)
    ids, starts = read_pieces(out, [(0, "p", 2, 4, 8), (2, "p", 2, 4, 0)], np.dtype(np.uint16))
    assert ids.tolist() == [5, 6, 5, 6] and starts.tolist() == [0]
    assert spill_url(out, "p").endswith(f"{layout.SPILL_FOLDER}/p")
    with pytest.raises(RuntimeError, match="spill file p is short: 12 bytes at 2, not 14"):
        read_pieces(out, [(0, "p", 2, 6, 8)], np.dtype(np.uint16))


def test_sum_figures_adds_nested_counts_in_any_grouping():
    fn = SumFigures()
    parts = [{"train": {"documents": 2}}, {"train": {"documents": 3, "separators": 1}},
             {"validation": {"documents": 1}}]
    one = fn.add_input(fn.add_input(fn.add_input(fn.create_accumulator(), parts[0]), parts[1]), parts[2])
    two = fn.merge_accumulators([fn.add_input(fn.create_accumulator(), parts[2]),
                                 fn.add_input(fn.add_input(fn.create_accumulator(), parts[1]), parts[0])])
    assert fn.extract_output(one) == fn.extract_output(two) == {"train": {"documents": 5, "separators": 1},
                                                                 "validation": {"documents": 1}}


# ---------------------------------------------------------------------------- the writers

IDS = np.array([5, 6, 7, 0, 8, 9, 0], np.uint16)
STARTS = np.array([0, 4], np.int64)


def test_parquet_rows_pad_the_last_row_and_say_where_documents_start(tmp_path):
    url = str(tmp_path / "part.parquet")
    write_parquet(url, IDS, STARTS, 10, "train", 3, options(tail="pad", pad_id=0))
    rows = pq.read_table(url).to_pylist()
    assert [(r["input_ids"], r["doc_starts"], r["n_tokens"]) for r in rows] == [([5, 6, 7, 0], [0], 4),
                                                                               ([8, 9, 0, 0], [0], 3)]
    footer = tables.file_metadata(pq.ParquetFile(url).metadata.metadata)
    assert json.loads(footer[layout.PACK_FILE_KEY]) == {"split": "train", "index": 3, "first_row": 10, "rows": 2}
    write_parquet(url, IDS, STARTS, 0, "train", 0, options(tail="keep"))
    assert pq.read_table(url).column("input_ids").to_pylist()[-1] == [8, 9, 0]


def test_megatron_holds_a_sequence_per_document_and_flat_the_ids(tmp_path):
    write_megatron(str(tmp_path / "m"), IDS, STARTS, 1000)
    assert np.fromfile(tmp_path / "m.bin", np.uint16).tolist() == IDS.tolist()
    assert (tmp_path / "m.idx").read_bytes() == layout.megatron_index(np.array([4, 3]), np.dtype(np.uint16))
    write_flat(str(tmp_path / "f"), IDS)
    assert (tmp_path / "f.bin").read_bytes() == IDS.tobytes()


# ---------------------------------------------------------------------------- the request

def request(*argv) -> pack.PackRequest:
    args, rest = command.build_parser(pack.COMMAND).parse_known_args(["--output", "o", *argv])
    return pack.PackRequest.of(args, rest)


def test_the_command_line_is_checked_once_into_a_request():
    r = request("--seq-len", "8", "--format", "bin", "--format", "parquet", "--format", "bin", "--no-shuffle",
                "--input", "t", "more")
    assert (r.inputs, r.formats, r.shuffle, r.seq_len) == (("t", "more"), ("bin", "parquet"), False, 8)
    assert request("--seq-len", "8").formats == ("parquet",)
    assert request("--seq-len", "8").threshold() == 0
    assert request("--seq-len", "8", "--validation-fraction", "0.5").threshold() == 1 << 62
    assert request("--seq-len", "8", "--validation-records", "3").threshold() is None
    for argv, error in [((), "--seq-len N is required"), (("--seq-len", "1"), "at least 2"),
                        (("--seq-len", "8", "--validation-fraction", "1"), r"must be in \[0, 1\)"),
                        (("--seq-len", "8", "--max-tokens-per-file", "4"), "less than one row"),
                        (("--seq-len", "8", "--pad-token", "0"), "only applies with --tail pad")]:
        with pytest.raises(UserError, match=error):
            request(*argv)
