"""OpenTelemetry GenAI spans of agentlog sessions, live from a store and offline from stored logs (extra ``otel``).

Both paths feed the same pure mapping (:class:`~agentlog.telemetry.spans.SpanMapper`) and hand its span
descriptions to one tracer, so a session's spans have the same ids however they were produced:

- live, :func:`attach_otel` follows a :class:`~agentlog.SessionStore` through its lifecycle listeners
  (``on_created``, ``on_disposed``) and a worker thread reads each session's new events from a cursor
  when the store pauses (see :meth:`OtelExporter.attach`): an append costs nothing more, and a span ends
  once its closing event has been read, with the log's timestamps as start and end.
  The spans go to the tracer provider's processors (typically a ``BatchSpanProcessor`` with an OTLP
  exporter); a receiver that is down costs the agent nothing but dropped spans;
- offline, :func:`export_otlp` replays a stored session (and the subagent sessions it delegated to) and
  sends the spans to an OTLP/HTTP endpoint, failing with :class:`~agentlog.errors.OtelError` when the
  receiver refuses them (``agentlog export ID --to otlp [--endpoint URL]``).

With no SDK tracer provider (neither given nor set globally) nothing is mapped: the worker looks at the
global provider on each tick and follows the sessions from the first tick it finds an SDK one.

The ids are the log's, not random: the tracer's id generator is replaced by one that hands out the ids
the mapping derived from ``(session id, seq)`` for the span being started, and falls back to the
generator it replaced for any other span started through the same tracer.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import AgentlogError, OtelError, SessionNotFoundError
from ..kernel.events import REQUEST_CONTEXT, REQUEST_HEADER, SESSION_END_SEED, TOOL_RESULT
from .spans import SPAN_EVENT_TYPES, CaptureMode, SpanDescription, SpanMapper, capture_mode_from_env

try:
    from opentelemetry import context as context_api
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError as err:  # pragma: no cover - the extra is part of the test environment
    raise OtelError(
        f"OpenTelemetry spans need the otel extra ({err}): pip install 'agentlog[otel]'", code="OTEL_NOT_INSTALLED"
    ) from None

if TYPE_CHECKING:
    from ..kernel.session import Session
    from ..kernel.store import SessionStore
    from ..persistence.backend import Backend

__all__ = ["OtelExporter", "OtlpExportSummary", "attach_otel", "export_otlp", "export_spans"]

logger = logging.getLogger("agentlog.telemetry")

INSTRUMENTATION_SCOPE = "agentlog"
EXPORT_BATCH = 512
HANDOFF_SPANS = 1024
"""At most this many spans handed to the processors between two of their flushes (the SDK's batch queue
holds 2048 by default and drops what does not fit)."""
HANDOFF_TIMEOUT_MS = 2_000
IDLE_S = 0.25
"""The worker's tick: it maps once a whole tick passed without an append. Each tick takes the interpreter
lock from a busy agent once, so it is not shorter (the SDK's batch processor itself waits 5 s)."""
MAX_DELAY_S = 2.0
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class _LogIds(IdGenerator):
    """Hands out the ids of the span being started from the log (per thread), else the fallback's."""

    def __init__(self, fallback: IdGenerator) -> None:
        self.fallback = fallback
        self.local = threading.local()

    def generate_span_id(self) -> int:
        span_id: int | None = getattr(self.local, "span_id", None)
        if span_id is None:
            return self.fallback.generate_span_id()
        self.local.span_id = None
        return span_id

    def generate_trace_id(self) -> int:
        trace_id: int | None = getattr(self.local, "trace_id", None)
        if trace_id is None:
            return self.fallback.generate_trace_id()
        self.local.trace_id = None
        return trace_id

    def is_trace_id_random(self) -> bool:
        return False


def _tracer_of(provider: Any) -> tuple[Any, _LogIds]:
    tracer: Any = provider.get_tracer(INSTRUMENTATION_SCOPE, __version__)
    ids = tracer.id_generator
    if not isinstance(ids, _LogIds):
        ids = _LogIds(ids)
        tracer.id_generator = ids
    return tracer, ids


class OtelExporter:
    """Maps sessions' events to spans and starts and ends them on a tracer provider.

    ``tracer_provider``: an SDK ``TracerProvider`` (default: the global one, looked up again by the
    worker until an SDK provider is set). ``capture``: the content mode (default: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` variable; off unless it names a mode).
    ``redact``: applied to every content string before it leaves (the HTML export's hook fits).
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        *,
        capture: CaptureMode | None = None,
        redact: Callable[[str], str] | None = None,
        agent_name: str = "agentlog",
    ) -> None:
        provider = tracer_provider if tracer_provider is not None else trace_api.get_tracer_provider()
        self.enabled = isinstance(provider, TracerProvider)
        self.tracer_provider: Any = provider
        self._follow_global = tracer_provider is None
        self._timing = (IDLE_S, MAX_DELAY_S)
        self.capture: CaptureMode = capture if capture is not None else capture_mode_from_env(os.environ)
        self._views: dict[str, Callable[[int], Iterable[Any]]] = {}
        self.mapper = SpanMapper(
            capture=self.capture, redact=redact, agent_name=agent_name, messages_at=self._messages_at
        )
        self._lock = threading.RLock()
        self._unsubscribe: list[Callable[[], None]] = []
        self._cursors: dict[Any, int] = {}  # followed session -> the seq its next unread event will have
        self._arrivals: deque[Any] = deque()  # sessions created since the last flush
        self._departures: deque[Any] = deque()  # sessions disposed since the last flush
        self._stopping = threading.Event()
        self._worker: threading.Thread | None = None
        if self.enabled:
            self._tracer, self._ids = _tracer_of(self.tracer_provider)
        self.spans_started = 0
        self._handed = 0

    # -- feeding ------------------------------------------------------------------------------------------
    def add_session(
        self,
        session_id: str,
        header: Mapping[str, Any],
        first_live_seq: int = 0,
        messages_at: Callable[[int], Iterable[Any]] | None = None,
    ) -> None:
        """Announce a session before its events; ``messages_at(seq)`` gives the messages sent at ``seq``."""
        with self._lock:
            self.mapper.add_session(session_id, header, first_live_seq)
            if messages_at is not None:
                self._views[session_id] = messages_at

    def feed(self, session_id: str, event: Mapping[str, Any]) -> None:
        """One committed event of an announced session: ends (and exports) the spans it closes."""
        with self._lock:
            self._start_and_end(self.mapper.feed(session_id, event))

    def drain(self) -> None:
        """End the subagent turns still waiting for their parent's result, each as a trace of its own."""
        with self._lock:
            self._start_and_end(self.mapper.drain())

    def _messages_at(self, session_id: str, seq: int) -> Iterable[Any]:
        view = self._views.get(session_id)
        return view(seq) if view is not None else ()

    def _start_and_end(self, spans: Sequence[SpanDescription]) -> None:
        if not spans or not self.enabled:
            return
        tracer = self._tracer
        local = self._ids.local
        empty = context_api.Context()
        for description in spans:
            local.span_id = description.span_id
            if description.parent_span_id is None:
                local.trace_id = description.trace_id
                context = empty
            else:
                parent = SpanContext(description.trace_id, description.parent_span_id, False, _SAMPLED)
                context = trace_api.set_span_in_context(NonRecordingSpan(parent), empty)
            span = tracer.start_span(
                description.name,
                context=context,
                kind=SpanKind.CLIENT if description.kind == "client" else SpanKind.INTERNAL,
                attributes=description.start_attributes,
                start_time=description.start_ns,
                record_exception=False,
                set_status_on_exception=False,
            )
            local.span_id = None
            local.trace_id = None
            if description.attributes:
                span.set_attributes(description.attributes)
            for event in description.events:
                span.add_event(event.name, event.attributes, event.time_ns)
            if description.error_type is not None:
                span.set_status(Status(StatusCode.ERROR))  # no description: it could carry content
            span.end(end_time=description.end_ns)
            self.spans_started += 1

    # -- live ---------------------------------------------------------------------------------------------
    def attach(self, store: SessionStore, *, idle: float = IDLE_S, max_delay: float = MAX_DELAY_S) -> OtelExporter:
        """Follow ``store``: its sessions' events from now on, and every session created in it later
        (subagent children included).

        Nothing runs on the append path. The store's lifecycle listeners (``on_created``,
        ``on_disposed``) tell the exporter which sessions to follow, and a worker thread reads each
        one's new events from a cursor (the log is already in memory) once the store has been quiet for
        ``idle`` seconds (an agent waiting for its model), or when new events have waited ``max_delay``
        seconds (an agent that never pauses). The spans keep the log's times either way;
        :meth:`flush` and :meth:`close` read up to the end at once.
        """
        self._timing = (idle, max_delay)
        if not self.enabled and not self._follow_global:
            return self  # a provider that records nothing was given: there is nothing to follow
        with self._lock:
            for session in store.list():
                self._cursors[session] = session.seq  # what it wrote before is not this exporter's
        self._unsubscribe.append(store.on_created(self._on_created))
        self._unsubscribe.append(store.on_disposed(self._on_disposed))
        self._start_worker()
        return self

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, args=self._timing, name="agentlog-otel", daemon=True)
            self._worker.start()
            atexit.register(self.close)

    # The store's listeners run on the agent's threads: they only hand the session over (an atomic deque
    # append), never wait for the lock a flush holds while the processors export.
    def _on_created(self, session: Session) -> None:
        self._arrivals.append(session)

    def _on_disposed(self, session: Session) -> None:
        self._departures.append(session)  # read to its end, then forgotten, at the next flush

    def _admit(self) -> None:
        """Take the sessions the listeners handed over (under the lock)."""
        arrivals = self._arrivals
        for _ in range(len(arrivals)):
            self._cursors.setdefault(arrivals.popleft(), 0)

    def _written(self) -> int:
        return sum(session.seq for session in list(self._cursors))

    def _work(self, idle: float, max_delay: float) -> None:
        seen = -1
        since: float | None = None
        while not self._stopping.wait(idle):
            try:
                if not self.enabled and not self._enable_from_global():
                    continue
                with self._lock:
                    self._admit()
                    written = self._written()
                    waiting = written - sum(self._cursors.values())
                if waiting <= 0 and not self._departures:
                    seen, since = written, None
                    continue
                now = time.monotonic()
                if since is None:
                    since = now
                if written == seen or now - since >= max_delay:  # quiet for a tick, or waited long enough
                    self.flush()
                    since = None
                seen = written
            except Exception:  # the worker must outlive any one failure; the agent never sees it
                logger.exception("agentlog: mapping events to spans failed")

    def _enable_from_global(self) -> bool:
        """Following the global provider: an SDK provider set since is used from the next events on."""
        provider = trace_api.get_tracer_provider()
        with self._lock:
            self._admit()
            if not isinstance(provider, TracerProvider):
                for _ in range(len(self._departures)):
                    self._cursors.pop(self._departures.popleft(), None)
                for session in self._cursors:
                    self._cursors[session] = session.seq  # nothing recorded them: nothing to catch up on
                return False
            self.tracer_provider = provider
            self._tracer, self._ids = _tracer_of(provider)
            self.enabled = True
            return True

    def flush(self) -> None:
        """Read every followed session to its end now (in this thread) and end the spans that closes."""
        with self._lock:
            if not self.enabled and not (self._follow_global and self._enable_from_global()):
                return
            self._admit()
            departures = [self._departures.popleft() for _ in range(len(self._departures))]
            for session, cursor in list(self._cursors.items()):
                events = session.events  # a snapshot: appends of other threads do not change it
                if len(events) <= cursor:
                    continue
                session_id = session.id
                if not self.mapper.has_session(session_id):
                    self._announce(session, cursor)
                for event in events.outside_runs(cursor):
                    if event["type"] in SPAN_EVENT_TYPES:
                        try:
                            self._start_and_end(self.mapper.feed(session_id, event))
                        except Exception:
                            logger.exception(
                                'agentlog: span mapping of session "%s" failed at seq %s', session_id, event["seq"]
                            )
                        if self.spans_started - self._handed >= HANDOFF_SPANS:
                            # A long backlog: let the processors export what they hold before handing
                            # them more, so a bounded queue (the SDK batch processor's) drops nothing.
                            self._handed = self.spans_started
                            self.tracer_provider.force_flush(HANDOFF_TIMEOUT_MS)
                self._cursors[session] = len(events)
            for session in departures:
                if self._cursors.pop(session, None) is not None:
                    self.mapper.forget(session.id)
                    self._views.pop(session.id, None)

    def _announce(self, session: Session, cursor: int) -> None:
        """First events of a followed session: its header, and its route so far (a resumed or seeded log)."""
        mapper = self.mapper
        mapper.add_session(session.id, session.header, max(session.first_live_seq, cursor))
        if self.capture != "off":
            self._views[session.id] = lambda seq: session.at(seq).derive_messages()
        for event in session.events.prefix(cursor).outside_runs():  # packed chunk runs stay packed
            if event["type"] in (REQUEST_HEADER, REQUEST_CONTEXT):
                mapper.feed(session.id, event)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Read what is new, then ask the provider's processors to export what they hold (the receiver
        being down is no error)."""
        self.flush()
        if not self.enabled:
            return True
        return bool(self.tracer_provider.force_flush(timeout_millis))

    def close(self, *, flush: bool = True, timeout_millis: int = 5_000) -> None:
        """Unsubscribe, stop the worker, read what is new, end the held subagent turns, flush the
        provider's processors. The provider itself stays the caller's. Idempotent."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        worker = self._worker
        if worker is not None:
            self._stopping.set()
            if worker is not threading.current_thread():
                worker.join()
            atexit.unregister(self.close)
        self.flush()
        self.drain()
        if flush:
            self.force_flush(timeout_millis)


def attach_otel(
    store: SessionStore,
    tracer_provider: Any = None,
    *,
    capture: CaptureMode | None = None,
    redact: Callable[[str], str] | None = None,
    agent_name: str = "agentlog",
) -> OtelExporter:
    """Export ``store``'s sessions as GenAI spans while they are written; ``close()`` the result to stop."""
    return OtelExporter(tracer_provider, capture=capture, redact=redact, agent_name=agent_name).attach(store)


# --- offline -----------------------------------------------------------------------------------------------


def _first_live(header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> int:
    """The seq after a fork seed (its ``session/end-seed``), or 0: the seed is its parent's to export."""
    seed = header.get("seedLength")
    if isinstance(seed, int) and 0 <= seed < len(events) and events[seed]["type"] == SESSION_END_SEED:
        return seed + 1
    for event in events:
        if event["type"] == SESSION_END_SEED:
            return int(event["seq"]) + 1
    return 0


def _children(events: Iterable[Mapping[str, Any]]) -> list[str]:
    found: list[str] = []
    for event in events:
        if event["type"] != TOOL_RESULT:
            continue
        meta = event["data"].get("meta")
        record = meta.get("subagent") if isinstance(meta, Mapping) else None
        child = record.get("sessionId") if isinstance(record, Mapping) else None
        if isinstance(child, str) and child not in found:
            found.append(child)
    return found


def export_spans(open_view: Callable[[str], Any], session_id: str, exporter: OtelExporter) -> list[str]:
    """Replay ``session_id`` and its subagent sessions (at any depth) through ``exporter``.

    ``open_view(id)`` returns a stored session's view (``header``, ``events``, ``at(seq)``) or raises
    :class:`~agentlog.errors.SessionNotFoundError`. The ancestors of a subagent session are replayed too,
    so its spans join the delegating turn's trace, but only ``session_id`` and its descendants produce
    spans. Returns the exported session ids, parents before children.
    """
    views: dict[str, Any] = {}

    def view_of(sid: str) -> Any | None:
        if sid not in views:
            try:
                views[sid] = open_view(sid)
            except SessionNotFoundError:
                views[sid] = None
        return views[sid]

    target = view_of(session_id)
    if target is None:
        raise SessionNotFoundError(f'session "{session_id}" not found')
    # The chain of ancestors still stored, root first: replayed (mute) so the target joins their trace.
    chain: list[Any] = []
    seen = {session_id}
    header = target.header
    while header.get("origin") == "subagent" and isinstance(header.get("parentSession"), str):
        parent_id = header["parentSession"]
        parent = view_of(parent_id) if parent_id not in seen else None
        if parent is None:
            break
        seen.add(parent_id)
        chain.insert(0, parent)
        header = parent.header
    exported: list[str] = []
    replayed: set[str] = set()
    path = {view.id for view in chain} | {session_id}

    def replay(view: Any, emit: bool) -> None:
        events = list(view.events)
        sid = view.id
        replayed.add(sid)
        if emit:
            exported.append(sid)
        at = (lambda seq, v=view: v.at(seq).derive_messages()) if exporter.capture != "off" else None
        first_live = _first_live(view.header, events)
        exporter.add_session(sid, view.header, first_live, at)
        enabled = exporter.enabled
        exporter.enabled = enabled and emit  # an ancestor is replayed for its delegations, not its spans
        try:
            for event in events:
                if event["type"] in SPAN_EVENT_TYPES:
                    exporter.feed(sid, event)
        finally:
            exporter.enabled = enabled
        for child in _children(events[first_live:]):  # a fork's seed delegated for its parent, not for it
            if child in replayed or not (emit or child in path):
                continue
            child_view = view_of(child)
            if child_view is not None:
                replay(child_view, emit or child == session_id)

    replay(chain[0] if chain else target, not chain)
    if session_id not in replayed:  # no ancestor names it any more: a trace of its own
        replay(target, True)
    exporter.drain()
    return exported


@dataclass(frozen=True)
class OtlpExportSummary:
    endpoint: str | None
    sessions: list[str]
    spans: int


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def export_otlp(
    backend: Backend,
    session_id: str,
    *,
    endpoint: str | None = None,
    span_exporter: SpanExporter | None = None,
    capture: CaptureMode | None = None,
    redact: Callable[[str], str] | None = None,
    service_name: str = "agentlog",
    timeout: float = 10.0,
) -> OtlpExportSummary:
    """Send a stored session's spans (and its subagents') to an OTLP/HTTP receiver; raises on refusal.

    ``endpoint``: the traces URL (default: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, else ``http://localhost:4318/v1/traces``).
    ``span_exporter`` replaces the OTLP exporter (the SDK's in-memory one in tests).
    """
    from ..kernel.store import SessionStore
    from ..persistence.coordinator import PersistenceCoordinator

    if span_exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
        endpoint = getattr(span_exporter, "_endpoint", endpoint)
    collect = _Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(collect)
    exporter = OtelExporter(provider, capture=capture, redact=redact)
    reader = PersistenceCoordinator(SessionStore(), backend)
    try:
        sessions = export_spans(reader.view, session_id, exporter)
    finally:
        reader.close()
    try:
        for start in range(0, len(collect.spans), EXPORT_BATCH):
            result = span_exporter.export(collect.spans[start : start + EXPORT_BATCH])
            if result is not SpanExportResult.SUCCESS:
                raise OtelError(
                    f'the OTLP receiver did not accept the spans of session "{session_id}" '
                    f"(endpoint {endpoint}): is it running and reachable there?"
                )
    except AgentlogError:
        raise
    except Exception as err:
        raise OtelError(f"sending spans to {endpoint} failed: {type(err).__name__}") from None
    finally:
        span_exporter.shutdown()
        provider.shutdown()
    return OtlpExportSummary(endpoint, sessions, len(collect.spans))
