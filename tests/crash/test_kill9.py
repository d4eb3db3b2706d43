"""Crash tests with real processes: a writer is SIGKILLed at random points of its own progress.

The child process is forked from the test process (so each trial costs milliseconds, not an
interpreter start) and runs a real store + coordinator + backend writing real files. It reports every
seq whose ``flush()`` returned through a pipe, and when it reached the trial's kill point (a random
number of acknowledged flushes, or a stop inside an open turn after them, see :class:`KillPlan`): the
parent kills on that report, never after a wall-clock delay, so a loaded machine runs the same trials.
After the kill, a fresh coordinator loads the session:
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
from dataclasses import dataclass
from typing import Any, NoReturn

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


FLUSH_AFTER = ("step/end", "tool/call", "turn/end")
"""The writer flushes (and acknowledges) after each of these, as the agent loop does."""


@dataclass(frozen=True)
class KillPlan:
    """When a trial's writer is killed, in the writer's own progress, never after a wall-clock delay.

    The writer reports ``armed`` once ``acks`` flushes were acknowledged (at once for 0), appends ``extra`` more events
    (flushing as usual), then stops right after an acknowledged ``tool/call`` flush, inside an open turn
    with a call unanswered, and reports ``idle``. The parent kills at ``armed`` (the kill then lands
    wherever the writer got to: mid-append, mid-flush, inside a write) or, with ``at_idle``, at
    ``idle`` (the stored log then ends inside an open turn, so the load must repair it), however loaded
    the machine is.
    """

    acks: int
    extra: int
    at_idle: bool

    @property
    def kill_at(self) -> str:
        return "idle" if self.at_idle else "armed"


def plan_kill(rng: random.Random, trial: int) -> KillPlan:
    """A random kill point; every other trial is killed at its idle report (inside an open turn)."""
    return KillPlan(acks=rng.randint(0, 45), extra=rng.randint(0, 30), at_idle=trial % 2 == 1)


def write_turns(session: al.Session, flush: Callable[[al.Session], None], fd: int, plan: KillPlan) -> NoReturn:
    """The writer's loop (child process): :func:`turn_events` turns, each flush acknowledged on ``fd``
    as ``ack SEQ``, progress reported as :class:`KillPlan` says; never returns."""
    acks = 0
    since_armed: int | None = None
    if plan.acks == 0:  # killed at once: before (or during) the first flush
        os.write(fd, b"armed\n")
        since_armed = 0
    for turn in range(1, WRITER_TURNS + 1):
        for etype, data, intent in turn_events(turn):
            session.append(etype, data, intent)
            if since_armed is not None:
                since_armed += 1
            if etype not in FLUSH_AFTER:
                continue
            flush(session)
            os.write(fd, f"ack {session.seq - 1}\n".encode())
            acks += 1
            if acks == plan.acks:
                os.write(fd, b"armed\n")
                since_armed = 0
            if since_armed is not None and since_armed >= plan.extra and etype == "tool/call":
                os.write(fd, b"idle\n")
                idle_until_killed()
    raise AssertionError(f"the writer ran out of its {WRITER_TURNS} turns before {plan}")


def _writer(make_backend: Callable[[str], Any], root: str, fd: int, plan: KillPlan) -> None:
    """Child process body: a real store, coordinator and backend writing as :func:`write_turns` says."""
    try:
        store = al.SessionStore(now=lambda: 1_000)
        PersistenceCoordinator(store, make_backend(root), batch_delay_ms=5)
        session = store.create("victim", meta={"cwd": "/work", "createdAt": 1})
        write_turns(session, store.flush, fd, plan)
    except BaseException:  # the parent treats a dead writer without a kill as a failure
        os._exit(3)


def idle_until_killed() -> NoReturn:
    """A writer that reached its kill point waits for its kill (it must not exit itself)."""
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


PROGRESS_TIMEOUT_S = 600.0
"""How long the parent waits for a writer's progress report before failing the test: only a guard
against a hung writer (the kill itself waits for the report, never for a time)."""


@dataclass(frozen=True)
class Killed:
    acknowledged: int  # the highest acknowledged seq, -1 for none
    status: int  # the wait status
    reports: list[str]  # every line the writer wrote, in order

    @property
    def reached_idle(self) -> bool:
        return "idle" in self.reports


def fork_and_kill(child: Callable[[int], None], kill_at: str) -> Killed:
    """Fork ``child(write_fd)``, read its reports (one per line) until it reports ``kill_at``, then SIGKILL it.

    Acknowledgements written before the kill are still in the pipe: every one of them counts.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        child(write_fd)
        os._exit(4)
    os.close(write_fd)
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    buffer = b""
    while kill_at.encode() not in buffer.split(b"\n"):
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the writer reported no {kill_at!r} in {PROGRESS_TIMEOUT_S} s: {buffer[-400:]!r}")
        chunk = os.read(read_fd, 4096)
        if not chunk:  # the writer died before its kill point: the status says how
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
    reports = [line.decode() for line in buffer.split(b"\n") if line]
    acknowledged = max((int(line.split()[1]) for line in reports if line.startswith("ack ")), default=-1)
    return Killed(acknowledged, status, reports)


def _run_trial(make_backend: Callable[[str], Any], root: str, plan: KillPlan) -> Killed:
    return fork_and_kill(lambda fd: _writer(make_backend, root, fd, plan), plan.kill_at)


@pytest.mark.parametrize("backend_name", ["jsonl-zstd", "jsonl-none", "sqlite"])
def test_crash__sigkilled_writer_loses_no_acknowledged_event_and_repairs_the_open_turn(
    backend_name: str, tmp_path: Any
) -> None:
    make_backend = _backends()[backend_name]
    rng = random.Random(f"kill9-{backend_name}")
    acknowledged_total = 0
    repaired_trials = 0
    idle_trials = 0
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        os.makedirs(root)
        plan = plan_kill(rng, trial)
        killed = _run_trial(make_backend, root, plan)
        acknowledged, status = killed.acknowledged, killed.status
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"writer died on its own: {status}"
        assert "armed" in killed.reports and (acknowledged >= 0 or plan.acks == 0), killed.reports  # at its report
        idle_trials += killed.reached_idle
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
            if killed.reached_idle:  # it stopped after an acknowledged tool/call: its turn is open, so repaired
                assert closers, (trial, plan)
            # The repaired session is well-formed: it restores and every tool call is answered.
            session = coordinator.resume("victim")
            messages = session.derive_messages()
            calls = {b["id"] for m in messages for b in m["content"] if b["type"] == "tool-call"}
            results = {b["toolCallId"] for m in messages for b in m["content"] if b["type"] == "tool-result"}
            assert calls <= results
            acknowledged_total += acknowledged + 1
        finally:
            coordinator.close()
    # The trials did exercise acknowledged writes and kills inside open turns (at least every trial
    # killed at its idle report, whose stored log ends inside one: no timing decides this count).
    assert acknowledged_total > 0
    assert idle_trials >= TRIALS // 2, idle_trials
    assert repaired_trials >= idle_trials, (repaired_trials, idle_trials)
