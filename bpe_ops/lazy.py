"""Members of an object built on first use, once, whichever threads ask for them at the same time.

`build_once(obj, name, unbuilt, build)` is attribute `name` of `obj`, set to `build()` first if it
is still the `unbuilt` marker. The build runs under one reentrant lock for every object (no lock to
leave out of pickles; builds are rare, and one build may ask for another member): threads asking at
once build it once, the others wait and then take that one.

>>> class Box:
...     slot = None
>>> box, calls = Box(), []
>>> build_once(box, "slot", None, lambda: calls.append(1) or "built")
'built'
>>> build_once(box, "slot", None, lambda: calls.append(1) or "again"), len(calls)
('built', 1)
"""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")
_BUILDING = threading.RLock()


def build_once(obj: object, name: str, unbuilt: object, build: Callable[[], T]) -> T:
    """`getattr(obj, name)`, built by `build()` (and set) when it is still `unbuilt`."""
    with _BUILDING:
        value = getattr(obj, name)
        if value is unbuilt:
            value = build()
            setattr(obj, name, value)
    return value
