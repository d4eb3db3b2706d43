"""kill -9 at every event boundary of a recorded turn, then resume: the spec's closers, a balanced log.

A real child process records one turn (reasoning, text, two tool calls — one run inside ``t.tool``, one
answered directly — then a streamed final answer) through a real ``PersistenceCoordinator`` on a real
JSONL store. For each k it makes event k durable and SIGKILLs itself right after it, so every prefix of
the turn is what a crash can leave on disk. The parent then resumes the session in a fresh store and
checks that crash repair appended exactly ``interrupted_turn_closers`` of that prefix, that the result
is a balanced transcript, and that the recorder goes on recording in it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.interop.recorder import Recorder
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import agentlog as al
    from agentlog.interop.recorder import Recorder
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    def record(root, kill_after):
        store = al.SessionStore()
        PersistenceCoordinator(store, JsonlBackend(root))

        def maybe_die(session, event):
            if event["seq"] == kill_after:
                store.flush(session)  # event k is durable; nothing after it is written
                os.kill(os.getpid(), signal.SIGKILL)

        store.on_event(maybe_die)
        session = store.create("crashy")
        tools = [{"name": "echo", "description": "Echo.", "parameters": {"type": "object"}}]
        rec = Recorder(session, provider="p", model="m", system="Be brief.", tools=tools)
        with rec.turn("echo twice") as t:
            t.assistant(
                "Echoing.",
                reasoning="two calls",
                tool_calls=[("c1", "echo", '{"text": "a"}'), ("c2", "echo", '{"text": "b"}')],
                usage=al.token_usage(10, 4),
            )
            with t.tool("c1") as call:
                call.result("echo: a")
            t.tool_result("c2", "echo: b")
            with t.stream() as s:
                s.text("Both ")
                s.text("echoed.")
        store.flush(session)

    # A zygote: imported once, it forks one fresh recording process per request (root, k) and reports
    # how that process ended. Each recording process builds its own store, coordinator and writer thread.
    for line in sys.stdin:
        root, k = line.split()
        pid = os.fork()
        if pid == 0:
            record(root, int(k))
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(k, os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status), flush=True)
    """
)


class Zygote:
    """The child process that forks the recording processes (the import cost is paid once)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, root: Path, kill_after: int) -> int:
        """Record into ``root``, killed after event ``kill_after``; the signal that ended it (0: none)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{root} {kill_after}\n")
        self.proc.stdin.flush()
        k, ended = self.proc.stdout.readline().split()
        assert int(k) == kill_after
        return int(ended)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def _balanced(session: Any) -> None:
    events = session.events
    assert al.interrupted_turn_closers(events) == []
    check_tool_pairing(session.derive_messages(), session.id, events)
    starts = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
    assert starts == [e["data"]["turn"] for e in events if e["type"] == "turn/end"]
    assert sum(e["type"] == "step/start" for e in events) == sum(e["type"] == "step/end" for e in events)


def _check_resume(root: Path, k: int) -> list[str]:
    stored = JsonlBackend(str(root)).load_stored("crashy")
    assert stored is not None
    assert stored.events[-1]["seq"] == k, f"the durable log should end at event {k}"
    expected = [al.thaw(e) for e in al.interrupted_turn_closers(stored.events)]
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    try:
        session = coordinator.resume("crashy")
        count = len(stored.events)
        closers = [al.thaw(e) for e in session.events[count : count + len(expected)]]
        assert closers == expected  # exactly the spec's repair, nothing else
        for closer in closers:
            if closer["type"] == "tool/result":
                call_id = closer["data"]["message"]["source"]["callId"]
                started = any(e["type"] == "tool/call" and e["data"]["callId"] == call_id for e in stored.events)
                code = "TOOL_OUTCOME_UNKNOWN" if started else "TOOL_NOT_STARTED"
                assert closer["data"]["error"]["code"] == code
        if expected:
            assert closers[-1]["type"] == "turn/end"
            assert closers[-1]["data"]["reason"] == {"kind": "interrupted"}
        _balanced(session)
        # the recorder continues in the repaired session (a new loop instance after the crash)
        rec = Recorder(session, provider="p", model="m")
        with rec.turn("what happened?") as t:
            t.assistant("The last turn was interrupted.")
        _balanced(session)
        view = session.at(count - 1)  # at(seq) still reads the crashed prefix
        assert len(view.events) == count
        return [c["type"] for c in closers]
    finally:
        coordinator.close()


def test_recorder_crash__sigkill_after_every_event_of_a_turn_is_repaired_with_the_spec_closers(tmp_path: Path) -> None:
    zygote = Zygote()
    try:
        assert zygote.run(tmp_path / "full", -1) == 0  # the uninterrupted run: how many events the turn writes
        stored = JsonlBackend(str(tmp_path / "full")).load_stored("crashy")
        assert stored is not None
        total = len(stored.events)
        types = [e["type"] for e in stored.events]
        assert types[0] == "turn/start" and types[-1] == "turn/end"
        seen: dict[int, list[str]] = {}
        for k in range(total):
            assert zygote.run(tmp_path / f"k{k}", k) == signal.SIGKILL, f"the process for k={k} was not killed"
            seen[k] = _check_resume(tmp_path / f"k{k}", k)
    finally:
        zygote.close()

    assert sorted(seen) == list(range(total))
    # the last event is turn/end: a kill after it needs no repair at all
    assert seen[total - 1] == []
    # killed after a tool/call and before its result: the call is answered "outcome unknown"
    first_call = types.index("tool/call")
    assert seen[first_call] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert seen[0] == ["turn/end"]  # only turn/start is durable: no step to close
    assert seen[types.index("step/start")] == ["step/end", "turn/end"]
