"""Separate hosts: writers and a tail in network namespaces of their own, the server in another.

Each host is a namespace wired to the server's by a veth pair (``tests/postgres/_netns.py``), so a
partition is a real one: the host's bridge port goes down and packets vanish, as on a cut cable. The
writers (``_netns_writer.py``) and the tail (``agentlog tail --follow``) are processes on those hosts
reporting progress on stdout; the test waits on those reports and on what the server shows
(``pg_stat_activity``, read over its Unix socket), never on a guessed time. What is checked:

* a writer killed on host A leaves the session to host B, which continues it with every event A had
  acknowledged;
* host A partitioned while its flush is in flight gets ``DATABASE_UNAVAILABLE`` (its own client-side
  deadline), the server frees A's lease by itself (TCP keepalives and the user timeout agentlog asks
  of the server for every connection) so B takes the session over, and when A's link comes back, A's
  retry is ``SESSION_LOCKED``: it lost the lease; nothing A acknowledged is lost;
* a tail on host C prints every event exactly once and in seq order across that takeover.

Without namespaces (not root, no ``ip``) the tests are skipped with the reason, unless
``AGENTLOG_REQUIRE_NETNS=1`` (``.ci/run`` sets it), which makes that a failure.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

import agentlog as al
from _postgres import fresh_schema
from agentlog.persistence.postgres import PostgresBackend
from crash.test_kill9 import turn_events

from ._netns import GUARD_S, Child, Lab, NetnsServer, unavailable

REQUIRE_ENV = "AGENTLOG_REQUIRE_NETNS"
WRITER = str(Path(__file__).with_name("_netns_writer.py"))
CALL_TIMEOUT_S = 6.0
"""The writers' client-side deadline: long enough for the test to cut the link while a flush waits
(the test reacts to the server's own report), short enough that the lease is freed soon after."""
PER_TURN = len(turn_events(1))
SESSION = "shared-session"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Lab, NetnsServer]]:
    """Hosts a, b and c and a PostgreSQL server, each in a network namespace of its own."""
    reason = unavailable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but network namespaces cannot be created: {reason}")
        pytest.skip(f"network namespaces cannot be created: {reason}")
    network = Lab()
    server: NetnsServer | None = None
    try:
        for host in ("a", "b", "c"):
            network.add_host(host)
        server = NetnsServer(network)
        yield network, server
    finally:
        if server is not None:
            server.remove()
        network.remove()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """The test's host processes, killed at teardown whatever happened."""
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


def _env() -> dict[str, str]:
    """The children import this checkout's agentlog (the one under test)."""
    source = str(Path(al.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    return env


def _writer(network: Lab, server: NetnsServer, children: list[Child], host: str, schema: str, mode: str) -> Child:
    argv = [sys.executable, WRITER, server.dsn, schema, SESSION, str(CALL_TIMEOUT_S), mode, str(GUARD_S / 2)]
    child = Child(network, host, argv, env=_env())
    children.append(child)
    return child


def _tail(network: Lab, server: NetnsServer, children: list[Child], host: str, schema: str) -> Child:
    argv = [sys.executable, "-m", "agentlog.cli", "tail", SESSION, "--follow", "--json"]
    argv += ["--backend", "postgres", "--dsn", server.dsn, "--pg-schema", schema]
    child = Child(network, host, argv, env=_env())
    children.append(child)
    return child


def _acked(child: Child, turn: int) -> int:
    child.send(f"turn {turn}")
    child.expect("flushing")
    fields = child.expect("acked")
    return int(fields[0])


def _expected(*runs: int) -> list[Any]:
    """The session's events when writers appended ``runs`` turns in turn (e.g. 2 then 1: turns 1 and 2,
    then turn 3), each resume starting with the ``session/end-seed`` mark (times left out: a resumed
    session stamps with the wall clock)."""
    session = al.Session.create(SESSION, now=lambda: 1_000)
    turn = 0
    for index, count in enumerate(runs):
        if index:
            session.append("session/end-seed", {})
        for _ in range(count):
            turn += 1
            for etype, data, intent in turn_events(turn):
                session.append(etype, data, intent)
    return _timeless([al.thaw(event) for event in session.events])


def _timeless(events: list[Any]) -> list[Any]:
    return [{**event, "time": None} for event in events]


def _stored(server: NetnsServer, schema: str) -> list[Any]:
    backend = PostgresBackend(server.local_dsn, schema=schema, read_only=True)
    try:
        stored = backend.load_stored(SESSION)
        assert stored is not None
        return _timeless([al.thaw(event) for event in stored.events])
    finally:
        backend.close()


def _await(server: NetnsServer, query: str, params: tuple[Any, ...], what: str) -> None:
    """Poll the server (its Unix socket) until ``query`` returns true; the guard only ends a hung test."""
    deadline = time.monotonic() + GUARD_S
    with psycopg.connect(server.local_dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(query, params).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, f"the server never showed {what}; server log:\n{server.log()}"
            time.sleep(0.02)


@pytest.mark.crash  # host A's writer is SIGKILLed
def test_a_writer_killed_on_one_host_leaves_the_session_to_another_with_every_acknowledged_event(
    lab: tuple[Lab, NetnsServer], children: list[Child]
) -> None:
    network, server = lab
    schema = fresh_schema()
    a = _writer(network, server, children, "a", schema, "create")
    a.expect("created")
    acked = [_acked(a, turn) for turn in (1, 2)]
    assert acked == [PER_TURN - 1, 2 * PER_TURN - 1]
    b = _writer(network, server, children, "b", schema, "resume")  # waits for A's lease
    a.kill()  # SIGKILL: A's kernel closes its sockets, the server ends A's backend and lease
    assert b.expect("resumed") == [str(2 * PER_TURN + 1)]  # A's two turns, and B's end-seed mark
    assert _acked(b, 3) == 3 * PER_TURN
    b.send("exit")
    b.expect("closed")
    assert _stored(server, schema) == _expected(2, 1)


def _partition_takeover(
    network: Lab,
    server: NetnsServer,
    children: list[Child],
    schema: str,
    after_first_turn: Callable[[], None] = lambda: None,
) -> None:
    """Host A's flush is in flight when its link goes down; B takes the session over; A comes back.

    A's turn 3 is held at the server by a row lock the test takes, so A is surely waiting on the
    server when the test cuts A's link; the test then lets the statement run: the server commits it,
    its answer never reaches A.
    """
    a = _writer(network, server, children, "a", schema, "create")
    a.expect("created")
    assert _acked(a, 1) == PER_TURN - 1
    after_first_turn()
    assert _acked(a, 2) == 2 * PER_TURN - 1
    with psycopg.connect(server.local_dsn) as blocker:
        blocker.execute(
            sql.SQL("SELECT 1 FROM {}.sessions WHERE id = %s FOR UPDATE").format(sql.Identifier(schema)), (SESSION,)
        )
        a.send("turn 3")
        a.expect("flushing")
        _await(
            server,
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND host(client_addr) = %s",
            (network.addresses["a"],),
            "host A's flush waiting on the row lock",
        )
        network.partition("a")
        blocker.commit()  # A's statement runs and commits; its answer is lost in the partition
    _await(
        server,
        sql.SQL("SELECT next_seq = %s FROM {}.sessions WHERE id = %s").format(sql.Identifier(schema)),
        (3 * PER_TURN, SESSION),
        "host A's turn 3 committed",
    )
    code, elapsed, *message = a.expect("error")
    assert code == "DATABASE_UNAVAILABLE", (elapsed, message)
    assert f"did not answer within {CALL_TIMEOUT_S:g} s" in " ".join(message)  # its own deadline ended it

    # B waits for the lease, which the server frees once it has given up on A (A stays cut off).
    b = _writer(network, server, children, "b", schema, "resume")
    fields = b.line().split(" ")
    assert fields[0] == "resumed", f"host B never got the lease of partitioned host A: {' '.join(fields)}"
    assert fields[1:] == [str(3 * PER_TURN + 1)]  # A's turn 3 was committed: B continues after it
    assert _acked(b, 4) == 4 * PER_TURN

    # A's link comes back while B holds the session: A's retry finds its lease lost.
    network.heal("a")
    for _ in range(3):  # the link may take a moment to carry traffic again: that is DATABASE_UNAVAILABLE
        a.send("flush")
        code, _, *message = a.expect("error")
        if code != "DATABASE_UNAVAILABLE":
            break
    assert code == "SESSION_LOCKED", message
    b.send("exit")
    b.expect("closed")


def test_a_partitioned_writer_gets_a_typed_error_and_its_lease_passes_to_another_host(
    lab: tuple[Lab, NetnsServer], children: list[Child]
) -> None:
    network, server = lab
    schema = fresh_schema()
    _partition_takeover(network, server, children, schema)
    # A's acknowledged turns, its turn 3 (committed, unacknowledged), B's turn 4: each once, in order.
    assert _stored(server, schema) == _expected(3, 1)


def test_a_tail_on_a_third_host_sees_every_event_once_in_order_across_a_partition_takeover(
    lab: tuple[Lab, NetnsServer], children: list[Child]
) -> None:
    network, server = lab
    schema = fresh_schema()
    tails: list[Child] = []

    def start_tail() -> None:
        tail = _tail(network, server, children, "c", schema)
        first = [orjson.loads(tail.line()) for _ in range(PER_TURN)]  # what is stored when it starts
        assert _timeless(first) == _expected(1)
        tails.append(tail)

    _partition_takeover(network, server, children, schema, after_first_turn=start_tail)
    (tail,) = tails
    printed = [orjson.loads(tail.line()) for _ in range(3 * PER_TURN + 1)]
    assert [event["seq"] for event in printed] == list(range(PER_TURN, 4 * PER_TURN + 1))
    assert _expected(1) + _timeless(printed) == _expected(3, 1) == _stored(server, schema)
    assert tail.interrupt() == []  # Ctrl-C: it ends, having printed nothing more
