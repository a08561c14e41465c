"""The errors a user sees, the exit codes they map to, and the one place that prints them.

Every command ends in one of these exit codes (the README lists them for schedulers):

    0    done: every shard read, at least one record written, `_SUCCESS` written
    1    `tokenbeam drift` (or `tokenize --baseline`): the comparison found drift
    2    usage or configuration error: the command did not start (bad flag, no input matched,
         unusable tokenizer, ...)
    3    the run started but its output is incomplete: a shard could not be read (unless
         `--allow-shard-errors`), nothing was written, `--fail-fast` stopped it, an output could not
         be written, a worker died; no `_SUCCESS`
    130  interrupted (Ctrl-C)
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Iterator

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130
PREFIX = "tokenbeam: "


class UserError(Exception):
    """An error the user can fix before the run starts: printed as one line, exit code 2."""
    exit_code = EXIT_USAGE


class IncompleteRun(UserError):
    """The run went ahead but its output is not complete: one line, exit code 3, no `_SUCCESS`."""
    exit_code = EXIT_INCOMPLETE


class ShardFailure(Exception):
    """A failure inside a Beam worker that the user must see as one line: `--fail-fast` meeting a bad
    record or file, an output that cannot be written. Beam re-raises a DoFn's exception with the step
    name appended (in process) or as the text of the worker's traceback (worker processes, Dataflow),
    so the message carries a marker that `pipeline_failures` finds in either form."""
    MARK = "[tokenbeam] "

    def __init__(self, message: str):
        super().__init__(message if message.startswith(self.MARK) else self.MARK + message)


_FAILURE_LINE = re.compile(re.escape(ShardFailure.MARK) + r"(.*?)(?: \[while running '[^']*'\])*$", re.M)
_WORKER_DIED = "Channel closed prematurely"     # what the local runner raises when a worker dies


def os_error_reason(exc: OSError) -> str:
    """`No space left on device`-style text of an OSError, with the path it names if any."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({exc.filename})" if exc.filename and exc.strerror else reason


def debugging() -> bool:
    """TOKENBEAM_DEBUG=1: keep tracebacks and Beam's own logs of failures (read at the CLI edge)."""
    return os.environ.get("TOKENBEAM_DEBUG") == "1"


def run_command(run: Callable[[], object]) -> int:
    """Run a command's body and turn its outcome into an exit code. A UserError (or an OSError: a path
    that cannot be read or written) becomes one line `tokenbeam: error: ...`; anything else is a bug
    and keeps its traceback. TOKENBEAM_DEBUG=1 prints the traceback of a UserError's cause too."""
    try:
        outcome = run()
    except (UserError, OSError) as exc:
        if debugging():
            traceback.print_exception(exc.__cause__ or exc.__context__ or exc, file=sys.stderr)
        error(os_error_reason(exc) if isinstance(exc, OSError) else str(exc))
        return getattr(exc, "exit_code", EXIT_USAGE)
    except KeyboardInterrupt:
        print(f"{PREFIX}interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return outcome if isinstance(outcome, int) else EXIT_OK


_INTERRUPTED = "KeyboardInterrupt"     # how Beam's re-raised Ctrl-C reads, in process or from a worker


def interrupted(exc: BaseException) -> bool:
    """Whether a pipeline's failure is a Ctrl-C: Beam re-raises the KeyboardInterrupt that reached a
    bundle as a RuntimeError (`KeyboardInterrupt [while running 'STEP']`), with the interrupt as its
    context in process, or as the text of the worker's traceback from a worker process. The chain
    is walked once: it can loop back on itself (a worker killed under the multi-process runner: Beam's
    RuntimeError has gRPC's error as its context, and that error the RuntimeError), and a walk that
    went round would never end, the run hung with no line said."""
    seen, walked = exc, set()
    while seen is not None and id(seen) not in walked:
        if isinstance(seen, KeyboardInterrupt) or str(seen).startswith(_INTERRUPTED):
            return True
        walked.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    return f"\n{_INTERRUPTED}" in str(exc) or f" {_INTERRUPTED} [while running" in str(exc)


class _HideShardFailures(logging.Filter):
    """Drop Beam's log record of a ShardFailure or of a Ctrl-C (a traceback): the user gets one line
    instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return ShardFailure.MARK not in message and not message.startswith(_INTERRUPTED)


@contextlib.contextmanager
def pipeline_failures(output: str) -> Iterator[None]:
    """Run a Beam pipeline inside this block: a ShardFailure raised in a worker, or a worker process
    that died, becomes a one-line IncompleteRun; Ctrl-C (however Beam wrapped it) a KeyboardInterrupt,
    which `run_command` prints as one line with exit 130; anything else is a bug and keeps its
    traceback. The files under their final names are complete whichever way it ends (each is
    renamed into place when written), so a rerun resumes."""
    hide = _HideShardFailures()
    loggers = [] if debugging() else [
        logging.getLogger(name) for name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker")]
    for logger in loggers:
        logger.addFilter(hide)
    try:
        yield
    except Exception as exc:
        if interrupted(exc):
            raise KeyboardInterrupt from None
        found = _FAILURE_LINE.search(str(exc))
        if found:
            raise IncompleteRun(found.group(1)) from exc
        if _WORKER_DIED in str(exc):
            raise IncompleteRun(f"a Beam worker process died during the run ({_WORKER_DIED.lower()}); the files "
                                f"already under {output} are complete: rerun the same command to do the rest") from exc
        raise
    finally:
        for logger in loggers:
            logger.removeFilter(hide)


# `--quiet` is kept in the environment: the local runner's worker processes and train's counting
# process inherit it, so their progress lines are silenced too.
QUIET_VARIABLE = "TOKENBEAM_QUIET"
# Per-shard progress is said for a process's first shard (a sign of life), then at most once in this
# many seconds per process (the final summary comes from the launcher), so 2,000 small shards do not
# make 2,000 lines.
PROGRESS_SECONDS = 5.0


def set_quiet(quiet: bool) -> None:
    """`--quiet`: from now on only errors and warnings are printed, here and in the processes started
    from here; otherwise progress and summaries too."""
    if quiet:
        os.environ[QUIET_VARIABLE] = "1"
    else:
        os.environ.pop(QUIET_VARIABLE, None)
    reset_progress()


def is_quiet() -> bool:
    return os.environ.get(QUIET_VARIABLE) == "1"


def say(message: str) -> None:
    """A progress/summary line on stderr (stdout stays clean for machine-readable output); none
    under `--quiet`."""
    if not is_quiet():
        print(message, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """A warning line on stderr, printed under `--quiet` too."""
    print(f"{PREFIX}warning: {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    """An error line on stderr, printed under `--quiet` too (the run's exit code says it failed)."""
    print(f"{PREFIX}error: {message}", file=sys.stderr, flush=True)


class _ShardProgress:
    """The shards this process has finished: a running count, said at the first and then at most
    every PROGRESS_SECONDS."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done = 0
        self.said: float | None = None

    def shard_done(self, line: str) -> None:
        with self.lock:
            self.done += 1
            now = time.monotonic()
            if self.said is not None and now - self.said < PROGRESS_SECONDS:
                return
            self.said = now
            done = self.done
        say(f"{done:,} shard(s) done so far by this process; the last: {line}")


_PROGRESS = _ShardProgress()


def shard_done(line: str) -> None:
    """A worker finished a shard (`line` says how it went): counted, and said within the bound."""
    _PROGRESS.shard_done(line)


def reset_progress() -> None:
    """A new run starts in this process: its count starts from zero."""
    global _PROGRESS
    _PROGRESS = _ShardProgress()


# What Beam's local worker processes print on their inherited stderr and we do not pass on: the
# "apitools not found" warning each of them logs when it imports Beam without the GCP extra.
_WORKER_NOISE = ("apitools not found",)


@contextlib.contextmanager
def quiet_worker_stderr() -> Iterator[None]:
    """Inside the block, this process's stderr (fd 2, which the local runner's worker processes
    inherit) goes through a pipe that drops Beam's import-time warnings and passes every other line
    on unchanged. On leaving, fd 2 is restored; lines still in the pipe are passed on. After a Ctrl-C
    nothing more is passed on: the worker processes got it too, and their dying words (tracebacks of
    the interrupted bundles) are not the user's message."""
    try:
        saved = os.dup(2)
    except OSError:        # no stderr to filter
        yield
        return
    read_end, write_end = os.pipe()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    muted = threading.Event()

    def copy() -> None:
        with os.fdopen(read_end, "rb") as pipe, os.fdopen(os.dup(saved), "wb", buffering=0) as out:
            for line in pipe:
                if not muted.is_set() and not any(noise.encode() in line for noise in _WORKER_NOISE):
                    out.write(line)

    def on_ctrl_c(signum, frame):
        muted.set()
        signal.default_int_handler(signum, frame)

    # Only where Ctrl-C still means KeyboardInterrupt (--watch handles it itself: it ends the watch).
    own_handler = (threading.current_thread() is threading.main_thread()
                   and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if own_handler:
        signal.signal(signal.SIGINT, on_ctrl_c)
    copier = threading.Thread(target=copy, name="stderr-filter", daemon=True)
    copier.start()
    try:
        yield
    except KeyboardInterrupt:
        muted.set()
        raise
    finally:
        if own_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stderr.flush()
        os.dup2(saved, 2)      # this process's own copy of the write end is gone: the copier ends
        os.close(saved)        # when the workers holding theirs have exited
        copier.join(timeout=2)
