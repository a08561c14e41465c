"""Both pipelines through Beam's portable job submission path (the one Flink and Spark use): a local
job service started here, `--runner PortableRunner --environment_type LOOPBACK`. Every output must be
byte-identical to the local runner's on the real `tiny/` corpus.

The job service is Beam's own `local_job_service_main`; Flink's and Spark's job servers speak the same
Job API, so the same submission goes to them (untested here: their jars are not served to this project's
machines). `multi_processing` with two workers, the other half of the proof that nothing depends on
the launcher's process, is run by test_train_pipeline and test_tokenize_pipeline."""
import json
import re
import socket
import subprocess
import sys
import time

import pytest

from pipelines import tokenize, train

from pipelines.steps import train_count
from pipelines.core.errors import UserError

pytestmark = pytest.mark.engine

START_TIMEOUT = 60.0      # seconds for the job service to start listening


def wait_for_port_file(proc: subprocess.Popen, port_file, deadline: float) -> int:
    """The port the job service wrote once it listens; fails if it exits or the deadline passes."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"job service exited with code {proc.returncode}")
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text())
        time.sleep(0.2)
    raise TimeoutError("job service did not write its port file in time")


def wait_until_accepting(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"job service on port {port} did not accept connections in time")


@pytest.fixture(scope="module")
def job_endpoint(tmp_path_factory):
    """A Beam job service on 127.0.0.1; it picks a free port itself (`--port 0`) and writes it to a
    file, so two test runs never race for a port. Yields the endpoint and the service's log file.
    Stopped (SIGTERM, then SIGKILL) at teardown."""
    tmp = tmp_path_factory.mktemp("job_service")
    port_file = tmp / "port"
    log_path = tmp / "job_service.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                             "--port", "0", "--port_file", str(port_file), "--staging_dir", str(tmp / "staging")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        port = wait_for_port_file(proc, port_file, deadline)
        wait_until_accepting(port, deadline)
        yield f"localhost:{port}", log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_both(out, corpora, beam_args, tokenizer=None):
    """Train on tiny/ into OUT/train, then tokenize tiny/ into OUT/tokens with TOKENIZER (default: the
    one just trained). Special tokens, an EOS id and a kept field exercise every option path."""
    inputs = str(corpora / "tiny" / "*.jsonl")
    train.run(["--input", inputs, "--output", str(out / "train"), "--vocab-size", "700",
               "--special-token", "<|endoftext|>", "--min-count", "2", *beam_args])
    tokenizer = tokenizer or out / "train" / "tokenizer.json"
    tokenize.run(["--tokenizer", str(tokenizer), "--input", inputs, "--output", str(out / "tokens"),
                  "--eos-token", "<|endoftext|>", "--keep-field", "lang", *beam_args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpora, job_endpoint):
    """The local runner's outputs and the portable runner's, tokenizing with the same tokenizer file
    (stats.json names the tokenizer path it used)."""
    local = tmp_path_factory.mktemp("local")
    run_both(local, corpora, [])
    portable = tmp_path_factory.mktemp("portable")
    run_both(portable, corpora, ["--runner", "PortableRunner", "--job_endpoint", job_endpoint[0],
                                 "--environment_type", "LOOPBACK"],
             tokenizer=local / "train" / "tokenizer.json")
    return local, portable


def test_both_jobs_ran_on_the_job_service(runs, job_endpoint):
    """The portable runs really went through the job service, not a local fallback."""
    log = job_endpoint[1].read_text(errors="replace")
    assert len(re.findall(r"Completed job in [0-9.]+ seconds with state DONE", log)) == 2, log[-2000:]


def files(folder, pattern):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.glob(pattern))}


def test_train_outputs_are_byte_identical(runs):
    local, portable = runs
    for name in ("tokenizer.json", "tokenizer.tiktoken", "counts/_totals.json"):
        assert (portable / "train" / name).read_bytes() == (local / "train" / name).read_bytes(), name
    counts = files(local / "train", "counts/*.parquet")
    assert len(counts) == train_count.N_COUNT_BUCKETS
    assert files(portable / "train", "counts/*.parquet") == counts


def test_train_report_is_identical_apart_from_timings(runs):
    reports = [json.loads((d / "train" / "train_report.json").read_text()) for d in runs]
    for report in reports:
        del report["timing_seconds"], report["peak_rss_mb"], report["peak_rss_mb_by_process"]
    assert reports[0] == reports[1]
    assert reports[0]["account"]["records"]["read"] == 40 and reports[0]["merges"] > 0


def test_token_parquet_stats_and_success_are_byte_identical(runs):
    local, portable = runs
    parquet = files(local / "tokens", "*.parquet")
    assert sorted(parquet) == ["tiny-000-of-002.parquet", "tiny-001-of-002.parquet"]
    assert files(portable / "tokens", "*.parquet") == parquet
    assert (portable / "tokens" / "_SUCCESS").read_bytes() == (local / "tokens" / "_SUCCESS").read_bytes()
    stats = [json.loads((d / "tokens" / "stats.json").read_text()) for d in runs]
    for s in stats:
        del s["timing"]
    assert stats[0] == stats[1]
    assert stats[0]["records"] == 40 and stats[0]["tokens"] > 0


DATAFLOW = ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
            "--temp_location", "gs://bucket/tmp"]


@pytest.mark.parametrize("command", ["train", "tokenize"])
def test_dataflow_refuses_local_paths_before_submitting(tmp_path, corpora, command):
    """Dataflow's workers cannot see the launcher's disk: a local input or output would fail or vanish
    on the workers after the job had run, so the launcher says so at once and submits nothing."""
    inputs = str(corpora / "tiny" / "*.jsonl")
    out = tmp_path / "out"
    if command == "train":
        argv = ["--input", inputs, "--output", str(out), "--vocab-size", "300", *DATAFLOW]
    else:
        tok = tmp_path / "tok"
        train.run(["--input", inputs, "--output", str(tok), "--vocab-size", "300"])
        argv = ["--tokenizer", str(tok / "tokenizer.json"), "--input", inputs, "--output", str(out), *DATAFLOW]
    with pytest.raises(UserError, match="cannot see local paths") as error:
        {"train": train, "tokenize": tokenize}[command].run(argv)
    assert inputs in str(error.value) and str(out) in str(error.value)
    assert not out.exists()
