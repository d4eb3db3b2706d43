"""Helpers of the signal and cancellation tests (importable as ``_procs`` anywhere in tests/)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentlog as al


def running_sleep(root_pid: int) -> bool:
    """Whether a `sleep` process runs among ``root_pid``'s descendants (read from /proc)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        names[int(entry.name)] = name
    for pid, name in names.items():
        if name != "sleep":
            continue
        while pid in parents and pid > 1:
            pid = parents[pid]
            if pid == root_pid:
                return True
    return False


def assert_turns_closed_with_every_call_answered(events: Sequence[Any]) -> None:
    """Every tool-call block and tool/call of a turn has a tool/result before that turn's turn/end."""
    assert events, "nothing was stored"
    requested: dict[str, int] = {}
    for event in events:
        etype, data = event["type"], event["data"]
        if etype == "assistant/message":
            for block in data["message"]["content"]:
                if block.get("type") == "tool-call":
                    requested[block["id"]] = event["seq"]
        elif etype == "tool/call":
            requested.setdefault(data["callId"], event["seq"])
        elif etype == "tool/result":
            requested.pop(data["message"]["source"]["callId"], None)
        elif etype == "turn/end":
            assert not requested, f"turn/end (seq {event['seq']}) with unanswered calls {sorted(requested)}"
    assert al.interrupted_turn_closers(list(events)) == [], "the stored log still ends inside a turn"
