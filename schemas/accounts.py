"""The account of a run's inputs: one type, one key vocabulary, in every file that keeps one.

stats.json, evaluate.json, train_report.json, counts/_totals.json, train's and tokenize's `_SUCCESS`
and pack.json each hold the same object under the key "account" (ACCOUNT_KEY):

    account: {shards: {read, failed},
              records: {read, written, rejected, rejected_by_reason: {reason: count}, repaired}}

- shards.read: the input files read (a file split into parts is one shard);
  shards.failed: of them, those whose rest could not be read (the distinct `source`s of the file's
  `shard_errors`, which stay beside the account with their details).
- records.read: the rows read from the shards, = written + rejected;
  records.written: those the command used (tokenized, counted, evaluated, packed);
  records.rejected: those set aside, = the sum of rejected_by_reason (reasons of schemas.records);
  records.repaired: of the written, those whose invalid UTF-8 was replaced with U+FFFD.

`Account` checks these invariants once, when it is made, and `+` is the one way two accounts are
summed (exact, associative and commutative). Files written before the account (stats.json 2,
evaluate.json 1, train_report.json and _totals.json 2, tokenize `_SUCCESS` 1, pack.json 1) are read
into the same Account by each layout's `upgrade_*` function (schemas.stats, schemas.evaluate,
schemas.reports, schemas.tables, schemas.pack).

>>> a = Account(shards_read=1, records_read=5, records_written=4, rejected_by_reason=(("bad_json", 1),))
>>> b = Account(shards_read=1, records_read=2, records_written=2, records_repaired=1,
...             failed_sources=("s2.jsonl",))
>>> total = a + b
>>> total.records_rejected, total.shards_failed, total.to_json()["records"]
(1, 1, {'read': 7, 'written': 6, 'rejected': 1, 'rejected_by_reason': {'bad_json': 1}, 'repaired': 1})
>>> Account.from_json(total.to_json(), [{"source": "s2.jsonl"}]) == total
True
>>> Account(records_read=3, records_written=1)
Traceback (most recent call last):
...
ValueError: account: records read 3 != written 1 + rejected 0
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

ACCOUNT_KEY = "account"
SHARD_KEYS = ("read", "failed")
RECORD_KEYS = ("read", "written", "rejected", "rejected_by_reason", "repaired")
# The reason an upgraded file gives for rejected records it counted without saying why (tokenize's
# and train's _SUCCESS before the account kept only a total).
UNKNOWN_REASON = "unknown"


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Account:
    """What a run made of its inputs (see the module docstring). Immutable: the reasons are sorted
    (reason, count) pairs and the failed shards a sorted tuple of their sources, so equal accounts
    compare (and pickle) equal whatever order they were summed in."""
    shards_read: int = 0
    failed_sources: tuple[str, ...] = ()
    records_read: int = 0
    records_written: int = 0
    rejected_by_reason: tuple[tuple[str, int], ...] = ()
    records_repaired: int = 0

    def __post_init__(self):
        reasons = self.rejected_by_reason
        if isinstance(reasons, Mapping):
            reasons = reasons.items()
        object.__setattr__(self, "rejected_by_reason", tuple(sorted((r, n) for r, n in reasons if n)))
        object.__setattr__(self, "failed_sources", tuple(sorted(set(self.failed_sources))))
        for name in ("shards_read", "records_read", "records_written", "records_repaired"):
            if not _count(getattr(self, name)):
                raise ValueError(f"account: {name} must be a count, got {getattr(self, name)!r}")
        if not all(isinstance(r, str) and _count(n) for r, n in self.rejected_by_reason):
            raise ValueError("account: rejected_by_reason must map reasons to counts")
        if self.records_read != self.records_written + self.records_rejected:
            raise ValueError(f"account: records read {self.records_read} != written {self.records_written} "
                             f"+ rejected {self.records_rejected}")
        if self.records_repaired > self.records_written:
            raise ValueError(f"account: {self.records_repaired} records repaired of {self.records_written} written")

    @property
    def records_rejected(self) -> int:
        return sum(n for _, n in self.rejected_by_reason)

    @property
    def shards_failed(self) -> int:
        return len(self.failed_sources)

    def reasons(self) -> dict[str, int]:
        """`{reason: records}` of the rejected records, sorted by reason."""
        return dict(self.rejected_by_reason)

    def __add__(self, other: "Account") -> "Account":
        if not isinstance(other, Account):
            return NotImplemented
        reasons = self.reasons()
        for reason, n in other.rejected_by_reason:
            reasons[reason] = reasons.get(reason, 0) + n
        return Account(self.shards_read + other.shards_read, self.failed_sources + other.failed_sources,
                       self.records_read + other.records_read, self.records_written + other.records_written,
                       tuple(reasons.items()), self.records_repaired + other.records_repaired)

    @classmethod
    def total(cls, accounts: Iterable["Account"]) -> "Account":
        """The sum of any number of accounts (the empty account for none)."""
        out = cls()
        for account in accounts:
            out = out + account
        return out

    @classmethod
    def of_shard(cls, read: int, written: int, rejected_by_reason: Mapping[str, int], repaired: int,
                 shard_errors: Iterable[Mapping], shards: int = 1) -> "Account":
        """One shard's account (`shards` 0 for a split file's later parts: the file is one shard)."""
        return cls(shards, tuple(e["source"] for e in shard_errors), read, written,
                   tuple(rejected_by_reason.items()), repaired)

    def to_json(self) -> dict:
        """The "account" object of every file that keeps one (keys in SHARD_KEYS and RECORD_KEYS order)."""
        return {"shards": {"read": self.shards_read, "failed": self.shards_failed},
                "records": {"read": self.records_read, "written": self.records_written,
                            "rejected": self.records_rejected, "rejected_by_reason": self.reasons(),
                            "repaired": self.records_repaired}}

    @classmethod
    def from_json(cls, obj, shard_errors: Iterable[Mapping] = ()) -> "Account":
        """An "account" object read back, with the file's shard errors (which name the failed shards);
        ValueError with one line when it is malformed or its figures contradict each other."""
        try:
            shards, records = obj["shards"], obj["records"]
            if set(shards) != set(SHARD_KEYS) or set(records) != set(RECORD_KEYS):
                raise KeyError
            reasons = records["rejected_by_reason"]
            if not isinstance(reasons, dict):
                raise KeyError
        except (KeyError, TypeError):
            raise ValueError(f"account must be {{shards: {{{', '.join(SHARD_KEYS)}}}, "
                             f"records: {{{', '.join(RECORD_KEYS)}}}}}") from None
        try:
            sources = tuple(e["source"] for e in shard_errors)
            account = cls(shards["read"], sources, records["read"], records["written"], tuple(reasons.items()),
                          records["repaired"])
        except (KeyError, TypeError):
            raise ValueError("account: the shard errors beside it must be {source, ...} objects") from None
        if records["rejected"] != account.records_rejected or any(n == 0 for n in reasons.values()):
            raise ValueError("account: records.rejected is not the sum of rejected_by_reason")
        if shards["failed"] != account.shards_failed:
            raise ValueError(f"account: shards.failed is {shards['failed']!r}, the shard errors name "
                             f"{account.shards_failed} shard(s)")
        return account


def account_of(d: Mapping, shard_errors: Iterable[Mapping] | None = None) -> Account:
    """The Account of a file of the current version (or upgraded), which holds it under ACCOUNT_KEY
    and its shard errors under "shard_errors", or per shard (tokenize's _SUCCESS: "shards", a list of
    entries with their "shard_errors"), or as given."""
    if shard_errors is None:
        shards = d.get("shards")
        shard_errors = d["shard_errors"] if "shard_errors" in d else [
            e for entry in shards for e in entry.get("shard_errors", [])] if isinstance(shards, list) else []
    return Account.from_json(d[ACCOUNT_KEY], shard_errors)
