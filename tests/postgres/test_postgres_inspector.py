"""The inspector's data layer over a PostgreSQL store: the same answers as over files (every state is
``view.at(seq)``, rows from the projection cache, search from the host's index)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentlog.inspector.views import Inspector
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from inspector.stores import SEARCH_WORD, write_store  # tests/inspector/stores.py


@pytest.mark.parametrize("paged", [False, True])
def test_the_inspector_reads_a_postgres_store(
    pg_backends: Callable[..., PostgresBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paged: bool
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the search index lives on the reading host
    facts = write_store(tmp_path, "postgres", backend=pg_backends())
    inspector = Inspector(pg_backends(read_only=True), page_after=None, page_events=3)
    reference = PersistenceCoordinator(SessionStore(), pg_backends(read_only=True))
    try:
        assert {row["id"] for row in inspector.sessions()} == {"main", "main-fork", "crashed", "hostile"}
        if paged:  # the log kept as pages of three seqs: every state read from them
            assert inspector.page_out("main").stored is None
        view = reference.view("main")
        for seq in range(facts["lastSeq"] + 1):
            state = inspector.state_at("main", seq)
            assert state["messages"] == thaw(view.at(seq).derive_messages().to_list())
            assert [node["seq"] for node in state["surface"]] == list(view.at(seq).surface.nodes)
        assert inspector.summary("crashed")["status"] == "repairable"
        hits = inspector.search(SEARCH_WORD)["items"]
        assert {hit["bestMatch"]["sessionId"] for hit in hits} == {"main", "main-fork"}
        assert inspector.loads == 2
    finally:
        reference.close()
        inspector.close()
