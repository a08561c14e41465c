"""Records as the sources yield them: `Record`, and `RecordRun` (records held as columns)."""
import pickle
import random
from dataclasses import asdict

import pytest

from schemas.records import NO_FIELDS, Record, RecordRun, ids_of, join_runs, texts_of


def records_of(run):
    return [asdict(r) for r in run]


def test_a_record_without_kept_fields_shares_one_read_only_mapping():
    a, b = Record("a", "x", 0), Record("b", "y", 1)
    assert a.keep is b.keep is NO_FIELDS and a.keep == {} and a.keep.get("lang") is None
    with pytest.raises(TypeError):
        a.keep["lang"] = "en"                       # read-only: no record's fields leak into another's
    assert not hasattr(a, "__dict__")               # slotted
    assert pickle.loads(pickle.dumps(a)) == a and pickle.loads(pickle.dumps(a)).keep is NO_FIELDS
    assert Record("a", "x", 0, keep={"lang": "en"}) != a


def test_a_run_is_the_records_it_holds():
    texts = ["alpha", "", "gamma δ", "d"]
    with_ids = RecordRun(list(texts), ["i0", None, "i2", None], range(5, 9), "dir/s.jsonl")
    without = RecordRun(list(texts), None, range(5, 9), "dir/s.jsonl")
    assert records_of(with_ids) == [
        {"id": "i0", "text": "alpha", "row": 5, "repaired": False, "keep": {}},
        {"id": "dir/s.jsonl:6", "text": "", "row": 6, "repaired": False, "keep": {}},
        {"id": "i2", "text": "gamma δ", "row": 7, "repaired": False, "keep": {}},
        {"id": "dir/s.jsonl:8", "text": "d", "row": 8, "repaired": False, "keep": {}}]
    assert [r.id for r in without] == without.ids == [f"dir/s.jsonl:{k}" for k in range(5, 9)]
    assert ids_of(with_ids) == ["i0", "dir/s.jsonl:6", "i2", "dir/s.jsonl:8"]
    assert texts_of(with_ids) == texts and len(with_ids) == 4 and with_ids[-1] == Record("dir/s.jsonl:8", "d", 8)
    for run in (with_ids, without):
        for start in range(5):
            for stop in range(start, 6):
                part = run[start:stop]
                assert type(part) is RecordRun and records_of(part) == records_of(run)[start:stop]
    with pytest.raises(ValueError):
        with_ids[::2]
    with pytest.raises(IndexError):
        with_ids[4]


@pytest.mark.parametrize("seed", range(20))
def test_runs_joined_are_their_records_one_after_the_other(seed):
    rng = random.Random(seed)
    runs, row = [], rng.randrange(3)
    for _ in range(rng.randrange(1, 5)):
        n = rng.randrange(4)
        ids = None if rng.random() < 0.5 else [None if rng.random() < 0.3 else f"x{row + k}" for k in range(n)]
        runs.append(RecordRun([f"t{row + k}" for k in range(n)], ids, range(row, row + n), "s.jsonl"))
        row += n + (rng.random() < 0.4)           # a rejected row between two runs, sometimes
    joined = RecordRun.joined(runs)
    assert records_of(joined) == [r for run in runs for r in records_of(run)]
    assert records_of(joined[1:]) == records_of(joined)[1:]
    mixed = [list(runs[0])] + runs[1:]           # a list of records among them: a list of records
    assert [asdict(r) for r in join_runs(mixed)] == records_of(joined)
    assert type(join_runs(mixed)) is list or len(mixed) == 1
    assert type(join_runs(runs)) is RecordRun
