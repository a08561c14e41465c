"""Packages a tokenbeam process hides from itself: importing one fails at once, as where it is not
installed.

Beam and Arrow import several packages whenever they are installed, each import guarded as an
optional one, so hiding them changes nothing a command does and saves their import time and memory.
A finder placed first on `sys.meta_path` answers for them and their submodules with
ModuleNotFoundError. (None in `sys.modules` would not do: Arrow's pandas shim reads `sys.modules`
itself and fails on the None.) A package already imported stays.

    >>> hide(["a_package_nobody_has"])
    >>> import a_package_nobody_has
    Traceback (most recent call last):
    ModuleNotFoundError: No module named 'a_package_nobody_has'
"""
from __future__ import annotations

import sys
from collections.abc import Iterable

# Used by no command; hidden in every tokenbeam process that starts one (the console script, train's
# counting process):
#  - pandas: `apache_beam.typehints` imports it for its DataFrame type hints and Arrow's `pa.array`
#    to ask whether a value is a pandas one: a tenth of a tokenize job's memory and of its start.
#  - IPython: Beam asks it whether this is an IPython session for every transform applied.
#  - pymongo and its bson: Beam's MongoDB connector, imported with `apache_beam.io` (a tenth of a
#    second; Beam then logs that it found no bson package, which beam_options filters out).
UNUSED = ("IPython", "pandas", "pymongo", "bson")
# Used only by Beam's connectors and file systems of other places (Google Cloud's BigQuery, Pub/Sub
# and GCS, where `requests` comes first in the chain of imports; S3 through `boto3`), which Beam
# imports at start: hidden where a command line is `local_only`.
REMOTE_ONLY = ("requests", "boto3")


class HiddenPackages:
    """The finder: `import` of a name in `names`, or of a submodule, raises ModuleNotFoundError."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


FINDER = HiddenPackages()


def local_only(words: Iterable[str]) -> bool:
    """Whether a command line runs on the pinned local runner (no --runner) and names no URL (no
    `scheme://` in any word, Beam's flags included): then no package of REMOTE_ONLY is used.

        >>> local_only(["tokenize", "--input", "data/*.jsonl", "--output", "out"])
        True
        >>> local_only(["tokenize", "--input", "s3://bucket/*.jsonl", "--output", "out"])
        False
    """
    words = list(words)
    return not any(w.startswith("--runner") for w in words) and not any("://" in w for w in words)


def hide(names: Iterable[str]) -> None:
    """Make `import name`, and of its submodules, fail in this process from now on, for each name
    not imported yet."""
    FINDER.names.update(name for name in names if name not in sys.modules)
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
