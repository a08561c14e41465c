"""One account type (schemas/accounts.py) in every file that counts a run's inputs: its invariants,
its sum, the files of earlier versions read into it, and each command writing the same keys."""
import json
import re
from itertools import permutations
from pathlib import Path

import pytest

from pipelines.monitoring import drift_judging

from pipelines import evaluate, pack, tokenize, train
from schemas import evaluate as evaluate_layout, pack as pack_layout, reports, tables
from schemas.accounts import ACCOUNT_KEY, RECORD_KEYS, SHARD_KEYS, UNKNOWN_REASON, Account, account_of
from schemas.stats import parse_stats, upgrade_stats, validate_stats

FUZZ_STATS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "stats_json"


# ------------------------------------------------------------------------------------ invariants

@pytest.mark.parametrize("fields, words", [
    (dict(records_read=3, records_written=1), "read 3 != written 1 + rejected 0"),
    (dict(records_read=1, records_written=2), "read 1 != written 2"),
    (dict(records_read=2, records_written=1, rejected_by_reason={"bad_json": 2}), "read 2 != written 1 + rejected 2"),
    (dict(records_read=1, records_written=1, records_repaired=2), "2 records repaired of 1 written"),
    (dict(shards_read=-1), "shards_read must be a count"),
    (dict(records_read=True, records_written=True), "records_read must be a count"),
    (dict(records_read=1, records_written=0, rejected_by_reason={"bad_json": -1, "x": 2}), "must map reasons"),
])
def test_an_account_that_does_not_balance_is_refused(fields, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Account(**fields)


def test_from_json_checks_the_totals_and_the_failed_shards_against_the_shard_errors():
    good = {"shards": {"read": 2, "failed": 1},
            "records": {"read": 5, "written": 3, "rejected": 2, "rejected_by_reason": {"bad_json": 2}, "repaired": 0}}
    errors = [{"source": "a.jsonl", "rows_read": 1, "reason": "wrong_format", "detail": "x"}]
    account = Account.from_json(good, errors)
    assert (account.shards_read, account.shards_failed, account.records_rejected) == (2, 1, 2)
    assert account.to_json() == good
    with pytest.raises(ValueError, match="shards.failed is 1, the shard errors name 0"):
        Account.from_json(good, [])
    with pytest.raises(ValueError, match="records.rejected is not the sum"):
        Account.from_json({**good, "records": {**good["records"], "rejected": 1}}, errors)
    with pytest.raises(ValueError, match="account must be"):
        Account.from_json({**good, "records": {"read": 5}}, errors)
    with pytest.raises(ValueError, match="shard errors beside it"):
        Account.from_json(good, [{"rows_read": 1}])


def test_the_sum_is_exact_in_any_order_and_the_one_way_accounts_add_up():
    parts = [Account(1, (), 4, 3, {"bad_json": 1}, 1),
             Account(1, ("b.jsonl",), 2, 2),
             Account(0, ("b.jsonl",), 3, 1, {"record_too_large": 1, "bad_json": 1}),    # a later part of b
             Account()]
    totals = {Account.total(order) for order in permutations(parts)}
    assert len(totals) == 1
    (total,) = totals
    assert total == Account(2, ("b.jsonl",), 9, 6, {"bad_json": 2, "record_too_large": 1}, 1)
    assert total.shards_failed == 1 and total.reasons() == {"bad_json": 2, "record_too_large": 1}
    assert (parts[0] + parts[1]) + parts[2] == parts[0] + (parts[1] + parts[2])
    assert Account.total([]) == Account()


def test_the_keys_are_one_vocabulary():
    obj = Account(1, (), 2, 1, {"bad_json": 1}).to_json()
    assert list(obj) == ["shards", "records"]
    assert tuple(obj["shards"]) == SHARD_KEYS and tuple(obj["records"]) == RECORD_KEYS


# ------------------------------------------------------------------------------------ old files

def test_a_version_2_stats_json_is_read_into_the_account():
    """The fuzz seed is a stats.json of version 2, as written before the account."""
    data = (FUZZ_STATS / "stats.json").read_bytes()
    old = json.loads(data)
    assert old["schema_version"] == 2 and "records_read" in old
    with pytest.raises(ValueError, match="upgrade_stats"):
        validate_stats(old)
    stats = parse_stats(data, "stats.json")
    assert stats["schema_version"] == 3 and not {"records_read", "rejected", "repaired_records"} & set(stats)
    assert account_of(stats) == Account(old["shards"]["count"], (), old["records_read"], old["records"],
                                        old["rejected"]["by_reason"], old["repaired_records"])
    assert stats["shards"] == {"names": old["shards"]["names"]}
    assert {k: v for k, v in stats.items() if k not in (ACCOUNT_KEY, "schema_version", "shards")} == {
        k: v for k, v in old.items() if k not in ("schema_version", "shards", "records_read", "rejected",
                                                  "repaired_records")}


def test_a_version_2_stats_json_whose_rejected_total_is_wrong_is_refused():
    old = json.loads((FUZZ_STATS / "stats.json").read_bytes())
    old["rejected"] = {"total": 1, "by_reason": {}}
    with pytest.raises(ValueError, match="rejected.total"):
        upgrade_stats(old)


def test_old_train_files_are_read_into_the_account():
    totals = {"version": 2, "shards": 2, "records": 7, "records_counted": 5, "records_rejected": 2,
              "records_repaired": 1, "rejected_by_reason": {"bad_json": 2}, "bytes": 40, "pretokens": 9,
              "shard_errors": [{"source": "b.jsonl", "rows_read": 3, "reason": "wrong_format", "detail": "x"}]}
    expected = Account(2, ("b.jsonl",), 7, 5, {"bad_json": 2}, 1)
    for upgrade in (reports.upgrade_totals, reports.upgrade_train_report):
        new = upgrade(dict(totals))
        assert account_of(new) == expected and new["version"] == 3
        assert not set(reports._OLD_COUNTS) & set(new) and new["bytes"] == 40
        assert upgrade(new) == new
    # train's _SUCCESS of version 2 kept the totals only
    success = {"version": 2, "tokenizer_sha256": "ab", "inputs": [], "files": ["tokenizer.json"], "shards": 2,
               "shards_failed": 1, "records": 7, "records_counted": 5, "records_rejected": 2}
    new = reports.upgrade_train_report(success)
    assert new[ACCOUNT_KEY]["records"]["rejected_by_reason"] == {UNKNOWN_REASON: 2}
    assert new[ACCOUNT_KEY]["shards"] == {"read": 2, "failed": 1} and "shards_failed" not in new


def test_an_old_tokenize_manifest_is_read_into_the_account():
    error = {"source": "/in/b.jsonl", "rows_read": 1, "reason": "wrong_format", "detail": "x"}
    old = {"version": 1, "tokenizer_sha256": "ab", "stats": "stats.json",
           "shards": [{"relpath": "a.jsonl", "output": "a.parquet", "records_read": 4, "rows": 3, "rejected": 1,
                       "shard_errors": [], "input": {}},
                      {"relpath": "b.jsonl", "output": "b.parquet", "records_read": 1, "rows": 1, "rejected": 0,
                       "shard_errors": [error], "input": {}}],
           "records_read": 5, "rows": 4, "rejected": 1, "shards_failed": 1}
    new = tables.upgrade_success(old)
    assert new["version"] == tables.SUCCESS_VERSION and set(new) == {"version", "tokenizer_sha256", "stats", "shards",
                                                                     ACCOUNT_KEY}
    assert account_of(new) == Account(2, ("/in/b.jsonl",), 5, 4, {UNKNOWN_REASON: 1})  # errors listed per shard
    assert [account_of(s).records_written for s in new["shards"]] == [3, 1]
    assert tables.upgrade_success(new) == new


def test_an_old_evaluate_json_and_its_success_are_read_into_the_account():
    old = {"kind": evaluate_layout.EVALUATE_KIND, "schema_version": 1, "inputs": [], "group_field": None,
           "definitions": {}, "tokenizers": [], "rows": [], "records_read": 6, "records": 4,
           "rejected": {"total": 2, "by_reason": {"bad_json": 2}}, "repaired_records": 0,
           "shards": {"count": 2, "failed": 0}, "shard_errors": []}
    with pytest.raises(ValueError, match="schema_version 1"):
        evaluate_layout.validate_evaluate(old)
    new = evaluate_layout.upgrade_evaluate(old)
    evaluate_layout.validate_evaluate(new)
    assert account_of(new) == Account(2, (), 6, 4, {"bad_json": 2})
    success = {"evaluate": "evaluate.json", "records": 4, "shards": {"count": 2, "failed": 0}}
    assert evaluate_layout.upgrade_success(success, old) == evaluate_layout.success_json(new)
    with pytest.raises(ValueError, match="disagrees"):
        evaluate_layout.upgrade_success(dict(success, records=5), old)


def test_an_old_pack_json_is_read_into_the_account():
    old = {"version": 1, "inputs": {"files": 2, "records": 9, "list": [{"url": "a"}]}, "fingerprint": "f", "splits": {}}
    new = pack_layout.upgrade_pack_json(old)
    assert new["version"] == 2 and new["inputs"] == {"list": [{"url": "a"}]} and new["fingerprint"] == "f"
    assert account_of(new) == Account(shards_read=2, records_read=9, records_written=9)


# ------------------------------------------------------------------------------------ the commands

@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample):
    """train, tokenize, evaluate and pack over one corpus of two files, one with a bad row."""
    root = tmp_path_factory.mktemp("accounts")
    corpus = root / "in"
    corpus.mkdir()
    lines = (sample / sorted(p.name for p in sample.glob("*.jsonl"))[0]).read_text().splitlines()[:30]
    (corpus / "a.jsonl").write_text("\n".join(lines[:20]) + "\n")
    (corpus / "b.jsonl").write_text("\n".join(lines[20:]) + "\nnot json\n")
    inputs = str(corpus / "*.jsonl")
    train.run(["--input", inputs, "--output", str(root / "tok"), "--vocab-size", "300", "--quiet"])
    tokenize.run(["--tokenizer", str(root / "tok"), "--input", inputs, "--output", str(root / "tokens"), "--quiet"])
    evaluate.run(["--tokenizer", str(root / "tok"), "--input", inputs, "--output", str(root / "evaluated"), "--quiet"])
    pack.run(["--input", str(root / "tokens"), "--output", str(root / "packed"), "--seq-len", "64", "--bos-token", "0",
              "--quiet"])
    return root


ACCOUNT_FILES = ["tok/train_report.json", "tok/counts/_totals.json", "tok/_SUCCESS", "tokens/stats.json",
                 "tokens/_SUCCESS", "evaluated/evaluate.json", "evaluated/_SUCCESS", "packed/pack.json"]


@pytest.mark.slow
def test_every_command_writes_the_same_account_of_the_same_inputs(runs):
    files = {name: json.loads((runs / name).read_text()) for name in ACCOUNT_FILES}
    for name, d in files.items():
        assert list(d[ACCOUNT_KEY]) == ["shards", "records"] or set(d[ACCOUNT_KEY]) == {"shards", "records"}, name
        assert set(d[ACCOUNT_KEY]["shards"]) == set(SHARD_KEYS) and set(d[ACCOUNT_KEY]["records"]) == set(RECORD_KEYS)
        for old in ("records_read", "records_counted", "records_rejected", "records_repaired", "repaired_records",
                    "rejected_by_reason", "shards_failed", "rejected"):
            assert old not in d, (name, old)
    assert "rows" not in files["tokens/_SUCCESS"] and "files" not in files["packed/pack.json"]["inputs"]
    of_text = {name: d[ACCOUNT_KEY] for name, d in files.items() if name != "packed/pack.json"}
    assert len({json.dumps(a, sort_keys=True) for a in of_text.values()}) == 1, of_text
    account = Account.from_json(files["tokens/stats.json"][ACCOUNT_KEY])
    assert account == Account(2, (), 31, 30, {"bad_json": 1})
    # pack reads the tokens written: every one is packed
    assert account_of(files["packed/pack.json"]) == Account(shards_read=2, records_read=30, records_written=30)


@pytest.mark.slow
def test_tokenize_takes_a_version_2_stats_json_as_its_baseline(tmp_path):
    """A baseline written before the account is read through the same upgrade, not refused."""
    baseline = tmp_path / "old" / "stats.json"
    baseline.parent.mkdir()
    baseline.write_bytes((FUZZ_STATS / "stats.json").read_bytes())
    assert tokenize.check_baseline(str(baseline), str(tmp_path / "out")) == str(baseline)
    assert drift_judging.load_stats(baseline)["schema_version"] == 3
