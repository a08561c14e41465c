"""`tokenbeam stats 'runs/tokens/*.parquet' --tokenizer T`: rebuild stats.json from token Parquet files.

Reads the columns `id`, `token_ids` (list<uint16|uint32>), `n_tokens`, `n_bytes`, `n_chars`, `n_words` with
pyarrow through fsspec, one record batch at a time (memory bounded by the batch, not the file), and
feeds the same `Summary` the tokenize pipeline uses, so the result equals the pipeline's stats.json
apart from `timing`. Token ids are counted per batch with numpy's bincount over the flat Arrow
values (no Python object per token). When a file's footer carries the tokenize pipeline's shard
record, its rejected and repaired counts and shard name are restored too. Every record is calibrated
(record id and token ids go to `Summary.add_batch`), so the result is fit for `tokenbeam drift`:
this is how a stats.json of an older version is brought up to date.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas import tables
from bpe_ops.stats import Summary
from schemas.stats import TokenizerFacts, dump_stats, stats_json
from pipelines.errors import UserError, say
from pipelines.files import write_text_atomic
from pipelines.tokenizer_files import load_tokenizer

COLUMNS = ("id", "token_ids", "n_tokens", "n_bytes", "n_chars", "n_words")
STAT_COLUMNS = COLUMNS[2:]
BATCH_ROWS = 8_192
# Footer keys written by the tokenize pipeline (pipelines/tokenize.py).
SHA256_KEY = tables.TOKENIZER_SHA256_KEY.encode()
SHARD_KEY = tables.SHARD_KEY.encode()


class StatsError(Exception):
    """A problem with the inputs; `main` prints its one-line message and exits 2."""


def expand_globs(globs: list[str]) -> list[str]:
    """Every file matching the globs (local or fsspec URLs; a folder means its *.parquet), sorted."""
    urls: list[str] = []
    for pattern in globs:
        fs, path = fsspec.core.url_to_fs(pattern)
        if fs.isdir(path):
            path = path.rstrip("/") + "/*.parquet"
        matches = sorted(fs.glob(path))
        if not matches:
            raise StatsError(f"no file matches {pattern}")
        urls += [fs.unstrip_protocol(m) if "://" in pattern else m for m in matches]
    return sorted(set(urls))


def add_batch(summary: Summary, batch: pa.RecordBatch, where: str) -> None:
    """Add one record batch: id frequencies and per-record figures, a column at a time; each record
    calibrated with its id and token ids (views into the flat id buffer, no copy per record)."""
    ids = batch.column("token_ids")
    n_tokens = batch.column("n_tokens")
    if not pc.all(pc.equal(pc.list_value_length(ids), n_tokens)).as_py():
        raise StatsError(f"{where}: n_tokens disagrees with the length of token_ids")
    flat = ids.flatten().to_numpy(zero_copy_only=False)
    if len(flat):
        if int(flat.max()) >= summary.vocab_size:
            raise StatsError(f"{where}: token id {int(flat.max())} outside the tokenizer's "
                             f"{summary.vocab_size} ids (wrong --tokenizer?)")
        counts = np.bincount(flat, minlength=summary.vocab_size)
        used = np.flatnonzero(counts)
        summary.add_id_counts(dict(zip(used.tolist(), counts[used].tolist())))
    columns = [batch.column(c).to_pylist() for c in STAT_COLUMNS]
    if summary.raw_byte_ids is None:
        # A Summary made without the tokenizer's single-byte ids cannot be calibrated; its stats.json
        # says so (moments.records < records) and `tokenbeam drift` refuses it with that message.
        summary.add_batch(*columns)
        return
    bounds = np.cumsum(columns[0])[:-1]
    summary.add_batch(*columns, record_ids=batch.column("id").to_pylist(),
                      id_arrays=np.split(flat, bounds) if len(columns[0]) else [])


def add_file(summary: Summary, url: str, sha256: str) -> int:
    """Add one token Parquet file; returns its rows."""
    rows = 0
    try:
        with fsspec.open(url, "rb") as f:
            pf = pq.ParquetFile(f)
            meta = pf.schema_arrow.metadata or {}
            if SHA256_KEY in meta and meta[SHA256_KEY].decode() != sha256:
                raise StatsError(f"{url} was written with tokenizer {meta[SHA256_KEY].decode()[:12]}..., "
                                 f"not the given one ({sha256[:12]}...)")
            missing = [c for c in COLUMNS if c not in pf.schema_arrow.names]
            if missing:
                raise StatsError(f"{url} lacks the column {missing[0]!r} (not a tokenbeam token file?)")
            id_type = pf.schema_arrow.field("token_ids").type
            if not (pa.types.is_list(id_type) and pa.types.is_integer(id_type.value_type)):
                raise StatsError(f"{url}: token_ids is {id_type}, expected a list of integers")
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS)):
                add_batch(summary, batch, url)
                rows += batch.num_rows
            footer = pf.metadata.metadata or {}
    except (pa.ArrowException, OSError) as exc:
        raise StatsError(f"cannot read {url}: {str(exc).splitlines()[0]}") from None
    shard = json.loads(footer[SHARD_KEY]) if SHARD_KEY in footer else {}
    for reason, n in shard.get("rejected_by_reason", {}).items():
        summary.add_rejected(reason, n)
    summary.add_repaired(shard.get("repaired", 0))
    for error in shard.get("shard_errors", ()):
        summary.add_shard_error(error["source"], error["rows_read"], error["reason"], error["detail"])
    summary.add_shard(shard.get("relpath", url.rsplit("/", 1)[-1]))
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenbeam stats", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="GLOB", help="token Parquet files (paths, globs, fsspec URLs)")
    parser.add_argument("--tokenizer", required=True, help="the tokenizer.json they were made with (or its folder)")
    parser.add_argument("--output", default="stats.json", help="where to write stats.json (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    started = time.time()
    try:
        urls = expand_globs(args.inputs)    # before loading the tokenizer: a typo fails at once
        tok = load_tokenizer(args.tokenizer)
        summary = Summary(tok.vocab_size, raw_byte_ids=TokenizerFacts.of(tok).raw_byte_ids)
        for url in urls:
            rows = add_file(summary, url, tok.sha256)
            say(f"read {url}: {rows:,} rows")
        stats = stats_json(summary, tok, {"inputs": args.inputs, "tokenizer": args.tokenizer, "timing": {
            "started_at": started, "elapsed_seconds": round(time.time() - started, 3)}})
        write_text_atomic(args.output, dump_stats(stats))
    except (StatsError, UserError, OSError, ValueError) as exc:
        print(f"tokenbeam stats: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    say(f"{stats['records']:,} records, {stats['tokens']:,} tokens -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
