"""`tokenize --group-field` and drift per group."""
import json

import pytest

from pipelines import drift, tokenize
from pipelines.statistics.groups import group_file_name, group_value

pytestmark = pytest.mark.slow


def test_group_names_and_files():
    assert (group_value("ja"), group_value(3), group_value(None), group_value(["a"])) == ("ja", "3", "(none)", '["a"]')
    assert group_file_name("pt-BR") == "pt-BR.stats.json"
    assert group_file_name("a/b") == "a%2Fb.stats.json" and group_file_name("..") == "%...stats.json"
    assert group_file_name("日本") == "%E6%97%A5%E6%9C%AC.stats.json"


@pytest.fixture(scope="module")
def tokenizer_json(trained_tokenizer):
    return trained_tokenizer("sample", 600) / "tokenizer.json"


def write_grouped(folder, records, group_of):
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(2):
        with open(folder / f"s{k}.jsonl", "w", encoding="utf-8") as f:
            for i, r in enumerate(records[k::2]):
                g = group_of(2 * i + k, r)
                f.write(json.dumps(dict(r, **({"src": g} if g is not None else {}))) + "\n")


def sample_records(sample):
    return [json.loads(line) for f in sorted(sample.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_group_statistics_add_up_are_indexed_and_survive_a_rerun(tmp_path, sample, tokenizer_json):
    records = sample_records(sample)
    write_grouped(tmp_path / "in", records, lambda i, r: None if i % 7 == 0 else "abc"[i % 3])
    args = ["--tokenizer", str(tokenizer_json), "--input", str(tmp_path / "in" / "*.jsonl"),
            "--output", str(tmp_path / "out"), "--group-field", "src"]
    stats = tokenize.run(args)
    index = stats["groups"]
    assert sorted(index) == ["(none)", "a", "b", "c"]
    assert sum(g["records"] for g in index.values()) == stats["records"] == len(records)
    assert index["(none)"]["records"] == sum(1 for i in range(len(records)) if i % 7 == 0)
    files = {v: json.loads((tmp_path / "out" / g["file"]).read_text()) for v, g in index.items()}
    assert sum(f["tokens"] for f in files.values()) == stats["tokens"]
    assert all(f["moments"]["records"] == f["records"] for f in files.values())     # calibrated
    tokenize.run(args)                     # reused shards: their groups come back from the Parquet
    again = json.loads((tmp_path / "out" / "stats.json").read_text())["groups"]
    assert again == index
    for v, g in index.items():
        a, b = files[v], json.loads((tmp_path / "out" / g["file"]).read_text())
        a.pop("timing", None), b.pop("timing", None)
        assert a == b, v


def test_drift_names_a_new_group_even_when_the_totals_barely_move(tmp_path, sample, corpora, tokenizer_json, capsys):
    records = sample_records(sample)
    write_grouped(tmp_path / "a", records, lambda i, r: "prose")
    code = [json.loads(line) for line in (corpora / "code" / "code-000-of-006.jsonl").read_text().splitlines()[:12]]
    code = [dict(r, text=r["text"][:2000]) for r in code]     # short: they barely move the totals
    write_grouped(tmp_path / "b", records + code, lambda i, r: "prose" if i < len(records) else "code")
    for side in ("a", "b"):
        tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(tmp_path / side / "*.jsonl"),
                      "--output", str(tmp_path / f"out-{side}"), "--group-field", "src"])
    exit_code = drift.main([str(tmp_path / "out-a"), str(tmp_path / "out-b"), "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert exit_code == 1
    assert "code: NEW, 12 records" in out
    groups = {g["value"]: g for g in json.loads((tmp_path / "r" / "drift_groups.json").read_text())}
    assert groups["code"]["status"] == "new" and groups["code"]["drift"]
    assert groups["prose"]["status"] == "compared" and not groups["prose"]["drift"]   # the same records
    # The same data on both sides: no group flagged.
    assert drift.main([str(tmp_path / "out-a"), str(tmp_path / "out-a")]) == 0


def _without_run_details(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k not in ("timing", "inputs", "tokenizer", "timestamp_field")}


def test_stats_rebuilds_groups_and_windows_equal_to_tokenize(tmp_path, sample, tokenizer_json):
    """`tokenbeam stats --group-field --window` rebuilds from the Parquet alone what tokenize wrote,
    group by group and window by window; and groups by a kept field of files tokenized without
    --group-field."""
    from pipelines import stats_cmd

    records = sample_records(sample)
    stamped = [dict(r, ts=f"2026-11-{1 + i % 3:02d}T{i % 24:02d}:30:00Z") if i % 5 else r
               for i, r in enumerate(records)]
    write_grouped(tmp_path / "in", stamped, lambda i, r: "abc"[i % 3] if i % 4 else None)
    source = ["--tokenizer", str(tokenizer_json), "--input", str(tmp_path / "in" / "*.jsonl")]
    tokenized = tokenize.run(source + ["--output", str(tmp_path / "out"), "--group-field", "src",
                                       "--timestamp-field", "ts", "--window", "1d"])
    rebuilt_dir = tmp_path / "rebuilt"
    rebuilt_dir.mkdir()
    (rebuilt_dir / "groups").mkdir()
    (rebuilt_dir / "groups" / "stale.stats.json").write_text("{}")      # replaced, not mixed in
    assert stats_cmd.main([str(tmp_path / "out" / "*.parquet"), "--tokenizer", str(tokenizer_json),
                           "--output", str(rebuilt_dir / "stats.json"), "--group-field", "src",
                           "--window", "1d"]) == 0
    rebuilt = json.loads((rebuilt_dir / "stats.json").read_text())
    assert rebuilt["groups"] == tokenized["groups"] and sorted(rebuilt["groups"]) == ["(none)", "a", "b", "c"]
    assert not (rebuilt_dir / "groups" / "stale.stats.json").exists()
    for entry in tokenized["groups"].values():
        a = json.loads((tmp_path / "out" / entry["file"]).read_text())
        b = json.loads((rebuilt_dir / entry["file"]).read_text())
        assert _without_run_details(a) == _without_run_details(b), entry["file"]
    windows = sorted(p.name for p in (tmp_path / "out" / "windows").glob("*.stats.json"))
    assert len(windows) == 3
    assert sorted(p.name for p in (rebuilt_dir / "windows").glob("*.stats.json")) == windows
    for name in windows:
        a = json.loads((tmp_path / "out" / "windows" / name).read_text())
        b = json.loads((rebuilt_dir / "windows" / name).read_text())
        assert _without_run_details(a) == _without_run_details(b), name

    # Files tokenized with --keep-field src only: the same groups, from the kept column.
    tokenize.run(source + ["--output", str(tmp_path / "kept"), "--keep-field", "src"])
    assert stats_cmd.main([str(tmp_path / "kept" / "*.parquet"), "--tokenizer", str(tokenizer_json),
                           "--output", str(tmp_path / "kept-stats" / "stats.json"), "--group-field", "src"]) == 0
    by_kept = json.loads((tmp_path / "kept-stats" / "stats.json").read_text())
    assert {v: g["records"] for v, g in by_kept["groups"].items()} == \
        {v: g["records"] for v, g in tokenized["groups"].items()}


def test_stats_refuses_a_breakdown_the_files_cannot_give(tmp_path, sample, tokenizer_json, capsys):
    from pipelines import stats_cmd

    write_grouped(tmp_path / "in", sample_records(sample)[:20], lambda i, r: "a")
    tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(tmp_path / "in" / "*.jsonl"),
                  "--output", str(tmp_path / "out")])
    capsys.readouterr()
    base = [str(tmp_path / "out" / "*.parquet"), "--tokenizer", str(tokenizer_json),
            "--output", str(tmp_path / "s" / "stats.json")]
    for extra, message in ((["--group-field", "src"], "holds no field 'src' to group by"),
                           (["--window", "1h"], "no event_time column for --window"),
                           (["--window", "1"], "add a unit"),
                           (["--group", "src"], "unknown option --group: did you mean --group-field?")):
        assert stats_cmd.main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("tokenbeam: error:") and message in err, err
    assert not (tmp_path / "s" / "stats.json").exists()
