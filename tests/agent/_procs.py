"""Process helpers for the signal and cancellation tests (importable as ``_procs`` from tests/agent)."""

from __future__ import annotations

from pathlib import Path


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
