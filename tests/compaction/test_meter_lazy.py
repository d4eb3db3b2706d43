"""The token meter over a cold-loaded session whose log still holds packed chunk runs (issue 14).

A resumed or viewed session keeps its streamed deltas packed until something reads them; the meter
reads the log directly for speed, including the chunks an ``assistant/message`` cites, so it must see
events there, never the packed items. Its measurement must equal the one of the live session that wrote
the log.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import agentlog as al
from agentlog.compaction.meter import TokenMeter
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from workload import build_workload


def _backend(kind: str, root: Path) -> object:
    if kind == "sqlite":
        return SqliteBackend(str(root / "s.sqlite3"))
    return JsonlBackend(str(root), compression="zstd" if kind == "jsonl-zstd" else "none")


@pytest.mark.parametrize("kind", ["jsonl-zstd", "jsonl-none", "sqlite"])
def test_the_meter_measures_a_cold_loaded_session_as_the_live_one(kind: str, tmp_path: Path) -> None:
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(kind, tmp_path))  # type: ignore[arg-type]
    session = store.create("m", meta={"cwd": "/m"})
    for type_, data, intent in build_workload(6):
        session.append(type_, data, intent)
    store.flush(session)
    live = TokenMeter().measure(session).to_json()
    coordinator.close()

    for how in ("view", "resume"):
        reader = PersistenceCoordinator(al.SessionStore(), _backend(kind, tmp_path))  # type: ignore[arg-type]
        try:
            cold = reader.view("m") if how == "view" else reader.resume("m")
            measured = TokenMeter().measure(cold).to_json()
            if how == "resume":  # the resumed log holds one more event: its end-seed marker
                assert measured.pop("logRevision") == live["logRevision"] + 1
                measured["logRevision"] = live["logRevision"]
            assert measured == live, how
            if how == "resume":  # an earlier point of a restored log (a lazy prefix) measures too
                half = len(cold.events) // 2
                assert TokenMeter().measure(cold.at(half)).to_json() == TokenMeter().measure(session.at(half)).to_json()
        finally:
            reader.close()
