"""The cyclic garbage collector paused for the length of a pass (issue 30).

A pass allocates hundreds of thousands of short-lived, acyclic objects (heap entries,
keys, options) next to a working state of tens of thousands of long-lived dicts and
lists (10,000 nodes). Every allocation burst triggers collections, and the oldest
generation's walks over the whole working state cost ≈ 50 ms each: at 10,000 nodes a
1,000-order pass spent ≈ 45 % of its CPU in them (654 → 356 ms with the collector off).
Nothing a pass builds needs the cycle collector (reference counting frees it), so the
collector is off while any pass or quote runs in the process and back as it was when
the last one ends; it then collects as usual. Nesting and threads are counted.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Run the block with the cyclic collector off (restored after the outermost one)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
