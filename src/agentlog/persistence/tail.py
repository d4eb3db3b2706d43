"""Live tails: the committed events of one stored session, each exactly once and in seq order.

:meth:`PersistenceCoordinator.tail` is this module's :func:`tail_events`. A tail never writes and
never takes the writer lock; it reads what is durable through ``PersistenceCoordinator.read_from``
(a seek read on every backend that has one), so it sees events as they are committed by any writer,
in this process or another, on this host or (PostgreSQL) another.

How it learns that something changed:

- every backend: the session's revision (``read_revision``: a ``stat`` for JSONL, one row for SQLite)
  is compared with the revision of the last read; only a changed revision is read, from the next
  expected seq. The revision is taken *before* the read, so an append racing the read is either in
  it or changes the revision again: nothing is skipped, and the expected seq keeps anything from
  being yielded twice.
- between checks a backend without a change signal is polled every ``poll_interval`` seconds;
  a backend with the optional ``wait_for_change(session_id, timeout_s) -> bool`` method (PostgreSQL,
  ``LISTEN/NOTIFY``) is waited on instead, for at most :data:`MAX_HINT_WAIT_S`. Its answer is a hint
  only: the revision is checked after every wait, whatever it returned, so a lost notification
  delays an event by at most that bound and never loses it. A following tail calls it once with a
  zero timeout before its first read, so the signal is already listening when that read is taken.

When the store goes away (``DATABASE_UNAVAILABLE``: a PostgreSQL server restarting, a dropped
connection, a call past its deadline), a tail with ``reconnect`` (the default of a following tail)
waits with exponential backoff (:data:`RECONNECT_FIRST_DELAY_S` doubling up to
:data:`RECONNECT_MAX_DELAY_S`) and tries again, for as long as it is iterated; it resumes at the next
expected seq, so nothing is skipped or yielded twice across the outage. The backend reconnects by
itself (its pooled and listening connections are replaced at the next call); the signal starts
listening again before the first read after the outage, as at the start.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DatabaseUnavailableError, InvalidOptionError, PersistenceError, SessionNotFoundError
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, FrozenDict
from .backend import WaitsForChange, validate_session_id

if TYPE_CHECKING:
    from .coordinator import PersistenceCoordinator

DEFAULT_POLL_INTERVAL_S = 0.2
"""How often a backend without a change signal is polled (seconds)."""

MAX_HINT_WAIT_S = 1.0
"""The longest one wait on a backend's change signal lasts before the revision is checked anyway."""

RECONNECT_FIRST_DELAY_S = 0.1
"""The wait before the first retry after the store became unavailable (seconds); it doubles per failure."""

RECONNECT_MAX_DELAY_S = 5.0
"""The longest wait between two retries of an unavailable store (seconds)."""

RetryHook = Callable[[DatabaseUnavailableError, int, float], None]
"""``on_retry(error, attempt, delay_s)``: called before each backoff wait (``attempt`` 1 for an outage's first)."""

logger = logging.getLogger("agentlog.persistence.tail")


def reconnect_delay(attempt: int) -> float:
    """The backoff before retry ``attempt`` (1-based) of an outage: doubling, capped."""
    return min(RECONNECT_MAX_DELAY_S, RECONNECT_FIRST_DELAY_S * float(1 << min(max(attempt, 1) - 1, 16)))


def _log_retry(err: DatabaseUnavailableError, attempt: int, delay: float) -> None:
    if attempt == 1:
        logger.warning("tail: the store is unavailable (%s); reconnecting with backoff", err)


def check_tail_options(from_seq: object, poll_interval: object) -> float:
    """Refuse a bad ``from_seq`` or ``poll_interval`` up front (``INVALID_OPTION``); the interval as a float."""
    if type(from_seq) is not int or not 0 <= from_seq <= MAX_SAFE_INTEGER:
        raise InvalidOptionError(f"tail from_seq must be a non-negative safe integer, got {from_seq!r}")
    if (
        type(poll_interval) not in (int, float)
        or not math.isfinite(poll_interval)  # type: ignore[arg-type]
        or not 0 < poll_interval <= 60  # type: ignore[operator]
    ):
        raise InvalidOptionError(f"tail poll_interval must be a number of seconds in (0, 60], got {poll_interval!r}")
    return float(poll_interval)  # type: ignore[arg-type]


async def tail_events(
    coordinator: PersistenceCoordinator,
    session_id: str,
    *,
    from_seq: int = 0,
    follow: bool = True,
    poll_interval: float = DEFAULT_POLL_INTERVAL_S,
    reconnect: bool | None = None,
    on_retry: RetryHook | None = None,
) -> AsyncIterator[FrozenDict]:
    """Yield the session's stored events with ``seq >= from_seq`` (frozen wire dicts), then, with
    ``follow``, each event as it is committed, until the consumer stops iterating (or is cancelled).

    Without ``follow`` it ends at the end of the log as stored when the tail started reading. A
    session that does not exist raises ``SessionNotFoundError``, at the first read or, when it is
    removed while followed, at the next check. The blocking backend calls run in worker threads, so
    the event loop stays free while a read or a wait is in progress.

    ``reconnect`` (default: ``follow``) keeps the tail going through ``DATABASE_UNAVAILABLE``: it
    retries with backoff until the store answers again and resumes at its next seq; ``on_retry`` is
    called before each backoff wait (by default the first of an outage is logged as a warning).
    Without it, that error ends the iteration. Any other error ends it either way.
    """
    import asyncio  # here, not at import: the coordinator imports this module, and its sync users never tail

    interval = check_tail_options(from_seq, poll_interval)
    backend = coordinator.backend
    validate_session_id(backend, session_id)
    retrying = follow if reconnect is None else bool(reconnect)
    report = on_retry if on_retry is not None else _log_retry
    wait: Callable[[str, float], Any] | None = backend.wait_for_change if isinstance(backend, WaitsForChange) else None
    next_seq = from_seq
    seen: str | None = None
    # Start listening before the first read, so a commit right after it is signalled (a signal that
    # only begins at the first wait would leave that commit to the bounded re-check).
    listen = follow and wait is not None
    failures = 0
    check_now = True  # at the start and right after a backoff; else only after a wait
    while True:
        events: Sequence[FrozenDict] = ()
        try:
            if not check_now:
                if wait is not None:
                    await asyncio.to_thread(wait, session_id, MAX_HINT_WAIT_S)
                else:
                    await asyncio.sleep(interval)
            check_now = False
            if listen and wait is not None:
                await asyncio.to_thread(wait, session_id, 0.0)
                listen = False
            revision = await asyncio.to_thread(backend.read_revision, session_id)
            if revision is None:
                raise SessionNotFoundError(f'session "{session_id}" not found')
            if revision != seen:
                snapshot = await asyncio.to_thread(coordinator.read_from, session_id, next_seq)
                seen = revision
                events = snapshot.events
        except DatabaseUnavailableError as err:
            if not retrying:
                raise
            failures += 1
            listen = follow and wait is not None  # the signal's connection may be gone too
            check_now = True
            delay = reconnect_delay(failures)
            report(err, failures, delay)
            await asyncio.sleep(delay)
            continue
        failures = 0
        for event in events:
            seq = event["seq"]
            if seq < next_seq:  # cannot happen for a contiguous log; never yield twice
                continue
            if seq != next_seq:
                raise PersistenceError(
                    f'session "{session_id}": tail expected seq {next_seq} but the store returned {seq}'
                )
            yield event
            next_seq += 1
        if not follow:
            return
