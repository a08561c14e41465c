"""pipelines/core/heap.py: a process tokenbeam owns keeps the memory it frees for its next use."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.core import heap

ROOT = Path(__file__).resolve().parents[2]

# A row group's life in small: a few buffers of some megabytes made, written and freed, again and
# again. Prints the page faults per round after the first round.
ROUNDS = textwrap.dedent("""
    import resource, sys
    sys.path.insert(0, {root!r})
    from pipelines.core import heap
    kept = heap.keep_freed_memory() if sys.argv[1] == "keep" else None
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    def round_():
        buffers = [bytearray(size) for size in (3 << 20, 5 << 20, 9 << 20)]
        for b in buffers:
            b[::4096] = b"\\1" * len(b[::4096])
        del buffers
    round_()
    before = faults()
    for _ in range(20):
        round_()
    print(kept, (faults() - before) / 20)
""")


def faults_per_round(mode: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", ROUNDS.format(root=str(ROOT)), mode], capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0], float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_buffers_are_reused_not_faulted_in_again():
    # The C library's defaults give megabyte blocks back to the kernel when freed: every round faults
    # their pages in again (zeroed by the kernel). Kept, a round reuses the last round's pages.
    kept, faults = faults_per_round("keep")
    assert kept == "True"                       # glibc took the thresholds
    assert faults < 5
    _, default_faults = faults_per_round("default")
    assert default_faults > 50                  # what the measure sees when memory goes back


def test_the_console_scripts_own_process_keeps_freed_memory(monkeypatch):
    from pipelines.core import heap
    calls = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(heap, "_owned", False)
    heap.own_process()
    assert heap.process_owned() and calls == [1]


# Arrow's default pool in a fresh process after `keep_freed_memory`, pyarrow imported before it or after.
POOL = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    if sys.argv[1] == "before":
        import pyarrow
    from pipelines.core import heap
    heap.keep_freed_memory()
    import pyarrow as pa
    print(pa.default_memory_pool().backend_name)
""")


def default_pool(when: str, **env) -> str:
    environ = {k: v for k, v in os.environ.items() if k != heap.ARROW_POOL_VARIABLE}
    return subprocess.run([sys.executable, "-c", POOL.format(root=str(ROOT)), when], capture_output=True,
                          text=True, check=True, env=dict(environ, **env)).stdout.strip()


@pytest.mark.parametrize("when", ["before", "after"])
def test_arrow_allocates_from_the_c_library_in_a_settled_process(when):
    # Arrow's own default (mimalloc here) purges a Parquet writer's freed page buffers while the writer
    # waits for its next row group, and zeroes fresh huge pages for it.
    assert default_pool(when) == "system"


def test_a_pool_the_user_chose_for_arrow_is_kept():
    assert default_pool("after", ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"
    assert default_pool("before", ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the threads in /proc/self/task")
def test_numpy_starts_no_blas_threads_in_the_console_scripts_process():
    # OpenBLAS starts a thread per core besides the caller when numpy loads (one here on two cores).
    program = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pipelines.core import heap
        heap.own_process()
        import numpy
        print(len(os.listdir("/proc/self/task")))
    """)
    environ = {k: v for k, v in os.environ.items() if k != heap.BLAS_THREADS_VARIABLE}
    threads = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                             env=environ).stdout.strip()
    assert threads == "1"


def test_a_settled_process_collects_its_young_objects_less_often():
    # Settled, the objects alive are frozen and the young generation is collected every
    # YOUNG_COLLECTION_ALLOCATIONS allocations: 10,000 short-lived containers (a chunk's records)
    # make no collection at all, where Python's default (700) makes one every 700 of them.
    program = textwrap.dedent(f"""
        import gc, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pipelines.core import heap
        if sys.argv[1] == "settled":
            heap.settle_heap()
        collections = []
        gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
        kept = [[i] for i in range(10_000)]
        print(gc.get_threshold()[0], len(collections), gc.get_freeze_count() > 0)
    """)
    def run(mode):
        return subprocess.run([sys.executable, "-c", program, mode], capture_output=True, text=True,
                              check=True).stdout.split()
    threshold, collections, frozen = run("settled")
    assert int(threshold) == heap.YOUNG_COLLECTION_ALLOCATIONS and int(collections) == 0 and frozen == "True"
    threshold, collections, frozen = run("default")
    assert int(threshold) == 700 and int(collections) >= 10 and frozen == "False"
