"""A million-event session in fresh processes (issue 14): W(20000) resumes, verifies and exports.

W(20000) is the benchmark workload (``benchmarks/workload.py``) at 20,000 turns: 1,020,001 events, of
which 800,000 are streamed ``assistant/chunk`` deltas kept in packed runs. It is written once on
jsonl-zstd; each check then runs in a process of its own, as a user's next command would, so nothing
is shared with the writer. The resume continues the session (one more turn, flushed) and a further
fresh load sees it, so the resumed session is a working one and not only a readable one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from cli.test_cli_streaming import SID, _write_workload

pytestmark = pytest.mark.accel


def _event_items(path: Path) -> int:
    """The number of items of the top-level ``events`` array of an export file (each opens a line of
    its own at indent 4), counted without parsing the document."""
    data = path.read_bytes()
    start = data.index(b'\n  "events": [')
    end = data.index(b'\n  "surface": ', start)
    return data.count(b"\n    {\n", start, end)


def build_workload_events(turns: int) -> int:
    """W(T) has 51 events per turn and one more (the request header) in turn 1."""
    return 51 * turns + 1


TURNS = 20_000
EVENTS = build_workload_events(TURNS)
MESSAGES = 4 * TURNS  # user, assistant with a tool call, tool result, final assistant per turn

RESUME = textwrap.dedent(
    """
    import json, sys
    import agentlog as al
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    root, sid = sys.argv[1], sys.argv[2]
    store = al.SessionStore(now=lambda: 1_700_000_000_001)
    coordinator = PersistenceCoordinator(store, JsonlBackend(root, compression="zstd"))
    session = coordinator.resume(sid)
    before = (len(session.events), len(session.derive_messages()))
    turn = int(sys.argv[3])
    session.append("turn/start", {"turn": turn})
    session.append("user/message", al.user_message("after the resume", id="u-after"), {"surfaceOp": "append"})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    store.flush(session)
    coordinator.close()
    again = PersistenceCoordinator(al.SessionStore(), JsonlBackend(root, compression="zstd")).load(sid)
    print(json.dumps({"before": before, "after": len(again.events), "last": al.thaw(again.events[-2])["data"]}))
    """
)


@pytest.fixture(scope="module")
def big_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("w20000") / "store"
    assert _write_workload(root, TURNS, interrupted=False) == EVENTS
    return root


def test_w20000_verifies_and_exports_in_fresh_processes(big_root: Path, tmp_path: Path) -> None:
    """``agentlog verify --json`` reports every event; ``agentlog export`` streams all of them to a file."""
    done = subprocess.run(
        [sys.executable, "-m", "agentlog.cli", "verify", SID, "--store", str(big_root), "--json"],
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == {
        "sessions": [{"id": SID, "status": "ok", "events": EVENTS, "error": None, "note": None}],
        "ok": True,
    }
    target = tmp_path / "export.json"
    with target.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "agentlog.cli", "export", SID, "--store", str(big_root)],
            stdout=out,
            stderr=subprocess.PIPE,
        )
    assert done.returncode == 0, done.stderr
    assert _event_items(target) == EVENTS
    assert target.read_bytes().endswith(b"\n}\n")
    target.unlink()  # ~400 MB


def test_w20000_resumes_in_a_fresh_process_and_continues(big_root: Path) -> None:
    """A fresh process resumes W(20000), derives all its messages, appends a turn that a further load
    reads back (runs last: it changes the stored session)."""
    done = subprocess.run([sys.executable, "-c", RESUME, str(big_root), SID, str(TURNS + 1)], capture_output=True)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["before"] == [EVENTS + 1, MESSAGES]  # the stored events and the resume's end-seed marker
    assert report["after"] == EVENTS + 4
    assert report["last"] == {
        "id": "u-after",
        "role": "user",
        "content": [{"type": "text", "text": "after the resume"}],
        "source": {"kind": "user"},
    }
