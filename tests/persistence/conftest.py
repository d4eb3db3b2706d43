"""Shared fixtures of the persistence conformance suite (spec ``persistence.md`` §8.3/§8.4).

``backend_factory`` is parametrized over ``memory``, ``jsonl-none``, ``jsonl-zstd`` and ``sqlite``.
The parameter list is built once, at collection time, from the backend modules that exist: a backend
whose module is missing (``ModuleNotFoundError`` naming that very module) is left out of the list, so
the suite runs over every backend that has landed and, once all four exist, over all four. A module
that exists but fails to import for another reason stays in the list, so its tests fail loudly with
the import error instead of disappearing. Nothing is printed either way.

Each factory call returns a NEW backend instance over the SAME storage (the same in-memory record
set, JSONL root or SQLite file), which is how the tests simulate a restart or a second process. The
factory also carries the torn-tail injector of its backend (spec §8 preamble); the memory and SQLite
backends have none (a SQLite row cannot tear), so the torn-tail tests use ``torn_backend_factory``
which covers the two JSONL encodings.

Event builders live here too (plain wire dicts, times ``1000 + seq``), shared by the test modules.
"""

from __future__ import annotations

import importlib
import random
import sqlite3
import string
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentlog.kernel.jsoncodec import dumps

CWD = "/work/project"
SID = "s1"

# --- backend discovery (collection time) -------------------------------------------------------------

_MODULES = {
    "memory": "agentlog.persistence.memory",
    "jsonl-none": "agentlog.persistence.jsonl",
    "jsonl-zstd": "agentlog.persistence.jsonl",
    "sqlite": "agentlog.persistence.sqlite",
}


def _module_exists(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name:
            return False
        return True  # present but broken: keep it so the failure is visible
    except Exception:
        return True  # present but broken: keep it so the failure is visible
    return True


BACKEND_KINDS: list[str] = [kind for kind, module in _MODULES.items() if _module_exists(module)]
# Only file backends can tear: a SQLite row is written by a transaction, so an unparsable row is damage
# (issue 7, defect 13: SESSION_CORRUPT, nothing deleted), never a torn tail.
TORN_KINDS: list[str] = [kind for kind in BACKEND_KINDS if kind not in ("memory", "sqlite")]


# --- memory storage shared by several backend instances -------------------------------------------------


class _MemoryStorage:
    """What a memory "database" is: the record set, the writer-lock set and the store identity."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.records: dict[str, Any] = {}
        self.locks: set[str] = set()
        self.store_id = uuid.uuid4().hex


def _memory_class() -> type:
    from agentlog.persistence.memory import MemoryBackend

    class SharedMemoryBackend(MemoryBackend):  # type: ignore[misc,valid-type]
        """A MemoryBackend instance over storage shared with other instances (restart simulation)."""

        def __init__(self, storage: _MemoryStorage) -> None:
            super().__init__()
            self._mutex = storage.mutex
            self._records = storage.records
            self._locks = storage.locks
            self._store_id = storage.store_id

    return SharedMemoryBackend


# --- torn-tail injectors (spec §8 preamble) ---------------------------------------------------------------


def chunk_event(seq: int, text: str, *, turn: int = 1, step: int = 1, time: int | None = None) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 1000 + seq if time is None else time,
        "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}},
    }


def _inject_raw(path: str, seq: int) -> None:
    with open(path, "ab") as fh:
        fh.write(b'{"type":"assistant/chunk","seq":%d,"ti' % seq)


def _inject_zstd(path: str, seq: int) -> None:
    import zstandard

    rng = random.Random(seq)
    text = "".join(rng.choice(string.ascii_letters) for _ in range(300_000))
    frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(dumps(chunk_event(seq, text)) + b"\n")
    with open(path, "ab") as fh:
        fh.write(frame[: len(frame) // 2])


def _inject_sqlite(db_path: str, session_id: str, seq: int) -> None:
    con = sqlite3.connect(db_path, timeout=10, isolation_level=None)
    try:
        con.execute(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, 'assistant/chunk', ?, ?)",
            (session_id, seq, 1000 + seq, "{not valid json"),
        )
    finally:
        con.close()


class BackendFactory:
    """``factory()`` → a new backend instance over this test's storage.

    ``factory(wrap=Mixin)`` builds the instance from ``class _(Mixin, BackendClass)`` so a test can inject
    one fault into a real backend. ``inject_torn_tail(meta, next_seq)`` appends the backend's torn tail
    (``None`` for the memory backend, which has no torn tails).
    """

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.created: list[Any] = []
        if kind == "memory":
            self._cls = _memory_class()
            storage = _MemoryStorage()
            self._args: tuple[Any, ...] = (storage,)
            self._kwargs: dict[str, Any] = {}
            self.inject_torn_tail: Callable[[Mapping[str, Any], int], None] | None = None
        elif kind in ("jsonl-none", "jsonl-zstd"):
            from agentlog.persistence.jsonl.backend import JsonlBackend

            self._cls = JsonlBackend
            self.root = tmp_path / "jsonl-root"
            self._args = (str(self.root),)
            self._kwargs = {"compression": "none" if kind == "jsonl-none" else "zstd"}
            self.inject_torn_tail = self._inject_jsonl
        elif kind == "sqlite":
            from agentlog.persistence.sqlite.backend import SqliteBackend

            self._cls = SqliteBackend
            self.db_path = tmp_path / "db" / "sessions.sqlite"
            self._args = (str(self.db_path),)
            self._kwargs = {}
            self.inject_torn_tail = None  # a SQLite row cannot tear (see TORN_KINDS)
        else:  # pragma: no cover - parametrization is fixed
            raise AssertionError(kind)

    def __call__(self, wrap: type | None = None) -> Any:
        cls = self._cls if wrap is None else type(f"{wrap.__name__}{self._cls.__name__}", (wrap, self._cls), {})
        backend = cls(*self._args, **self._kwargs)
        self.created.append(backend)
        return backend

    def _inject_jsonl(self, meta: Mapping[str, Any], next_seq: int) -> None:
        locator = self._cls(*self._args, **self._kwargs)
        try:
            path = locator.locate(meta)
        finally:
            locator.close()
        assert path is not None
        if self.kind == "jsonl-none":
            _inject_raw(path, next_seq)
        else:
            _inject_zstd(path, next_seq)

    def _inject_sqlite(self, meta: Mapping[str, Any], next_seq: int) -> None:
        _inject_sqlite(str(self.db_path), meta["id"], next_seq)

    def close_all(self) -> None:
        while self.created:
            backend = self.created.pop()
            try:
                backend.close()
            except Exception:
                pass


class Harness:
    """Coordinators over one backend kind's storage; everything is closed at teardown."""

    def __init__(self, factory: BackendFactory) -> None:
        self.factory = factory
        self.kind = factory.kind
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
        from agentlog import SessionStore
        from agentlog.persistence.coordinator import PersistenceCoordinator

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


@pytest.fixture(params=BACKEND_KINDS)
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    factory = BackendFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture(params=TORN_KINDS)
def torn_backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    factory = BackendFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def env(backend_factory: BackendFactory) -> Iterator[Harness]:
    harness = Harness(backend_factory)
    yield harness
    harness.close()


@pytest.fixture
def torn_env(torn_backend_factory: BackendFactory) -> Iterator[Harness]:
    harness = Harness(torn_backend_factory)
    yield harness
    harness.close()


@pytest.fixture
def memory_env(tmp_path: Path) -> Iterator[Harness]:
    """The memory backend only (coordinator-specific tests of §8.5)."""
    harness = Harness(BackendFactory("memory", tmp_path))
    yield harness
    harness.close()


# --- wire builders ---------------------------------------------------------------------------------------


def header(session_id: str = SID, *, created_at: int = 1000, cwd: str | None = CWD, **extra: Any) -> dict[str, Any]:
    """A complete stored header; ``delegationDepth`` is explicit so every backend returns it unchanged."""
    meta: dict[str, Any] = {"version": 0, "id": session_id, "createdAt": created_at}
    if cwd is not None:
        meta["cwd"] = cwd
    meta.update(extra)
    meta.setdefault("delegationDepth", 0)
    return meta


def live_meta(*, created_at: int = 1000, cwd: str | None = CWD, **extra: Any) -> dict[str, Any]:
    """``SessionStore.create(meta=...)`` keys (wire names)."""
    meta: dict[str, Any] = {"createdAt": created_at, "delegationDepth": 0}
    if cwd is not None:
        meta["cwd"] = cwd
    meta.update(extra)
    return meta


def ev(type: str, seq: int, data: Any, *, time: int | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": type, "seq": seq, "time": 1000 + seq if time is None else time, "data": data}
    event.update(extra)
    return event


def turn_start(seq: int, turn: int = 1) -> dict[str, Any]:
    return ev("turn/start", seq, {"turn": turn})


def turn_end(seq: int, turn: int = 1, kind: str = "completed") -> dict[str, Any]:
    return ev("turn/end", seq, {"turn": turn, "reason": {"kind": kind}})


def step_start(seq: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev("step/start", seq, {"turn": turn, "step": step})


def step_end(seq: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev("step/end", seq, {"turn": turn, "step": step})


def user_data(text: str = "hello", *, msg_id: str | None = None) -> dict[str, Any]:
    return {
        "id": msg_id or f"user-{text}",
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def user_event(seq: int, text: str = "hello", *, msg_id: str | None = None) -> dict[str, Any]:
    return ev("user/message", seq, user_data(text, msg_id=msg_id or f"user-{seq}"), surfaceOp="append")


def assistant_data(
    text: str | None = "hi", *call_ids: str, turn: int = 1, step: int = 1, msg_id: str = "assistant-1"
) -> dict[str, Any]:
    blocks: list[Any] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks.extend({"type": "tool-call", "id": call_id, "name": "bash", "arguments": "{}"} for call_id in call_ids)
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": msg_id,
            "role": "assistant",
            "content": blocks,
            "source": {"kind": "model", "provider": "mock", "model": "mock"},
        },
    }


def assistant_event(seq: int, text: str | None = "hi", *call_ids: str, turn: int = 1, step: int = 1) -> dict[str, Any]:
    data = assistant_data(text, *call_ids, turn=turn, step=step, msg_id=f"assistant-{seq}")
    return ev("assistant/message", seq, data, surfaceOp="append")


def tool_call_data(call_id: str, *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {"turn": turn, "step": step, "callId": call_id, "name": "bash", "arguments": "{}"}


def tool_call_event(seq: int, call_id: str, *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev("tool/call", seq, tool_call_data(call_id, turn=turn, step=step))


def tool_result_data(call_id: str, text: str = "ok", *, turn: int = 1, step: int = 1, msg_id: str) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": msg_id,
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "content": [{"type": "text", "text": text}],
                    "isError": False,
                }
            ],
            "source": {"kind": "tool", "callId": call_id},
        },
    }


def tool_result_event(seq: int, call_id: str, text: str = "ok", *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    data = tool_result_data(call_id, text, turn=turn, step=step, msg_id=f"tool-result-{seq}")
    return ev("tool/result", seq, data, surfaceOp="append")


def closed_turn(start: int = 0, turn: int = 1) -> list[dict[str, Any]]:
    """Six events: turn/start, user/message, step/start, assistant/message, step/end, turn/end."""
    s = start
    return [
        turn_start(s, turn),
        user_event(s + 1, f"question-{turn}"),
        step_start(s + 2, turn),
        assistant_event(s + 3, f"answer-{turn}", turn=turn),
        step_end(s + 4, turn),
        turn_end(s + 5, turn),
    ]


def open_turn_with_chunks() -> list[dict[str, Any]]:
    """Eight events 0..7 ending inside turn 1 / step 1 (the crash logs of items 33 and 82)."""
    return [
        turn_start(0),
        user_event(1, "question"),
        step_start(2),
        chunk_event(3, "par"),
        chunk_event(4, "tial "),
        chunk_event(5, "ans"),
        chunk_event(6, "wer"),
        assistant_event(7, "partial answer"),
    ]


# Live appends: (type, data, intent) triples for Session.append.
APPEND_INTENT = {"surfaceOp": "append"}


def append_closed_turn(session: Any, turn: int = 1) -> None:
    """Six live appends mirroring :func:`closed_turn`."""
    session.append("turn/start", {"turn": turn})
    session.append("user/message", user_data(f"question-{turn}", msg_id=f"user-live-{turn}"), APPEND_INTENT)
    session.append("step/start", {"turn": turn, "step": 1})
    session.append(
        "assistant/message",
        assistant_data(f"answer-{turn}", turn=turn, msg_id=f"assistant-live-{turn}"),
        APPEND_INTENT,
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def event_bytes(events: Any) -> list[bytes]:
    """The JSON bytes of each event (byte-identity comparisons)."""
    return [dumps(event) for event in events]


def seqs(events: Any) -> list[int]:
    return [event["seq"] for event in events]


def types(events: Any) -> list[str]:
    return [event["type"] for event in events]
