"""`tokenize --group-field` and drift per group (issue 13, item 3)."""
import json

import pytest

from pipelines import drift, tokenize, train
from pipelines.groups import group_file_name, group_value


def test_group_names_and_files():
    assert (group_value("ja"), group_value(3), group_value(None), group_value(["a"])) == ("ja", "3", "(none)", '["a"]')
    assert group_file_name("pt-BR") == "pt-BR.stats.json"
    assert group_file_name("a/b") == "a%2Fb.stats.json" and group_file_name("..") == "%...stats.json"
    assert group_file_name("日本") == "%E6%97%A5%E6%9C%AC.stats.json"


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory, sample):
    out = tmp_path_factory.mktemp("tok")
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(out), "--vocab-size", "600"])
    return out / "tokenizer.json"


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
