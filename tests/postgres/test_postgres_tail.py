"""``PersistenceCoordinator.tail`` on PostgreSQL: a tailer in another process sees every event once and
in order while this process commits; ``LISTEN/NOTIFY`` wakes it; a lost notification only delays; a
follower outlives a real restart of the server (a private cluster), resuming at its next seq."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agentlog.errors import DatabaseUnavailableError, SessionNotFoundError
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from agentlog.persistence.tail import tail_events
from agentlog.testing.builders import closed_turn, header

from .conftest import PrivateServer

TURNS = 20
HANG_GUARD_S = 60.0  # only ends a broken test; nothing here asserts on time

TAILER = textwrap.dedent(
    """
    import asyncio, sys, time
    import orjson
    from agentlog.kernel.jsonvalue import thaw
    from agentlog.kernel.store import SessionStore
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.postgres import PostgresBackend

    dsn, schema, session_id, count, mode = sys.argv[1:6]
    signalled = 0

    class Tailed(PostgresBackend):
        def wait_for_change(self, session_id, timeout_s):
            global signalled
            if mode == "lost":  # every notification is lost: only the bounded re-check is left
                time.sleep(timeout_s)
                return False
            got = super().wait_for_change(session_id, timeout_s)
            signalled += got
            return got

    async def main():
        coordinator = PersistenceCoordinator(SessionStore(), Tailed(dsn, schema=schema))
        seen = 0
        async for event in coordinator.tail(session_id):
            sys.stdout.write(orjson.dumps(thaw(event)).decode() + "\\n")
            sys.stdout.flush()
            seen += 1
            if seen == int(count):
                break
        coordinator.close()
        print(orjson.dumps({"signalled": signalled}).decode(), flush=True)

    asyncio.run(main())
    """
)


def _batches(turns: int) -> list[list[dict[str, Any]]]:
    events = [event for turn in range(2, turns + 1) for event in closed_turn((turn - 1) * 6, turn)]
    sizes = [1, 4, 2, 7]
    batches, position, index = [], 0, 0
    while position < len(events):
        size = sizes[index % len(sizes)]
        batches.append(events[position : position + size])
        position += size
        index += 1
    return batches


def _stored(backend: PostgresBackend, session_id: str) -> list[dict[str, Any]]:
    found = backend.load_stored(session_id)
    assert found is not None
    return [thaw(event) for event in found.events]


@pytest.mark.parametrize("mode", ["notify", "lost"])
def test_postgres_tail__a_tailer_in_another_process_sees_every_event_once_in_order(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend], mode: str
) -> None:
    writer = pg_backends()
    meta = header("live")
    writer.append_batch(meta, closed_turn(0, 1), False)
    total = TURNS * 6
    tailer = subprocess.Popen(
        [sys.executable, "-c", TAILER, pg_dsn, pg_schema, "live", str(total), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert tailer.stdout is not None
        lines = [orjson.loads(tailer.stdout.readline()) for _ in range(6)]  # following now
        for batch in _batches(TURNS):
            writer.append_batch(meta, batch, True)
        lines += [orjson.loads(tailer.stdout.readline()) for _ in range(total - 6)]
        summary = orjson.loads(tailer.stdout.readline())
        _, err = tailer.communicate(timeout=HANG_GUARD_S)
        assert tailer.returncode == 0, err.decode()
    finally:
        if tailer.poll() is None:
            tailer.kill()
            tailer.wait()
    assert [line["seq"] for line in lines] == list(range(total))
    assert lines == _stored(writer, "live")
    if mode == "notify":
        assert summary["signalled"] >= 1  # the commits were signalled, not only found by the re-check
    else:
        assert summary["signalled"] == 0


def test_postgres_tail__from_seq_follow_false_and_a_missing_session(
    pg_backends: Callable[..., PostgresBackend],
) -> None:
    writer = pg_backends()
    events = [event for turn in range(1, 4) for event in closed_turn((turn - 1) * 6, turn)]
    writer.append_batch(header("done"), events, False)
    stored = _stored(writer, "done")
    coordinator = PersistenceCoordinator(SessionStore(), pg_backends())

    async def collect(session_id: str, **options: Any) -> list[dict[str, Any]]:
        return [thaw(event) async for event in coordinator.tail(session_id, **options)]

    try:
        assert asyncio.run(asyncio.wait_for(collect("done", follow=False), HANG_GUARD_S)) == stored
        assert asyncio.run(asyncio.wait_for(collect("done", from_seq=11, follow=False), HANG_GUARD_S)) == stored[11:]
        for follow in (False, True):
            with pytest.raises(SessionNotFoundError, match='"missing"'):
                asyncio.run(asyncio.wait_for(collect("missing", follow=follow), HANG_GUARD_S))
    finally:
        coordinator.close()


def test_postgres_tail__the_cli_follows_a_postgres_store_and_ctrl_c_ends_it(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = pg_backends()
    meta = header("cli")
    writer.append_batch(meta, closed_turn(0, 1), False)
    options = ["--backend", "postgres", "--dsn", pg_dsn, "--pg-schema", pg_schema, "--json"]
    missing = subprocess.run(
        [sys.executable, "-m", "agentlog.cli", "tail", "nope", *options], capture_output=True, timeout=HANG_GUARD_S
    )
    assert missing.returncode == 1 and missing.stdout == b""
    assert orjson.loads(missing.stderr)["error"]["code"] == "SESSION_NOT_FOUND"
    tail = subprocess.Popen(
        [sys.executable, "-m", "agentlog.cli", "tail", "cli", "--follow", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    total = 4 * 6
    try:
        assert tail.stdout is not None
        lines = [orjson.loads(tail.stdout.readline()) for _ in range(6)]
        for batch in _batches(4):
            writer.append_batch(meta, batch, True)
        lines += [orjson.loads(tail.stdout.readline()) for _ in range(total - 6)]
        tail.send_signal(signal.SIGINT)
        rest, err = tail.communicate(timeout=HANG_GUARD_S)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0 and err == b"" and rest == b""
    assert lines == _stored(writer, "cli")


# --- a server restart under a follower --------------------------------------------------------------------


def _hang_guard(process: subprocess.Popen[bytes]) -> threading.Timer:
    """Kill ``process`` if the test is still waiting on it after ``HANG_GUARD_S`` (a blocked read then ends)."""
    guard = threading.Timer(HANG_GUARD_S, process.kill)
    guard.start()
    return guard


def test_postgres_tail__the_cli_follow_survives_server_restarts_and_prints_every_event_once_in_order(
    private_server: PrivateServer,
) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    writer = PostgresBackend(private_server.dsn, schema=schema)
    meta = header("restarted")
    writer.append_batch(meta, closed_turn(0, 1), False)
    options = ["--backend", "postgres", "--dsn", private_server.dsn, "--pg-schema", schema, "--json"]
    tail = subprocess.Popen(
        [sys.executable, "-m", "agentlog.cli", "tail", "restarted", "--follow", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    guard = _hang_guard(tail)
    batches = _batches(7)
    try:
        assert tail.stdout is not None and tail.stderr is not None
        lines = [orjson.loads(tail.stdout.readline()) for _ in range(6)]  # following now
        for restart in range(2):
            for batch in batches[restart * 4 : restart * 4 + 4]:
                writer.append_batch(meta, batch, True)
            expected = 6 + sum(len(batch) for batch in batches[: restart * 4 + 4])
            lines += [orjson.loads(tail.stdout.readline()) for _ in range(expected - len(lines))]
            private_server.stop()
            notice = tail.stderr.readline().decode()
            assert "reconnecting" in notice, notice  # the follower saw the server go away ...
            private_server.start()  # ... and keeps following once it is back
        for batch in batches[8:]:
            writer.append_batch(meta, batch, True)
        total = 7 * 6
        lines += [orjson.loads(tail.stdout.readline()) for _ in range(total - len(lines))]
        tail.send_signal(signal.SIGINT)
        rest, err = tail.communicate(timeout=HANG_GUARD_S)
    finally:
        guard.cancel()
        if tail.poll() is None:
            tail.kill()
            tail.wait()
        writer.close()
    assert tail.returncode == 0 and rest == b"", err.decode()
    assert [line["seq"] for line in lines] == list(range(total))
    reader = PostgresBackend(private_server.dsn, schema=schema)
    try:
        assert lines == _stored(reader, "restarted")
    finally:
        reader.close()


@pytest.mark.parametrize("reconnect", [True, False])
def test_postgres_tail__tail_events_reconnects_after_a_server_restart_unless_told_not_to(
    private_server: PrivateServer, reconnect: bool
) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    writer = PostgresBackend(private_server.dsn, schema=schema)
    coordinator = PersistenceCoordinator(SessionStore(), PostgresBackend(private_server.dsn, schema=schema))
    meta = header("s")
    writer.append_batch(meta, closed_turn(0, 1), False)
    batches = _batches(3)
    total = 3 * 6
    got: list[dict[str, Any]] = []
    retries: list[tuple[DatabaseUnavailableError, int, float]] = []

    async def main() -> None:
        outage = asyncio.Event()

        def on_retry(err: DatabaseUnavailableError, attempt: int, delay: float) -> None:
            retries.append((err, attempt, delay))
            outage.set()

        async def consume() -> None:
            async for event in tail_events(coordinator, "s", reconnect=reconnect, on_retry=on_retry):
                got.append(thaw(event))
                if len(got) == total:
                    return

        task = asyncio.create_task(consume())
        while len(got) < 6 and not task.done():  # the tail's own progress: following now
            await asyncio.sleep(0.01)
        await asyncio.to_thread(private_server.stop)
        try:
            if not reconnect:
                with pytest.raises(DatabaseUnavailableError):
                    await task
                return
            await asyncio.wait_for(outage.wait(), HANG_GUARD_S)
        finally:
            await asyncio.to_thread(private_server.start)
        for batch in batches:
            await asyncio.to_thread(writer.append_batch, meta, batch, True)
        await asyncio.wait_for(task, HANG_GUARD_S)

    try:
        asyncio.run(asyncio.wait_for(main(), HANG_GUARD_S * 2))
        if reconnect:
            assert retries and retries[0][1] == 1 and all(delay > 0 for _, _, delay in retries)
            assert got == _stored(writer, "s")
        else:
            assert retries == [] and got == _stored(writer, "s")[:6]
    finally:
        coordinator.close()
        writer.close()


def test_postgres_tail__the_cli_names_an_outage_once_on_one_line_of_stderr_and_ctrl_c_still_exits_0(
    private_server: PrivateServer,
) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    writer = PostgresBackend(private_server.dsn, schema=schema)
    writer.append_batch(header("plain"), closed_turn(0, 1), False)
    writer.close()
    options = ["--backend", "postgres", "--dsn", private_server.dsn, "--pg-schema", schema]
    tail = subprocess.Popen(
        [sys.executable, "-m", "agentlog.cli", "tail", "plain", "--follow", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    guard = _hang_guard(tail)
    try:
        assert tail.stdout is not None and tail.stderr is not None
        printed = [tail.stdout.readline() for _ in range(6)]
        private_server.stop()
        try:
            notice = tail.stderr.readline().decode()
        finally:
            private_server.start()
        tail.send_signal(signal.SIGINT)
        rest, err = tail.communicate(timeout=HANG_GUARD_S)
    finally:
        guard.cancel()
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert all(printed)  # the six stored events were printed before the outage (b"" would be an early exit)
    assert notice.startswith("warning [DATABASE_UNAVAILABLE] PostgreSQL at "), notice
    assert notice.rstrip("\n").endswith("reconnecting with backoff until it answers (Ctrl-C to stop)"), notice
    assert tail.returncode == 0 and rest == b"", err.decode()
    assert "Traceback" not in err.decode()
