"""The backend contract: the shared persistence conformance suite as a base test class.

A backend passes the contract when a pytest class that subclasses :class:`BackendContract` and says how to
open the backend passes::

    from agentlog.testing import BackendContract

    class TestMyBackendContract(BackendContract):
        def make_backend(self, location):
            return MyBackend(location / "store")

The suite covers spec ``persistence.md`` §8.3 (items 31–42: the storage contract) and §8.4 (43–82: the
coordinator over the backend), plus durability, writer locking and failed-write retries. Every test reaches
the backend only through the one factory:

* :meth:`BackendContract.new_location` gives each test a fresh storage location (default: a directory
  under pytest's ``tmp_path``; override it for storage that is not a directory, e.g. a database URL or a
  :class:`~agentlog.persistence.memory.MemoryStorage`);
* :meth:`BackendContract.make_backend` opens a NEW backend instance over that location. Tests call it
  several times per location — a second instance over the same storage is how they simulate a restart
  or a second process — and close every instance at teardown.

Optional capabilities are derived from the subclass and the backend, so a minimal subclass needs nothing
more than :meth:`~BackendContract.make_backend` (and :meth:`~BackendContract.new_location` for storage that
is not a directory): the torn-tail tests run when the subclass defines
:meth:`~BackendContract.inject_torn_tail` (skipped otherwise), the damaged-header cases when it defines
:meth:`~BackendContract.damage_header`, and format errors must cite ``(raw log: <path>)`` when the
backend's ``locate()`` names an existing file for a stored session. A class attribute
(:attr:`~BackendContract.has_torn_tail`, :attr:`~BackendContract.can_damage_header`,
:attr:`~BackendContract.locates_raw_log`) set to ``True`` or ``False`` overrides the derived answer.

Failures show the compared values: importing :mod:`agentlog.testing` under pytest registers this module
for pytest's assertion rewriting (see :mod:`agentlog.testing`), as it does for a test module.

The fault-injection tests subclass the backend's class on the fly (``instance.__class__`` is swapped for
``class _(Mixin, type(instance))``), so a backend class must allow that (no ``__slots__``-only layout).

This module imports pytest (the slim ``contract`` extra, or ``test``); ``import agentlog`` never imports it.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import (
    AgentlogError,
    InvalidOptionError,
    PersistenceError,
    SessionCollisionError,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionHasChildrenError,
    SessionLockedError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
)
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    SESSION_END_SEED,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from ..kernel.store import SessionStore
from ..persistence.backend import Backend, DeletesSessions, ListsRevisions, SeeksStored
from ..persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from .builders import (
    APPEND_INTENT,
    CWD,
    SID,
    append_closed_turn,
    assistant_event,
    chunk_event,
    closed_turn,
    ev,
    event_bytes,
    header,
    live_meta,
    open_turn_with_chunks,
    seqs,
    step_end,
    step_start,
    tool_call_event,
    turn_end,
    turn_start,
    types,
    user_data,
    user_event,
)

__all__ = ["BackendContract", "ContractBackends", "ContractHarness"]


# --- the harness: backend instances and coordinators over one test's storage ----------------------------------


class ContractBackends:
    """``backends()`` → a new backend instance over one storage location; all are closed by :meth:`close_all`.

    ``backends(wrap=Mixin)`` makes the instance a ``class _(Mixin, BackendClass)`` so a test can inject one
    fault into a real backend. ``inject_torn_tail(meta, next_seq)`` appends the backend's torn tail, or is
    ``None`` for a backend without torn tails. ``kind`` names the backend in messages.
    """

    def __init__(self, contract: BackendContract, location: Any) -> None:
        self.contract = contract
        self.location = location
        self.kind = contract.kind or type(contract).__name__
        self.created: list[Any] = []
        self.inject_torn_tail: Callable[[Mapping[str, Any], int], None] | None = (
            self._inject if contract.tears() else None
        )

    def __call__(self, wrap: type | None = None) -> Any:
        backend: Any = self.contract.make_backend(self.location)
        self.created.append(backend)
        if wrap is not None:
            cls = type(backend)
            backend.__class__ = type(f"{wrap.__name__}{cls.__name__}", (wrap, cls), {})
        return backend

    def _inject(self, meta: Mapping[str, Any], next_seq: int) -> None:
        self.contract.inject_torn_tail(self.location, meta, next_seq)

    def close_all(self) -> None:
        while self.created:
            backend = self.created.pop()
            try:
                backend.close()
            except Exception:
                pass


class ContractHarness:
    """Coordinators over one test's storage; everything is closed at teardown."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.kind: str = factory.kind
        self._coordinators: list[Any] = []

    def backend(self, wrap: type | None = None) -> Any:
        return self.factory(wrap)

    def coordinator(
        self,
        store: Any = None,
        *,
        backend: Any = None,
        wrap: type | None = None,
        batch_delay_ms: int = 20,
        **options: Any,
    ) -> Any:
        coordinator = PersistenceCoordinator(
            store if store is not None else SessionStore(),
            backend if backend is not None else self.backend(wrap),
            batch_delay_ms=batch_delay_ms,
            **options,
        )
        self._coordinators.append(coordinator)
        return coordinator

    def close(self) -> None:
        for coordinator in reversed(self._coordinators):
            try:
                coordinator.close()
            except Exception:
                pass
        self.factory.close_all()


Harness = ContractHarness


# --- helpers of the suite ----------------------------------------------------------------------------


OUTCOME_UNKNOWN_TEXT = (
    "The tool call was interrupted after it was recorded, but no result was durably recorded. "
    "Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the "
    "operation is read-only or idempotent; if it may have side effects, first verify external state "
    "or ask the user. Do not retry blindly."
)


NOT_STARTED_TEXT = (
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)


LIVE_TURN_OPEN = (
    'cannot load session "{id}" while its live turn is open; use the live Session or wait for the turn to close'
)


def fresh(env: Harness) -> Any:
    """A new coordinator (new store, new backend instance) over the same storage."""
    return env.coordinator()


def stored(env: Harness, session_id: str = SID) -> list[Any]:
    """What is durable right now, read by a new coordinator (no repair, no closers)."""
    return list(fresh(env).read_from(session_id, 0).events)


def revision_of(coordinator: Any, session_id: str = SID) -> str | None:
    for listing in coordinator.list():
        if listing.id == session_id:
            return listing.revision  # type: ignore[no-any-return]
    return None


def persist(env: Harness, events: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store a log through the public ownerless API (create + append) of a throw-away coordinator."""
    meta = meta if meta is not None else header(SID)
    writer = env.coordinator()
    writer.create(meta)
    writer.append(meta["id"], events)
    return meta


def persist_unloadable(
    env: Harness, events: list[dict[str, Any]], meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Store a log that no load accepts, straight through the backend, as a damaged or foreign file arrives:
    the coordinator's ownerless append refuses whatever a load would refuse, so it cannot write one."""
    meta = meta if meta is not None else header(SID)
    env.backend().append_batch(meta, events, False)
    return meta


def tool_closer(
    seq: int, time: int, call_id: str, *, call_seq: int | None, turn: int = 1, step: int = 1
) -> dict[str, Any]:
    started = call_seq is not None
    closer: dict[str, Any] = {
        "type": TOOL_RESULT,
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": f"interrupted-tool-result-{call_id}-{seq}",
                "role": "user",
                "source": {"kind": "tool", "callId": call_id},
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "isError": True,
                        "content": [{"type": "text", "text": OUTCOME_UNKNOWN_TEXT if started else NOT_STARTED_TEXT}],
                    }
                ],
            },
            "error": (
                {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
                if started
                else {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}
            ),
        },
        "surfaceOp": "append",
    }
    if started:
        closer["sourceEventSeqs"] = [call_seq]
    return closer


def step_closer(seq: int, time: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {"type": STEP_END, "seq": seq, "time": time, "data": {"turn": turn, "step": step}}


def turn_closer(seq: int, time: int, turn: int = 1) -> dict[str, Any]:
    return {"type": TURN_END, "seq": seq, "time": time, "data": {"turn": turn, "reason": {"kind": "interrupted"}}}


def wait_until(predicate: Any, timeout: float = 3.0, interval: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def durable_count(env: Harness, session_id: str = SID) -> int:
    try:
        return len(stored(env, session_id))
    except SessionNotFoundError:
        return 0


def deep_value(depth: int) -> Any:
    """Alternating list/dict nesting, built iteratively."""
    value: Any = "leaf"
    for level in range(depth):
        value = [value, level] if level % 2 == 0 else {"k": value, "n": level}
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality without recursion (== on a 20,000-deep value would overflow)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, dict):
            if not isinstance(y, dict) or list(x.keys()) != list(y.keys()):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _cyclic() -> Any:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


NON_JSON_VALUES = {
    "big-int": 2**64,
    "infinity": float("inf"),
    "nan": float("nan"),
    "negative-zero": -0.0,
    "function": lambda: None,
    "symbol-like-object": object(),
    "set": {1, 2},
    "tuple": (1, 2),
    "bytes": b"raw",
    "cyclic": _cyclic(),
}


def _assert_immutable(snapshot: SessionSnapshot) -> None:
    user = snapshot.events[1]
    assistant = snapshot.events[3]
    with pytest.raises(TypeError):
        user["data"]["id"] = "other"
    with pytest.raises(TypeError):
        user["data"]["content"].append({"type": "text", "text": "x"})
    with pytest.raises(TypeError):
        user["data"]["content"][0]["text"] = "x"
    with pytest.raises(TypeError):
        assistant["data"]["message"]["content"][0]["text"] = "x"
    with pytest.raises(TypeError):
        assistant["data"]["message"]["source"]["model"] = "x"
    with pytest.raises(TypeError):
        snapshot.events.append(user)
    with pytest.raises(TypeError):
        snapshot.meta["cwd"] = "/elsewhere"


def _pre_identity_log() -> list[dict[str, Any]]:
    text = [{"type": "text", "text": "hello"}]
    call = {"type": "tool-call", "id": "call-1", "name": "bash", "arguments": "{}"}
    return [
        turn_start(0),
        ev(USER_MESSAGE, 1, {"content": text, "source": {"kind": "user"}}, surfaceOp="append"),
        step_start(2),
        ev(
            ASSISTANT_MESSAGE,
            3,
            {"turn": 1, "step": 1, "content": [call], "provenance": {"provider": "mock", "model": "mock"}},
            surfaceOp="append",
        ),
        tool_call_event(4, "call-1"),
        ev(
            TOOL_RESULT,
            5,
            {"turn": 1, "step": 1, "callId": "call-1", "content": [{"type": "text", "text": "long"}], "isError": False},
            surfaceOp="append",
        ),
        ev(
            TOOL_RESULT,
            6,
            {
                "turn": 1,
                "step": 1,
                "callId": "call-1",
                "content": [{"type": "text", "text": "short"}],
                "isError": False,
            },
            surfaceOp={"op": "replace", "start": 5, "end": 5},
            sourceEventSeqs=[5],
        ),
        step_end(7),
        turn_end(8),
    ]


def _pre_react_loop_log() -> list[dict[str, Any]]:
    return [
        ev(TURN_START, 0, {"turn": 1, "trigger": {"kind": "user"}}),
        ev(
            "steering/message",
            1,
            {"turn": 1, "content": [{"type": "text", "text": "flat"}], "source": {"kind": "user"}},
            surfaceOp="append",
        ),
        ev(
            "steering/message",
            2,
            {"turn": 1, "message": user_data("wrapped", msg_id="steer-wrapped")},
            surfaceOp="append",
        ),
        ev(TURN_END, 3, {"turn": 1, "reason": {"kind": "completed"}}),
        ev(TURN_START, 4, {"turn": 2, "trigger": {"kind": "schedule"}}),
        ev(TURN_END, 5, {"turn": 2, "reason": {"kind": "aborted"}}),
        ev(TURN_START, 6, {"turn": 3}),
        ev(TURN_END, 7, {"turn": 3, "reason": {"kind": "disposed"}}),
        ev(TURN_START, 8, {"turn": 4}),
        ev(TURN_END, 9, {"turn": 4, "reason": {"kind": "error", "step": 1, "message": "boom"}}),
        ev(TURN_START, 10, {"turn": 5}),
        ev(TURN_END, 11, {"turn": 5, "reason": {"kind": "error", "step": 2, "message": "bad", "code": "E_BAD"}}),
        ev(TURN_START, 12, {"turn": 6}),
        ev(
            TURN_END,
            13,
            {
                "turn": 6,
                "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "c", "status": 503}},
            },
        ),
        ev(TURN_START, 14, {"turn": 7}),
        ev(TURN_END, 15, {"turn": 7, "reason": {"kind": "extension-reason"}}),
        ev(TURN_START, 16, {"turn": 8}),
        ev(TURN_END, 17, {"turn": 8, "reason": {"kind": "aborted", "reason": {"kind": "user"}}}),
        ev(TURN_START, 18, {"turn": 9}),
        ev(TURN_END, 19, {"turn": 9, "reason": {"kind": "max-tokens"}}),
    ]


MALFORMED_LOGS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "role-mismatch": (
        [
            turn_start(0),
            ev(
                USER_MESSAGE,
                1,
                {"id": "u1", "role": "assistant", "content": [], "source": {"kind": "user"}},
                surfaceOp="append",
            ),
        ],
        'message must have role "user"',
    ),
    "unidentified-message": (
        [
            turn_start(0),
            ev(
                USER_MESSAGE,
                1,
                {"role": "user", "content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}},
                surfaceOp="append",
            ),
        ],
        "lacks an identified message",
    ),
    "legacy-turn-start": (
        [ev(TURN_START, 0, {"turn": 1, "trigger": {"kind": "user"}, "extra": 1})],
        'session "{id}" contains malformed pre-react-loop turn/start at seq 0',
    ),
    "legacy-turn-end": (
        [turn_start(0), ev(TURN_END, 1, {"turn": 1, "reason": {"kind": "completed"}, "step": 1})],
        'session "{id}" contains malformed pre-react-loop turn/end at seq 1',
    ),
    "legacy-turn-end-reason": (
        [turn_start(0), ev(TURN_END, 1, {"turn": 1, "reason": {"kind": "completed", "why": "x"}})],
        'session "{id}" contains malformed pre-react-loop turn/end at seq 1',
    ),
    "legacy-steering": (
        [turn_start(0), ev("steering/message", 1, "not an object", surfaceOp="append")],
        'session "{id}" contains malformed pre-react-loop steering/message at seq 1',
    ),
}


def stored_raw(env: Harness, session_id: str = SID) -> list[Any]:
    """The stored prefix straight from a new backend instance (bypasses the coordinator's checks)."""
    backend = env.backend()
    prefix = backend.load_stored(session_id)
    return [] if prefix is None else list(prefix.events)


def _persist_live_and_dispose(env: Harness) -> tuple[Any, list[bytes]]:
    coordinator = env.coordinator()
    original = coordinator.store.create(SID, meta=live_meta())
    append_closed_turn(original)
    coordinator.store.dispose(original)
    return coordinator, event_bytes(stored(env))


def _cwd_collision(persisted: str, live: str) -> str:
    return re.escape(
        f'session "{SID}" is already persisted at a different cwd (persisted: {persisted}, live: {live}) (id collision)'
    )


def _write_foreign(env: Harness, meta: dict[str, Any], events: list[dict[str, Any]]) -> Any:
    backend = env.backend()
    backend.append_batch(meta, events, False)
    return backend


def _reads(coordinator: Any) -> list[Any]:
    def read_from(session_id: str) -> Any:
        return coordinator.read_from(session_id, 0)

    return [coordinator.load, coordinator.inspect, read_from]


def _check_raw_log_suffix(
    env: Harness, backend: Any, meta: dict[str, Any], err: SessionFormatUnsupportedError, operation: str
) -> None:
    location = backend.locate(meta)
    if env.factory.contract.cites_raw_log(location):
        assert location is not None
        assert f" (raw log: {location})" in str(err), f"{operation}: {err}"
        assert err.location == location, operation
    else:
        assert "(raw log:" not in str(err)


class _FailNextAppend:
    """Mixin: the next non-empty ``append_batch`` raises before touching storage (one injected fault)."""

    armed: ClassVar[list[bool]] = []
    attempts: ClassVar[list[list[int]]] = []

    def append_batch(self, meta: Any, events: Any, materialized: bool) -> None:
        if events:
            self.attempts.append([event["seq"] for event in events])
            if self.armed:
                self.armed.clear()
                raise OSError("injected append fault")
        super().append_batch(meta, events, materialized)  # type: ignore[misc]


def _fail_once_mixin() -> type[_FailNextAppend]:
    return type("FailNextAppend", (_FailNextAppend,), {"armed": [], "attempts": []})


# --- the contract ----------------------------------------------------------------------------------------------


class BackendContract(ABC):
    """Base test class of the backend contract: subclass it as ``TestXContract`` and define :meth:`make_backend`.

    Its name has no ``Test`` prefix, so pytest collects the ``Test…`` subclasses only, not the base class
    a test module imports; an intermediate base (``_MyContract``) is not collected either. It sets no
    ``__test__``: pytest would collect any class whose ``__test__`` is true, whatever its name, and a
    false one would be inherited by the subclasses. pytest skips abstract classes, so a subclass that
    does not define :meth:`make_backend` runs nothing.
    """

    #: The backend's name in messages (default: the subclass name).
    kind: ClassVar[str] = ""
    #: Whether the backend's log can end in a torn write (then :meth:`inject_torn_tail` must be defined);
    #: ``None`` (the default): derived, true when the subclass defines :meth:`inject_torn_tail`.
    has_torn_tail: ClassVar[bool | None] = None
    #: Whether ``locate()`` names a raw log file that format errors cite as ``(raw log: <path>)``;
    #: ``None`` (the default): derived, true when ``locate()`` names an existing file for a stored session.
    locates_raw_log: ClassVar[bool | None] = None
    #: Whether the storage can hold a damaged header (then :meth:`damage_header` must be defined);
    #: ``None`` (the default): derived, true when the subclass defines :meth:`damage_header`.
    can_damage_header: ClassVar[bool | None] = None

    def tears(self) -> bool:
        """Whether the torn-tail tests run: :attr:`has_torn_tail`, else whether :meth:`inject_torn_tail` is defined."""
        if self.has_torn_tail is not None:
            return self.has_torn_tail
        return type(self).inject_torn_tail is not BackendContract.inject_torn_tail

    def damages_header(self) -> bool:
        """Whether damaged headers are stored: :attr:`can_damage_header`, else whether :meth:`damage_header`
        is defined."""
        if self.can_damage_header is not None:
            return self.can_damage_header
        return type(self).damage_header is not BackendContract.damage_header

    def cites_raw_log(self, location: str | None) -> bool:
        """Whether a format error must cite ``location`` (what ``locate()`` returned for a stored session):
        :attr:`locates_raw_log`, else whether ``location`` names an existing file."""
        if self.locates_raw_log is not None:
            return self.locates_raw_log
        return location is not None and os.path.isfile(location)

    def new_location(self, tmp_path: Path) -> Any:
        """A fresh storage location for one test; ``make_backend`` receives it (default: ``tmp_path / "store"``)."""
        return tmp_path / "store"

    @abstractmethod
    def make_backend(self, location: Any) -> Backend:
        """A NEW backend instance over the storage at ``location`` (the same storage on every call)."""

    def inject_torn_tail(self, location: Any, meta: Mapping[str, Any], next_seq: int) -> None:
        """Append a torn (half-written) record for event ``next_seq`` to the stored log of ``meta["id"]``.

        Optional: defining it runs the torn-tail tests (a backend whose log cannot tear leaves it undefined).
        """
        raise NotImplementedError(f"{type(self).__name__} defines no inject_torn_tail (has_torn_tail is true)")

    def damage_header(self, location: Any, meta: Mapping[str, Any]) -> None:
        """Damage the stored header of ``meta["id"]`` so listing reports it with an ``error_code``.

        Optional: a backend that cannot hold a damaged header (the memory backend) leaves it undefined, and
        the cases that use it store intact sessions only.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no damage_header (can_damage_header is true)")

    @pytest.fixture
    def env(self, tmp_path: Path) -> Iterator[ContractHarness]:
        harness = ContractHarness(ContractBackends(self, self.new_location(tmp_path)))
        yield harness
        harness.close()

    @pytest.fixture
    def torn_env(self, env: Harness) -> ContractHarness:
        if not self.tears():
            pytest.skip(f"{env.kind}: the backend has no torn tails")
        return env

    def test_31_round_trips_a_session(self, env: Harness) -> None:  # spec 8.3 #31
        meta = header(SID)
        events = [
            turn_start(0),
            user_event(1, 'grüße — \u2028 "quoted" \\ /'),
            step_start(2),
            chunk_event(3, "a"),
            chunk_event(4, "b"),
            chunk_event(5, "c"),
            chunk_event(6, "d"),
            assistant_event(7, "x" * 6000),
            step_end(8),
            turn_end(9),
            ev("plugin/note", 10, {"z": 1, "a": [1.5, None, True, {"nested": "v"}]}, ignorable=True),
        ]
        writer = env.coordinator()
        writer.create(meta)
        writer.append(SID, events)

        same = writer.load(SID)
        assert isinstance(same, SessionSnapshot)
        assert dict(same.meta) == meta
        assert event_bytes(same.events) == event_bytes(events)

        loaded = fresh(env).load(SID)
        assert dict(loaded.meta) == meta
        assert event_bytes(loaded.events) == event_bytes(events)

    def test_32_rejects_fractional_created_at_without_reserving_the_id(self, env: Harness) -> None:  # spec 8.3 #32
        coordinator = env.coordinator()
        with pytest.raises(
            InvalidOptionError, match=re.escape("session metadata createdAt must be a non-negative safe integer")
        ):
            coordinator.create(header(SID, created_at=1.5))  # type: ignore[arg-type]
        coordinator.create(header(SID))
        coordinator.append(SID, [turn_start(0), turn_end(1)])
        assert types(fresh(env).load(SID).events) == [TURN_START, TURN_END]

    def test_33_crash_recovery_closes_an_interrupted_turn(self, env: Harness) -> None:  # spec 8.3 #33
        log = open_turn_with_chunks()
        persist(env, log)
        closers = [step_closer(8, 1007), turn_closer(9, 1007)]

        reader = fresh(env)
        before = revision_of(reader)
        assert before is not None
        inspected = reader.inspect(SID)
        assert [dict(e) for e in inspected.events] == [*log, *closers]
        assert revision_of(reader) == before  # inspect balances in memory only
        assert event_bytes(reader.read_from(SID, 0).events) == event_bytes(log)

        loaded = reader.load(SID)
        assert [dict(e) for e in loaded.events] == [*log, *closers]
        after = revision_of(reader)
        assert after is not None and after != before
        assert seqs(stored(env)) == list(range(10))

        reader.append(SID, [turn_start(10, 2), turn_end(11, 2)])
        reloaded = fresh(env).load(SID)
        assert seqs(reloaded.events) == list(range(12))
        assert reloaded.events[9]["data"] == {"turn": 1, "reason": {"kind": "interrupted"}}

    def test_34_unstarted_tool_request_gets_a_retryable_synthetic_result(self, env: Harness) -> None:  # spec 8.3 #34
        log = [turn_start(0), user_event(1), step_start(2), assistant_event(3, None, "call-1")]
        persist(env, log)
        loaded = fresh(env).load(SID)
        expected = [tool_closer(4, 1003, "call-1", call_seq=None), step_closer(5, 1003), turn_closer(6, 1003)]
        assert [dict(e) for e in loaded.events][4:] == expected
        assert seqs(stored(env)) == list(range(7))

    def test_35_recorded_tool_call_without_result_reports_outcome_unknown(self, env: Harness) -> None:  # spec 8.3 #35
        log = [
            turn_start(0),
            user_event(1),
            step_start(2),
            assistant_event(3, None, "call-1"),
            tool_call_event(4, "call-1"),
        ]
        persist(env, log)
        coordinator = fresh(env)
        loaded = coordinator.load(SID)
        expected = [tool_closer(5, 1004, "call-1", call_seq=4), step_closer(6, 1004), turn_closer(7, 1004)]
        assert [dict(e) for e in loaded.events][5:] == expected
        result = loaded.events[5]["data"]
        assert result["error"] == {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
        assert "Do not retry blindly." in result["message"]["content"][0]["content"][0]["text"]

        session = coordinator.resume(SID)
        messages = session.derive_messages()
        assert messages[-2]["content"][-1] == {"type": "tool-call", "id": "call-1", "name": "bash", "arguments": "{}"}
        paired = messages[-1]
        assert paired["role"] == "user"
        assert paired["content"][0]["toolCallId"] == "call-1"
        assert paired["content"][0]["isError"] is True
        coordinator.store.dispose(session)

    def test_36_list_excludes_created_but_never_appended_sessions(self, env: Harness) -> None:  # spec 8.3 #36
        coordinator = env.coordinator()
        coordinator.create(header("lazy"))
        coordinator.create(header("written"))
        coordinator.append("written", [turn_start(0), turn_end(1)])
        listed = coordinator.list()
        assert [listing.id for listing in listed] == ["written"]
        assert all(isinstance(listing.revision, str) and listing.revision for listing in listed)
        assert [listing.id for listing in fresh(env).list()] == ["written"]

    def test_37_observation_reads_on_an_empty_store(self, env: Harness) -> None:  # spec 8.3 #37
        # The cancellation half of #37 (pre-aborted signals) has no counterpart in the synchronous design;
        # what remains is that an unaborted listing of an empty store resolves to [].
        coordinator = env.coordinator()
        assert coordinator.list() == []

    def test_38_read_from_returns_the_stored_suffix_without_mutating(self, env: Harness) -> None:  # spec 8.3 #38
        log = [*closed_turn(), turn_start(6, 2), user_event(7, "open")]
        meta = persist(env, log)
        reader = fresh(env)
        before = revision_of(reader)

        whole = reader.read_from(SID, 0)
        assert dict(whole.meta) == meta
        assert event_bytes(whole.events) == event_bytes(log)  # the open turn is served without closers
        assert event_bytes(reader.read_from(SID, 3).events) == event_bytes(log[3:])
        assert list(reader.read_from(SID, 8).events) == []
        assert list(reader.read_from(SID, 50).events) == []
        assert revision_of(reader) == before
        assert event_bytes(stored(env)) == event_bytes(log)

        with pytest.raises(SessionNotFoundError, match=re.escape('session "missing" not found')):
            reader.read_from("missing", 0)
        with pytest.raises(
            InvalidOptionError, match=re.escape("readFrom fromSeq must be a non-negative safe integer, got -1")
        ):
            reader.read_from(SID, -1)
        with pytest.raises(
            InvalidOptionError, match=re.escape("readFrom fromSeq must be a non-negative safe integer, got 1.5")
        ):
            reader.read_from(SID, 1.5)

    def test_38_read_from_every_from_seq_is_the_whole_read_sliced(self, env: Harness) -> None:  # spec 8.3 #38
        """A seek read (the optional ``load_stored_from``) answers exactly what the whole read answers,
        sliced, for every ``from_seq`` — across batches and packed chunk runs, and after a torn tail on
        a backend whose log can tear. A backend without a seek read passes trivially (whole read)."""
        chunks = [chunk_event(9 + k, f"c{k}") for k in range(5)]
        log = [*closed_turn(), turn_start(6, 2), user_event(7, "open"), step_start(8, 2), *chunks]
        log.append(ev("plugin/observation", 14, {"k": 1}, ignorable=True))
        meta = header(SID)
        writer = env.coordinator()
        writer.create(meta)
        for lo, hi in ((0, 3), (3, 8), (8, len(log))):
            writer.append(SID, log[lo:hi])
        states = ["clean"] if env.factory.inject_torn_tail is None else ["clean", "torn"]
        for state in states:
            if state == "torn":
                assert env.factory.inject_torn_tail is not None
                env.factory.inject_torn_tail(meta, len(log))
            reader = fresh(env)
            whole = event_bytes(reader.read_from(SID, 0).events)
            assert whole == event_bytes(log)  # no repair, no closers, the torn tail left out
            for from_seq in range(len(log) + 3):
                assert event_bytes(reader.read_from(SID, from_seq).events) == whole[from_seq:], (state, from_seq)
            backend = env.backend()
            seek = backend.load_stored_from if isinstance(backend, SeeksStored) else None
            if seek is not None:
                stored_whole = backend.load_stored(SID)
                assert stored_whole is not None
                for from_seq in range(len(log) + 3):
                    sought = seek(SID, from_seq)
                    assert sought is not None
                    assert sought.meta == stored_whole.meta and sought.revision == stored_whole.revision
                    assert event_bytes(sought.events) == event_bytes(stored_whole.events[from_seq:]), from_seq
                assert seek("missing", 1) is None

    def test_39_lists_stable_revisions_that_change_after_append(self, env: Harness) -> None:  # spec 8.3 #39
        persist(env, closed_turn())
        coordinator = fresh(env)
        first = revision_of(coordinator)
        assert isinstance(first, str) and first
        assert revision_of(coordinator) == first
        assert revision_of(fresh(env)) == first  # reopening the same storage yields the same revision
        coordinator.append(SID, [turn_start(6, 2)])
        second = revision_of(coordinator)
        assert second is not None and second != first
        assert revision_of(fresh(env)) == second

    def test_list_revisions_are_the_listed_revisions_and_move_with_appends(self, tmp_path: Path) -> None:
        """``list_revisions`` (the search index's per-search reconciliation) against listing and ``read_revision``.

        For random sets of sessions — appended, crash-repaired (an open turn closed by ``load``, over a torn
        tail where the backend has one), damaged headers where the backend can store one, created but
        never appended — the map holds every listed session's revision, is ``read_revision`` for each id,
        and after an append to one session differs in exactly that session. A backend without the
        optional method is checked through ``PersistenceCoordinator.list_revisions`` (built from listing).
        The plans come from hypothesis when it is installed (the ``test`` extra), else from a seeded random
        generator (the slim ``contract`` extra installs pytest only).
        """
        ids = ["s1", "s2", "a b", "caf\u00e9", "x/y", "~tilde", ".", "long-" + "n" * 40, "\u6f22\u5b57"]
        cwds = [CWD, None, "/other/project"]
        fates = ["closed", "repaired", "created-only"] + (["torn"] if self.tears() else [])
        fates += ["damaged"] if self.damages_header() else []
        examples = iter(range(10_000))

        def check(plan: list[tuple[str, str | None, str]], target: int) -> None:
            folder = tmp_path / f"example-{next(examples)}"
            folder.mkdir()
            location = self.new_location(folder)
            env = ContractHarness(ContractBackends(self, location))
            try:
                self._check_list_revisions(env, location, plan, target)
            finally:
                env.close()

        try:
            from hypothesis import HealthCheck, given, settings
            from hypothesis import strategies as st
        except ImportError:
            rng = random.Random(31)
            for _ in range(25):
                chosen = rng.sample(ids, rng.randint(1, 6))
                check([(i, rng.choice(cwds), rng.choice(fates)) for i in chosen], rng.randint(0, 5))
            return

        plans = st.lists(
            st.tuples(st.sampled_from(ids), st.sampled_from(cwds), st.sampled_from(fates)),
            min_size=1,
            max_size=6,
            unique_by=lambda item: item[0],
        )
        settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
            given(plan=plans, target=st.integers(min_value=0, max_value=5))(check)
        )()

    def _check_list_revisions(
        self, env: Harness, location: Any, plan: list[tuple[str, str | None, str]], target: int
    ) -> None:
        lengths: dict[str, int] = {}  # stored events of each materialized, readable session
        damaged: set[str] = set()
        for session_id, cwd, fate in plan:
            meta = header(session_id, cwd=cwd)
            if fate == "created-only":
                fresh(env).create(meta)
                continue
            persist(env, open_turn_with_chunks() if fate in ("repaired", "torn") else closed_turn(), meta)
            if fate == "torn":
                assert env.factory.inject_torn_tail is not None
                env.factory.inject_torn_tail(meta, 8)
            if fate in ("repaired", "torn"):
                assert len(fresh(env).load(session_id).events) == 10  # closers committed by the repair
            if fate == "damaged":
                self.damage_header(location, meta)
                damaged.add(session_id)
            else:
                lengths[session_id] = 10 if fate in ("repaired", "torn") else 6

        def revisions(backend: Any) -> dict[str, str]:
            found: dict[str, str] = (
                backend.list_revisions()
                if isinstance(backend, ListsRevisions)
                else env.coordinator(backend=backend).list_revisions()
            )
            assert list(found) == sorted(found), "list_revisions is sorted by id"
            return found

        def check_against_listing(backend: Any) -> dict[str, str]:
            found = revisions(backend)
            listings = backend.list_sessions()
            listed = {item.id: item.revision for item in listings if item.revision is not None}
            assert {item.id for item in listings if item.ok} == set(lengths)
            assert {k: v for k, v in found.items() if k not in damaged} == {
                k: v for k, v in listed.items() if k not in damaged
            }
            assert set(found) - damaged == set(lengths)
            for session_id in damaged & set(found):  # included or not: the index inspects and skips it
                if session_id in listed:
                    assert found[session_id] == listed[session_id]
            for session_id, revision in found.items():
                if session_id in damaged:
                    try:
                        current = backend.read_revision(session_id)
                    except SessionPersistenceCorruptionError:
                        continue  # a backend that validates the header on read_revision
                    assert current == revision, session_id
                else:
                    assert backend.read_revision(session_id) == revision, session_id
            assert env.coordinator(backend=backend).list_revisions() == found
            return found

        reader = env.backend()
        before = check_against_listing(reader)
        assert revisions(reader) == before  # stable while nothing is written
        if not lengths:
            return
        grown = sorted(lengths)[target % len(lengths)]
        writer = fresh(env)
        writer.append(grown, closed_turn(lengths[grown], 2))
        for backend in (reader, env.backend()):  # the same instance and a reopened one
            after = check_against_listing(backend)
            assert set(after) == set(before)
            assert {k for k in before if after[k] != before[k]} == {grown}

    def test_40_append_rejects_a_first_seq_that_is_not_the_stored_next_seq(self, env: Harness) -> None:  # spec 8.3 #40
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        coordinator.append(SID, [turn_start(0), user_event(1)])
        with pytest.raises(
            PersistenceError, match=re.escape('append seq mismatch for "s1": expected 2 at index 0, got 3')
        ):
            coordinator.append(SID, [ev(STEP_START, 3, {"turn": 1, "step": 1})])
        with pytest.raises(
            PersistenceError, match=re.escape('append seq mismatch for "s1": expected 2 at index 0, got 0')
        ):
            coordinator.append(SID, [turn_start(0)])
        assert seqs(stored(env)) == [0, 1]
        coordinator.append(SID, [step_start(2)])
        assert seqs(stored(env)) == [0, 1, 2]

    def test_41_append_rejects_a_mid_batch_seq_gap(self, env: Harness) -> None:  # spec 8.3 #41
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        with pytest.raises(
            PersistenceError, match=re.escape('append seq mismatch for "s1": expected 2 at index 2, got 3')
        ):
            coordinator.append(SID, [turn_start(0), user_event(1), step_end(3)])
        assert coordinator.list() == []  # nothing materialized
        coordinator.append(SID, [turn_start(0), user_event(1)])
        with pytest.raises(
            PersistenceError, match=re.escape('append seq mismatch for "s1": expected 3 at index 1, got 4')
        ):
            coordinator.append(SID, [step_start(2), step_end(4)])
        assert seqs(stored(env)) == [0, 1]

    @pytest.mark.parametrize("bad", list(NON_JSON_VALUES.values()), ids=list(NON_JSON_VALUES))
    def test_42_append_rejects_non_json_event_data(self, env: Harness, bad: Any) -> None:  # spec 8.3 #42
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        batch = [turn_start(0), ev(TOOL_CALL, 1, {"turn": 1, "step": 1, "callId": "c", "payload": {"x": [bad]}})]
        with pytest.raises(
            PersistenceError,
            match=re.escape(
                "session event batch is not losslessly JSON-serializable because it contains non-JSON-serializable data"
            ),
        ):
            coordinator.append(SID, batch)
        assert coordinator.list() == []
        coordinator.append(SID, [turn_start(0)])  # the id was not consumed and the cursor is still 0
        assert seqs(stored(env)) == [0]

    def test_43_persists_a_live_session_surviving_reload(self, env: Harness) -> None:  # spec 8.4 #43
        coordinator = env.coordinator()
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        append_closed_turn(session)
        assert store.flush(session) is True
        loaded = fresh(env).load(SID)
        assert len(loaded.events) == 6
        assert loaded.meta["cwd"] == CWD
        assert event_bytes(loaded.events) == event_bytes(session.events)

    # spec 8.4 #44
    def test_44_rejects_crash_repair_load_while_a_live_session_owns_the_prefix(self, env: Harness) -> None:
        coordinator = env.coordinator()
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        store.flush(session)
        with pytest.raises(PersistenceError, match=re.escape(LIVE_TURN_OPEN.format(id=SID))):
            coordinator.load(SID)
        assert types(stored(env)) == [TURN_START, USER_MESSAGE]  # no synthetic closers for a live id

        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        store.dispose(session)
        loaded = coordinator.load(SID)
        assert types(loaded.events) == [TURN_START, USER_MESSAGE, TURN_END]
        assert loaded.events[-1]["data"]["reason"] == {"kind": "completed"}

    # spec 8.4 #45
    def test_45_rechecks_live_ownership_after_a_cold_load_enters_the_per_id_chain(self, env: Harness) -> None:
        persist(env, [turn_start(0)])  # a cold log with an open turn

        entered = threading.Event()
        release = threading.Event()

        class GateFirstRead:
            gated: ClassVar[list[bool]] = []

            def load_stored(self, session_id: str) -> Any:
                if not self.gated:
                    self.gated.append(True)
                    entered.set()
                    release.wait(5)
                return super().load_stored(session_id)  # type: ignore[misc]

        coordinator = env.coordinator(wrap=GateFirstRead)
        store = coordinator.store
        outcome: dict[str, Any] = {}

        def create_live() -> None:
            outcome["session"] = store.create(SID, seed=[turn_start(0)], meta=live_meta())

        def cold_load() -> None:
            try:
                outcome["load"] = coordinator.load(SID)
            except BaseException as err:
                outcome["load_error"] = err

        creator = threading.Thread(target=create_live)
        creator.start()
        assert entered.wait(5)  # the live session's initialization is reading storage under the id's order
        loader = threading.Thread(target=cold_load)
        loader.start()
        time.sleep(0.1)  # let the load queue behind the initialization
        release.set()
        creator.join(10)
        loader.join(10)

        error = outcome.get("load_error")
        assert isinstance(error, PersistenceError), outcome
        assert re.search(re.escape(LIVE_TURN_OPEN.format(id=SID)), str(error)), f"{type(error).__name__}: {error}"
        session = outcome["session"]
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        store.dispose(session)
        loaded = coordinator.load(SID)
        assert types(loaded.events) == [TURN_START, SESSION_END_SEED, TURN_END]
        assert loaded.events[-1]["data"]["reason"] == {"kind": "completed"}

    def test_46_does_not_load_an_unmaterialized_empty_live_session(self, env: Harness) -> None:  # spec 8.4 #46
        coordinator = env.coordinator()
        coordinator.store.create(SID, meta=live_meta())
        with pytest.raises(SessionNotFoundError, match=re.escape(f'session "{SID}" not found')):
            coordinator.load(SID)

    def test_47_round_trips_the_seed_boundary(self, env: Harness) -> None:  # spec 8.4 #47
        coordinator = env.coordinator()
        session = coordinator.store.create(SID, seed=closed_turn(), meta=live_meta(seedLength=6))
        coordinator.store.flush(session)
        loaded = fresh(env).load(SID)
        assert loaded.meta["seedLength"] == 6
        assert types(loaded.events)[6] == SESSION_END_SEED

    def test_48_round_trips_the_delegation_depth(self, env: Harness) -> None:  # spec 8.4 #48
        coordinator = env.coordinator()
        session = coordinator.store.create(SID, meta=live_meta(delegationDepth=3, origin="subagent"))
        append_closed_turn(session)
        coordinator.store.flush(session)
        loaded = fresh(env).load(SID)
        assert loaded.meta["delegationDepth"] == 3
        assert loaded.meta["origin"] == "subagent"

    def test_49_source_frozen_events_cannot_be_mutated_after_buffering(self, env: Harness) -> None:  # spec 8.4 #49
        coordinator = env.coordinator(batch_delay_ms=60_000)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        data = {"turn": 1}
        event = session.append(TURN_START, data)
        message = user_data("original")
        session.append(USER_MESSAGE, message, APPEND_INTENT)
        data["turn"] = 99
        message["content"][0]["text"] = "mutated by the caller"
        with pytest.raises(TypeError):
            event["data"]["turn"] = 2
        with pytest.raises(TypeError):
            event["seq"] = 7
        with pytest.raises(TypeError):
            session.events[1]["data"]["content"].append({"type": "text", "text": "x"})
        store.flush(session)
        loaded = stored(env)
        assert loaded[0]["data"] == {"turn": 1}
        assert loaded[1]["data"]["content"] == [{"type": "text", "text": "original"}]

    # spec 8.4 #50
    def test_50_load_and_inspect_return_immutable_identified_message_snapshots(self, env: Harness) -> None:
        persist(env, closed_turn())
        coordinator = fresh(env)
        inspected = coordinator.inspect(SID)
        assert inspected.events[1]["data"]["id"] == "user-1"
        assert inspected.events[3]["data"]["message"]["id"] == "assistant-3"
        _assert_immutable(inspected)
        loaded = coordinator.load(SID)
        _assert_immutable(loaded)
        assert event_bytes(stored(env)) == event_bytes(closed_turn())

    def test_51_loads_pre_identity_message_logs_into_resumable_sessions(self, env: Harness) -> None:  # spec 8.4 #51
        persist(env, _pre_identity_log())
        coordinator = fresh(env)
        loaded = coordinator.load(SID)
        events = loaded.events
        assert events[1]["data"] == {
            "content": [{"type": "text", "text": "hello"}],
            "source": {"kind": "user"},
            "id": f"legacy-message:{SID}:1",
            "role": "user",
        }
        assert events[3]["data"] == {
            "turn": 1,
            "step": 1,
            "message": {
                "id": f"legacy-message:{SID}:3",
                "role": "assistant",
                "content": [{"type": "tool-call", "id": "call-1", "name": "bash", "arguments": "{}"}],
                "source": {"provider": "mock", "model": "mock", "kind": "model"},
            },
        }
        assert events[5]["data"]["message"]["id"] == f"legacy-message:{SID}:5"
        replacement = events[6]["data"]["message"]
        assert replacement["id"] == f"legacy-message:{SID}:5"  # a replacement inherits its target's id
        assert replacement["source"] == {"kind": "tool", "callId": "call-1"}
        assert replacement["content"] == [
            {
                "type": "tool-result",
                "toolCallId": "call-1",
                "content": [{"type": "text", "text": "short"}],
                "isError": False,
            }
        ]

        suffix = coordinator.read_from(SID, 6)
        assert seqs(suffix.events) == [6, 7, 8]
        assert suffix.events[0]["data"]["message"]["id"] == f"legacy-message:{SID}:5"

        session = coordinator.resume(SID)
        messages = session.derive_messages()
        assert [m["id"] for m in messages] == [f"legacy-message:{SID}:{n}" for n in (1, 3, 5)]
        assert messages[-1]["content"][0]["content"] == [{"type": "text", "text": "short"}]
        coordinator.store.dispose(session)

    def test_52_loads_pre_react_loop_logs_into_resumable_sessions(self, env: Harness) -> None:  # spec 8.4 #52
        persist(env, _pre_react_loop_log())
        coordinator = fresh(env)
        events = coordinator.load(SID).events
        assert len(events) == 20
        assert events[0]["data"] == {"turn": 1}
        assert events[1]["type"] == USER_MESSAGE
        assert events[1]["data"] == {
            "content": [{"type": "text", "text": "flat"}],
            "source": {"kind": "user"},
            "id": f"legacy-message:{SID}:1",
            "role": "user",
        }
        assert events[1]["surfaceOp"] == "append"
        assert events[2]["type"] == USER_MESSAGE
        assert events[2]["data"] == user_data("wrapped", msg_id="steer-wrapped")
        reasons = {e["seq"]: e["data"]["reason"] for e in events if e["type"] == TURN_END}
        assert reasons == {
            3: {"kind": "completed"},
            5: {"kind": "aborted", "reason": {"kind": "legacy"}},
            7: {"kind": "aborted", "reason": {"kind": "disposed"}},
            9: {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}},
            11: {"kind": "error", "error": {"message": "bad", "code": "E_BAD"}},
            13: {"kind": "error", "error": {"message": "m", "code": "c", "status": 503}},
            15: {"kind": "extension-reason"},
            17: {"kind": "aborted", "reason": {"kind": "user"}},
            19: {"kind": "max-tokens"},
        }
        assert all(set(e["data"]) == {"turn", "reason"} for e in events if e["type"] == TURN_END)
        assert events[4]["data"] == {"turn": 2}

        suffix = coordinator.read_from(SID, 2)
        assert suffix.events[0]["type"] == USER_MESSAGE
        assert suffix.events[0]["data"]["id"] == "steer-wrapped"

        session = coordinator.resume(SID)
        assert [m["id"] for m in session.derive_messages()] == [f"legacy-message:{SID}:1", "steer-wrapped"]
        coordinator.store.dispose(session)

    @pytest.mark.parametrize("case", list(MALFORMED_LOGS))
    def test_53_rejects_malformed_persisted_message_events(self, env: Harness, case: str) -> None:  # spec 8.4 #53
        log, text = MALFORMED_LOGS[case]
        persist_unloadable(env, log)
        coordinator = fresh(env)
        inner = re.escape(text.format(id=SID))
        with pytest.raises(
            SessionPersistenceCorruptionError,
            match=re.escape(f'stored session "{SID}" failed validation: ') + ".*" + inner,
        ):
            coordinator.inspect(SID)
        with pytest.raises(SessionPersistenceCorruptionError, match=inner):
            coordinator.load(SID)
        with pytest.raises(AgentlogError, match=inner):
            coordinator.read_from(SID, 0)
        assert event_bytes(stored_raw(env)) == event_bytes(log)

    def test_53_ignorable_unknown_plugin_events_with_null_data_pass(self, env: Harness) -> None:  # spec 8.4 #53
        log = [turn_start(0), ev("plugin/observation", 1, None, ignorable=True), turn_end(2)]
        persist(env, log)
        coordinator = fresh(env)
        inspected = coordinator.inspect(SID)
        assert event_bytes(inspected.events) == event_bytes(log)
        assert event_bytes(coordinator.read_from(SID, 1).events) == event_bytes(log[1:])

    def test_54_append_snapshots_the_batch(self, env: Harness) -> None:  # spec 8.4 #54
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        batch = closed_turn()
        expected = event_bytes(batch)
        coordinator.append(SID, batch)
        batch[1]["data"]["content"][0]["text"] = "mutated"
        batch[0]["seq"] = 42
        batch.append(turn_start(6, 2))
        assert event_bytes(coordinator.load(SID).events) == expected
        assert event_bytes(fresh(env).load(SID).events) == expected

    def test_55_fork_persists_its_seed_once(self, env: Harness) -> None:  # spec 8.4 #55
        coordinator = env.coordinator()
        store = coordinator.store
        parent = store.create("parent", meta=live_meta())
        append_closed_turn(parent)
        child = store.fork(parent, child_id="child")
        assert store.flush(child) is True
        durable = stored(env, "child")
        assert seqs(durable) == list(range(7))
        assert durable[6]["type"] == SESSION_END_SEED
        assert event_bytes(durable) == event_bytes(child.events)
        revision = revision_of(coordinator, "child")
        store.flush(child)  # a no-op flush writes nothing
        assert revision_of(coordinator, "child") == revision
        assert len(stored(env, "child")) == 7
        meta = fresh(env).load("child").meta
        assert meta["parentSession"] == "parent"
        assert meta["seedLength"] == 6

    # spec 8.4 #56
    def test_56_resumed_session_seeded_with_the_loaded_log_continues_the_seq(self, env: Harness) -> None:
        coordinator = env.coordinator()
        store = coordinator.store
        first = store.create(SID, meta=live_meta())
        append_closed_turn(first)
        store.dispose(first)
        loaded = coordinator.load(SID)
        second = store.create(SID, seed=list(loaded.events), meta=live_meta())
        second.append(TURN_START, {"turn": 2})
        second.append(TURN_END, {"turn": 2, "reason": {"kind": "completed"}})
        store.flush(second)
        durable = stored(env)
        assert seqs(durable) == list(range(9))
        assert durable[6]["type"] == SESSION_END_SEED
        assert event_bytes(durable) == event_bytes(second.events)

    def test_57_hmr_applying_persistence_seeds_existing_live_sessions(self, env: Harness) -> None:  # spec 8.4 #57
        store = SessionStore()
        session = store.create(SID, meta=live_meta())
        append_closed_turn(session)
        env.coordinator(store)
        session.append(TURN_START, {"turn": 2})
        store.flush(session)
        durable = stored(env)
        assert seqs(durable) == list(range(7))
        assert event_bytes(durable) == event_bytes(session.events)

    def test_58_hmr_dispose_drains_remaining_buffers(self, env: Harness) -> None:  # spec 8.4 #58
        coordinator = env.coordinator(batch_delay_ms=60_000)
        session = coordinator.store.create(SID, meta=live_meta())
        append_closed_turn(session)
        assert durable_count(env) == 0
        coordinator.close()
        assert event_bytes(stored(env)) == event_bytes(session.events)

    def test_59_hmr_reloading_adopts_a_still_live_materialized_session(self, env: Harness) -> None:  # spec 8.4 #59
        store = SessionStore()
        first = env.coordinator(store)
        session = store.create(SID, meta=live_meta())
        append_closed_turn(session)
        store.flush(session)
        first.close()
        env.coordinator(store)  # a second backend instance adopts the still-live session
        append_closed_turn(session, turn=2)
        store.flush(session)
        durable = stored(env)
        assert seqs(durable) == list(range(12))
        assert event_bytes(durable) == event_bytes(session.events)

    def test_60_hmr_adoption_persists_the_live_suffix_ahead_of_storage(self, env: Harness) -> None:  # spec 8.4 #60
        store = SessionStore()
        first = env.coordinator(store)
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        store.flush(session)
        first.close()
        session.append(STEP_START, {"turn": 1, "step": 1})  # no persistence attached while these commit
        session.append(STEP_END, {"turn": 1, "step": 1})
        env.coordinator(store)
        store.flush(session)
        durable = stored(env)
        assert seqs(durable) == [0, 1, 2, 3]
        assert event_bytes(durable) == event_bytes(session.events)

    def test_61_hmr_adoption_does_not_crash_repair_an_active_open_turn(self, env: Harness) -> None:  # spec 8.4 #61
        store = SessionStore()
        first = env.coordinator(store)
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        session.append(STEP_START, {"turn": 1, "step": 1})
        store.flush(session)
        first.close()
        inject = env.factory.inject_torn_tail
        if inject is not None:  # the memory backend has no torn tails
            inject(header(SID), 3)
            prefix = env.backend().load_stored(SID)
            assert prefix is not None and prefix.torn_marker is not None
        env.coordinator(store)
        session.append(STEP_END, {"turn": 1, "step": 1})
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(session)
        loaded = fresh(env).load(SID)
        assert types(loaded.events) == [TURN_START, USER_MESSAGE, STEP_START, STEP_END, TURN_END]
        assert loaded.events[-1]["data"]["reason"] == {"kind": "completed"}
        assert event_bytes(loaded.events) == event_bytes(session.events)

    def test_62_new_live_session_colliding_on_a_persisted_id_is_rejected(self, env: Harness) -> None:  # spec 8.4 #62
        coordinator, expected = _persist_live_and_dispose(env)
        # refused at once by create, not at the first flush
        with pytest.raises(SessionExistsError, match=re.escape(f'coordinator.resume("{SID}")')) as info:
            coordinator.store.create(SID, meta=live_meta())
        assert info.value.code == "SESSION_ALREADY_EXISTS"
        assert coordinator.store.get(SID) is None
        assert event_bytes(stored(env)) == expected

    def test_62_new_live_session_of_another_instance_colliding_is_rejected(self, env: Harness) -> None:  # spec 8.4 #62
        _, expected = _persist_live_and_dispose(env)
        other = fresh(env)  # the same from another process
        with pytest.raises(SessionExistsError, match=re.escape(f'coordinator.resume("{SID}")')):  # at once
            other.store.create(SID, meta=live_meta())
        assert event_bytes(stored(env)) == expected

    def test_63_an_abandoned_lazy_session_releases_its_id(self, env: Harness) -> None:  # spec 8.4 #63
        coordinator = env.coordinator()
        store = coordinator.store
        lazy = store.create(SID, meta=live_meta())
        store.dispose(lazy)
        reuse = store.create(SID, meta=live_meta())
        append_closed_turn(reuse)
        assert store.flush(reuse) is True
        assert event_bytes(fresh(env).load(SID).events) == event_bytes(reuse.events)

    def test_64_disposal_drains_buffered_events_before_retiring_ownership(self, env: Harness) -> None:  # spec 8.4 #64
        coordinator = env.coordinator(batch_delay_ms=60_000)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        append_closed_turn(session)
        assert durable_count(env) == 0
        store.dispose(session)
        assert event_bytes(stored(env)) == event_bytes(session.events)
        with pytest.raises(SessionExistsError, match=re.escape(f'coordinator.resume("{SID}")')):  # at once
            store.create(SID, meta=live_meta())

    def test_65_init_for_is_idempotent(self, env: Harness) -> None:  # spec 8.4 #65
        coordinator = env.coordinator()
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        # Python has no public re-announcement; re-emit session/created to the coordinator's listener.
        coordinator._on_created(session)
        store.flush(session)
        assert seqs(stored(env)) == [0, 1, 2]

    # spec 8.4 #66
    def test_66_live_session_claims_cursor_zero_ownerless_state_and_persists_its_seed(self, env: Harness) -> None:
        coordinator = env.coordinator()
        coordinator.create(header(SID, created_at=1000))
        session = coordinator.store.create(SID, seed=closed_turn(), meta=live_meta(created_at=2000))
        coordinator.store.flush(session)
        loaded = fresh(env).load(SID)
        assert seqs(loaded.events) == list(range(7))
        assert loaded.events[6]["type"] == SESSION_END_SEED
        assert loaded.meta["createdAt"] == 1000  # a claimed cursor-0 state materializes with the created header

    def test_67_fresh_session_reusing_a_loaded_id_is_rejected(self, env: Harness) -> None:  # spec 8.4 #67
        persist(env, closed_turn())
        coordinator = fresh(env)
        coordinator.load(SID)
        with pytest.raises(SessionExistsError, match=re.escape(f'coordinator.resume("{SID}")')):  # at once
            coordinator.store.create(SID, meta=live_meta())
        # a seed that does not cover the stored log still collides at flush, as in the original
        session = coordinator.store.create(SID, seed=[turn_start(0)], meta=live_meta())
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        with pytest.raises(
            SessionCollisionError,
            match=re.escape(
                f'session "{SID}" is already persisted with 6 event(s) that do not match this live session (id collision)'  # noqa: E501
            ),
        ):
            coordinator.store.flush(session)
        assert event_bytes(stored(env)) == event_bytes(closed_turn())

    # spec 8.4 #68
    def test_68_complete_matching_seed_claims_loaded_state_without_appending(self, env: Harness) -> None:
        log = [*closed_turn(), ev(SESSION_END_SEED, 6, {})]
        persist(env, log)
        coordinator = fresh(env)
        loaded = coordinator.load(SID)
        before = revision_of(coordinator)
        session = coordinator.store.create(SID, seed=list(loaded.events), meta=live_meta())
        assert len(session.events) == 7
        assert coordinator.store.flush(session) is True
        assert revision_of(coordinator) == before
        assert event_bytes(stored(env)) == event_bytes(log)

    def test_69_matching_seed_claims_loaded_state_and_persists_the_suffix(self, env: Harness) -> None:  # spec 8.4 #69
        persist(env, closed_turn(), header(SID, created_at=1000))
        coordinator = fresh(env)
        loaded = coordinator.load(SID)
        session = coordinator.store.create(SID, seed=list(loaded.events), meta=live_meta(created_at=2000))
        session.append(TURN_START, {"turn": 2})
        session.append(TURN_END, {"turn": 2, "reason": {"kind": "completed"}})
        coordinator.store.flush(session)
        reloaded = fresh(env).load(SID)
        assert seqs(reloaded.events) == list(range(9))
        assert reloaded.events[6]["type"] == SESSION_END_SEED
        assert reloaded.meta["createdAt"] == 1000  # the stored header wins over the live one
        assert event_bytes(reloaded.events) == event_bytes(session.events)

    def test_70_different_cwd_cannot_claim_cursor_zero_ownerless_state(self, env: Harness) -> None:  # spec 8.4 #70
        coordinator = env.coordinator()
        coordinator.create(header(SID, cwd="/a"))
        session = coordinator.store.create(SID, meta=live_meta(cwd="/b"))
        session.append(TURN_START, {"turn": 1})
        with pytest.raises(SessionCollisionError, match=_cwd_collision("/a", "/b")):
            coordinator.store.flush(session)
        assert coordinator.list() == []

    def test_71_different_cwd_cannot_claim_loaded_prefix_state(self, env: Harness) -> None:  # spec 8.4 #71
        persist(env, closed_turn(), header(SID, cwd="/a"))
        coordinator = fresh(env)
        loaded = coordinator.load(SID)
        session = coordinator.store.create(SID, seed=list(loaded.events), meta=live_meta(cwd="/b"))
        with pytest.raises(SessionCollisionError, match=_cwd_collision("/a", "/b")):
            coordinator.store.flush(session)
        assert event_bytes(stored(env)) == event_bytes(closed_turn())

    def test_72_no_cwd_ownerless_state_cannot_be_claimed_with_a_cwd(self, env: Harness) -> None:  # spec 8.4 #72
        coordinator = env.coordinator()
        coordinator.create(header(SID, cwd=None))
        session = coordinator.store.create(SID, meta=live_meta(cwd="/b"))
        session.append(TURN_START, {"turn": 1})
        with pytest.raises(SessionCollisionError, match=_cwd_collision("undefined", "/b")):
            coordinator.store.flush(session)

    def test_73_append_adopts_a_storage_only_session(self, env: Harness) -> None:  # spec 8.4 #73
        persist(env, closed_turn())
        coordinator = fresh(env)
        coordinator.append(SID, [turn_start(6, 2)])
        with pytest.raises(
            PersistenceError, match=re.escape(f'append seq mismatch for "{SID}": expected 7 at index 0, got 0')
        ):
            coordinator.append(SID, [turn_start(0)])
        assert seqs(fresh(env).load(SID).events)[:7] == list(range(7))
        with pytest.raises(SessionNotFoundError, match=re.escape('session "ghost" not found')):
            coordinator.append("ghost", [turn_start(0)])

    def test_74_append_of_an_empty_batch_is_a_no_op(self, env: Harness) -> None:  # spec 8.4 #74
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        coordinator.append(SID, [])
        assert coordinator.list() == []
        with pytest.raises(SessionNotFoundError):
            coordinator.read_from(SID, 0)
        coordinator.append(SID, [turn_start(0)])
        before = revision_of(coordinator)
        coordinator.append(SID, [])
        assert revision_of(coordinator) == before
        assert seqs(stored(env)) == [0]

    def test_75_load_and_inspect_reject_a_missing_session(self, env: Harness) -> None:  # spec 8.4 #75
        coordinator = env.coordinator()
        for operation in (coordinator.load, coordinator.inspect, coordinator.prepare):
            with pytest.raises(SessionNotFoundError, match=re.escape('session "missing" not found')) as info:
                operation("missing")
            assert info.value.code == "SESSION_NOT_FOUND"

    def test_76_create_rejects_a_duplicate_id(self, env: Harness) -> None:  # spec 8.4 #76
        coordinator = env.coordinator()
        coordinator.create(header(SID))
        with pytest.raises(PersistenceError, match=re.escape(f'session "{SID}" already exists in this backend')):
            coordinator.create(header(SID))
        coordinator.append(SID, closed_turn())
        other = fresh(env)
        on_disk = re.escape(f'session "{SID}" already has a persisted log on disk; load/resume it instead of creating')
        with pytest.raises(PersistenceError, match=on_disk):
            other.create(header(SID))
        with pytest.raises(PersistenceError, match=on_disk):
            other.create(header(SID, cwd="/somewhere/else"))  # the same id under a different cwd collides too

    def test_77_rejects_a_newer_format_version_naming_the_upgrade(self, env: Harness) -> None:  # spec 8.4 #77
        meta = header(SID)
        meta["version"] = 1
        backend = _write_foreign(env, meta, closed_turn())
        coordinator = fresh(env)
        text = re.escape(
            f'session "{SID}" uses log format v1, but this harness reads only v0: '
            "the log was written by a newer harness — upgrade the harness to open it"
        )
        for read in _reads(coordinator):
            with pytest.raises(SessionFormatUnsupportedError, match=text) as info:
                read(SID)
            assert info.value.code == "SESSION_FORMAT_UNSUPPORTED"
            _check_raw_log_suffix(env, backend, meta, info.value, read.__name__)

    def test_78_rejects_an_older_format_version_without_an_upgrade_path(self, env: Harness) -> None:  # spec 8.4 #78
        meta = header(SID)
        meta["version"] = -1
        backend = _write_foreign(env, meta, closed_turn())
        coordinator = fresh(env)
        text = re.escape(
            f'session "{SID}" uses log format v-1, older than the supported v0, and this build ships no upgrade path for it'  # noqa: E501
        )
        for read in _reads(coordinator):
            with pytest.raises(SessionFormatUnsupportedError, match=text) as info:
                read(SID)
            _check_raw_log_suffix(env, backend, meta, info.value, read.__name__)

    def test_79_rejects_an_unknown_event_type_unless_ignorable(self, env: Harness) -> None:  # spec 8.4 #79
        meta = persist_unloadable(env, [turn_start(0), ev("plugin/unknown", 1, {"x": 1}), turn_end(2)])
        coordinator = fresh(env)
        text = re.escape(
            f'session "{SID}" contains event type "plugin/unknown" (seq 1) unknown to this harness and not marked '
            "ignorable; refusing to interpret the log — it was likely written by a newer harness"
        )
        for read in _reads(coordinator):
            with pytest.raises(SessionFormatUnsupportedError, match=text) as info:
                read(SID)
            _check_raw_log_suffix(env, env.backend(), meta, info.value, read.__name__)

        log = [turn_start(0), ev("plugin/unknown", 1, {"x": 1}, ignorable=True), turn_end(2)]
        persist(env, log, header("tolerant"))
        assert event_bytes(fresh(env).load("tolerant").events) == event_bytes(log)

    def test_80_round_trips_a_header_with_parent_session(self, env: Harness) -> None:  # spec 8.4 #80
        meta = persist(env, closed_turn(), header(SID, parentSession="parent-7"))
        loaded = fresh(env).load(SID)
        assert loaded.meta["parentSession"] == "parent-7"
        assert dict(loaded.meta) == meta

    def test_81_flush_right_after_appends_persists_them(self, env: Harness) -> None:  # spec 8.4 #81
        coordinator = env.coordinator(batch_delay_ms=60_000)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        assert store.flush(session) is True
        assert seqs(stored(env)) == [0, 1, 2]

    # spec 8.4 #82
    def test_82_torn_tail_is_truncated_and_the_open_turn_closed_on_load(self, torn_env: Harness) -> None:
        env = torn_env
        log = open_turn_with_chunks()
        meta = persist(env, log)
        assert env.factory.inject_torn_tail is not None
        env.factory.inject_torn_tail(meta, 8)
        prefix = env.backend().load_stored(SID)
        assert prefix is not None and prefix.torn_marker is not None  # the injection produced a torn tail
        assert seqs(prefix.events) == list(range(8))

        reader = fresh(env)
        before = revision_of(reader)
        inspected = reader.inspect(SID)
        assert seqs(inspected.events) == list(range(10))
        assert revision_of(reader) == before  # inspect neither truncates nor closes

        loaded = reader.load(SID)
        assert seqs(loaded.events) == list(range(10))
        assert [dict(e) for e in loaded.events][8:] == [step_closer(8, 1007), turn_closer(9, 1007)]
        assert revision_of(reader) != before
        durable = stored(env)
        assert [dict(e) for e in durable] == [*log, step_closer(8, 1007), turn_closer(9, 1007)]
        assert stored_raw(env)[-1]["type"] == TURN_END  # the torn fragment is gone from storage

        reader.append(SID, [turn_start(10, 2), turn_end(11, 2)])
        reloaded = fresh(env).load(SID)
        assert seqs(reloaded.events) == list(range(12))
        assert reloaded.events[9]["data"]["reason"] == {"kind": "interrupted"}

    def test_live_events_are_durable_when_flush_returns(self, env: Harness) -> None:
        coordinator = env.coordinator(batch_delay_ms=60_000)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        append_closed_turn(session)
        assert store.flush(session) is True
        loaded = fresh(env).load(SID)
        assert event_bytes(loaded.events) == event_bytes(session.events)
        session.append(TURN_START, {"turn": 2})
        coordinator.flush(session)
        assert seqs(stored(env)) == list(range(7))

    def test_a_second_writer_instance_is_locked_out_until_disposal(self, env: Harness) -> None:
        first = env.coordinator()
        session = first.store.create(SID, meta=live_meta())
        append_closed_turn(session)
        first.store.flush(session)
        lazy = first.store.create("lazy", meta=live_meta())

        second = fresh(env)
        started = time.monotonic()
        with pytest.raises(SessionLockedError) as info:
            second.resume(SID)
        assert info.value.code == "SESSION_LOCKED"
        with pytest.raises(SessionLockedError):
            second.store.create("lazy", meta=live_meta())
        assert time.monotonic() - started < 2.0  # refused at once, not after a wait
        assert second.store.get(SID) is None and second.store.get("lazy") is None

        first.store.dispose(session)
        first.store.dispose(lazy)
        resumed = second.resume(SID)
        assert event_bytes(resumed.events[:6]) == event_bytes(session.events)
        reused = second.store.create("lazy", meta=live_meta())
        reused.append(TURN_START, {"turn": 1})
        second.store.flush(reused)
        resumed.append(TURN_START, {"turn": 2})
        second.store.flush(resumed)
        assert seqs(stored(env)) == list(range(8))
        assert seqs(stored(env, "lazy")) == [0]

    def test_a_background_write_lands_within_a_few_batch_windows(self, env: Harness) -> None:
        coordinator = env.coordinator(batch_delay_ms=20)
        session = coordinator.store.create(SID, meta=live_meta())
        append_closed_turn(session)
        assert wait_until(lambda: durable_count(env) == 6, timeout=2.0)
        assert event_bytes(stored(env)) == event_bytes(session.events)
        session.append(TURN_START, {"turn": 2})
        assert wait_until(lambda: durable_count(env) == 7, timeout=2.0)

    def test_a_failed_flush_batch_is_retried_in_order(self, env: Harness) -> None:
        mixin = _fail_once_mixin()
        coordinator = env.coordinator(wrap=mixin, batch_delay_ms=60_000)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
        store.flush(session)
        mixin.armed.append(True)
        session.append(STEP_START, {"turn": 1, "step": 1})
        session.append(STEP_END, {"turn": 1, "step": 1})
        with pytest.raises(OSError, match="injected append fault"):
            store.flush(session)
        assert seqs(stored(env)) == [0, 1]
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(session)
        assert mixin.attempts == [[0, 1], [2, 3], [2, 3, 4]]
        assert event_bytes(stored(env)) == event_bytes(session.events)

    def test_a_failed_background_batch_is_retained_and_retried_in_order(
        self, env: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        mixin = _fail_once_mixin()
        mixin.armed.append(True)  # the materializing write fails
        coordinator = env.coordinator(wrap=mixin, batch_delay_ms=20)
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        with caplog.at_level(logging.WARNING, logger="agentlog"):
            session.append(TURN_START, {"turn": 1})
            session.append(USER_MESSAGE, user_data("q"), APPEND_INTENT)
            assert wait_until(lambda: len(mixin.attempts) >= 1, timeout=2.0)
            time.sleep(0.15)  # several windows: automatic retries are paused after a failure
            assert mixin.attempts == [[0, 1]]
            assert durable_count(env) == 0
            session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})  # a new event re-arms the window
            assert wait_until(lambda: durable_count(env) == 3, timeout=2.0)
        assert mixin.attempts == [[0, 1], [0, 1, 2]]
        assert event_bytes(stored(env)) == event_bytes(session.events)
        warnings = [r.getMessage() for r in caplog.records if "background write" in r.getMessage()]
        assert len(warnings) == 1
        assert f'background write for session "{SID}" failed (buffered events retained)' in warnings[0]

    def test_a_20000_deep_json_value_persists_and_loads_back_equal(self, env: Harness) -> None:
        value = deep_value(20_000)
        coordinator = env.coordinator()
        store = coordinator.store
        session = store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        session.append_custom("feedback/record", {"deep": value})
        session.append(TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(session)
        loaded = fresh(env).load(SID)
        assert len(loaded.events) == 3
        assert json_equal(loaded.events[1]["data"]["deep"], value)
        assert json_equal(fresh(env).read_from(SID, 1).events[0]["data"], {"deep": value})

    def test_resume_of_a_crashed_session_closes_the_started_tool_call_and_continues(self, env: Harness) -> None:
        log = [
            turn_start(0),
            user_event(1),
            step_start(2),
            assistant_event(3, "running it", "call-1"),
            tool_call_event(4, "call-1"),
        ]
        persist(env, log)
        coordinator = fresh(env)
        session = coordinator.resume(SID)
        closers = [tool_closer(5, 1004, "call-1", call_seq=4), step_closer(6, 1004), turn_closer(7, 1004)]
        assert [dict(e) for e in session.events][:8] == [*log, *closers]
        assert session.events[8]["type"] == SESSION_END_SEED
        assert session.events[5]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        session.append(TURN_START, {"turn": 2})
        session.append(USER_MESSAGE, user_data("again"), APPEND_INTENT)
        session.append(TURN_END, {"turn": 2, "reason": {"kind": "completed"}})
        coordinator.store.flush(session)
        durable = stored(env)
        assert seqs(durable) == list(range(12))
        assert [dict(e) for e in durable][5:8] == closers
        assert event_bytes(durable) == event_bytes(session.events)

    # --- delete (the optional DeletesSessions capability) -----------------------------------------------

    def _deleting(self, env: Harness) -> Any:
        coordinator = env.coordinator()
        if not isinstance(coordinator.backend, DeletesSessions):
            pytest.skip(f"{env.kind}: the backend cannot delete sessions (no delete_session)")
        return coordinator

    def test_delete_removes_the_whole_session_and_nothing_else(self, env: Harness) -> None:
        coordinator = self._deleting(env)
        coordinator.create(header(SID))
        coordinator.append(SID, closed_turn())
        coordinator.create(header("kept"))
        coordinator.append("kept", closed_turn())
        kept_revision = revision_of(coordinator, "kept")

        result = coordinator.delete(SID)

        assert result.deleted == (SID,) and result.orphaned == ()
        for reader in (coordinator, fresh(env)):
            assert [listing.id for listing in reader.list()] == ["kept"]
            assert list(reader.list_revisions()) == ["kept"]
            assert reader.backend.read_revision(SID) is None
            with pytest.raises(SessionNotFoundError):
                reader.load(SID)
        assert revision_of(fresh(env), "kept") == kept_revision
        assert seqs(stored(env, "kept")) == list(range(6))
        with pytest.raises(SessionNotFoundError) as info:
            coordinator.delete(SID)
        assert info.value.code == "SESSION_NOT_FOUND"

    def test_a_deleted_id_can_be_written_again_under_a_new_revision(self, env: Harness) -> None:
        coordinator = self._deleting(env)
        coordinator.create(header(SID))
        coordinator.append(SID, closed_turn())
        old = revision_of(coordinator, SID)
        coordinator.delete(SID)
        again = fresh(env)
        session = again.store.create(SID, meta=live_meta())
        session.append(TURN_START, {"turn": 1})
        again.store.flush(session)
        assert seqs(stored(env)) == [0]
        assert revision_of(fresh(env), SID) not in (None, old)

    def test_delete_refuses_a_session_open_for_writing_here_or_elsewhere(self, env: Harness) -> None:
        writer = self._deleting(env)
        session = writer.store.create(SID, meta=live_meta())
        append_closed_turn(session)
        writer.store.flush(session)
        for deleter in (writer, fresh(env)):
            with pytest.raises(SessionLockedError) as info:
                deleter.delete(SID)
            assert info.value.code == "SESSION_LOCKED"
        assert seqs(stored(env)) == list(range(6))
        writer.store.dispose(session)
        assert fresh(env).delete(SID).deleted == (SID,)
        assert [listing.id for listing in fresh(env).list()] == []

    def test_delete_refuses_a_parent_unless_told_what_becomes_of_its_children(self, env: Harness) -> None:
        coordinator = self._deleting(env)
        for sid, parent in (("root", None), ("child", "root"), ("grandchild", "child"), ("other", None)):
            extra: dict[str, Any] = {} if parent is None else {"parentSession": parent, "seedLength": 0}
            coordinator.create(header(sid, **extra))
            coordinator.append(sid, closed_turn())
        with pytest.raises(SessionHasChildrenError) as info:
            coordinator.delete("root")
        assert info.value.code == "SESSION_HAS_CHILDREN"
        assert info.value.children == ("child", "grandchild")
        assert [listing.id for listing in fresh(env).list()] == ["child", "grandchild", "other", "root"]

        orphaning = coordinator.delete("child", children="orphan")
        assert orphaning.deleted == ("child",) and orphaning.orphaned == ("grandchild",)
        assert [listing.id for listing in fresh(env).list()] == ["grandchild", "other", "root"]

        coordinator.create(header("child", parentSession="root", seedLength=0))
        coordinator.append("child", closed_turn())
        subtree = fresh(env).delete("root", children="delete")
        assert subtree.deleted == ("grandchild", "child", "root")
        assert [listing.id for listing in fresh(env).list()] == ["other"]
        with pytest.raises(InvalidOptionError):
            fresh(env).delete("other", children="cascade")

    def test_delete_calls_each_forget_hook_with_each_deleted_id(self, env: Harness) -> None:
        coordinator = self._deleting(env)
        for sid, parent in (("root", None), ("child", "root")):
            extra: dict[str, Any] = {} if parent is None else {"parentSession": parent, "seedLength": 0}
            coordinator.create(header(sid, **extra))
            coordinator.append(sid, closed_turn())
        seen: list[str] = []

        def failing(session_id: str) -> None:
            raise PersistenceError("derived file unusable")

        result = coordinator.delete("root", children="delete", forget=(failing, seen.append))
        assert seen == ["child", "root"] == list(result.deleted)
