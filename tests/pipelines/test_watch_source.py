"""Watch mode's source (pipelines/datasets/watch.py), end to end: a real streaming pipeline on FnApiRunner in
a child process, files dropped into its folder while it runs. Each file must come out exactly once
and complete, temporary names never, and the pipeline must end by itself (idle, total time, a
signal, a sentinel file) with the shards in flight finished. Bounds on wall time only say that it
stopped; they are not speed measurements."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.datasets.watch import StopSignal, _PollShards, _StopWhen, fixed_folder, is_temporary_name
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# The child: WatchShards -> a step that logs each shard as it starts and ends (sleeping in between
# when asked, to have shards in flight), or the windowed statistics built on it (config "windows").
DRIVER = r'''
import json, sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from pipelines.datasets.watch import StopSignal, WatchShards, install_stop_handlers

cfg = json.loads(sys.argv[1])
stop = StopSignal(cfg.get("sentinel"))
install_stop_handlers(stop)
t0 = time.time()

def log(event, shard):
    with open(cfg["log"], "a") as f:
        f.write(json.dumps({"event": event, "url": shard.url, "relpath": shard.relpath, "size": shard.size,
                            "on_disk": len(open(shard.url, "rb").read()), "t": time.time() - t0}) + "\n")

def handle(shard):
    log("start", shard)
    time.sleep(cfg.get("process_seconds", 0))
    log("end", shard)
    return shard

with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(["--streaming"])) as p:
    shards = p | "WatchShards" >> WatchShards(cfg["patterns"], poll_interval=cfg["poll"], stop_after=cfg.get("stop_after"),
                                              stop_when_idle=cfg.get("stop_when_idle"), stop=stop)
    if cfg.get("windows"):
        from tests.pipelines.test_watch_source import add_windowed_stats
        add_windowed_stats(shards, **cfg["windows"])
    else:
        shards | "Handle" >> beam.Map(handle)
print("finished", flush=True)
'''

LIMIT = 90      # seconds: a child still running then has failed to stop


def start(tmp_path, **cfg):
    cfg.setdefault("log", str(tmp_path / "log.jsonl"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.started = time.monotonic()
    return proc, Path(cfg["log"])


def finish(proc, timeout=LIMIT):
    try:
        out, err = proc.communicate(timeout=max(1, timeout - (time.monotonic() - proc.started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the watch did not stop within {timeout} s\n{err[-3000:]}")
    assert proc.returncode == 0 and "finished" in out, err[-3000:]
    return time.monotonic() - proc.started, err


def events(log: Path, kind="start"):
    if not log.exists():
        return []
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == kind]


def wait_for(predicate, proc, timeout=LIMIT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"condition not met; child exited {proc.returncode}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)


def write_atomic(path: Path, data: bytes):
    tmp = path.with_name(f".{path.name}.tmp-0123")
    tmp.write_bytes(data)
    tmp.rename(path)


# ---------------------------------------------------------------------------- end to end

def test_each_new_file_is_emitted_once_complete_and_idle_ends_the_watch(tmp_path):
    drop = tmp_path / "drop"
    (drop / "sub").mkdir(parents=True)
    (drop / "already-there.jsonl").write_text('{"text": "x"}\n')
    poll = 0.5
    proc, log = start(tmp_path, patterns=[str(drop / "*.jsonl"), str(drop / "sub" / "*.jsonl")],
                      poll=poll, stop_when_idle=4, stop_after=LIMIT)
    wait_for(lambda: len(events(log)) == 1, proc)            # the file there at launch comes out too
    # Temporary names matching the glob: never emitted.
    (drop / ".hidden.jsonl").write_text("{}\n")
    (drop / "part.tmp-77.jsonl").write_text("{}\n")
    expected = {"already-there.jsonl": 14}
    for i in range(3):                                        # renamed into place
        data = f'{{"text": "shard {i}"}}\n'.encode() * (i + 1)
        write_atomic(drop / f"s{i}.jsonl", data)
        expected[f"s{i}.jsonl"] = len(data)
        time.sleep(0.6)
    data = b'{"text": "sub"}\n'
    write_atomic(drop / "sub" / "deep.jsonl", data)
    expected["sub/deep.jsonl"] = len(data)
    # A slow writer appending in steps, each pause shorter than the poll interval: the file must
    # come out once, with all of its bytes.
    slow = drop / "slow.jsonl"
    with open(slow, "wb") as f:
        for _ in range(6):
            f.write(b'{"text": "slow"}\n')
            f.flush()
            time.sleep(0.4 * poll)
    expected["slow.jsonl"] = 6 * 17
    last_drop = time.monotonic()
    elapsed, _ = finish(proc)
    started = events(log)
    assert sorted(e["relpath"] for e in started) == sorted(expected), started     # each exactly once
    for e in started:
        assert e["size"] == e["on_disk"] == expected[e["relpath"]], e
        assert e["url"] == str(drop / e["relpath"])
    # It ended by itself: after the idle time had passed since the last file, well before the limit.
    assert time.monotonic() - last_drop >= 4 - poll
    assert elapsed < LIMIT


def test_stop_after_ends_a_watch_that_never_sees_a_file(tmp_path):
    (tmp_path / "empty").mkdir()
    proc, log = start(tmp_path, patterns=[str(tmp_path / "empty" / "*.txt")], poll=0.3, stop_after=3)
    elapsed, _ = finish(proc)
    assert events(log) == []
    assert 3 <= elapsed < LIMIT


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "sentinel"])
def test_a_stop_request_finishes_the_shards_in_flight_and_ends_cleanly(tmp_path, how):
    drop = tmp_path / "drop"
    drop.mkdir()
    sentinel = tmp_path / "out" / "_STOP"
    proc, log = start(tmp_path, patterns=[str(drop / "*.txt")], poll=0.3, process_seconds=2,
                      sentinel=str(sentinel) if how == "sentinel" else None)
    write_atomic(drop / "a.txt", b"a\n")
    wait_for(lambda: len(events(log)) == 1, proc)             # a.txt is in flight (2 s of work)
    if how == "sentinel":
        sentinel.parent.mkdir()
        sentinel.touch()
    else:
        proc.send_signal(getattr(signal, how))
    time.sleep(0.8)
    write_atomic(drop / "late.txt", b"b\n")                    # after the stop: not taken
    _, err = finish(proc)
    assert [e["relpath"] for e in events(log, "start")] == ["a.txt"]
    assert [e["relpath"] for e in events(log, "end")] == ["a.txt"]       # finished, not cut off
    if how != "sentinel":
        assert "finishing the shards in flight" in err


# ---------------------------------------------------------------------------- windows on a stream

VOCAB = 64
T0 = 1796119200          # 2026-12-01T10:00:00Z


def add_windowed_stats(shards, output, window_seconds):
    """The building blocks as tokenize will combine them in watch mode: per shard, records with a
    `ts` field -> partial summaries per window (a tagged output) -> WindowStats; the overall
    summary and the shard names combined over the whole run (`WholeRun`: Beam refuses a
    default-trigger global combine on a stream)."""
    import apache_beam as beam

    from bpe_ops.stats import Summary, batch_stats
    from pipelines.datasets.watch import WholeRun
    from pipelines.statistics.summaries import MergeSummaries
    from pipelines.statistics.windows import WindowedSummaries, WindowStats
    from schemas.stats import TokenizerFacts

    facts = TokenizerFacts(VOCAB, "0" * 64, {i: bytes([i]) for i in range(VOCAB)})

    def tokenize(shard):
        rows = [json.loads(line) for line in open(shard.url, encoding="utf-8")]
        texts = [r["text"] for r in rows]
        ids = [[b % VOCAB for b in t.encode()] for t in texts]
        stats = batch_stats(texts, ids)
        overall = Summary(VOCAB)
        overall.add_batch(*stats)
        overall.add_id_counts({i: sum(a.count(i) for a in ids) for i in range(VOCAB) if any(i in a for a in ids)})
        windowed = WindowedSummaries(VOCAB, window_seconds)
        windowed.add_batch([r.get("ts") for r in rows], *stats, ids)
        yield overall
        for element in windowed.elements():
            yield beam.pvalue.TaggedOutput("windows", element)

    out = shards | "Tokenize" >> beam.FlatMap(tokenize).with_outputs("windows", main="overall")
    out.windows | "WindowStats" >> WindowStats(VOCAB, window_seconds, output, facts, early_count=1)
    total = (out.overall
             | "WholeRun" >> WholeRun()
             | "Total" >> beam.CombineGlobally(MergeSummaries(VOCAB)).without_defaults())
    names = (shards | "ShardsOfRun" >> WholeRun() | "Names" >> beam.Map(lambda s: s.relpath)
             | "AllNames" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults())
    # A singleton side input of a whole-run result, as tokenize's _SUCCESS step takes stats.json's.
    (names
     | "WriteTotal" >> beam.Map(lambda ns, s: Path(output, "total.json").write_text(
         json.dumps([s.records, s.tokens, sorted(ns)])), beam.pvalue.AsSingleton(total)))


def test_windowed_statistics_on_a_watched_stream(tmp_path):
    """WatchShards -> per-window partial summaries -> WindowStats in one streaming pipeline: the window
    files hold every timed record of every shard, once."""
    from pipelines.monitoring.drift_judging import load_stats

    drop, output = tmp_path / "drop", tmp_path / "out"
    drop.mkdir()
    proc, _ = start(tmp_path, patterns=[str(drop / "*.jsonl")], poll=0.3, stop_when_idle=3, stop_after=LIMIT,
                    windows={"output": str(output), "window_seconds": 3600})
    timed = {}
    for i, stamps in enumerate([[T0 + 5, T0 + 3700], [T0 + 60, None, "garbage"], [T0 + 7300, T0 + 20]]):
        rows = [{"text": f"record {i}-{j} " * (j + 1), "ts": s} for j, s in enumerate(stamps)]
        write_atomic(drop / f"s{i}.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
        for s in stamps:
            if isinstance(s, int):
                start_hour = s - s % 3600
                timed[start_hour] = timed.get(start_hour, 0) + 1
        time.sleep(0.7)
    finish(proc)
    files = sorted((output / "windows").iterdir())
    assert [f.name for f in files] == ["2026-12-01T10:00:00Z.stats.json", "2026-12-01T11:00:00Z.stats.json",
                                       "2026-12-01T12:00:00Z.stats.json"]
    assert [load_stats(f)["records"] for f in files] == [timed[k] for k in sorted(timed)] == [3, 1, 1]
    total_records, _, names = json.loads((output / "total.json").read_text())
    assert total_records == 7 == sum(timed.values()) + 2          # two records untimed
    assert names == ["s0.jsonl", "s1.jsonl", "s2.jsonl"]


# ---------------------------------------------------------------------------- pieces

def test_temporary_names_and_fixed_folders():
    assert is_temporary_name("/a/.x.jsonl") and is_temporary_name("a/b.jsonl.tmp-3f") and is_temporary_name(".x")
    assert not is_temporary_name("/a/b.jsonl") and not is_temporary_name("/a.b/c.jsonl")
    assert fixed_folder("/data/2026-*/en-*.jsonl") == "/data"
    assert fixed_folder("/data/in/*.jsonl") == "/data/in"
    assert fixed_folder("/data/in/one.jsonl") == "/data/in"


def test_poll_emits_a_file_only_once_its_size_holds_still(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("12")
    poll = _PollShards([str(tmp_path / "*.txt")], 0.05, None, None)
    assert [tv.value.relpath for tv in poll("x").outputs] == ["a.txt"]
    with open(f, "a") as out:                      # grown since the last listing: not complete yet
        out.write("3")
    assert poll("x").outputs == ()
    got = poll("x").outputs
    assert [(tv.value.relpath, tv.value.size) for tv in got] == [("a.txt", 3)]


def test_stop_signal_survives_pickling_and_reaches_the_sentinel(tmp_path):
    import pickle

    stop = StopSignal(str(tmp_path / "s" / "_STOP"))
    copy = pickle.loads(pickle.dumps(stop))
    assert not copy.is_set()
    stop.set()
    assert copy.is_set() and (tmp_path / "s" / "_STOP").exists()
    started = time.monotonic()
    assert copy.wait(30) and time.monotonic() - started < 5
    stop.clear()
    assert not stop.is_set() and not copy.is_set()


def test_termination_total_idle_and_signal():
    from apache_beam.utils.timestamp import Timestamp

    t = Timestamp.of
    stop = StopSignal()
    cond = _StopWhen(stop_after=10, stop_when_idle=3, stop=stop)
    state = cond.for_new_input(t(100), None)
    assert not cond.can_stop_polling(t(102), state)
    assert cond.can_stop_polling(t(103), state)                      # idle since the start
    state = cond.on_seen_new_output(t(102), state)
    assert not cond.can_stop_polling(t(104), state)
    assert cond.can_stop_polling(t(110), cond.on_seen_new_output(t(109), state))   # total
    stop.set()
    assert cond.can_stop_polling(t(100.5), cond.for_new_input(t(100), None))
    assert cond.state_coder().decode(cond.state_coder().encode(state)) == state
