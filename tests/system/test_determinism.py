"""Same input and options -> the same bytes: tokenizer.json, token Parquet, stats.json (but its `timing`),
rejected/ and _SUCCESS, whatever the runner mode and worker count, the order of the --input flags, and
Python's hash seed (PYTHONHASHSEED 0 and 1 in separate processes).

The input is the in-repo sample plus hostile files with rejected rows, repaired text and a truncated
shard, so the accounting of problems is held to the same standard as the tokens.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.data.hostile.make_hostile import SPECIAL, make_hostile

RUNS = {   # name -> (PYTHONHASHSEED, Beam flags, --input order)
    "seed0-in_memory": ("0", ["--direct_running_mode", "in_memory"], "forward"),
    "seed1-in_memory-reversed": ("1", ["--direct_running_mode", "in_memory"], "reversed"),
    "seed1-multi_processing-reversed": ("1", ["--direct_running_mode", "multi_processing",
                                              "--direct_num_workers", "2"], "reversed"),
}


def cli(module, argv, seed):
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run([sys.executable, "-m", f"pipelines.{module}", *map(str, argv)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def files(folder, pattern):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob(pattern)) if p.is_file()}


def stats_without_timing(folder) -> bytes:
    """stats.json's bytes without its one-line `timing` object (the only part that may differ)."""
    lines = (folder / "stats.json").read_bytes().splitlines(keepends=True)
    timing = [line for line in lines if line.startswith(b'  "timing": {')]
    assert len(timing) == 1 and timing[0].rstrip(b",\n").endswith(b"}")
    return b"".join(line for line in lines if line not in timing)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, sample):
    folder = tmp_path_factory.mktemp("hostile")
    make_hostile(folder)
    globs = [sample / "*.jsonl", folder / "jsonl" / "rows.jsonl", folder / "jsonl" / "text.jsonl",
             folder / "compressed" / "truncated.jsonl.gz", folder / "parquet" / "good.parquet"]
    return globs


def input_flags(globs, order):
    globs = globs if order == "forward" else globs[::-1]
    return sum((["--input", g] for g in globs), [])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, inputs):
    outs = {}
    for name, (seed, beam_flags, order) in RUNS.items():
        out = tmp_path_factory.mktemp(f"train-{name}")
        # The truncated shard is reported and allowed: its readable rows are part of the comparison.
        cli("train", ["--output", out, "--vocab-size", 800, "--special-token", SPECIAL, *input_flags(inputs, order),
                      "--allow-shard-errors", *beam_flags], seed)
        outs[name] = out
    return outs


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, inputs, trained):
    tokenizer = trained["seed0-in_memory"] / "tokenizer.json"
    outs = {}
    for name, (seed, beam_flags, order) in RUNS.items():
        out = tmp_path_factory.mktemp(f"tokens-{name}")
        cli("tokenize", ["--tokenizer", tokenizer, "--output", out, *input_flags(inputs, order), "--allow-shard-errors",
                         *beam_flags], seed)
        outs[name] = out
    return outs


def test_tokenizer_files_are_byte_identical(trained):
    first, *others = trained.values()
    for name in ("tokenizer.json", "tokenizer.tiktoken"):
        assert all((out / name).read_bytes() == (first / name).read_bytes() for out in others), name
    assert len(json.loads((first / "tokenizer.json").read_text())["model"]["merges"]) == 800 - 256 - 1


def test_train_counts_report_and_rejected_are_identical(trained):
    first, *others = trained.values()
    report = json.loads((first / "train_report.json").read_text())
    assert report["account"]["records"]["rejected"] > 0 and report["shard_errors"] and report["account"]["records"]["repaired"] > 0
    varying = ("timing_seconds", "peak_rss_mb", "peak_rss_mb_by_process", "inputs")
    for out in others:
        assert files(out / "counts", "*") == files(first / "counts", "*")
        assert files(out / "rejected", "*") == files(first / "rejected", "*")
        other = json.loads((out / "train_report.json").read_text())
        assert {k: v for k, v in other.items() if k not in varying} == {k: v for k, v in report.items()
                                                                        if k not in varying}


def test_parquet_stats_and_manifest_are_byte_identical(tokenized):
    first, *others = tokenized.values()
    parquet = files(first, "*.parquet")
    assert len(parquet) == 6
    stats = json.loads((first / "stats.json").read_text())
    assert stats["account"]["records"]["rejected"] > 0 and stats["shard_errors"] and stats["account"]["records"]["repaired"] > 0
    for out in others:
        assert files(out, "*.parquet") == parquet
        assert stats_without_timing(out) == stats_without_timing(first)
        assert files(out / "rejected", "*") == files(first / "rejected", "*")
        assert (out / "_SUCCESS").read_bytes() == (first / "_SUCCESS").read_bytes()
