"""`tokenbeam tokenize`: sharded text -> one token Parquet per shard + stats.json + _SUCCESS.

    shards -> TokenizeShard (steps/tokenize_shard.py; one DoFn call per shard: read, encode in
    batches, write Parquet under a temporary name, rename) -> per-shard Summary -> MergeSummaries (exact, any runner) -> stats.json
    -> _SUCCESS (written last: the shards, their record counts, the tokenizer sha256).

A rerun into the same output skips shards whose Parquet is complete and was made with the same
tokenizer (their summaries are rebuilt from the Parquet itself) and redoes the rest, including the
shards whose input could not be read to the end last time (it may have been repaired since).
"""
from __future__ import annotations

import argparse
import json
import posixpath
import sys
import time
from dataclasses import dataclass, replace
from functools import partial

from pipelines.core.beam_options import (beam, check_worker_paths, local_cores_per_worker, one_local_worker,
                                         pipeline_options, split_beam_args)
import pyarrow.parquet as pq

from bpe_ops.dropout import DROPOUT_MODES, Dropout
from bpe_ops.stats import Summary
from schemas import tables
from schemas.accounts import ACCOUNT_KEY, Account, account_of
from schemas.stats import TokenizerFacts, dump_stats, stats_json, upgrade_stats
from pipelines.core import command
from pipelines.core.command import (Command, add_dropout_arguments, add_quiet_argument, implementation_from_environment,
                                    option_strings, parse_dropout)
from pipelines.core.errors import (EXIT_DRIFT, IncompleteRun, UserError, os_error_reason, pipeline_failures,
                                   quiet_worker_stderr, say, set_quiet, warn)
from pipelines.core.files import (canonical, exists, filesystem, inside, join, read_json, remove,
                                  remove_stale_temporaries, remove_tree, write_text_atomic, writing)
from pipelines.core.folders import check_finished, claim_output, mark_output
from pipelines.core.inputs import InputError, Sought, find_files
from pipelines.datasets.shards import (REJECTED_DIR, add_source_arguments, expand, first_rows, job_progress, parts_said,
                                       plan, source_options as make_source_options, warn_mostly_rejected,
                                       warn_shard_errors)
from pipelines.datasets.tokenizer_files import (TokenizerRef, check_id_range, identify_tokenizer, parse_special_token,
                                                token_bytes_of)
from pipelines.datasets.outcome import RunFigures, RunWords, incomplete_run, repeated_ids_line
from pipelines.datasets.watch import StopSignal, WatchShards, WholeRun, install_stop_handlers
from pipelines.statistics.breakdowns import Breakdowns, Windowing
from pipelines.statistics.groups import GROUPS_FOLDER, NO_GROUP, GroupStats
from pipelines.statistics.summaries import MergeSummaries
from pipelines.statistics.windows import WINDOWS_FOLDER, WindowStats, parse_duration
from pipelines.monitoring.alerts import ALERTS, ALERTS_DIR, JudgeShard, gather_alerts
from pipelines.monitoring.drift_judging import (Thresholds, check_calibrated, check_same_dropout, judging_errors,
                                                load_stats, pair_drifted)
from pipelines.monitoring.drift_reports import show_pair
from pipelines.steps.tokenize_shard import (CountRepeatedIds, ShardJob, TokenizeShard, add_pairs,
                                            inferred_types, kept_field_kinds, prepare_encoding, read_shard_metadata,
                                            union_all)

SUCCESS = "_SUCCESS"
STOP_FILE = "_STOP"              # created by anyone: a --watch run ends cleanly
VERDICT_WORDS = RunWords(done="tokenized", lost="no _SUCCESS", nothing="nothing was written", last="; no _SUCCESS")


def write_stats(summary, tokenizer: TokenizerFacts, tokenizer_url: str, output: str, inputs: list[str],
                started_at: float, groups: dict | None = None, read_whole: dict[str, str] | None = None) -> str:
    """Write stats.json from the combined summary; `tokenizer` carries what it needs of the tokenizer
    (handed over by the launcher: this step does not load the tokenizer again); `groups` is the
    index of the per-group files (`--group-field`)."""
    extra = {"inputs": inputs, "tokenizer": tokenizer_url,
             "timing": {"started_at": started_at, "elapsed_seconds": round(time.time() - started_at, 3)}}
    if groups is not None:
        extra["groups"] = groups
    if read_whole:      # files above --split-size that could not be split, and why
        extra["read_whole"] = dict(sorted(read_whole.items()))
    stats = stats_json(summary, tokenizer, extra)
    url = join(output, "stats.json")
    with writing(url):
        write_text_atomic(url, dump_stats(stats))
    return url


def write_success(entries: list[dict], stats_url: str, output: str, tokenizer_sha256: str,
                  allow_shard_errors: bool = False, repeated_ids: tuple[int, int] = (0, 0)) -> bool:
    """`_SUCCESS`, written last, when the run is complete: every shard read (or shard errors allowed)
    and at least one record written. It lists the shards, their record counts and the tokenizer.

    The books must balance: records read == written + rejected for every shard and in total (the
    Account checks it), and the account of the manifest equals that of stats.json (two separate
    aggregations)."""
    try:
        by_file: dict[str, Account] = {}
        for e in entries:      # a split file's parts summed: one shard, counted by its first part
            first = e["fingerprint"].get("part", {}).get("index", 0) == 0
            by_file[e["relpath"]] = by_file.get(e["relpath"], Account()) + tables.shard_account(e, shards=int(first))
        entries = merge_parts(entries)
        accounts = [by_file[e["relpath"]] for e in entries]
        account = Account.total(accounts)
    except ValueError as exc:
        raise RuntimeError(f"record accounting is broken: {exc}") from None
    manifest = {"version": tables.SUCCESS_VERSION, "tokenizer_sha256": tokenizer_sha256, "stats": "stats.json",
                "shards": [dict({k: e[k] for k in ("relpath", "output", "parts", "shard_errors") if k in e},
                                input=e["fingerprint"]["input"], account=a.to_json()) for e, a in zip(entries, accounts)],
                ACCOUNT_KEY: account.to_json()}
    if repeated_ids[0]:      # records whose id another record has too, and how many such ids
        manifest["repeated_ids"] = {"records": repeated_ids[0], "ids": repeated_ids[1]}
    if any("untimed_records" in e for e in entries):     # --window: records without a usable timestamp
        manifest["untimed_records"] = sum(e.get("untimed_records", 0) for e in entries)
    counted = account_of(read_json(stats_url))
    if account != counted:
        raise RuntimeError(f"record accounting is broken: the manifest says {account}; stats.json says {counted}")
    if account.records_written == 0 or (account.shards_failed and not allow_shard_errors):
        return False
    url = join(output, SUCCESS)
    with writing(url):
        write_text_atomic(url, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return True


def merge_parts(entries: list[dict]) -> list[dict]:
    """The manifest entries sorted by input, the entries of a split file's parts made into one for
    the file: its shard errors in order, and `parts` (the part files in order) in place of `output`.
    Everything else about a file is the same in any split; its counts are summed as `Account`s, by
    `write_success`."""
    by_file: dict[str, list[dict]] = {}
    for entry in entries:
        by_file.setdefault(entry["relpath"], []).append(entry)
    merged = []
    for relpath in sorted(by_file):
        parts = sorted(by_file[relpath], key=lambda e: e["fingerprint"].get("part", {}).get("index", 0))
        if "part" not in parts[0]["fingerprint"]:
            merged += parts
            continue
        entry = {k: v for k, v in parts[0].items() if k != "output"}
        entry.update(shard_errors=[error for e in parts for error in e["shard_errors"]],
                     parts=[e["output"] for e in parts])
        if any("untimed_records" in e for e in parts):
            entry["untimed_records"] = sum(e.get("untimed_records", 0) for e in parts)
        merged.append(entry)
    return merged


@dataclass(frozen=True)
class Watching:
    """`--watch`: the shard source, and the baseline each new shard is judged against."""
    source: beam.PTransform
    baseline: str | None = None


@dataclass(frozen=True)
class TokenizeJob:
    """A tokenize pipeline as the launcher decided it.

    Args:
        shard: what each shard's tokenizing needs (pickled to the workers).
        facts: what stats.json needs of the tokenizer, computed once by the launcher.
        inputs: the inputs as a sorted set (as stats.json lists them).
        started_at: when the run started (seconds since the epoch).
        to_infer: the kept fields whose type a first stage infers from every record.
        spread: spread the shards over the workers (not when they are this one process).
        allow_shard_errors: a shard that cannot be read does not fail the run.
        watching: the watch source and baseline, None for a batch run.
        read_whole: (file, why) for the large files read whole (not split).
    """
    shard: ShardJob
    facts: TokenizerFacts
    inputs: tuple[str, ...]
    started_at: float
    to_infer: tuple[str, ...] = ()
    spread: bool = True
    allow_shard_errors: bool = False
    watching: Watching | None = None
    read_whole: tuple[tuple[str, str], ...] = ()


def build_tokenize_pipeline(p, shards, job: "TokenizeJob"):
    """The tokenize pipeline for a tokenizer the launcher loaded: `job.shard.tokenizer` names it (and
    carries its sha256), `job.facts` is what stats.json needs of it, so no worker computes either
    again. The shards are `shards` (batch), or what `job.watching.source` finds as they land (watch
    mode): the same per-shard transform, windows and whole-run results serve both. Kept fields
    without a type on the command line (`job.to_infer`, batch runs only) are inferred by a stage that
    reads the kept fields of every shard before any is tokenized. `shards` may hold parts of split
    files (`shards.plan`); `job.read_whole` says which large files are not split and why (stats.json)."""
    shard_job, facts, watching = job.shard, job.facts, job.watching
    tokenizer, source_options, output, breakdowns = (shard_job.tokenizer, shard_job.source_options, shard_job.output,
                                                     shard_job.breakdowns)
    to_infer = job.to_infer
    if watching is None:
        # One element per shard, spread over the workers unless they are this one process.
        shard_elements = p | "Shards" >> beam.Create(shards)
        if job.spread:
            shard_elements = shard_elements | "SpreadShards" >> beam.Reshuffle()
    else:
        shard_elements = p | "WatchShards" >> watching.source
    rows = first_rows(p, shards, source_options) if watching is None else None
    inferred = ()
    if to_infer:
        inferred = (beam.pvalue.AsSingleton(
            shard_elements
            | "KeptFieldKinds" >> beam.Map(kept_field_kinds, source_options, to_infer)
            | "AllKinds" >> beam.CombineGlobally(union_all)
            | "KeptFieldTypes" >> beam.Map(inferred_types, to_infer)),)
    # The summaries are typed so that Beam measures them with `SummaryCoder` (no pickle each).
    side = {"rows": rows} if rows is not None else {}
    results = (shard_elements
               | "TokenizeShard" >> beam.ParDo(TokenizeShard(shard_job), *inferred, **side).with_output_types(Summary)
               .with_outputs(TokenizeShard.MANIFEST, TokenizeShard.WINDOWS, TokenizeShard.GROUPS, TokenizeShard.JUDGED,
                             TokenizeShard.IDS, main="summaries"))
    windowing = breakdowns.windowing
    if windowing is not None:
        (results[TokenizeShard.WINDOWS]
         | "WindowStats" >> WindowStats(facts.vocab_size, windowing.seconds, output, facts,
                                        extra={"tokenizer": tokenizer.url, "timestamp_field": windowing.field}))
    summaries, manifest = results.summaries, results[TokenizeShard.MANIFEST]
    group_partials = results[TokenizeShard.GROUPS]
    id_buckets = results[TokenizeShard.IDS]
    if watching is not None:
        if watching.baseline:
            results[TokenizeShard.JUDGED] | "JudgeShard" >> beam.ParDo(JudgeShard(watching.baseline, facts, output))
        # A stream's whole-run results fire once, when the watch has ended.
        summaries = summaries | "WholeRunSummaries" >> WholeRun()
        manifest = manifest | "WholeRunManifest" >> WholeRun()
        group_partials = group_partials | "WholeRunGroups" >> WholeRun()
        id_buckets = id_buckets | "WholeRunIds" >> WholeRun()
    groups = None
    if breakdowns.group_field is not None:
        groups = beam.pvalue.AsSingleton(
            group_partials | "GroupStats" >> GroupStats(facts.vocab_size, output, facts, breakdowns.group_field))
    repeated_ids = (id_buckets
                    | "CountRepeatedIds" >> beam.CombinePerKey(CountRepeatedIds())
                    | "RepeatedIdsPerBucket" >> beam.Values()
                    | "AddRepeatedIds" >> beam.CombineGlobally(add_pairs).without_defaults())
    stats_url = (summaries
                 | "CombineStats" >> beam.CombineGlobally(MergeSummaries(facts.vocab_size)).without_defaults()
                 | "WriteStats" >> beam.Map(write_stats, facts, tokenizer.url, output, list(job.inputs), job.started_at,
                                            groups, dict(job.read_whole) or None))
    (manifest
     | "CollectManifest" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
     | "WriteSuccess" >> beam.Map(write_success, beam.pvalue.AsSingleton(stats_url), output, tokenizer.sha256,
                                  job.allow_shard_errors, beam.pvalue.AsSingleton(repeated_ids, default_value=(0, 0))))


# --- the output folder ----------------------------------------------------------------------------

def clear_stale_outputs(output: str, shards) -> int:
    """Make the output folder describe only this run's inputs: remove `_SUCCESS` and `stats.json`
    (rewritten at the end: a run that fails must not leave the last run's vouching for it), the token
    Parquet of inputs no longer given (ours: their footer says so) and their rejected files. A
    Parquet file tokenbeam did not write is never removed: the run refuses instead. Returns how many
    stale shard outputs were removed."""
    fs, root = filesystem(output)
    root = root.rstrip("/")
    expected = {s.output_name() for s in shards}
    expected_rejected = {s.output_name(".jsonl") for s in shards}
    found = [f for f in fs.find(root) if not posixpath.basename(f).startswith(".")]
    relative = {f: posixpath.relpath(f, root) for f in found}
    stale_parquet = [f for f, rel in relative.items() if rel.endswith(".parquet") and rel not in expected
                     and not rel.startswith((REJECTED_DIR + "/", WINDOWS_FOLDER + "/", ALERTS_DIR + "/"))]
    foreign = [relative[f] for f in stale_parquet if read_shard_metadata(fs.unstrip_protocol(f)) is None]
    if foreign:
        raise UserError(f"--output {output} holds Parquet files tokenbeam did not write ({', '.join(sorted(foreign)[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); give an empty or tokenbeam-only folder")
    stale_rejected = [f for f, rel in relative.items() if rel.startswith(REJECTED_DIR + "/")
                      and rel[len(REJECTED_DIR) + 1:] not in expected_rejected]
    for name in (SUCCESS, "stats.json", ALERTS, STOP_FILE):
        remove(join(output, name))
    # Windows and alerts are rewritten whole by every run.
    for folder in (WINDOWS_FOLDER, GROUPS_FOLDER, ALERTS_DIR):
        remove_tree(join(output, folder))
    for f in stale_parquet + stale_rejected:
        fs.rm(f)
    return len(stale_parquet)


def changed_inputs(inputs: list[str], manifest: dict) -> list[str]:
    """The inputs that are no longer what was tokenized (a file that grew after it was read, as a file
    written in parts can under --watch): their size or version in one listing now differs from the
    one the manifest records. A rerun tokenizes them again (their fingerprint no longer matches)."""
    from pipelines.datasets.sources import expand_inputs

    try:
        now = {shard.url: shard for shard in expand_inputs(inputs)}
    except InputError:          # every file of a pattern is gone
        now = {}
    changed = []
    for read in (entry["input"] for entry in manifest.get("shards", []) if "input" in entry):
        current = now.get(read["url"])
        if current is None or (current.size, current.version) != (read["size"], read["version"]):
            changed.append(f"{read['url']} ({read['size']:,} bytes tokenized, "
                           f"{'gone' if current is None else f'{current.size:,} now'})")
    return changed


def absent_fields(output: str, manifest: dict, keep_fields: list[str], stats: dict, group_field: str | None) -> list[str]:
    """The --keep-field / --group-field names that no record had (a typo gives an all-null column, or
    one group `(none)`)."""
    absent = []
    files = [join(output, name) for entry in manifest.get("shards", []) if entry[ACCOUNT_KEY]["records"]["written"]
             for name in entry.get("parts", [entry.get("output")])]
    for name in keep_fields:
        if files and not any(holds_a_value(url, name) for url in files):
            absent.append(f"--keep-field {name}: no record has this field (its column holds only nulls)")
    if group_field is not None and list(stats.get("groups") or {}) == [NO_GROUP]:
        absent.append(f"--group-field {group_field}: no record has this field (every record is in group {NO_GROUP})")
    return absent


def holds_a_value(url: str, name: str) -> bool:
    """Whether column `name` of a token Parquet has a non-null value."""
    fs, path = filesystem(url)
    with fs.open(path, "rb") as f:
        column = pq.read_table(f, columns=[name]).column(name)
    return column.null_count < len(column)


def warn_doubtful_run(options: "TokenizeOptions", inputs: list[str], stats: dict, manifest: dict) -> None:
    """Warnings for a run that is legal but probably not what was meant."""
    for what in absent_fields(options.output, manifest, [name for name, _ in options.kept_types], stats,
                              options.shard.breakdowns.group_field):
        warn(f"{what}; is the name right?")
    for text in changed_inputs(inputs, manifest):
        warn(f"{text} changed after it was tokenized: the output holds it as it was; rerun to tokenize it again")
    warn_mostly_rejected(account_of(stats))
    if "repeated_ids" in manifest:
        warn(repeated_ids_line(manifest["repeated_ids"], f"--id-field {options.id_field}"))


# --- command line -------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--tokenizer", required=True,
                        help="tokenizer.json (ours, a byte-level BPE or a SentencePiece-style BPE one), or a folder holding one")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    parser.add_argument("--pattern", default=None, metavar="NAME_OR_REGEX",
                        help="with a tiktoken rank file as --tokenizer: its split pattern (gpt2, gpt4, o200k, "
                             "cl100k_base, ... or a regex)")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN=ID",
                        help="with a tiktoken rank file: a special token and its id (repeatable)")
    parser.add_argument("--keep-field", action="append", default=[], metavar="NAME[:TYPE]",
                        help="copy this input field into the Parquet (repeatable), as a column of TYPE: string, "
                             "int64, float64, bool, or json (JSON text); without TYPE, the one type that fits "
                             "every value of the field in the input (ints with floats: float64; other mixes "
                             "and lists/objects: json; no value at all: string), found by reading the kept "
                             "fields of every shard first")
    parser.add_argument("--eos-token", default=None, metavar="TOKEN", help="end every record with this special token")
    add_dropout_arguments(parser)
    parser.add_argument("--encode-threads", type=int, default=None, metavar="N",
                        help="threads that encode each batch in a worker (default: the cores each local worker "
                             "has, 1 on other runners)")
    parser.add_argument("--baseline", default=None, metavar="STATS",
                        help="compare the new stats.json with this one at the end (as `tokenbeam drift`); "
                             "with --watch, judge each new shard against it as it is written (alerts.jsonl)")
    parser.add_argument("--timestamp-field", default=None, metavar="FIELD",
                        help="the field dating each record (ISO-8601 or epoch seconds), for --window statistics")
    parser.add_argument("--window", default=None, metavar="DURATION",
                        help="statistics per event-time window of DURATION (15m, 1h, 1d) in windows/<UTC start>"
                             ".stats.json; records without a usable timestamp are counted as untimed")
    parser.add_argument("--group-field", default=None, metavar="FIELD",
                        help="statistics per value of FIELD (a language, a source) in groups/<value>.stats.json, "
                             "listed in stats.json; `tokenbeam drift` then judges each group")
    parser.add_argument("--watch", action="store_true",
                        help="keep running: tokenize each new shard matching --input as it lands (Ctrl-C, "
                             "SIGTERM or an OUTPUT/_STOP file end it cleanly)")
    parser.add_argument("--poll-interval", type=float, default=2.0, metavar="SECONDS",
                        help="--watch: how often to look for new shards (default: %(default)s)")
    parser.add_argument("--stop-after", default=None, metavar="DURATION", help="--watch: end after DURATION")
    parser.add_argument("--stop-when-idle", default=None, metavar="DURATION",
                        help="--watch: end after DURATION without a new shard")
    add_source_arguments(parser, split=True)


def run(argv: list[str]) -> dict:
    """Run `tokenbeam tokenize ARGV`; returns stats.json's content. UserError for bad usage,
    IncompleteRun when the output is not complete."""
    return command.run(COMMAND, argv)


def parse_keep_fields(specs: list[str]) -> dict[str, str | None]:
    """`--keep-field NAME[:TYPE]` values -> {NAME: TYPE, or None to infer it}; a NAME holding ':' is
    taken whole unless what follows its last ':' is a type. UserError for an empty name or a field
    given twice with two types."""
    kept: dict[str, str | None] = {}
    for spec in specs:
        name, sep, type_name = spec.rpartition(":")
        if not sep or type_name not in tables.KEPT_TYPES:
            name, type_name = spec, None
        if not name:
            raise UserError(f"--keep-field {spec!r}: the field name is empty")
        if name in kept and kept[name] != type_name:
            raise UserError(f"--keep-field {name} is given twice, with different types")
        kept[name] = type_name
    return kept


def duration(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


BASELINE_FILE = Sought("--baseline", in_folder="stats.json", many=False, as_written=True)    # a stats.json, or its folder


def check_baseline(url: str, output: str, dropout: Dropout | None = None) -> str:
    """A baseline to judge against must be a readable, calibrated stats.json (or a folder holding one),
    of data encoded with the same BPE-dropout, and not a file this run replaces: refused at launch,
    not after the run. Returns the stats.json's URL."""
    from schemas.stats import validate_stats

    if not exists(url):
        raise UserError(f"--baseline {url}: no such file")
    check_finished(url, "--baseline", "tokenize --baseline")
    try:
        (path,) = [found.url for found in find_files([url], BASELINE_FILE)]
        stats = upgrade_stats(read_json(path))
        validate_stats(stats)
        check_calibrated(stats, "baseline")
        check_same_dropout(stats.get("dropout"), dropout and dropout.to_json())
    except InputError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"--baseline {url}: {os_error_reason(exc)}") from None
    except ValueError as exc:
        raise UserError(f"--baseline {url}: {exc}") from None
    if canonical(path) == canonical(join(output, "stats.json")) or any(
            inside(path, join(output, folder)) for folder in (WINDOWS_FOLDER, GROUPS_FOLDER)):
        raise UserError(f"--baseline {url} is a file of --output {output}, which this run rewrites; "
                        f"copy it elsewhere first")
    return path


@dataclass(frozen=True)
class Watch:
    """`--watch`'s settings: how often to look for new shards, and when to end (seconds, or None)."""
    poll_interval: float
    stop_after: float | None = None
    stop_when_idle: float | None = None


@dataclass(frozen=True)
class TokenizeOptions:
    """`tokenbeam tokenize`'s command line, checked once (`checked_options`) and frozen.

    Args:
        tokenizer: the tokenizer the launcher identified.
        output: the output folder.
        inputs: the input files and patterns, as given.
        beam_args: the Beam flags of the command line.
        shard: what each shard's tokenizing needs (`ShardJob`), `encode_threads` 0 until the runner
            is known (then: the cores each local worker has).
        kept_types: each --keep-field with its type, or None to infer it from the input.
        baseline: the stats.json to judge the run against (`--baseline`), if any.
        watch: `--watch`'s settings, None for a batch run.
        split_size: files above this many bytes are read in parts (0: never).
        allow_shard_errors: a shard that cannot be read makes the run fail unless this is set.
        id_field: the record id field (for the repeated-ids warning).
    """
    tokenizer: TokenizerRef
    output: str
    inputs: tuple[str, ...]
    beam_args: tuple[str, ...]
    shard: ShardJob
    kept_types: tuple[tuple[str, str | None], ...]
    baseline: str | None
    watch: Watch | None
    split_size: int
    allow_shard_errors: bool
    id_field: str | None


def checked_options(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser):
    """The command line checked, every contradiction a UserError before anything runs:
    `(TokenizeOptions, the loaded Tokenizer)`."""
    beam_args, bare = split_beam_args(rest, option_strings(parser))
    dropout = parse_dropout(args.dropout, args.seed)
    if args.dropout is not None and dropout is None:
        say("--dropout 0 is the deterministic encoding: tokenizing without dropout")
    baseline = check_baseline(args.baseline, args.output, dropout) if args.baseline else None
    if (args.timestamp_field is None) != (args.window is None):
        raise UserError("--timestamp-field and --window go together: the field that dates each record, and "
                        "the window length (15m, 1h, 1d, ...)")
    windowing = Windowing(args.timestamp_field, duration("--window", args.window)) if args.window is not None else None
    watch_flags = [flag for flag, value in (("--stop-after", args.stop_after), ("--stop-when-idle", args.stop_when_idle))
                   if value is not None]
    if watch_flags and not args.watch:
        raise UserError(f"{watch_flags[0]} applies to --watch runs")
    specials = dict(parse_special_token(spec) for spec in args.special_token) if args.special_token else None
    tok, tokenizer = identify_tokenizer(args.tokenizer, implementation_from_environment(), args.pattern, specials)
    check_id_range(tok, args.tokenizer)
    if dropout is not None and tok.mode not in DROPOUT_MODES:
        raise UserError(f"--dropout: {args.tokenizer} is {tok.mode}-mode BPE; BPE-dropout supports byte-level "
                        f"and classic BPE")
    if args.eos_token is not None and args.eos_token not in tok.special_tokens:
        known = ", ".join(sorted(tok.special_tokens)) or "none"
        raise UserError(f"--eos-token {args.eos_token!r} is not a special token of {args.tokenizer} (it has: {known})")
    kept_types = parse_keep_fields(args.keep_field)
    try:
        tables.tokens_schema(tok.vocab_size, dict.fromkeys(kept_types, "json"), event_time=windowing is not None,
                             group=args.group_field is not None)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    untyped = [name for name, type_name in kept_types.items() if type_name is None]
    if args.watch and untyped:
        raise UserError(f"--watch: give --keep-field {untyped[0]} its type ({untyped[0]}:TYPE, TYPE one of "
                        f"{', '.join(tables.KEPT_TYPES)}): the shards to come cannot be read ahead to infer it")
    if args.encode_threads is not None and args.encode_threads < 1:
        raise UserError(f"--encode-threads must be at least 1, got {args.encode_threads}")
    source_options = make_source_options(args, tuple(kept_types),
                                         tuple(f for f in (args.timestamp_field, args.group_field) if f))
    watch = None
    if args.watch:
        if args.poll_interval <= 0:
            raise UserError(f"--poll-interval must be positive, got {args.poll_interval}")
        watch = Watch(args.poll_interval, duration("--stop-after", args.stop_after),
                      duration("--stop-when-idle", args.stop_when_idle))
    shard = ShardJob(tokenizer, source_options, args.output, args.eos_token, args.fail_fast,
                     args.encode_threads or 0, Breakdowns(windowing, args.group_field),
                     judged=bool(watch and baseline), dropout=dropout,
                     kept_types=tuple((k, v) for k, v in kept_types.items() if v))
    return TokenizeOptions(tokenizer, args.output, (*args.input, *bare), tuple(beam_args), shard,
                           tuple(kept_types.items()), baseline, watch, 0 if watch else args.split_size,
                           args.allow_shard_errors, args.id_field), tok


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    started_at = time.time()
    set_quiet(args.quiet)
    options, tok = checked_options(args, rest, parser)
    output, shard_job, watch = options.output, options.shard, options.watch
    beam_args, stop, watching = list(options.beam_args), None, None
    if watch:
        shards = expand(options.inputs, shard_job.source_options, allow_empty=True)   # what is there already
        stop = StopSignal(sentinel=join(output, STOP_FILE))
        try:
            source = WatchShards(list(options.inputs), watch.poll_interval, watch.stop_after, watch.stop_when_idle,
                                 stop)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        watching = Watching(source, options.baseline)
        beam_args.append("--streaming")
    else:
        shards = expand(options.inputs, shard_job.source_options)
    units, read_whole = plan(shards, shard_job.source_options, options.split_size)
    beam_options, runner = pipeline_options(beam_args)
    check_worker_paths(beam_options, [*options.inputs, output, options.tokenizer.url])
    encode_threads = shard_job.encode_threads or local_cores_per_worker(beam_options, runner)
    if one_local_worker(beam_options, runner):     # its worker is this process and takes this tokenizer
        prepare_encoding(tok, encode_threads, shard_job.dropout)
    claim_output(output, "tokenize")
    dropout = shard_job.dropout
    say(f"tokenize: {len(shards)} shard(s){' so far, watching for more' if watch else ''}, "
        f"{sum(s.size for s in shards) / 1e6:.1f} MB{parts_said(shards, units)}, vocabulary {tok.vocab_size:,}"
        f"{f', BPE-dropout p={dropout.p} seed {dropout.seed}' if dropout else ''} -> {output}")
    stale = clear_stale_outputs(output, units)
    mark_output(output, "tokenize")
    if stale:
        say(f"removed the outputs of {stale} input(s) of an earlier run that this run does not have")
    if remove_stale_temporaries(output):
        say(f"removed the temporary files of an interrupted earlier run under {output}")
    # The inputs as a sorted set: the same inputs listed in another order give the same stats.json.
    inputs = sorted(set(options.inputs))
    job = TokenizeJob(
        replace(shard_job, encode_threads=encode_threads),
        TokenizerFacts.of(tok, reload=partial(token_bytes_of, options.tokenizer), dropout=dropout),
        tuple(inputs), started_at, tuple(name for name, type_name in options.kept_types if type_name is None),
        spread=not one_local_worker(beam_options, runner) and not watching,
        allow_shard_errors=options.allow_shard_errors, watching=watching,
        read_whole=tuple(sorted(read_whole.items())) if read_whole else ())
    restore = install_stop_handlers(stop) if watching else (lambda: None)
    try:
        with pipeline_failures(output), quiet_worker_stderr(), job_progress(shards, watching), \
                beam.Pipeline(runner=runner, options=beam_options) as p:
            build_tokenize_pipeline(p, units, job)
    finally:
        restore()
        if watching:
            remove(join(output, STOP_FILE))
    return report(options, inputs, started_at)


def report(options: TokenizeOptions, inputs: list[str], started_at: float) -> dict:
    """Read back what the run wrote, say it, and judge it: the `done` line; IncompleteRun when the
    output is not complete; warnings for a legal run that is probably not what was meant; the
    baseline's verdict (SystemExit(EXIT_DRIFT) when the data drifted). Returns stats.json's content."""
    output, watch = options.output, options.watch
    if not exists(join(output, "stats.json")):
        raise IncompleteRun(f"the watch ended before any shard matching {', '.join(inputs)} arrived; nothing "
                            f"was written" if watch else f"{join(output, 'stats.json')} was not written")
    stats = upgrade_stats(read_json(join(output, "stats.json")))
    manifest = tables.upgrade_success(read_json(join(output, SUCCESS))) if exists(join(output, SUCCESS)) else {}
    elapsed = time.time() - started_at
    warn_shard_errors(stats["shard_errors"], options.allow_shard_errors)
    windowing = options.shard.breakdowns.windowing
    untimed = (f", {manifest['untimed_records']:,} without a usable {windowing.field}"
               if "untimed_records" in manifest else "")
    account = account_of(stats)
    say(f"done: {account.records_read:,} records read, {account.records_written:,} written{untimed}, "
        f"{account.records_rejected:,} rejected, {len(stats['shard_errors'])} of {account.shards_read} shard(s) "
        f"failed; {stats['tokens']:,} tokens, {stats['bytes'] / 1e6:.1f} MB in {elapsed:.1f}s "
        f"({stats['bytes'] / 1e6 / max(elapsed, 1e-9):.2f} MB/s) -> {output}")
    failure = incomplete_run(RunFigures.of_file(stats), options.allow_shard_errors, VERDICT_WORDS)
    if failure is not None:
        raise failure
    warn_doubtful_run(options, inputs, stats, manifest)
    if watch and options.baseline:
        drifted = gather_alerts(output)
        say(f"{drifted} of {account.shards_read} shard(s) drifted from {options.baseline} "
            f"({join(output, ALERTS)})")
        if drifted:
            raise SystemExit(EXIT_DRIFT)
    elif options.baseline and judge_against_baseline(options.baseline, join(output, "stats.json")):
        raise SystemExit(EXIT_DRIFT)
    return stats


def judge_against_baseline(baseline: str, stats_url: str) -> bool:
    """A batch run's stats.json judged against the baseline (`check_baseline`'s) as `tokenbeam drift
    BASELINE STATS` judges it, the report printed the same way; whether it drifted. UserError when a
    file cannot be read or judged."""
    with judging_errors():
        (baseline,) = [found.url for found in find_files([baseline], BASELINE_FILE)]     # still there, as when the run started
        for path in (baseline, stats_url):
            check_finished(path, "input", "drift")
        report, groups = show_pair(load_stats(baseline), baseline, load_stats(stats_url), stats_url, Thresholds())
    return pair_drifted(report, groups)


COMMAND = Command(name="tokenize", help="tokenize sharded text into Parquet with statistics (Beam)",
                  usage="tokenbeam tokenize --tokenizer T --output DIR --input GLOB [options] [INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.tokenize ARGV` (the same as `tokenbeam tokenize ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    import gc

    code = main()
    gc.freeze()       # the process exits next: spare the interpreter's final walk over Beam's objects
    sys.exit(code)
