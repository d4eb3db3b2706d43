"""A writer on one host of the separate-hosts tests (run by path inside a host's network namespace).

``python _netns_writer.py DSN SCHEMA SESSION_ID CALL_TIMEOUT_S create|resume [WAIT_S]``: a store,
coordinator and ``PostgresBackend`` of its own. ``create`` starts the session; ``resume`` waits up to
``WAIT_S`` for its writer lease (``resume(wait=True, timeout=WAIT_S)``) and reports ``resumed COUNT``
(the stored events it continues from), or ``error CODE ...`` and ends. Then one
command per stdin line, one report per stdout line:

* ``turn N``: append turn N (``crash.test_kill9.turn_events``), report ``flushing``, flush, then
  ``acked LAST_SEQ`` or ``error CODE SECONDS MESSAGE``;
* ``flush``: flush again (what is still buffered after a failure), reported the same way;
* ``exit``: close the coordinator (releasing the lease), report ``closed`` and end.

Only writes happen after the ``turn`` command: batches wait for a flush (no background write window).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the crash suite

import agentlog as al
from agentlog.errors import AgentlogError
from agentlog.persistence.coordinator import MAX_BATCH_DELAY_MS, PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from crash.test_kill9 import turn_events


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def flush(coordinator: PersistenceCoordinator, session: al.Session) -> None:
    started = time.monotonic()
    try:
        coordinator.flush(session)
    except AgentlogError as err:
        message = " ".join(str(err).split())
        report(f"error {err.code} {time.monotonic() - started:.3f} {message}")
        return
    report(f"acked {session.seq - 1}")


def main() -> None:
    dsn, schema, session_id, call_timeout_s, mode = sys.argv[1:6]
    store = al.SessionStore(now=lambda: 1_000)
    backend = PostgresBackend(dsn, schema=schema, call_timeout_s=float(call_timeout_s))
    coordinator = PersistenceCoordinator(store, backend, batch_delay_ms=MAX_BATCH_DELAY_MS)
    if mode == "create":
        session = store.create(session_id, meta={"cwd": "/work", "createdAt": 1})
        report("created")
    else:
        try:
            session = coordinator.resume(session_id, wait=True, timeout=float(sys.argv[6]))
        except AgentlogError as err:
            report(f"error {err.code} 0 {' '.join(str(err).split())}")
            return
        report(f"resumed {len(session.events)}")
    for command in sys.stdin:
        verb, _, argument = command.strip().partition(" ")
        if verb == "turn":
            for etype, data, intent in turn_events(int(argument)):
                session.append(etype, data, intent)
            report("flushing")
            flush(coordinator, session)
        elif verb == "flush":
            flush(coordinator, session)
        elif verb == "exit":
            coordinator.close()
            report("closed")
            return


if __name__ == "__main__":
    main()
