"""What a finished run's figures say: whether its output is complete (the one verdict of train's
counts, tokenize's and evaluate's output), and the line of a legal run probably not what was meant
that tokenize and pack both give (records sharing an id)."""
from __future__ import annotations

from dataclasses import dataclass

from schemas.accounts import Account, account_of
from schemas.records import MISSING_TEXT_COLUMN, MISSING_TEXT_FIELD
from pipelines.core.errors import IncompleteRun
from pipelines.datasets.shards import describe_shard_error


@dataclass(frozen=True)
class RunWords:
    """How a command's verdict names what its run does with the records."""
    done: str             # the failed shards' records were not ...: "tokenized"
    lost: str             # what failed shards cost the run: "no _SUCCESS"
    nothing: str          # no record was used: "nothing was written"
    last: str = ""        # the end of that line, after "see rejected/": "; no _SUCCESS"


@dataclass(frozen=True)
class RunFigures:
    """The figures the verdict is drawn from, whichever file holds them: its shard errors and its
    account (schemas.accounts)."""
    shard_errors: list[dict]
    account: Account

    @property
    def shards(self) -> int:
        return self.account.shards_read

    @property
    def records_read(self) -> int:
        return self.account.records_read

    @property
    def records_used(self) -> int:
        return self.account.records_written

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        return self.account.reasons()

    @classmethod
    def of_file(cls, d: dict) -> "RunFigures":
        """From a stats.json, evaluate.json, train_report.json or _totals.json (of the current version)."""
        return cls(d["shard_errors"], account_of(d))


def incomplete_run(figures: RunFigures, allow_shard_errors: bool, words: RunWords) -> IncompleteRun | None:
    """Why a finished run's output is incomplete (shards that could not be read, unless allowed; no
    record used), or None when it is complete."""
    failed = figures.shard_errors
    if failed and not allow_shard_errors:
        return IncompleteRun(
            f"{len(failed)} of {figures.shards} shard(s) could not be read, and their records were not {words.done} "
            f"(listed in rejected/, first: {describe_shard_error(failed[0])}); {words.lost}: repair them and "
            f"rerun, or pass --allow-shard-errors")
    if figures.records_used == 0:
        reasons = figures.rejected_by_reason
        why = ", ".join(f"{n:,} {reason}" for reason, n in reasons.items()) or "the inputs hold no records"
        hint = " (is --text-field right?)" if text_field_missing(reasons, failed) else ""
        return IncompleteRun(f"{words.nothing}: {figures.records_read:,} records read, {why}{hint}; see "
                             f"rejected/{words.last}")
    return None


def text_field_missing(rejected_by_reason: dict[str, int], shard_errors: list[dict]) -> bool:
    """Whether records lacked the text field, or Parquet shards the text column."""
    return MISSING_TEXT_FIELD in rejected_by_reason or any(e["reason"] == MISSING_TEXT_COLUMN for e in shard_errors)


def repeated_ids_line(repeated: dict, where: str) -> str:
    return (f"{repeated['records']:,} records share {repeated['ids']:,} id(s) ({where}): ids should be unique; "
            f"records with the same id land in the same split of `tokenbeam pack`")
