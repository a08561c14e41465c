"""BPE-dropout's random stream: which merges an encoding skips, reproducibly.

BPE-dropout (Provilkov et al., 2020) skips each merge the encoder is about to apply with probability
p, so one word gets varied segmentations (a regularizer for training data). Here the randomness of
a record is a function of (seed, record id) alone: a counter-based generator, so draw k of a record
is the same on any runner, worker, thread or shard order, and no state passes between records.

    key    = the first 8 bytes of BLAKE2b("<seed>\\0<record id>"), little-endian
    draw k = splitmix64(key + (k + 1) * GOLDEN)            k = 0, 1, 2, ... within the record
    skip   = draw < floor(p * 2**64)                         (an integer compare: exact, portable)

so p = 0 never skips and p = 1 always does (every draw is below 2**64).

>>> stream = DropoutStream(0.5, seed=7, record_id="doc-1")
>>> [stream.skip() for _ in range(8)]
[True, True, False, True, True, False, False, False]
>>> DropoutStream(0.5, seed=7, record_id="doc-1").skip()    # the same record starts over
True

Without a seed (`seed=None`) the key is drawn from the operating system: fresh segmentations on
every call, as Hugging Face's unseeded `BPE(dropout=p)` gives.
"""
from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass

MASK = (1 << 64) - 1
# The tokenizer modes whose merge replay has a dropout twin (Tokenizer._merge_dropout).
DROPOUT_MODES = ("byte", "classic")
GOLDEN = 0x9E3779B97F4A7C15           # splitmix64's increment: 2**64 / golden ratio, odd


@dataclass(frozen=True)
class Dropout:
    """A BPE-dropout setting: merge-skip probability `p` (0 < p <= 1) and the `seed` of every record's
    stream; `to_json()` is how stats.json and the shard fingerprints record it."""
    p: float
    seed: int

    def to_json(self) -> dict:
        return {"p": self.p, "seed": self.seed}


def check_dropout(p) -> float:
    """`p` as a float when it is a probability in [0, 1]; ValueError (one line) otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p) or not 0 <= p <= 1:
        raise ValueError(f"dropout must be a probability between 0 and 1, got {p!r}")
    return float(p)


def check_seed(seed) -> int:
    """`seed` when it is a non-negative integer; ValueError (one line) otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"the dropout seed must be a non-negative integer, got {seed!r}")
    return seed


def stream_key(seed: int, record_id: str) -> int:
    """The 64-bit key of the stream of record `record_id` under `seed`."""
    data = f"{seed}\0{record_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def splitmix64(z: int) -> int:
    """splitmix64's output function (Steele, Lea, Flood 2014) of a 64-bit state."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def threshold(p: float) -> int:
    """The integer a draw must be below to skip: floor(p * 2**64), exact for a float p (scaling by
    a power of two is exact), 2**64 for p = 1."""
    return int(check_dropout(p) * 2.0 ** 64)


class DropoutStream:
    """One record's skip decisions: `skip()` is True with probability p, draw after draw."""

    __slots__ = ("state", "limit")

    def __init__(self, p: float, seed: int | None, record_id: str | int = ""):
        self.limit = threshold(p)
        self.state = secrets.randbits(64) if seed is None else stream_key(check_seed(seed), str(record_id))

    def skip(self) -> bool:
        self.state = (self.state + GOLDEN) & MASK
        return splitmix64(self.state) < self.limit
