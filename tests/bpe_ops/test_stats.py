"""bpe_ops.stats.Summary, schemas/stats.py and `tokenbeam stats` on real text and the real GPT-2 tokenizer.

Every expected figure is recomputed here the plain way (sorted lists, Counter, Fractions), never
taken from the code under test.
"""
import json
import math
import os
import pickle
import random
from collections import Counter
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from bpe_ops import Tokenizer
import zlib

import numpy as np

from bpe_ops.stats import (EXACT_ID_CLASSES, FOLDED_ID_CLASSES, ID_CLASS_FOLD, REPLICATE_GROUPS, UNICODE_SPACES, Summary,
                           batch_stats, count_words, count_words_batch, folded_classes, id_class_count, id_class_table, id_classes, length_key, nearest_rank, record_group,
                           digit_runs, digit_runs_batch, measure_batch, record_stats, single_byte_ids)
from pipelines import stats_cmd
from pipelines.monitoring.drift_judging import load_stats
from schemas.stats import (BYTES_PER_TOKEN_EDGES, STATS_SCHEMA_VERSION, TOKENS_PER_RECORD_EDGES,
                           bin_counts, dump_stats, stats_json, validate_stats)
from tests.conftest import read_jsonl_texts

# A byte-level vocabulary of the 256 bytes plus a few multi-byte tokens, for synthetic records.
TOY = SimpleNamespace(vocab={**{i: bytes([i]) for i in range(256)}, 256: b"th", 257: b" the", 258: b"ing"},
                      vocab_size=259, sha256="0" * 64)


@pytest.fixture(scope="module")
def gpt2(gpt2_files):
    return Tokenizer.from_gpt2_files(*gpt2_files)


@pytest.fixture(scope="module")
def tiny_records(corpora, gpt2):
    """(text, ids) of every record of the real `tiny/` corpus (English, many languages, code)."""
    texts = read_jsonl_texts(corpora / "tiny")
    return list(zip(texts, gpt2.encode_batch(texts)))


def summary_of(records, tok, first=0):
    """A calibrated summary: record k has the id `r{first + k}` (as write_token_parquet names them)."""
    s = Summary(tok.vocab_size, raw_byte_ids=single_byte_ids(tok.vocab))
    for k, (text, ids) in enumerate(records):
        s.add_text(text, ids, record_id=f"r{first + k}")
    return s


# ---- per-record figures ---------------------------------------------------------------------

def test_record_stats_counts_utf8_bytes_code_points_and_words():
    text = "Héllo  wörld\t日本語\n x\ud800"   # a lone surrogate is written as U+FFFD (3 bytes)
    n_tokens, n_bytes, n_chars, n_words = record_stats(text, [1, 2, 3])
    assert n_tokens == 3
    assert n_bytes == len("Héllo  wörld\t日本語\n x\ufffd".encode("utf-8"))
    assert n_chars == 20
    assert n_words == 4 == count_words(text)
    assert count_words("") == 0 and count_words(" \n\t ") == 0


# ---- merge is exact and order-independent -----------------------------------------------------

def _random_tree_merge(parts, rng):
    parts = [pickle.loads(pickle.dumps(p)) for p in parts]   # as Beam ships accumulators
    while len(parts) > 1:
        i, j = sorted(rng.sample(range(len(parts)), 2))
        right = parts.pop(j)
        parts[i] = parts[i].merge(right) if rng.random() < 0.5 else right.merge(parts[i])
    return parts[0]


def feed(items, tok):
    """A calibrated summary of `(position, text, ids)` items: every 10th position is rejected instead
    of written, every 13th counts as repaired, positions come from shards of 50."""
    s = Summary(tok.vocab_size, raw_byte_ids=single_byte_ids(tok.vocab))
    for k, text, ids in items:
        if k % 10 == 0:
            s.add_rejected("bad_json" if k % 20 else "missing_text_field")
        else:
            s.add_text(text, ids, record_id=f"doc-{k}")
            s.add_repaired(k % 13 == 0)
        s.add_shard(f"shard-{k // 50}")
    return s


def test_merge_of_any_split_in_any_order_equals_one_pass(tiny_records, gpt2):
    extra = {"inputs": ["tiny/*.jsonl"]}
    items = [(k, text, ids) for k, (text, ids) in enumerate(tiny_records)]
    expected = dump_stats(stats_json(feed(items, gpt2), gpt2, extra))
    assert '"missing_text_field": ' in expected and '"repaired": 0' not in expected
    for seed in range(5):
        rng = random.Random(seed)
        records = items[:]
        rng.shuffle(records)
        cuts = sorted(rng.sample(range(1, len(records)), rng.randint(1, 8)))
        parts = [feed(records[a:b], gpt2) for a, b in zip([0] + cuts, cuts + [len(records)])]
        parts.append(Summary(gpt2.vocab_size))       # an empty bundle (no raw-byte ids: Beam's accumulator)
        folded = Summary.merged(reversed(parts), gpt2.vocab_size)
        assert dump_stats(stats_json(folded, gpt2, extra)) == expected
        assert dump_stats(stats_json(_random_tree_merge(parts, rng), gpt2, extra)) == expected


def test_merge_adds_into_its_own_tables_and_leaves_the_other_unchanged(tiny_records, gpt2):
    items = [(k, text, ids) for k, (text, ids) in enumerate(tiny_records)]
    a, b = feed(items[::2], gpt2), feed(items[1::2], gpt2)
    before = b.group_classes.copy(), b.group_digit_runs.copy()
    expected = a.group_classes + b.group_classes, a.group_digit_runs + b.group_digit_runs
    acc = Summary(gpt2.vocab_size)
    tables = acc.group_classes
    acc.merge(a).merge(b)
    assert acc.group_classes is tables           # the accumulator's own table, added in place
    assert (acc.group_classes == expected[0]).all() and (acc.group_digit_runs == expected[1]).all()
    assert (b.group_classes == before[0]).all() and (b.group_digit_runs == before[1]).all()
    # A table that cannot be written (read-only) is replaced by a new one: nothing else changes.
    view = pickle.loads(pickle.dumps(a))
    shared = view.group_classes
    shared.flags.writeable = False
    view.merge(b)
    assert view.group_classes is not shared and (view.group_classes == expected[0]).all()


def test_merge_refuses_different_vocabularies():
    with pytest.raises(ValueError, match="vocabularies"):
        Summary(259).merge(Summary(300))


# ---- the figures against plain computations ----------------------------------------------------

def test_figures_against_plain_computation(tiny_records, gpt2):
    stats = stats_json(summary_of(tiny_records, gpt2), gpt2)
    validate_stats(stats)
    lengths = sorted(len(ids) for _, ids in tiny_records)
    all_ids = [i for _, ids in tiny_records for i in ids]
    freq = Counter(all_ids)
    n = len(lengths)

    assert stats["records"] == stats["account"]["records"]["read"] == n
    assert stats["tokens"] == len(all_ids)
    assert stats["bytes"] == sum(len(t.encode("utf-8")) for t, _ in tiny_records)
    assert stats["chars"] == sum(len(t) for t, _ in tiny_records)
    assert stats["words"] == sum(len(t.split()) for t, _ in tiny_records)
    tpr = stats["tokens_per_record"]
    assert (tpr["min"], tpr["max"]) == (lengths[0], lengths[-1])
    assert tpr["mean"] == pytest.approx(sum(lengths) / n)
    for p in (50, 90, 99):
        assert tpr[f"p{p}"] == lengths[math.ceil(Fraction(p, 100) * n) - 1]
    assert stats["bytes_per_token"]["overall"] == pytest.approx(stats["bytes"] / len(all_ids))
    assert stats["tokens_per_word"] == pytest.approx(len(all_ids) / stats["words"])

    assert stats["token_frequency"]["counts"] == [freq[i] for i in range(gpt2.vocab_size)]
    assert stats["vocabulary"]["used_ids"] == len(freq)
    assert stats["vocabulary"]["utilisation"] == pytest.approx(len(freq) / gpt2.vocab_size)
    raw = sum(1 for i in all_ids if len(gpt2.decode_bytes([i])) == 1)
    assert stats["raw_byte_tokens"]["count"] == raw
    assert stats["raw_byte_tokens"]["share"] == pytest.approx(raw / len(all_ids))
    top = stats["token_frequency"]["top"]
    assert [t["count"] for t in top] == sorted(freq.values(), reverse=True)[:len(top)]
    assert top[0]["id"] == freq.most_common(1)[0][0]
    assert top[0]["token"] == repr(gpt2.decode_bytes([top[0]["id"]]).decode("utf-8"))

    # Histograms: each record in the bin whose edges bracket it, by exact rational comparison.
    def bin_of(value, edges):
        return max(i for i, e in enumerate(edges) if Fraction(e) <= value)
    tpr_expected = Counter(bin_of(len(ids), TOKENS_PER_RECORD_EDGES) for _, ids in tiny_records)
    bpt_expected = Counter(bin_of(Fraction(len(t.encode("utf-8")), len(ids)), BYTES_PER_TOKEN_EDGES)
                           for t, ids in tiny_records if ids)
    assert tpr["histogram"]["counts"] == [tpr_expected[i] for i in range(len(TOKENS_PER_RECORD_EDGES))]
    assert stats["bytes_per_token"]["histogram"]["counts"] == [
        bpt_expected[i] for i in range(len(BYTES_PER_TOKEN_EDGES))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=60),
       st.sampled_from([1, 25, 50, 90, 99, 100]))
def test_nearest_rank_matches_sorted_list(values, p):
    expected = sorted(values)[max(1, math.ceil(Fraction(p, 100) * len(values))) - 1]
    assert nearest_rank(Counter(values), p) == expected


def test_nearest_rank_of_nothing_is_none():
    assert nearest_rank({}, 50) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 258), max_size=40), min_size=1, max_size=30))
def test_summary_quantiles_match_sorted_list(id_lists):
    s = Summary(TOY.vocab_size)
    for ids in id_lists:
        s.add(ids, n_bytes=3 * len(ids), n_chars=len(ids), n_words=1)
    tpr = stats_json(s, TOY)["tokens_per_record"]
    lengths = sorted(len(ids) for ids in id_lists)
    for p in (50, 90, 99):
        assert tpr[f"p{p}"] == lengths[math.ceil(Fraction(p, 100) * len(lengths)) - 1]


def test_histograms_cover_empty_and_huge_records():
    s = Summary(TOY.vocab_size)
    s.add(0, n_bytes=0, n_chars=0, n_words=0)                   # empty record, no EOS
    s.add(1, n_bytes=0, n_chars=0, n_words=0)                   # empty text + EOS: 0 bytes/token
    s.add(5, n_bytes=20, n_chars=20, n_words=3)
    s.add(200_000_000, n_bytes=10**12, n_chars=10**12, n_words=10**9)   # past the last edge
    s.add_id_counts({32: 200_000_006})
    stats = stats_json(s, TOY)
    validate_stats(stats)
    tpr = stats["tokens_per_record"]["histogram"]["counts"]
    assert tpr[0] == 1 and tpr[1] == 1 and tpr[-1] == 1 and sum(tpr) == 4
    assert TOKENS_PER_RECORD_EDGES[0] == 0 and all(a < b for a, b in zip(TOKENS_PER_RECORD_EDGES,
                                                                          TOKENS_PER_RECORD_EDGES[1:]))
    bpt = stats["bytes_per_token"]["histogram"]["counts"]
    assert bpt[0] == 1                                           # 0 bytes per token
    assert bpt[BYTES_PER_TOKEN_EDGES.index(4.0)] == 1            # exactly 4 bytes per token
    assert bpt[-1] == 1                                          # 5000 bytes per token
    assert stats["bytes_per_token"]["records_without_tokens"] == 1
    assert (stats["tokens_per_record"]["min"], stats["tokens_per_record"]["max"]) == (0, 200_000_000)


def test_pickle_round_trip_is_exact_and_compact(tiny_records, gpt2):
    s = summary_of(tiny_records, gpt2)
    s.add_rejected("bad_json", 3)
    s.add_repaired(2)
    s.add_shard("tiny-000-of-002.jsonl")
    blob = pickle.dumps(s)
    back = pickle.loads(blob)
    assert dump_stats(stats_json(back, gpt2)) == dump_stats(stats_json(s, gpt2))
    dense = len(pickle.dumps(s.id_counts))
    # The whole summary (id counts and group classes as their non-zero cells in narrow types)
    # pickles smaller than its dense id counts alone.
    assert len(blob) < 0.75 * dense, (len(blob), dense)
    assert back.merge(s).tokens == 2 * s.tokens        # still a working accumulator


def test_rejected_repaired_and_shards_are_reported():
    s = Summary(TOY.vocab_size)
    s.add([104, 105], 2, 2, 1)
    s.add_rejected("bad_json")
    s.add_rejected("missing_text_field", 2)
    s.add_repaired()
    for name in ("b.jsonl", "a.jsonl", "b.jsonl"):
        s.add_shard(name)
    stats = stats_json(s, TOY, {"timing": {"elapsed_seconds": 1.5}})
    assert stats["account"] == {"shards": {"read": 2, "failed": 0}, "records": {
        "read": 4, "written": 1, "rejected": 3, "rejected_by_reason": {"bad_json": 1, "missing_text_field": 2},
        "repaired": 1}}
    assert stats["shards"] == {"names": ["a.jsonl", "b.jsonl"]}
    assert not {"records_read", "rejected", "repaired_records"} & set(stats)
    assert stats["timing"] == {"elapsed_seconds": 1.5}


def test_stats_json_refuses_inconsistent_input():
    s = Summary(TOY.vocab_size)
    s.add(3, 3, 3, 1)                      # 3 tokens but no id counted
    with pytest.raises(ValueError, match="add up"):
        stats_json(s, TOY)
    s.add_id_counts({10: 3})
    with pytest.raises(ValueError, match="replace a computed"):
        stats_json(s, TOY, {"tokens": 5})
    with pytest.raises(ValueError, match="outside the vocabulary"):
        s.add_id_counts({259: 1})


# ---- schemas/stats.py: validation, loading, writing ---------------------------------------------

@pytest.fixture(scope="module")
def tiny_stats(tiny_records, gpt2):
    return stats_json(summary_of(tiny_records, gpt2), gpt2, {"timing": {"elapsed_seconds": 0.1}})


def test_dump_is_sorted_stable_and_round_trips(tiny_stats):
    text = dump_stats(tiny_stats)
    assert text.endswith("}\n") and text == dump_stats(json.loads(text))
    assert json.loads(text) == tiny_stats
    top_keys = [line.split('"')[1] for line in text.splitlines() if line.startswith('  "')]
    assert top_keys == sorted(top_keys)
    # Lists of numbers stay on one line each: the 32-row replicate tables are a line per row.
    assert len(text.splitlines()) < 1300
    assert all(len(line) < 200_000 for line in text.splitlines())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("tokens"), "missing key 'tokens'"),
    (lambda d: d["tokens_per_record"].pop("p90"), "missing key 'tokens_per_record.p90'"),
    (lambda d: d.update(schema_version=STATS_SCHEMA_VERSION + 1), "schema_version"),
    (lambda d: d.update(schema_version=1), "schema_version 1 lacks .* tokenbeam stats"),
    (lambda d: d.pop("replicates"), "missing key 'replicates'"),
    (lambda d: d["moments"]["sums"].__setitem__(1, 5), "moments.sums disagree"),
    (lambda d: d["replicates"]["tokens"].__setitem__(0, d["replicates"]["tokens"][0] + 1), "do not add up to moments"),
    (lambda d: d["replicates"]["token_classes"]["counts"].pop(), "must hold 32 lists"),
    (lambda d: d.update(kind="something.else"), "not a tokenbeam stats.json"),
    (lambda d: d.update(records=True), "'records' must be int"),
    (lambda d: d.update(tokens_per_word="2.5"), "'tokens_per_word' must be"),
    (lambda d: d["token_frequency"].update(counts=d["token_frequency"]["counts"][:100]), "entries"),
    (lambda d: d.update(tokens=d["tokens"] + 1), "do not add up to tokens"),
    (lambda d: d["tokens_per_record"]["histogram"]["counts"].__setitem__(3, 10**6), "add up to records"),
])
def test_validate_names_the_problem_in_one_line(tiny_stats, edit, message):
    d = json.loads(json.dumps(tiny_stats))
    edit(d)
    with pytest.raises(ValueError, match=message) as exc:
        validate_stats(d)
    assert "\n" not in str(exc.value)


def test_load_stats_rejects_truncated_and_corrupt_files(tmp_path, tiny_stats):
    good = tmp_path / "stats.json"
    good.write_text(dump_stats(tiny_stats))
    assert load_stats(good) == tiny_stats
    truncated = tmp_path / "truncated.json"
    truncated.write_text(dump_stats(tiny_stats)[:5000])
    with pytest.raises(ValueError, match="truncated.json: not valid JSON"):
        load_stats(truncated)
    with pytest.raises(OSError):
        load_stats(tmp_path / "missing.json")


# ---- `tokenbeam stats`: rebuild from Parquet --------------------------------------------------------

def write_token_parquet(path: Path, records, id_type, metadata=None):
    """A token Parquet with the documented columns, written here with plain pyarrow."""
    table = pa.table({
        "id": pa.array([f"r{i}" for i in range(len(records))], pa.string()),
        "token_ids": pa.array([ids for _, ids in records], pa.list_(id_type)),
        **{name: pa.array([v[k] for v in (record_stats(t, ids) for t, ids in records)], pa.int32())
           for k, name in enumerate(["n_tokens", "n_bytes", "n_chars", "n_words"])},
    })
    if metadata:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path, row_group_size=17)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory, gpt2):
    d = tmp_path_factory.mktemp("gpt2")
    gpt2.save(d)
    return d


@pytest.mark.parametrize("id_type", [pa.uint16(), pa.uint32()])
def test_stats_cmd_rebuilds_the_direct_summary(tmp_path, tiny_records, gpt2, gpt2_dir, id_type):
    tok = Tokenizer.from_file(gpt2_dir)
    assert tok.sha256 == gpt2.sha256
    half = len(tiny_records) // 2
    write_token_parquet(tmp_path / "a.parquet", tiny_records[:half], id_type)
    write_token_parquet(tmp_path / "b.parquet", tiny_records[half:], id_type,
                        {"tokenbeam.tokenizer_sha256": gpt2.sha256})
    out = tmp_path / "out" / "stats.json"
    code = stats_cmd.main([str(tmp_path / "*.parquet"), "--tokenizer", str(gpt2_dir), "--output", str(out)])
    assert code == 0
    rebuilt = load_stats(out)

    direct = summary_of(tiny_records[:half], gpt2).merge(summary_of(tiny_records[half:], gpt2))
    direct.add_shard("a.parquet")
    direct.add_shard("b.parquet")
    expected = stats_json(direct, gpt2)
    assert {k: v for k, v in rebuilt.items() if k not in ("timing", "inputs", "tokenizer")} == expected
    assert rebuilt["moments"]["records"] == rebuilt["records"]      # every record calibrated: fit for drift
    from pipelines import drift
    assert drift.main([str(out), str(out)]) == 0                     # and tokenbeam drift reads it


def test_stats_cmd_errors_are_one_line(tmp_path, tiny_records, gpt2, gpt2_dir, capsys):
    write_token_parquet(tmp_path / "other.parquet", tiny_records[:5], pa.uint16(),
                        {"tokenbeam.tokenizer_sha256": "f" * 64})
    pq.write_table(pa.table({"token_ids": pa.array([[1, 2]], pa.list_(pa.uint16()))}),
                   tmp_path / "partial.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    cases = [
        (str(tmp_path / "nothing-*.parquet"), "matched no files"),
        (str(tmp_path / "other.parquet"), "written with tokenizer ffffffffffff"),
        (str(tmp_path / "partial.parquet"), "lacks the column 'id'"),
        (str(tmp_path / "broken.parquet"), "cannot read"),
    ]
    for glob, message in cases:
        code = stats_cmd.main([glob, "--tokenizer", str(gpt2_dir), "--output", str(tmp_path / "s.json")])
        err = capsys.readouterr().err
        assert code == 2, glob
        assert err.count("\n") == 1 and err.startswith("tokenbeam: error:") and message in err, err
    assert not (tmp_path / "s.json").exists()


# ---- calibration: moments and random groups -----------------------------------------------------

def test_moments_and_groups_against_plain_computation(tiny_records, gpt2):
    stats = stats_json(summary_of(tiny_records, gpt2), gpt2)
    raw_ids = {i for i, b in gpt2.vocab.items() if len(b) == 1}
    rows = [(len(ids), len(t.encode("utf-8")), len(t), len(t.split()), sum(i in raw_ids for i in ids))
            for t, ids in tiny_records]
    moments = stats["moments"]
    assert moments["records"] == len(rows)
    assert moments["sums"] == [sum(r[v] for r in rows) for v in range(5)]
    assert moments["products"] == [[sum(r[i] * r[j] for r in rows) for j in range(5)] for i in range(5)]
    rep = stats["replicates"]
    groups = [zlib.crc32(f"r{k}".encode()) % REPLICATE_GROUPS for k in range(len(rows))]
    assert rep["records"] == [groups.count(g) for g in range(REPLICATE_GROUPS)]
    assert rep["tokens"] == [sum(r[0] for r, g in zip(rows, groups) if g == k) for k in range(REPLICATE_GROUPS)]
    classes = np.zeros((REPLICATE_GROUPS, id_class_count(gpt2.vocab_size)), dtype=int)
    for (_, ids), g in zip(tiny_records, groups):
        for i in ids:
            c = i if i < EXACT_ID_CLASSES else EXACT_ID_CLASSES + (i - EXACT_ID_CLASSES) % FOLDED_ID_CLASSES
            classes[g, c] += 1
    assert rep["token_classes"]["counts"] == classes.tolist()
    for k in range(REPLICATE_GROUPS):
        mine = [len(ids) for (_, ids), g in zip(tiny_records, groups) if g == k]
        assert rep["tokens_per_record_counts"][k] == bin_counts(Counter(mine), TOKENS_PER_RECORD_EDGES)
    assert [sum(c) for c in zip(*rep["tokens_per_record_counts"])] == stats["tokens_per_record"]["histogram"]["counts"]
    assert [sum(c) for c in zip(*rep["bytes_per_token_counts"])] == stats["bytes_per_token"]["histogram"]["counts"]
    lengths = sorted(r[0] for r in rows)
    assert stats["tokens_per_record"]["percentiles"] == [
        lengths[max(1, math.ceil(Fraction(p, 100) * len(lengths))) - 1] for p in range(101)]


def test_digit_runs_count_ascii_digit_runs_by_length():
    assert digit_runs("") == (0, 0, 0, 0, 0)
    assert digit_runs("1 22 333 4444 55555 666666") == (1, 1, 1, 1, 2)
    assert digit_runs("1,234,567.89") == (1, 1, 2, 0, 0)            # separators split a number's runs
    assert digit_runs("٣٤٥ and x9y") == (1, 0, 0, 0, 0)              # ASCII digits only
    assert digit_runs("65536".encode()) == digit_runs("65536")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="0123456789a ,٣\n\u00e9", max_size=14), min_size=1, max_size=5))
def test_the_batch_digit_runs_equal_the_regex_specification(texts):
    assert digit_runs_batch(texts).tolist() == [list(digit_runs(t)) for t in texts]
    assert digit_runs_batch([t.encode() for t in texts]).tolist() == [list(digit_runs(t)) for t in texts]


def test_the_unicode_separators_are_those_of_str_split():
    assert sorted(map(ord, UNICODE_SPACES)) == [c for c in range(128, 0x110000) if chr(c).isspace()]
    assert [c for c in range(128) if chr(c).isspace()] == [9, 10, 11, 12, 13, 28, 29, 30, 31, 32]


# Every separator, characters that share a separator's lead bytes (\u2019, \u201c, \u2030, \u1681,
# \u3001, \u00e9, \u0080), zero-width non-separators, astral characters and lone surrogates.
WORD_ALPHABET = (UNICODE_SPACES + "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ab\u00e9\u20ac\U0001d11e\u2019\u201c\u2030\u200b"
                 "\u2060\u1681\u3001\u0080\u00c2\ud800\udfff")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet=WORD_ALPHABET, max_size=20), min_size=1, max_size=6))
def test_the_batch_word_counts_equal_str_split(texts):
    assert count_words_batch(texts) == [count_words(t) for t in texts] == [len(t.split()) for t in texts]


def specified_measures(texts, id_lists):
    """What measure_batch must give: record_stats and digit_runs of each text, as columns."""
    return ([list(col) for col in zip(*(record_stats(t, ids) for t, ids in zip(texts, id_lists)))] or [[]] * 4,
            [list(digit_runs(t)) for t in texts])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet=WORD_ALPHABET + "0123456789٣", max_size=20), min_size=1, max_size=6))
def test_the_measures_of_a_batch_equal_the_per_record_specification(texts):
    # Separators (wide ones beside their lead-byte look-alikes), digits at the ends of texts, lone
    # surrogates: the compiled one-pass measures (where built) equal record_stats and digit_runs.
    id_lists = [[0] * (len(t) % 3) for t in texts]
    stats, runs = measure_batch(texts, id_lists)
    assert ([list(col) for col in stats], runs.tolist()) == specified_measures(texts, id_lists)


# Runs of ASCII letters and of each ASCII separator, long enough to fill the compiled measure's
# eight- and 64-byte blocks at every offset, with a digit run (some longer than a block) or a
# non-ASCII character now and then: wide separators of two and three bytes (a block matches each
# lead byte it holds, and leaves one whose separator runs past its end) and characters that share
# their lead byte (a curly quote, U+2019, starts as U+2003 does).
ASCII_RUNS = st.lists(st.sampled_from(["a", "bc", "word", "Letters", " ", "  ", "\t", "\n", "\x0b", "\x0c", "\r",
                                       "\x1c", "\x1f", "\x1d\x1e", "7", "123456", "1" * 70, "\u00e9", "\u3000",
                                       "\u00a0x", "\u2003", "\u2019", "\u2028", "\u1680", "\u0085", "\u00c2",
                                       ".,;", "\x7f", "\x00"]), max_size=60).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.lists(ASCII_RUNS, min_size=1, max_size=4))
def test_the_measures_of_long_mostly_ascii_texts_equal_the_specification(texts):
    # Eight ASCII bytes at a time where they hold no digit: every word start inside a block, at its
    # first byte after the block before, and around the digits and wide characters measured byte by byte.
    id_lists = [[0] * (len(t) % 5) for t in texts]
    stats, runs = measure_batch(texts, id_lists)
    assert ([list(col) for col in stats], runs.tolist()) == specified_measures(texts, id_lists)


def test_a_separator_table_of_other_ascii_separators_is_read_byte_by_byte():
    # The eight-byte blocks know Python's ASCII white space only; a table saying otherwise (here: a
    # tab is part of a word, a comma a separator) is measured by the table, whatever the text's length.
    from bpe_ops.stats import _SPACE_CLASSES, _WIDE_SPACES, _measure_texts
    compiled = _measure_texts()
    if compiled is None:
        pytest.skip("bpe_ops._native is not built")
    table = bytearray(_SPACE_CLASSES)
    table[ord("\t")], table[ord(",")] = 0, 1
    texts = ["alpha\tbeta gamma,delta  epsilon\tzeta eta,theta iota kappa lambda mu", "x" * 40 + "," + "y" * 9]
    _, words, _ = compiled(texts, bytes(table), _WIDE_SPACES)
    assert words == [len(t.replace(",", " ").split(" ")) - t.count("  ") for t in texts] == [10, 2]
    # A wide separator is matched with the bytes past the text's end read as zero: none may hold one.
    with pytest.raises(ValueError, match="none zero"):
        compiled(texts, _SPACE_CLASSES, (b"\xe2\x00",))


@pytest.mark.parametrize("separators", [b"\x81", bytes(range(0x80, 0x90))])
def test_separators_beyond_ascii_in_a_table_are_measured_where_64_bytes_are_read_at_once(separators):
    # A table may make bytes beyond ASCII separators of one byte: a block of 64 bytes holding one
    # matches it where it is (a few such bytes), or is read byte by byte (more than 8 of them).
    from bpe_ops.stats import _SPACE_CLASSES, _measure_texts
    compiled = _measure_texts()
    if compiled is None:
        pytest.skip("bpe_ops._native is not built")
    table = bytearray(_SPACE_CLASSES)
    for b in range(0x80, 0x100):
        table[b] = 1 if b in separators else 0
    rng = random.Random(5)
    texts = ["".join(rng.choice(["a", "word ", "\u0101", "\u0111", "  ", "9", "\u00e9"]) for _ in range(rng.randrange(200)))
             for _ in range(200)]
    _, words, _ = compiled(texts, bytes(table), ())

    def byte_words(text: str) -> int:
        data = text.encode("utf-8")
        return sum(table[b] != 1 and (k == 0 or table[data[k - 1]] == 1) for k, b in enumerate(data))

    assert words == [byte_words(t) for t in texts]


def test_the_measures_of_real_records(corpora):
    from bpe_ops.stats import _measure_texts
    if os.environ.get("TOKENBEAM_REQUIRE_PCRE2") == "1":
        assert _measure_texts() is not None          # the compiled path is the one measured here
    texts = read_jsonl_texts(corpora / "multi", limit=300) + read_jsonl_texts(corpora / "code", limit=300)
    id_lists = [[1] * (len(t) // 4) for t in texts]
    for start in range(0, len(texts), 16):
        chunk, ids = texts[start:start + 16], id_lists[start:start + 16]
        stats, runs = measure_batch(chunk, ids)
        assert ([list(col) for col in stats], runs.tolist()) == specified_measures(chunk, ids)
    assert measure_batch([], [])[1].shape == (0, 5)


def test_the_compiled_record_groups_equal_record_group():
    from bpe_ops.stats import _RECORD_GROUPS, record_group, record_groups
    rng = random.Random(11)
    ids = ["", "man/man1/ls.1", "a\ud800b", "\udfff", "\U0001f600" * 30, "x" * 1000]
    ids += ["".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(rng.randrange(0, 40))) for _ in range(500)]
    for groups in (1, 7, 32, 1 << 30):
        assert record_groups(ids, groups).tolist() == [record_group(i, groups) for i in ids]
    assert record_groups([]).tolist() == []
    if _RECORD_GROUPS is None:
        pytest.skip("bpe_ops._native is not built")
    with pytest.raises(TypeError, match="expected str"):
        _RECORD_GROUPS(["a", 3], 32)
    with pytest.raises(ValueError, match="positive"):
        _RECORD_GROUPS(["a"], 0)


def test_the_id_class_table_equals_id_classes():
    for vocab_size in (300, 4096, 4097, 131_072, 200_019):
        ids = np.arange(vocab_size)
        assert id_class_table(vocab_size)[ids].tolist() == id_classes(ids, vocab_size).tolist()
        # The fold the compiled calibration computes its classes from gives the same classes.
        assert folded_classes(ids, ID_CLASS_FOLD, vocab_size).tolist() == id_classes(ids, vocab_size).tolist()


def test_folded_classes_need_a_power_of_two():
    from bpe_ops.stats import _calibrate_ids
    with pytest.raises(ValueError, match="power of two"):
        folded_classes(np.arange(10), 3, 10)
    compiled = _calibrate_ids()
    if compiled is None:
        pytest.skip("bpe_ops._native is not built")
    from array import array
    for fold in (0, 3, -4):
        with pytest.raises(ValueError, match="power of two"):
            compiled([array("I", [1])], np.zeros(1, np.int32), np.zeros(10, np.uint8), fold,
                     np.zeros(1, np.int64), np.zeros(10, np.int64))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5000), max_size=40), max_size=8), st.sampled_from([300, 4096, 5001]),
       st.integers(1, 3))
def test_the_compiled_calibration_counts_equal_the_numpy_specification(id_lists, vocab_size, chunk):
    # Records of no id, ids past the vocabulary (ValueError from both), folded id classes, runs
    # cut inside a record: the one compiled pass counts the cells and raw-byte tokens as the runs do.
    from array import array
    from bpe_ops.stats import _calibrate_ids, _id_runs, calibrate_ids
    compiled = _calibrate_ids()
    if compiled is None:
        pytest.skip("bpe_ops._native is not built")
    classes = id_class_count(vocab_size)
    rows = np.array([record_group(f"r{k}") * classes for k in range(len(id_lists))], dtype=np.int32)
    mask = np.zeros(vocab_size, dtype=bool)
    mask[: min(256, vocab_size)] = True
    results = []
    # The class table, and the same classes computed from their fold (what batch_calibration hands
    # the compiled pass): each counted by both, with and without the id counts.
    for table in (id_class_table(vocab_size), ID_CLASS_FOLD):
        for count, ids, with_counts in (
                (compiled, [array("I", x) for x in id_lists], False),
                (calibrate_ids, _id_runs(id_lists, [len(x) for x in id_lists], chunk=chunk), False),
                (compiled, [array("I", x) for x in id_lists], True),
                (calibrate_ids, _id_runs(id_lists, [len(x) for x in id_lists], chunk=chunk), True)):
            raw, cells = np.zeros(len(id_lists), np.int64), np.zeros(REPLICATE_GROUPS * classes, np.int64)
            cells[::7] = 1          # cells already counted are not counted from zero again
            counts = np.arange(vocab_size, dtype=np.int64)      # ids are counted on top of what is there
            try:
                new = count(ids, rows, mask.view(np.uint8), table, raw, cells, *([counts] if with_counts else []))
            except ValueError as exc:
                results.append(str(exc))
            else:
                results.append((raw.tolist(), cells.tolist(), sorted(np.frombuffer(new, np.int64).tolist()),
                                counts.tolist() if with_counts else None))
    assert results[4:] == results[:4]
    assert results[0] == results[1]
    assert results[2] == results[3]
    if not isinstance(results[0], str):
        assert results[2][:3] == results[0][:3]
        expected = np.arange(vocab_size, dtype=np.int64)
        np.add.at(expected, np.array([i for x in id_lists for i in x], dtype=np.int64), 1)
        assert results[2][3] == expected.tolist()
    assert isinstance(results[0], str) == any(i >= vocab_size for x in id_lists for i in x)


def test_a_calibration_made_beforehand_equals_one_made_in_add_batch(tiny_records, gpt2):
    texts, id_lists = [t for t, _ in tiny_records], [ids for _, ids in tiny_records]
    plain = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    ahead = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    for start in range(0, len(texts), 7):
        chunk, ids = texts[start:start + 7], id_lists[start:start + 7]
        stats, rids = batch_stats(chunk, ids), [f"r{start + k}" for k in range(len(chunk))]
        runs = [digit_runs(t) for t in chunk]
        plain.add_batch(*stats, record_ids=rids, id_arrays=ids, digit_runs=runs)
        calibration = ahead.batch_calibration(stats[0], rids, ids)
        ahead.add_batch(*stats, record_ids=rids, id_arrays=ids, digit_runs=runs, calibration=calibration)
    assert pickle.dumps(ahead) == pickle.dumps(plain)
    wrong = ahead.batch_calibration([1, 1, 1], ["a", "b", "c"], [[1], [2], [3]])
    with pytest.raises(ValueError, match="a calibration of 3 records"):
        ahead.add_batch([1], [1], [1], [1], record_ids=["a"], id_arrays=[[1]], calibration=wrong)


def test_batches_calibrated_into_tallies_equal_batches_calibrated_alone(tiny_records, gpt2):
    # Tallies (a thread's id counts and group x class cells, added once) against each batch's own
    # calibration and the ids counted apart: the same summary, whichever batches the tallies saw.
    from array import array
    from bpe_ops.stats import Tallies
    texts, id_lists = [t for t, _ in tiny_records], [array("I", ids) for _, ids in tiny_records]
    plain = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    tallied = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    threads = [tallied.tallies(), tallied.tallies()]
    for k, start in enumerate(range(0, len(texts), 7)):
        chunk, ids = texts[start:start + 7], id_lists[start:start + 7]
        stats, rids = batch_stats(chunk, ids), [f"r{start + k}" for k in range(len(chunk))]
        runs = [digit_runs(t) for t in chunk]
        plain.add_batch(*stats, record_ids=rids, id_arrays=ids, digit_runs=runs)
        plain.add_id_counts(Counter(i for x in ids for i in x))
        calibration = tallied.batch_calibration(stats[0], rids, ids, tallies=threads[k % 2])
        tallied.add_batch(*stats, record_ids=rids, id_arrays=ids, digit_runs=runs, calibration=calibration)
    for tallies in threads:
        tallied.add_tallies(tallies)
        assert not tallies.used and not tallies.id_counts.any() and not tallies.cells.any()
    assert pickle.dumps(tallied) == pickle.dumps(plain)
    with pytest.raises(ValueError, match="tallies of a 300-id vocabulary"):
        tallied.add_tallies(Tallies(300, 10))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tallied.batch_calibration([1], ["a"], [array("I", [gpt2.vocab_size])], tallies=threads[0])
    assert not threads[0].id_counts.any()       # nothing counted from a batch that raised


def test_digit_runs_are_kept_per_group_and_merge_exactly(tiny_records, gpt2):
    whole = summary_of(tiny_records, gpt2)
    halves = summary_of(tiny_records[:20], gpt2).merge(summary_of(tiny_records[20:], gpt2, first=20))
    assert dump_stats(stats_json(halves, gpt2)) == dump_stats(stats_json(whole, gpt2))
    runs = stats_json(whole, gpt2)["digit_runs"]
    expected = [sum(col) for col in zip(*(digit_runs(t) for t, _ in tiny_records))]
    assert runs["counts"] == expected and runs["records"] == len(tiny_records) and sum(expected) > 0
    # Without texts the counts are absent for those records, and drift is told so.
    plain = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    text, ids = tiny_records[0]
    plain.add(ids, *record_stats(text, ids)[1:], record_id="r0")
    assert stats_json(plain, gpt2)["digit_runs"]["records"] == 0
    with pytest.raises(ValueError, match="calibrated records"):
        plain.add(ids, *record_stats(text, ids)[1:], digit_runs=(1, 0, 0, 0, 0))


def test_add_batch_with_record_ids_equals_add_per_record(tiny_records, gpt2):
    texts, id_lists = [t for t, _ in tiny_records], [ids for _, ids in tiny_records]
    batched = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
    from array import array
    for start in range(0, len(texts), 7):
        chunk, ids = texts[start:start + 7], id_lists[start:start + 7]
        batched.add_batch(*batch_stats(chunk, ids), record_ids=[f"r{start + k}" for k in range(len(chunk))],
                          id_arrays=[array("I", x) for x in ids], digit_runs=[digit_runs(t) for t in chunk])
        batched.add_id_counts(Counter(i for x in ids for i in x))
    assert dump_stats(stats_json(batched, gpt2)) == dump_stats(stats_json(summary_of(tiny_records, gpt2), gpt2))


def test_calibration_needs_ids_and_raw_byte_ids():
    s = Summary(TOY.vocab_size)
    with pytest.raises(ValueError, match="raw_byte_ids"):
        s.add([104, 105], 2, 2, 1, record_id="a")
    s = Summary(TOY.vocab_size, raw_byte_ids=range(256))
    with pytest.raises(ValueError, match="both or neither"):
        s.add_batch([1], [1], [1], [1], record_ids=["a"])
    with pytest.raises(ValueError, match="its n_tokens says 2"):
        s.add_batch([2], [1], [1], [1], record_ids=["a"], id_arrays=[[5]])
    with pytest.raises(ValueError, match="raw-byte ids"):
        s.merge(Summary(TOY.vocab_size, raw_byte_ids=range(255)))
    with pytest.raises(ValueError, match="single-byte"):
        stats_json(Summary(TOY.vocab_size, raw_byte_ids=range(10)), TOY)


def test_group_hash_is_stable_and_classes_fold():
    assert record_group("man/man1/ls.1") == zlib.crc32(b"man/man1/ls.1") % 32 == 17
    assert record_group("x\ud800") == zlib.crc32("x\ud800".encode("utf-8", "surrogatepass")) % 32
    assert id_classes(np.arange(4096), 4096).tolist() == list(range(4096))
    assert id_classes(np.array([2047, 2048, 4095, 4096, 200_000]), 200_001).tolist() == [
        2047, 2048, 4095, 2048, 2048 + (200_000 - 2048) % 2048]
    assert id_class_count(50_257) == 4096 and id_class_count(259) == 259


def test_length_key_keeps_every_histogram_bin():
    values = list(range(5000)) + [int(1.37 ** k) for k in range(20, 60)]
    for n in values:
        assert bin_counts({length_key(n): 1}, TOKENS_PER_RECORD_EDGES) == bin_counts({n: 1}, TOKENS_PER_RECORD_EDGES)


def test_calibrated_summary_pickles_small_and_exact(tiny_records, gpt2):
    s = summary_of(tiny_records[:10], gpt2)
    back = pickle.loads(pickle.dumps(s))
    assert (back.group_classes == s.group_classes).all() and back.moment_products == s.moment_products
    assert len(pickle.dumps(s)) < 60_000      # groups x classes is 131k cells; a small shard fills few


def test_the_docstring_examples_hold():
    import doctest

    import bpe_ops.stats
    failed, attempted = doctest.testmod(bpe_ops.stats)
    assert attempted > 10 and failed == 0


@pytest.mark.parametrize("seed", range(6))
def test_the_group_tables_in_columns_equal_the_per_record_specification(seed):
    """`Summary._add_group_columns` (numpy passes over a batch) adds exactly what
    `_add_group_records` (record by record, Python ints) adds, and leaves batches whose sums might
    not fit int64 to it."""
    rng = random.Random(seed)
    n = rng.choice([64, 300, 5000])
    top = rng.choice([3, 1000, 1 << 20])
    columns = tuple([rng.randrange(0, top) for _ in range(n)] for _ in range(5))
    if seed % 2:                         # records without tokens (no quarter), groups missing
        columns[0][:n // 3] = [0] * (n // 3)
    groups = [rng.randrange(0, 7 if seed % 3 else REPLICATE_GROUPS) for _ in range(n)]
    by_columns, by_records = Summary(64), Summary(64)
    assert by_columns._add_group_columns(groups, columns)
    by_records._add_group_records(groups, columns)
    for name in ("moment_products", "group_records", "group_tokens", "group_lengths", "group_quarters"):
        assert getattr(by_columns, name) == getattr(by_records, name), name
    assert all(type(v) is int for v in by_columns.moment_products + by_columns.group_tokens)
    huge = tuple([1 << 31] * 100 for _ in range(5))
    assert not Summary(64)._add_group_columns([0] * 100, huge)
    assert not Summary(64)._add_group_columns([0] * 10, tuple([1] * 10 for _ in range(5)))
