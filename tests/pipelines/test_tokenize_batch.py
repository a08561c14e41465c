"""The tokenize pipeline's batch paths equal the per-record definitions they replace, and its workers
take the tokenizer's sha256 from the launcher instead of computing it.

Expected values are computed here the plain way (per record, `str.encode`, `str.split`, Python
lists), never by the batch code under test.
"""
import gc
import hashlib
import json
import random

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_ops import Tokenizer
from bpe_ops.stats import Summary, batch_stats, record_stats
from pipelines.core import errors, heap
from pipelines import tokenize
from pipelines.steps import tokenize_shard, tokenize_steps
from pipelines.datasets import sources, tokenizer_files
from pipelines.datasets.sources import Shard, SourceOptions
from schemas import tables
from schemas.records import Record
from schemas.stats import TokenizerFacts, dump_stats, stats_json
from tests.conftest import read_jsonl_texts

pytestmark = pytest.mark.slow

# Every character str.split() treats as whitespace, plus look-alikes that are not whitespace.
SPACES = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())
NOT_SPACES = "\u200b\u2060\ufeff\x00x"


@pytest.fixture(scope="module")
def texts(sample):
    """Real text (the in-repo sample, a third of whose records hold non-ASCII characters), plus edge
    cases: empty, all whitespace, lone surrogates, and fuzz over Unicode spaces and multi-byte characters."""
    edge = ["", " ", SPACES, "a" + SPACES + "b", NOT_SPACES + SPACES, "x\ud800y \udfff", "\ud83d\ude00 é"]
    rng = random.Random(4)
    alphabet = SPACES + NOT_SPACES + "ab é日\ud800"
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(300)]
    return read_jsonl_texts(sample) + edge + fuzz


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """A small byte-level tokenizer saved to disk (ids fit uint16)."""
    t = Tokenizer([(b"t", b"h"), (b"th", b"e"), (b" ", b"the")], special_tokens=["<|endoftext|>"])
    return t, t.save(str(tmp_path_factory.mktemp("tok")))


def test_batch_stats_equal_record_stats_and_the_plain_definitions(texts):
    id_lists = [list(range(len(t) % 7)) for t in texts]
    columns = batch_stats(texts, id_lists)
    assert [tuple(row) for row in zip(*columns)] == [record_stats(t, ids) for t, ids in zip(texts, id_lists)]
    n_tokens, n_bytes, n_chars, n_words = columns
    assert n_tokens == [len(ids) for ids in id_lists]
    # A lone surrogate is written as U+FFFD (3 bytes).
    assert n_bytes == [len("".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in t).encode("utf-8"))
                       for t in texts]
    assert n_chars == [len(t) for t in texts]
    assert n_words == [len(t.split()) for t in texts]


def test_add_batch_builds_the_same_summary_as_add_per_record(texts, tok):
    facts = TokenizerFacts.of(tok[0])
    rng = random.Random(7)
    id_lists = [[rng.randrange(facts.vocab_size) for _ in range(rng.choice([0, 1, 3, 40]))] for _ in texts]
    per_record, batched = Summary(facts.vocab_size), Summary(facts.vocab_size)
    for text, ids in zip(texts, id_lists):
        per_record.add_text(text, ids)
    for start in range(0, len(texts), 64):
        chunk, ids = texts[start:start + 64], id_lists[start:start + 64]
        batched.add_batch(*batch_stats(chunk, ids))
        dense = [0] * facts.vocab_size
        for i in (i for x in ids for i in x):
            dense[i] += 1
        batched.add_dense_id_counts(dense)
    assert batched.tokens_per_record == per_record.tokens_per_record
    assert batched.quarter_bytes_per_token == per_record.quarter_bytes_per_token
    assert dump_stats(stats_json(batched, facts)) == dump_stats(stats_json(per_record, facts))


@pytest.mark.parametrize("with_tallies", [False, True])
def test_chunks_added_a_row_group_at_a_time_build_the_same_summary_as_chunk_by_chunk(texts, with_tallies):
    """`UnsummedChunks` joins chunks into one `add_batch`; the summary (and a chunk's group x class
    cells that another chunk shares, counted sparse without tallies) is the one chunk by chunk gives."""
    from array import array

    from bpe_ops.stats import measure_batch
    vocab_size = 300
    rng = random.Random(11)
    records = [Record(f"r{i % 40}", text, i, False, {}) for i, text in enumerate(texts[:200])]
    ids = [array("I", (rng.randrange(vocab_size) for _ in range(rng.choice([0, 1, 5, 60])))) for _ in records]
    one_by_one, joined = (Summary(vocab_size, raw_byte_ids=list(range(0, 300, 7))) for _ in range(2))
    unsummed = tokenize_steps.UnsummedChunks()
    tallies = [s.tallies() for s in (one_by_one, joined)]
    for start in range(0, len(records), 16):
        chunk, chunk_ids = records[start:start + 16], ids[start:start + 16]
        stats, runs = measure_batch([r.text for r in chunk], chunk_ids)
        for summary, t in zip((one_by_one, joined), tallies):
            calibration = summary.batch_calibration(stats[0], [r.id for r in chunk], chunk_ids,
                                                    tallies=t if with_tallies else None)
            if summary is one_by_one:
                summary.add_batch(*stats, record_ids=[r.id for r in chunk], id_arrays=chunk_ids, digit_runs=runs,
                                  calibration=calibration)
            else:
                unsummed.add(chunk, [r.id for r in chunk], chunk_ids, stats, runs, calibration)
    assert joined.records == 0                       # nothing added until the row group is
    unsummed.add_to(joined, None)
    assert unsummed.chunks == []
    for summary, t in zip((one_by_one, joined), tallies):
        summary.add_tallies(t)
        if not with_tallies:                        # the ids counted apart, as a row group's are
            summary.add_dense_id_counts([sum(i == k for x in ids for i in x) for k in range(vocab_size)])
    assert joined.records == one_by_one.records == 200 and joined.calibrated == 200
    assert joined.group_classes.sum() == sum(map(len, ids)) == one_by_one.group_classes.sum()
    assert (joined.group_classes == one_by_one.group_classes).all()
    assert (joined.group_digit_runs == one_by_one.group_digit_runs).all()
    assert joined.moment_products == one_by_one.moment_products and joined.group_lengths == one_by_one.group_lengths
    facts = TokenizerFacts(vocab_size, "0" * 64, {i: bytes([i % 256]) for i in range(vocab_size)},
                           raw_byte_ids=tuple(range(0, 300, 7)))
    assert dump_stats(stats_json(joined, facts)) == dump_stats(stats_json(one_by_one, facts))


def test_dense_id_counts_refuse_ids_outside_the_vocabulary():
    s = Summary(5)
    with pytest.raises(ValueError, match="token id 5 outside"):
        s.add_dense_id_counts([0, 0, 0, 0, 0, 1])
    with pytest.raises(ValueError, match="4 id counts"):
        s.add_dense_id_counts([1, 1, 1, 1])
    s.add_dense_id_counts([0, 2, 0, 0, 1])
    assert s.id_counts.tolist() == [0, 2, 0, 0, 1]


@pytest.mark.parametrize("vocab_size", [1000, 70_000])
def test_row_group_table_equals_the_plain_arrow_table(vocab_size):
    rng = random.Random(vocab_size)
    records = [Record(f"r{i}", "x" * rng.randrange(5), i, keep={"meta": {"n": i}} if i % 3 else {})
               for i in range(300)]
    id_lists = [[rng.randrange(vocab_size) for _ in range(rng.choice([0, 1, 2, 50]))] for _ in records]
    schema = tables.tokens_schema(vocab_size, {"meta": "json"})
    group, summary = tokenize_steps.RowGroup({"meta": "json"}), Summary(vocab_size)
    for start in range(0, len(records), 128):      # several batches into one row group
        chunk, ids = records[start:start + 128], id_lists[start:start + 128]
        group.extend(chunk, ids, batch_stats([r.text for r in chunk], ids))
    table = group.to_table(schema, summary)
    expected = pa.table({
        "id": [r.id for r in records],
        "token_ids": pa.array(id_lists, schema.field("token_ids").type),
        "n_tokens": pa.array([len(x) for x in id_lists], pa.int32()),
        "n_bytes": pa.array([len(r.text) for r in records], pa.int32()),
        "n_chars": pa.array([len(r.text) for r in records], pa.int32()),
        "n_words": pa.array([len(r.text.split()) for r in records], pa.int32()),
        "meta": [json.dumps(r.keep["meta"], separators=(",", ":")) if "meta" in r.keep else None for r in records],
    }, schema=schema)
    assert table.equals(expected)
    counts = [0] * vocab_size
    for i in (i for x in id_lists for i in x):
        counts[i] += 1
    assert summary.id_counts.tolist() == counts
    assert group.rows == 300 and group.tokens == sum(map(len, id_lists))


def test_worker_takes_the_sha256_from_the_launcher_and_writes_stats_without_the_tokenizer(
        tmp_path, tok, monkeypatch):
    _, path = tok
    loaded, ref = tokenizer_files.identify_tokenizer(path)
    facts = TokenizerFacts.of(loaded)
    src = tmp_path / "in.txt"
    src.write_text("the thin theme\n\nthe end\n")
    # Neither the worker nor the stats step may build the canonical tokenizer.json to hash it, and the
    # stats step may not load the tokenizer at all.
    monkeypatch.setattr(Tokenizer, "sha256", property(lambda self: pytest.fail("sha256 computed again")))
    fn = tokenize_shard.TokenizeShard(tokenize_shard.ShardJob(ref, SourceOptions(), str(tmp_path / "out"), "<|endoftext|>"))
    frozen = gc.get_freeze_count()
    fn.setup()
    assert gc.get_freeze_count() == frozen      # only a worker process of its own freezes its heap
    (summary,) = [out for out in fn.process(Shard(str(src), "in.txt", src.stat().st_size))
                  if not isinstance(out, beam.pvalue.TaggedOutput)]
    fn.finish_bundle()                          # the file is finished in the background by the bundle's end
    meta = pq.read_schema(tmp_path / "out" / "in.parquet").metadata
    assert meta[tables.TOKENIZER_SHA256_KEY.encode()].decode() == ref.sha256
    monkeypatch.setattr(tokenizer_files, "load_tokenizer", lambda url: pytest.fail("tokenizer loaded again"))
    url = tokenize.write_stats(summary, facts, path, str(tmp_path / "out"), ["in.txt"], 0.0)
    stats = json.loads(open(url, encoding="utf-8").read())
    monkeypatch.undo()
    assert stats["tokenizer_sha256"] == Tokenizer.from_file(path).sha256 == ref.sha256
    assert stats == {**stats_json(summary, Tokenizer.from_file(path), {"inputs": ["in.txt"], "tokenizer": path}),
                     "timing": stats["timing"]}


def test_the_console_scripts_own_process_freezes_its_heap_before_a_job(tmp_path, tok, monkeypatch):
    """In the `tokenbeam` console script's own process (`heap.own_process`), whose in-process runner
    runs the job, a tokenize worker freezes the objects it starts with (Beam's, the tokenizer's):
    every later full collection would walk them again (seconds on short records)."""
    _, path = tok
    _, ref = tokenizer_files.identify_tokenizer(path)
    monkeypatch.setattr(heap, "_owned", True)
    fn = tokenize_shard.TokenizeShard(tokenize_shard.ShardJob(ref, SourceOptions(), str(tmp_path / "out")))
    gc.unfreeze()
    try:
        fn.setup()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
        fn.teardown()


def test_worker_refuses_a_tokenizer_file_changed_since_launch(tmp_path, tok):
    tokenizer, path = tok
    folder = tmp_path / "tok"
    tokenizer.save(str(folder))
    _, ref = tokenizer_files.identify_tokenizer(str(folder))
    assert tokenizer_files.load_identified_tokenizer(ref).merges == tokenizer.merges
    Tokenizer(tokenizer.merges[:2]).save(str(folder))        # another tokenizer at the same path
    with pytest.raises(errors.UserError, match="changed since the run started"):
        tokenizer_files.load_identified_tokenizer(ref)
    fn = tokenize_shard.TokenizeShard(tokenize_shard.ShardJob(ref, SourceOptions(), str(tmp_path / "out"), None))
    with pytest.raises(errors.ShardFailure, match="changed since the run started"):
        fn.setup()


def tokenize_one_shard(ref, src, out) -> None:
    """Run the TokenizeShard step over the file `src` into the folder `out`, two encoding threads."""
    fn = tokenize_shard.TokenizeShard(tokenize_shard.ShardJob(ref, SourceOptions(), str(out), encode_threads=2))
    fn.setup()
    list(fn.process(Shard(str(src), src.name, src.stat().st_size)))
    fn.finish_bundle()
    fn.teardown()


def test_row_groups_are_cut_after_whole_batches_whatever_the_first_chunks(tmp_path, tok, monkeypatch):
    # A shard's first chunks are smaller (FIRST_CHUNK_RECORDS) but add up to one chunk: row groups
    # are still cut only after a whole number of ENCODE_BATCH_RECORDS records, and the rows are the
    # records in order, each with its own ids.
    assert sum(tokenize_steps.FIRST_CHUNK_RECORDS) == tokenize_steps.ENCODE_CHUNK_RECORDS
    assert tokenize_steps.ENCODE_BATCH_RECORDS % tokenize_steps.ENCODE_CHUNK_RECORDS == 0
    loaded, ref = tokenizer_files.identify_tokenizer(tok[1])
    monkeypatch.setattr(tokenize_steps, "ROW_GROUP_ROWS", 300)
    lines = [f"the {'th' * (k % 7)} theme {k}" for k in range(700)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    tokenize_one_shard(ref, src, tmp_path / "out")
    f = pq.ParquetFile(tmp_path / "out" / "in.parquet")
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [512, 188]
    table = f.read()
    assert table.column("token_ids").to_pylist() == [loaded.encode(line) for line in lines]


def test_row_groups_are_cut_where_full_at_whole_batches_though_chunks_span_those_places(tmp_path, tok, monkeypatch):
    # Chunks of short records are long (up to CHUNK_MAX_RECORDS records) and may hold a place where a
    # row group is cut: the groups are still cut at the first whole number of ENCODE_BATCH_RECORDS rows
    # at which they are full (rows or tokens), as record-by-record counting says, and the rows are
    # the records in order.
    loaded, ref = tokenizer_files.identify_tokenizer(tok[1])
    monkeypatch.setattr(tokenize_steps, "ROW_GROUP_TOKENS", 3_000)
    texts = ([f"the theme {k}" for k in range(2500)] + [f"{k} " + "then " * 300 for k in range(40)]
             + [f"them {k}" for k in range(1300)])
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(k), "text": t}) + "\n" for k, t in enumerate(texts)))
    started = []
    start = tokenize_steps.ChunkEncoder.start
    monkeypatch.setattr(tokenize_steps.ChunkEncoder, "start",
                        lambda self, chunk, summary: started.append(len(chunk)) or start(self, chunk, summary))
    tokenize_one_shard(ref, src, tmp_path / "out")
    expected, rows, tokens = [], 0, 0
    for text in texts:
        rows, tokens = rows + 1, tokens + len(loaded.encode(text))
        if rows % tokenize_steps.ENCODE_BATCH_RECORDS == 0 and (
                rows >= tokenize_steps.ROW_GROUP_ROWS or tokens >= tokenize_steps.ROW_GROUP_TOKENS):
            expected.append(rows)
            rows, tokens = 0, 0
    expected += [rows] if rows else []
    f = pq.ParquetFile(tmp_path / "out" / "in.parquet")
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == expected
    assert max(started) > 2 * tokenize_steps.ENCODE_BATCH_RECORDS and len(expected) > len(started) / 2
    assert f.read().column("token_ids").to_pylist() == [loaded.encode(text) for text in texts]


def test_chunks_end_where_chunk_ends_says_record_by_record(tmp_path, tok, monkeypatch):
    # tokenize takes a batch's records a slice at a time, up to the next place a chunk may end: the
    # chunks it starts are those that asking `chunk_ends` after every record gives, with short
    # records (chunks of up to CHUNK_MAX_RECORDS), long ones (cut at CHUNK_TEXT_CHARS) and a
    # shard read in more than one batch (over 1 MB).
    loaded, ref = tokenizer_files.identify_tokenizer(tok[1])
    texts = ([f"the theme {k}" for k in range(600)] + [f"{k} " + "then " * 600 for k in range(400)]
             + [f"them {k}" for k in range(333)])
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(k), "text": t}) + "\n" for k, t in enumerate(texts)))
    assert src.stat().st_size > 1 << 20
    started = []
    start = tokenize_steps.ChunkEncoder.start
    monkeypatch.setattr(tokenize_steps.ChunkEncoder, "start",
                        lambda self, chunk, summary: started.append(len(chunk)) or start(self, chunk, summary))
    tokenize_one_shard(ref, src, tmp_path / "out")
    expected, records, chars, submitted = [], 0, 0, 0
    first = iter(tokenize_steps.FIRST_CHUNK_RECORDS)
    size = next(first)
    for text in texts:
        records, chars = records + 1, chars + len(text)
        if tokenize_shard.chunk_ends(records, size, chars, submitted):
            expected.append(records)
            submitted, records, chars, size = submitted + records, 0, 0, next(first, None)
    expected += [records] if records else []
    assert started == expected
    assert len(set(expected)) > 3          # first chunks, long-record chunks, short-record chunks, the last
    table = pq.read_table(tmp_path / "out" / "in.parquet")
    assert table.column("token_ids").to_pylist() == [loaded.encode(text) for text in texts]


def test_a_shards_first_chunk_goes_with_the_records_of_its_first_read(tmp_path, tok, monkeypatch):
    # Records so long that the shard's first read (FIRST_READ_SIZE bytes) holds fewer of them than the
    # first chunk takes: the encoders start on those records, not after the next read; the next first
    # chunks take FIRST_CHUNK_RECORDS records, and the rows are the same.
    loaded, ref = tokenizer_files.identify_tokenizer(tok[1])
    texts = [f"{k} " + "then " * 5000 for k in range(12)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(k), "text": t}) + "\n" for k, t in enumerate(texts)))
    in_first_read = src.read_bytes()[:sources.FIRST_READ_SIZE].count(b"\n")
    assert 0 < in_first_read < tokenize_steps.FIRST_CHUNK_RECORDS[0]
    started = []
    start = tokenize_steps.ChunkEncoder.start
    monkeypatch.setattr(tokenize_steps.ChunkEncoder, "start",
                        lambda self, chunk, summary: started.append(len(chunk)) or start(self, chunk, summary))
    tokenize_one_shard(ref, src, tmp_path / "out")
    assert started[0] == in_first_read and sum(started) == len(texts)
    assert started[1] == tokenize_steps.FIRST_CHUNK_RECORDS[1]
    table = pq.read_table(tmp_path / "out" / "in.parquet")
    assert table.column("token_ids").to_pylist() == [loaded.encode(text) for text in texts]


def test_repeated_ids_are_counted_exactly_from_each_shards_bucket_bytes():
    # Each shard hands its id hashes per bucket as bytes (Beam's coder writes them as they are);
    # a bucket's count over several shards, accumulators merged, is exact.
    shards = [[f"id{k}" for k in range(300)], [f"id{k}" for k in range(250, 400)] + ["id7", "id7"]]
    combine = tokenize_shard.CountRepeatedIds()
    accs = {}
    for ids in shards:
        partials = tokenize_shard.ShardPartials(tokenize.Breakdowns(), 10, None)
        partials.add_ids(ids)
        for bucket, hashes in partials.id_buckets():
            assert type(hashes) is bytes and len(hashes) % 16 == 0
            accs[bucket] = combine.add_input(accs.get(bucket, combine.create_accumulator()), hashes)
    pairs = [combine.extract_output(combine.merge_accumulators([acc[:1], acc[1:]])) for acc in accs.values()]
    # id250 to id299 in both shards (100 records, 50 ids), id7 three times (3 records, 1 id).
    assert tokenize_shard.add_pairs(pairs) == (50 * 2 + 3, 51)


def test_repeated_ids_need_both_halves_of_the_hash_alike():
    # Rows whose first 64 bits agree are repeats only when their last 64 bits do too.
    combine = tokenize_shard.CountRepeatedIds()
    rows = lambda *pairs: np.array(pairs, dtype="<u8").tobytes()
    assert combine.extract_output([rows((1, 2), (1, 3), (5, 2))]) == (0, 0)
    assert combine.extract_output([rows((1, 2), (9, 9)), rows((1, 3), (1, 2))]) == (2, 1)
    assert combine.extract_output([rows((4, 4))]) == (0, 0)


@pytest.mark.parametrize("compiled", [True, False])
def test_record_id_hashes_are_blake2b_of_each_id(compiled, monkeypatch):
    """`id_hashes` (compiled where built, hashlib id by id otherwise) gives each id hashlib's
    16-byte BLAKE2b of its UTF-8 (lone surrogates as their surrogatepass bytes), across the
    128-byte block edges."""
    if compiled and tokenize_steps._ID_HASHES is None:
        pytest.skip("bpe_ops._native not built")
    if not compiled:
        monkeypatch.setattr(tokenize_steps, "_ID_HASHES", None)
    rng = random.Random(7)
    ids = ["", "a", "a\ud800b", "\U0001f600" * 40, 12] + ["x" * n for n in (127, 128, 129, 255, 256, 257, 1000)]
    ids += ["".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(0, 200))) for _ in range(300)]
    expected = b"".join(hashlib.blake2b(str(i).encode("utf-8", "surrogatepass"), digest_size=16).digest()
                        for i in ids)
    assert tokenize_steps.id_hashes(ids).tobytes() == expected
    assert tokenize_steps.id_hashes([]).shape == (0, 2)
    # A row group's thousands of ids (the compiled hashes then run without the GIL).
    assert tokenize_steps.id_hashes(ids * 8).tobytes() == expected * 8

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no text")

    with pytest.raises(RuntimeError, match="no text"):
        tokenize_steps.id_hashes(ids + [Unprintable()] + ids)


def test_writes_run_in_order_with_at_most_the_queued_ones_started():
    # The writing step runs its writes one after the other, in the order started; `start` returns
    # at once while fewer than `queued` writes are started and not waited for, else it waits for the
    # oldest (and raises what it raised).
    import threading
    import time

    writes = tokenize_steps.RowGroupWriter(queued=2)
    gate, done = threading.Event(), []

    def write(name):
        gate.wait(5)
        done.append(name)

    writes.start(write, "a")
    writes.start(write, "b")
    third = threading.Thread(target=writes.start, args=(write, "c"))
    third.start()
    time.sleep(0.2)
    assert third.is_alive() and done == []          # two queued: the third waits for the first
    gate.set()
    third.join(5)
    writes.wait()
    assert done == ["a", "b", "c"] and not writes.started
    writes.close()


def test_a_failed_write_raises_at_a_later_start_or_wait_unless_quiet():
    def fail():
        raise OSError("disk full")

    writes = tokenize_steps.RowGroupWriter(queued=2)
    writes.start(fail)
    writes.start(lambda: None)
    with pytest.raises(OSError, match="disk full"):
        writes.start(lambda: None)                  # the failed one is the oldest of two
    writes.start(fail)
    with pytest.raises(OSError, match="disk full"):
        writes.wait()
    writes.start(fail)
    writes.wait(quiet=True)                         # another error is on its way: not this one
    assert not writes.started
    writes.close()


def test_a_shards_end_waits_for_its_own_row_groups_not_for_the_shards_before_it():
    import threading
    import time

    writes = tokenize_steps.RowGroupWriter(queued=2)
    gate = threading.Event()
    writes.start(gate.wait, 5)                      # the shard before: its end still writing
    mark = writes.count
    started = time.perf_counter()
    writes.wait_since(mark)                         # this shard wrote no row group: nothing to wait for
    assert time.perf_counter() - started < 1 and not gate.is_set()
    writes.start(lambda: None)                      # one of this shard's row groups
    threading.Timer(0.2, gate.set).start()
    writes.wait_since(mark)
    assert gate.is_set() and not writes.started
    writes.close()


def test_a_shard_whose_file_fails_to_be_written_fails_the_run_whatever_writes_are_queued(tmp_path, tok, capfd,
                                                                                       monkeypatch):
    # A shard's end (last row group, footer, rename) is written while the next shards are read: when
    # it fails, the run fails with it (its file never appears under its name), however many shards
    # were tokenized meanwhile.
    folder = tmp_path / "in"
    folder.mkdir()
    for k in range(4):
        (folder / f"s{k}.txt").write_text("".join(f"the theme {k} {i}\n" for i in range(50)))
    real = tokenize_steps.finish_file

    def failing(url, stack, *args):
        if url.endswith("s0.parquet"):
            with tokenize_steps.writing(url), stack:     # as finish_file fails: its file closed and gone
                raise OSError("no space left on device")
        return real(url, stack, *args)

    monkeypatch.setattr(tokenize_steps, "finish_file", failing)
    out = tmp_path / "out"
    code = tokenize.main(["--tokenizer", tok[1], "--input", str(folder / "*.txt"), "--output", str(out), "--quiet"])
    message = capfd.readouterr().err
    assert code == errors.EXIT_INCOMPLETE
    assert f"cannot write {out / 's0.parquet'}: no space left on device" in message, message
    assert "Traceback" not in message
    assert not (out / "s0.parquet").exists() and not (out / "_SUCCESS").exists()
    assert not list(out.glob(".s0.parquet.tmp-*"))
