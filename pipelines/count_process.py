"""The entry point of train's counting process: `python -m pipelines.count_process PID FD JOB`.

`pipelines.train.CountingProcess` starts it with the launcher's pid, the write end of a pipe and
the job (the parsed command line, as JSON). Before Beam is imported it ends silently on Ctrl-C
(the launcher is the one that says so), hides packages Beam would import for nothing, and starts
following the launcher, so that it ends if the launcher is killed.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time

from pipelines.core import hidden_packages


def runs_here_on_local_files(job: dict) -> bool:
    """Whether the job runs on the pinned local runner and every path it names, Beam's flags
    included, is local (`hidden_packages.local_only`)."""
    args, rest = job["args"], job["rest"]
    return hidden_packages.local_only([*(args.get("input") or []), args.get("output") or "", *rest])


def exit_with_launcher(launcher: int) -> None:
    """End this process once the launcher (pid `launcher`, its parent) is gone, killed say: nobody
    would read the counts, and a job on a remote runner would go on being waited for. Checked from
    the start, so a launcher killed while this process still imports Beam is noticed too."""
    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(0.5)
        os._exit(1)       # open_atomic leaves at most a hidden temporary, which the next run removes

    threading.Thread(target=watch, name="exit-with-launcher", daemon=True).start()


def main(argv: list[str]) -> int:
    launcher, result_fd, job = int(argv[0]), int(argv[1]), argv[2]
    hidden_packages.hide(hidden_packages.UNUSED)
    if runs_here_on_local_files(json.loads(job)):
        hidden_packages.hide(hidden_packages.REMOTE_ONLY)
    exit_with_launcher(launcher)
    try:
        # Importing Beam makes hundreds of thousands of objects that live as long as the process:
        # the collector's passes over them meanwhile find nothing to free, and frozen afterwards
        # they are never walked again.
        gc.disable()
        try:
            from pipelines.steps.train_count import count_and_report
        finally:
            gc.freeze()
            gc.enable()
        return count_and_report(result_fd, job)
    except KeyboardInterrupt:        # Ctrl-C reaches the whole process group; the launcher says so
        return 130


def end(code: int) -> None:
    """End the process at once with `code`, as the `tokenbeam` console script does (pipelines.cli's
    `console`): the outcome is written and the launcher waits for this process to exit, so the
    interpreter's teardown of Beam (a few tenths of a second, with the native threads Beam and
    Arrow leave behind) would only delay the merge loop."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    end(main(sys.argv[1:]))
