"""Whether tokenbeam owns its process's heap, and settling it for a long job.

A Beam worker process, or the `tokenbeam` console script's own process (whose in-process runner runs
the job's steps), holds Beam's modules and the loaded tokenizer until it ends: hundreds of thousands
of objects that every full collection walks again. A tokenize job on short records makes a few
objects per record, enough for a full collection every few seconds: measured on 448k one-sentence
records, 19 of them took 1.8 s, the GIL held all the while. Frozen (`gc.freeze`), those objects are
no longer walked. Not for a library caller's process: a frozen object dropped later in a reference
cycle is never freed.
"""
from __future__ import annotations

import gc

_owned = False


def own_process() -> None:
    """Say that this process is tokenbeam's own (the console script): it ends when the command does."""
    global _owned
    _owned = True


def process_owned() -> bool:
    return _owned


def settle_heap() -> None:
    """Collect garbage once, then freeze every object left (`gc.freeze`), for a process whose objects
    live to its end."""
    gc.collect()
    gc.freeze()
