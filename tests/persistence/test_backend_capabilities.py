"""The optional capabilities of ``agentlog.persistence.backend``: what the upper layers do with and without each.

A backend provides an optional capability by defining its method; the coordinator, the tail and the
derived-file placement ask ``isinstance(backend, Capability)`` and fall back to the plain primitives. A
minimal backend here has the primitives of ``Backend`` only (it delegates them to a ``MemoryBackend``),
and one capability at a time is added to it by a mixin that records its calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import InvalidSessionIdError, PersistenceError
from agentlog.kernel.store import SessionStore
from agentlog.persistence.backend import (
    Backend,
    IdentifiesStore,
    ListsRevisions,
    PartialRead,
    PlacesDerivedFiles,
    ProbesTornTail,
    ReadsRawArtifacts,
    SalvagesPrefix,
    SeeksStored,
    SessionListing,
    StagesSessions,
    StoredPrefix,
    ValidatesSessionIds,
    WaitsForChange,
    WireEvent,
    WriterLock,
)
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.host_cache import store_key
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.persistence.tail import tail_events
from agentlog.projection.cache_storage import MemoryCacheStorage, cache_path_for, open_cache_storage, store_id_for
from agentlog.query.sqlite import default_index_path

from .conftest import SID, closed_turn, header, seqs

OPTIONAL = [
    ValidatesSessionIds,
    SalvagesPrefix,
    SeeksStored,
    ListsRevisions,
    StagesSessions,
    WaitsForChange,
    ReadsRawArtifacts,
    PlacesDerivedFiles,
    IdentifiesStore,
    ProbesTornTail,
]


class Minimal:
    """The primitives of ``Backend`` and nothing else, over a memory store."""

    name = "minimal"

    def __init__(self, storage: MemoryStorage | None = None) -> None:
        self.inner = MemoryBackend(storage if storage is not None else MemoryStorage())
        self.calls: list[str] = []

    def load_stored(self, session_id: str) -> StoredPrefix | None:
        self.calls.append("load_stored")
        return self.inner.load_stored(session_id)

    def read_revision(self, session_id: str) -> str | None:
        return self.inner.read_revision(session_id)

    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        self.calls.append("append_batch")
        self.inner.append_batch(meta, events, materialized)

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: object, closers: Sequence[WireEvent]) -> None:
        self.inner.commit_repair(meta, torn_marker, closers)

    def list_sessions(self) -> list[SessionListing]:
        self.calls.append("list_sessions")
        return self.inner.list_sessions()

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def lock_writer(self, meta: Mapping[str, Any]) -> WriterLock:
        return self.inner.lock_writer(meta)

    def close(self) -> None:
        self.inner.close()


class Validating(Minimal):
    def validate_session_id(self, session_id: str) -> None:
        self.calls.append("validate_session_id")
        if len(session_id) > 8:
            raise InvalidSessionIdError(f"session id longer than 8 characters: {session_id!r}")


class Salvaging(Minimal):
    def read_prefix(self, session_id: str) -> PartialRead | None:
        self.calls.append("read_prefix")
        return self.inner.read_prefix(session_id)


class Seeking(Minimal):
    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix | None:
        self.calls.append("load_stored_from")
        return self.inner.load_stored_from(session_id, from_seq)


class Listing(Minimal):
    def list_revisions(self) -> dict[str, str]:
        self.calls.append("list_revisions")
        return self.inner.list_revisions()


class Staging(Minimal):
    def stage_session(self, meta: Mapping[str, Any]) -> Any:
        self.calls.append("stage_session")
        return self.inner.stage_session(meta)


class Waiting(Minimal):
    def wait_for_change(self, session_id: str, timeout_s: float) -> bool:
        self.calls.append("wait_for_change")
        return False


class Placing(Minimal):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def derived_directory(self) -> str | None:
        return None

    def derived_path(self, name: str, suffix: str) -> str | None:
        return str(self.root / name)


class Identified(Placing):
    def store_identity(self) -> str | None:
        return "minimal:one-store"


def _coordinator(backend: Any) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), backend, batch_delay_ms=1)


def _persist(backend: Any, session_id: str = SID) -> list[dict[str, Any]]:
    log = closed_turn()
    coordinator = _coordinator(backend)
    try:
        coordinator.create(header(session_id))
        coordinator.append(session_id, log)
    finally:
        coordinator.close()
    return log


# --- which backend has which capability -------------------------------------------------------------------


def test_a_minimal_backend_is_a_backend_with_no_optional_capability() -> None:
    backend = Minimal()
    assert isinstance(backend, Backend)
    assert [capability.__name__ for capability in OPTIONAL if isinstance(backend, capability)] == []


def test_the_built_in_backends_declare_their_capabilities(tmp_path: Path) -> None:
    def declared(backend: Any) -> set[str]:
        return {capability.__name__ for capability in OPTIONAL if isinstance(backend, capability)}

    file_backends = {capability.__name__ for capability in OPTIONAL} - {"WaitsForChange"}
    jsonl, sqlite = JsonlBackend(str(tmp_path / "j")), SqliteBackend(str(tmp_path / "s.db"))
    assert declared(jsonl) == file_backends
    assert declared(sqlite) == file_backends - {"ProbesTornTail"}  # a transaction never tears
    memory = file_backends - {"PlacesDerivedFiles", "IdentifiesStore", "ProbesTornTail"}
    assert declared(MemoryBackend()) == memory
    jsonl.close()
    sqlite.close()


# --- a minimal backend through the coordinator --------------------------------------------------------------


def test_a_minimal_backend_works_through_the_coordinator() -> None:
    backend = Minimal()
    log = _persist(backend)
    coordinator = _coordinator(backend)
    try:
        assert seqs(coordinator.load(SID).events) == seqs(log)
        assert seqs(coordinator.read_from(SID, 3).events) == seqs(log)[3:]
        assert [listing.id for listing in coordinator.list()] == [SID]
        revision = backend.read_revision(SID)
        assert revision is not None and coordinator.list_revisions() == {SID: revision}
        with pytest.raises(PersistenceError, match="minimal cannot read a partial prefix"):
            coordinator.read_prefix(SID)
    finally:
        coordinator.close()


def test_without_an_id_check_every_non_empty_id_is_accepted_with_one_the_backend_refuses_first() -> None:
    long_id = "a-rather-long-session-id"
    _persist(Minimal(), long_id)
    backend = Validating()
    coordinator = _coordinator(backend)
    try:
        with pytest.raises(InvalidSessionIdError, match="longer than 8"):
            coordinator.create(header(long_id))
        with pytest.raises(InvalidSessionIdError):
            coordinator.load(long_id)
        assert "append_batch" not in backend.calls and "load_stored" not in backend.calls
    finally:
        coordinator.close()


def test_read_prefix_salvages_only_through_the_capability() -> None:
    backend = Salvaging()
    log = _persist(backend)
    coordinator = _coordinator(backend)
    try:
        partial = coordinator.read_prefix(SID)
        assert seqs(partial.events) == seqs(log) and partial.damage is None
        assert backend.calls.count("read_prefix") == 1
    finally:
        coordinator.close()


@pytest.mark.parametrize("cls", [Minimal, Seeking])
def test_read_from_seeks_with_the_capability_and_reads_the_whole_log_without(cls: type[Minimal]) -> None:
    backend = cls()
    log = _persist(backend)
    backend.calls.clear()
    coordinator = _coordinator(backend)
    try:
        assert seqs(coordinator.read_from(SID, 4).events) == seqs(log)[4:]
    finally:
        coordinator.close()
    expected = ["load_stored_from"] if cls is Seeking else ["load_stored"]
    assert [call for call in backend.calls if call.startswith("load_stored")] == expected


@pytest.mark.parametrize("cls", [Minimal, Listing])
def test_list_revisions_asks_the_capability_or_builds_the_map_from_listing(cls: type[Minimal]) -> None:
    backend = cls()
    _persist(backend)
    backend.calls.clear()
    coordinator = _coordinator(backend)
    try:
        assert coordinator.list_revisions() == {SID: backend.read_revision(SID)}
    finally:
        coordinator.close()
    assert backend.calls == (["list_revisions"] if cls is Listing else ["list_sessions"])


@pytest.mark.parametrize("cls", [Minimal, Staging])
def test_stage_publishes_whole_with_the_capability_and_appends_without(cls: type[Minimal]) -> None:
    backend = cls()
    coordinator = _coordinator(backend)
    try:
        staged = coordinator.stage(header(SID))
        staged.append(closed_turn()[:3])
        visible_before_publish = [listing.id for listing in backend.inner.list_sessions()]
        staged.append(closed_turn()[3:])
        staged.publish()
    finally:
        coordinator.close()
    assert visible_before_publish == ([] if cls is Staging else [SID])
    assert ("stage_session" in backend.calls) is (cls is Staging)
    reader = _coordinator(backend)
    try:
        assert seqs(reader.load(SID).events) == seqs(closed_turn())
    finally:
        reader.close()


@pytest.mark.parametrize("cls", [Minimal, Waiting])
def test_the_tail_waits_on_the_capability_and_polls_without(cls: type[Minimal]) -> None:
    backend = cls()
    log = _persist(backend)
    coordinator = _coordinator(backend)

    async def follow() -> list[int]:
        got: list[int] = []
        async for event in tail_events(coordinator, SID, follow=True, poll_interval=0.01):
            got.append(event["seq"])
            if len(got) == len(log) + 1:
                break
            if len(got) == len(log):
                await asyncio.to_thread(coordinator.append, SID, [dict(closed_turn()[0], seq=len(log))])
        return got

    try:
        assert asyncio.run(asyncio.wait_for(follow(), 10)) == [*seqs(log), len(log)]
    finally:
        coordinator.close()
    assert ("wait_for_change" in backend.calls) is (cls is Waiting)


# --- derived files: placement and identity ---------------------------------------------------------------------


def test_without_a_place_for_derived_files_the_cache_and_index_stay_in_memory() -> None:
    backend = Minimal()
    assert cache_path_for(backend) is None and default_index_path(backend) is None
    assert isinstance(open_cache_storage(backend), MemoryCacheStorage)


def test_a_place_for_derived_files_puts_the_cache_and_index_there(tmp_path: Path) -> None:
    backend = Placing(tmp_path)
    assert cache_path_for(backend) == str(tmp_path / ".projections.sqlite")
    assert default_index_path(backend) == str(tmp_path / ".agentlog-search.sqlite3")


def test_without_an_identity_a_cache_is_bound_to_the_backend_instance(tmp_path: Path) -> None:
    first, second = Placing(tmp_path), Placing(tmp_path)
    assert store_id_for(first) == f"memory:{id(first)}" != store_id_for(second)
    assert store_key(first) is None


def test_with_an_identity_a_cache_is_bound_to_the_store(tmp_path: Path) -> None:
    assert store_id_for(Identified(tmp_path)) == store_id_for(Identified(tmp_path)) == "minimal:one-store"
    assert store_key(Identified(tmp_path)) is None  # only a postgres: identity has a host-cache key


def test_a_postgres_identity_is_what_the_host_cache_keys_by() -> None:
    class HostCached(Minimal):
        def store_identity(self) -> str | None:
            return "postgres:0123456789abcdef"

    assert store_key(HostCached()) == "0123456789abcdef"


def test_the_file_backends_identify_their_store_not_their_path(tmp_path: Path) -> None:
    jsonl = JsonlBackend(str(tmp_path / "j"))
    assert jsonl.store_identity() is None  # no root yet
    _persist(jsonl)
    identity = jsonl.store_identity()
    assert identity is not None and identity.startswith(f"jsonl:{tmp_path / 'j'}:")
    sqlite = SqliteBackend(str(tmp_path / "s.db"))
    _persist(sqlite)
    open_identity = sqlite.store_identity()
    sqlite.close()
    assert open_identity is not None and open_identity.startswith("sqlite-store:")
    assert sqlite.store_identity() == open_identity  # closed: read from the file
    jsonl.close()
