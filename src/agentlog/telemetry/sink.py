"""The telemetry sink contract and its capture side (runtime spec §6.11).

A :class:`TelemetrySink` is whatever ships records somewhere (a log pipeline, a collector, a file):
``emit(record)``, an optional ``flush()`` hint and ``shutdown()``. :class:`SessionTelemetry` attaches to
a :class:`~agentlog.kernel.store.SessionStore` through its hooks and hands the sink one
:class:`~agentlog.telemetry.records.TelemetryRecord` per committed event (see
:mod:`agentlog.telemetry.records` for the shapes and the redact waterfall), plus the two operational
records, ``agent-error`` (:meth:`SessionTelemetry.watch` an agent) and ``shutdown``.

**Why a queue and a thread.** Store listeners run inside the append they observe, and the original
requires ``emit`` to be a non-blocking enqueue for that reason; it leaves queueing to the reporting
SDK. Here a sink is any Python object, so the capture side never trusts it with the append path: the
listener only decides *whether* an event ships (the chunk projection and the handoff cursor) and offers
it to a bounded queue, which never waits — when the queue is full the record is dropped and counted.
A replay (an adoption, :meth:`~SessionTelemetry.capture_session`) is one queue item however long
the log, so it is never cut short by the bound. One daemon worker thread builds each record (the deep
copy, the redact rules) and calls the sink. So a slow sink costs records, never appends; a sink that
raises is reported once (a warning, ``on_error``, :attr:`SessionTelemetry.error`, a
:class:`~agentlog.errors.TelemetrySinkError`) and counted after that; a sink that never returns stalls
only its own thread, and :meth:`SessionTelemetry.close` gives up on it after ``timeout`` seconds with
``TELEMETRY_SINK_STALLED``. Asyncio users need nothing else: the store
calls listeners synchronously in the appending thread, loop or not, and ``await telemetry.aclose()``
waits off the loop.

**What ships** (the original's rules):

* every committed event of an adopted session, whole — plugin types included — except that only the
  first ``assistant/chunk`` of each ``(turn, step)`` ships (the stream-started signal; the content is
  complete in the step's ``assistant/message``), so ``seq`` gaps are routine on the wire;
* a session is *adopted* when announced (``on_created``) or, for sessions already live when the
  telemetry attaches, by a sweep of ``store.list()``; adoption replays the log after the session's
  **handoff cursor** — the highest seq handed off, kept per session object and telemetry ``name`` for
  the process (a weak map, so a later :class:`SessionTelemetry` of the same name resumes instead of
  re-sending) —
  and the cursor of a session never handed off starts at ``first_live_seq - 1``: a constructor seed
  (a resumed session's stored history, a fork's inherited prefix) is never exported again. Events at or
  below the cursor still feed the chunk projection, so a resumed step's later chunks stay dropped;
* ``shutdown`` when an adopted session is disposed, or at :meth:`~SessionTelemetry.close` for the
  sessions still live; ``agent-error`` when a watched agent's turn fails.

Delivery is at most once: the cursor marks handed off, not delivered (a dropped or failed record is not
re-sent), and a receiver dedupes ledger records on ``(session.id, event.seq)``. ``capture="on-demand"``
subscribes to nothing: :meth:`~SessionTelemetry.capture_session` hands over the log prefix past the
cursor when called (the original's feedback-gated sharing).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

from ..errors import InvalidOptionError, TelemetrySinkError, describe_error
from ..kernel.session import Session, wall_clock_ms
from ..kernel.store import SessionStore
from .records import (
    TelemetryRecord,
    TelemetryRule,
    agent_error_record,
    chunk_key,
    ledger_record,
    redact_strings,
    run_rules,
    shutdown_record,
)

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT_S",
    "DEFAULT_MAX_QUEUE",
    "SessionTelemetry",
    "TelemetryCapture",
    "TelemetrySink",
    "TelemetryStats",
]

logger = logging.getLogger("agentlog")

TelemetryCapture: TypeAlias = Literal["live", "on-demand"]

DEFAULT_MAX_QUEUE: Final = 4096
"""Records that may wait for a slow sink before new ones are dropped."""
DEFAULT_CLOSE_TIMEOUT_S: Final = 5.0
"""How long :meth:`SessionTelemetry.close` waits for the sink to drain and shut down."""


@runtime_checkable
class TelemetrySink(Protocol):
    """What ships records. ``emit`` is called from the telemetry's worker thread, one record at a time,
    in capture order; it owns the record after the call. ``shutdown`` runs once, after the last
    ``emit``, and may return an awaitable (run to completion on the worker). An optional ``flush()``
    (a method, not part of this protocol) is called after each durability barrier of an adopted
    session — a hint; most sinks leave it out and batch on their own schedule."""

    def emit(self, record: TelemetryRecord) -> None: ...

    def shutdown(self) -> object: ...


@dataclass(frozen=True, slots=True)
class TelemetryStats:
    """Counters since the telemetry started: what the sink accepted, and what was lost where."""

    delivered: int
    """Records whose ``emit`` returned."""
    dropped: int
    """Records not queued because the queue was full (a slow or stalled sink)."""
    failed: int
    """Records whose ``emit`` raised."""
    withheld: int
    """Records a redaction rule raised on (fail closed: never sent)."""
    queued: int
    """Records waiting for the sink now."""


class _ErrorReporting(Protocol):
    """What :meth:`SessionTelemetry.watch` needs of an agent (:class:`agentlog.agent.loop.Agent`)."""

    session: Session
    error_hooks: list[Callable[[Any, int, int, BaseException], None]]


# The handoff cursor: per session object and telemetry name, the highest seq handed over in this process.
# Module scope on purpose (the original's too): it must outlive one SessionTelemetry so a replacement
# resumes instead of re-sending, and it dies with its session. The original has one telemetry backend per
# context; here a store may feed several sinks at once, so each live telemetry of a store has its own name
# (and cursor), and a second live one of the same name is refused.
_handoff: weakref.WeakKeyDictionary[Session, dict[str, int]] = weakref.WeakKeyDictionary()
_live_names: weakref.WeakKeyDictionary[SessionStore, set[str]] = weakref.WeakKeyDictionary()
_handoff_lock = threading.Lock()


def _cursors_of(session: Session) -> dict[str, int]:
    """The session's cursors by telemetry name (one telemetry of a name is open at a time, so each entry
    has one writer; a plain item read or write needs no lock)."""
    with _handoff_lock:
        cursors = _handoff.get(session)
        if cursors is None:
            cursors = _handoff[session] = {}
        return cursors


class _Track:
    """What one telemetry keeps per session: its cursors entry and the chunk projection's ``(turn, step)``
    keys already shipped (rebuilt from the log when a session is adopted again)."""

    __slots__ = ("cursors", "header", "id", "seen")

    def __init__(self, session: Session) -> None:
        self.cursors = _cursors_of(session)
        self.seen: set[tuple[Any, Any]] = set()
        self.id = session.id
        self.header = session.header


_FLUSH: Final = ("flush",)


class _Channel:
    """A bounded FIFO that never blocks its producer (a full channel refuses) and that ``stop`` closes
    even when full (the stop is a flag, not an item)."""

    def __init__(self, maxsize: int) -> None:
        self._items: deque[tuple[Any, ...]] = deque()
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self._pending = 0  # offered and not yet finished by the worker
        self._stopped = False

    def offer(self, item: tuple[Any, ...]) -> bool:
        with self._cond:
            items = self._items
            if self._stopped or len(items) >= self._maxsize:
                return False
            items.append(item)
            self._pending += 1
            if len(items) == 1:  # the worker waits only on an empty queue: wake it only then
                self._cond.notify_all()
            return True

    def take(self) -> tuple[Any, ...] | None:
        """The next item; ``None`` once stopped and empty."""
        with self._cond:
            while not self._items and not self._stopped:
                self._cond.wait()
            return self._items.popleft() if self._items else None

    def done(self) -> None:
        with self._cond:
            self._pending -= 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)


class SessionTelemetry:
    """Reports the sessions of ``store`` to ``sink`` (see the module docstring for what ships when).

    ``rules`` is the redact waterfall (first = outermost; :meth:`add_rule` mounts more later);
    ``redact`` is a plain ``str -> str`` function applied to every string of every body, innermost,
    before the rules see the record. ``max_queue`` bounds the records waiting for the sink.
    ``on_error`` is called once, from the worker thread, with the first
    :class:`~agentlog.errors.TelemetrySinkError`. ``now`` (epoch ms) stamps the operational records.
    ``name`` keys the handoff cursor: a telemetry opened after a closed one of the same name resumes where
    that one stopped; two telemetries open on one store at once need different names (each then sees
    every event).
    Close with :meth:`close` (or ``with``, or ``await aclose()``).
    """

    def __init__(
        self,
        store: SessionStore,
        sink: TelemetrySink,
        *,
        capture: TelemetryCapture = "live",
        rules: Sequence[TelemetryRule] = (),
        redact: Callable[[str], str] | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        on_error: Callable[[TelemetrySinkError], None] | None = None,
        now: Callable[[], int] | None = None,
        name: str = "default",
    ) -> None:
        if not callable(getattr(sink, "emit", None)) or not callable(getattr(sink, "shutdown", None)):
            raise InvalidOptionError(
                f"telemetry sink {type(sink).__name__} must have emit(record) and shutdown() methods"
            )
        if capture not in ("live", "on-demand"):
            raise InvalidOptionError(f'telemetry capture must be "live" or "on-demand", not {capture!r}')
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise InvalidOptionError(f"telemetry max_queue must be a positive integer, not {max_queue!r}")
        for rule in rules:
            if not callable(rule):
                raise InvalidOptionError("every telemetry rule must be callable: rule(record, next) -> record")
        if redact is not None and not callable(redact):
            raise InvalidOptionError("telemetry redact must be a callable str -> str")
        if not isinstance(name, str) or not name:
            raise InvalidOptionError("telemetry name must be a non-empty string")
        with _handoff_lock:
            names = _live_names.setdefault(store, set())
            if name in names:
                raise InvalidOptionError(
                    f'a telemetry named "{name}" is already open on this store; close it first, or give this '
                    "one another name= (each name keeps its own handoff cursor)"
                )
            names.add(name)
        self.name = name
        self.store = store
        self.sink = sink
        self.capture: TelemetryCapture = capture
        self._rules: list[TelemetryRule] = list(rules)
        self._redact_rule = redact_strings(redact) if redact is not None else None
        self._on_error = on_error
        self._now = now or wall_clock_ms
        self._lock = threading.RLock()  # adoption, the chunk projection, closing
        self._adopted: set[Session] = set()
        self._tracks: weakref.WeakKeyDictionary[Session, _Track] = weakref.WeakKeyDictionary()
        self._closed = False
        self._channel = _Channel(max_queue)
        self._counts_lock = threading.Lock()
        self._delivered = self._dropped = self._failed = self._withheld = 0
        self._error: TelemetrySinkError | None = None
        self._rule_warned = False
        self._worker = threading.Thread(target=self._work, name="agentlog-telemetry", daemon=True)
        self._worker.start()
        self._unsubscribe: list[Callable[[], None]] = []
        if capture == "live":
            self._unsubscribe = [
                store.on_created(self._adopt),
                store.on_event(self._on_event),
                store.on_flush(self._on_flush),
                store.on_disposed(self._on_disposed),
            ]
            for session in store.list():  # already live: no on_created will come for them
                self._adopt(session)

    # -- reading -----------------------------------------------------------------------------------
    @property
    def error(self) -> TelemetrySinkError | None:
        """The first sink failure (the one reported), or ``None``."""
        return self._error

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> TelemetryStats:
        with self._counts_lock:
            return TelemetryStats(self._delivered, self._dropped, self._failed, self._withheld, len(self._channel))

    # -- configuration -----------------------------------------------------------------------------
    def add_rule(self, rule: TelemetryRule) -> Callable[[], None]:
        """Mount one more redaction rule, innermost of the mounted ones; returns its remover. It applies to
        records the worker builds from now on (records are built on the worker, just before ``emit``)."""
        if not callable(rule):
            raise InvalidOptionError("a telemetry rule must be callable: rule(record, next) -> record")
        with self._lock:
            self._rules = [*self._rules, rule]

        def remove() -> None:
            with self._lock:
                self._rules = [r for r in self._rules if r is not rule]

        return remove

    def watch(self, agent: _ErrorReporting) -> Callable[[], None]:
        """Report ``agent``'s failed turns as ``agent-error`` records; returns the unwatch function."""

        def hook(subject: Any, turn: int, step: int, error: BaseException) -> None:
            if self._closed:
                return
            session_id = subject.session.id
            record = agent_error_record(session_id, session_id, turn, step, error, self._now())
            self._offer(("ops", record))

        agent.error_hooks.append(hook)

        def unwatch() -> None:
            if hook in agent.error_hooks:
                agent.error_hooks.remove(hook)

        return unwatch

    # -- capture -----------------------------------------------------------------------------------
    def capture_session(self, session: Session, through_seq: int | None = None) -> None:
        """Hand over ``session``'s log past its handoff cursor, through ``through_seq`` (inclusive) when
        given. Live capture adopts with it; on demand, it is the only way records are made."""
        with self._lock:
            if self._closed:
                return
            track = self._track(session)
            cursor = track.cursors.get(self.name)
            if cursor is None:
                cursor = session.first_live_seq - 1  # never handed over: the seed stays where it came from
            # One queue item for the whole replay (the events are the log's own frozen ones): a long log
            # neither overflows the bound meant for a slow sink nor makes this call wait for room.
            batch: list[Mapping[str, Any]] = []
            for event in session.events:
                seq = event["seq"]
                if through_seq is not None and seq > through_seq:
                    break
                key = chunk_key(event)
                if seq <= cursor:
                    if key is not None:
                        track.seen.add(key)  # feeds the projection, ships nothing
                    continue
                if key is not None:
                    if key in track.seen:
                        continue
                    track.seen.add(key)
                batch.append(event)
            if batch and self._offer(("batch", track.id, track.header, batch), len(batch)):
                track.cursors[self.name] = batch[-1]["seq"]

    def _adopt(self, session: Session) -> None:
        # An on_created listener that raises vetoes the session: telemetry must never do that.
        try:
            with self._lock:
                if self._closed or session in self._adopted:
                    return
                self._adopted.add(session)
                self.capture_session(session)
        except Exception as err:
            logger.warning('telemetry: adopting session "%s" failed: %s', session.id, describe_error(err))

    def _on_event(self, session: Session, event: Mapping[str, Any]) -> None:
        # The append path: a few lookups and a queue offer, nothing that can wait on the sink.
        with self._lock:
            if self._closed:
                return
            track = self._tracks.get(session) or self._track(session)
            cursor = track.cursors.get(self.name)
            if cursor is not None and event["seq"] <= cursor:
                return  # an adoption sweep on another thread already handed it over
            self._capture(track, event)

    def _capture(self, track: _Track, event: Mapping[str, Any]) -> None:
        key = chunk_key(event)
        if key is not None:
            if key in track.seen:
                return  # dropped by the projection: it never advances the cursor
            track.seen.add(key)
        if self._offer(("ledger", track.id, track.header, event)):
            track.cursors[self.name] = event["seq"]

    def _track(self, session: Session) -> _Track:
        track = self._tracks.get(session)
        if track is None:
            track = self._tracks[session] = _Track(session)
        return track

    def _on_flush(self, session: Session) -> None:
        # Returns at once: the durability barrier this rides on must never wait for telemetry.
        if not self._closed and session in self._adopted and callable(getattr(self.sink, "flush", None)):
            self._channel.offer(_FLUSH)

    def _on_disposed(self, session: Session) -> None:
        with self._lock:
            if self._closed or session not in self._adopted:
                return  # never adopted (a vetoed announcement): a marker would be noise
            self._adopted.discard(session)
            self._offer(("ops", shutdown_record(session.id, self._now())))

    def _offer(self, item: tuple[Any, ...], records: int = 1) -> bool:
        if self._channel.offer(item):
            return True
        with self._counts_lock:
            self._dropped += records
        return False

    # -- the worker --------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._channel.take()
            if item is None:
                break
            try:
                self._handle(item)
            finally:
                self._channel.done()
        try:
            _settle(self.sink.shutdown())
        except Exception as err:
            self._report(f"telemetry sink {type(self.sink).__name__}.shutdown raised {describe_error(err)}", err)

    def _handle(self, item: tuple[Any, ...]) -> None:
        if item is _FLUSH:
            try:
                _settle(self.sink.flush())  # type: ignore[attr-defined]  # checked when queued
            except Exception as err:
                self._report(f"telemetry sink {type(self.sink).__name__}.flush raised {describe_error(err)}", err)
            return
        kind = item[0]
        if kind == "batch":
            _, session_id, header, events = item
            for event in events:
                self._deliver(ledger_record, session_id, header, event)
        elif kind == "ledger":
            self._deliver(ledger_record, item[1], item[2], item[3])
        else:
            self._deliver(_given, item[1])

    def _deliver(self, build: Callable[..., TelemetryRecord], *args: Any) -> None:
        """Build one record, pass it through the rules and hand it to the sink, each failure contained."""
        try:
            record = build(*args)
            rules = self._rules if self._redact_rule is None else [*self._rules, self._redact_rule]
            if rules:
                record = run_rules(rules, record)
        except Exception as err:
            with self._counts_lock:
                self._withheld += 1
                warn, self._rule_warned = not self._rule_warned, True
            if warn:
                logger.warning(
                    "telemetry: a redaction rule raised %s; that record is withheld (fail closed), and later "
                    "withheld records are only counted (stats().withheld)",
                    describe_error(err),
                )
            return
        try:
            self.sink.emit(record)
        except Exception as err:
            with self._counts_lock:
                self._failed += 1
            self._report(f"telemetry sink {type(self.sink).__name__}.emit raised {describe_error(err)}", err)
            return
        with self._counts_lock:
            self._delivered += 1

    def _report(self, message: str, cause: BaseException | None, code: str = "TELEMETRY_SINK_FAILED") -> None:
        """Surface the first failure, once; later ones are counted by their callers only."""
        with self._counts_lock:
            if self._error is not None:
                return
            error = TelemetrySinkError(
                f"{message}; the session log is unaffected, later sink failures are only counted "
                "(stats()); fix or replace the sink",
                code,
            )
            error.__cause__ = cause
            self._error = error
        logger.warning("%s", error)
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception as err:
                logger.warning("telemetry: on_error raised %s", describe_error(err))

    # -- closing -----------------------------------------------------------------------------------
    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every record queued so far was handled by the sink; False if ``timeout`` passed first."""
        return self._channel.wait_idle(timeout)

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop capturing, queue the ``shutdown`` record of each session still adopted, let the sink drain
        and shut down, and wait up to ``timeout`` seconds for it. A sink still busy then is reported
        (``TELEMETRY_SINK_STALLED``) and left behind on its daemon thread. Never raises. Idempotent."""
        with self._lock:
            if self._closed:
                return
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            sessions = list(self._adopted)
            self._adopted.clear()
            now = self._now()
            for session in sessions:
                self._offer(("ops", shutdown_record(session.id, now)))
            self._closed = True
        with _handoff_lock:
            _live_names.get(self.store, set()).discard(self.name)
        self._channel.stop()
        if threading.current_thread() is self._worker:
            return  # closed from inside the sink: the worker finishes on its own after this call
        self._worker.join(timeout)
        if self._worker.is_alive():
            self._report(
                f"telemetry sink {type(self.sink).__name__} was still busy {timeout:g} s after close(); "
                f"{len(self._channel)} queued records stay with its daemon thread",
                None,
                "TELEMETRY_SINK_STALLED",
            )

    async def aclose(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """:meth:`close` without blocking the running event loop."""
        await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> SessionTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.capture
        return f"<agentlog.SessionTelemetry {state} sessions={len(self._adopted)} sink={type(self.sink).__name__}>"


def _given(record: TelemetryRecord) -> TelemetryRecord:
    return record


def _settle(result: object) -> None:
    """Run a sink method's awaitable result to completion on the worker thread (it has no loop of its own)."""
    if inspect.isawaitable(result):

        async def wait() -> None:
            await result

        asyncio.run(wait())
