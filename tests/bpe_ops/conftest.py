"""Fixtures the compiled splitters' tests share."""
import pytest

from bpe_ops import pretokenize

_pcre2 = pretokenize._pcre2_module()


def batch_isas() -> list[str]:
    """The instruction sets the 64-byte windows classify bytes with on this processor (SSE2 always,
    AVX2 and AVX-512BW where it has them), narrowest first: each window test runs once with each."""
    return ["sse2"] if _pcre2 is None else _pcre2.batch_isas()


@pytest.fixture(params=batch_isas())
def isa(request):
    """The splitters' windows classified with `request.param`, the processor's default after."""
    before = _pcre2.batch_isa()
    _pcre2.batch_isa(request.param)
    yield request.param
    _pcre2.batch_isa(before)
