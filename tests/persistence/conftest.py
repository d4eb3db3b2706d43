"""Shared fixtures of the persistence tests.

The conformance suite itself (spec ``persistence.md`` §8.3/§8.4) is ``agentlog.testing.BackendContract``,
run per backend by ``test_contract_*.py``; the fixtures here serve the backend-specific and coordinator
tests that run over several backends.

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

The event builders (plain wire dicts, times ``1000 + seq``) live in ``agentlog.testing.builders`` and
are re-exported here, as is the harness (``Harness`` = ``agentlog.testing.ContractHarness``).
"""

from __future__ import annotations

import importlib
import random
import sqlite3
import string
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentlog.kernel.jsoncodec import dumps
from agentlog.testing.builders import (  # noqa: F401 - re-exported for the test modules
    APPEND_INTENT,
    CWD,
    SID,
    append_closed_turn,
    assistant_data,
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
    tool_call_data,
    tool_call_event,
    tool_result_data,
    tool_result_event,
    turn_end,
    turn_start,
    types,
    user_data,
    user_event,
)
from agentlog.testing.contract import ContractHarness as Harness

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


# --- torn-tail injectors (spec §8 preamble) ---------------------------------------------------------------


def inject_raw_torn_tail(path: str, seq: int) -> None:
    with open(path, "ab") as fh:
        fh.write(b'{"type":"assistant/chunk","seq":%d,"ti' % seq)


def inject_zstd_torn_tail(path: str, seq: int) -> None:
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
            from agentlog.persistence.memory import MemoryBackend, MemoryStorage

            self._cls = MemoryBackend
            storage = MemoryStorage()
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
            inject_raw_torn_tail(path, next_seq)
        else:
            inject_zstd_torn_tail(path, next_seq)

    def _inject_sqlite(self, meta: Mapping[str, Any], next_seq: int) -> None:
        _inject_sqlite(str(self.db_path), meta["id"], next_seq)

    def close_all(self) -> None:
        while self.created:
            backend = self.created.pop()
            try:
                backend.close()
            except Exception:
                pass


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
