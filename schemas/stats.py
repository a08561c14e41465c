"""The layout of `stats.json`: version, fixed histogram bins, validation, loading and writing.

`stats.json` is the exact summary of a tokenized dataset (see `bpe_ops.stats.Summary`). Drift
comparison works from two of these files alone, so everything it needs is here and the histogram
bins are defined once, in this file: every stats.json of one schema version is comparable bin for bin.

Layout (version 3; `...` = a JSON number, `null` where the figure is undefined for an empty set):

    kind: "tokenbeam.stats", schema_version: 3
    tokenizer_sha256, vocab_size (ids 0 .. vocab_size-1, special tokens included)
    account: {shards: {read, failed}, records: {read, written, rejected, rejected_by_reason, repaired}}
             (schemas.accounts: the same object as every other file's account)
    records (the records every figure below describes, = account.records.written), tokens, bytes, chars, words
    tokens_per_record: {mean, min, max, p50, p90, p99, quantile_rule, histogram: {edges, counts},
                        percentiles: [p0, p1, ..., p100] (nearest rank; [] without records)}
    bytes_per_token: {overall, records_without_tokens, histogram: {edges, counts}}
                     (bytes: the UTF-8 bytes of the records' text, never of the tokens' pieces: a
                     SentencePiece-style `▁word` stands for " word", and its prefix space may not be in the text)
    tokens_per_word
    raw_byte_tokens: {count, share} (tokens standing for one raw byte: the single-byte tokens of
                     byte-level BPE, the `<0xNN>` byte-fallback pieces of SentencePiece-style BPE)
    vocabulary: {used_ids, utilisation (= used_ids / vocab_size)}
    token_frequency: {counts: [count of id 0, id 1, ...] (dense, length vocab_size),
                      top: [{id, count, token}] (most frequent first, `token` a repr of its bytes)}
    moments: {variables: ["tokens", "bytes", "chars", "words", "raw_byte_tokens"],
              records (the calibrated records: those the writer gave with record id and token ids;
                       drift needs all of them, = records),
              sums: [sum over records of each variable],
              products: [[sum over records of x_i * x_j]] (5 x 5, symmetric)}
    replicates: {groups: K (32), rule: "crc32(utf-8 record id) mod 32",
                 records: [K], tokens: [K],
                 tokens_per_record_counts: [[K x tokens_per_record bins]],
                 bytes_per_token_counts: [[K x bytes_per_token bins]],
                 token_classes: {exact_ids: 2048, folded_classes: 2048, classes: C,
                                 counts: [[K x C]]},
                 digit_run_counts: [[K x 5]]}            (optional, with digit_runs)
    digit_runs: {lengths: ["1", "2", "3", "4", "5+"], records, counts: [5]}   optional: ASCII digit
                runs by length in the `records` the writer counted them for (number formats)
    shards: {names}   (as many as account.shards.read)
    shard_errors: [{source, rows_read, reason, detail}]   files that could not be read (completely):
                  the first rows_read rows of source were read, the rest is lost; sorted
    dropout: {p, seed}   only when the records were encoded with BPE-dropout (`tokenize --dropout P
                  --seed S`); absent for the deterministic encoding. Drift refuses to compare two
                  files that differ in p: dropout changes every figure by design.
    read_whole: {relpath: why}   optional: input files above `--split-size` that were read whole
                  rather than in parts (compressed, one record per file, ...); absent when none
    timing: {elapsed_seconds, created_at, ...}   optional; the only part that differs between runs
    + free keys added by the writer (input globs, output path, ...)

Histogram bin i counts values v with edges[i] <= v < edges[i+1]; the last bin is open-ended.

Why version 2 (what calibrated drift verdicts rest on; the record is the sampling unit):
- `moments` give every ratio of two variables, R = sum y / sum x (bytes per token, tokens per
  word, raw-byte share, tokens per record with x = 1), its delta-method variance
  sum (y_i - R x_i)^2 / (n (n - 1) xbar^2) = (Syy - 2 R Sxy + R^2 Sxx) / (n (n - 1) xbar^2).
  All integers, exact and mergeable (JSON integers can pass 2**53: read them as big integers).
- `replicates` are random groups: record -> group by a stable hash of its id, each group a small
  sample of the same distribution. Drift estimates from them what PSI and Jensen-Shannon
  divergence would be for two samples of these sizes from one distribution.
- Token ids per group are kept by class, not per id: C = vocab_size classes up to 4,096 ids,
  else ids < 2,048 one class each and the rest folded by (id - 2048) mod 2048. K dense per-id
  tables of a 200k vocabulary would be 6.4 M counts; a data-chosen top-N set would not merge
  exactly. (bpe_ops.stats explains the choice.)
- `tokens_per_record.percentiles` give the order-statistic interval of p90.
- `digit_runs` (added within version 2: older files lack it, and drift says that figure cannot be
  judged): how numbers are written, per group, for a PSI against its no-drift value.
Version 3 moved the record and shard counts (version 2's records_read, repaired_records,
rejected: {total, by_reason} and shards.count) into `account`; `upgrade_stats` reads a version-2
file into version 3, so every reader sees the account.
Version 1 files lack `moments`, `replicates` and `percentiles`: they are refused with a message
saying so and how to rebuild (`tokenbeam stats` from the token Parquet).
"""
from __future__ import annotations

import json
from typing import Callable, Mapping

import numpy as np

from bpe_ops.dropout import Dropout
from bpe_ops.stats import (DIGIT_RUN_LENGTHS, EXACT_ID_CLASSES, FOLDED_ID_CLASSES, MOMENT_PAIRS, MOMENT_VARIABLES,
                           REPLICATE_GROUPS, _ratio, bin_counts, id_class_count, nearest_rank,
                           single_byte_ids, token_label)
from schemas.accounts import ACCOUNT_KEY, Account, account_of

STATS_KIND = "tokenbeam.stats"
STATS_SCHEMA_VERSION = 3
GROUP_RULE = f"crc32(utf-8 record id) mod {REPLICATE_GROUPS}"
REBUILD_HINT = ("rebuild it from the token Parquet: tokenbeam stats 'DIR/*.parquet' --tokenizer "
                "TOKENIZER --output DIR/stats.json")


def _tokens_per_record_edges() -> list[int]:
    # Two bins per octave (v, 1.5v) from 2 up to 3*2**23 tokens: exact for tiny records (0, 1, 2, 3
    # tokens each have their own bin), ~40% wide for long ones, so a 5-token record and a
    # 100k-token document are both resolved while a few hundred records still fill the bins well
    # enough for a stable population stability index.
    edges = [0, 1]
    v = 2
    while v <= 2 ** 23:
        edges += [v, v * 3 // 2]
        v *= 2
    return edges


TOKENS_PER_RECORD_EDGES: list[int] = _tokens_per_record_edges()

# Bytes per token of a record, in quarters of a byte up to 8 bytes/token (byte-level BPE on prose
# sits between 2 and 6), then coarser up to 32. Bins are assigned with integer arithmetic on
# quarters (floor(4 * n_bytes / n_tokens)), so the result is exact and identical on every machine.
BYTES_PER_TOKEN_QUARTER_EDGES: list[int] = list(range(0, 33)) + [36, 40, 48, 64, 96, 128]
BYTES_PER_TOKEN_EDGES: list[float] = [q / 4 for q in BYTES_PER_TOKEN_QUARTER_EDGES]

QUANTILE_RULE = "nearest-rank"   # pXX = smallest n with at least ceil(XX% of records) records <= n
QUANTILES = (50, 90, 99)
TOP_TOKENS = 1000                # decoded most frequent tokens kept for drift reports

_INT = (int,)
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))

# (dotted path, accepted types). `bool` is rejected wherever a number is expected.
REQUIRED_KEYS: list[tuple[str, tuple]] = [
    ("kind", (str,)),
    ("schema_version", _INT),
    ("tokenizer_sha256", (str,)),
    ("vocab_size", _INT),
    ("account", (dict,)),
    ("records", _INT),
    ("tokens", _INT),
    ("bytes", _INT),
    ("chars", _INT),
    ("words", _INT),
    ("tokens_per_record", (dict,)),
    ("tokens_per_record.mean", _OPT_NUM),
    ("tokens_per_record.min", _OPT_INT),
    ("tokens_per_record.max", _OPT_INT),
    ("tokens_per_record.p50", _OPT_INT),
    ("tokens_per_record.p90", _OPT_INT),
    ("tokens_per_record.p99", _OPT_INT),
    ("tokens_per_record.histogram", (dict,)),
    ("tokens_per_record.histogram.edges", (list,)),
    ("tokens_per_record.histogram.counts", (list,)),
    ("bytes_per_token", (dict,)),
    ("bytes_per_token.overall", _OPT_NUM),
    ("bytes_per_token.records_without_tokens", _INT),
    ("bytes_per_token.histogram", (dict,)),
    ("bytes_per_token.histogram.edges", (list,)),
    ("bytes_per_token.histogram.counts", (list,)),
    ("tokens_per_word", _OPT_NUM),
    ("raw_byte_tokens", (dict,)),
    ("raw_byte_tokens.count", _INT),
    ("raw_byte_tokens.share", _OPT_NUM),
    ("vocabulary", (dict,)),
    ("vocabulary.used_ids", _INT),
    ("vocabulary.utilisation", _NUM),
    ("token_frequency", (dict,)),
    ("token_frequency.counts", (list,)),
    ("token_frequency.top", (list,)),
    ("shards", (dict,)),
    ("shards.names", (list,)),
    ("tokens_per_record.percentiles", (list,)),
    ("moments", (dict,)),
    ("moments.variables", (list,)),
    ("moments.records", _INT),
    ("moments.sums", (list,)),
    ("moments.products", (list,)),
    ("replicates", (dict,)),
    ("replicates.groups", _INT),
    ("replicates.records", (list,)),
    ("replicates.tokens", (list,)),
    ("replicates.tokens_per_record_counts", (list,)),
    ("replicates.bytes_per_token_counts", (list,)),
    ("replicates.token_classes", (dict,)),
    ("replicates.token_classes.classes", _INT),
    ("replicates.token_classes.counts", (list,)),
]


def _lookup(d: dict, path: str):
    node = d
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"missing key {path!r}")
        node = node[part]
    return node


def _type_name(types: tuple) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_counts(path: str, counts: list, length: int) -> None:
    if len(counts) != length:
        raise ValueError(f"{path} has {len(counts)} entries, expected {length}")
    if counts and (set(map(type, counts)) != {int} or min(counts) < 0):
        raise ValueError(f"{path} must hold non-negative integers")


def validate_stats(d) -> None:
    """Raise ValueError with one line naming the first problem: wrong kind or version, a missing
    key, a wrong type, or figures that contradict each other (a truncated or hand-edited file)."""
    if not isinstance(d, dict):
        raise ValueError("not a stats.json object")
    if d.get("kind") != STATS_KIND:
        raise ValueError(f"not a tokenbeam stats.json (kind is {d.get('kind')!r}, expected {STATS_KIND!r})")
    version = d.get("schema_version")
    if version == 1:
        raise ValueError("stats.json schema_version 1 lacks what calibrated drift verdicts need "
                         "(per-record moments, random-group replicates, tokens-per-record percentiles); "
                         + REBUILD_HINT)
    if version == 2:
        raise ValueError("stats.json schema_version 2 is read through upgrade_stats (parse_stats does it)")
    if version != STATS_SCHEMA_VERSION:
        raise ValueError(f"stats.json schema_version {version!r} is not supported "
                         f"(this tokenbeam reads version {STATS_SCHEMA_VERSION})")
    for path, types in REQUIRED_KEYS:
        value = _lookup(d, path)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"key {path!r} must be {_type_name(types)}, got {type(value).__name__}")

    tpr, bpt = d["tokens_per_record"]["histogram"], d["bytes_per_token"]["histogram"]
    if tpr["edges"] != TOKENS_PER_RECORD_EDGES:
        raise ValueError("tokens_per_record.histogram.edges differ from this schema version's bins")
    if bpt["edges"] != BYTES_PER_TOKEN_EDGES:
        raise ValueError("bytes_per_token.histogram.edges differ from this schema version's bins")
    _check_counts("tokens_per_record.histogram.counts", tpr["counts"], len(TOKENS_PER_RECORD_EDGES))
    _check_counts("bytes_per_token.histogram.counts", bpt["counts"], len(BYTES_PER_TOKEN_EDGES))
    vocab_size = d["vocab_size"]
    freq = d["token_frequency"]["counts"]
    _check_counts("token_frequency.counts", freq, vocab_size)

    if sum(tpr["counts"]) != d["records"]:
        raise ValueError("tokens_per_record.histogram.counts do not add up to records")
    if sum(bpt["counts"]) + d["bytes_per_token"]["records_without_tokens"] != d["records"]:
        raise ValueError("bytes_per_token.histogram.counts do not add up to records")
    if sum(freq) != d["tokens"]:
        raise ValueError("token_frequency.counts do not add up to tokens")
    account = account_of(d)
    if account.records_written != d["records"]:
        raise ValueError("records != account.records.written")
    if account.shards_read != len(d["shards"]["names"]):
        raise ValueError("shards.names are not account.shards.read")
    _check_calibration(d)
    dropout = d.get("dropout")
    if dropout is not None and not (
            isinstance(dropout, dict) and set(dropout) == {"p", "seed"}
            and isinstance(dropout["p"], (int, float)) and not isinstance(dropout["p"], bool) and 0 < dropout["p"] <= 1
            and isinstance(dropout["seed"], int) and not isinstance(dropout["seed"], bool) and dropout["seed"] >= 0):
        raise ValueError("key 'dropout' must be {p: a probability in (0, 1], seed: a non-negative integer}")
    _check_top(d["token_frequency"]["top"], vocab_size)
    _check_groups(d.get("groups"))
    window = d.get("window")
    if window is not None and not (isinstance(window, dict) and isinstance(window.get("start"), str)
                                   and isinstance(window.get("end"), str)):
        raise ValueError("key 'window' must be {start, end} (UTC times)")
    read_whole = d.get("read_whole", {})
    if not isinstance(read_whole, dict) or not all(isinstance(v, str) for v in read_whole.values()):
        raise ValueError("key 'read_whole' must map input files to why each was read whole")
    # Optional: files written before shard errors were recorded here lack the key.
    errors = d.get("shard_errors", [])
    if not isinstance(errors, list) or not all(
            isinstance(e, dict) and isinstance(e.get("rows_read"), int) and not isinstance(e["rows_read"], bool)
            and all(isinstance(e.get(k), str) for k in ("source", "reason", "detail")) for e in errors):
        raise ValueError("key 'shard_errors' must be a list of {source, rows_read, reason, detail} objects")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_top(top: list, vocab_size: int) -> None:
    if not all(isinstance(t, dict) and _is_count(t.get("id")) and t["id"] < vocab_size and _is_count(t.get("count"))
               and isinstance(t.get("token"), str) for t in top):
        raise ValueError(f"token_frequency.top must hold {{id, count, token}} objects with ids below {vocab_size}")


def _check_groups(groups) -> None:
    """Optional (files written with `--group-field`): {value: {records, tokens, file}}, each file a
    path inside the folder of the stats.json, where drift reads it."""
    if groups is None:
        return
    if not isinstance(groups, dict) or not all(
            isinstance(g, dict) and _is_count(g.get("records")) and _is_count(g.get("tokens"))
            and isinstance(g.get("file"), str) and g["file"] and not g["file"].startswith(("/", "\\"))
            and ".." not in g["file"].replace("\\", "/").split("/") for g in groups.values()):
        raise ValueError("key 'groups' must map each group to {records, tokens, file} with the file inside "
                         "the stats.json's folder")


def _check_table(path: str, rows: list, shape: tuple[int, int]) -> None:
    if len(rows) != shape[0] or not all(isinstance(r, list) for r in rows):
        raise ValueError(f"{path} must hold {shape[0]} lists")
    for k, row in enumerate(rows):
        _check_counts(f"{path}[{k}]", row, shape[1])


def _check_calibration(d: dict) -> None:
    """The moments and replicates: shapes, and totals that agree with each other."""
    moments, rep = d["moments"], d["replicates"]
    if moments["variables"] != list(MOMENT_VARIABLES):
        raise ValueError(f"moments.variables must be {list(MOMENT_VARIABLES)}")
    n_var = len(MOMENT_VARIABLES)
    _check_counts("moments.sums", moments["sums"], n_var)
    _check_table("moments.products", moments["products"], (n_var, n_var))
    if rep["groups"] != REPLICATE_GROUPS:
        raise ValueError(f"replicates.groups is {rep['groups']}, this schema version uses {REPLICATE_GROUPS}")
    k = REPLICATE_GROUPS
    _check_counts("replicates.records", rep["records"], k)
    _check_counts("replicates.tokens", rep["tokens"], k)
    _check_table("replicates.tokens_per_record_counts", rep["tokens_per_record_counts"],
                 (k, len(TOKENS_PER_RECORD_EDGES)))
    _check_table("replicates.bytes_per_token_counts", rep["bytes_per_token_counts"],
                 (k, len(BYTES_PER_TOKEN_EDGES)))
    classes = rep["token_classes"]["classes"]
    if classes != id_class_count(d["vocab_size"]):
        raise ValueError(f"replicates.token_classes.classes is {classes}, expected "
                         f"{id_class_count(d['vocab_size'])} for {d['vocab_size']} ids")
    _check_table("replicates.token_classes.counts", rep["token_classes"]["counts"], (k, classes))
    n = moments["records"]
    if not 0 <= n <= d["records"] or sum(rep["records"]) != n:
        raise ValueError("moments.records and replicates.records disagree with records")
    if sum(rep["tokens"]) != moments["sums"][0] or sum(map(sum, rep["token_classes"]["counts"])) != moments["sums"][0]:
        raise ValueError("replicates.tokens and token_classes do not add up to moments.sums")
    if [sum(r) for r in rep["tokens_per_record_counts"]] != rep["records"]:
        raise ValueError("replicates.tokens_per_record_counts do not add up to replicates.records")
    if n == d["records"] and moments["sums"][:4] != [d["tokens"], d["bytes"], d["chars"], d["words"]]:
        raise ValueError("moments.sums disagree with tokens, bytes, chars, words")
    _check_digit_runs(d)
    pct = d["tokens_per_record"]["percentiles"]
    if len(pct) != (101 if d["records"] else 0) or any(not isinstance(v, int) or isinstance(v, bool) for v in pct):
        raise ValueError("tokens_per_record.percentiles must hold 101 integers (none without records)")


def _check_digit_runs(d: dict) -> None:
    """Optional (stats.json written before number formats were counted lacks it; drift then says
    that figure cannot be judged): shapes and totals."""
    runs, table = d.get("digit_runs"), d["replicates"].get("digit_run_counts")
    if runs is None and table is None:
        return
    if not isinstance(runs, dict) or table is None or runs.get("lengths") != DIGIT_RUN_LABELS:
        raise ValueError(f"digit_runs must hold lengths {DIGIT_RUN_LABELS}, records and counts, with "
                         f"replicates.digit_run_counts beside it")
    if not isinstance(runs.get("counts"), list):
        raise ValueError("digit_runs.counts must be a list")
    _check_counts("digit_runs.counts", runs["counts"], DIGIT_RUN_LENGTHS)
    _check_table("replicates.digit_run_counts", table, (REPLICATE_GROUPS, DIGIT_RUN_LENGTHS))
    if [sum(col) for col in zip(*table)] != runs["counts"]:
        raise ValueError("replicates.digit_run_counts do not add up to digit_runs.counts")
    n = runs.get("records")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= d["moments"]["records"]:
        raise ValueError("digit_runs.records must be a count of calibrated records")


def parse_stats(data: bytes, path) -> dict:
    """A stats.json's bytes read and validated (`path` names it in errors): ValueError (one line, naming the
    file) if it is not valid JSON or not a valid stats.json of this schema version."""
    try:
        d = json.loads(data.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}; truncated or corrupt?)") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read (not a stats.json?)") from None
    try:
        d = upgrade_stats(d)
        validate_stats(d)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return d


def upgrade_stats(d):
    """A stats.json object of version 2 as version 3 (its record and shard counts as the `account`);
    any other object unchanged (validate_stats judges it). Every figure is kept.

    >>> old = {"kind": STATS_KIND, "schema_version": 2, "records": 2, "records_read": 3, "repaired_records": 0,
    ...        "rejected": {"total": 1, "by_reason": {"bad_json": 1}}, "shards": {"count": 1, "names": ["a"]},
    ...        "shard_errors": []}
    >>> new = upgrade_stats(old)
    >>> new["schema_version"], new["account"]["records"]["read"], new["shards"], "records_read" in new
    (3, 3, {'names': ['a']}, False)
    """
    if not isinstance(d, dict) or d.get("kind") != STATS_KIND or d.get("schema_version") != 2:
        return d
    try:
        rejected, shards = d["rejected"], d["shards"]
        account = Account.of_shard(d["records_read"], d["records"], rejected["by_reason"], d["repaired_records"],
                                   d.get("shard_errors", []), shards=shards["count"])
    except (KeyError, TypeError, AttributeError):
        raise ValueError("stats.json schema_version 2 lacks its record counts (records_read, rejected, "
                         "repaired_records, shards.count)") from None
    if rejected.get("total") != account.records_rejected:
        raise ValueError("rejected.total is not the sum of rejected.by_reason")
    out = {k: v for k, v in d.items() if k not in ("records_read", "repaired_records", "rejected")}
    out["shards"] = {k: v for k, v in shards.items() if k != "count"}
    out.update({"schema_version": STATS_SCHEMA_VERSION, ACCOUNT_KEY: account.to_json()})
    return out


def _is_scalar(v) -> bool:
    return not isinstance(v, (dict, list))


def _all_scalars(values) -> bool:
    # The set of the items' types, not a test per item: a 200k-id frequency list is checked at C speed.
    return not any(issubclass(t, (dict, list)) for t in set(map(type, values)))


def _dump(v, indent: str) -> str:
    # Containers of scalars stay on one line (a 50k-entry frequency list is one line, not 50k),
    # containers of containers are expanded; keys are sorted so equal stats give equal bytes.
    if _is_scalar(v) or _all_scalars(v.values() if isinstance(v, dict) else v):
        return json.dumps(v, sort_keys=True, allow_nan=False)
    inner = indent + "  "
    if isinstance(v, dict):
        items = [f"{inner}{json.dumps(k)}: {_dump(v[k], inner)}" for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    items = [inner + _dump(x, inner) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + indent + "]"


def dump_stats(d: dict) -> str:
    """stats.json text: sorted keys, indented, numeric lists on one line, trailing newline.

    Byte-identical for equal summaries; only the `timing` object differs between runs.
    """
    return _dump(d, "") + "\n"


class TokenizerFacts:
    """What `stats_json` needs of a tokenizer, without the tokenizer: its id range, sha256, single-byte
    ids and token bytes, and the BPE-dropout the records were encoded with (None without). A process
    that has the tokenizer loaded (the tokenize launcher) hands this
    to the Beam steps that write stats.json, so they do not load the tokenizer to learn its ids.

    The token bytes (only needed to label the most frequent tokens) do not travel with it when
    `reload` is given: Beam bz2-compresses every pickled transform, about a second per MB here, so
    a 131k vocabulary held by four transforms cost seconds of every run's start. After unpickling,
    `vocab` is read once per process through `reload()` (a picklable callable returning the token
    bytes by id, e.g. a load from the tokenizer's table cache), when a stats.json is written."""

    def __init__(self, vocab_size: int, sha256: str, vocab: Mapping[int, bytes] | None,
                 reload: Callable[[], Mapping[int, bytes]] | None = None,
                 raw_byte_ids: tuple[int, ...] | None = None, dropout: Dropout | None = None):
        if vocab is None and reload is None:
            raise ValueError("TokenizerFacts needs the vocabulary or a way to reload it")
        self.vocab_size = vocab_size
        self.sha256 = sha256
        self._vocab = vocab
        self.reload = reload
        self._raw_byte_ids = raw_byte_ids
        self.dropout = dropout

    @classmethod
    def of(cls, tokenizer, reload: Callable[[], Mapping[int, bytes]] | None = None, *,
           dropout: Dropout | None = None) -> "TokenizerFacts":
        own = getattr(tokenizer, "raw_byte_ids", None)
        # With `reload`, the token bytes are read through it when a stats.json is written, not copied
        # here: a copy of the vocabulary, held to the job's end, that no step reads.
        return cls(tokenizer.vocab_size, tokenizer.sha256, dict(tokenizer.vocab) if reload is None else None, reload,
                   tuple(own) if own is not None else None, dropout=dropout)

    @property
    def vocab(self) -> Mapping[int, bytes]:
        if self._vocab is None:
            self._vocab = self.reload()
        return self._vocab

    @property
    def raw_byte_ids(self) -> tuple[int, ...]:
        """The ids that stand for one raw byte, for `Summary(vocab_size, raw_byte_ids=...)`: the
        tokenizer's own (`Tokenizer.raw_byte_ids`: single bytes, or a SentencePiece-style file's
        `<0xNN>` pieces), else the single-byte tokens."""
        if self._raw_byte_ids is None:
            self._raw_byte_ids = tuple(single_byte_ids(self.vocab))
        return self._raw_byte_ids

    def __reduce__(self):
        if self.reload is None:
            return TokenizerFacts, (self.vocab_size, self.sha256, self.vocab, None, self._raw_byte_ids, self.dropout)
        return TokenizerFacts, (self.vocab_size, self.sha256, None, self.reload, self.raw_byte_ids, self.dropout)

    def __eq__(self, other) -> bool:
        return isinstance(other, TokenizerFacts) and ((self.vocab_size, self.sha256, self.dropout)
                                                      == (other.vocab_size, other.sha256, other.dropout))

    def __hash__(self) -> int:
        return hash((self.vocab_size, self.sha256, self.dropout))


def _symmetric(products: list[int]) -> list[list[int]]:
    n = len(MOMENT_VARIABLES)
    full = [[0] * n for _ in range(n)]
    for (i, j), value in zip(MOMENT_PAIRS, products):
        full[i][j] = full[j][i] = value
    return full


def replicates_json(summary) -> dict:
    """The random groups of a summary as stats.json lays them out (histograms binned here)."""
    return {
        "groups": REPLICATE_GROUPS,
        "rule": GROUP_RULE,
        "records": list(summary.group_records),
        "tokens": list(summary.group_tokens),
        "tokens_per_record_counts": [bin_counts(t, TOKENS_PER_RECORD_EDGES) for t in summary.group_lengths],
        "bytes_per_token_counts": [bin_counts(t, BYTES_PER_TOKEN_QUARTER_EDGES) for t in summary.group_quarters],
        "token_classes": {"exact_ids": EXACT_ID_CLASSES, "folded_classes": FOLDED_ID_CLASSES,
                          "classes": int(summary.group_classes.shape[1]),
                          "counts": summary.group_classes.tolist()},
        "digit_run_counts": summary.group_digit_runs.tolist(),
    }


DIGIT_RUN_LABELS = [str(n) for n in range(1, DIGIT_RUN_LENGTHS)] + [f"{DIGIT_RUN_LENGTHS}+"]


def digit_runs_json(summary) -> dict:
    """Number formats: ASCII digit runs by length over the `records` given with their digit runs
    (all calibrated records when the writer gave them; per random group in `replicates`)."""
    return {"lengths": DIGIT_RUN_LABELS, "records": summary.digit_run_records,
            "counts": summary.group_digit_runs.sum(axis=0).tolist()}


def percentiles(table: Mapping[int, int]) -> list[int]:
    """Nearest-rank p0..p100 of a `{value: count}` table in one pass over its sorted values
    ([] for an empty table). p0 is the minimum.

    >>> percentiles({1: 1, 2: 1, 3: 1, 4: 1})[:3], percentiles({1: 1, 2: 1, 3: 1, 4: 1})[50]
    ([1, 1, 1], 2)
    """
    n = sum(table.values())
    if n == 0:
        return []
    out, seen, values = [], 0, iter(sorted(table))
    value = None
    for p in range(101):
        rank = max(1, -(-p * n // 100))
        while seen < rank:
            value = next(values)
            seen += table[value]
        out.append(value)
    return out


def stats_json(summary, tokenizer, extra: Mapping | None = None) -> dict:
    """The stats.json object of a `bpe_ops.stats.Summary`, for a tokenizer (or `TokenizerFacts`)
    with `vocab: dict[int, bytes]`, `vocab_size`, `sha256` and `raw_byte_ids` (and the `dropout` of
    the facts). `extra` adds top-level keys (input globs, a `timing` object, ...); it may not replace
    a computed figure."""
    if tokenizer.vocab_size != summary.vocab_size:
        raise ValueError(f"summary counts {summary.vocab_size} ids, tokenizer has {tokenizer.vocab_size}")
    counts = np.asarray(summary.id_counts, dtype=np.int64)       # by token id
    id_total = int(counts.sum())
    if id_total != summary.tokens:
        raise ValueError(f"token id counts add up to {id_total}, records to {summary.tokens} tokens")

    byte_ids = getattr(tokenizer, "raw_byte_ids", None)     # a tokenizer-like without it: single bytes
    byte_ids = tuple(byte_ids) if byte_ids is not None else single_byte_ids(tokenizer.vocab)
    if summary.raw_byte_ids is not None and summary.raw_byte_ids != byte_ids:
        raise ValueError("the summary's raw-byte ids are not the tokenizer's raw-byte (single-byte or <0xNN>) tokens")
    tpr = summary.tokens_per_record
    quantiles = {f"p{p}": nearest_rank(tpr, p) for p in QUANTILES}
    nonzero = np.flatnonzero(counts != 0)
    used = len(nonzero)
    raw_bytes = int(sum(counts[i] for i in byte_ids if i < summary.vocab_size))
    # The most used ids, most first, lower ids first on ties.
    ranked = nonzero[np.lexsort((nonzero, -counts[nonzero]))][:TOP_TOKENS].tolist()
    account = Account.of_shard(summary.records + sum(summary.rejected.values()), summary.records,
                               summary.rejected_by_reason(), summary.repaired, summary.shard_errors,
                               shards=len(summary.shards))
    out = {
        "kind": STATS_KIND,
        "schema_version": STATS_SCHEMA_VERSION,
        "tokenizer_sha256": tokenizer.sha256,
        "vocab_size": summary.vocab_size,
        ACCOUNT_KEY: account.to_json(),
        "records": summary.records,
        "tokens": summary.tokens,
        "bytes": summary.bytes,
        "chars": summary.chars,
        "words": summary.words,
        "tokens_per_record": {
            "mean": _ratio(summary.tokens, summary.records),
            "min": min(tpr) if tpr else None,
            "max": max(tpr) if tpr else None,
            **quantiles,
            "quantile_rule": QUANTILE_RULE,
            "histogram": {"edges": TOKENS_PER_RECORD_EDGES,
                          "counts": bin_counts(tpr, TOKENS_PER_RECORD_EDGES)},
            "percentiles": percentiles(tpr),
        },
        "bytes_per_token": {
            "overall": _ratio(summary.bytes, summary.tokens),
            "records_without_tokens": tpr.get(0, 0),
            "histogram": {"edges": BYTES_PER_TOKEN_EDGES,
                          "counts": bin_counts(summary.quarter_bytes_per_token,
                                               BYTES_PER_TOKEN_QUARTER_EDGES)},
        },
        "tokens_per_word": _ratio(summary.tokens, summary.words),
        "raw_byte_tokens": {"count": raw_bytes, "share": _ratio(raw_bytes, summary.tokens)},
        "vocabulary": {"used_ids": used, "utilisation": used / summary.vocab_size},
        "token_frequency": {
            "counts": counts.tolist(),
            "top": [{"id": i, "count": int(counts[i]),
                     "token": token_label(tokenizer.vocab[i])} for i in ranked],
        },
        "moments": {"variables": list(MOMENT_VARIABLES), "records": summary.calibrated,
                    "sums": list(summary.moment_sums), "products": _symmetric(summary.moment_products)},
        "replicates": replicates_json(summary),
        "digit_runs": digit_runs_json(summary),
        "shards": {"names": sorted(summary.shards)},
        "shard_errors": [dict(e) for e in summary.shard_errors],
    }
    dropout = getattr(tokenizer, "dropout", None)
    if dropout is not None:
        out["dropout"] = dropout.to_json()
    for key, value in (extra or {}).items():
        if key in out:
            raise ValueError(f"extra key {key!r} would replace a computed stats.json figure")
        out[key] = value
    return out
