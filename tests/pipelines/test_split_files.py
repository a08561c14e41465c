"""Large files read in parts (--split-size): every part reader gives exactly the records of the
unsplit read (ids, rows, rejections), the plan depends only on the file and the split size, and
tokenize and train write the same results whether a file is split or not."""
import argparse
import gzip
import json
import random
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.datasets import shards as shards_module
from pipelines import tokenize, train
from pipelines.datasets.shards import progress_line, split_size
from pipelines.datasets.parts import count_rows, plan_parts, with_first_row
from pipelines.datasets.sources import SourceOptions, expand_inputs, read_shard
from pipelines.datasets import sources

pytestmark = pytest.mark.slow


def hostile_jsonl(seed: int = 7, n: int = 1500) -> bytes:
    """JSONL with everything a reader must number right: a BOM, blank and whitespace-only lines,
    CRLF endings, records without ids, bad JSON, invalid UTF-8, a BOM mid-file, long lines."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        r = rng.random()
        if r < 0.05:
            lines.append(b"")
        elif r < 0.08:
            lines.append(b"  \t ")
        elif r < 0.12:
            lines.append(b'{"text": "no id %d"}' % i)
        elif r < 0.13:
            lines.append(b"not json %d" % i)
        elif r < 0.14:
            lines.append(b'{"id": "u%d", "text": "bad \xff byte"}' % i)
        elif r < 0.15:
            lines.append(b'\xef\xbb\xbf{"id": "bom%d", "text": "after a BOM"}' % i)
        else:
            lines.append(b'{"id": "r%d", "text": "%s"}' % (i, b"word " * rng.randint(1, 600)))
    return b"\xef\xbb\xbf" + b"\n".join(line + (b"\r" if rng.random() < 0.1 else b"") for line in lines)


def read_whole(path, options):
    (shard,) = expand_inputs([str(path)])
    return shard, [asdict(item) for item in read_shard(shard, options)]


def read_in_parts(shard, options, size, chunk_size=1 << 20):
    """Plan, count the rows of the byte-range parts, read each part: the items of all parts, in order."""
    units, why = plan_parts([shard], options, size)
    rows = {(u.url, u.part.index): count_rows(u, options, chunk_size) for u in units if u.part is not None}
    items = [asdict(item) for u in units for item in read_shard(with_first_row(u, rows), options, chunk_size)]
    return units, why, items


@pytest.mark.parametrize("options, reasons", [
    (SourceOptions(), {"bad_json"}),
    (SourceOptions(max_record_bytes=1200, invalid_utf8="reject"), {"bad_json", "invalid_utf8", "record_too_large"})],
    ids=["default", "strict"])
def test_jsonl_parts_give_the_records_rows_and_rejections_of_the_whole_file(tmp_path, options, reasons, monkeypatch):
    """Parts read in blocks of lines (`_native.jsonl_block`, each block cut where the part ends) give
    what the whole file gives, and that is what reading it line by line gives."""
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(hostile_jsonl())
    shard, whole = read_whole(path, options)
    with monkeypatch.context() as m:
        m.setattr(sources, "_JSONL_BLOCK", None)
        m.setattr(sources, "_JSONL_LINES_FIELDS", None)
        assert read_whole(path, options)[1] == whole
    assert {item.get("reason") for item in whole} == reasons | {None}
    blocks = []
    monkeypatch.setattr(sources, "_read_block", lambda block, *a, read=sources._read_block: (
        blocks.append(block), read(block, *a))[1])
    for size, chunk_size in ((4096, 13), (4099, 4096), (50_000, 1 << 20), (50_001, 7_000)):
        units, why, items = read_in_parts(shard, options, size, chunk_size)
        assert len(units) == -(-shard.size // size) and why == {}
        assert items == whole, (size, chunk_size)
    assert sources._JSONL_BLOCK is None or len(blocks) > 100


@pytest.mark.parametrize("separator", [None, "<|endoftext|>", "\n\n"], ids=["lines", "eot", "blank-line"])
def test_text_parts_give_the_records_of_the_whole_file(tmp_path, separator):
    rng = random.Random(3)
    pieces = [b"doc %d %s" % (i, b"z " * rng.randint(0, 300)) if rng.random() > 0.1 else b"  " for i in range(3000)]
    joiner = b"\n" if separator is None else separator.encode() + (b"\n" if rng.random() < 0.5 else b"")
    path = tmp_path / "docs.txt"
    path.write_bytes(joiner.join(pieces))
    options = SourceOptions(separator=separator)
    shard, whole = read_whole(path, options)
    for size, chunk_size in ((4096, 5), (9000, 1 << 20)):
        units, why, items = read_in_parts(shard, options, size, chunk_size)
        if separator == "\n\n":       # "\n\n" overlaps itself: no boundary can be found mid-file
            assert len(units) == 1 and "overlap" in why[shard.relpath]
        else:
            assert len(units) > 1
        assert items == whole


def test_parquet_parts_are_runs_of_row_groups_numbered_as_the_whole_file(tmp_path):
    path = tmp_path / "rows.parquet"
    texts = [("t %d " % i) * (i % 50) if i % 7 else None for i in range(5000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=300)
    options = SourceOptions()
    shard, whole = read_whole(path, options)
    units, why, items = read_in_parts(shard, options, 8192)
    assert len(units) > 2 and all(u.part.kind == "row_groups" for u in units)
    assert items == whole


def test_plan_depends_on_the_file_and_split_size_and_says_why_a_file_stays_whole(tmp_path):
    data = hostile_jsonl()
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "small.jsonl").write_bytes(data[:1000])
    found = expand_inputs([str(tmp_path / "*")])
    units, why = plan_parts(found, SourceOptions(), 4096)
    names = [u.output_name() for u in units]
    n = -(-len(data) // 4096)
    assert names[:n] == [f"a.part{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert names[n:] == ["b.parquet", "small.parquet"]
    assert list(why) == ["b.jsonl.gz"] and "compressed" in why["b.jsonl.gz"]
    assert plan_parts(found, SourceOptions(), 0) == (found, {})
    # The compressed file read whole (its bytes counted as stored) gives the records of its plain twin.
    stored = []
    items = [(i.row, getattr(i, "text", None)) for i in read_shard(found[1], SourceOptions(), progress=stored.append)]
    assert items == [(i.row, getattr(i, "text", None)) for i in read_shard(found[0], SourceOptions())]
    assert sum(stored) == found[1].size


def test_split_size_flag_takes_sizes_and_off_and_refuses_tiny_parts():
    assert split_size("64K") == 64 << 10 and split_size("off") == 0 and split_size("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="too small"):
        split_size("100")
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        split_size("big")


def test_progress_line_says_bytes_rate_and_time_left():
    assert progress_line(100_000_000, 400_000_000, 10.0) == \
        "read 100.0 of 400.0 MB (25.0%), 10.0 MB/s, about 0:30 left"


@pytest.fixture(scope="module")
def one_file(tmp_path_factory, corpora):
    """multi/ concatenated into ONE file, with records that need their row number (no id, bad JSON)
    spread through it."""
    folder = tmp_path_factory.mktemp("one")
    lines = b"".join(p.read_bytes() for p in sorted((corpora / "multi").glob("*.jsonl"))).splitlines()
    for at in range(0, len(lines), 97):
        lines[at] = b'{"text": "no id, row %d"}' % at if at % 2 else b"{broken"
    path = folder / "all.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def run_both(command, tmp_path, argv):
    outs = {}
    for size in ("off", "64K"):
        outs[size] = tmp_path / size
        command.run([*argv, "--output", str(outs[size]), "--split-size", size,
                     "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"])
    return outs["off"], outs["64K"]


def without_timing(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "timing"}


def test_tokenize_of_a_split_file_writes_the_results_of_the_unsplit_run(tmp_path, one_file, sample):
    tok = tmp_path / "tok"
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(tok), "--vocab-size", "800"])
    whole, split = run_both(tokenize, tmp_path, ["--tokenizer", str(tok / "tokenizer.json"), "--input", str(one_file)])
    assert (whole / "stats.json").exists() and (split / "stats.json").exists()
    assert without_timing(json.loads((whole / "stats.json").read_text())) == \
        without_timing(json.loads((split / "stats.json").read_text()))
    parts = sorted(p.name for p in split.glob("*.parquet"))
    assert len(parts) > 20 and all(".part" in name for name in parts)
    assert pa.concat_tables([pq.read_table(split / name) for name in parts]).equals(pq.read_table(whole / "all.parquet"))
    rejected = rejected_lines(split)
    assert rejected == (whole / "rejected" / "all.jsonl").read_bytes() and rejected
    manifests = [json.loads((out / "_SUCCESS").read_text()) for out in (whole, split)]
    assert manifests[1]["shards"][0].pop("parts") == parts
    assert manifests[0]["shards"][0].pop("output") == "all.parquet"
    assert manifests[0] == manifests[1]


def test_train_of_a_split_file_writes_the_counts_and_tokenizer_of_the_unsplit_run(tmp_path, one_file):
    whole, split = run_both(train, tmp_path, ["--input", str(one_file), "--vocab-size", "1200"])
    files = sorted(p.relative_to(whole) for p in whole.rglob("*") if p.is_file() and "rejected" not in p.parts)
    assert any(str(f).startswith("counts/part-") for f in files)
    for name in files:
        if name.name != "train_report.json":
            assert (whole / name).read_bytes() == (split / name).read_bytes(), name
    reports = [json.loads((out / "train_report.json").read_text()) for out in (whole, split)]
    for report in reports:
        report.pop("timing_seconds"), report.pop("peak_rss_mb"), report.pop("peak_rss_mb_by_process", None)
    assert reports[0] == reports[1] and reports[0]["account"]["records"]["rejected"] > 0
    assert reports[0]["account"]["shards"]["read"] == 1
    assert rejected_lines(split) == (whole / "rejected" / "all.jsonl").read_bytes()


def rejected_lines(out) -> bytes:
    """The rejected/ lines of a split file's parts, in part order."""
    return b"".join(p.read_bytes() for p in sorted((out / "rejected").glob("all.part*.jsonl")))


def test_rerun_reuses_parts_and_another_split_size_replaces_them(tmp_path, one_file, sample, capsys):
    tok = tmp_path / "tok"
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(tok), "--vocab-size", "600"])
    out = tmp_path / "out"
    argv = ["--tokenizer", str(tok / "tokenizer.json"), "--input", str(one_file), "--output", str(out)]
    tokenize.run([*argv, "--split-size", "1M"])
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    capsys.readouterr()
    tokenize.run([*argv, "--split-size", "1M"])
    assert "skipped all.jsonl (part00000-of-" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")} == first
    tokenize.run([*argv, "--split-size", "2M"])
    second = sorted(p.name for p in out.glob("*.parquet"))
    assert second and not set(second) & set(first)
    assert all(name.endswith(f"-of-{len(second):05d}.parquet") for name in second)


def test_progress_of_bytes_read_is_said_during_the_run_and_not_under_quiet(tmp_path, one_file, sample, capsys,
                                                                         monkeypatch):
    monkeypatch.setattr(shards_module, "PROGRESS_SECONDS", 0.05)
    monkeypatch.setattr(shards_module, "PROGRESS_WRITE_SECONDS", 0.0)
    tok = tmp_path / "tok"
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(tok), "--vocab-size", "600", "--quiet"])
    argv = ["--tokenizer", str(tok / "tokenizer.json"), "--input", str(one_file), "--split-size", "1M"]
    capsys.readouterr()
    tokenize.run([*argv, "--output", str(tmp_path / "a")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("read ")]
    total = one_file.stat().st_size / 1e6
    assert lines and all(f" of {total:,.1f} MB (" in line and "MB/s" in line for line in lines)
    tokenize.run([*argv, "--output", str(tmp_path / "b"), "--quiet"])
    assert capsys.readouterr().err == ""


def test_a_large_compressed_file_is_read_whole_and_stats_json_says_why(tmp_path, sample):
    tok = tmp_path / "tok"
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(tok), "--vocab-size", "600", "--quiet"])
    source = sample / "sample-000-of-002.jsonl"
    packed = tmp_path / "in" / "big.jsonl.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(source.read_bytes()))
    assert packed.stat().st_size > 4096
    stats = tokenize.run(["--tokenizer", str(tok / "tokenizer.json"), "--input", str(packed), "--output",
                          str(tmp_path / "out"), "--split-size", "4K", "--quiet"])
    assert list(stats["read_whole"]) == ["big.jsonl.gz"] and "compressed" in stats["read_whole"]["big.jsonl.gz"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == ["big.parquet"]
    assert stats["records"] == sum(1 for line in source.read_bytes().splitlines() if line.strip())


def test_multi_frame_zstd_parts_are_runs_of_frames_numbered_as_the_whole_file(tmp_path):
    import zstandard

    data = hostile_jsonl(seed=11, n=1200)
    rng = random.Random(5)
    cuts = sorted(set(rng.sample(range(1, len(data)), 40) + [data.index(b"\n", 50_000) + 1, len(data)]))
    frames = [zstandard.ZstdCompressor(write_checksum=i % 2 == 0).compress(data[a:b])
              for i, (a, b) in enumerate(zip([0] + cuts, cuts))]
    path = tmp_path / "multi.jsonl.zst"
    path.write_bytes(b"".join(frames))
    options = SourceOptions(max_record_bytes=1200, invalid_utf8="reject")
    shard, whole = read_whole(path, options)
    for size in (1, 2_000):
        units, why, items = read_in_parts(shard, options, size, chunk_size=4096)
        assert why == {} and len(units) > 5 and all(u.part.kind == "frames" for u in units)
        assert items == whole, size
    one_frame = tmp_path / "one.jsonl.zst"
    one_frame.write_bytes(zstandard.ZstdCompressor().compress(data))
    unsized = tmp_path / "unsized.jsonl.zst"
    unsized.write_bytes(b"".join(zstandard.ZstdCompressor(write_content_size=False).compress(data[a:b])
                                 for a, b in zip([0] + cuts, cuts)))
    units, why = plan_parts(expand_inputs([str(one_frame), str(unsized)]), options, 4096)
    assert [u.part for u in units] == [None, None]
    assert "single frame" in why["one.jsonl.zst"] and "content size" in why["unsized.jsonl.zst"]
