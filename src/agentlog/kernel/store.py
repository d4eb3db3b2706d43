"""The session store: live sessions, their lifecycle hooks, flush barriers and forks.

Hooks are plain callables. Their failure policy follows the original exactly, because persistence and
instrumentation rely on it: a ``created`` listener that raises vetoes the session (and the rollback is
paired with a ``disposed`` notification); ``event`` and ``disposed`` listener failures are contained
and logged; ``flush`` runs every listener, waits for all, then raises the first failure; a
``before_event`` interceptor that raises vetoes the append before anything is committed.

A :class:`Scope` is both an *owner lifetime* (disposing it detaches the sessions it created) and a
*carrier* (its hooks hear only the sessions created or entered through it).
"""

from __future__ import annotations

import builtins
import inspect
import logging
import secrets
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ..errors import (
    AsyncFlushInLoopError,
    SessionAnnouncedError,
    SessionAttachedError,
    SessionExistsError,
    SessionForkError,
    SessionLabelError,
    SessionNotLiveError,
    UnknownMetaKeyError,
    describe_error,
)
from . import labels as _labels
from ._listeners import observe_async
from .events import SESSION_FORMAT_VERSION, TURN_END, TURN_START, Event
from .jsonvalue import MAX_SAFE_INTEGER
from .session import (
    Clock,
    Session,
    attach,
    attachment_of,
    lock_of,
    refuse_if_disposed,
    release,
    wall_clock_ms,
)
from .surface import Plan

logger = logging.getLogger("agentlog")

_META_KEYS = ("cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset")
_SUPPORTED_META_KEYS = ("createdAt", *_META_KEYS)
_HOOKS = ("created", "event", "flush", "disposed", "before_event")


_mint_lock = threading.Lock()
_mint_last = [0, 0]  # (milliseconds, random part) of the last id minted by this process


def mint_session_id() -> str:
    """A unique, time-sortable session id: ``YYYYMMDDTHHMMSS-mmm-<12 hex>`` (UTC wall clock).

    The hex part is random (47 bits), so ids minted by different processes do not collide; within
    one process it increases strictly when the millisecond repeats (as a ULID's does), so ids sort in
    creation order. Only ``[0-9A-Za-z-]`` is used, which every backend stores verbatim.
    """
    with _mint_lock:
        ms = _time.time_ns() // 1_000_000
        last_ms, last_rand = _mint_last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = secrets.randbits(47)
        _mint_last[0], _mint_last[1] = ms, rand
    stamp = _time.strftime("%Y%m%dT%H%M%S", _time.gmtime(ms // 1000))
    return f"{stamp}-{ms % 1000:03d}-{rand:012x}"


class _Entry:
    __slots__ = (
        "announced",
        "announcing",
        "appending",
        "detach_requested",
        "detached",
        "id",
        "live",
        "scope",
        "session",
        "store",
    )

    def __init__(self, store: SessionStore, session: Session, scope: Scope | None) -> None:
        self.store = store
        self.id = session.id
        self.session = session
        self.scope = scope
        self.announced = False
        self.announcing = False
        self.appending = False
        self.detach_requested = False
        self.detached = False
        self.live = False  # announced and not vetoed

    def publish(self, session: Session, event: Event, plan: Plan, commit: Callable[[Event, Plan], None]) -> None:
        """Publish one append: the interceptors (raising vetoes it), ``commit``, then the event listeners."""
        store = self.store
        self.appending = True
        try:
            listeners = store._resolve(self, "event", (session, event))
            commit(event, plan)
            for listener in listeners:
                try:
                    result = listener(session, event)
                except Exception as err:
                    logger.warning(
                        'session "%s": session/event listener threw: %s', session.id, describe_error(err)
                    )
                    continue
                if result is not None and inspect.isawaitable(result):  # most listeners return None: one check
                    observe_async(result, f'session "{session.id}": session/event listener rejected: ')
        finally:
            self.appending = False
            if self.detach_requested and not self.announcing:
                store._detach_entered(self)


def _entry_of(session: Session) -> _Entry | None:
    return attachment_of(session)  # type: ignore[return-value]  # only this module attaches sessions


class _Outcome(NamedTuple):
    """What one flush listener did: returned a value, raised, or returned an awaitable to settle."""

    kind: Literal["ok", "err", "await"]
    value: Any


class _Hooks:
    """Registration surface shared by the store (global hooks) and scopes (carrier-bound hooks)."""

    _store: SessionStore
    _scope: Scope | None

    def _add(self, hook: str, fn: Callable[..., Any]) -> Callable[[], None]:
        if not callable(fn):
            raise TypeError(f"{hook} hook must be callable")
        record = (self._scope, fn)
        store = self._store
        listeners = store._listeners[hook]
        listeners.append(record)
        store._resolved.clear()
        removed = False

        def unsubscribe() -> None:
            nonlocal removed
            if not removed:
                removed = True
                try:
                    listeners.remove(record)
                except ValueError:
                    pass
                store._resolved.clear()

        if self._scope is not None:
            self._scope._unsubscribers.append(unsubscribe)
        return unsubscribe

    def on_created(self, fn: Callable[[Session], Any]) -> Callable[[], None]:
        """Called once when a session is announced; raising vetoes (rolls back) the creation."""
        return self._add("created", fn)

    def on_event(self, fn: Callable[[Session, Any], Any]) -> Callable[[], None]:
        """Called after each commit; failures are logged and never affect the append."""
        return self._add("event", fn)

    def on_flush(self, fn: Callable[[Session], Any]) -> Callable[[], None]:
        """Called by ``flush``/``aflush``; every listener runs, the first failure is raised."""
        return self._add("flush", fn)

    def on_disposed(self, fn: Callable[[Session], Any]) -> Callable[[], None]:
        """Called once after an announced session left the store; failures are logged."""
        return self._add("disposed", fn)

    def before_event(self, fn: Callable[[Session, Any], Any]) -> Callable[[], None]:
        """Pre-commit interceptor: sees the frozen candidate before it is logged; raising vetoes it."""
        return self._add("before_event", fn)


class Scope(_Hooks):
    """An owner lifetime and listener carrier. ``dispose()`` detaches what it owns and drops its hooks."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._scope = self
        self._detaches: list[Callable[[], None]] = []
        self._unsubscribers: list[Callable[[], None]] = []
        self.disposed = False

    def create(
        self,
        id: str | None = None,
        *,
        seed: Sequence[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        tags: Sequence[str] | None = None,
    ) -> Session:
        return self._store.create(id, seed=seed, meta=meta, owner=self, labels=labels, tags=tags)

    def enter(self, session: Session) -> Callable[[], None]:
        detach = self._store._enter(session, self)
        self._detaches.append(detach)
        return detach

    def add_disposer(self, fn: Callable[[], None]) -> None:
        if self.disposed:
            fn()
        else:
            self._detaches.append(fn)

    def dispose(self) -> None:
        if self.disposed:
            return
        self.disposed = True
        while self._detaches:
            self._detaches.pop()()
        while self._unsubscribers:
            self._unsubscribers.pop()()
        self._store._resolved.clear()  # drop cached snapshots keyed by this scope

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()


class SessionStore(_Hooks):
    """An in-memory registry of live sessions (persistence listens to its hooks)."""

    def __init__(self, *, now: Clock | None = None) -> None:
        self._store = self
        self._scope = None
        self._now: Clock = now or wall_clock_ms
        self._entries: dict[str, _Entry] = {}
        self._listeners: dict[str, list[tuple[Scope | None, Callable[..., Any]]]] = {h: [] for h in _HOOKS}
        self._resolved: dict[tuple[str, Scope | None], list[Callable[..., Any]]] = {}

    # -- building ----------------------------------------------------------------------------------
    def _mint_id(self) -> str:
        while True:
            candidate = mint_session_id()
            if candidate not in self._entries:
                return candidate

    def prepare(
        self,
        id: str | None = None,
        *,
        seed: Sequence[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        restore: bool = False,
    ) -> Session:
        """Build a session without registering or announcing it.

        With ``restore=True`` the seed and ``meta`` (the full stored header) come from persistence and
        are handed over without a copy.
        """
        if id is None:
            id = self._mint_id()
        elif id in self._entries:
            raise SessionExistsError(f'session "{id}" already exists')
        if restore:
            return Session.from_restore(id, seed if seed is not None else [], meta, now=self._now)
        meta = meta or {}
        _refuse_unknown_meta(meta)
        header: dict[str, Any] = {
            "version": SESSION_FORMAT_VERSION,
            "id": id,
            "createdAt": meta["createdAt"] if "createdAt" in meta else self._now(),
        }
        for key in _META_KEYS:
            if key in meta:
                header[key] = meta[key]
        return Session.create(id, seed, header, now=self._now)

    def enter(self, session: Session) -> Callable[[], None]:
        """Register ``session`` (without announcing it); return its idempotent detach function."""
        return self._enter(session, None)

    def _enter(self, session: Session, scope: Scope | None) -> Callable[[], None]:
        refuse_if_disposed(session)
        if session.id in self._entries:
            raise SessionExistsError(f'session "{session.id}" already exists')
        if attachment_of(session) is not None:
            raise SessionAttachedError(f'session "{session.id}" is already attached to a store')
        entry = _Entry(self, session, scope)
        self._entries[entry.id] = entry
        attach(session, entry)
        called = False

        def detach() -> None:
            nonlocal called
            if called:
                return
            called = True
            if entry.announcing or entry.appending:
                entry.detach_requested = True
            else:
                self._detach_entered(entry)

        return detach

    def _detach_entered(self, entry: _Entry) -> None:
        session = entry.session
        # Under the session's lock: an append on another thread either completes first (it was published,
        # so persistence flushes it on disposal) or sees the disposal and is refused - never in between.
        with lock_of(session):
            entry.detach_requested = False
            if self._entries.get(entry.id) is not entry:
                return
            del self._entries[entry.id]
            # A disposed session's later appends would reach no store: refuse them (SESSION_DISPOSED).
            # A vetoed publication never went live; its session may still be prepared again.
            release(session, dispose=entry.announced and entry.live)
            entry.detached = True
        if entry.announced:
            self._emit_disposed(entry)

    def _live_entry(self, session: Session) -> _Entry:
        entry = _entry_of(session)
        if entry is None or entry.store is not self or self._entries.get(session.id) is not entry:
            raise SessionNotLiveError(f'session "{session.id}" is not live in this store')
        return entry

    def announce(self, session: Session) -> None:
        """Publish ``session/created``; a listener that raises vetoes it (the caller rolls back)."""
        entry = self._live_entry(session)
        if entry.announced or entry.announcing:
            raise SessionAnnouncedError(f'session "{session.id}" was already announced')
        entry.announced = True
        entry.announcing = True
        try:
            for listener in self._resolve(entry, "created", (session,)):
                result = listener(session)
                if inspect.isawaitable(result):
                    observe_async(result, f'session "{session.id}": session/created listener rejected: ')
            entry.live = True
        finally:
            entry.announcing = False
            if entry.detach_requested and not entry.appending:
                self._detach_entered(entry)

    def create(
        self,
        id: str | None = None,
        *,
        seed: Sequence[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        owner: Scope | None = None,
        labels: Mapping[str, str] | None = None,
        tags: Sequence[str] | None = None,
    ) -> Session:
        """Prepare, register and announce a session; roll back (with a paired disposal) if vetoed.

        ``labels`` and ``tags`` are user metadata (:mod:`agentlog.kernel.labels`): checked before anything
        is built, then logged as the session's first own events (``session/labels``, ``session/tags``),
        so persistence stores them like any append. A refused one (an interceptor's veto) rolls the
        creation back as a vetoed announcement does.
        """
        label_changes = _labels.labels_change(labels) if labels is not None else {}
        for key, value in label_changes.items():
            if value is None:
                raise SessionLabelError(f'label "{key}" has no value: a new session sets labels, it removes none')
        tag_list = _labels.tags_change(tags) if tags is not None else []
        session = self.prepare(id, seed=seed, meta=meta)
        detach = self._enter(session, owner)
        if owner is not None:
            owner.add_disposer(detach)
        try:
            self.announce(session)
            if label_changes:
                session.set_labels(label_changes)
            if tag_list:
                session.add_tags(tag_list)
        except BaseException:
            detach()
            raise
        return session

    def dispose(self, session: Session) -> None:
        """Detach a live session (emits ``session/disposed`` if it was announced)."""
        entry = _entry_of(session)
        if entry is None or entry.store is not self:
            return
        if entry.announcing or entry.appending:
            entry.detach_requested = True
        else:
            self._detach_entered(entry)

    def get(self, id: str) -> Session | None:
        entry = self._entries.get(id)
        return entry.session if entry is not None else None

    def list(self) -> builtins.list[Session]:
        return [entry.session for entry in self._entries.values()]

    def __repr__(self) -> str:
        return f"<agentlog.SessionStore sessions={len(self._entries)}>"

    def scope(self) -> Scope:
        return Scope(self)

    # -- dispatch ----------------------------------------------------------------------------------
    def _resolve(self, entry: _Entry, hook: str, args: tuple[Any, ...]) -> builtins.list[Callable[..., Any]]:
        """The listener snapshot for one dispatch; ``event`` resolution runs the interceptors first.

        Snapshots are cached per (hook, scope) until a registration changes: every append of an
        attached session resolves ``event``, and re-filtering the registrations each time is waste.
        Callers never mutate a snapshot, and a registration made during a dispatch clears the cache
        without touching the snapshot already being iterated.
        """
        scope = entry.scope
        if hook == "event":
            for interceptor in self._snapshot("before_event", scope):
                interceptor(*args)
        return self._snapshot(hook, scope)

    def _snapshot(self, hook: str, scope: Scope | None) -> builtins.list[Callable[..., Any]]:
        key = (hook, scope)
        snapshot = self._resolved.get(key)
        if snapshot is None:
            snapshot = [fn for owner, fn in self._listeners[hook] if owner is None or owner is scope]
            self._resolved[key] = snapshot
        return snapshot

    def _emit_disposed(self, entry: _Entry) -> None:
        session = entry.session
        try:
            listeners = self._resolve(entry, "disposed", (session,))
        except Exception as err:
            logger.warning('session "%s": session/disposed dispatch threw: %s', entry.id, describe_error(err))
            return
        for listener in listeners:
            try:
                result = listener(session)
            except Exception as err:
                logger.warning('session "%s": session/disposed listener threw: %s', entry.id, describe_error(err))
                continue
            if inspect.isawaitable(result):
                observe_async(result, f'session "{entry.id}": session/disposed listener rejected: ')

    def _start_flush(self, session: Session) -> builtins.list[_Outcome]:
        entry = self._live_entry(session)
        outcomes: builtins.list[_Outcome] = []
        for listener in self._resolve(entry, "flush", (session,)):
            try:
                result = listener(session)
            except Exception as err:
                outcomes.append(_Outcome("err", err))
                continue
            # (``None``, every synchronous listener's result, skips isawaitable's ABC check.)
            awaitable = result is not None and inspect.isawaitable(result)
            outcomes.append(_Outcome("await", result) if awaitable else _Outcome("ok", result))
        return outcomes

    def flush(self, session: Session) -> bool:
        """Run every flush listener, wait for all, raise the first failure; True if any participated."""
        outcomes = self._start_flush(session)
        pending = [value for kind, value in outcomes if kind == "await"]
        if pending:
            import asyncio  # here, not at import: only an awaitable flush listener needs it

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                settled = iter(asyncio.run(_settle(pending)))
            else:
                for aw in pending:
                    close = getattr(aw, "close", None)
                    if callable(close):
                        close()
                raise AsyncFlushInLoopError(
                    "an async flush listener cannot be awaited by flush() inside a running event loop; "
                    "use 'await store.aflush(session)'"
                )
            return _first_failure_or_participation(outcomes, settled)
        return _first_failure_or_participation(outcomes, iter(()))

    async def aflush(self, session: Session) -> bool:
        """Async form of :meth:`flush` (listeners may be coroutines; all settle before raising)."""
        outcomes = self._start_flush(session)
        pending = [value for kind, value in outcomes if kind == "await"]
        settled = iter(await _settle(pending)) if pending else iter(())
        return _first_failure_or_participation(outcomes, settled)

    # -- fork ----------------------------------------------------------------------------------------
    def fork(self, source: Session | str, boundary: int | None = None, child_id: str | None = None) -> Session:
        """Create a live child from a closed-turn prefix of a live session (lineage in its header)."""
        if child_id is not None and child_id in self._entries:
            raise SessionForkError(f'session "{child_id}" already exists', "SESSION_ALREADY_EXISTS")
        if isinstance(source, str):
            entry = self._entries.get(source)
            if entry is None:
                raise SessionForkError(f'session "{source}" not found', "SESSION_NOT_FOUND")
            live = entry.session
        elif isinstance(source, Session):
            entry = self._entries.get(source.id)
            if entry is None:
                raise SessionForkError(f'session "{source.id}" not found', "SESSION_NOT_FOUND")
            if entry.session is not source:
                raise SessionForkError(
                    f'session "{source.id}" is not the live store instance', "SESSION_NOT_LIVE"
                )
            live = source
        else:
            raise SessionForkError(
                f"fork source must be a session or a session id, got {source!r}", "SESSION_NOT_FOUND"
            )
        sid = live.id
        events = live.events
        seed = builtins.list(events[: fork_seed_length(events, boundary, sid)])
        meta: dict[str, Any] = {}
        if "cwd" in live.header:
            meta["cwd"] = live.header["cwd"]
        meta["parentSession"] = sid
        meta["seedLength"] = len(seed)
        return self.create(child_id, seed=seed, meta=meta)


def _refuse_unknown_meta(meta: Mapping[str, Any]) -> None:
    """Refuse a ``meta`` key the header has no field for (it used to be dropped without a word)."""
    unknown = [key for key in meta if key not in _SUPPORTED_META_KEYS]
    if unknown:
        shown = ", ".join(repr(key) for key in unknown)
        raise UnknownMetaKeyError(
            f"create(meta=...) does not know {shown}: the header fields it sets are "
            f"{', '.join(_SUPPORTED_META_KEYS)}; put user metadata in labels= (key=value strings) or tags= "
            f"instead, for example create(labels={{'user': 'bob'}}, tags=['eval'])"
        )


def fork_seed_length(events: Sequence[Mapping[str, Any]], boundary: int | None, session_id: str) -> int:
    """How many leading events a fork of ``events`` at ``boundary`` inherits, or the refusal.

    The fork's whole validation (the original's checks and texts, spec core-session §12) as a pure
    function of the log, so a caller holding only a read-only copy of a stored session (the CLI) can
    refuse a bad boundary before it loads the session for writing: a refused fork then writes nothing.
    ``None`` is the log's last event (an empty log forks as an empty seed). An ``OPEN_TURN`` refusal
    names the nearest boundaries that are accepted: the event just before the turn started and the
    turn's own ``turn/end``.
    """
    if boundary is None:
        if not events:
            return 0
        boundary = events[-1]["seq"]
    if type(boundary) is not int or not 0 <= boundary <= MAX_SAFE_INTEGER:
        shown: object = boundary
        if isinstance(shown, float) and shown.is_integer():
            shown = int(shown)
        raise SessionForkError(
            f'fork boundary for session "{session_id}" must be a non-negative safe integer, got {shown}',
            "INVALID_BOUNDARY",
        )
    if boundary >= len(events):
        last = events[-1]["seq"] if events else "none"
        raise SessionForkError(
            f'fork boundary {boundary} does not exist in session "{session_id}" (last seq: {last})',
            "INVALID_BOUNDARY",
        )
    if events[boundary]["seq"] != boundary:
        raise SessionForkError(
            f'fork boundary {boundary} does not match a contiguous event seq in session "{session_id}"',
            "INVALID_BOUNDARY",
        )
    for index in range(boundary, -1, -1):
        etype = events[index]["type"]
        if etype == TURN_END:
            break
        if etype == TURN_START:
            data = events[index]["data"]
            turn = data.get("turn") if isinstance(data, Mapping) else None
            raise SessionForkError(
                f'fork boundary {boundary} in session "{session_id}" ends inside open turn {turn}: '
                + _nearest_closed_boundaries(events, index, boundary, turn),
                "OPEN_TURN",
            )
    return boundary + 1


def _nearest_closed_boundaries(events: Sequence[Mapping[str, Any]], start: int, boundary: int, turn: object) -> str:
    """The remedy of an ``OPEN_TURN`` refusal: the accepted boundaries on either side of the open turn
    that starts at index ``start`` (the seq before its ``turn/start``, and its ``turn/end`` if logged)."""
    before = start - 1 if start > 0 else None
    after = next((i for i in range(boundary + 1, len(events)) if events[i]["type"] == TURN_END), None)
    if before is not None and after is not None:
        return (
            f"the nearest closed-turn boundaries are {before} (before turn {turn} started) and {after} (its turn/end)"
        )
    if before is not None:
        return f"the nearest closed-turn boundary is {before} (before turn {turn} started); turn {turn} has not ended"
    if after is not None:
        return f"the nearest closed-turn boundary is {after} (its turn/end); turn {turn} opens the log"
    return f"turn {turn} opens the log and has not ended, so no boundary up to now is closed"


async def _settle(awaitables: builtins.list[Any]) -> builtins.list[Any]:
    import asyncio

    return await asyncio.gather(*awaitables, return_exceptions=True)


def _first_failure_or_participation(outcomes: builtins.list[_Outcome], settled: Iterator[Any]) -> bool:
    """Raise the first failure in listener order (awaited results taken from ``settled`` in order);
    otherwise whether any listener participated."""
    for kind, value in outcomes:
        if kind == "await":
            value = next(settled)
            kind = "err" if isinstance(value, BaseException) else "ok"
        if kind == "err":
            raise value
    return bool(outcomes)


def store_of(session: Session) -> SessionStore | None:
    """The store ``session`` is live in, or ``None`` (never entered, detached or disposed)."""
    entry = _entry_of(session)
    if entry is None or entry.detached or entry.store._entries.get(entry.id) is not entry:
        return None
    return entry.store
