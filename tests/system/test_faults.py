"""Faults, for real: a worker process killed mid-run, an output on a read-only or full filesystem (or
behind a regular file), a training run killed after its counts were written.

Each run is a `python -m pipelines.*` subprocess bounded by a timeout; a kill comes from a side thread
that watches the output folder. The outcome must be a run that fails with one clear line (or
finishes), never a partial file under a final name, and a rerun that gives the same bytes as an
undisturbed run.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.core import folders

from pipelines import tokenize, train

from pipelines.steps import train_count
from tests.conftest import ROOT

RUN_TIMEOUT = 240


def cli(module, *argv, env=None):
    return subprocess.run([sys.executable, "-m", f"pipelines.{module}", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)


def error_line(result, code: int = 2) -> str:
    """The single `tokenbeam: error:` line of a failed run (and no traceback); `code` 2 for a run that
    could not start, 3 for one whose output is incomplete."""
    assert result.returncode == code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tokenbeam: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return lines[0]


def parquet_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.parquet"))}


def without_timing(stats_path: Path) -> dict:
    stats = json.loads(stats_path.read_text())
    stats.pop("timing")
    return stats


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children of all its threads, recursively), from /proc."""
    out = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = [int(c) for c in children.read_text().split()]
        except OSError:          # the thread ended while we looked
            continue
        for kid in kids:
            out += [kid] + descendants(kid)
    return out


def beam_workers(pid: int) -> list[int]:
    """The Python SDK worker processes the local runner started under `pid` (not their /bin/sh)."""
    workers = []
    for kid in descendants(pid):
        try:
            argv = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sdk_worker_main" in b" ".join(argv) and b"python" in os.path.basename(argv[0]):
            workers.append(kid)
    return workers


@pytest.fixture(scope="module")
def tokenizer_json(trained_tokenizer):
    return trained_tokenizer("tiny", 1000, "--special-token", "<|endoftext|>") / "tokenizer.json"


# ---------------------------------------------------------------------------- a worker killed

def test_killed_worker_fails_the_run_and_a_rerun_gives_the_undisturbed_bytes(tmp_path, corpora, tokenizer_json):
    shards = sum((["--input", corpora / "en" / f"en-00{i}-of-012.jsonl"] for i in range(4)), [])
    undisturbed = tmp_path / "undisturbed"
    tokenize.run([str(a) for a in ["--tokenizer", tokenizer_json, "--output", undisturbed, *shards]])
    expected = parquet_bytes(undisturbed)
    assert len(expected) == 4

    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "pipelines.tokenize", "--tokenizer", str(tokenizer_json), "--output", str(out),
            *map(str, shards), "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    launcher = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    seen = {"killed": None, "partial": [], "complete": set()}

    def watch():
        """Kill one worker as soon as a shard is being written; meanwhile and afterwards, every file
        under a final name must be a complete Parquet file."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while launcher.poll() is None and time.monotonic() < deadline:
            if seen["killed"] is None and any(out.glob(".*.parquet.tmp-*")):
                workers = beam_workers(launcher.pid)
                if workers:
                    os.kill(workers[0], signal.SIGKILL)
                    seen["killed"] = workers[0]
            for p in out.glob("*.parquet"):
                if p.name not in seen["complete"]:
                    try:
                        pq.read_metadata(p)
                        seen["complete"].add(p.name)
                    except Exception as exc:
                        seen["partial"].append((p.name, repr(exc)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _, stderr = launcher.communicate(timeout=RUN_TIMEOUT)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)    # our own process group, started above
            launcher.wait()
    watcher.join(timeout=10)

    assert seen["killed"] is not None, "no worker was killed: the run ended before a shard was written"
    assert seen["partial"] == []
    # The run fails with one closing line. (Beam's threads in the surviving worker print their own
    # tracebacks when the other one dies: those are not ours to silence.)
    assert launcher.returncode == 3, stderr
    line = stderr.splitlines()[-1]
    assert line.startswith("tokenbeam: error:") and "worker" in line and "rerun" in line and str(out) in line
    assert not (out / "_SUCCESS").exists()
    # Whatever got a final name is complete and exactly what the undisturbed run wrote.
    survived = parquet_bytes(out)
    assert len(survived) < 4 and all(survived[name] == expected[name] for name in survived)

    rerun = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert rerun.returncode == 0, rerun.stderr
    assert parquet_bytes(out) == expected
    assert without_timing(out / "stats.json") == without_timing(undisturbed / "stats.json")
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["account"] == json.loads((undisturbed / "_SUCCESS").read_text())["account"]
    assert manifest["account"]["records"]["read"] == manifest["account"]["records"]["written"]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]      # the dead worker's temporary is gone


# ---------------------------------------------------------------------------- unwritable output

@pytest.fixture
def tmpfs(tmp_path):
    """mount(name, options) -> a fresh tmpfs folder; unmounted afterwards. Skips where mounting is not
    permitted (it needs root with CAP_SYS_ADMIN, e.g. not in an unprivileged container)."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs ({result.stderr.strip() or result.returncode}): "
                        f"mounting needs root with CAP_SYS_ADMIN")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(scope="module")
def small_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("in") / "small.txt"
    path.write_text("one line of text\nanother line\n")
    return path


@pytest.mark.parametrize("module", ["tokenize", "train"])
def test_read_only_output_is_one_line_naming_the_path(module, tmpfs, small_text, tokenizer_json):
    read_only = tmpfs("ro", "ro,size=1m")
    args = ["--tokenizer", tokenizer_json] if module == "tokenize" else ["--vocab-size", 300, "--min-frequency", 1]
    # The folder exists but cannot be written: the workers fail, the launcher says where.
    line = error_line(cli(module, *args, "--input", small_text, "--output", read_only), code=3)
    assert f"cannot write {read_only}/" in line and "Read-only file system" in line
    # A folder to create there: the launcher fails before any work.
    line = error_line(cli(module, *args, "--input", small_text, "--output", read_only / "sub"))
    assert str(read_only / "sub") in line and "Read-only file system" in line


def test_full_filesystem_is_one_line_and_leaves_no_partial_file(tmpfs, corpora, tokenizer_json):
    full = tmpfs("full", "size=1m")
    out = full / "out"
    shards = sum((["--input", corpora / "en" / f"en-00{i}-of-012.jsonl"] for i in range(2)), [])
    line = error_line(cli("tokenize", "--tokenizer", tokenizer_json, "--output", out, *shards), code=3)
    assert f"cannot write {out}/" in line and "No space left on device" in line
    for p in out.rglob("*"):
        assert p.suffix == ".parquet" or p.is_dir() or p.name == folders.MARKER, p    # no temporary left behind
        if p.suffix == ".parquet":
            pq.read_metadata(p)                                    # and what has a final name is complete


@pytest.mark.parametrize("module", ["tokenize", "train"])
def test_output_behind_a_regular_file_is_one_line_naming_the_path(module, tmp_path, small_text, tokenizer_json):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    args = ["--tokenizer", tokenizer_json] if module == "tokenize" else ["--vocab-size", 300]
    line = error_line(cli(module, *args, "--input", small_text, "--output", blocker / "out"))
    assert str(blocker / "out") in line and "Not a directory" in line
    line = error_line(cli(module, *args, "--input", small_text, "--output", blocker))
    assert str(blocker) in line and "is a file" in line
    assert blocker.read_text() == "not a folder\n"


# ---------------------------------------------------------------------------- training interrupted

def test_train_killed_after_counting_resumes_from_its_counts(tmp_path, corpora):
    args = ["--input", corpora / "tiny" / "*.jsonl", "--vocab-size", 2000, "--special-token", "<|endoftext|>"]
    reference = tmp_path / "reference"
    train.run([str(a) for a in [*args, "--output", reference]])

    out = tmp_path / "interrupted"
    argv = [sys.executable, "-m", "pipelines.train", *map(str, args), "--output", str(out)]
    # The pure-Python merge loop (the compiled one's proven twin) keeps the launcher in the merge loop
    # long enough to be killed there.
    launcher = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "TOKENBEAM_PURE_PYTHON": "1"}, start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while not (out / "counts" / "_totals.json").exists() and launcher.poll() is None:
            assert time.monotonic() < deadline, "the counts never appeared"
            time.sleep(0.01)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode == -signal.SIGKILL
    assert not (out / "tokenizer.json").exists()          # killed between the counts and the merges

    resumed = cli("train", "--counts", out, "--output", out, "--vocab-size", 2000, "--special-token", "<|endoftext|>")
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()
    report = json.loads((out / "train_report.json").read_text())
    assert report["account"] == json.loads((reference / "train_report.json").read_text())["account"]


def start_training_en(tmp_path, corpora):
    """`tokenbeam train` on en/ in a session of its own, once its counting process has started:
    (the launcher, the pids below it)."""
    argv = [sys.executable, "-m", "pipelines.train", "--input", str(corpora / "en" / "*.jsonl"),
            "--output", str(tmp_path / "out"), "--vocab-size", "300"]
    launcher = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not (counting := descendants(launcher.pid)):
        if launcher.poll() is not None or time.monotonic() > deadline:
            os.killpg(launcher.pid, signal.SIGKILL) if launcher.poll() is None else None
            pytest.fail("no counting process started")
        time.sleep(0.01)
    return launcher, counting


def running(pids: list[int]) -> list[int]:
    """The pids that are still running (not gone, not zombies)."""
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(pid)
        except OSError:
            pass
    return out


def test_the_counting_process_ends_with_a_killed_launcher(tmp_path, corpora):
    """`tokenbeam train` counts in a child process; SIGKILL to the launcher (no handler runs) must not
    leave that process counting on its own."""
    launcher, counting = start_training_en(tmp_path, corpora)
    launcher.send_signal(signal.SIGKILL)
    launcher.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while running(counting):
        if time.monotonic() > deadline:
            for pid in running(counting):
                os.kill(pid, signal.SIGKILL)
            pytest.fail("the counting process outlived its launcher by 10 s")
        time.sleep(0.05)
    assert not (tmp_path / "out" / "counts" / "_totals.json").exists()     # it did not count to the end


def test_ctrl_c_stops_both_train_processes_with_one_line(tmp_path, corpora):
    """Ctrl-C reaches the terminal's whole process group: the launcher and its counting process."""
    launcher, counting = start_training_en(tmp_path, corpora)
    try:
        time.sleep(1.0)                               # into Beam's import or the pipeline
        os.killpg(launcher.pid, signal.SIGINT)
        _, stderr = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "tokenbeam: interrupted" and "Traceback" not in stderr
    time.sleep(0.5)
    assert running(counting) == []


def test_train_into_a_used_folder_does_not_mix_in_old_counts(tmp_path, corpora):
    """A second corpus that leaves most count buckets empty must not train on the first one's files."""
    small = tmp_path / "small.txt"
    small.write_text("lower lowest newer newest wider widest\n" * 3)
    used, fresh = tmp_path / "used", tmp_path / "fresh"
    train.run(["--input", str(corpora / "tiny" / "*.jsonl"), "--output", str(used), "--vocab-size", "300"])
    assert len(list((used / "counts").glob("part-*.parquet"))) == train_count.N_COUNT_BUCKETS
    for out in (used, fresh):
        train.run(["--input", str(small), "--output", str(out), "--vocab-size", "270"])
    assert (used / "tokenizer.json").read_bytes() == (fresh / "tokenizer.json").read_bytes()
    assert train.load_counts(str(used / "counts")) == train.load_counts(str(fresh / "counts"))
    assert len(list((used / "counts").glob("part-*.parquet"))) < train_count.N_COUNT_BUCKETS


@pytest.fixture(scope="module")
def en_tokens(tmp_path_factory, corpora):
    """A tokenizer with an EOS, and en/ tokenized with it: the inputs of the Ctrl-C runs below."""
    base = tmp_path_factory.mktemp("ctrl-c")
    train.run(["--input", str(corpora / "tiny" / "*.jsonl"), "--output", str(base / "tok"), "--vocab-size", "400",
               "--special-token", "<|endoftext|>"])
    tokenize.run(["--tokenizer", str(base / "tok"), "--input", str(corpora / "en" / "*.jsonl"),
                  "--output", str(base / "tokens"), "--eos-token", "<|endoftext|>"])
    return base / "tok", base / "tokens"


def interrupt_when(argv: list[str], started) -> tuple[int, str]:
    """Run `tokenbeam ARGV` in a session of its own, send Ctrl-C (SIGINT to its whole process group,
    as a terminal does) once `started(stderr lines so far)` says the run is under way, and return its
    exit code and stderr."""
    # A run started in the background by a non-interactive shell (`cmd &`, as some CI launchers do)
    # inherits SIGINT ignored, and Python then keeps it ignored: the child gets Ctrl-C's default
    # disposition back, as a run started at a terminal has it.
    run = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *map(str, argv)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(run.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not started(lines):
            assert run.poll() is None, "".join(lines)          # it must still be running to be interrupted
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.01)
        os.killpg(run.pid, signal.SIGINT)
        run.wait(timeout=RUN_TIMEOUT)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    reader.join(timeout=10)
    return run.returncode, "".join(lines)


def has_line(words: str):
    """A line that holds `words`: a shard's progress line (the first shard done is always said)."""
    return lambda lines: any(words in line for line in lines)


@pytest.mark.parametrize("command", ["tokenize", "evaluate", "pack"])
def test_ctrl_c_mid_run_is_exit_130_with_one_line_and_the_rerun_completes(command, tmp_path, corpora, en_tokens):
    """Ctrl-C while shards are being processed (Beam re-raises the interrupt from inside a bundle):
    exit 130, `tokenbeam: interrupted` and no traceback, no `_SUCCESS`, only complete files under
    their final names; the same command again finishes the job."""
    tok, tokens = en_tokens
    out = tmp_path / "out"
    argv, started = {
        "tokenize": (["tokenize", "--tokenizer", tok, "--input", corpora / "en" / "*.jsonl", "--output", out],
                     has_line("tokenized ")),
        "evaluate": (["evaluate", "--tokenizer", tok, "--input", corpora / "en" / "*.jsonl", "--output", out],
                     has_line("evaluated ")),
        # pack's first files in flight are its spill files: interrupted once one is being written.
        "pack": (["pack", "--input", tokens, "--output", out, "--seq-len", 512],
                 lambda lines: any(".tmp-" in p.name for p in out.rglob("*"))),
    }[command]
    code, stderr = interrupt_when(argv, started)
    assert code == 130, stderr
    assert stderr.splitlines()[-1] == "tokenbeam: interrupted", stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert [line for line in stderr.splitlines() if line.startswith("tokenbeam:")] == ["tokenbeam: interrupted"]
    assert not (out / "_SUCCESS").exists()
    for f in out.rglob("*.parquet"):
        pq.read_metadata(f)                      # every file under a final name is whole
    rerun = cli("cli", *argv)
    assert rerun.returncode == 0, rerun.stderr
    assert (out / "_SUCCESS").exists()
    if command == "tokenize":
        assert json.loads((out / "_SUCCESS").read_text())["account"]["records"]["written"] == sum(
            1 for f in (corpora / "en").glob("*.jsonl") for _ in f.open(encoding="utf-8"))
