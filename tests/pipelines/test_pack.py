"""`tokenbeam pack`: known rows on hand-made token Parquet, the multiset of ids, determinism across
runner modes, input order, bucket counts and hash seeds, a split stable when records are added,
Megatron files read back with a reader written here from the format's documentation, the flat
.bin through numpy.memmap, the Parquet through `datasets`, bad inputs, reruns, and a real
tokenize run over the in-repo sample."""
from __future__ import annotations

import collections
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.core import folders

from pipelines import pack

from pipelines.steps import pack_steps
from schemas import pack as layout
from schemas import tables

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHA_A, SHA_B = "a" * 64, "b" * 64
EOS = 0


def write_tokens(path: Path, records, vocab_size: int = 1000, sha: str = SHA_A, eos_token: str | None = None,
                 row_group: int | None = None) -> Path:
    """A token Parquet as tokenize writes it: `records` is [(id, [ids...]), ...]."""
    schema = tables.tokens_schema(vocab_size, (), {tables.TOKENIZER_SHA256_KEY: sha,
                                                   tables.VOCAB_SIZE_KEY: str(vocab_size)})
    id_type = schema.field("token_ids").type
    lengths = [len(ids) for _, ids in records]
    table = pa.Table.from_arrays([pa.array([r for r, _ in records], pa.string()),
                                  pa.array([list(ids) for _, ids in records], id_type)]
                                 + [pa.array(lengths, pa.int32())] * 4, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema) as writer:
        writer.write_table(table, row_group_size=row_group or max(1, len(records)))
        if eos_token is not None:
            writer.add_key_value_metadata({tables.SHARD_KEY: json.dumps({"fingerprint": {"eos_token": eos_token}})})
    return path


def run(*args) -> dict:
    return pack.run([str(a) for a in args])


def exit_line(capsys, *args) -> tuple[int, str]:
    code = pack.main([str(a) for a in args])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tokenbeam: error")]
    return code, err[-1] if err else ""


def parquet_rows(out: Path, split: str = "train") -> list[dict]:
    files = sorted((out / split / "parquet").glob("*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def read_megatron(prefix: Path) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Megatron-LM's indexed dataset, read from its documented layout: `.idx` = b"MMIDIDX\\x00\\x00",
    <Q version 1, <B dtype code, <Q sequence count, <Q document count, int32 lengths, int64 byte
    pointers, int64 document indices; `.bin` = the sequences back to back."""
    codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
             8: np.uint16}
    raw = prefix.with_suffix(".idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, = struct.unpack_from("<Q", raw, 9)
    assert version == 1
    dtype = np.dtype(codes[raw[17]])
    n_seq, n_doc = struct.unpack_from("<QQ", raw, 18)
    offset = 34
    lengths = np.frombuffer(raw, np.int32, n_seq, offset)
    pointers = np.frombuffer(raw, np.int64, n_seq, offset + 4 * n_seq)
    documents = np.frombuffer(raw, np.int64, n_doc, offset + 12 * n_seq)
    assert len(raw) == offset + 12 * n_seq + 8 * n_doc
    data = np.memmap(prefix.with_suffix(".bin"), dtype=dtype, mode="r")
    sequences = [np.asarray(data[p // dtype.itemsize:p // dtype.itemsize + n]) for p, n in zip(pointers, lengths)]
    assert int(lengths.sum()) == len(data)
    return np.asarray(data), sequences, documents


def data_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != layout.PACK_JSON}


def figures(out: Path) -> dict:
    return json.loads((out / layout.PACK_JSON).read_text())["splits"]


# ---------------------------------------------------------------------------- known answers

DOCS = [("a", [5, 6, 7]), ("b", [8, 9]), ("c", [10, 11, 12, 13, 14])]


@pytest.fixture
def small(tmp_path) -> Path:
    write_tokens(tmp_path / "tokens" / "part.parquet", DOCS)
    return tmp_path / "tokens"


@pytest.mark.parametrize("tail, last", [("drop", None), ("pad", {"input_ids": [0, 99, 99, 99], "doc_starts": [],
                                                                   "n_tokens": 1, "row": 3}),
                                        ("keep", {"input_ids": [0], "doc_starts": [], "n_tokens": 1, "row": 3})])
def test_the_exact_rows_of_three_documents(tmp_path, small, tail, last):
    # The stream 5 6 7 0 | 8 9 0 10 | 11 12 13 14 | 0: the third document runs over three rows.
    extra = ["--pad-token", 99] if tail == "pad" else []
    run("--input", small, "--output", tmp_path / "out", "--seq-len", 4, "--eos-token", EOS, "--no-shuffle",
        "--tail", tail, *extra)
    expected = [{"input_ids": [5, 6, 7, 0], "doc_starts": [0], "n_tokens": 4, "row": 0},
                {"input_ids": [8, 9, 0, 10], "doc_starts": [0, 3], "n_tokens": 4, "row": 1},
                {"input_ids": [11, 12, 13, 14], "doc_starts": [], "n_tokens": 4, "row": 2}]
    assert parquet_rows(tmp_path / "out") == expected + ([last] if last else [])
    train = figures(tmp_path / "out")["train"]
    assert (train["documents"], train["documents_split"], train["separators"]) == (3, 1, 3)
    assert (train["rows"], train["tokens"], train["tokens_dropped"], train["padding_tokens"]) == {
        "drop": (3, 12, 1, 0), "pad": (4, 13, 0, 3), "keep": (4, 13, 0, 0)}[tail]
    assert (tmp_path / "out" / "_SUCCESS").exists() and "validation" not in figures(tmp_path / "out")


def test_bos_and_eos_around_every_document(tmp_path, small):
    run("--input", small, "--output", tmp_path / "out", "--seq-len", 5, "--eos-token", 0, "--bos-token", 1,
        "--no-shuffle", "--tail", "keep")
    rows = parquet_rows(tmp_path / "out")
    assert [r["input_ids"] for r in rows] == [[1, 5, 6, 7, 0], [1, 8, 9, 0, 1], [10, 11, 12, 13, 14], [0]]
    assert [r["doc_starts"] for r in rows] == [[0], [0, 4], [], []]


def test_shuffled_order_is_the_documented_hash_order(tmp_path):
    docs = [(f"doc-{i}", [10 + i]) for i in range(40)]
    write_tokens(tmp_path / "t" / "x.parquet", docs)
    run("--input", tmp_path / "t", "--output", tmp_path / "out", "--seq-len", 2, "--eos-token", 0, "--seed", 7)
    # The order, from its description: blake2b-128 of the id keyed by the seed (16 bytes, little
    # endian), the first 8 bytes big-endian, shifted right once.
    def order(record_id):
        digest = hashlib.blake2b(record_id.encode(), digest_size=16, key=(7).to_bytes(16, "little")).digest()
        return int.from_bytes(digest[:8], "big") >> 1
    expected = [[ids[0], 0] for _, ids in sorted(docs, key=lambda d: order(d[0]))]
    assert [r["input_ids"] for r in parquet_rows(tmp_path / "out")] == expected


def test_every_id_arrives_once_with_its_separators(tmp_path):
    rng = np.random.default_rng(3)
    docs = [(f"r{i}", rng.integers(2, 1000, rng.integers(0, 300)).tolist()) for i in range(300)]
    write_tokens(tmp_path / "t" / "a.parquet", docs[:150], row_group=40)
    write_tokens(tmp_path / "t" / "b.parquet", docs[150:], row_group=40)
    run("--input", tmp_path / "t", "--output", tmp_path / "out", "--seq-len", 64, "--eos-token", 0, "--bos-token", 1,
        "--validation-fraction", 0.2, "--tail", "keep", "--max-tokens-per-file", 1000)
    got = collections.Counter(i for split in ("train", "validation") for r in parquet_rows(tmp_path / "out", split)
                              for i in r["input_ids"])
    want = collections.Counter(i for _, ids in docs for i in ids) + collections.Counter({0: 300, 1: 300})
    assert got == want
    f = figures(tmp_path / "out")
    assert f["train"]["documents"] + f["validation"]["documents"] == 300
    assert len(list((tmp_path / "out" / "train" / "parquet").glob("*.parquet"))) > 1


# ---------------------------------------------------------------------------- determinism

@pytest.fixture
def medium(tmp_path) -> Path:
    rng = np.random.default_rng(11)
    for shard in range(4):
        docs = [(f"s{shard}-{i}", rng.integers(2, 1000, rng.integers(1, 200)).tolist()) for i in range(60)]
        write_tokens(tmp_path / "tokens" / f"shard-{shard}.parquet", docs, row_group=25)
    return tmp_path / "tokens"


ALL_FORMATS = ["--format", "parquet", "--format", "megatron", "--format", "bin"]


def pack_medium(medium: Path, out: Path, *extra):
    files = sorted(medium.glob("*.parquet"))
    return run("--output", out, "--seq-len", 32, "--eos-token", 0, "--validation-fraction", 0.25,
               "--max-tokens-per-file", 2048, *ALL_FORMATS, *extra, *files)


def test_the_bytes_do_not_depend_on_input_order_bucket_count_or_runner_mode(tmp_path, medium, monkeypatch):
    pack_medium(medium, tmp_path / "one")
    reference = data_files(tmp_path / "one")
    assert len([n for n in reference if n.endswith(".parquet")]) > 2
    files = sorted(medium.glob("*.parquet"), reverse=True)
    monkeypatch.setattr(pack, "BUCKET_TOKENS", 500)         # many small buckets instead of one
    monkeypatch.setattr(pack, "SPILL_BYTES", 1)             # and a spill file per row group
    run("--output", tmp_path / "two", "--seq-len", 32, "--eos-token", 0, "--validation-fraction", 0.25,
        "--max-tokens-per-file", 2048, *ALL_FORMATS, *files)
    assert json.loads((tmp_path / "two" / "pack.json").read_text())["options"] == \
        json.loads((tmp_path / "one" / "pack.json").read_text())["options"]
    assert data_files(tmp_path / "two") == reference
    pack_medium(medium, tmp_path / "three", "--direct_running_mode", "multi_processing", "--direct_num_workers", 2)
    assert data_files(tmp_path / "three") == reference
    assert figures(tmp_path / "three") == figures(tmp_path / "one")


def test_the_bytes_do_not_depend_on_python_hash_seeds(tmp_path, medium):
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"out-{seed}"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "pipelines.pack", "--input", str(medium), "--output", str(out),
                        "--seq-len", "32", "--eos-token", "0", "--validation-fraction", "0.25"],
                       check=True, cwd=ROOT, env=env, capture_output=True)
        outs.append(data_files(out))
    assert outs[0] == outs[1]


def test_another_seed_gives_another_order_and_no_shuffle_keeps_input_order(tmp_path, medium):
    pack_medium(medium, tmp_path / "a")
    pack_medium(medium, tmp_path / "b", "--seed", 99)
    assert data_files(tmp_path / "a") != data_files(tmp_path / "b")
    run("--input", medium, "--output", tmp_path / "c", "--seq-len", 32, "--eos-token", 0, "--no-shuffle",
        "--tail", "keep", "--format", "bin")
    stream = np.fromfile(tmp_path / "c" / "train" / "bin" / "part-00000-of-00001.bin", np.uint16)
    expected = [i for f in sorted(medium.glob("*.parquet")) for ids in pq.read_table(f)["token_ids"].to_pylist()
                for i in ids + [0]]
    assert stream.tolist() == expected


# ---------------------------------------------------------------------------- bounded memory

def record_sizes(element, path):
    """Append the pickled size of a GroupByKey's input element to `path` (one line each)."""
    import pickle

    with open(path, "a") as f:
        f.write(f"{len(pickle.dumps(element))}\n")
    return element


def test_no_element_of_either_shuffle_carries_token_ids(tmp_path, monkeypatch):
    # What a runner holds for a shuffle is what goes into its GroupByKeys (FnApiRunner keeps all of it
    # in memory): references to spill files, tens of bytes each, whatever the documents' size.
    import apache_beam as beam

    rng = np.random.default_rng(8)
    docs = [(f"long-{i}", rng.integers(2, 1000, rng.integers(500, 1500)).tolist()) for i in range(120)]
    write_tokens(tmp_path / "t" / "a.parquet", docs[:60], row_group=10)
    write_tokens(tmp_path / "t" / "b.parquet", docs[60:], row_group=10)
    args = ["--input", tmp_path / "t", "--seq-len", 128, "--eos-token", 0, "--validation-fraction", 0.2,
            "--max-tokens-per-file", 8192, *ALL_FORMATS]
    run(*args, "--output", tmp_path / "reference")
    sizes = tmp_path / "sizes.txt"

    def recorded():
        return (beam.Map(record_sizes, str(sizes)).with_output_types(beam.typehints.Tuple[beam.typehints.Any,
                                                                                          beam.typehints.Any])
                | beam.GroupByKey())
    monkeypatch.setattr(pack, "shuffle", recorded)
    monkeypatch.setattr(pack, "BUCKET_TOKENS", 10_000)      # 13 buckets per split
    monkeypatch.setattr(pack, "SPILL_BYTES", 30_000)        # a spill file every two row groups
    run(*args, "--output", tmp_path / "out")
    seen = [int(line) for line in sizes.read_text().split()]
    ids_bytes = 2 * sum(len(ids) for _, ids in docs)
    assert len(seen) > 100                                  # (bucket, spill file) and (file, bucket) pairs
    assert max(seen) < 400, max(seen)                       # a document here is 1,000-3,000 bytes of ids
    assert sum(seen) < ids_bytes / 10
    assert data_files(tmp_path / "out") == data_files(tmp_path / "reference")


def test_spill_files_are_removed_after_a_run_and_a_killed_runs_before_the_next(tmp_path, medium, monkeypatch):
    out = tmp_path / "o"
    stale = out / pack_steps.SPILL_FOLDER / pack_steps.spill_name("docs", ".arrow")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"left by a killed run")
    pack_medium(medium, out)
    assert not (out / pack_steps.SPILL_FOLDER).exists()
    assert not [p for p in out.rglob(".*") if p.name != folders.MARKER]   # the folder's owner mark stays

    def fail(self, url, ids, starts):
        raise RuntimeError("a bug in the Megatron writer")
    monkeypatch.setattr(pack.WriteFile, "write_megatron", fail)
    with pytest.raises(Exception, match="a bug in the Megatron writer"):
        pack_medium(medium, tmp_path / "failed")
    assert not (tmp_path / "failed" / pack_steps.SPILL_FOLDER).exists()
    assert not (tmp_path / "failed" / "_SUCCESS").exists()


# ---------------------------------------------------------------------------- the split

def marker_docs(first: int, count: int):
    """Documents whose only id names them (id 2 + n), so a split's stream says which it holds."""
    return [(f"rec-{n}", [2 + n]) for n in range(first, first + count)]


def split_markers(out: Path, split: str) -> set[int]:
    meta = json.loads((out / split / "bin" / "bin.json").read_text())
    return {int(i) for f in meta["files"] for i in np.memmap(out / split / "bin" / f["name"], meta["dtype"], mode="r")
            if i != EOS}


def test_the_split_is_stable_when_records_are_added(tmp_path):
    write_tokens(tmp_path / "t1" / "a.parquet", marker_docs(0, 300))
    write_tokens(tmp_path / "t2" / "a.parquet", marker_docs(0, 300))
    write_tokens(tmp_path / "t2" / "b.parquet", marker_docs(300, 300))
    common = ["--seq-len", 2, "--eos-token", 0, "--validation-fraction", 0.2, "--format", "bin", "--tail", "keep"]
    run("--input", tmp_path / "t1", "--output", tmp_path / "o1", *common)
    run("--input", tmp_path / "t2", "--output", tmp_path / "o2", *common)
    before, after = split_markers(tmp_path / "o1", "validation"), split_markers(tmp_path / "o2", "validation")
    assert 30 < len(before) < 90
    assert {m for m in after if m < 302} == before
    assert split_markers(tmp_path / "o1", "train") | before == set(range(2, 302))


def test_validation_records_holds_out_exactly_k(tmp_path):
    write_tokens(tmp_path / "t" / "a.parquet", marker_docs(0, 200))
    run("--input", tmp_path / "t", "--output", tmp_path / "o", "--seq-len", 2, "--eos-token", 0,
        "--validation-records", 25, "--format", "bin", "--format", "parquet")
    assert len(split_markers(tmp_path / "o", "validation")) == 25
    assert figures(tmp_path / "o")["validation"]["documents"] == 25


# ---------------------------------------------------------------------------- the formats, read back

def test_megatron_bin_and_parquet_hold_the_same_stream(tmp_path, medium):
    pack_medium(medium, tmp_path / "o", "--tail", "pad", "--pad-token", 999)
    out = tmp_path / "o"
    for split in ("train", "validation"):
        rows = parquet_rows(out, split)
        real = [i for r in rows for i in r["input_ids"][:r["n_tokens"]]]
        assert all(len(r["input_ids"]) == 32 for r in rows) and rows[-1]["input_ids"][-1] == 999
        assert [r["row"] for r in rows] == list(range(len(rows)))
        meta = json.loads((out / split / "bin" / "bin.json").read_text())
        assert meta["dtype"] == "uint16" and meta["tokenizer_sha256"] == SHA_A and meta["eos_id"] == 0
        flat = [int(i) for f in meta["files"] for i in np.memmap(out / split / "bin" / f["name"], np.uint16, mode="r")]
        assert flat == real and meta["tokens"] == len(real)
        megatron, documents = [], 0
        for idx in sorted((out / split / "megatron").glob("*.idx")):
            data, sequences, doc_index = read_megatron(idx.with_suffix(""))
            assert doc_index.tolist() == list(range(len(sequences) + 1))
            assert np.concatenate(sequences).tolist() == data.tolist()
            megatron += data.tolist()
            documents += len(sequences)
            # Every sequence is one document: each one but a file's last ends with the EOS.
            assert all(s[-1] == EOS for s in sequences[:-1])
        assert megatron == real
        assert documents >= figures(out)[split]["documents"]


def test_megatron_core_reads_the_files_when_it_is_installed(tmp_path, medium):
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset",
                                  reason="megatron-core (and torch) are not installed here")
    pack_medium(medium, tmp_path / "o")
    prefix = sorted((tmp_path / "o" / "train" / "megatron").glob("*.idx"))[0].with_suffix("")
    dataset = indexed.IndexedDataset(str(prefix))
    _, sequences, _ = read_megatron(prefix)
    assert [dataset[i].tolist() for i in range(len(dataset))] == [s.tolist() for s in sequences]


def test_the_parquet_loads_with_datasets(tmp_path, medium, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    pack_medium(medium, tmp_path / "o")
    files = sorted(str(p) for p in (tmp_path / "o" / "train" / "parquet").glob("*.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))
    assert loaded.column_names == ["input_ids", "doc_starts", "n_tokens", "row"]
    assert loaded["input_ids"] == [r["input_ids"] for r in parquet_rows(tmp_path / "o")]


def test_a_vocabulary_above_uint16_packs_uint32_and_megatron_int32(tmp_path):
    write_tokens(tmp_path / "t" / "a.parquet", [("a", [70000, 5, 69999]), ("b", [1])], vocab_size=70001)
    run("--input", tmp_path / "t", "--output", tmp_path / "o", "--seq-len", 3, "--eos-token", 70000, "--no-shuffle",
        *ALL_FORMATS)
    table = pq.read_table(next((tmp_path / "o" / "train" / "parquet").glob("*.parquet")))
    assert table.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert table["input_ids"].to_pylist() == [[70000, 5, 69999], [70000, 1, 70000]]
    data, sequences, _ = read_megatron(next((tmp_path / "o" / "train" / "megatron").glob("*.idx")).with_suffix(""))
    assert data.dtype == np.int32 and [s.tolist() for s in sequences] == [[70000, 5, 69999, 70000], [1, 70000]]
    assert json.loads((tmp_path / "o" / "train" / "bin" / "bin.json").read_text())["dtype"] == "uint32"


# ---------------------------------------------------------------------------- bad input

def nothing_written(out: Path) -> bool:
    return not out.exists() or not any(p for p in out.rglob("*") if p.is_file())


def test_inputs_of_two_tokenizers_are_refused(tmp_path, capsys):
    write_tokens(tmp_path / "t" / "a.parquet", DOCS, sha=SHA_A)
    write_tokens(tmp_path / "t" / "b.parquet", DOCS, sha=SHA_B)
    code, line = exit_line(capsys, "--input", tmp_path / "t", "--output", tmp_path / "o", "--seq-len", 4,
                           "--eos-token", 0)
    assert code == 2 and "different tokenizers" in line and nothing_written(tmp_path / "o")


@pytest.mark.parametrize("args, words", [
    ([], "no separator"),
    (["--eos-token", 1000], "not an id"),
    (["--eos-token", "<|endoftext|>"], "token name"),
    (["--eos-token", 0, "--seq-len", 1], "--seq-len must be at least 2"),
    (["--eos-token", 0, "--pad-token", 5], "--pad-token only applies"),
    (["--eos-token", 0, "--validation-fraction", 1.5], "--validation-fraction"),
    (["--eos-token", 0, "--validation-records", 3], "leaves no record"),
    (["--eos-token", 0, "--seq_len", 4], "did you mean --seq-len"),
    (["--eos-token", 0, "--format", "npy"], "invalid choice"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, small, args, words):
    if "--seq-len" not in args and "--seq_len" not in args:
        args = args + ["--seq-len", 4]
    code, line = exit_line(capsys, "--input", small, "--output", tmp_path / "o", *args)
    assert code == 2 and words in line, line
    assert nothing_written(tmp_path / "o")


def test_files_that_are_not_token_parquet_are_refused(tmp_path, capsys, small):
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "foreign.parquet")
    code, line = exit_line(capsys, "--input", tmp_path / "foreign.parquet", "--output", tmp_path / "o",
                           "--seq-len", 4, "--eos-token", 0)
    assert code == 2 and "not a token Parquet" in line
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    code, line = exit_line(capsys, "--input", tmp_path / "junk.parquet", "--output", tmp_path / "o",
                           "--seq-len", 4, "--eos-token", 0)
    assert code == 2 and "not a readable Parquet" in line
    run("--input", small, "--output", tmp_path / "packed", "--seq-len", 4, "--eos-token", 0)
    code, line = exit_line(capsys, "--input", tmp_path / "packed" / "train" / "parquet", "--output", tmp_path / "o",
                           "--seq-len", 4, "--eos-token", 0)
    assert code == 2 and "'packed' file" in line
    assert nothing_written(tmp_path / "o")


def test_an_output_holding_other_files_is_refused(tmp_path, capsys, small):
    code, line = exit_line(capsys, "--input", small, "--output", small, "--seq-len", 4, "--eos-token", 0)
    assert code == 2 and "holds" in line
    assert sorted(p.name for p in small.iterdir()) == ["part.parquet"]


def test_less_than_one_row_is_an_incomplete_run(tmp_path, capsys, small):
    code, line = exit_line(capsys, "--input", small, "--output", tmp_path / "o", "--seq-len", 64, "--eos-token", 0)
    assert code == 3 and "nothing was packed" in line
    assert not (tmp_path / "o" / "_SUCCESS").exists()


# ---------------------------------------------------------------------------- reruns

def test_a_rerun_skips_a_complete_output_and_redoes_a_changed_one(tmp_path, capsys, small):
    args = ["--input", small, "--output", tmp_path / "o", "--seq-len", 4, "--eos-token", 0, "--format", "bin"]
    run(*args)
    capsys.readouterr()
    run(*args)
    assert "skipped" in capsys.readouterr().err
    run(*args[:-2], "--format", "parquet")
    assert "skipped" not in capsys.readouterr().err
    assert not (tmp_path / "o" / "train" / "bin").exists() and (tmp_path / "o" / "train" / "parquet").exists()
    next((tmp_path / "o" / "train" / "parquet").glob("*.parquet")).unlink()
    run(*args[:-2], "--format", "parquet")
    assert "skipped" not in capsys.readouterr().err
    assert (tmp_path / "o" / "_SUCCESS").exists()


# ---------------------------------------------------------------------------- a real tokenize run

def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True)


@pytest.fixture(scope="module")
def sample_tokens(tmp_path_factory) -> tuple[Path, Path]:
    sample = ROOT / "sample"
    base = tmp_path_factory.mktemp("sample")
    result = cli("train", "--input", sample / "*.jsonl", "--output", base / "tok", "--vocab-size", 600,
                 "--special-token", "<|endoftext|>")
    assert result.returncode == 0, result.stderr
    result = cli("tokenize", "--tokenizer", base / "tok" / "tokenizer.json", "--input", sample / "*.jsonl",
                 "--output", base / "tokens", "--eos-token", "<|endoftext|>")
    assert result.returncode == 0, result.stderr
    return base / "tok" / "tokenizer.json", base / "tokens"


def test_pack_after_a_real_tokenize_run_adds_no_second_eos(tmp_path, sample_tokens):
    tokenizer, tokens = sample_tokens
    result = cli("pack", "--input", tokens, "--output", tmp_path / "o", "--seq-len", 256, "--tokenizer", tokenizer,
                 "--validation-fraction", 0.1, "--tail", "keep", *ALL_FORMATS)
    assert result.returncode == 0, result.stderr
    assert "no EOS added" in result.stderr
    eos = json.loads(Path(tokenizer).read_text())["added_tokens"][0]["id"]
    source = collections.Counter(i for f in tokens.glob("*.parquet") for ids in pq.read_table(f)["token_ids"].to_pylist()
                                 for i in ids)
    packed = collections.Counter(i for split in ("train", "validation") for r in parquet_rows(tmp_path / "o", split)
                                 for i in r["input_ids"])
    assert packed == source and packed[eos] == 133
    manifest = json.loads((tmp_path / "o" / "pack.json").read_text())
    assert manifest["tokenizer_sha256"] == pq.read_schema(next(tokens.glob("*.parquet"))).metadata[
        tables.TOKENIZER_SHA256_KEY.encode()].decode()
    assert manifest["inputs_stats_sha256"] == {
        str(tokens / "stats.json"): hashlib.sha256((tokens / "stats.json").read_bytes()).hexdigest()}
    assert set(layout.PACK_JSON_KEYS) <= set(manifest)
    assert all(set(layout.SPLIT_KEYS) == set(s) for s in manifest["splits"].values())
    # A different --eos-token than the inputs' own is refused.
    result = cli("pack", "--input", tokens, "--output", tmp_path / "p", "--seq-len", 256, "--eos-token", 3)
    assert result.returncode == 2 and "would add a second" in result.stderr


def test_bin_json_names_the_eos_the_inputs_already_end_with(tmp_path, sample_tokens):
    """Inputs tokenized with --eos-token: pack adds no EOS, and bin.json still says which id separates
    the documents in the stream."""
    tokenizer, tokens = sample_tokens
    result = cli("pack", "--input", tokens, "--output", tmp_path / "o", "--seq-len", 256, "--format", "bin",
                 "--tail", "keep")
    assert result.returncode == 0, result.stderr
    eos = json.loads(Path(tokenizer).read_text())["added_tokens"][0]["id"]
    meta = json.loads((tmp_path / "o" / "train" / "bin" / "bin.json").read_text())
    assert meta["eos_id"] == eos
    stream = np.concatenate([np.fromfile(tmp_path / "o" / "train" / "bin" / f["name"], dtype=meta["dtype"])
                             for f in meta["files"]])
    assert int((stream == eos).sum()) == json.loads((tokens / "stats.json").read_text())["records"]


def test_a_separator_that_occurs_in_the_text_is_a_warning(tmp_path, capsys, small):
    code = pack.main([str(a) for a in ("--input", small, "--output", tmp_path / "o", "--seq-len", 4,
                                        "--eos-token", 9)])
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tokenbeam: warning")]
    assert code == 0
    assert len(warned) == 1 and "--eos-token 9 is an ordinary text token: it occurs 1 time(s)" in warned[0]
    pack.main([str(a) for a in ("--input", small, "--output", tmp_path / "p", "--seq-len", 4, "--eos-token", 0)])
    assert "warning" not in capsys.readouterr().err


def test_nothing_packed_prints_no_done_line(tmp_path, capsys, small):
    code = pack.main([str(a) for a in ("--input", small, "--output", tmp_path / "o", "--seq-len", 64,
                                        "--eos-token", 0)])
    err = capsys.readouterr().err
    assert code == 3 and err.splitlines()[-1].startswith("tokenbeam: error: nothing was packed")
    assert not any(line.startswith("done") for line in err.splitlines()), err
