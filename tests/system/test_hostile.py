"""Both pipelines over the hostile corpus (tests/data/hostile/make_hostile.py): nothing lost, nothing
let in.

Every row is written (and decodes to its text, repaired as documented) or rejected with its reason
and row; every unreadable file is reported per shard in _SUCCESS, stats.json, train_report.json and on
the terminal, with its readable rows kept, while the other shards go on; `--fail-fast` stops at the
first problem instead. Special-token strings stay plain text, and the ids equal Hugging Face
`tokenizers` (tiktoken for the 20 MB record, which HF takes a minute to encode). Expectations come from
how the generator built each file, never from the code under test.
"""
import base64
import dataclasses
import gzip
import json
import pickle
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from bpe_ops import Tokenizer
from pipelines import tokenize, train
from tests.conftest import ROOT
from tests.data.hostile.make_hostile import SPECIAL, make_hostile
from schemas.accounts import account_of

SUBFOLDERS = ("jsonl", "text", "parquet", "compressed", "scripts")


def cli(module, *argv, timeout=600):
    return subprocess.run([sys.executable, "-m", f"pipelines.{module}", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tokenbeam: error:")]


def parquet_name(path: str) -> str:
    """`compressed/good.jsonl.zst` -> `compressed/good.parquet`."""
    stem = path
    for ext in (".gz", ".zst", ".bz2", ".jsonl", ".txt", ".parquet"):
        stem = stem[: -len(ext)] if stem.endswith(ext) else stem
    return stem + ".parquet"


def expected_ids(e) -> list[str]:
    return [rid if rid is not None else f"{e.path}:{row}" for row, rid, _ in e.records]


@pytest.fixture(scope="module")
def tokenizer_json(trained_tokenizer):
    return trained_tokenizer("tiny", 1000, "--special-token", SPECIAL) / "tokenizer.json"


@pytest.fixture(scope="module")
def tok(tokenizer_json):
    return Tokenizer.from_file(tokenizer_json)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, corpora):
    folder = tmp_path_factory.mktemp("hostile")
    expects = {e.path: e for e in make_hostile(folder, corpora / "multi")}
    return folder, expects


def inputs(folder):
    return sum((["--input", folder / sub / "*"] for sub in SUBFOLDERS), [])


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, hostile, tokenizer_json):
    folder, _ = hostile
    out = tmp_path_factory.mktemp("tokens")
    # The hostile corpus holds unreadable files on purpose: they are reported, and allowed here.
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--output", out, "--allow-shard-errors", *inputs(folder))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "_SUCCESS").read_text())
    return out, result.stderr, manifest, json.loads((out / "stats.json").read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory, hostile):
    folder, _ = hostile
    out = tmp_path_factory.mktemp("trained")
    result = cli("train", "--output", out, "--vocab-size", 600, "--special-token", SPECIAL, "--allow-shard-errors",
                 *inputs(folder))
    assert result.returncode == 0, result.stderr
    return out, result.stderr, json.loads((out / "train_report.json").read_text())


def shard_entry(manifest, path):
    (entry,) = [s for s in manifest["shards"] if s["relpath"] == path]
    return entry


def read_rejected(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------ tokenize

def test_every_row_is_written_or_rejected_with_reason_and_row(tokenized, hostile, tok):
    out, _, manifest, _ = tokenized
    folder, expects = hostile
    checked = 0
    for e in expects.values():
        if e.error:
            continue
        table = pq.read_table(out / parquet_name(e.path))
        assert table.column("id").to_pylist() == expected_ids(e), e.path
        assert [tok.decode(ids) for ids in table.column("token_ids").to_pylist()] == [t for _, _, t in e.records]
        rejected = out / "rejected" / parquet_name(e.path).replace(".parquet", ".jsonl")
        if e.rejected:
            lines = read_rejected(rejected)
            assert [(r["row"], r["reason"]) for r in lines] == e.rejected, e.path
            assert {r["source"] for r in lines} == {str(folder / e.path)}
            assert all(r["detail"] and "\n" not in r["detail"] for r in lines)
        else:
            assert not rejected.exists(), e.path
        entry = shard_entry(manifest, e.path)
        account = account_of(entry)
        assert (account.records_read, account.records_written, account.records_rejected, entry["shard_errors"]) == (
            len(e.records) + len(e.rejected), len(e.records), len(e.rejected), [])
        checked += 1
    assert checked == len([e for e in expects.values() if not e.error]) >= 10


def test_unreadable_files_are_reported_and_their_readable_rows_kept(tokenized, hostile, tok):
    out, stderr, manifest, stats = tokenized
    folder, expects = hostile
    broken = [e for e in expects.values() if e.error]
    assert {e.error for e in broken} == {"truncated_or_corrupt", "unreadable_file", "missing_text_column",
                                         "text_column_not_string", "wrong_format"}
    # The warnings that name a file (repeated ids and most records rejected are warnings too).
    warnings = [line for line in stderr.splitlines() if line.startswith(f"tokenbeam: warning: {folder}/")]
    for e in broken:
        entry = shard_entry(manifest, e.path)
        (error,) = entry["shard_errors"]
        assert (error["source"], error["reason"]) == (str(folder / e.path), e.error)
        written = account_of(entry).records_written
        assert error["rows_read"] == written == account_of(entry).records_read
        assert entry["account"]["shards"] == {"read": 1, "failed": 1}
        rows = pq.read_table(out / parquet_name(e.path))
        if e.prefix:      # a cut compressed file: a proper prefix of its records, nothing after the damage
            assert 0 < written < len(e.records)
            assert rows.column("id").to_pylist() == expected_ids(e)[:written]
            assert [tok.decode(x) for x in rows.column("token_ids").to_pylist()] == [
                t for _, _, t in e.records[:written]]
        else:
            assert written == rows.num_rows == 0
        assert sum(str(folder / e.path) in w and e.error in w for w in warnings) == 1, e.path
    assert len(warnings) == len(broken)
    from_manifest = sorted((e["source"], e["rows_read"], e["reason"], e["detail"])
                           for s in manifest["shards"] for e in s["shard_errors"])
    assert [(e["source"], e["rows_read"], e["reason"], e["detail"]) for e in stats["shard_errors"]] == from_manifest


def test_records_read_equal_written_plus_rejected_in_total(tokenized, hostile):
    _, _, manifest, stats = tokenized
    _, expects = hostile
    kept = {s["relpath"]: account_of(s).records_written for s in manifest["shards"]}
    written = sum(kept[e.path] if e.prefix else len(e.records) for e in expects.values())
    rejected = Counter(reason for e in expects.values() for _, reason in e.rejected)
    account = account_of(stats)
    assert account == account_of(manifest)
    assert stats["records"] == account.records_written == written
    assert account.reasons() == dict(rejected)
    assert account.records_read == written + sum(rejected.values())
    assert account.records_repaired == sum(e.repaired for e in expects.values())
    assert account.shards_read == len(expects) and account.shards_failed == len([e for e in expects.values() if e.error])


def test_tokenize_fails_loudly_when_the_books_do_not_balance(tmp_path, hostile, tokenizer_json, monkeypatch):
    """A summary that loses rejected records makes stats.json disagree with the manifest: the run
    fails and writes no _SUCCESS to vouch for it."""
    from bpe_ops.stats import Summary
    monkeypatch.setattr(Summary, "add_rejected", lambda self, reason, n=1: None)
    folder, _ = hostile
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="record accounting is broken"):
        tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(folder / "jsonl" / "rows.jsonl"),
                      "--output", str(out)])
    assert not (out / "_SUCCESS").exists()


def test_train_fails_loudly_when_the_books_do_not_balance(tmp_path, hostile):
    """The launcher checks the counting process's books before it trains: totals that do not add up
    (here: a run's _totals.json doctored to lose its rejected records) stop it with no tokenizer."""
    folder, _ = hostile
    counted = tmp_path / "counted"
    train.run(["--input", str(folder / "jsonl" / "rows.jsonl"), "--output", str(counted), "--vocab-size", "260",
               "--min-frequency", "1"])
    totals_file = counted / "counts" / "_totals.json"
    totals = json.loads(totals_file.read_text())
    assert totals["account"]["records"]["rejected"] > 0
    totals["account"]["records"].update(rejected=0, rejected_by_reason={})
    totals_file.write_text(json.dumps(totals))
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="record accounting is broken"):
        train.run(["--counts", str(counted), "--output", str(out), "--vocab-size", "260", "--min-frequency", "1"])
    assert not (out / "tokenizer.json").exists()


def test_rerun_redoes_a_shard_that_could_not_be_read_to_the_end(tmp_path, tokenizer_json):
    docs = "".join(json.dumps({"id": str(i), "text": f"record {i} " + "word " * (i % 30)}) + "\n" for i in range(2000))
    whole = gzip.compress(docs.encode(), mtime=0)
    shard = tmp_path / "in" / "s.jsonl.gz"
    shard.parent.mkdir()
    shard.write_bytes(whole[: len(whole) // 2])
    args = ["--tokenizer", str(tokenizer_json), "--input", str(shard), "--output", str(tmp_path / "out"),
            "--allow-shard-errors"]
    first = tokenize.run(args)
    assert len(first["shard_errors"]) == 1 and 0 < first["records"] < 2000
    shard.write_bytes(whole)                 # the file was repaired: its shard must not be skipped
    second = tokenize.run(args)
    assert second["shard_errors"] == [] and second["records"] == 2000
    assert pq.read_table(tmp_path / "out" / "s.parquet").column("id").to_pylist() == [str(i) for i in range(2000)]


def test_special_token_strings_in_data_are_plain_text(tokenized, tok):
    out, *_ = tokenized
    table = pq.read_table(out / "jsonl" / "text.parquet").to_pylist()
    (row,) = [r for r in table if r["id"] == "specials"]
    special_id = tok.special_tokens[SPECIAL]
    assert tok.decode(row["token_ids"]).count(SPECIAL) == 3
    assert special_id not in row["token_ids"]
    assert row["token_ids"] == tok.encode(tok.decode(row["token_ids"]))
    assert tok.encode(SPECIAL, allowed_special="all") == [special_id]    # the id exists; data cannot reach it


def test_ids_equal_hugging_face_on_every_text(tokenized, hostile, tokenizer_json):
    from tokenizers import Tokenizer as HFTokenizer
    out, *_ = tokenized
    _, expects = hostile
    hf = HFTokenizer.from_file(str(tokenizer_json))
    compared = 0
    for e in expects.values():
        if e.error and not e.prefix:
            continue
        table = pq.read_table(out / parquet_name(e.path))
        texts = [t for _, _, t in e.records][: table.num_rows]
        ours = table.column("token_ids").to_pylist()
        # HF turns special-token strings into the special token: compare where the text has none.
        plain = [i for i, t in enumerate(texts) if SPECIAL not in t]
        theirs = hf.encode_batch([texts[i] for i in plain], add_special_tokens=False)
        for i, enc in zip(plain, theirs):
            assert ours[i] == enc.ids, (e.path, i)
        compared += len(plain)
    scripts = expects["scripts/scripts.jsonl"]
    assert len(scripts.records) >= 20 and compared > 100


# ------------------------------------------------------------------------------------ train

def test_train_accounts_for_the_same_records_and_files(trained, tokenized, hostile):
    out, stderr, report = trained
    tok_out, _, manifest, stats = tokenized
    folder, expects = hostile
    assert account_of(report) == account_of(manifest) == account_of(stats)
    assert report["account"] == manifest["account"] == stats["account"]
    assert account_of(report).records_repaired == sum(e.repaired for e in expects.values())
    assert [(e["source"], e["rows_read"], e["reason"]) for e in report["shard_errors"]] == [
        (e["source"], e["rows_read"], e["reason"]) for e in stats["shard_errors"]]
    warnings = [line for line in stderr.splitlines() if line.startswith("tokenbeam: warning:")]
    assert len(warnings) == len(report["shard_errors"]) == len([e for e in expects.values() if e.error])
    for e in expects.values():
        rejected = parquet_name(e.path).replace(".parquet", ".jsonl")
        if e.rejected or e.error:      # an unreadable shard is listed there too, with the row it was lost from
            assert read_rejected(out / "rejected" / rejected) == read_rejected(tok_out / "rejected" / rejected)
        else:
            assert not (out / "rejected" / rejected).exists()
    # Special tokens split the training text before pre-tokenization: of the four `<|endoftext|`
    # in the data, only the one that is not a complete special token is counted.
    assert sum(t.count(SPECIAL[:-1]) for e in expects.values() for _, _, t in e.records) == 4
    assert train.load_counts(str(out / "counts"))[b"endoftext"] == 1


# ------------------------------------------------------------------------------------ fail fast

def test_tokenize_fail_fast_stops_at_the_first_bad_row(tmp_path, hostile, tokenizer_json):
    folder, expects = hostile
    first_bad = expects["jsonl/rows.jsonl"].rejected[0]
    out = tmp_path / "out"
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--output", out, "--fail-fast",
                 "--input", folder / "jsonl" / "rows.jsonl", "--input", folder / "jsonl" / "last_line.jsonl")
    assert result.returncode == 3
    (line,) = error_lines(result.stderr)
    assert f"{folder / 'jsonl' / 'rows.jsonl'} row {first_bad[0]}:" in line and first_bad[1] in line
    assert "Traceback" not in result.stderr
    assert not (out / "_SUCCESS").exists() and not (out / "rows.parquet").exists()


def test_train_fail_fast_stops_at_the_first_unreadable_file(tmp_path, hostile, tokenized):
    folder, _ = hostile
    _, _, manifest, _ = tokenized
    rows_read = shard_entry(manifest, "compressed/truncated.jsonl.gz")["account"]["records"]["written"]
    out = tmp_path / "out"
    result = cli("train", "--output", out, "--vocab-size", 300, "--fail-fast",
                 "--input", folder / "compressed" / "truncated.jsonl.gz", "--input", folder / "jsonl" / "last_line.jsonl")
    assert result.returncode == 3
    (line,) = error_lines(result.stderr)
    assert f"{folder / 'compressed' / 'truncated.jsonl.gz'} row {rows_read}:" in line
    assert "truncated_or_corrupt" in line and "Traceback" not in result.stderr
    assert not (out / "counts" / "_totals.json").exists() and not (out / "tokenizer.json").exists()


def test_inputs_that_would_write_the_same_output_are_refused(tmp_path, tokenizer_json):
    (tmp_path / "a.jsonl").write_text('{"text": "json"}\n')
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"text\n"))
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--output", tmp_path / "out", "--input", tmp_path / "a.*")
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "a.jsonl" in line and "a.txt.gz" in line and "a.parquet" in line


# ------------------------------------------------------------------------------------ big

@pytest.fixture(scope="module")
def big(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    expects = [e for e in make_hostile(folder, big=True) if e.path.startswith("big/")]
    assert sum((folder / e.path).stat().st_size for e in expects) > 26 << 20
    # Read from big/ alone, shard paths (and default ids) are relative to it.
    return folder, [dataclasses.replace(e, path=e.path.removeprefix("big/")) for e in expects]


def test_big_records_round_trip_through_tokenize(big, tmp_path, tokenizer_json, tok):
    import tiktoken
    from tokenizers import Tokenizer as HFTokenizer
    folder, expects = big
    out = tmp_path / "out"
    stats = tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out), "--input", str(folder / "big" / "*"),
                          "--max-record-bytes", "0"])
    ranks = {base64.b64decode(b): int(r) for b, r in
             (line.split() for line in (tokenizer_json.parent / "tokenizer.tiktoken").read_text().splitlines())}
    tiktok = tiktoken.Encoding("ours", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})
    hf = HFTokenizer.from_file(str(tokenizer_json))
    for e in expects:
        table = pq.read_table(out / parquet_name(e.path))
        assert table.column("id").to_pylist() == expected_ids(e)
        texts = [t for _, _, t in e.records]
        for text, ids, n_bytes in zip(texts, table.column("token_ids").to_pylist(), table.column("n_bytes").to_pylist()):
            assert tok.decode(ids) == text
            assert n_bytes == len(text.encode())
            # HF needs a minute for the 20 MB record; tiktoken reads the same ranks in seconds, but is
            # quadratic on one long piece, where HF is fine.
            oracle = hf.encode(text, add_special_tokens=False).ids if len(set(text)) == 1 else tiktok.encode_ordinary(text)
            assert ids == oracle, e.path
    assert stats["records"] == stats["account"]["records"]["read"] == sum(len(e.records) for e in expects)
    assert stats["tokens_per_record"]["max"] > 10_000_000


def test_big_records_are_counted_by_train(big, tmp_path):
    folder, expects = big
    report = train.run(["--input", str(folder / "big" / "*"), "--output", str(tmp_path / "out"),
                        "--vocab-size", "400", "--max-record-bytes", "0"])
    texts = [t for e in expects for _, _, t in e.records]
    assert len(texts) == 6
    assert report["account"]["records"]["read"] == report["account"]["records"]["written"] == len(texts)
    assert report["bytes"] == sum(len(t.encode()) for t in texts)
    assert report["merges"] == 400 - 256
    # 1 MB of 'a' is one pre-token with 2**20 - 1 pairs ('a', 'a'), then 2**19 - 1 pairs ('aa', 'aa').
    merges = Tokenizer.from_file(tmp_path / "out" / "tokenizer.json").merges
    assert (b"a", b"a") in merges and (b"aa", b"aa") in merges


# ------------------------------------------------------------------------------------ bad tokenizer files and flags

def _bad_tokenizers(good: dict, folder) -> dict:
    """name -> (tokenizer.json text, a word the error line must contain)."""
    def edited(change):
        doc = json.loads(json.dumps(good))
        change(doc)
        return json.dumps(doc)

    merged = {t: i for t, i in good["model"]["vocab"].items() if i >= 256}
    first_merged = min(merged, key=merged.get)
    marker = folder / "executed"
    return {
        "truncated": (json.dumps(good)[: len(json.dumps(good)) // 2], "truncated"),
        "wordpiece": (edited(lambda d: d["model"].update(type="WordPiece")), "WordPiece"),
        "unigram": (edited(lambda d: d.update(model={"type": "Unigram", "vocab": [["a", -1.0]]})), "Unigram"),
        "unknown_merge_token": (edited(lambda d: d["model"]["merges"].append(["qq", "zz"])), "neither in the vocab"),
        # Another token listed first under the id of a merged token: the reader must not keep one
        # of them silently.
        "duplicate_id": (edited(lambda d: d["model"].update(vocab={"Ġduplicate": merged[first_merged],
                                                                    **d["model"]["vocab"]})), "id"),
        "id_as_string": (edited(lambda d: d["model"]["vocab"].update({"Ġzz": "7"})), "malformed"),
        "id_beyond_uint32": (edited(lambda d: d["added_tokens"][0].update(id=2**32)), "uint32"),
        "ids_mostly_unused": (edited(lambda d: d["added_tokens"][0].update(id=3_000_000_000)), "gaps"),
        # Tokenizer files are data: a pickle must never be loaded.
        "pickle": (pickle.dumps(_Touch(str(marker))).decode("latin-1"), "invalid JSON"),
    }


class _Touch:
    """Unpickling this creates a file (the test checks that it never happens)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


BAD_TOKENIZERS = ("truncated", "wordpiece", "unigram", "unknown_merge_token", "duplicate_id", "id_as_string",
                  "id_beyond_uint32", "ids_mostly_unused", "pickle")
BAD_FLAGS = {
    "tokenize: --separator with --text-unit file": (
        "tokenize", ["--separator", "@@", "--text-unit", "file"], "exclude each other"),
    "train: --vocab-size beyond the id range": ("train", ["--vocab-size", "5000000000"], "too large"),
    "train: --counts with --input": ("train", ["--counts", "{out}", "--vocab-size", "300"], "--counts"),
    "train: --separator on JSONL": ("train", ["--separator", "@@", "--vocab-size", "300", "--input", "{jsonl}"],
                                    "txt"),
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory, tokenizer_json):
    """Every bad tokenizer file and contradictory flag set, run as a CLI subprocess (three at a time)."""
    from concurrent.futures import ThreadPoolExecutor
    folder = tmp_path_factory.mktemp("bad")
    text = folder / "in.txt"
    text.write_text("some text\n")
    jsonl = folder / "in.jsonl"
    jsonl.write_text('{"text": "some text"}\n')
    jobs = {}
    for name, (content, _) in _bad_tokenizers(json.loads(tokenizer_json.read_text()), folder).items():
        (folder / name).mkdir()
        (folder / name / "tokenizer.json").write_text(content, encoding="utf-8", errors="surrogateescape")
        jobs[name] = ("tokenize", ["--tokenizer", folder / name / "tokenizer.json", "--input", text,
                                   "--output", folder / f"out-{name}"])
    for name, (module, flags, _) in BAD_FLAGS.items():
        flags = [f.format(out=folder / "out", jsonl=jsonl) for f in flags]
        base = ["--tokenizer", tokenizer_json] if module == "tokenize" else []
        jobs[name] = (module, [*base, "--input", text, *flags, "--output", folder / "out"])
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(cli, module, *argv) for name, (module, argv) in jobs.items()}
        results = {name: f.result() for name, f in futures.items()}
    return folder, results


@pytest.mark.parametrize("name", BAD_TOKENIZERS)
def test_bad_tokenizer_file_is_one_line_and_never_executed(name, bad_runs, tokenizer_json):
    folder, results = bad_runs
    result = results[name]
    assert result.returncode == 2, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr
    word = _bad_tokenizers(json.loads(tokenizer_json.read_text()), folder)[name][1]
    assert str(folder / name / "tokenizer.json") in line and word in line
    assert not (folder / "executed").exists()


@pytest.mark.parametrize("name", list(BAD_FLAGS))
def test_contradictory_flags_are_one_line(name, bad_runs):
    _, results = bad_runs
    result = results[name]
    assert result.returncode == 2, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr and BAD_FLAGS[name][2] in line
