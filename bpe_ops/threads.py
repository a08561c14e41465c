"""The threads of `Tokenizer.encode_arrays`: a pool, and in each thread its own compiled encoder.

The compiled encoder drops the GIL while it works, so threads encoding side by side run on as many
cores, provided each has an encoder of its own (one encoder is busy while it encodes: a second
thread would find it so and take the slow path). `EncoderThreads.map` cuts a batch into chunks of
`THREAD_CHUNK` texts and hands them to its pool, keeping their order; `thread_encoder` is the
calling thread's own encoder: the shared one for the first thread that asks, a `fork()` of it for
every other (the merge tables are built once, each fork has its own cache and buffers), made on
first use. The first thread takes the shared encoder rather than a fork because the shared one is
built with a cache of its own that nothing else would fill (a cache is as large as the pieces it
must hold: tens of MB); a caller that encodes with the shared encoder while that thread does finds
it busy and takes the slow path, with the same ids.

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
        self._shared_taken = False       # whether a thread encodes with the shared encoder itself
        self._taking = threading.Condition()
        self._spare: list[Any] = []      # forks made ahead (`prepare`) that no thread has taken yet
        self._forks_begun = 0            # forks made or being made, by `prepare` or a thread
        self._forks_taken = 0            # forks a thread took (its own, or a spare)

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
        """The calling thread's encoder (None when `shared()` is None): for the first thread that asks,
        the encoder `shared()` gives; for the others a fork of it (one `prepare` made, else its own).
        `shared` is called only when this thread has no encoder yet."""
        encoder = getattr(self._local, "encoder", None)
        if encoder is None and (parent := shared()) is not None:
            with self._taking:
                first, self._shared_taken = not self._shared_taken, True
                if not first:
                    # A fork `prepare` is making is waited for rather than made twice (tens of MB).
                    while not self._spare and self._forks_begun > self._forks_taken + len(self._spare):
                        self._taking.wait()
                    encoder = self._spare.pop() if self._spare else None
                    self._forks_begun += encoder is None
                    self._forks_taken += 1
            if encoder is None:
                encoder = parent if first else parent.fork()
            self._local.encoder = encoder
        return encoder

    def prepare(self, shared: Callable[[], Any], threads: int) -> None:
        """Build now, on the calling thread, the encoders `threads` threads will ask for: `shared()`
        and a fork of it for each thread but the first, kept for the threads that ask
        (`thread_encoder`). A job calls it on a thread of its own as soon as it has the tokenizer,
        before its encoding threads start: the compiled encoder builds its tables and caches without
        the GIL (tens of MB touched for the first time, which a fresh VM page makes slow), so the
        build overlaps the job's own start instead of holding up its first texts.

        >>> class Encoder:
        ...     def fork(self):
        ...         return Encoder()
        >>> threads, parent = EncoderThreads(), Encoder()
        >>> threads.prepare(lambda: parent, 3)
        >>> len(threads._spare), threads.thread_encoder(lambda: parent) is parent
        (2, True)
        """
        parent = shared()
        while parent is not None:
            with self._taking:
                if self._forks_begun >= threads - 1:
                    return
                self._forks_begun += 1
            try:
                fork = parent.fork()
            except BaseException:
                with self._taking:          # not made: a thread waiting for it makes its own
                    self._forks_begun -= 1
                    self._taking.notify_all()
                raise
            with self._taking:
                self._spare.append(fork)
                self._taking.notify_all()
