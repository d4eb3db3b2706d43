"""The typed backend seam: plain ``mypy --strict`` checks a backend's own torn-marker type.

``Backend`` and ``StoredPrefix`` are generic in the torn-marker type: a JSONL backend is a
``Backend[TornMarker]`` whose ``commit_repair`` takes a ``TornMarker``; the backends that cannot tear are
``Backend[None]``; a bare ``Backend`` is any backend. ``StoredPrefix.meta`` is the kernel's ``SessionHeader``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentlog

GOOD = """
from typing import assert_type

from agentlog.kernel.events import SessionHeader
from agentlog.persistence.backend import Backend, SeeksStored
from agentlog.persistence.jsonl.backend import JsonlBackend, TornMarker
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

jsonl: Backend[TornMarker] = JsonlBackend("/tmp/store")
sqlite: Backend[None] = SqliteBackend(":memory:")
memory: Backend[None] = MemoryBackend()
anyone: Backend = SqliteBackend(":memory:")
seeks: SeeksStored[TornMarker] = JsonlBackend("/tmp/store")
stored = jsonl.load_stored("s")
if stored is not None:
    assert_type(stored.torn_marker, TornMarker | None)
    assert_type(stored.meta, SessionHeader)
    jsonl.commit_repair(stored.meta, stored.torn_marker, [])
sqlite.commit_repair({"id": "s"}, None, [])
"""

BAD = """
from agentlog.persistence.backend import Backend
from agentlog.persistence.jsonl.backend import JsonlBackend, TornMarker
from agentlog.persistence.sqlite.backend import SqliteBackend

jsonl: Backend[TornMarker] = JsonlBackend("/tmp/store")
jsonl.commit_repair({"id": "s"}, 3, [])  # BAD: not a TornMarker
sqlite: Backend[TornMarker] = SqliteBackend(":memory:")  # BAD: SQLite logs cannot tear
SqliteBackend(":memory:").commit_repair({"id": "s"}, TornMarker(0), [])  # BAD: a marker for a backend without one
"""


@pytest.mark.subprocess
def test_plain_mypy_strict_checks_each_backend_s_torn_marker_type(tmp_path: Path) -> None:
    for name, source in {"good": GOOD, "bad": BAD}.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    env = dict(os.environ, MYPYPATH=str(Path(agentlog.__file__).parents[1]))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "good.py", "bad.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 2: mypy itself failed
    output = result.stdout
    assert [line for line in output.splitlines() if line.startswith("good.py:")] == [], output
    bad_lines = {i for i, line in enumerate(textwrap.dedent(BAD).splitlines(), start=1) if "# BAD" in line}
    errors = [line for line in output.splitlines() if line.startswith("bad.py:") and ": error:" in line]
    flagged = {int(line.split(":")[1]) for line in errors}
    assert flagged == bad_lines, output
