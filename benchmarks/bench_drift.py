"""Benchmark `tokenbeam stats` (rebuild stats.json from token Parquet) and `tokenbeam drift` against
the DuckDB SQL a user would otherwise write over the same Parquet files.

    python benchmarks/bench_drift.py [--baseline-shards 4] [--current multi] [--repeat 3]

Setup (not timed): English shards (baseline) and shards of another corpus (current) are encoded with
the real GPT-2 tokenizer (tiktoken built from ../shared/oracles/gpt2, for speed) and written as token
Parquet with the documented columns, one file per shard.

Timed, best of --repeat, wall seconds:
- stats: our `stats_cmd` core (Summary fed batch by batch from pyarrow) vs one DuckDB query computing
  the same totals, nearest-rank quantiles and token-id frequencies (unnest + GROUP BY). The tokenizer
  load (same for both: needed for raw-byte share and labels) is reported apart.
- drift: `tokenbeam drift` on the two stats.json (load, validate, compare with the no-drift draws of
  PSI and JS, render) vs DuckDB computing
  bytes/token, tokens/word, PSI of the tokens-per-record histogram and the JS divergence of token ids
  straight from the two Parquet sets (what one does without stats.json).
The figures of both sides are checked equal before timings are printed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import tiktoken

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer  # noqa: E402
from bpe_ops.pretokenize import GPT2_PATTERN  # noqa: E402
from bpe_ops.stats import Summary, record_stats, single_byte_ids  # noqa: E402
from pipelines import drift, stats_cmd  # noqa: E402
from pipelines.monitoring import drift_judging
from pipelines.statistics.breakdowns import add_file  # noqa: E402
from pipelines.monitoring.drift_judging import load_stats  # noqa: E402
from schemas.stats import TOKENS_PER_RECORD_EDGES, dump_stats, stats_json  # noqa: E402

SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))


def write_parquet(tok: Tokenizer, enc, shard: Path, out: Path) -> None:
    with open(shard, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    ids = enc.encode_ordinary_batch(texts)
    stats = [record_stats(t, i) for t, i in zip(texts, ids)]
    pq.write_table(pa.table({
        "id": pa.array([f"{shard.name}:{k}" for k in range(len(texts))]),
        "token_ids": pa.array(ids, pa.list_(pa.uint16())),
        **{name: pa.array([s[k] for s in stats], pa.int32())
           for k, name in enumerate(["n_tokens", "n_bytes", "n_chars", "n_words"])},
    }), out / (shard.stem + ".parquet"), compression="zstd")


def best_of(repeat: int, fn):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def ours_stats(tok: Tokenizer, folder: Path) -> dict:
    summary = Summary(tok.vocab_size, raw_byte_ids=single_byte_ids(tok.vocab))
    for url in stats_cmd.expand_globs([str(folder / "*.parquet")]):
        add_file(summary, url, tok.sha256)
    return stats_json(summary, tok)


STATS_SQL = """
WITH recs AS (SELECT * FROM read_parquet('{glob}')),
     freq AS (SELECT id, count(*) AS n FROM (SELECT unnest(token_ids) AS id FROM recs) GROUP BY id)
SELECT (SELECT count(*) FROM recs), (SELECT sum(n_tokens) FROM recs), (SELECT sum(n_bytes) FROM recs),
       (SELECT sum(n_words) FROM recs), (SELECT min(n_tokens) FROM recs), (SELECT max(n_tokens) FROM recs),
       (SELECT quantile_disc(n_tokens, [0.5, 0.9, 0.99]) FROM recs),
       (SELECT list(n ORDER BY id) FROM freq), (SELECT list(id ORDER BY id) FROM freq)
"""


def duckdb_stats(con, folder: Path) -> tuple:
    return con.execute(STATS_SQL.format(glob=folder / "*.parquet")).fetchone()


DRIFT_SQL = """
WITH bins AS (SELECT unnest({edges}) AS lo, unnest({highs}) AS hi),
     ra AS (SELECT * FROM read_parquet('{a}')), rb AS (SELECT * FROM read_parquet('{b}')),
     ha AS (SELECT lo, count(*) AS n FROM ra JOIN bins ON n_tokens >= lo AND n_tokens < hi GROUP BY lo),
     hb AS (SELECT lo, count(*) AS n FROM rb JOIN bins ON n_tokens >= lo AND n_tokens < hi GROUP BY lo),
     h AS (SELECT coalesce(ha.n, 0) + 0.5 AS e, coalesce(hb.n, 0) + 0.5 AS c FROM ha FULL JOIN hb USING (lo)),
     hp AS (SELECT e / sum(e) OVER () AS p, c / sum(c) OVER () AS q FROM h),
     fa AS (SELECT id, count(*) AS n FROM (SELECT unnest(token_ids) AS id FROM ra) GROUP BY id),
     fb AS (SELECT id, count(*) AS n FROM (SELECT unnest(token_ids) AS id FROM rb) GROUP BY id),
     f AS (SELECT coalesce(fa.n, 0) / (SELECT sum(n) FROM fa) AS p,
                  coalesce(fb.n, 0) / (SELECT sum(n) FROM fb) AS q FROM fa FULL JOIN fb USING (id))
SELECT (SELECT sum(n_bytes) / sum(n_tokens) FROM ra), (SELECT sum(n_bytes) / sum(n_tokens) FROM rb),
       (SELECT sum(n_tokens) / sum(n_words) FROM ra), (SELECT sum(n_tokens) / sum(n_words) FROM rb),
       (SELECT sum((q - p) * ln(q / p)) FROM hp),
       (SELECT sum(CASE WHEN p > 0 THEN p * log2(2 * p / (p + q)) ELSE 0 END
                 + CASE WHEN q > 0 THEN q * log2(2 * q / (p + q)) ELSE 0 END) / 2 FROM f)
"""


def duckdb_drift(con, a: Path, b: Path) -> tuple:
    highs = TOKENS_PER_RECORD_EDGES[1:] + [2 ** 62]
    return con.execute(DRIFT_SQL.format(edges=TOKENS_PER_RECORD_EDGES, highs=highs,
                                    a=a / "*.parquet", b=b / "*.parquet")).fetchone()


def ours_drift(a: Path, b: Path):
    with contextlib.redirect_stdout(io.StringIO()):
        code = drift.main([str(a), str(b)])
    return code, drift_judging.compare(load_stats(a), load_stats(b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-shards", type=int, default=4, help="English shards (~4.4 MB each)")
    parser.add_argument("--current", default="multi", choices=["multi", "code", "en"])
    parser.add_argument("--current-shards", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    gpt2 = SHARED / "oracles" / "gpt2"
    start = time.perf_counter()
    tok = Tokenizer.from_gpt2_files(gpt2 / "gpt2_vocab.json", gpt2 / "gpt2_merges.txt")
    tok.sha256                       # part of loading: the sha256 every stats.json records
    load_seconds = time.perf_counter() - start
    specials = set(tok.special_tokens.values())
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN, special_tokens=tok.special_tokens,
                            mergeable_ranks={b: i for i, b in tok.vocab.items() if i not in specials})
    en = sorted((SHARED / "corpora" / "en").glob("*.jsonl"))
    baseline_shards = en[:args.baseline_shards]
    others = en[args.baseline_shards:] if args.current == "en" else sorted(
        (SHARED / "corpora" / args.current).glob("*.jsonl"))
    current_shards = others[:args.current_shards]

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folders = {"baseline": tmp / "baseline", "current": tmp / "current"}
        for name, shards in (("baseline", baseline_shards), ("current", current_shards)):
            folders[name].mkdir()
            for shard in shards:
                write_parquet(tok, enc, shard, folders[name])
        mb = sum(s.stat().st_size for s in baseline_shards + current_shards) / 1e6
        parquet_mb = sum(p.stat().st_size for f in folders.values() for p in f.glob("*.parquet")) / 1e6
        print(f"data: {len(baseline_shards)} en shards vs {len(current_shards)} {args.current} shards, "
              f"{mb:.1f} MB of JSONL -> {parquet_mb:.1f} MB of token Parquet; GPT-2 load + sha256 "
              f"{load_seconds:.2f}s (both sides need a tokenizer; not in the timings below)")

        con1 = duckdb.connect(config={"threads": 1})
        con2 = duckdb.connect(config={"threads": os.cpu_count() or 1})
        rows = []
        stats_paths = {}
        for name, folder in folders.items():
            t_ours, ours = best_of(args.repeat, lambda: ours_stats(tok, folder))
            t_duck1, duck = best_of(args.repeat, lambda: duckdb_stats(con1, folder))
            t_duck2, _ = best_of(args.repeat, lambda: duckdb_stats(con2, folder))
            records, tokens, n_bytes, words, lo, hi, quantiles, counts, ids = duck
            assert (ours["records"], ours["tokens"], ours["bytes"], ours["words"]) == (records, tokens, n_bytes, words)
            tpr = ours["tokens_per_record"]
            assert (tpr["min"], tpr["max"], [tpr["p50"], tpr["p90"], tpr["p99"]]) == (lo, hi, quantiles)
            assert [ours["token_frequency"]["counts"][i] for i in ids] == counts and sum(counts) == tokens
            stats_paths[name] = tmp / f"{name}.json"
            stats_paths[name].write_text(dump_stats(ours))
            rows.append((f"stats ({name}, {tokens / 1e6:.1f}M tokens)", t_ours, t_duck1, t_duck2))

        t_ours, (code, report) = best_of(args.repeat, lambda: ours_drift(stats_paths["baseline"],
                                                                         stats_paths["current"]))
        t_duck1, duck = best_of(args.repeat, lambda: duckdb_drift(con1, folders["baseline"], folders["current"]))
        t_duck2, _ = best_of(args.repeat, lambda: duckdb_drift(con2, folders["baseline"], folders["current"]))
        ours_figures = [report.metric("bytes_per_token").baseline, report.metric("bytes_per_token").current,
                        report.metric("tokens_per_word").baseline, report.metric("tokens_per_word").current,
                        # Observed PSI, and JS over every id (the judged JS is over id classes).
                        report.metric("psi_tokens_per_record").current, report.metric("js_all_ids").change]
        for mine, theirs in zip(ours_figures, duck):
            assert abs(mine - theirs) <= 1e-9 * max(1.0, abs(theirs)), (ours_figures, duck)
        rows.append((f"drift (exit {code}; from stats.json vs from Parquet)", t_ours, t_duck1, t_duck2))

    print(f"{'task':<52} {'tokenbeam':>10} {'duckdb 1t':>10} {'duckdb':>10} {'ratio 1t':>9} {'ratio':>7}")
    for task, ours, d1, d2 in rows:
        print(f"{task:<52} {ours:>9.3f}s {d1:>9.3f}s {d2:>9.3f}s {d1 / ours:>8.2f}x {d2 / ours:>6.2f}x")
    print("ratio = DuckDB time / tokenbeam time (> 1: tokenbeam faster); 1t = DuckDB on one thread; "
          f"duckdb = {os.cpu_count()} threads. Figures of both sides checked equal.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
