"""Pausing the cycle collector around bulk loads, safely across threads.

A cold load allocates hundreds of thousands of small containers that all stay alive and cannot form
cycles (they come from a JSON parser or are frozen JSON). Left on, CPython's allocation-triggered full
collections re-traverse the whole growing heap several times during one load and cost more than the
load itself. Deferring collection loses nothing: the objects are examined by the next ordinary
collection. The pause is reference-counted, so overlapping loads in several threads re-enable the
collector exactly once, and only if it was enabled when the first pause began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_mutex = threading.Lock()
_pausers = 0
_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _pausers, _resume
    with _mutex:
        if _pausers == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _mutex:
            _pausers -= 1
            if _pausers == 0 and _resume:
                gc.enable()
