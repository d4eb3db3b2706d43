"""Crash tests with real processes: a writer is SIGKILLed at random moments.

The child process is forked from the test process (so each trial costs milliseconds, not an
interpreter start) and runs a real store + coordinator + backend writing real files. It reports every
seq whose ``flush()`` returned through a pipe. After the kill, a fresh coordinator loads the session:
the load must succeed, contain every event acknowledged before the kill (byte-identical to what the
writer appended), and close an open turn exactly as the spec's repair closers do.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

TRIALS = int(os.environ.get("AGENTLOG_CRASH_TRIALS", "50"))


def _backends() -> dict[str, Callable[[str], Any]]:
    makers: dict[str, Callable[[str], Any]] = {}
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    makers["jsonl-zstd"] = lambda root: JsonlBackend(root, compression="zstd")
    makers["jsonl-none"] = lambda root: JsonlBackend(root, compression="none")
    makers["sqlite"] = lambda root: SqliteBackend(os.path.join(root, "sessions.sqlite3"))
    return makers


def turn_events(turn: int) -> list[tuple[str, Any, Any]]:
    """One agent turn with a tool call, deterministic, as the writer appends it."""
    call = f"c{turn}"
    ops: list[tuple[str, Any, Any]] = [
        ("turn/start", {"turn": turn}, None),
        ("user/message", al.user_message(f"question {turn}", id=f"u{turn}"), {"surfaceOp": "append"}),
        ("step/start", {"turn": turn, "step": 1}, None),
    ]
    ops += [("assistant/chunk", {"turn": turn, "step": 1, "chunk": al.text_delta(0, f"t{k} ")}, None) for k in range(6)]
    ops += [
        (
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "message": al.assistant_message(
                    [al.text_block("reading"), al.tool_call_block(call, "read_file", '{"path": "a"}')],
                    provider="p",
                    model="m",
                    id=f"a{turn}",
                ),
            },
            {"surfaceOp": "append"},
        ),
        (
            "tool/call",
            {"turn": turn, "step": 1, "callId": call, "name": "read_file", "arguments": '{"path": "a"}'},
            None,
        ),
        (
            "tool/result",
            {"turn": turn, "step": 1, "message": al.tool_result_message(call, "x" * 200, id=f"r{turn}")},
            {"surfaceOp": "append"},
        ),
        ("step/end", {"turn": turn, "step": 1}, None),
        ("step/start", {"turn": turn, "step": 2}, None),
        (
            "assistant/message",
            {"turn": turn, "step": 2, "message": al.assistant_message("done", provider="p", model="m", id=f"b{turn}")},
            {"surfaceOp": "append"},
        ),
        ("step/end", {"turn": turn, "step": 2}, None),
        ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None),
    ]
    return ops


def _writer(make_backend: Callable[[str], Any], root: str, fd: int) -> None:
    """Child process body: append up to :data:`WRITER_TURNS` turns, reporting each flushed seq; never
    returns."""
    try:
        store = al.SessionStore(now=lambda: 1_000)
        PersistenceCoordinator(store, make_backend(root), batch_delay_ms=5)
        session = store.create("victim", meta={"cwd": "/work", "createdAt": 1})
        for turn in range(1, WRITER_TURNS + 1):
            for etype, data, intent in turn_events(turn):
                session.append(etype, data, intent)
                if etype in ("step/end", "tool/call", "turn/end"):
                    store.flush(session)
                    os.write(fd, f"{session.seq - 1}\n".encode())
        idle_until_killed()
    except BaseException:  # the parent treats a dead writer without a kill as a failure
        os._exit(3)


def idle_until_killed() -> None:
    """A writer that wrote all :data:`WRITER_TURNS` turns waits for its kill (it must not exit itself)."""
    while True:
        time.sleep(60)


def _expected_log(upto_turns: int) -> list[Any]:
    session = al.Session.create("expected", now=lambda: 1_000)
    for turn in range(1, upto_turns + 1):
        for etype, data, intent in turn_events(turn):
            session.append(etype, data, intent)
    return [al.thaw(event) for event in session.events]


WRITER_TURNS = 200
"""How many turns a crash-test writer appends before it idles until killed: the expected log covers
exactly these, so a fast machine cannot outrun it (an unbounded writer once wrote past the expected
log within the kill delay)."""

EXPECTED = _expected_log(WRITER_TURNS)


def fork_and_kill(child: Callable[[int], None], run_s: float) -> tuple[int, int]:
    """Fork ``child(write_fd)``, let it report flushed seqs (one per line) for ``run_s``, then SIGKILL it.

    Returns the highest acknowledged seq (-1 for none) and the wait status. Acknowledgements written
    before the kill are still in the pipe: every one of them counts.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        child(write_fd)
        os._exit(4)
    os.close(write_fd)
    deadline = time.monotonic() + run_s
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            buffer += chunk
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    while True:
        ready, _, _ = select.select([read_fd], [], [], 0)
        if not ready:
            break
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        buffer += chunk
    os.close(read_fd)
    acknowledged = max((int(line) for line in buffer.split(b"\n") if line), default=-1)
    return acknowledged, status


def _run_trial(make_backend: Callable[[str], Any], root: str, rng: random.Random) -> tuple[int, int]:
    return fork_and_kill(lambda fd: _writer(make_backend, root, fd), rng.uniform(0.005, 0.12))


@pytest.mark.parametrize("backend_name", ["jsonl-zstd", "jsonl-none", "sqlite"])
def test_crash__sigkilled_writer_loses_no_acknowledged_event_and_repairs_the_open_turn(
    backend_name: str, tmp_path: Any
) -> None:
    make_backend = _backends()[backend_name]
    rng = random.Random(f"kill9-{backend_name}")
    acknowledged_total = 0
    repaired_trials = 0
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        os.makedirs(root)
        acknowledged, status = _run_trial(make_backend, root, rng)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"writer died on its own: {status}"
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, make_backend(root))
        try:
            if acknowledged < 0:
                # Killed before the first flush returned: either nothing was stored or a valid prefix was.
                try:
                    snapshot = coordinator.load("victim")
                except al.AgentlogError as err:
                    assert err.code == "SESSION_NOT_FOUND"
                    continue
            else:
                snapshot = coordinator.load("victim")
            events = [al.thaw(event) for event in snapshot.events]
            # Every acknowledged event is present, byte-identical to what the writer appended.
            assert len(events) > acknowledged
            prefix_len = next(
                (i for i, event in enumerate(events) if i >= len(EXPECTED) or event != EXPECTED[i]), len(events)
            )
            assert prefix_len > acknowledged, (trial, prefix_len, acknowledged)
            # What follows the writer's own events is exactly the repair of the open turn.
            closers = al.interrupted_turn_closers(EXPECTED[:prefix_len])
            assert [al.thaw(c) for c in closers] == events[prefix_len:], trial
            repaired_trials += bool(closers)
            # The repaired session is well-formed: it restores and every tool call is answered.
            session = coordinator.resume("victim")
            messages = session.derive_messages()
            calls = {b["id"] for m in messages for b in m["content"] if b["type"] == "tool-call"}
            results = {b["toolCallId"] for m in messages for b in m["content"] if b["type"] == "tool-result"}
            assert calls <= results
            acknowledged_total += acknowledged + 1
        finally:
            coordinator.close()
    # The trials did exercise acknowledged writes and kills inside open turns.
    assert acknowledged_total > 0
    assert repaired_trials >= TRIALS // 5, repaired_trials
