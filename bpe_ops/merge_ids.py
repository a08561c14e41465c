"""A tokenizer.json's merges as id columns: the ids of each merge's halves and of their join.

`merge_ids(merges, vocab)` gives `(left, right, merged)`, three `array("q")` columns with
`vocab[a]`, `vocab[b]` and `vocab[a + b]` for every merge `"a b"` or `["a", "b"]` in order, or None
when the merges are not all in one of those forms or a half or a join is not in `vocab`. A large
vocabulary has hundreds of thousands of merges: `bpe_ops._native.merge_ids` does it in one pass
without a Python object per merge beyond the strings looked up; `merge_ids_python` is its
specification (the tests hold them equal), and what runs where the module is not built.

>>> vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}
>>> [column.tolist() for column in merge_ids([["a", "b"], ["ab", "c"]], vocab)]
[[0, 3], [1, 2], [3, 4]]
>>> [column.tolist() for column in merge_ids(["a b", "ab c"], vocab)]
[[0, 3], [1, 2], [3, 4]]
>>> merge_ids(["a b", ["ab", "c"]], vocab) is None          # two forms
True
>>> merge_ids(["b c"], vocab) is None                        # "bc" is not a token
True
"""
from __future__ import annotations

from array import array
from itertools import chain, repeat
from operator import add

try:
    from ._native import merge_ids as _compiled
except ImportError:            # not built: the specification runs
    _compiled = None


def merge_halves(merges: list) -> list[str] | None:
    """Both halves of every merge in order (`"a b"` or `["a", "b"]`, all in one form), or None when a
    merge is not two strings or the forms are mixed. Runs over whole lists.

    >>> merge_halves(["a b", "ab c"]), merge_halves([["a", "b"]]), merge_halves(["a b c"])
    (['a', 'b', 'ab', 'c'], ['a', 'b'], None)
    """
    kinds = set(map(type, merges))
    if not kinds:
        return []
    if kinds == {str}:
        return " ".join(merges).split(" ") if set(map(str.count, merges, repeat(" "))) == {1} else None
    if kinds == {list} and set(map(len, merges)) == {2}:
        halves = list(chain.from_iterable(merges))
        return halves if set(map(type, halves)) == {str} else None
    return None


def merge_ids_python(merges: list, vocab: dict) -> tuple[array, array, array] | None:
    """The specification of `merge_ids`, over whole lists (map over dict lookups).

    >>> [c.tolist() for c in merge_ids_python(["a b"], {"a": 5, "b": 6, "ab": 7})]
    [[5], [6], [7]]
    """
    halves = merge_halves(merges)
    if halves is None:
        return None
    get = vocab.get
    firsts, seconds = halves[::2], halves[1::2]
    left, right = list(map(get, firsts)), list(map(get, seconds))
    merged = list(map(get, map(add, firsts, seconds)))
    if None in left or None in right or None in merged:
        return None
    return array("q", left), array("q", right), array("q", merged)


def compiled(merges: list, vocab: dict) -> tuple[array, array, array] | None:
    """`merge_ids` by the compiled pass alone: None where it is not built, or where it does not
    find every half and join a plain int of `vocab` (the merges are then well-formed or not)."""
    if _compiled is None or type(merges) is not list or type(vocab) is not dict:
        return None
    got = _compiled(merges, vocab)
    return None if got is None else (array("q", got[0]), array("q", got[1]), array("q", got[2]))


def merge_ids(merges: list, vocab: dict) -> tuple[array, array, array] | None:
    """`(left, right, merged)` id columns of `merges` over `vocab`, or None (see the module)."""
    # Whatever the compiled pass does not take (a value that is not a plain int of 64 bits, say) the
    # specification decides.
    return compiled(merges, vocab) or merge_ids_python(merges, vocab)
