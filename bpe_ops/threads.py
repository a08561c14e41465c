"""The threads of `Tokenizer.encode_arrays`: a pool, and in each thread its own compiled encoder.

The compiled encoder drops the GIL while it works, so threads encoding side by side run on as many
cores, provided each has an encoder of its own (one encoder is busy while it encodes: a second
thread would find it so and take the slow path). `EncoderThreads.map` cuts a batch into chunks of
`THREAD_CHUNK` texts and hands them to its pool, keeping their order; `thread_encoder` is the
calling thread's `fork()` of the shared encoder (the merge tables are built once, each fork has its
own cache and buffers), made on first use.

>>> threads = EncoderThreads()
>>> threads.map(2, lambda chunk: [len(t) for t in chunk], ["a", "bb", "ccc"] * 20)[:4]
[1, 2, 3, 1]
>>> threads.size
2

Nothing here pickles (threads do not): the Tokenizer leaves its `EncoderThreads` out of a pickle and
starts a new one when loaded.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any, Callable, Sequence, TypeVar

# Texts per task when a batch is shared between threads.
THREAD_CHUNK = 16
_POOLS = threading.Lock()        # held while `map` picks its pool and hands it a batch
T = TypeVar("T")


class EncoderThreads:
    """A pool of `size` threads (made on first use) and the per-thread encoders."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.size = 0
        self._local = threading.local()

    def map(self, num_threads: int, work: Callable[[Sequence[Any]], list[T]], items: Sequence[Any]) -> list[T]:
        """`work(chunk)` of each chunk of `items` on `num_threads` threads, the results in order."""
        chunks = [items[i:i + THREAD_CHUNK] for i in range(0, len(items), THREAD_CHUNK)]
        # Every chunk is handed over before another caller may replace (and shut down) the pool.
        with _POOLS:
            done = self._pool_of(num_threads).map(work, chunks)
        return list(chain.from_iterable(done))

    def _pool_of(self, num_threads: int) -> ThreadPoolExecutor:
        """The pool (`_POOLS` held): made on first use, and again when another number of threads is
        asked for; the pool it replaces is shut down, its threads ending once the work already handed
        to them is done."""
        if self.size != num_threads:
            if self.pool is not None:
                self.pool.shutdown(wait=False)
            self.pool = ThreadPoolExecutor(num_threads, thread_name_prefix="tokenbeam-encode")
            self.size = num_threads
        return self.pool

    def thread_encoder(self, shared: Callable[[], Any]) -> Any:
        """The calling thread's fork of the encoder `shared()` gives (None when that is None);
        `shared` is called only when this thread has no fork yet."""
        encoder = getattr(self._local, "encoder", None)
        if encoder is None and (parent := shared()) is not None:
            encoder = self._local.encoder = parent.fork()
        return encoder
