"""The projection registry (runtime spec §2.1–§2.4): per-session unit states, the change feed, checkpoints.

A :class:`~agentlog.projection.units.ProjectionUnit` is a pure reducer over committed events. The
registry keeps one *cell* per (session, unit) — the unit's state after the session's log up to a
watermark — and serves three read faces from them: :meth:`ProjectionRegistry.snapshot` (the validated
views of the client-visible units, one consistent cut), :meth:`~ProjectionRegistry.state_of` (one unit's
host state) and :meth:`~ProjectionRegistry.checkpoint` (every unit's state as detached checkpoint rows,
the write side of the persisted cache). The cold read (:meth:`~ProjectionRegistry.restore_floor`,
:meth:`~ProjectionRegistry.view_checkpoint`, :meth:`~ProjectionRegistry.restore`) folds stored rows and a
log tail without a live session: rows are shortcuts, "possibly stale, never wrong".

**Drive.** Every read brings the session's cells up to the end of its log first (folding only the events
the cells have not seen; a cell that does not exist yet folds the log from the unit's initial state), so
a read is always exact. With a store attached (``ProjectionRegistry(store)`` or :meth:`attach`) the
registry drives eagerly on every committed event — each unit, in registration order, then one
notification per client-visible unit whose state changed (``is`` comparison), with the validated view
and the event's seq. That subscription is held only while a change listener is registered: without a
listener the eager drive is unobservable (reads catch up to the same states, because reducers are pure),
so appends then pay nothing for the registry — each unit is folded over a batch of events at the next
read instead of over one event per append. A cell that a read advanced past the event being published
(a store listener that read the registry before the drive saw the event) still notifies that event's
changes. The drive of exactly the built-in units (:data:`BUILTIN_UNITS`, the eager configuration a UI
runs) skips the reducers that would return their input for the event's type (most of a log is stream
chunks that none of them folds), so a quiet event costs one test, not five reducer calls.

**Purity is enforced, not trusted.** Every state a cell holds is passed through
:func:`~agentlog.kernel.jsonvalue.snapshot_json` when it changes: that refuses a state that is not
lossless JSON (:class:`~agentlog.errors.ProjectionStateError`, at the event that produced it) and
deep-freezes the state, so a reducer that mutates its input raises
:class:`~agentlog.errors.FrozenError` at once and is reported as
:class:`~agentlog.errors.ProjectionReducerError` (events are frozen by the kernel already). The copy is
paid per *change*, never for the irrelevant events a reducer returns ``state`` for. A unit that failed for
a session stays failed for it: every later read of that unit raises the same typed error (with the
original failure as ``__cause__``) instead of serving a value that skipped an event. Views are validated
(and detached) the same way every time they are served; an accidentally async view returns an
awaitable, which is not JSON: :class:`~agentlog.errors.ProjectionViewError`.

**Threads.** A session's cells are only touched under that session's lock (the lock its appends hold
while the store publishes), so reads from any thread see consistent cuts. Registration and change
listeners belong to the thread that owns the store.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeAlias, TypedDict

from ..errors import (
    FrozenError,
    NonJsonValueError,
    ProjectionError,
    ProjectionKeyConflictError,
    ProjectionReducerError,
    ProjectionRestoreError,
    ProjectionRowError,
    ProjectionStateError,
    ProjectionUnitError,
    ProjectionViewError,
    describe_error,
)
from ..kernel._js import js_string
from ..kernel._listeners import observe_async
from ..kernel.events import ASSISTANT_CHUNK, ASSISTANT_MESSAGE, SESSION_TITLE
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, json_quote, snapshot_container, snapshot_json, thaw
from ..kernel.session import Session, lock_of
from ..kernel.store import SessionStore  # (at run time too: typing.get_type_hints resolves annotations here)
from .stats import SESSION_STATS_UNIT, STATS_EVENT_TYPES
from .title import TITLE_UNIT
from .units import (
    BREAKDOWN_EVENT_TYPES,
    CONTEXT_BREAKDOWN_UNIT,
    CONTEXT_PRESSURE_UNIT,
    PRESSURE_EVENT_TYPES,
    TOKEN_USAGE_UNIT,
    ProjectionUnit,
)

__all__ = [
    "BUILTIN_UNITS",
    "ChangeListener",
    "CheckpointRow",
    "ProjectionCheckpoint",
    "ProjectionRegistry",
    "ProjectionSnapshot",
    "RestoreResult",
]

logger = logging.getLogger("agentlog")

AnyUnit: TypeAlias = ProjectionUnit[Any, Any]

BUILTIN_UNITS: Final[tuple[AnyUnit, ...]] = (
    TOKEN_USAGE_UNIT,
    CONTEXT_PRESSURE_UNIT,
    CONTEXT_BREAKDOWN_UNIT,
    SESSION_STATS_UNIT,
    TITLE_UNIT,
)
"""The five units :meth:`ProjectionRegistry.with_builtin_units` registers, in the original's order."""

_USAGE_CHUNK: Final = ASSISTANT_CHUNK + " usage"  # a pick key of its own (not an event type)
_BUILTIN_TYPES: Final[tuple[frozenset[str], ...]] = (
    frozenset({_USAGE_CHUNK, ASSISTANT_MESSAGE}),
    (PRESSURE_EVENT_TYPES - {ASSISTANT_CHUNK}) | {_USAGE_CHUNK},
    BREAKDOWN_EVENT_TYPES,
    STATS_EVENT_TYPES | {_USAGE_CHUNK},
    frozenset({SESSION_TITLE}),
)
"""Per built-in unit (BUILTIN_UNITS order): the event types for which its reducer can return a new state
from a state without an armed claim (chunks: only the usage ones; sessionStats also any other, see
:func:`_picked`)."""


class ProjectionSnapshot(TypedDict):
    """One consistent cut: ``asOfSeq`` is the seq of the last event every value reflects (-1: empty log)."""

    asOfSeq: int
    values: dict[str, Any]


class CheckpointRow(TypedDict):
    """One unit's checkpoint: its ``stateVersion``, the seq of the last event folded in, its state."""

    ver: int
    seq: int
    val: Any


ProjectionCheckpoint: TypeAlias = dict[str, CheckpointRow]
"""Checkpoint rows keyed by unit key (one session's persisted cache value)."""


class RestoreResult(TypedDict):
    """What :meth:`ProjectionRegistry.restore` returns: the cut at the supplied log end and its rows."""

    snapshot: ProjectionSnapshot
    checkpoint: ProjectionCheckpoint


ChangeListener: TypeAlias = Callable[[Session, str, Any, int], object]
"""``listener(session, key, value, seq)``: ``value`` is the validated view, ``seq`` the causing event's."""


# --- internal records -------------------------------------------------------------------------------


class _Registration:
    """One registered key: the unit that serves it (the first registrant's) and its registrant count."""

    __slots__ = ("refs", "unit")

    def __init__(self, unit: AnyUnit) -> None:
        self.unit = unit
        self.refs = 1


def _keep(state: Any, event: Any) -> Any:
    """The reducer of a failed cell: it never changes again (its reads raise the recorded failure)."""
    return state


class _Cell:
    """One unit's state for one session. ``reduce`` is the unit's reducer, or :func:`_keep` once failed."""

    __slots__ = ("failure", "key", "reduce", "reg", "state", "view", "visible")

    def __init__(self, reg: _Registration, state: Any) -> None:
        unit = reg.unit
        self.reg = reg
        self.key: str = unit.key
        self.reduce: Callable[[Any, Any], Any] = unit.reduce
        self.view: Callable[[Any], Any] = unit.view
        self.visible: bool = unit.client_visible
        self.state = state
        self.failure: ProjectionError | None = None

    def fail(self, err: BaseException, event: Mapping[str, Any] | None) -> None:
        self.failure = _failure(self.key, err, event)
        self.reduce = _keep


class _Record:
    """One session's cells, all at watermark ``seq``, for registration generation ``gen``.

    ``last_seq``/``last_changed`` remember which visible cells the newest folded event changed, so the
    drive can still notify an event that a read folded before the drive saw it.
    """

    __slots__ = ("by_reg", "cells", "gen", "last_changed", "last_seq", "picks", "seq")

    def __init__(self) -> None:
        self.seq = -1
        self.gen = -1
        self.cells: list[_Cell] = []
        self.by_reg: dict[_Registration, _Cell] = {}
        self.last_seq = -2
        self.last_changed: list[_Cell] = []
        self.picks: dict[str, list[_Cell]] = {}  # the drive's cells per event type (see _picked)


class _Attachment:
    """One attached store: its attachment count and, while the drive is observable, its subscription."""

    __slots__ = ("refs", "store", "unsubscriber")

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.refs = 1
        self.unsubscriber: Callable[[], None] | None = None

    def unsubscribe(self) -> None:
        unsubscriber, self.unsubscriber = self.unsubscriber, None
        if unsubscriber is not None:
            unsubscriber()


class _StateNotJson(Exception):
    """Internal: a reducer's result failed the JSON gate (carries the gate's error)."""

    def __init__(self, err: NonJsonValueError) -> None:
        super().__init__(str(err))
        self.err = err


# --- error texts ------------------------------------------------------------------------------------


def _failure(key: str, err: BaseException, event: Mapping[str, Any] | None) -> ProjectionError:
    """The typed error a failed cell raises on every read (``__cause__`` is the original failure)."""
    where = "its initial state" if event is None else f"seq {event.get('seq')} ({event.get('type')})"
    quoted = json_quote(key)
    failure: ProjectionError
    if isinstance(err, _StateNotJson):
        failure = ProjectionStateError(
            f"session projection {quoted} state is not lossless JSON after {where} "
            f"(a unit state violates the plain-JSON contract): {err.err}"
        )
        failure.__cause__ = err.err
        return failure
    if isinstance(err, FrozenError):
        failure = ProjectionReducerError(
            f"session projection {quoted} reducer mutated its input at {where}: states and events are "
            f"frozen, return a new object instead ({describe_error(err)})"
        )
    else:
        failure = ProjectionReducerError(
            f"session projection {quoted} reducer failed at {where}: {describe_error(err)}"
        )
    failure.__cause__ = err
    return failure


def _check_version(unit: AnyUnit) -> None:
    version: object = unit.state_version
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_SAFE_INTEGER:
        raise ProjectionUnitError(
            f"session projection {json_quote(str(unit.key))} stateVersion must be a non-negative integer, "
            f"got {js_string(version)}"
        )


def _restore_refusal(key: str, base_seq: int) -> ProjectionRestoreError:
    return ProjectionRestoreError(
        f"session projection {json_quote(key)} cannot restore from seq {base_seq}: its checkpoint row is "
        "missing, version-mismatched, or beyond the supplied log end; re-read from seq 0"
    )


# --- JSON gates -------------------------------------------------------------------------------------

_snapshot = snapshot_json


def _frozen_initial(unit: AnyUnit) -> Any:
    """The unit's initial state, validated and frozen (raises :class:`ProjectionStateError`)."""
    try:
        return _snapshot(unit.initial())
    except NonJsonValueError as err:
        raise _failure(unit.key, _StateNotJson(err), None) from err


def _served(key: str, value: Any) -> Any:
    """A view as served: validated as lossless JSON and detached (a frozen copy).

    A plain dict (every built-in view) goes straight to the container copy: this runs for every change
    notification, once per changed unit and event."""
    try:
        return snapshot_container(value) if value.__class__ is dict else _snapshot(value)
    except NonJsonValueError as err:
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()  # an un-awaited coroutine would warn at garbage collection
            why = "its view returned an awaitable (views must be synchronous)"
        else:
            why = f"its view is not lossless JSON ({err})"
        raise ProjectionViewError(f"session projection {json_quote(key)} cannot be served: {why}") from err


def _fold_cell(cell: _Cell, events: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Fold ``events`` into ``cell``; return the last event that changed it (``None``: none did).

    A failure marks the cell failed at the event that caused it; the cell keeps its last good state.
    """
    reduce = cell.reduce
    state = cell.state
    changed_by: Mapping[str, Any] | None = None
    event: Mapping[str, Any] | None = None
    try:
        for event in events:
            nxt = reduce(state, event)
            if nxt is not state:
                try:
                    state = _snapshot(nxt)
                except NonJsonValueError as err:
                    raise _StateNotJson(err) from None
                changed_by = event
    except Exception as err:
        cell.state = state
        cell.fail(err, event)
        return None
    cell.state = state
    return changed_by


def _picked(rec: _Record, key: str) -> list[_Cell]:
    """The built-in cells whose event types hold ``key`` (an event type or ``_USAGE_CHUNK``), in order.

    The drive of exactly the built-in units runs only these reducers for an event when no shadow-price
    claim is armed: the other reducers would return their input (see :data:`_BUILTIN_TYPES`). Most of a
    log is stream chunks that no unit folds, and most other events concern one or two of the five.
    Picking a cell only means its reducer runs, so a pick may err on that side, never on the other
    (tests hold the picks to the reducers).
    """
    picked = rec.picks[key] = [cell for cell, types in zip(rec.cells, _BUILTIN_TYPES, strict=True) if key in types]
    return picked


# --- checkpoint rows --------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _row_seq(row: object, version: int) -> int | None:
    """The watermark of a row usable by a unit at ``version`` (``None``: absent, mismatched, malformed)."""
    if not isinstance(row, Mapping):
        return None
    ver = row.get("ver")
    seq = row.get("seq")
    if not _is_int(ver) or ver != version or not _is_int(seq) or "val" not in row:
        return None
    return seq if isinstance(seq, int) else None


# --- the registry -----------------------------------------------------------------------------------


class ProjectionRegistry:
    """The unit table, its per-session cells and the change feed (the original's ``sessionProjections``).

    ``ProjectionRegistry(store)`` drives the units over every committed event of every session of
    ``store`` (see the module docstring for when that drive runs); without a store the registry still
    serves every read face for any session, folding from its log.
    """

    def __init__(self, store: SessionStore | None = None) -> None:
        self._regs: dict[str, _Registration] = {}
        self._order: tuple[_Registration, ...] = ()
        self._gen = 0
        self._listeners: tuple[ChangeListener, ...] = ()
        self._records: weakref.WeakKeyDictionary[Session, _Record] = weakref.WeakKeyDictionary()
        self._hot: tuple[weakref.ref[Session], _Record] | None = None
        self._stores: list[_Attachment] = []
        self._builtin = False  # exactly BUILTIN_UNITS, in order: the drive may skip quiet events
        if store is not None:
            self.attach(store)

    @classmethod
    def with_builtin_units(cls, store: SessionStore | None = None) -> ProjectionRegistry:
        """A registry with ``tokenUsage``, ``contextPressure``, ``contextBreakdown``, ``sessionStats`` and
        ``title`` registered, in that order (the original's composition)."""
        registry = cls(store)
        for unit in BUILTIN_UNITS:
            registry.register(unit)
        return registry

    # -- registration ------------------------------------------------------------------------------

    @property
    def units(self) -> tuple[AnyUnit, ...]:
        """The registered units, in registration order (one per key: the first registrant's)."""
        return tuple(reg.unit for reg in self._order)

    def register(self, unit: AnyUnit) -> Callable[[], None]:
        """Register ``unit``; return the disposer that releases this registration (idempotent).

        Registrants of the same key and ``stateVersion`` share one registration (the first unit object
        keeps serving; later ones are counted, not used); the key and all its cells go when the last
        registrant releases it, and a later registration folds fresh cells from the logs. A different
        ``stateVersion`` for a registered key cannot share its cells:
        :class:`~agentlog.errors.ProjectionKeyConflictError`.
        """
        if not isinstance(unit, ProjectionUnit):
            raise ProjectionUnitError(
                f"session projection units are ProjectionUnit instances, got {type(unit).__name__}"
            )
        if not isinstance(unit.key, str):
            raise ProjectionUnitError(f"session projection key must be a string, got {type(unit.key).__name__}")
        _check_version(unit)
        key = unit.key
        reg = self._regs.get(key)
        if reg is None:
            reg = self._regs[key] = _Registration(unit)
            self._changed_registrations()
        else:
            if reg.unit.state_version != unit.state_version:
                raise ProjectionKeyConflictError(
                    f"session projection key {json_quote(key)} is already registered at stateVersion "
                    f"{reg.unit.state_version}; refusing to share it with stateVersion {unit.state_version}"
                )
            reg.refs += 1
        released = False

        def dispose() -> None:
            nonlocal released
            if released:
                return
            released = True
            reg.refs -= 1
            if reg.refs == 0 and self._regs.get(key) is reg:
                del self._regs[key]
                self._changed_registrations()

        return dispose

    def _changed_registrations(self) -> None:
        self._order = tuple(self._regs.values())
        units = tuple(reg.unit for reg in self._order)
        self._builtin = len(units) == len(BUILTIN_UNITS) and all(
            unit is builtin for unit, builtin in zip(units, BUILTIN_UNITS, strict=True)
        )
        self._gen += 1
        self._sync_subscriptions()

    def on_changed(self, listener: ChangeListener) -> Callable[[], None]:
        """Add a change-feed listener ``listener(session, key, value, seq)``; return its disposer.

        A listener is called after every unit has folded the event, once per client-visible unit whose
        state changed. Its failures are logged (logger ``"agentlog"``) and never affect the drive or the
        other listeners; an awaitable it returns is run on the appending thread's event loop.
        """
        if not callable(listener):
            raise TypeError("a projection change listener must be callable")
        self._listeners = (*self._listeners, listener)
        self._sync_subscriptions()
        removed = False

        def dispose() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            listeners = list(self._listeners)
            listeners.remove(listener)
            self._listeners = tuple(listeners)
            self._sync_subscriptions()

        return dispose

    # -- stores ------------------------------------------------------------------------------------

    def attach(self, store: SessionStore) -> Callable[[], None]:
        """Drive the units over the committed events of ``store``'s sessions; return the detacher.

        Attaching a store that is already attached only counts the attachment (events are driven once);
        the store is detached when every detacher has been called (each one counts once).
        """
        attachment = next((entry for entry in self._stores if entry.store is store), None)
        if attachment is None:
            attachment = _Attachment(store)
            self._stores.append(attachment)
            self._sync_subscriptions()
        else:
            attachment.refs += 1
        released = False

        def detach() -> None:
            nonlocal released
            if released or attachment not in self._stores:
                return
            released = True
            attachment.refs -= 1
            if attachment.refs == 0:
                self._stores.remove(attachment)
                attachment.unsubscribe()

        return detach

    def dispose(self) -> None:
        """Detach from every store (reads keep working; nothing is driven or notified any more)."""
        attachments, self._stores = self._stores, []
        for attachment in attachments:
            attachment.unsubscribe()

    def _sync_subscriptions(self) -> None:
        """Hold the stores' event subscriptions exactly while the drive is observable."""
        wanted = bool(self._listeners) and bool(self._order)
        for attachment in self._stores:
            if not wanted:
                attachment.unsubscribe()
            elif attachment.unsubscriber is None:
                attachment.unsubscriber = attachment.store.on_event(self._drive)

    # -- cells -------------------------------------------------------------------------------------

    def _record(self, session: Session, events: Sequence[Mapping[str, Any]]) -> _Record:
        """The session's record, its cells matching the current registrations (call under its lock)."""
        hot = self._hot
        if hot is not None and hot[0]() is session:
            rec = hot[1]
        else:
            found = self._records.get(session)
            if found is None:
                found = self._records[session] = _Record()
            rec = found
            self._hot = (weakref.ref(session), rec)
        if rec.gen != self._gen:
            self._rebuild(rec, events)
        return rec

    def _rebuild(self, rec: _Record, events: Sequence[Mapping[str, Any]]) -> None:
        """Drop the cells of released keys; fold cells for new keys up to the record's watermark."""
        by_reg: dict[_Registration, _Cell] = {}
        for reg in self._order:
            cell = rec.by_reg.get(reg)
            if cell is None:
                cell = _Cell(reg, None)
                try:
                    cell.state = _frozen_initial(reg.unit)
                except ProjectionError as err:
                    cell.failure = err
                    cell.reduce = _keep
                if rec.seq >= 0:
                    _fold_cell(cell, events[: rec.seq + 1])
            by_reg[reg] = cell
        rec.by_reg = by_reg
        rec.cells = list(by_reg.values())
        rec.picks = {}
        rec.gen = self._gen
        rec.last_changed = [cell for cell in rec.last_changed if cell.reg in by_reg]

    def _advance(self, rec: _Record, events: Sequence[Mapping[str, Any]], target: int) -> None:
        """Fold ``events[rec.seq + 1 : target + 1]`` into every cell (no notifications)."""
        if target <= rec.seq:
            return
        span = events[rec.seq + 1 : target + 1]
        last = span[-1]
        changed: list[_Cell] = []
        for cell in rec.cells:
            if cell.failure is None and _fold_cell(cell, span) is last and cell.visible:
                changed.append(cell)
        rec.seq = target
        rec.last_seq = target
        rec.last_changed = changed

    def _current(self, session: Session) -> _Record:
        """The session's record folded to the end of its log (call under the session's lock)."""
        events = session.events
        rec = self._record(session, events)
        self._advance(rec, events, len(events) - 1)
        return rec

    def _drive(self, session: Session, event: Any) -> None:
        """The store's ``on_event`` listener: fold one committed event, then notify the changes."""
        hot = self._hot
        if hot is not None and hot[0]() is session and hot[1].gen == self._gen:
            rec = hot[1]
        else:
            rec = self._record(session, session.events)
        seq: int = event["seq"]
        if rec.seq != seq - 1:
            if rec.seq >= seq:
                # A read (in an earlier listener of this publication) already folded this event.
                if rec.last_seq == seq and rec.last_changed:
                    self._notify(session, rec.last_changed, seq)
                return
            self._advance(rec, session.events, seq - 1)
        cells = rec.cells
        if self._builtin and "claim" not in cells[1].state and "claim" not in cells[2].state:
            # Exactly the built-in units and no armed claim: run only the reducers that can change
            # (see _picked). A chunk concerns tokenUsage and contextPressure when it reports usage,
            # otherwise only sessionStats, and only while the open step has no first token yet.
            key: str = event["type"]
            if key == ASSISTANT_CHUNK:
                chunk = event["data"].get("chunk")
                if isinstance(chunk, dict) and chunk.get("type") == "usage":
                    key = _USAGE_CHUNK
                else:
                    open_step = cells[3].state["openStep"]
                    if open_step is None or open_step["firstTokenTime"] is not None:
                        rec.seq = seq
                        rec.last_seq = seq
                        if rec.last_changed:
                            rec.last_changed = []
                        return
            picked = rec.picks.get(key)
            cells = _picked(rec, key) if picked is None else picked
        changed: list[_Cell] | None = None
        failed: list[_Cell] | None = None
        for cell in cells:
            state = cell.state
            try:
                nxt = cell.reduce(state, event)
                if nxt is state:
                    continue
                try:
                    # A plain dict (every built-in state) goes straight to the container copy, as appends do.
                    cell.state = snapshot_container(nxt) if nxt.__class__ is dict else _snapshot(nxt)
                except NonJsonValueError as err:
                    raise _StateNotJson(err) from None
            except Exception as err:
                cell.fail(err, event)
                failed = [cell] if failed is None else [*failed, cell]
                continue
            if cell.visible:
                if changed is None:
                    changed = [cell]
                else:
                    changed.append(cell)
        rec.seq = seq
        rec.last_seq = seq
        if changed is None:
            if rec.last_changed:
                rec.last_changed = []
        else:
            rec.last_changed = changed
            self._notify(session, changed, seq)
        if failed is not None:
            # Every cell has folded the event; the store logs this (reads of the unit raise it again).
            failure = failed[0].failure
            if failure is not None:
                raise failure

    def _notify(self, session: Session, cells: list[_Cell], seq: int) -> None:
        listeners = self._listeners
        if not listeners:
            return
        first_error: ProjectionError | None = None
        for cell in cells:
            if cell.failure is not None:
                continue
            key = cell.key
            try:
                value = _served(key, cell.view(cell.state))
            except ProjectionError as err:
                first_error = first_error or err
                continue
            for listener in listeners:
                try:
                    result = listener(session, key, value, seq)
                except Exception as err:
                    logger.warning(
                        'session "%s": session projection change listener threw: %s', session.id, describe_error(err)
                    )
                    continue
                if result is not None and inspect.isawaitable(result):  # most listeners return None: one test
                    observe_async(result, f'session "{session.id}": session projection change listener rejected: ')
        if first_error is not None:
            raise first_error

    # -- live reads --------------------------------------------------------------------------------

    def state_of(self, session: Session, key: str) -> Any:
        """The current (frozen, read-only) state of unit ``key`` for ``session``; ``None`` if unregistered.

        Raises the unit's :class:`~agentlog.errors.ProjectionError` when it failed for this session.
        """
        reg = self._regs.get(key)
        if reg is None:
            return None
        with lock_of(session):
            cell = self._current(session).by_reg[reg]
            if cell.failure is not None:
                raise cell.failure
            return cell.state

    def snapshot(self, session: Session) -> ProjectionSnapshot:
        """``{"asOfSeq", "values"}``: every client-visible unit's validated view at the end of the log.

        One consistent cut (taken under the session's lock); host-only units never appear.
        """
        with lock_of(session):
            rec = self._current(session)
            values: dict[str, Any] = {}
            for cell in rec.cells:
                if cell.visible:
                    if cell.failure is not None:
                        raise cell.failure
                    values[cell.key] = _served(cell.key, cell.reg.unit.view(cell.state))
            return {"asOfSeq": rec.seq, "values": values}

    def checkpoint(self, session: Session) -> ProjectionCheckpoint:
        """``{key: {"ver", "seq", "val"}}`` for every registered unit (host-only ones included).

        ``val`` is a plain, mutable deep copy: changing it cannot reach the registry's cells.
        """
        with lock_of(session):
            rec = self._current(session)
            rows: ProjectionCheckpoint = {}
            for cell in rec.cells:
                if cell.failure is not None:
                    raise cell.failure
                rows[cell.key] = {"ver": cell.reg.unit.state_version, "seq": rec.seq, "val": thaw(cell.state)}
            return rows

    # -- cold reads --------------------------------------------------------------------------------

    def restore_floor(self, checkpoint: Mapping[str, Any]) -> int | None:
        """The stored seq a tail read for :meth:`restore` must start at (``None``: no unit registered).

        One event *below* the lowest usable watermark (0 when a row is absent or version-mismatched):
        the anchor event proves the stored log still reaches that watermark.
        """
        floor: int | None = None
        for reg in self._order:
            seq = _row_seq(checkpoint.get(reg.unit.key), reg.unit.state_version)
            need = 0 if seq is None else max(seq + 1, 0)
            floor = need if floor is None else min(floor, need)
        return None if floor is None else max(floor - 1, 0)

    def _parsed_row_state(self, unit: AnyUnit, row: Mapping[str, Any]) -> Any:
        """The row's state through the unit's schema, validated and frozen (raises ProjectionRowError)."""
        try:
            return _snapshot(unit.parse_state(row["val"]))
        except ProjectionRowError:
            raise
        except Exception as err:
            raise ProjectionRowError(
                f"session projection {json_quote(unit.key)} checkpoint row does not match its state schema: "
                f"{describe_error(err)}"
            ) from err

    def view_checkpoint(self, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
        """The views of the client-visible units whose rows match their ``stateVersion`` — no log read.

        An absent, mismatched or malformed row (one the unit's state schema rejects) leaves its key out.
        """
        values: dict[str, Any] = {}
        for reg in self._order:
            unit = reg.unit
            if not unit.client_visible:
                continue
            row = checkpoint.get(unit.key)
            if _row_seq(row, unit.state_version) is None:
                continue
            try:
                state = self._parsed_row_state(unit, row)  # type: ignore[arg-type]  # _row_seq checked it
            except ProjectionRowError:
                continue
            values[unit.key] = _served(unit.key, unit.view(state))
        return values

    def restore(
        self, checkpoint: Mapping[str, Any], events: Sequence[Mapping[str, Any]], base_seq: int
    ) -> RestoreResult:
        """Fold every unit over a stored log suffix without a live session, seeding from usable rows.

        ``events`` are the stored events with ``seq >= base_seq``, in order (read from
        :meth:`restore_floor`). A row is usable iff its ``ver`` matches, ``base_seq - 1 <= seq`` and
        ``seq <=`` the supplied end. An unusable row refolds from the initial state, which needs the whole
        log: with ``base_seq > 0`` that raises :class:`~agentlog.errors.ProjectionRestoreError` (re-read
        from seq 0). A usable row whose state the unit's schema rejects raises
        :class:`~agentlog.errors.ProjectionRowError`. Returns the cut at the supplied end (``asOfSeq`` =
        the last event's seq, ``base_seq - 1`` for an empty tail) and the refreshed rows at that cut.
        """
        end_seq: int = events[-1]["seq"] if events else base_seq - 1
        values: dict[str, Any] = {}
        refreshed: ProjectionCheckpoint = {}
        for reg in self._order:
            unit = reg.unit
            key = unit.key
            row = checkpoint.get(key)
            row_seq = _row_seq(row, unit.state_version)
            usable = row_seq is not None and base_seq - 1 <= row_seq <= end_seq
            if not usable and base_seq > 0:
                raise _restore_refusal(key, base_seq)
            if usable:
                state = self._parsed_row_state(unit, row)  # type: ignore[arg-type]  # _row_seq checked it
                start: int = row_seq  # type: ignore[assignment]  # usable implies an int
            else:
                state = _frozen_initial(unit)
                start = base_seq - 1
            cell = _Cell(reg, state)
            _fold_cell(cell, [event for event in events if event["seq"] > start])
            if cell.failure is not None:
                raise cell.failure
            if unit.client_visible:
                values[key] = _served(key, unit.view(cell.state))
            refreshed[key] = {"ver": unit.state_version, "seq": end_seq, "val": thaw(cell.state)}
        return {"snapshot": {"asOfSeq": end_seq, "values": values}, "checkpoint": refreshed}
