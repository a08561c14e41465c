"""The pre-token cache and the Tokenizer's pickles around it (bpe_ops/piece_cache.py, threads.py)."""
import pickle

import cloudpickle
import dill
import pytest

from bpe_ops import Implementation, Tokenizer
from bpe_ops.piece_cache import MAX_CACHED_CHARS, PieceCache
from bpe_ops.threads import THREAD_CHUNK, EncoderThreads

MERGES = [(b"a", b"b"), (b"ab", b"c")]


def test_a_full_cache_drops_its_older_half_or_everything():
    halving, clearing = PieceCache(4), PieceCache(4, halve=False)
    for k in "abcde":
        halving.remember(k, (ord(k),))
        clearing.remember(k, (ord(k),))
    assert list(halving) == ["c", "d", "e"] and list(clearing) == ["e"]
    assert PieceCache(4).remember("x" * (MAX_CACHED_CHARS + 1), (1,)) == (1,)


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads),
                                          (dill.dumps, dill.loads)])
def test_pickles_keep_the_cache_and_start_new_threads(dumps, loads):
    texts = [f"abc {i} abcab" for i in range(3 * THREAD_CHUNK)]
    python = Tokenizer(MERGES, cache_size=10, implementation=Implementation(compiled=False))
    python.encode_batch(texts)                          # the Python path fills the cache
    back = loads(dumps(python))
    assert len(python._cache) > 2 and dict(back._cache) == dict(python._cache)
    assert isinstance(back._cache, PieceCache) and (back._cache.limit, back._segment_cache.halve) == (10, False)
    assert back.encode_batch(texts) == python.encode_batch(texts)
    tok = Tokenizer(MERGES)
    expected = tok.encode_arrays(texts, 2)              # with the compiled encoder: the pool exists now
    if tok._text_encoder is not None:
        assert tok._threads.pool is not None
    back = loads(dumps(tok))
    assert isinstance(back._threads, EncoderThreads) and back._threads.pool is None
    assert back.encode_arrays(texts, 2) == expected == python.encode_arrays(texts, 2)
