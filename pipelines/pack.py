"""`tokenbeam pack`: token Parquet -> shuffled, split, fixed-length sequences for pretraining.

    row groups -> SpillDocuments (per row group: id, ids, two hashes of (seed, id), train /
    validation by the split hash; the documents written to spill files, one Arrow batch per (split,
    bucket)) -> GroupByKey((split, bucket)) of references -> PackBucket (read the bucket's batches,
    sort them by the order hash, lay the documents at the bucket's offset in the split's stream, cut
    at file boundaries, the pieces to a spill file) -> GroupByKey((split, file)) of references ->
    WriteFile (read the file's pieces; rows of seq_len ids: Parquet, Megatron .bin + .idx, flat .bin)
    -> pack.json -> _SUCCESS (written last); the spill files are removed when the run ends.

The order is a function of the seed and the record ids only: a document's place is its order hash
(buckets are ranges of the hash), so the output is the same bytes whatever the runner, the number
of workers, the number of buckets, the spill files or the order of the input files. Each split's
stream is [BOS] ids [EOS] per document, back to back; every bucket learns where its documents start
in the stream from the buckets' sizes (a small side input), so no step ever holds more than one
bucket, one output file or SPILL_BYTES of documents. The shuffles carry only references to spill
files under `OUTPUT/.pack-spill/` (names in open_atomic's temporary style), so what a runner holds
for them does not grow with the token ids: Beam's local FnApiRunner keeps every GroupByKey's input
in its own memory.

This module is the command: the command line checked once (`PackRequest`), the launcher's decisions
(`decide`: `PackOptions`), the job as a chain of labelled transforms, the output folder, the report.
The inputs are read in pack_inputs.py, the steps are pack_steps.py's, the files are written by
pack_output.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time

from pipelines.core.beam_options import beam, check_worker_paths, one_local_worker, pipeline_options, split_beam_args
from pipelines.core import command
from pipelines.core.command import Command, add_quiet_argument, option_strings
from pipelines.core.errors import IncompleteRun, UserError, pipeline_failures, say, set_quiet, warn
from pipelines.core.files import inside, join, read_json, remove_stale_temporaries
from pipelines.core.folders import claim_output, mark_output
from pipelines.datasets.pack_inputs import TokenFile, find_inputs, first_record_last_id, read_units, warn_if_text_token
from pipelines.steps.pack_output import TRAIN, VALIDATION, PackOptions, clear_outputs, done_before, write_pack_json
from pipelines.steps.pack_steps import (HASH_BITS, PackBucket, SpillDocuments, SplitHashes, SumFigures, WriteFile,
                                  remove_spill_files, stream_layout)
from pipelines.datasets.shards import byte_size
from schemas import pack as layout
from schemas.accounts import ACCOUNT_KEY

BUCKET_TOKENS = 1 << 22          # ids per shuffle bucket: what one PackBucket call holds
SPILL_BYTES = 1 << 25            # documents one SpillDocuments holds (Arrow bytes) before it writes them out
DEFAULT_MAX_TOKENS_PER_FILE = "16M"
DEFAULT_SEED = 1234


# --- what is asked --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PackRequest:
    """The command line, checked once, before any input is read: token names are not ids yet (`decide`
    makes the workers' PackOptions of a request and its inputs)."""
    inputs: tuple[str, ...]
    output: str
    seq_len: int
    eos_token: str | None
    bos_token: str | None
    pad_token: str | None
    tokenizer: str | None
    seed: int
    shuffle: bool
    validation_fraction: float | None
    validation_records: int | None
    tail: str
    formats: tuple[str, ...]         # each once, in the order given (default: parquet)
    max_tokens_per_file: int

    @classmethod
    def of(cls, args: argparse.Namespace, bare: list[str]) -> PackRequest:
        """The request of parsed arguments (and the bare arguments after them: inputs too); UserError
        for numbers out of range and options that do not go together."""
        if args.seq_len is None:
            raise UserError("--seq-len N is required (see `tokenbeam pack --help`)")
        if args.seq_len < 2:
            raise UserError(f"--seq-len must be at least 2 (a row of one id teaches nothing), got {args.seq_len}")
        if args.validation_fraction is not None and not 0 <= args.validation_fraction < 1:
            raise UserError(f"--validation-fraction must be in [0, 1), got {args.validation_fraction}")
        if args.validation_records is not None and args.validation_records < 0:
            raise UserError(f"--validation-records must not be negative, got {args.validation_records}")
        if args.max_tokens_per_file < args.seq_len:
            raise UserError(f"--max-tokens-per-file {args.max_tokens_per_file} is less than one row of --seq-len "
                            f"{args.seq_len}")
        if args.pad_token is not None and args.tail != "pad":
            raise UserError(f"--pad-token only applies with --tail pad (--tail is {args.tail})")
        return cls(inputs=(*args.input, *bare), output=args.output, seq_len=args.seq_len, eos_token=args.eos_token,
                   bos_token=args.bos_token, pad_token=args.pad_token, tokenizer=args.tokenizer, seed=args.seed,
                   shuffle=not args.no_shuffle, validation_fraction=args.validation_fraction,
                   validation_records=args.validation_records, tail=args.tail,
                   formats=tuple(dict.fromkeys(args.formats or ["parquet"])),
                   max_tokens_per_file=args.max_tokens_per_file)

    def threshold(self) -> int | None:
        """The split hash below which a record is validation, or None: taken from the
        `validation_records` smallest split hashes by the pipeline."""
        return None if self.validation_records else round((self.validation_fraction or 0) * (1 << HASH_BITS))


def token_id(text: str, flag: str, vocab_size: int, tok) -> int:
    """`--eos-token` and friends: an id (`0`), or a special token's name with `--tokenizer`."""
    if text.isdigit():
        value = int(text)
        if value >= vocab_size:
            raise UserError(f"{flag} {value} is not an id of the inputs' vocabulary (ids 0 to {vocab_size - 1:,})")
        if tok is not None and value not in set(tok.special_tokens.values()):
            raise UserError(f"{flag} {value} is not a special token of --tokenizer (it has: "
                            f"{', '.join(f'{k}={v}' for k, v in sorted(tok.special_tokens.items())) or 'none'})")
        return value
    if tok is None:
        raise UserError(f"{flag} {text!r} is a token name: give its id, or --tokenizer to look it up")
    if text not in tok.special_tokens:
        raise UserError(f"{flag} {text!r} is not a special token of --tokenizer (it has: "
                        f"{', '.join(sorted(tok.special_tokens)) or 'none'})")
    return tok.special_tokens[text]


def decide(request: PackRequest, files: list[TokenFile]) -> tuple[PackOptions, dict]:
    """The launcher's decisions: ids for the tokens, the buckets, and what the output records of them."""
    from pipelines.datasets.tokenizer_files import load_tokenizer

    first = files[0]
    tok = None
    if request.tokenizer:
        tok = load_tokenizer(request.tokenizer)
        if tok.sha256 != first.tokenizer_sha256:
            raise UserError(f"--tokenizer {request.tokenizer} ({tok.sha256[:12]}...) is not the tokenizer of the inputs "
                            f"({first.tokenizer_sha256[:12]}..., e.g. {first.url})")
    vocab = first.vocab_size
    eos_id = token_id(request.eos_token, "--eos-token", vocab, tok) if request.eos_token is not None else None
    bos_id = token_id(request.bos_token, "--bos-token", vocab, tok) if request.bos_token is not None else None
    ended_with = None
    if first.eos_token is not None:
        # tokenize already ended every record with its EOS: pack adds no second one.
        ended_with = first_record_last_id(files)
        if tok is not None and ended_with != tok.special_tokens.get(first.eos_token, ended_with):
            raise UserError(f"the inputs say they end with {first.eos_token!r}, but their records end with id {ended_with}")
        if eos_id is not None and eos_id != ended_with:
            raise UserError(f"the inputs already end every record with {first.eos_token!r} (id {ended_with}); "
                            f"--eos-token {request.eos_token} would add a second, different separator")
        say(f"the inputs end every record with {first.eos_token!r} (id {ended_with}): no EOS added")
        eos_id = None
    elif eos_id is None and bos_id is None:
        raise UserError("no separator between documents: give --eos-token ID (or NAME with --tokenizer), or "
                        "--bos-token; the inputs were tokenized without --eos-token")
    for flag, chosen in (("--eos-token", eos_id), ("--bos-token", bos_id)):
        if chosen is not None:
            warn_if_text_token(chosen, flag, files[0])
    pad_id = None
    if request.tail == "pad":
        pad_id = token_id(request.pad_token, "--pad-token", vocab, tok) if request.pad_token is not None else \
            (eos_id if eos_id is not None else ended_with if ended_with is not None else bos_id)
    tokens = sum(sum(f.ids) for f in files)
    options = PackOptions(seq_len=request.seq_len, seed=request.seed, shuffle=request.shuffle, eos_id=eos_id,
                          bos_id=bos_id, pad_id=pad_id, tail=request.tail, formats=request.formats,
                          tokens_per_file=request.max_tokens_per_file // request.seq_len * request.seq_len,
                          vocab_size=vocab, tokenizer_sha256=first.tokenizer_sha256,
                          buckets=max(1, math.ceil(tokens / BUCKET_TOKENS)))
    shaping = {k: v for k, v in dataclasses.asdict(options).items() if k != "buckets"}
    shaping.update(validation_fraction=request.validation_fraction, validation_records=request.validation_records,
                   inputs_end_with=ended_with)
    return options, shaping


# --- the pipeline ---------------------------------------------------------------------------------

def shuffle() -> beam.PTransform:
    """The pipeline's two shuffles: a GroupByKey of references to spill files (a test wraps it to
    check that no element carries token ids)."""
    return beam.GroupByKey()


def build_pack_pipeline(p, files: list[TokenFile], options: PackOptions, output: str, threshold: int | None,
                        validation_records: int, header: dict, started_at: float, spread: bool = True):
    """The pack pipeline; `threshold` is the split hash below which a record is validation, or None
    to take it from the `validation_records` smallest split hashes."""
    units = p | "RowGroups" >> beam.Create(read_units(files))
    if spread:
        units = units | "SpreadRowGroups" >> beam.Reshuffle()
    if threshold is None:
        threshold_pc = (units | "SplitHashes" >> beam.ParDo(SplitHashes(options.seed))
                        | "SmallestSplitHashes" >> beam.combiners.Top.Smallest(validation_records)
                        | "Threshold" >> beam.Map(lambda hs: hs[-1] + 1 if hs else 0))
    else:
        threshold_pc = p | "FixedThreshold" >> beam.Create([threshold])
    spilled = units | "SpillDocuments" >> beam.ParDo(SpillDocuments(options, output, SPILL_BYTES),
                                                      beam.pvalue.AsSingleton(threshold_pc))
    stream = (spilled
              | "SpillSizes" >> beam.Map(lambda ref: (ref[0], ref[1][4]))
              | "BucketSizes" >> beam.CombinePerKey(sum)
              | "AllSizes" >> beam.combiners.ToDict()
              | "StreamLayout" >> beam.Map(stream_layout, options))
    stream_side = beam.pvalue.AsSingleton(stream)
    packed = (spilled
              | "Buckets" >> shuffle()
              | "PackBucket" >> beam.ParDo(PackBucket(options, output), stream_side).with_outputs(
                  PackBucket.STATS, main="pieces"))
    figures = packed[PackBucket.STATS] | "SumFigures" >> beam.CombineGlobally(SumFigures())
    entries = (packed.pieces
               | "Files" >> shuffle()
               | "WriteFile" >> beam.ParDo(WriteFile(options, output), stream_side)
               | "AllFiles" >> beam.combiners.ToList())
    entries | "WritePackJson" >> beam.Map(write_pack_json, stream_side, beam.pvalue.AsSingleton(figures),
                                          options, output, header, started_at)



# --- command line -------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--input", action="append", default=[], metavar="TOKENS",
                        help="the output folder of `tokenbeam tokenize`, or token Parquet files or globs (repeatable; "
                             "arguments after the options are inputs too)")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    # Checked after the leftover flags, so `--seq_len 4` is told the flag it meant, not that --seq-len is missing.
    parser.add_argument("--seq-len", type=int, default=None, metavar="N", help="ids per packed row (at least 2; required)")
    parser.add_argument("--eos-token", default=None, metavar="ID|NAME",
                        help="separator after each document: an id, or a special token's name with --tokenizer "
                             "(default: the --eos-token the inputs were tokenized with; one of --eos-token and "
                             "--bos-token is needed)")
    parser.add_argument("--bos-token", default=None, metavar="ID|NAME", help="put this id before each document")
    parser.add_argument("--tokenizer", default=None,
                        help="the inputs' tokenizer.json, to name tokens and to check the inputs were made with it")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="shuffle and split seed (default %(default)s)")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the inputs' order (files by name, rows in order)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--validation-fraction", type=float, default=None, metavar="F",
                       help="share of records held out into validation/, by a hash of (seed, id) (default 0)")
    group.add_argument("--validation-records", type=int, default=None, metavar="K",
                       help="hold out the K records of smallest hash instead")
    parser.add_argument("--tail", default="drop", choices=layout.TAILS,
                        help="the last partial row of each split: drop it (default), pad it with --pad-token "
                             "(n_tokens marks the padding), or keep it short")
    parser.add_argument("--pad-token", default=None, metavar="ID|NAME", help="padding id for --tail pad (default: the EOS)")
    parser.add_argument("--format", action="append", default=[], choices=layout.FORMATS, dest="formats",
                        help="output format (repeatable; default parquet): parquet rows, megatron .bin+.idx, flat bin")
    parser.add_argument("--max-tokens-per-file", type=byte_size, default=byte_size(DEFAULT_MAX_TOKENS_PER_FILE),
                        metavar="N", help=f"ids per output file, rounded down to whole rows (default "
                                          f"{DEFAULT_MAX_TOKENS_PER_FILE}, K/M/G are powers of 2)")


def run(argv: list[str]) -> dict:
    """Run `tokenbeam pack ARGV`; returns pack.json's content. UserError for bad usage, IncompleteRun
    when the output is not complete."""
    return command.run(COMMAND, argv)


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    started_at = time.time()
    set_quiet(args.quiet)
    beam_args, bare = split_beam_args(rest, option_strings(parser))
    request = PackRequest.of(args, bare)
    files, stats_digests = find_inputs(list(request.inputs))
    records = sum(sum(f.rows) for f in files)
    if request.validation_records is not None and request.validation_records >= records:
        raise UserError(f"--validation-records {request.validation_records} leaves no record for train "
                        f"(the inputs hold {records:,})")
    options, shaping = decide(request, files)
    beam_options, runner = pipeline_options(beam_args)
    check_worker_paths(beam_options, [*[f.url for f in files], request.output])
    header = run_header(files, options, shaping, stats_digests)
    claim_output(request.output, "pack")
    if any(inside(f.url, request.output) for f in files):
        raise UserError(f"--output {request.output} holds the inputs; give another folder")
    earlier = done_before(request.output, header["fingerprint"])
    if earlier is not None:
        say(f"skipped: {request.output} is complete from an earlier run with the same inputs and options")
        return earlier
    clear_outputs(request.output, files)
    mark_output(request.output, "pack")
    remove_spill_files(request.output)                 # a killed run's
    remove_stale_temporaries(request.output)
    say(f"pack: {len(files)} file(s), {records:,} records, {sum(sum(f.ids) for f in files):,} ids -> rows of "
        f"{options.seq_len}, {options.buckets} bucket(s) -> {request.output}")
    try:
        with pipeline_failures(request.output), beam.Pipeline(runner=runner, options=beam_options) as p:
            build_pack_pipeline(p, files, options, request.output, request.threshold(), request.validation_records or 0,
                                header, started_at, spread=not one_local_worker(beam_options, runner))
    finally:
        remove_spill_files(request.output)             # whether the run succeeded or not
    manifest = read_json(join(request.output, layout.PACK_JSON))
    say_outcome(manifest, options.seq_len, started_at, request.output)
    return manifest


def run_header(files: list[TokenFile], options: PackOptions, shaping: dict, stats_digests: dict) -> dict:
    """What pack.json holds besides the figures: the layout, the options that shape the output, the
    inputs, and their fingerprint (a rerun with the same one is skipped)."""
    inputs = [{"url": f.url, "size": f.size, "version": f.version, "rows": sum(f.rows),
               "tokenize_footer_sha256": f.footer_sha256} for f in files]
    fingerprint = hashlib.sha256(json.dumps({"layout": list(layout.FINGERPRINT_LAYOUT),
                                             "options": shaping, "inputs": inputs}, sort_keys=True).encode()).hexdigest()
    return {"version": layout.PACK_JSON_VERSION, "tokenizer_sha256": options.tokenizer_sha256,
            "vocab_size": options.vocab_size, "id_dtype": options.dtype.name, "seq_len": options.seq_len,
            "options": shaping, "inputs": {"list": inputs},
            ACCOUNT_KEY: layout.pack_account(len(files), sum(sum(f.rows) for f in files)).to_json(),
            "inputs_stats_sha256": stats_digests, "fingerprint": fingerprint}


def say_outcome(manifest: dict, seq_len: int, started_at: float, output: str) -> None:
    """The run's report on stderr, a line per split; IncompleteRun when train holds no row."""
    for split, s in manifest["splits"].items():
        say(f"{split}: {s['documents']:,} documents, {s['rows']:,} rows, {s['tokens']:,} ids "
            f"({s['documents_split']:,} documents split across rows, {s['padding_tokens']:,} padding, "
            f"{s['tokens_dropped']:,} dropped)")
    if not manifest["splits"][TRAIN]["rows"]:
        raise IncompleteRun(f"nothing was packed: train holds {manifest['splits'][TRAIN]['tokens_dropped']:,} ids, "
                            f"less than one row of {seq_len} (try --tail keep or pad); no _SUCCESS")
    elapsed = time.time() - started_at
    say(f"done in {elapsed:.1f}s ({manifest['splits'][TRAIN]['tokens'] / 1e6 / max(elapsed, 1e-9):.2f} M ids/s) "
        f"-> {output}")
    if VALIDATION in manifest["splits"] and not manifest["splits"][VALIDATION]["rows"]:
        warn("validation holds less than one row: all of it was dropped (try --tail keep or pad)")

COMMAND = Command(name="pack", help="pack token Parquet into shuffled fixed-length sequences (Beam)",
                  usage="tokenbeam pack --input TOKENS_DIR --output DIR --seq-len N [options] [INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.pack ARGV` (the same as `tokenbeam pack ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    import gc

    code = main()
    gc.freeze()       # the process exits next: spare the interpreter's final walk over Beam's objects
    sys.exit(code)
