"""Crash tests against the real server: a PostgreSQL writer is SIGKILLed at random points of its progress.

As in ``tests/crash/test_kill9.py``: the child is forked from the test process and runs a real store +
coordinator + ``PostgresBackend``, reporting through a pipe every seq whose ``flush()`` returned. After
the kill the rows are read once the lease the dead writer's connection held is free (the server may
still commit what the writer sent just before it died, and the lease is the fence), then a fresh
coordinator loads the session: every acknowledged event is present and its stored bytes are
byte-identical to what the writer appended; what follows is exactly the repair of the open turn.
Each trial writes its own session id in the test's schema.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

import psycopg
from psycopg import sql

import agentlog as al
from agentlog.errors import SessionLockedError
from agentlog.kernel.chunkrows import decode_storage_record
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from agentlog.persistence.postgres import PostgresBackend
from crash.test_kill9 import (  # the same deterministic turns and kill points as the file-backend crash suite
    WRITER_TURNS,
    Killed,
    KillPlan,
    fork_and_kill,
    plan_kill,
    turn_events,
    write_turns,
)

TRIALS = int(os.environ.get("AGENTLOG_CRASH_TRIALS", "50"))
LEASE_WAIT_S = 300  # a guard only: the dead writer's lease ends when the (loaded) server notices the socket close


def _writer(dsn: str, schema: str, session_id: str, fd: int, plan: KillPlan) -> None:
    """Child process body: append turns, reporting each flushed seq and its kill point; never returns."""
    try:
        store = al.SessionStore(now=lambda: 1_000)
        PersistenceCoordinator(store, PostgresBackend(dsn, schema=schema), batch_delay_ms=5)
        session = store.create(session_id, meta={"cwd": "/work", "createdAt": 1})
        write_turns(session, store.flush, fd, plan)
    except BaseException:  # the parent treats a dead writer without a kill as a failure
        os._exit(3)


def _expected(session_id: str, turns: int) -> list[Any]:
    session = al.Session.create(session_id, now=lambda: 1_000)
    for turn in range(1, turns + 1):
        for etype, data, intent in turn_events(turn):
            session.append(etype, data, intent)
    return [al.thaw(event) for event in session.events]


def _run_trial(dsn: str, schema: str, session_id: str, plan: KillPlan) -> Killed:
    return fork_and_kill(lambda fd: _writer(dsn, schema, session_id, fd, plan), plan.kill_at)


def _load(coordinator: PersistenceCoordinator, session_id: str) -> SessionSnapshot:
    """Load (repairing under the lease); the dead writer's lease ends when the server sees its socket close."""
    deadline = time.monotonic() + LEASE_WAIT_S
    while True:
        try:
            return coordinator.load(session_id)
        except SessionLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _await_lease_end(backend: PostgresBackend, session_id: str) -> None:
    """Wait until the dead writer's lease is free: its connection, which wrote too, is then gone.

    The server may still process a ``COMMIT`` the writer sent just before it was killed; the lease
    ends only after that backend has exited, so the stored rows read afterwards are final.
    """
    deadline = time.monotonic() + LEASE_WAIT_S
    while True:
        try:
            backend.lock_writer({"id": session_id}).release()
            return
        except SessionLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _stored_bodies(dsn: str, schema: str, session_id: str) -> list[bytes]:
    """Each stored event's JSON bytes, in seq order: a verbatim row as stored, a packed chunk run expanded."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        statement = sql.SQL("SELECT body FROM {}.events WHERE session_id = %s ORDER BY seq").format(
            sql.Identifier(schema)
        )
        bodies: list[bytes] = []
        for (body,) in conn.execute(statement, (session_id,)):
            value = loads(bytes(body))
            if value["type"] in ("text-chunks", "reasoning-chunks", "tool-call-chunks"):
                bodies.extend(dumps(al.thaw(member)) for member in decode_storage_record(value))
            else:
                bodies.append(bytes(body))
        return bodies


def test_crash__a_sigkilled_postgres_writer_loses_no_acknowledged_event_and_repairs_the_open_turn(
    pg_dsn: str, pg_schema: str
) -> None:
    PostgresBackend(pg_dsn, schema=pg_schema).close()  # nothing is created before the first operation
    rng = random.Random("kill9-postgres")
    acknowledged_total = 0
    repaired_trials = 0
    idle_trials = 0
    for trial in range(TRIALS):
        session_id = f"victim-{trial}"
        plan = plan_kill(rng, trial)
        killed = _run_trial(pg_dsn, pg_schema, session_id, plan)
        acknowledged, status = killed.acknowledged, killed.status
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"writer died on its own: {status}"
        assert "armed" in killed.reports and (acknowledged >= 0 or plan.acks == 0), killed.reports  # at its report
        idle_trials += killed.reached_idle
        expected = _expected(session_id, WRITER_TURNS)
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        coordinator = PersistenceCoordinator(al.SessionStore(), backend)
        try:
            _await_lease_end(backend, session_id)
            bodies = _stored_bodies(pg_dsn, pg_schema, session_id)
            # Every acknowledged event is stored, byte-identical to what the writer appended.
            assert len(bodies) > acknowledged, (trial, len(bodies), acknowledged)
            assert bodies[: acknowledged + 1] == [dumps(event) for event in expected[: acknowledged + 1]], trial
            if not bodies:
                assert acknowledged < 0
                continue
            snapshot = _load(coordinator, session_id)
            events = [al.thaw(event) for event in snapshot.events]
            prefix_len = next(
                (i for i, event in enumerate(events) if i >= len(expected) or event != expected[i]), len(events)
            )
            assert prefix_len == len(bodies), (trial, prefix_len, len(bodies))  # nothing but the writer's events
            closers = al.interrupted_turn_closers(expected[:prefix_len])
            assert [al.thaw(c) for c in closers] == events[prefix_len:], trial
            repaired_trials += bool(closers)
            if killed.reached_idle:  # it stopped after an acknowledged tool/call: its turn is open, so repaired
                assert closers, (trial, plan)
            session = coordinator.resume(session_id)
            messages = session.derive_messages()
            calls = {b["id"] for m in messages for b in m["content"] if b["type"] == "tool-call"}
            results = {b["toolCallId"] for m in messages for b in m["content"] if b["type"] == "tool-result"}
            assert calls <= results
            acknowledged_total += acknowledged + 1
        finally:
            coordinator.close()
    assert acknowledged_total > 0
    assert idle_trials >= TRIALS // 2, idle_trials  # every other trial is killed at its idle report
    assert repaired_trials >= idle_trials, (repaired_trials, idle_trials)
