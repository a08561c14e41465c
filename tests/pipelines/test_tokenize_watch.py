"""`tokenize --window` and `tokenize --watch` end to end: real files dropped
into a folder while the command runs, judged against a baseline of the same collection."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import tokenize, train
from tests.conftest import ROOT
from schemas.accounts import account_of

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 300


@pytest.fixture(scope="module")
def english(corpora):
    return corpora / "en"


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory, english):
    out = tmp_path_factory.mktemp("tok")
    train.run(["--input", str(english / "en-000-of-012.jsonl"), "--output", str(out), "--vocab-size", "2000"])
    return out / "tokenizer.json"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, english, tokenizer_json):
    out = tmp_path_factory.mktemp("baseline")
    tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out),
                  "--input", str(english / "en-001-of-012.jsonl"), "--input", str(english / "en-002-of-012.jsonl")])
    return out / "stats.json"


def drop(src: Path, folder: Path, name: str, lines: int | None = None) -> None:
    """Write a shard into the watched folder the safe way: a hidden name, then a rename."""
    hidden = folder / f".{name}.part"
    with open(src, encoding="utf-8") as f:
        text = "".join(line for i, line in enumerate(f) if lines is None or i < lines)
    hidden.write_text(text, encoding="utf-8")
    os.rename(hidden, folder / name)


def start_watch(tokenizer_json, folder, out, *flags, pattern="*.jsonl"):
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "tokenize", "--tokenizer", str(tokenizer_json),
                             "--input", str(folder / pattern), "--output", str(out), "--watch",
                             "--poll-interval", "0.3", *map(str, flags)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def test_watch_tokenizes_each_shard_as_it_lands_and_alerts_only_on_the_other_domain(
        tmp_path, english, corpora, tokenizer_json, baseline):
    folder, out = tmp_path / "incoming", tmp_path / "out"
    folder.mkdir()
    watch = start_watch(tokenizer_json, folder, out, "--stop-when-idle", "6s", "--baseline", baseline)
    try:
        drop(english / "en-003-of-012.jsonl", folder, "en-003.jsonl")
        wait_for(out / "en-003.parquet")        # written before the next shard has even arrived
        drop(english / "en-004-of-012.jsonl", folder, "en-004.jsonl")
        drop(corpora / "code" / "code-000-of-006.jsonl", folder, "code.jsonl", lines=150)
        _, stderr = watch.communicate(timeout=RUN_TIMEOUT)
    finally:
        watch.kill()
    assert watch.returncode == 1, stderr           # one shard drifted
    alerts = {a["shard"]: a for a in map(json.loads, (out / "alerts.jsonl").read_text().splitlines())}
    assert set(alerts) == {"en-003.jsonl", "en-004.jsonl", "code.jsonl"}
    assert not alerts["en-003.jsonl"]["drift"] and not alerts["en-004.jsonl"]["drift"]
    assert alerts["code.jsonl"]["drift"] and "bytes_per_token" in alerts["code.jsonl"]["flagged"]
    assert "ALERT code.jsonl" in stderr and "ok en-003.jsonl" in stderr
    # stats.json and _SUCCESS describe every shard of the watch.
    stats = json.loads((out / "stats.json").read_text())
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert account_of(stats).shards_read == 3 and account_of(manifest) == account_of(stats)
    assert account_of(manifest).records_written == stats["records"]

    # The same bytes as a batch run over the same files.
    batch = tmp_path / "batch"
    tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(folder / "*.jsonl"), "--output", str(batch)])
    for name in ("en-003.parquet", "en-004.parquet", "code.parquet"):
        assert (out / name).read_bytes() == (batch / name).read_bytes(), name
    assert json.loads((batch / "stats.json").read_text())["records"] == stats["records"]


def test_sigterm_ends_a_watch_cleanly_with_whole_run_results(tmp_path, english, tokenizer_json):
    folder, out = tmp_path / "incoming", tmp_path / "out"
    folder.mkdir()
    drop(english / "en-005-of-012.jsonl", folder, "already-there.jsonl", lines=40)
    watch = start_watch(tokenizer_json, folder, out)
    try:
        wait_for(out / "already-there.parquet")
        drop(english / "en-006-of-012.jsonl", folder, "late.jsonl", lines=40)
        wait_for(out / "late.parquet")
        watch.send_signal(signal.SIGTERM)
        _, stderr = watch.communicate(timeout=RUN_TIMEOUT)
    finally:
        watch.kill()
    assert watch.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert json.loads((out / "stats.json").read_text())["records"] == 80
    assert json.loads((out / "_SUCCESS").read_text())["account"]["shards"]["failed"] == 0
    assert not list(out.glob(".*tmp-*")) and not (out / "_STOP").exists()


def test_a_file_of_unknown_format_landing_in_a_watch_is_listed_and_the_watch_goes_on(
        tmp_path, english, tokenizer_json):
    folder, out = tmp_path / "incoming", tmp_path / "out"
    folder.mkdir()
    watch = start_watch(tokenizer_json, folder, out, "--stop-when-idle", "4s", "--allow-shard-errors", pattern="*")
    try:
        drop(english / "en-005-of-012.jsonl", folder, "first.jsonl", lines=20)
        wait_for(out / "first.parquet")
        (folder / "notes.csv").write_text("a,b\n1,2\n")
        wait_for(out / "rejected" / "notes.csv.jsonl")
        drop(english / "en-006-of-012.jsonl", folder, "second.jsonl", lines=30)
        _, stderr = watch.communicate(timeout=RUN_TIMEOUT)
    finally:
        watch.kill()
    assert watch.returncode == 0, stderr           # --allow-shard-errors: a warning, not a failure
    assert "Traceback" not in stderr
    assert "warning: " in stderr and "cannot tell the format of" in stderr and "notes.csv" in stderr
    (listed,) = map(json.loads, (out / "rejected" / "notes.csv.jsonl").read_text().splitlines())
    assert listed["reason"] == "wrong_format" and listed["source"].endswith("notes.csv")
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records"] == 50 and len(stats["shard_errors"]) == 1
    assert pq.read_table(out / "second.parquet").num_rows == 30


def test_watch_without_any_shard_is_an_incomplete_run(tmp_path, tokenizer_json):
    folder = tmp_path / "empty"
    folder.mkdir()
    watch = start_watch(tokenizer_json, folder, tmp_path / "out", "--stop-after", "2s")
    _, stderr = watch.communicate(timeout=RUN_TIMEOUT)
    assert watch.returncode == 3 and "before any shard" in stderr.splitlines()[-1]


def test_window_statistics_add_up_and_survive_a_rerun(tmp_path, sample, tokenizer_json):
    folder = tmp_path / "in"
    folder.mkdir()
    records = [json.loads(line) for f in sorted(sample.glob("*.jsonl")) for line in f.read_text().splitlines()]
    for i, r in enumerate(records):      # three hourly windows, one record in ten without a time
        r["ts"] = None if i % 10 == 0 else (1796119200 + 3600 * (i % 3) + i if i % 2 else
                                            f"2026-12-01T{10 + i % 3:02d}:{i % 60:02d}:00Z")
    for k in range(2):
        (folder / f"s{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[k::2]))
    args = ["--tokenizer", str(tokenizer_json), "--input", str(folder / "*.jsonl"), "--output", str(tmp_path / "out"),
            "--timestamp-field", "ts", "--window", "1h"]
    stats = tokenize.run(args)
    windows = sorted((tmp_path / "out" / "windows").glob("*.stats.json"))
    assert [w.name for w in windows] == [f"2026-12-01T{h}:00:00Z.stats.json" for h in (10, 11, 12)]
    per_window = [json.loads(w.read_text()) for w in windows]
    untimed = sum(r["ts"] is None for r in records)
    assert sum(w["records"] for w in per_window) == stats["records"] - untimed
    assert json.loads((tmp_path / "out" / "_SUCCESS").read_text())["untimed_records"] == untimed
    assert pq.read_table(tmp_path / "out" / "s0.parquet").column("event_time").null_count == \
        sum(r["ts"] is None for r in records[0::2])
    first = {w.name: w.read_bytes() for w in windows}
    tokenize.run(args)                    # every shard reused: its windows come back from its Parquet
    again = {w.name: json.loads(w.read_bytes()) for w in (tmp_path / "out" / "windows").glob("*.stats.json")}
    for name, text in first.items():
        a, b = json.loads(text), again[name]
        a.pop("timing", None), b.pop("timing", None)
        assert a == b, name


def test_window_flags_are_checked_at_launch(tmp_path, sample, tokenizer_json):
    from pipelines.core.errors import UserError
    base = ["--tokenizer", str(tokenizer_json), "--input", str(sample / "*.jsonl"), "--output", str(tmp_path / "o")]
    with pytest.raises(UserError, match="go together"):
        tokenize.run(base + ["--window", "1h"])
    with pytest.raises(UserError, match="--window"):
        tokenize.run(base + ["--timestamp-field", "ts", "--window", "90"])
    with pytest.raises(UserError, match="applies to --watch"):
        tokenize.run(base + ["--stop-after", "1h"])


def test_a_file_that_grows_after_it_was_tokenized_is_reported(tmp_path, english, tokenizer_json):
    """A file written in two parts with a pause longer than the poll interval is tokenized as its first
    part; the records written after that must not be lost without a word: the end of the watch names
    the file, and a rerun without --watch tokenizes it whole."""
    folder, out = tmp_path / "incoming", tmp_path / "out"
    folder.mkdir()
    lines = (english / "en-003-of-012.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    watch = start_watch(tokenizer_json, folder, out, "--stop-when-idle", "4s")
    try:
        grown = folder / "grown.jsonl"
        grown.write_text("".join(lines[:30]), encoding="utf-8")
        wait_for(out / "grown.parquet")
        with open(grown, "a", encoding="utf-8") as f:
            f.write("".join(lines[30:]))
        _, stderr = watch.communicate(timeout=RUN_TIMEOUT)
    finally:
        watch.kill()
    assert watch.returncode == 0, stderr
    assert pq.read_metadata(out / "grown.parquet").num_rows == 30
    warning = [line for line in stderr.splitlines() if line.startswith("tokenbeam: warning:") and "grown.jsonl" in line]
    assert len(warning) == 1 and "changed after it was tokenized" in warning[0], stderr
    tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out), "--input", str(folder / "*.jsonl")])
    assert pq.read_metadata(out / "grown.parquet").num_rows == len(lines)
