"""Train and tokenize with `s3://` inputs and outputs against a real S3 protocol server (moto's
standalone server on 127.0.0.1, started and stopped here), through plain URLs on the command line.

s3fs finds the server the way a user points it at MinIO or any S3-compatible store: the standard
`AWS_ENDPOINT_URL_S3` environment variable, which botocore (>= 1.31) reads when it builds a client
(`AWS_ENDPOINT_URL` does the same for every AWS service). Environment variables reach Beam's
`multi_processing` workers, which are child processes, so one run uses two of them.

The results must equal a local-disk run of the same files: every byte of the tokenizer, the counts,
the manifest and the token rows. The only differences allowed are the input URLs the outputs record
(the Parquet footer's `source`, `inputs` in stats.json and train_report.json) and the timings.
"""
import gzip
import json
import logging
import posixpath
import shutil
import time
import urllib.request

import pyarrow.parquet as pq
import pytest

from pipelines.core import files

from pipelines import tokenize, train
from schemas import tables

pytestmark = pytest.mark.engine

BUCKET = "tokenbeam-test"
MULTI = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@pytest.fixture(scope="module")
def local_corpus(tmp_path_factory, corpora):
    """tiny/ as one plain and one gzipped shard (mtime 0, so the .gz bytes are reproducible)."""
    folder = tmp_path_factory.mktemp("corpus")
    shutil.copy(corpora / "tiny" / "tiny-000-of-002.jsonl", folder)
    data = (corpora / "tiny" / "tiny-001-of-002.jsonl").read_bytes()
    (folder / "tiny-001-of-002.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    return folder


@pytest.fixture(scope="module")
def s3(local_corpus):
    """An S3 server on 127.0.0.1 with the corpus uploaded to s3://BUCKET/corpus/; yields an s3fs
    filesystem talking to it. Credentials are fake and any user AWS config is kept out."""
    from moto.server import ThreadedMotoServer
    from s3fs import S3FileSystem

    logging.getLogger("werkzeug").setLevel(logging.ERROR)     # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ENDPOINT_URL_S3", f"http://{host}:{port}")
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_CONFIG_FILE", str(local_corpus / "no-aws-config"))
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(local_corpus / "no-aws-credentials"))
        S3FileSystem.clear_instance_cache()          # an instance made before would know another endpoint
        fs = S3FileSystem()
        fs.mkdir(BUCKET)
        for shard in sorted(local_corpus.iterdir()):
            fs.put(str(shard), f"{BUCKET}/corpus/{shard.name}")
        try:
            yield fs
        finally:
            S3FileSystem.clear_instance_cache()
            # moto keeps its buckets in this process, not in the server: the next module's server
            # (test_object_storage.py starts its own) would find this one's.
            urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
            server.stop()


def run_both(inputs, out, beam_args, tokenizer="tok/tokenizer.json"):
    """Train into OUT/tok, then tokenize into OUT/tokens with OUT/TOKENIZER."""
    train.run(["--input", inputs, "--output", f"{out}/tok", "--vocab-size", "700",
               "--special-token", "<|endoftext|>", *beam_args])
    tokenize.run(["--tokenizer", f"{out}/{tokenizer}", "--input", inputs,
                  "--output", f"{out}/tokens", "--eos-token", "<|endoftext|>", *beam_args])


@pytest.fixture(scope="module")
def runs(s3, local_corpus, tmp_path_factory):
    """The same jobs on local disk, on S3 in memory, and on S3 with two worker processes. The S3 runs
    read their tokenizer back from S3 (the second one names its folder, not the file)."""
    local = tmp_path_factory.mktemp("local")
    run_both(str(local_corpus / "*.jsonl*"), str(local), [])
    run_both(f"s3://{BUCKET}/corpus/*.jsonl*", f"s3://{BUCKET}/in_memory", [])
    run_both(f"s3://{BUCKET}/corpus/*.jsonl*", f"s3://{BUCKET}/multi", MULTI, tokenizer="tok")
    return {"local": local, "in_memory": f"{BUCKET}/in_memory", "multi": f"{BUCKET}/multi"}


def read_all(s3, runs, name, folder, pattern):
    """{relative name: bytes} of FOLDER/PATTERN in run NAME (local disk or S3)."""
    if name == "local":
        base = runs["local"] / folder
        return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.glob(pattern))}
    base = f"{runs[name]}/{folder}"
    s3.invalidate_cache()
    return {path[len(base) + 1:]: s3.cat_file(path) for path in sorted(s3.glob(f"{base}/{pattern}"))}


def no_temporaries(s3, prefix):
    s3.invalidate_cache()
    return [p for p in s3.find(prefix) if ".tmp-" in p]


@pytest.mark.parametrize("name", ["in_memory", "multi"])
def test_trained_files_equal_the_local_run(s3, runs, name):
    for folder, pattern in (("tok", "tokenizer.json"), ("tok", "tokenizer.tiktoken"), ("tok/counts", "_totals.json"),
                            ("tok/counts", "*.parquet")):
        local = read_all(s3, runs, "local", folder, pattern)
        assert local, pattern
        assert read_all(s3, runs, name, folder, pattern) == local, pattern
    reports = [json.loads(s3.cat_file(f"{runs[name]}/tok/train_report.json")),
               json.loads((runs["local"] / "tok" / "train_report.json").read_text())]
    assert reports[0]["inputs"] == [f"s3://{BUCKET}/corpus/*.jsonl*"]
    for report in reports:
        del report["timing_seconds"], report["peak_rss_mb"], report["peak_rss_mb_by_process"], report["inputs"]
    assert reports[0] == reports[1]
    assert reports[0]["account"]["records"]["read"] == 40
    assert no_temporaries(s3, runs[name]) == []


@pytest.mark.parametrize("name", ["in_memory", "multi"])
def test_token_files_equal_the_local_run(s3, runs, name):
    local = read_all(s3, runs, "local", "tokens", "*.parquet")
    assert sorted(local) == ["tiny-000-of-002.parquet", "tiny-001-of-002.parquet"]
    remote = read_all(s3, runs, name, "tokens", "*.parquet")
    assert sorted(remote) == sorted(local)
    for file_name in local:
        ours = pq.ParquetFile(s3.open(f"{runs[name]}/tokens/{file_name}", "rb"))
        theirs = pq.ParquetFile(runs["local"] / "tokens" / file_name)
        assert ours.read().equals(theirs.read()), file_name
        assert ours.metadata.num_row_groups == theirs.metadata.num_row_groups
        # The footer's shard record names the shard it came from; everything else is the same.
        meta_ours, meta_theirs = dict(ours.metadata.metadata), dict(theirs.metadata.metadata)
        shard_ours = json.loads(meta_ours.pop(tables.SHARD_KEY.encode()))
        shard_theirs = json.loads(meta_theirs.pop(tables.SHARD_KEY.encode()))
        assert meta_ours == meta_theirs
        assert shard_ours.pop("source") == f"s3://{BUCKET}/corpus/{shard_ours['relpath']}"
        del shard_theirs["source"]
        # ... and the input file's identity in the rerun fingerprint: its URL and version (an S3 ETag
        # there, a modification time here).
        input_ours, input_theirs = shard_ours["fingerprint"].pop("input"), shard_theirs["fingerprint"].pop("input")
        assert input_ours["url"] == f"s3://{BUCKET}/corpus/{shard_ours['relpath']}"
        assert input_ours["version"].startswith("ETag=") and input_theirs["version"].startswith("mtime=")
        assert input_ours["size"] == input_theirs["size"]
        assert shard_ours == shard_theirs
    # _SUCCESS records each input's identity too (by which a grown input is noticed): the same, but for
    # its URL and version.
    manifests = [json.loads(read_all(s3, runs, where, "tokens", "_SUCCESS")["_SUCCESS"]) for where in (name, "local")]
    for manifest in manifests:
        for entry in manifest["shards"]:
            assert entry["input"].pop("version").startswith(("ETag=", "mtime="))
            assert entry["input"].pop("url").endswith("/" + entry["relpath"])
    assert manifests[0] == manifests[1]
    stats = [json.loads(s3.cat_file(f"{runs[name]}/tokens/stats.json")),
             json.loads((runs["local"] / "tokens" / "stats.json").read_text())]
    assert stats[0]["tokenizer"].startswith(f"s3://{runs[name]}/tok")
    for s in stats:
        del s["timing"], s["inputs"], s["tokenizer"]
    assert stats[0] == stats[1]
    assert stats[0]["records"] == 40 and stats[0]["account"]["shards"]["read"] == 2
    assert no_temporaries(s3, runs[name]) == []


def test_runs_on_s3_are_byte_identical_across_worker_modes(s3, runs):
    for folder, pattern in (("tok", "tokenizer.json"), ("tok/counts", "*.parquet"), ("tokens", "*.parquet"),
                            ("tokens", "_SUCCESS")):
        assert read_all(s3, runs, "in_memory", folder, pattern) == read_all(s3, runs, "multi", folder, pattern)


def test_rerun_on_s3_skips_complete_shards_and_redoes_a_missing_one(s3, runs):
    """A rerun reads the footers back from S3: the complete shard is reused, the deleted one redone,
    and the result is the same bytes and the same statistics."""
    base = runs["in_memory"]
    before = read_all(s3, runs, "in_memory", "tokens", "*.parquet")
    stats_before = json.loads(s3.cat_file(f"{base}/tokens/stats.json"))
    kept = s3.info(f"{base}/tokens/tiny-000-of-002.parquet")["LastModified"]
    s3.rm(f"{base}/tokens/tiny-001-of-002.parquet")
    time.sleep(1.1)        # S3 keeps modification times to the second: a rewrite would show
    tokenize.run(["--tokenizer", f"s3://{base}/tok/tokenizer.json", "--input", f"s3://{BUCKET}/corpus/*.jsonl*",
                  "--output", f"s3://{base}/tokens", "--eos-token", "<|endoftext|>"])
    s3.invalidate_cache()
    assert s3.info(f"{base}/tokens/tiny-000-of-002.parquet")["LastModified"] == kept     # reused, not rewritten
    assert read_all(s3, runs, "in_memory", "tokens", "*.parquet") == before
    stats_after = json.loads(s3.cat_file(f"{base}/tokens/stats.json"))
    del stats_before["timing"], stats_after["timing"]
    assert stats_after == stats_before
    assert json.loads(s3.cat_file(f"{base}/tokens/_SUCCESS"))["account"]["records"]["written"] == 40


def test_new_vocabulary_from_counts_on_s3(s3, runs):
    """`--counts s3://...` trains from the counts of an earlier S3 run, as from local ones."""
    train.run(["--counts", f"s3://{runs['in_memory']}/tok", "--output", f"s3://{BUCKET}/resumed", "--vocab-size", "900"])
    train.run(["--counts", str(runs["local"] / "tok"), "--output", str(runs["local"] / "resumed"), "--vocab-size", "900"])
    assert s3.cat_file(f"{BUCKET}/resumed/tokenizer.json") == (runs["local"] / "resumed" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_orphaned_temporary_is_never_read_as_output(s3, tmp_path, where):
    """A worker killed between writing its temporary and renaming it (on S3 the rename is a copy then
    a delete) leaves the temporary behind; the globs that read outputs must not pick it up, or a
    retried bundle would count its pre-tokens twice."""
    url = (f"s3://{BUCKET}/atomic" if where == "s3" else str(tmp_path)) + "/part-00000-of-00016.parquet"
    fs, path = files.filesystem(url)
    with files.open_atomic(url) as f:
        f.write(b"complete")
        temporary = f.path
    assert posixpath.dirname(temporary) == posixpath.dirname(path) and temporary != path
    fs.pipe_file(temporary, b"partial")                    # what the killed worker left
    fs.invalidate_cache()
    assert fs.glob(posixpath.dirname(path) + "/*.parquet") == [path]
    assert fs.cat_file(path) == b"complete"
