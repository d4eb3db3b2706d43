"""A copy SIGKILLed mid-way leaves no partial session on its target, and re-running it completes it.

The child process copies a JSONL store of many sessions to a SQLite, JSONL zstd or PostgreSQL target
and reports each finished session on its stdout; the parent kills it (SIGKILL: nothing is cleaned up)
once it has reported a few, while the next session is being staged. Every session the target then
lists must equal its source (the staged write is all or nothing), and a second copy must skip those,
copy the rest, and leave every session on the target with the source's digest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _postgres import drop_schema, fresh_schema
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.copy import copy_sessions, events_digest
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import closed_turn, header

SESSIONS = 24
TURNS = 40  # 240 events a session: staging one takes long enough for the kill to land inside it
KILL_AFTER = 5

CHILD = textwrap.dedent(
    """
    import sys
    from agentlog.persistence.copy import copy_sessions
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.postgres.backend import PostgresBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    kind, source, target, dsn, schema = sys.argv[1:6]
    if kind == "sqlite":
        backend = SqliteBackend(target)
    elif kind == "postgres":
        backend = PostgresBackend(dsn, schema=schema)
    else:
        backend = JsonlBackend(target, compression="zstd")

    def report(done, total, session_id):
        sys.stdout.write(f"{done} {session_id}\\n")
        sys.stdout.flush()

    copy_sessions(JsonlBackend(source, compression="auto", read_only=True), backend, progress=report)
    sys.stdout.write("finished\\n")
    """
)


@pytest.fixture
def target_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    kind = request.param
    spec: dict[str, Any] = {"kind": kind, "path": str(tmp_path / "target"), "dsn": "", "schema": ""}
    if kind == "sqlite":
        spec["path"] = str(tmp_path / "target.sqlite3")
    if kind == "postgres":
        spec["dsn"], spec["schema"] = request.getfixturevalue("pg_dsn"), fresh_schema()
    yield spec
    if kind == "postgres":
        drop_schema(spec["dsn"], spec["schema"])


def _open_target(spec: dict[str, Any]) -> Any:
    if spec["kind"] == "sqlite":
        return SqliteBackend(spec["path"])
    if spec["kind"] == "postgres":
        from agentlog.persistence.postgres.backend import PostgresBackend

        return PostgresBackend(spec["dsn"], schema=spec["schema"])
    return JsonlBackend(spec["path"], compression="zstd")


def _events(index: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for turn in range(1, TURNS + 1):
        events += closed_turn(len(events), turn=turn)
    events[1]["data"]["content"][0]["text"] = f"session {index}"  # every session its own digest
    return events


@pytest.mark.parametrize("target_of", ["sqlite", "jsonl-zstd", "postgres"], indirect=True)
def test_a_copy_killed_mid_way_leaves_no_partial_session_and_a_rerun_completes(
    tmp_path: Path, target_of: dict[str, Any]
) -> None:
    source = str(tmp_path / "source")
    writer = PersistenceCoordinator(SessionStore(), JsonlBackend(source, compression="none"))
    expected = {}
    for index in range(SESSIONS):
        session_id = f"s{index:03d}"
        events = _events(index)
        writer.create(header(session_id))
        writer.append(session_id, events)
        expected[session_id] = events_digest(events)
    writer.close()

    argv = [target_of["kind"], source, target_of["path"], target_of["dsn"], target_of["schema"]]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *argv],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert child.stdout is not None
    reported = [child.stdout.readline() for _ in range(KILL_AFTER)]
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert all(line.strip() for line in reported), reported  # the child was copying when it was killed

    survivor = PersistenceCoordinator(SessionStore(), _open_target(target_of))
    listed = [listing.id for listing in survivor.list()]
    assert KILL_AFTER <= len(listed) < SESSIONS
    for session_id in listed:  # all or nothing: every listed session is whole
        assert events_digest(survivor.read_stored(session_id).events) == expected[session_id]
    survivor.close()

    report = copy_sessions(JsonlBackend(source, compression="auto", read_only=True), _open_target(target_of))

    assert report.ok, [session.error for session in report.failed]
    assert sorted(session.id for session in report.skipped) == listed
    assert len(report.copied) == SESSIONS - len(listed)
    final = PersistenceCoordinator(SessionStore(), _open_target(target_of))
    digests = {listing.id: events_digest(final.read_stored(listing.id).events) for listing in final.list()}
    final.close()
    assert digests == expected
