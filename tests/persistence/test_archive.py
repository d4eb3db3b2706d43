"""Archiving a session before it is deleted: the copy in the JSONL archive holds exactly what was stored,
whichever backend held it, and the digest proves it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import PersistenceError
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.archive import MANIFEST_NAME, archive_session, session_digest
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import closed_turn, ev, header, turn_end, turn_start

_SAFE = 2**53 - 1
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_JSON: Any = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-_SAFE, _SAFE)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not (x == 0 and str(x).startswith("-")))
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


def _backends(root: Path) -> dict[str, Any]:
    return {
        "sqlite": SqliteBackend(str(root / "sessions.sqlite3")),
        "jsonl-zstd": JsonlBackend(str(root / "zstd"), compression="zstd"),
        "memory": al.MemoryBackend(),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_JSON, min_size=1, max_size=5))
def test_an_archived_copy_has_the_digest_and_the_events_of_the_stored_log_from_any_backend(values: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        events = [turn_start(0)]
        events += [ev("feedback/record", 1 + i, {"value": v}, ignorable=True) for i, v in enumerate(values)]
        events.append(turn_end(len(events)))
        digests = set()
        for name, backend in _backends(root).items():
            coordinator = PersistenceCoordinator(al.SessionStore(), backend)
            archive = JsonlBackend(str(root / f"archive-{name}"), compression="none")
            try:
                coordinator.create(header("s"))
                coordinator.append("s", events)
                stored = backend.load_stored("s")
                record = archive_session(backend, archive, "s")
                copy = JsonlBackend(str(root / f"archive-{name}"), compression="none", read_only=True).load_stored("s")
                assert copy is not None
                assert dumps(copy.events) == dumps(stored.events)
                assert session_digest(copy.meta, copy.events) == (record.sha256, len(events))
                digests.add(record.sha256)
            finally:
                coordinator.close()
        assert len(digests) == 1  # the same logical session, whatever bytes each backend stored


def test_a_rerun_accepts_an_identical_copy_and_a_different_copy_is_refused(tmp_path: Path) -> None:
    source = JsonlBackend(str(tmp_path / "store"))
    coordinator = PersistenceCoordinator(al.SessionStore(), source)
    archive = JsonlBackend(str(tmp_path / "archive"), compression="none")
    try:
        coordinator.create(header("s"))
        coordinator.append("s", closed_turn())
        first = archive_session(source, archive, "s")
        again = archive_session(source, archive, "s")  # a rerun after a crash between archive and delete
        assert again.sha256 == first.sha256
        assert len((tmp_path / "archive" / MANIFEST_NAME).read_bytes().splitlines()) == 2
        coordinator.append("s", closed_turn(6, 2))  # the stored log moved on: the archived copy is stale
        with pytest.raises(PersistenceError, match="differs from the stored log"):
            archive_session(source, archive, "s")
        with pytest.raises(al.SessionNotFoundError):
            archive_session(source, archive, "never-stored")
    finally:
        coordinator.close()
