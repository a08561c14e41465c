"""Every command with `s3://` URLs for its inputs, tokenizer and outputs, against an S3 server on
127.0.0.1 (test_s3.py's moto server, one for this module), gives the outputs of the same command on
local paths: train, tokenize (batch, --window, --group-field, rejected records, --baseline, --watch),
pack (every format), evaluate, stats, drift and estimate. `gs://` goes through the same layer: drift and
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
import importlib
import io
import json
import os
import posixpath
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from pipelines import cli
from pipelines.datasets.watch import is_temporary_name
from tests.conftest import ROOT
from tests.system.test_s3 import BUCKET, s3  # noqa: F401  (the module's S3 server: a fixture)

pytestmark = pytest.mark.engine

REMOTE = f"s3://{BUCKET}"
SPECIAL = "<|endoftext|>"
VOLATILE = {"timing", "timing_seconds", "peak_rss_mb", "peak_rss_mb_by_process"}
# Digests of the inputs' identity: their URLs and versions, their footers and stats.json (which record
# the paths they came from); pack's rerun fingerprint is a digest of them all.
IDENTITY_DIGESTS = {"tokenize_footer_sha256", "inputs_stats_sha256"}


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
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exc:      # tokenize --baseline's verdict ends the process so
            code = exc.code
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
        "estimate": ["estimate", "--tokenizer", f"{root}/tok", "--input", corpus, "--seed", 3,
                     "--output", f"{root}/estimate/estimate.json"],
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


def test_estimate_on_s3_draws_the_same_records_as_on_local_paths(s3, walk, local_root):
    """The same seed draws the same byte offsets (the files have the same sizes) and reads the gzipped
    shard through: the same figures. Its time and the projection from it are measurements."""
    (code, _, stderr), (local_code, _, local_stderr) = walk["s3"]["estimate"], walk["local"]["estimate"]
    assert local_code == 0 and code == 0, (local_stderr, stderr)
    ours = json.loads(remote_files(s3, "estimate")["estimate.json"])
    theirs = json.loads((local_root / "estimate" / "estimate.json").read_text())
    assert ours["read_through"] == 1 and ours["sampled_by_offset"] >= 1
    for report in (ours, theirs):
        for key in ("seconds", "projection", "tokenizer"):
            report.pop(key)
    assert ours == theirs


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


def objects_under(s3, prefix: str) -> list[str]:
    s3.invalidate_cache()
    return sorted(s3.find(f"{BUCKET}/{prefix}"))


def test_an_unreadable_s3_baseline_is_refused_before_the_run(s3, walk):
    code, _, stderr = run("tokenize", "--tokenizer", f"{REMOTE}/tok", "--input", f"{REMOTE}/corpus/*.jsonl*",
                          "--output", f"{REMOTE}/refused", "--baseline", f"{REMOTE}/nowhere/stats.json")
    assert code == 2
    assert stderr.splitlines()[-1] == f"tokenbeam: error: --baseline {REMOTE}/nowhere/stats.json: no such file"
    assert "tokenized" not in stderr and objects_under(s3, "refused") == []


def test_a_baseline_the_run_would_rewrite_is_refused_before_the_run(s3, walk):
    """--baseline OUTPUT/stats.json: the run removes it first, so the verdict could only fail after it."""
    s3.copy(f"{BUCKET}/tokens/stats.json", f"{BUCKET}/self/stats.json")
    code, _, stderr = run("tokenize", "--tokenizer", f"{REMOTE}/tok", "--input", f"{REMOTE}/corpus/*.jsonl*",
                          "--output", f"{REMOTE}/self", "--eos-token", SPECIAL, "--baseline", f"{REMOTE}/self")
    assert code == 2 and "which this run rewrites" in stderr.splitlines()[-1]
    assert objects_under(s3, "self") == [f"{BUCKET}/self/stats.json"]


class FakeGCS(MemoryFileSystem):
    """`gs://` in this process: fsspec's memory filesystem under the gs protocol, with its own store."""
    protocol = ("gs", "gcs")
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("gs://").removeprefix("gcs://"))

    def unstrip_protocol(self, name: str) -> str:
        return "gs://" + name.lstrip("/")


@pytest.fixture
def gcs():
    """gs:// served by FakeGCS, holding the local run's tokens/ and rebuilt/ statistics under gs://bkt."""
    saved = {p: fsspec.registry.get(p) for p in FakeGCS.protocol}
    for protocol in FakeGCS.protocol:
        fsspec.register_implementation(protocol, FakeGCS, clobber=True)
    FakeGCS.store.clear()
    try:
        yield fsspec.filesystem("gs")
    finally:
        for protocol, cls in saved.items():
            if cls is None:
                importlib.import_module("fsspec.registry")._registry.pop(protocol, None)   # no public unregister
            else:
                fsspec.register_implementation(protocol, cls, clobber=True)
        FakeGCS.store.clear()


def test_drift_and_baseline_read_gs_urls_like_local_paths(s3, walk, local_root, gcs):
    for folder in ("tokens", "rebuilt"):          # the JSON files, and the run's _SUCCESS: drift reads finished runs
        for path in (local_root / folder).rglob("*"):
            if path.is_file() and path.suffix != ".parquet":
                gcs.pipe_file(f"gs://bkt/{path.relative_to(local_root).as_posix()}", path.read_bytes())
    code, stdout, stderr = run("drift", "gs://bkt/tokens/stats.json", "gs://bkt/rebuilt")
    local_code, local_stdout, _ = walk["local"]["drift"]
    assert (code, stdout.replace("gs://bkt", "ROOT")) == (local_code, local_stdout.replace(str(local_root), "ROOT"))
    assert "groups:" in stdout      # the groups' files were read beside each stats.json

    code, stdout, stderr = run("tokenize", "--tokenizer", f"{REMOTE}/tok/tokenizer.json", "--input",
                               f"{REMOTE}/corpus/tiny-000*", "--output", f"{REMOTE}/judged-gs",
                               "--baseline", "gs://bkt/tokens/stats.json")
    assert code == 0, stderr
    assert stdout.splitlines()[-1] == walk["s3"]["baseline"][1].splitlines()[-1]
    code, _, stderr = run("tokenize", "--tokenizer", f"{REMOTE}/tok/tokenizer.json", "--input",
                          f"{REMOTE}/corpus/tiny-000*", "--output", f"{REMOTE}/refused-gs",
                          "--baseline", "gs://bkt/nowhere")
    assert (code, stderr.splitlines()[-1]) == (2, "tokenbeam: error: --baseline gs://bkt/nowhere: no such file")


def test_watch_on_s3_tokenizes_shards_as_they_land_like_a_batch_run(s3, walk):
    """A watch over an S3 prefix (run as a user would, in its own process) picks up a shard there at
    start and one that lands later, and writes what a batch run over the same objects writes."""
    s3.copy(f"{BUCKET}/corpus/tiny-000-of-002.jsonl", f"{BUCKET}/incoming/tiny-000-of-002.jsonl")
    watch = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "tokenize", "--tokenizer", f"{REMOTE}/tok",
                              "--input", f"{REMOTE}/incoming/*.jsonl*", "--output", f"{REMOTE}/watched",
                              "--eos-token", SPECIAL, "--watch", "--poll-interval", "0.3", "--stop-when-idle", "5s"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while f"{BUCKET}/watched/tiny-000-of-002.parquet" not in objects_under(s3, "watched"):
            assert time.monotonic() < deadline and watch.poll() is None, watch.stderr.read()
            time.sleep(0.3)
        s3.copy(f"{BUCKET}/corpus/tiny-001-of-002.jsonl.gz", f"{BUCKET}/incoming/tiny-001-of-002.jsonl.gz")
        _, stderr = watch.communicate(timeout=180)
    finally:
        watch.kill()
    assert watch.returncode == 0, stderr
    code, _, stderr = run("tokenize", "--tokenizer", f"{REMOTE}/tok", "--input", f"{REMOTE}/incoming/*.jsonl*",
                          "--output", f"{REMOTE}/batch", "--eos-token", SPECIAL)
    assert code == 0, stderr
    watched, batch = remote_files(s3, "watched"), remote_files(s3, "batch")
    assert sorted(watched) == sorted(batch) == [".tokenbeam.json", "_SUCCESS", "rejected/tiny-000-of-002.jsonl",
                                                "rejected/tiny-001-of-002.jsonl", "stats.json",
                                                "tiny-000-of-002.parquet", "tiny-001-of-002.parquet"]
    for name in ("tiny-000-of-002.parquet", "tiny-001-of-002.parquet", "_SUCCESS", "rejected/tiny-000-of-002.jsonl",
                 ".tokenbeam.json"):
        assert watched[name] == batch[name], name
    assert without_volatile(json.loads(watched["stats.json"])) == without_volatile(json.loads(batch["stats.json"]))


# ---- faults ---------------------------------------------------------------------------------------

class FaultyProxy:
    """An HTTP proxy on 127.0.0.1 in front of the S3 server that answers 500 to the requests `fails`
    picks (method, path, how many of that method so far) instead of forwarding them."""

    def __init__(self, upstream: str):
        host, port = upstream.removeprefix("http://").split(":")
        self.fails = lambda method, path, n: False
        self.failed = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                body = self.body()
                proxy.counts[self.command] = proxy.counts.get(self.command, 0) + 1
                if proxy.fails(self.command, self.path, proxy.counts[self.command]):
                    proxy.failed += 1
                    error = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
                    self.send_response(500)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                connection = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                # A HEAD's Content-Length is the object's size (s3fs reads it), not the empty body's.
                self.send_header("Content-Length", response.getheader("Content-Length", "0")
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                connection.close()

            def body(self) -> bytes | None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                        if size == 0:
                            return b"".join(chunks)
                length = self.headers.get("Content-Length")
                return self.rfile.read(int(length)) if length else None

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

        self.counts: dict[str, int] = {}
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def faulty(s3, monkeypatch):
    """Every S3 request of this test goes through a FaultyProxy (no faults until the test sets some)."""
    from s3fs import S3FileSystem

    with FaultyProxy(os.environ["AWS_ENDPOINT_URL_S3"]) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
        S3FileSystem.clear_instance_cache()
        try:
            yield proxy
        finally:
            S3FileSystem.clear_instance_cache()


TOKENIZE_AGAIN = ["tokenize", "--tokenizer", f"{REMOTE}/tok", "--input", f"{REMOTE}/corpus/*.jsonl*",
                  "--eos-token", SPECIAL, "--timestamp-field", "ts", "--window", "1d", "--group-field", "lang"]


def assert_same_run(ours: dict[str, bytes], theirs: dict[str, bytes]) -> None:
    """Two runs of one command with the same inputs and output URL: the same files, the same bytes but
    for the timings in JSON files."""
    assert sorted(ours) == sorted(theirs)
    for name, data in ours.items():
        if data != theirs[name]:
            assert without_volatile(json.loads(data)) == without_volatile(json.loads(theirs[name])), name


def test_failed_requests_that_are_retried_change_nothing(s3, walk, faulty):
    """Every third PUT and every fifth GET answered 500: the client retries, the outputs are the same."""
    code, _, stderr = run(*TOKENIZE_AGAIN, "--output", f"{REMOTE}/retried")
    assert code == 0, stderr
    reference = remote_files(s3, "retried")
    faulty.fails = lambda method, path, n: (method == "PUT" and n % 3 == 0) or (method == "GET" and n % 5 == 0)
    s3.rm(f"{BUCKET}/retried", recursive=True)
    code, _, stderr = run(*TOKENIZE_AGAIN, "--output", f"{REMOTE}/retried")
    assert faulty.failed > 10
    assert code == 0, stderr
    assert_same_run(remote_files(s3, "retried"), reference)


def test_a_lasting_failure_ends_in_exit_3_with_nothing_incomplete_and_a_rerun_completes(s3, walk, faulty):
    """Every write of the second shard's files fails, retries included: exit 3, no `_SUCCESS`, every
    object under a final name is complete (the first run's bytes); the rerun without faults completes
    with the same files."""
    code, _, stderr = run(*TOKENIZE_AGAIN, "--output", f"{REMOTE}/faulted")
    assert code == 0, stderr
    reference = remote_files(s3, "faulted")
    s3.rm(f"{BUCKET}/faulted", recursive=True)
    faulty.fails = lambda method, path, n: method in ("PUT", "POST") and "tiny-001" in path
    code, _, stderr = run(*TOKENIZE_AGAIN, "--output", f"{REMOTE}/faulted")
    assert faulty.failed > 0
    assert code == 3, stderr
    assert stderr.splitlines()[-1].startswith(f"tokenbeam: error: cannot write {REMOTE}/faulted/tiny-001-of-002.")
    left = remote_files(s3, "faulted")
    assert "_SUCCESS" not in left and "stats.json" not in left
    for name, data in left.items():
        if not is_temporary_name(name):
            assert data == reference[name], name
    faulty.fails = lambda method, path, n: False
    code, _, stderr = run(*TOKENIZE_AGAIN, "--output", f"{REMOTE}/faulted")
    assert code == 0, stderr
    assert_same_run(remote_files(s3, "faulted"), reference)
