"""Whether tokenbeam owns its process's heap, and settling it for a long job.

A Beam worker process, or the `tokenbeam` console script's own process (whose in-process runner runs
the job's steps), holds Beam's modules and the loaded tokenizer until it ends: hundreds of thousands
of objects that every full collection walks again. A tokenize job on short records makes a few
objects per record, enough for a full collection every few seconds: measured on 448k one-sentence
records, 19 of them took 1.8 s, the GIL held all the while. Frozen (`gc.freeze`), those objects are
no longer walked. Not for a library caller's process: a frozen object dropped later in a reference
cycle is never freed. The job's own objects (records, chunks, their lists and tuples) die by reference
count, not in cycles, but each young collection walks those still alive (the chunks in flight) and
moves them on to be walked again: with the young generation collected every YOUNG_COLLECTION_ALLOCATIONS
allocations instead of Python's 700, the same 448k records spent 0.14 s in the collector instead of
0.43 s or more, the GIL held all the while.

Such a process also allocates and frees the same large buffers over and over (a chunk's texts and
ids, a row group's columns, Parquet's pages and their compression). The C library's defaults hand a
freed buffer of a few megabytes back to the kernel (an `munmap`, or a trim of the heap's top), and the
next row group faults the same amount of fresh zeroed pages in again (the 538 MB tokenize job: 107-162k
page faults, 82-88k kept, about its peak's first touches). `keep_freed_memory` keeps it for the next use,
and has Arrow allocate from the C library too: Arrow's default pool (mimalloc) hands a Parquet
writer's page buffers back to the system and zeroes fresh huge pages for the next row group (in the
same job 3% of its CPU samples, and 30-45 MB of its peak).
"""
from __future__ import annotations

import ctypes
import gc
import os
import sys

_owned = False

# glibc's mallopt parameters (malloc.h) and the values a settled process runs with: blocks below
# MMAP_THRESHOLD come from the heap, which is trimmed only when TRIM_THRESHOLD bytes are free at its
# top. 32 MiB is the largest threshold glibc takes on 64-bit systems; a larger block (a shard's
# whole file) still gets its own mapping and goes back at once.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
# One arena (the heap those thresholds keep): glibc otherwise gives each thread that allocates its
# own arena, each keeping what it frees for that thread alone (a tokenize job's reading, encoding,
# writing and preparing threads: 5-10 MB more at its peak). Its threads allocate few, large blocks
# (a chunk's texts and ids, a row group's pages; Python's small objects come from its own allocator
# under the GIL), so sharing one arena's lock costs them nothing measurable.
ARENA_MAX = 1
# Container allocations between two collections of the young generation in a settled process.
YOUNG_COLLECTION_ALLOCATIONS = 100_000


def own_process() -> None:
    """Say that this process is tokenbeam's own (the console script): it ends when the command does,
    so it keeps the memory it frees from the start; and it collects no garbage while it imports its
    command's modules (`modules_imported` takes it up again)."""
    global _owned
    _owned = True
    keep_freed_memory()
    one_blas_thread()
    gc.disable()


def modules_imported() -> None:
    """In a process tokenbeam owns, once its command's modules (Beam's among them) are imported: freeze
    what the imports made and collect garbage again. Those objects live to the process's end, and
    every full collection would walk them again (the collections during the imports themselves were
    a tenth of their 0.4 s; `settle_heap`'s later collection then walks only the objects made
    since). The few cycles the imports left unreachable (~1,500 objects) are frozen with them."""
    if _owned:
        gc.freeze()
        gc.enable()


def process_owned() -> bool:
    return _owned


def settle_heap() -> None:
    """Collect garbage once, then freeze every object left (`gc.freeze`), for a process whose objects
    live to its end; collect the young generation every YOUNG_COLLECTION_ALLOCATIONS allocations; and
    keep the memory it frees for its next allocations (`keep_freed_memory`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *gc.get_threshold()[1:])
    keep_freed_memory()


def keep_freed_memory() -> bool:
    """Make the C library's allocator keep freed blocks of up to MMAP_THRESHOLD bytes for reuse, with up
    to TRIM_THRESHOLD bytes free at the heap's top, in one arena for every thread (ARENA_MAX): glibc's
    thresholds fixed by `mallopt` (they otherwise start at 128 KiB and move), and Arrow's default pool
    that allocator (`arrow_allocates_from_the_c_library`). True when glibc took them; False under
    another C library (no `mallopt`), which keeps its own policy."""
    arrow_allocates_from_the_c_library()
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except OSError:                     # no C library to open by that name (Windows)
        return False
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return (bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
            and bool(mallopt(M_ARENA_MAX, ARENA_MAX)))


ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def arrow_allocates_from_the_c_library() -> None:
    """Make the C library's allocator Arrow's default pool (what it makes without a pool given,
    Parquet's page buffers among them): at once if pyarrow is imported, else through the variable
    Arrow reads on first use (no pyarrow import for a command that never needs it). A pool the user
    chose by that variable is left as it is."""
    if os.environ.get(ARROW_POOL_VARIABLE):
        return
    if "pyarrow" in sys.modules:
        import pyarrow as pa
        pa.set_memory_pool(pa.system_memory_pool())
    else:
        os.environ[ARROW_POOL_VARIABLE] = "system"


BLAS_THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Have numpy's OpenBLAS, when it loads, start no threads of its own: it starts one per core
    besides the caller, and they spin while idle (1.6-1.8% of a tokenize job's CPU samples on two
    cores, with no BLAS call made). tokenbeam's parallelism is its own threads and Beam's workers.
    Read when numpy loads (a process that imported it already keeps its threads); a count the user
    chose is kept."""
    os.environ.setdefault(BLAS_THREADS_VARIABLE, "1")
