"""Every command with `s3://` URLs for its inputs, tokenizer and outputs, against an S3 server on
127.0.0.1 (test_s3.py's moto server, one for this module), gives the outputs of the same command on
local paths: train, tokenize (batch, --window, --group-field, rejected records, --baseline, --watch),
pack (every format), evaluate, stats and drift. `gs://` goes through the same layer: drift and
tokenize --baseline read it from an in-process filesystem registered under "gs" in fsspec's registry
(gcsfs and a GCS emulator are not installed here: this proves the routing, not gcsfs).

Both runs use the same layout under their root (ROOT/corpus, ROOT/tok, ROOT/tokens, ...), so a file
that records a path records the same one with the root swapped. Compared byte for byte after that swap,
except, with their reason:
- Parquet footers are compared as parsed key-values, the table as Arrow data (the footer's length
  follows the path lengths, so the bytes cannot be equal);
- an input's `version` in a footer's rerun fingerprint is its ETag on S3 and its mtime locally;
- pack records its token Parquet inputs by size and digest (of the footer and of stats.json), and its
  rerun fingerprint digests those: the footers and stats.json record paths, so these differ;
- timings (`timing`, `timing_seconds`) and peak memory (`peak_rss_mb*`) are measurements of the run.

A proxy between the commands and the S3 server fails requests: a retried failure gives the same
outputs, a lasting one ends in exit 3 with no `_SUCCESS` and nothing incomplete under a final name,
and a rerun without faults completes with the same outputs.
"""
import contextlib
import gzip
import http.client
import http.server
import io
import json
import posixpath
import shutil
import threading
import time
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from pipelines import cli
from pipelines.files import filesystem
from tests.test_s3 import BUCKET, s3  # noqa: F401  (the module's S3 server: a fixture)

REMOTE = f"s3://{BUCKET}"
SPECIAL = "<|endoftext|>"
VOLATILE = {"timing", "timing_seconds", "peak_rss_mb", "peak_rss_mb_by_process"}
# Digests of the inputs' identity: their URLs and versions, their footers and stats.json (which record
# the paths they came from); pack's rerun fingerprint is a digest of them all.
IDENTITY_DIGESTS = {"tokenize_footer_sha256", "inputs_stats_sha256"}
DAY = 86_400


@pytest.fixture(scope="module")
def local_root(tmp_path_factory):
    return tmp_path_factory.mktemp("walk")


@pytest.fixture(scope="module")
def local_corpus(local_root, corpora):
    """The corpus the S3 fixture uploads to s3://BUCKET/corpus/ (this module's, overriding test_s3's):
    tiny/ with a timestamp a few hours apart on every record (windows over three days), one line that
    is not JSON (a rejected record) and the second shard gzipped (mtime 0: reproducible bytes)."""
    folder = local_root / "corpus"
    folder.mkdir()
    for n, name in enumerate(sorted((corpora / "tiny").glob("*.jsonl"))):
        lines = []
        for i, line in enumerate(name.read_text(encoding="utf-8").splitlines()):
            record = json.loads(line)
            record["ts"] = 1_767_225_600 + (n * 30 + i) * 5 * 3600
            lines.append(json.dumps(record))
        lines.insert(3, "{not json")
        data = ("\n".join(lines) + "\n").encode()
        if n == 0:
            (folder / name.name).write_bytes(data)
        else:
            (folder / (name.name + ".gz")).write_bytes(gzip.compress(data, mtime=0))
    return folder


def run(*argv) -> tuple[int, str, str]:
    """`tokenbeam ARGV` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def commands(root: str) -> dict[str, list]:
    """Every command of the walk, on paths under `root`."""
    corpus = f"{root}/corpus/*.jsonl*"
    return {
        "train": ["train", "--input", corpus, "--output", f"{root}/tok", "--vocab-size", 600,
                  "--special-token", SPECIAL],
        "tokenize": ["tokenize", "--tokenizer", f"{root}/tok", "--input", corpus, "--output", f"{root}/tokens",
                     "--eos-token", SPECIAL, "--timestamp-field", "ts", "--window", "1d", "--group-field", "lang"],
        "pack": ["pack", "--input", f"{root}/tokens", "--output", f"{root}/packed", "--seq-len", 64,
                 "--validation-fraction", 0.2, "--format", "parquet", "--format", "megatron", "--format", "bin"],
        "evaluate": ["evaluate", "--tokenizer", f"{root}/tok/tokenizer.json", "--name", "ours",
                     "--merges", "100,343", "--input", corpus, "--output", f"{root}/evaluated", "--group-field", "lang"],
        "stats": ["stats", f"{root}/tokens/*.parquet", "--tokenizer", f"{root}/tok/tokenizer.json",
                  "--output", f"{root}/rebuilt/stats.json", "--group-field", "lang", "--window", "1d"],
        "drift": ["drift", f"{root}/tokens/stats.json", f"{root}/rebuilt", "--report", f"{root}/drift"],
        "baseline": ["tokenize", "--tokenizer", f"{root}/tok/tokenizer.json", "--input", f"{root}/corpus/tiny-000*",
                     "--output", f"{root}/judged", "--baseline", f"{root}/tokens/stats.json"],
    }


@pytest.fixture(scope="module")
def walk(s3, local_root, local_corpus):
    """Every command on local paths, then on S3: {"local"|"s3": {name: (code, stdout, stderr)}}."""
    results = {}
    for where, root in (("local", str(local_root)), ("s3", REMOTE)):
        results[where] = {name: run(*argv) for name, argv in commands(root).items()}
    return results


def local_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def remote_files(s3, prefix: str) -> dict[str, bytes]:
    s3.invalidate_cache()
    base = f"{BUCKET}/{prefix}"
    return {p[len(base) + 1:]: s3.cat_file(p) for p in sorted(s3.find(base))}


def without_volatile(value):
    """A parsed JSON value without what the module docstring lists."""
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if not volatile(k, v, value)}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def volatile(key: str, value, within: dict) -> bool:
    return (key in VOLATILE or key in IDENTITY_DIGESTS
            or (key == "fingerprint" and isinstance(value, str))
            or (key == "version" and "url" in within)
            # a token Parquet file's size counts its footer, which records the path of its input
            or (key == "size" and "tokenize_footer_sha256" in within))


def as_local(data: bytes, local_root) -> bytes:
    return data.replace(REMOTE.encode(), str(local_root).encode())


def parquet_view(data: bytes, local_root):
    """A Parquet file as (table, footer key-values with paths swapped and volatile fields dropped)."""
    pf = pq.ParquetFile(io.BytesIO(data))
    footer = {}
    for key, value in (pf.metadata.metadata or {}).items():
        value = as_local(value, local_root)
        try:
            footer[key] = without_volatile(json.loads(value))
        except ValueError:
            footer[key] = value
    return pf.read(), footer


def assert_same_outputs(s3, local_root, folder: str, expected_names=None) -> list[str]:
    """FOLDER of the S3 run holds the same files as FOLDER of the local run, equal as the module
    docstring says; returns their names."""
    local, remote = local_files(local_root / folder), remote_files(s3, folder)
    assert sorted(remote) == sorted(local), folder
    if expected_names is not None:
        assert set(expected_names) <= set(local), (folder, sorted(local))
    for name, theirs in local.items():
        if name.endswith(".parquet"):
            (table, footer), (table_local, footer_local) = parquet_view(remote[name], local_root), \
                parquet_view(theirs, local_root)
            assert table.equals(table_local) and footer == footer_local, f"{folder}/{name}"
            continue
        ours = as_local(remote[name], local_root)
        if ours == theirs:
            continue
        if name.endswith(".jsonl"):
            assert [without_volatile(json.loads(x)) for x in ours.splitlines()] == \
                   [without_volatile(json.loads(x)) for x in theirs.splitlines()], f"{folder}/{name}"
        else:       # JSON files (stats.json, reports, _SUCCESS); anything else had to be equal bytes
            assert without_volatile(json.loads(ours)) == without_volatile(json.loads(theirs)), f"{folder}/{name}"
    return sorted(local)


@pytest.mark.parametrize("name", ["train", "tokenize", "pack", "evaluate", "stats", "drift", "baseline"])
def test_every_command_ends_as_on_local_paths(walk, local_root, name):
    """Same exit code (0) and the same report on stdout, paths aside."""
    (code, stdout, stderr), (local_code, local_stdout, local_stderr) = walk["s3"][name], walk["local"][name]
    assert local_code == 0, local_stderr
    assert code == 0, stderr
    assert stdout.replace(REMOTE, "ROOT") == local_stdout.replace(str(local_root), "ROOT")


def test_trained_files_equal_the_local_run(s3, walk, local_root):
    names = assert_same_outputs(s3, local_root, "tok", ["tokenizer.json", "tokenizer.tiktoken", "train_report.json",
                                                        "counts/_totals.json", "_SUCCESS"])
    assert sum(n.startswith("counts/part-") for n in names) > 0


def test_token_files_windows_groups_and_rejected_equal_the_local_run(s3, walk, local_root):
    names = assert_same_outputs(s3, local_root, "tokens", ["tiny-000-of-002.parquet", "tiny-001-of-002.parquet",
                                                           "stats.json", "_SUCCESS", "rejected/tiny-000-of-002.jsonl",
                                                           "rejected/tiny-001-of-002.jsonl"])
    assert sum(n.startswith("windows/") for n in names) >= 3
    assert sum(n.startswith("groups/") for n in names) >= 3


def test_pack_files_of_every_format_equal_the_local_run(s3, walk, local_root):
    names = assert_same_outputs(s3, local_root, "packed", ["pack.json", "_SUCCESS"])
    assert {posixpath.splitext(n)[1] for n in names} >= {".parquet", ".bin", ".idx", ".json"}


def test_evaluate_files_equal_the_local_run(s3, walk, local_root):
    assert_same_outputs(s3, local_root, "evaluated", ["evaluate.json", "evaluate.md", "_SUCCESS"])


def test_rebuilt_stats_equal_the_local_run(s3, walk, local_root):
    names = assert_same_outputs(s3, local_root, "rebuilt", ["stats.json"])
    assert any(n.startswith("groups/") for n in names) and any(n.startswith("windows/") for n in names)


def test_drift_report_on_s3_equals_the_local_one(s3, walk, local_root):
    assert_same_outputs(s3, local_root, "drift", ["drift.json", "drift.md", "drift_groups.json"])


def test_tokenize_with_an_s3_baseline_judges_the_run(s3, walk, local_root):
    code, stdout, _ = walk["s3"]["baseline"]
    assert code == 0 and "drift" in stdout
    assert_same_outputs(s3, local_root, "judged", ["tiny-000-of-002.parquet", "stats.json", "_SUCCESS"])
