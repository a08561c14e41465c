"""Which implementation bpe_ops runs: the compiled twins or their pure-Python specifications, and
which regex engine splits.

bpe_ops takes this choice as an argument (`implementation=`) and never reads the environment; the
command line reads it once, at its edge, with `from_environment(os.environ)`:

    >>> from bpe_ops.implementation import Implementation, from_environment
    >>> from_environment({"TOKENBEAM_PURE_PYTHON": "1", "TOKENBEAM_REGEX": "regex"})
    Implementation(compiled=False, engine='regex', cache_dir=None)
    >>> from bpe_ops import train_bpe
    >>> tok = train_bpe(["low lower lowest"] * 3, 260, implementation=Implementation(compiled=False))

Both choices change how fast, never what comes out: the tests hold every compiled twin and PCRE2 to
the Python code and the `regex` package.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

ENGINES = ("auto", "regex")
PURE_PYTHON_VARIABLE = "TOKENBEAM_PURE_PYTHON"
ENGINE_VARIABLE = "TOKENBEAM_REGEX"
CACHE_DIR_VARIABLE = "TOKENBEAM_CACHE_DIR"


@dataclass(frozen=True)
class Implementation:
    """How bpe_ops computes (never what).

    compiled:  True uses the compiled twins where they are built (the merge loop, the per-piece merge
               and with it the whole-text encoder, the count table); False forces their pure-Python
               specifications.
    engine:    "auto" splits with PCRE2 where it is installed and proven to split like `regex` (see
               `pretokenize.Pcre2Pattern`), else with `regex`; "regex" always uses `regex`.
    cache_dir: the folder that keeps where PCRE2 and `regex` classify characters differently, computed
               once per library versions (a few KB); None computes it once per process instead
               (~0.1 s), writing nothing.
    """
    compiled: bool = True
    engine: str = "auto"
    cache_dir: str | None = None

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")


DEFAULT = Implementation()


def from_environment(environ: Mapping[str, str]) -> Implementation:
    """The implementation the environment variables ask for (the CLI passes `os.environ`):

    TOKENBEAM_PURE_PYTHON=1   compiled=False
    TOKENBEAM_REGEX=regex     engine="regex" (empty or unset: "auto"; anything else: ValueError)
    TOKENBEAM_CACHE_DIR=DIR   cache_dir=DIR; unset: $XDG_CACHE_HOME/tokenbeam, else
                              $HOME/.cache/tokenbeam, else None

    >>> from_environment({"XDG_CACHE_HOME": "/tmp/c"})
    Implementation(compiled=True, engine='auto', cache_dir='/tmp/c/tokenbeam')
    """
    engine = environ.get(ENGINE_VARIABLE) or "auto"
    if engine not in ENGINES:
        raise ValueError(f"{ENGINE_VARIABLE} must be one of {ENGINES}, got {engine!r}")
    return Implementation(compiled=environ.get(PURE_PYTHON_VARIABLE) != "1", engine=engine,
                          cache_dir=_cache_dir(environ))


def _cache_dir(environ: Mapping[str, str]) -> str | None:
    if environ.get(CACHE_DIR_VARIABLE):
        return environ[CACHE_DIR_VARIABLE]
    if environ.get("XDG_CACHE_HOME"):
        return os.path.join(environ["XDG_CACHE_HOME"], "tokenbeam")
    if environ.get("HOME"):
        return os.path.join(environ["HOME"], ".cache", "tokenbeam")
    return None
