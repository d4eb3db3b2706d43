"""The one place that loads the optional C accelerator (``agentlog/_speedups.c``) and says which build it is.

Every accelerated module (the JSON gate, the session's restore, the chunk-row codec and packer, the JSONL
scanner, the SQLite codec) binds its C functions from here at import time, so a hot path calls the C function directly,
with no indirection. A function is ``None`` when there is no accelerator, and the caller then runs its
pure-Python path, which gives the same results:

* ``AGENTLOG_PURE_PYTHON=1`` disables the accelerator (CI runs the suite both ways);
* no compiled module (no compiler at install time) is silent: the pure-Python path is the documented fallback;
* a compiled module whose ``VERSION`` is not :data:`EXPECTED_VERSION` is a stale build left over from an
  older source: its functions may take other arguments or judge differently, so it is not used at all, and
  one ``RuntimeWarning`` says how to rebuild. (Refusing to import would be the alternative; the pure-Python
  path is always correct, only slower, so falling back is the safer choice.)

Because the build is checked once here, the accelerated modules carry no per-function probes for older
builds. This module imports only the standard library (it sits below the kernel, see ``pyproject.toml``).
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

__all__ = [
    "ACCELERATED",
    "EXPECTED_VERSION",
    "ascii_term_rows",
    "check_build",
    "check_row",
    "checked_snapshot",
    "configure",
    "current_log_types",
    "event4",
    "expand_row",
    "freeze_owned_tree",
    "group_raw_chunks",
    "lines_are_single_values",
    "pack_chunk_runs",
    "repeated_term_marks",
    "restore_events",
    "seal",
    "snapshot",
    "speedups",
    "stream_text_length",
    "take_plain_events",
    "untrack",
    "wall_clock_ms",
]

EXPECTED_VERSION: Final = 5
"""The ``SPEEDUPS_VERSION`` of ``_speedups.c`` that this Python source was written against."""


def check_build(module: ModuleType, expected: int = EXPECTED_VERSION) -> ModuleType | None:
    """``module`` when its ``VERSION`` is ``expected``; else ``None`` and one warning naming the stale build."""
    version = getattr(module, "VERSION", None)
    if version == expected:
        return module
    warnings.warn(
        f"agentlog's C accelerator {getattr(module, '__file__', module.__name__)} is a stale build (VERSION "
        f"{version!r}, this agentlog expects {expected}): running on pure Python (same results, slower); "
        "rebuild it (python setup.py build_ext --inplace, or reinstall agentlog)",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


def _load() -> ModuleType | None:
    if os.environ.get("AGENTLOG_PURE_PYTHON"):
        return None
    try:
        module = importlib.import_module("agentlog._speedups")
    except ImportError:  # no compiler at install time: the pure-Python paths give the same results
        return None
    return check_build(module)


speedups: Final[ModuleType | None] = _load()
"""The checked C module, or ``None`` (disabled, absent or stale)."""

ACCELERATED: Final = speedups is not None

_c: Any = speedups
_Fn = Callable[..., Any]

snapshot: Final[Callable[[Any], Any] | None] = _c.snapshot if ACCELERATED else None
"""Frozen copy of a plainly valid JSON value, or the configured give-up sentinel."""
checked_snapshot: Final[_Fn | None] = _c.checked_snapshot if ACCELERATED else None
"""``snapshot`` plus a core data rule; the give-up sentinel whenever the Python path must decide."""
configure: Final[_Fn | None] = _c.configure if ACCELERATED else None
"""Set the frozen container types, the accepted subclasses and the give-up sentinel."""
seal: Final[_Fn | None] = _c.seal if ACCELERATED else None
"""``seal(cls, record)``: an untracked instance of the dict subclass ``cls`` holding ``record``'s items."""
freeze_owned_tree: Final[Callable[[Any], Any] | None] = _c.freeze_owned_tree if ACCELERATED else None
"""Freeze an exclusively owned parsed graph in place, or the give-up sentinel."""
untrack: Final[Callable[[Any], Any] | None] = _c.untrack if ACCELERATED else None
"""Stop the cycle collector from tracking an acyclic object; returns it."""
event4: Final[_Fn | None] = _c.event4 if ACCELERATED else None
"""An untracked committed event ``{type, seq, time, data}``, or ``None`` for a non-safe-integer time."""
current_log_types: Final[_Fn | None] = _c.current_log_types if ACCELERATED else None
"""``current_log_types(items, skip_class)``: the types of a stored log the legacy checks pass unchanged, or ``None``."""
restore_events: Final[_Fn | None] = _c.restore_events if ACCELERATED else None
"""Envelope-check, freeze and seal restored events; report the ones needing Python checks."""
wall_clock_ms: Final[Callable[[], int] | None] = _c.wall_clock_ms if ACCELERATED else None
"""Integer Unix epoch milliseconds."""
check_row: Final[_Fn | None] = _c.check_row if ACCELERATED else None
"""Every check of a parsed packed chunk row without expanding it: ``(facts, last time)``, or ``None``."""
expand_row: Final[_Fn | None] = _c.expand_row if ACCELERATED else None
"""Expand (or, without an event class, only check) a packed chunk row's members."""
group_raw_chunks: Final[_Fn | None] = _c.group_raw_chunks if ACCELERATED else None
"""Raw chunk events of exactly a packed run's members' shape grouped into runs, or ``None``."""
take_plain_events: Final[_Fn | None] = _c.take_plain_events if ACCELERATED else None
"""Append the plain, contiguous parsed events from a start index; return ``(stop, next seq)``."""
lines_are_single_values: Final[Callable[[Any], bool] | None] = _c.lines_are_single_values if ACCELERATED else None
"""Whether every line is lexically exactly one JSON object or array."""
pack_chunk_runs: Final[Callable[[Any], list[Any]] | None] = _c.pack_chunk_runs if ACCELERATED else None
"""One batch in storage form, every run of ``MIN_RUN``+ consecutive same-block deltas packed into a row."""
ascii_term_rows: Final[Callable[[Any], tuple[str, list[int]]] | None] = _c.ascii_term_rows if ACCELERATED else None
"""The search index's ``COPY`` term rows of the ASCII ``(doc, text, columns)`` triples, and the indices left to FTS5."""
repeated_term_marks: Final[_Fn | None] = _c.repeated_term_marks if ACCELERATED else None
"""FTS5 ``highlight()``'s mark count for one term repeated as a phrase, from its sorted positions, or ``None``."""
stream_text_length: Final[_Fn | None] = _c.stream_text_length if ACCELERATED else None
"""The token meter's streamed text length (UTF-16 units), -1 when no block, or ``None`` when Python decides."""
