"""`tokenbeam drift` on stats built from real corpora with the real GPT-2 tokenizer.

Stats are built here by encoding documents and feeding `Summary`. Encoding ~35 MB with a pure-Python
encoder would take most of a minute, so documents are encoded by tiktoken built from the same GPT-2
files (the oracle construction in ../shared/oracles/README.md); the fixture checks, on the first
document of every shard, that our `Tokenizer.from_gpt2_files` gives the same ids.

English halves are three whole shards each: measured on this corpus, one or two shards per side
still differ by 3-8% in bytes per token and tokens per word (a few documents of indented man pages
tokenize into long runs of single-space tokens), which the default thresholds rightly call drift.
"""
import json
import math
import re
import struct

import pytest
import tiktoken

from bpe_ops import Tokenizer
from bpe_ops.pretokenize import GPT2_PATTERN
from bpe_ops.stats import Summary, single_byte_ids
from bpe_ops import drift_stats
from bpe_ops.drift_stats import holm, js_divergence, psi, ratio_estimate
from pipelines import drift
from pipelines.monitoring import drift_judging, drift_reports
from pipelines.monitoring.drift_judging import compare
from schemas import drift as layout
from schemas.stats import STATS_SCHEMA_VERSION, dump_stats, stats_json

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt2(gpt2_files):
    return Tokenizer.from_gpt2_files(*gpt2_files)


@pytest.fixture(scope="module")
def build(gpt2):
    specials = set(gpt2.special_tokens.values())
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN,
                            mergeable_ranks={b: i for i, b in gpt2.vocab.items() if i not in specials},
                            special_tokens=gpt2.special_tokens)

    def build_stats(shards, calibrated=True) -> dict:
        summary = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
        for shard in shards:
            with open(shard, encoding="utf-8") as f:
                docs = [json.loads(line) for line in f]
            texts = [d["text"] for d in docs]
            all_ids = enc.encode_ordinary_batch(texts, num_threads=1)
            assert gpt2.encode(texts[0]) == all_ids[0], f"our GPT-2 encoder differs on {shard.name}"
            for doc, ids in zip(docs, all_ids):
                summary.add_text(doc["text"], ids, record_id=doc["id"] if calibrated else None)
            summary.add_shard(shard.name)
        return stats_json(summary, gpt2, {"inputs": [str(s) for s in shards]})
    return build_stats


@pytest.fixture(scope="module")
def stats_files(tmp_path_factory, corpora, build):
    """stats.json of English shards 0,2,4 (baseline) and 1,3,5, of multi/ and of code/ (2 shards each)."""
    out = tmp_path_factory.mktemp("stats")
    en = sorted((corpora / "en").glob("*.jsonl"))
    parts = {"en_a": en[0:6:2], "en_b": en[1:6:2],
             "multi": sorted((corpora / "multi").glob("*.jsonl"))[:2],
             "code": sorted((corpora / "code").glob("*.jsonl"))[:2]}
    paths = {}
    for name, shards in parts.items():
        paths[name] = out / name / "stats.json"
        paths[name].parent.mkdir()
        paths[name].write_text(dump_stats(build(shards)))
    paths["uncalibrated"] = out / "uncalibrated.json"
    paths["uncalibrated"].write_text(dump_stats(build(en[1:2], calibrated=False)))
    return paths


def load(path):
    return json.loads(path.read_text())


def table_verdicts(out: str) -> dict[str, str]:
    """{metric label: verdict} from the terminal table (columns are separated by 2+ spaces)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
    return {r[0]: r[-1] for r in rows if len(r) == len(drift_reports.HEADER)}


def run(capsys, *argv):
    code = drift.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---- the math --------------------------------------------------------------------------------

def test_psi_textbook_value_and_smoothing():
    # Unsmoothed PSI of 50/50 vs 80/20: 0.3 ln 1.6 + 0.3 ln 2.5.
    assert psi([50, 50], [80, 20], smoothing=0) == pytest.approx(0.3 * math.log(1.6) + 0.3 * math.log(2.5))
    assert psi([80, 20], [50, 50], smoothing=0) == pytest.approx(psi([50, 50], [80, 20], smoothing=0))
    assert psi([7, 0, 3], [7, 0, 3]) == 0.0
    # An empty bin on one side stays finite; bins empty on both sides change nothing.
    value = psi([10, 0], [5, 5])
    assert 0 < value < math.inf
    assert psi([0, 10, 0, 0], [0, 5, 5, 0]) == value
    assert psi([1000, 0], [1000, 1]) < 0.01          # smoothing fades with the counts


def test_js_divergence_bounds_and_known_value():
    assert js_divergence([3, 0, 5], [3, 0, 5]) == 0.0
    assert js_divergence([4, 0], [0, 9]) == 1.0
    # P = (1, 0), Q = (1/2, 1/2), M = (3/4, 1/4).
    kl_pm = math.log2(4 / 3)
    kl_qm = 0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)
    assert js_divergence([2, 0], [1, 1]) == pytest.approx((kl_pm + kl_qm) / 2)
    assert js_divergence([2, 0], [1, 1]) == pytest.approx(js_divergence([1, 1], [2, 0]))


def test_verdict_rule():
    assert [layout.verdict_for(b, c, 0.1) for b, c in ((False, 0.5), (True, 0.05), (True, -0.2), (True, 0.1))] == [
        "ok", "moderate", "significant", "moderate"]
    assert layout.verdict_for(True, None, 0.1) == "n/a"


def test_holm_step_down():
    assert holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]      # 0.001<.0167, 0.02<.025, 0.04<.05
    assert holm([0.001, 0.03, 0.04], 0.05) == [True, False, False]    # 0.03 > 0.025 stops
    assert holm([0.2], 0.05) == [False]


def test_ratio_variance_is_the_delta_method():
    # Records (tokens, bytes): (2, 10), (4, 12), (10, 20): R = 42/16; the textbook formula by hand.
    rows = [(2, 10), (4, 12), (10, 20)]
    products = [[sum(a[i] * a[j] for a in rows) for j in range(2)] for i in range(2)]
    m = {"variables": ["tokens", "bytes"], "records": 3, "sums": [16, 42], "products": products}
    r = 42 / 16
    expected = sum((y - r * x) ** 2 for x, y in rows) / (3 * 2 * (16 / 3) ** 2)
    est = ratio_estimate(m, "bytes", "tokens")
    assert est.value == pytest.approx(r) and est.variance == pytest.approx(expected)
    assert est.df == pytest.approx(16 ** 2 / 120 - 1)       # Kish: (sum x)^2 / sum x^2 - 1


# ---- real corpora ----------------------------------------------------------------------------

def test_baseline_against_itself_changes_nothing(stats_files, capsys, tmp_path):
    code, out, err = run(capsys, stats_files["en_a"], stats_files["en_a"], "--report", tmp_path)
    assert code == 0, out + err
    report = json.loads((tmp_path / "drift.json").read_text())
    for m in report["metrics"]:
        if m["change_kind"] == "info":
            continue
        # Divergences too: swapping a group for its identical twin changes nothing, so the no-drift
        # draws are all 0 as well.
        assert m["verdict"] == "ok" and m["change"] == 0 and m["p_value"] == 1, m
    assert report["top_shifted_tokens"] == []
    assert (tmp_path / "drift.png").exists()
    assert out.strip().splitlines()[-1].startswith("no drift")


def test_two_halves_of_english_do_not_drift(stats_files, capsys):
    code, out, err = run(capsys, stats_files["en_a"], stats_files["en_b"])
    assert code == 0, out + err
    report = compare(load(stats_files["en_a"]), load(stats_files["en_b"]))
    assert not report.drift
    assert abs(report.metric("bytes_per_token").change) < 0.05
    assert report.metric("js_token_ids").current < 0.04
    assert report.metric("psi_tokens_per_record").current < 0.1
    for m in report.judged:       # every judged row carries its interval and detectable change
        assert m.interval[0] <= m.change <= m.interval[1] and m.detectable > 0 and 0 < m.p_value <= 1


@pytest.mark.parametrize("other", ["multi", "code"])
def test_english_against_other_text_drifts_in_the_expected_direction(stats_files, capsys, other):
    code, out, err = run(capsys, stats_files["en_a"], stats_files[other])
    assert code == 1, out + err
    report = compare(load(stats_files["en_a"]), load(stats_files[other]))
    flagged = {m.name for m in report.flagged}
    assert {"bytes_per_token", "tokens_per_word", "js_token_ids"} <= flagged
    # GPT-2 was trained on English web text: other scripts and code cost more tokens per word and
    # carry fewer bytes per token.
    fertility = report.metric("tokens_per_word").change
    compression = report.metric("bytes_per_token").change
    js = report.metric("js_token_ids").current
    assert report.metric("js_token_ids").change > report.metric("js_token_ids").detectable
    if other == "multi":
        assert 0.4 < fertility < 1.5 and -0.45 < compression < -0.15 and 0.3 < js < 0.7
    else:
        assert 0.6 < fertility < 1.8 and -0.4 < compression < -0.1 and 0.1 < js < 0.4
    table = table_verdicts(out)
    for label in ("bytes per token", "tokens per word", "JS divergence of token ids"):
        assert table[label] == "significant", out
    assert out.strip().splitlines()[-1].startswith("DRIFT (significant) - tokenization drifted: ")
    assert "tokenization" in {s for s in ("tokenization", "data") if report.section_flagged(s)}


def test_headline_names_exactly_the_flagged_metrics(stats_files):
    report = compare(load(stats_files["en_a"]), load(stats_files["code"]))
    line = drift_judging.headline(report)
    named = set()
    for part in line.split(" - ", 1)[1].split("; "):
        if "drifted: " in part:
            named |= set(part.split("drifted: ", 1)[1].split(", "))
    assert named == {m.label for m in report.flagged}
    assert report.to_json()["headline"] == line


def test_top_shifted_tokens_are_decoded(stats_files):
    report = compare(load(stats_files["en_a"]), load(stats_files["multi"]))
    shifted = {t["token"]: t["change"] for t in report.top_shifted_tokens}
    assert shifted["' the'"] < 0                       # less English
    # Cyrillic letters appear: 'а' (U+0430) is one GPT-2 token, absent from English.
    assert shifted.get(repr("а"), 0) > 0
    assert any(label.startswith("b'") for label in shifted)   # partial UTF-8 bytes, shown as bytes


def test_thresholds_and_fail_on_flags(stats_files, capsys):
    # A huge practical threshold: JS is beyond noise but not past it -> moderate, not drift by itself.
    code, out, _ = run(capsys, stats_files["en_a"], stats_files["code"], "--max-js", "1")
    assert table_verdicts(out)["JS divergence of token ids"] == "moderate"
    loose = ["--max-bytes-per-token-change", "9", "--max-tokens-per-word-change", "9", "--max-psi", "9",
             "--max-js", "1", "--max-raw-byte-share-change", "1", "--max-tokens-per-record-change", "99",
             "--max-rejected-rate-change", "1"]
    code, out, _ = run(capsys, stats_files["en_a"], stats_files["code"], *loose)
    assert code == 0 and "beyond noise but within thresholds" in out.strip().splitlines()[-1]
    code, _, _ = run(capsys, stats_files["en_a"], stats_files["code"], *loose, "--fail-on", "moderate")
    assert code == 1
    # A level so strict that nothing is beyond noise.
    code, out, _ = run(capsys, stats_files["en_a"], stats_files["multi"], "--level", "1e-9")
    assert code == 1        # multilingual text is beyond noise even so (p-values of ratios underflow)
    code, _, err = run(capsys, stats_files["en_a"], stats_files["en_b"], "--level", "1.5")
    assert code == 2 and "--level: must be between 0 and 1" in err and err.count("\n") == 1


def test_report_writes_json_markdown_and_png(stats_files, capsys, tmp_path):
    code, _, _ = run(capsys, stats_files["en_a"], stats_files["code"], "--report", tmp_path / "r")
    assert code == 1
    report = json.loads((tmp_path / "r" / "drift.json").read_text())
    layout.validate_drift(report)
    assert report["drift"] is True and report["verdict"] == "significant"
    assert report["baseline"]["path"] == str(stats_files["en_a"])
    names = [m["name"] for m in report["metrics"]]
    assert {"bytes_per_token", "tokens_per_word", "psi_tokens_per_record", "psi_bytes_per_token",
            "js_token_ids", "raw_byte_share", "rejected_rate"} <= set(names)
    sections = {m["name"]: m["section"] for m in report["metrics"]}
    assert {n for n, s in sections.items() if s == "tokenization"} == {
        "bytes_per_token", "tokens_per_word", "raw_byte_share", "js_token_ids", "psi_bytes_per_token"}
    assert {n for n, s in sections.items() if s == "data"} == {
        "tokens_per_record_mean", "tokens_per_record_p90", "psi_tokens_per_record", "psi_digit_runs",
        "rejected_rate"}
    assert report["sections"]["tokenization"]["drift"] is True
    hist = report["histograms"]["tokens_per_record"]
    assert sum(hist["baseline"]) == load(stats_files["en_a"])["records"]
    md = (tmp_path / "r" / "drift.md").read_text()
    assert "| bytes per token |" in md and "significant" in md and "![drift](drift.png)" in md
    assert "## Tokenization" in md and "## Data" in md and "| interval | detectable | threshold |" in md
    png = (tmp_path / "r" / "drift.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 1000 and height >= 400


# ---- errors: exit 2 with one line --------------------------------------------------------------

def _variants(good_text: str, good: dict):
    wrong_version = dict(good, schema_version=STATS_SCHEMA_VERSION + 1)
    version_1 = dict(good, schema_version=1)
    other_tokenizer = dict(good, tokenizer_sha256="f" * 64)
    return {
        "corrupt.json": ("{this is not json", "not valid JSON"),
        "truncated.json": (good_text[: len(good_text) // 2], "not valid JSON"),
        "version.json": (dump_stats(wrong_version), "schema_version"),
        "version1.json": (dump_stats(version_1), "tokenbeam stats 'DIR/*.parquet' --tokenizer"),
        "other_tokenizer.json": (dump_stats(other_tokenizer), "different tokenizers"),
        "empty.json": ("", "not valid JSON"),
    }


def test_bad_inputs_exit_2_with_one_line(stats_files, capsys, tmp_path):
    good_text = stats_files["en_b"].read_text()
    for name, (text, message) in _variants(good_text, json.loads(good_text)).items():
        path = tmp_path / name
        path.write_text(text)
        code, out, err = run(capsys, stats_files["en_a"], path)
        assert code == 2, name
        assert err.count("\n") == 1 and err.startswith("tokenbeam: error:"), err
        assert message in err and "Traceback" not in err, err
    code, _, err = run(capsys, stats_files["en_a"], stats_files["uncalibrated"])
    assert code == 2 and err.count("\n") == 1 and "calibrates 0 of its" in err and "uncalibrated.json" in err, err
    code, _, err = run(capsys, tmp_path / "missing.json", stats_files["en_a"])
    assert code == 2 and err.count("\n") == 1 and "missing.json" in err


def test_different_tokenizers_can_be_allowed(stats_files, capsys, tmp_path):
    other = json.loads(stats_files["en_b"].read_text())
    other["tokenizer_sha256"] = "f" * 64
    path = tmp_path / "other.json"
    path.write_text(dump_stats(other))
    code, out, _ = run(capsys, stats_files["en_a"], path, "--allow-different-tokenizers")
    assert code == 0
    assert table_verdicts(out)["JS divergence of token ids"] == "n/a"
    assert "not comparable" in out


def test_a_folder_argument_reads_its_stats_json_and_a_folder_without_one_is_one_line(stats_files, capsys, tmp_path):
    code, out, _ = run(capsys, stats_files["en_a"].parent, stats_files["code"].parent)
    assert code == 1 and "tokenization drifted" in out
    code, _, err = run(capsys, tmp_path, stats_files["en_a"])
    assert code == 2 and err.count("\n") == 1 and "is a folder without a stats.json" in err and "Errno" not in err


def test_drift_over_time_judges_every_window_in_order(stats_files, capsys, tmp_path):
    """A baseline against several files (as `OUTPUT/windows/*.stats.json`): one line per window in
    time order, the drifted one named, exit 1, and a report with the time panel."""
    windows = tmp_path / "windows"
    windows.mkdir()
    for start, name in (("2026-12-01T12:00:00Z", "code"), ("2026-12-01T10:00:00Z", "en_b"),
                        ("2026-12-01T11:00:00Z", "en_b")):
        stats = load(stats_files[name])
        stats["window"] = {"start": start, "end": start, "seconds": 3600}
        (windows / f"{start}.stats.json").write_text(json.dumps(stats))
    code, out, _ = run(capsys, stats_files["en_a"], windows / "*.stats.json", "--report", tmp_path / "report")
    lines = out.splitlines()
    assert code == 1
    assert [line.split()[0] for line in lines[:3]] == ["2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z",
                                                      "2026-12-01T12:00:00Z"]
    assert [line.split()[1] for line in lines[:3]] == ["ok", "ok", "DRIFT"]
    assert lines[-1] == "1 of 3 judged against the baseline drifted"
    report = load(tmp_path / "report" / "drift.json")
    assert [w["drift"] for w in report["windows"]] == [False, False, True]
    if (tmp_path / "report" / "drift.png").exists():
        assert (tmp_path / "report" / "drift.png").stat().st_size > 10_000
    code, _, err = run(capsys, stats_files["en_a"], tmp_path / "nothing" / "*.stats.json")
    assert code == 2 and "matched no files" in err


def _moments(rows):
    """stats.json-style moments of (tokens, bytes) records."""
    return {"variables": ["tokens", "bytes"], "records": len(rows),
            "sums": [sum(r[0] for r in rows), sum(r[1] for r in rows)],
            "products": [[sum(r[i] * r[j] for r in rows) for j in range(2)] for i in range(2)]}


def test_the_no_drift_variance_pools_both_sides_records():
    """Var(R_a - R_b) under no drift = s^2 (1/n_a + 1/n_b), s^2 the spread of all records around
    the pooled ratio: computed here by hand from the records themselves."""
    a = [(10, 40), (12, 50), (1000, 3000), (9, 37), (11, 44), (10, 41)]
    b = [(10, 42), (8, 33), (12, 47)]
    pooled = a + b
    r = sum(y for _, y in pooled) / sum(x for x, _ in pooled)
    xbar = sum(x for x, _ in pooled) / len(pooled)
    s2 = sum((y - r * x) ** 2 for x, y in pooled) / ((len(pooled) - 1) * xbar ** 2)
    null = drift_stats.pooled_ratio_null(_moments(a), _moments(b), "bytes", "tokens")
    assert null.value == pytest.approx(r)
    assert null.variance == pytest.approx(s2 * (1 / len(a) + 1 / len(b)))
    # The mean per record (no denominator): the pooled sample variance of the lengths.
    lengths = [x for x, _ in pooled]
    mean = sum(lengths) / len(lengths)
    var = sum((t - mean) ** 2 for t in lengths) / (len(lengths) - 1)
    assert drift_stats.pooled_ratio_null(_moments(a), _moments(b), "tokens", None).variance == \
        pytest.approx(var * (1 / len(a) + 1 / len(b)))


def test_a_small_side_that_missed_the_long_tail_is_not_drift():
    """600 records with a few very long ones against 40 ordinary ones of the same distribution:
    the small side's own variance is tiny, so a test on it alone calls the mean length drifted;
    the pooled no-drift variance does not."""
    import random
    rng = random.Random(3)
    def record():
        t = 5000 if rng.random() < 0.02 else rng.randint(50, 150)
        return t, 4 * t
    big = [record() for _ in range(600)]
    small = [(t, 4 * t) for t in (rng.randint(50, 150) for _ in range(40))]    # no long one drawn
    base = drift_stats.ratio_estimate(_moments(big), "tokens", None)
    cur = drift_stats.ratio_estimate(_moments(small), "tokens", None)
    welch_only = drift_judging._ratio_test("m", "m", drift_judging.DATA, base, cur, 0.25)
    pooled = drift_judging._ratio_test("m", "m", drift_judging.DATA, base, cur, 0.25,
                               null=drift_stats.pooled_ratio_null(_moments(big), _moments(small), "tokens", None))
    assert welch_only.p_value < 0.01 < pooled.p_value


def test_a_change_of_number_format_is_flagged_and_an_old_file_says_it_cannot_be_judged(
        gpt2, corpora, tmp_path, capsys):
    """Thousands separators written into English (65536 -> 65,536) barely move any token figure, but
    the digit-run lengths move a lot: flagged in the data section. Two disjoint samples of the same
    text are not. A stats.json without the digit-run counts leaves that row 'not available' with
    the reason on the console."""
    import re
    with open(sorted((corpora / "en").glob("*.jsonl"))[6], encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:120]

    def stats_of(picked, transform=lambda t: t, suffix=""):
        summary = Summary(gpt2.vocab_size, raw_byte_ids=single_byte_ids(gpt2.vocab))
        for d in picked:
            text = transform(d["text"])
            summary.add_text(text, gpt2.encode(text), record_id=d["id"] + suffix)
        return stats_json(summary, gpt2)

    separated = stats_of(docs[60:], lambda t: re.sub(r"\d{4,}", lambda m: f"{int(m.group()):,}", t), "#s")
    report = compare(stats_of(docs[:60]), separated)
    metric = report.metric("psi_digit_runs")
    assert metric.section == "data" and metric.verdict == layout.SIGNIFICANT, metric
    assert compare(stats_of(docs[:60]), stats_of(docs[60:])).metric("psi_digit_runs").verdict == layout.OK

    old = stats_of(docs[:60])
    del old["digit_runs"], old["replicates"]["digit_run_counts"]
    (tmp_path / "old.json").write_text(dump_stats(old))
    (tmp_path / "new.json").write_text(dump_stats(separated))
    drift.main([str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    out = capsys.readouterr().out
    assert "PSI digit-run lengths (number formats): not judged: a stats.json without digit-run counts" in out
    assert compare(old, separated).metric("psi_digit_runs").verdict == layout.NOT_AVAILABLE
