"""A cold load leaves the cycle collector nothing to walk (issue 14).

Restored events, their data and packed chunk runs are acyclic and untracked, and the parsed records
they replace are released before the collector is re-enabled. Otherwise the first collection after a
load walks one object per event (or four per packed run) while the caller waits: ~50-70 ms at W(8000).
The C accelerator does the untracking; the pure-Python build tracks everything (and is not the fast
path), so these tests need the accelerator.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

import agentlog as al
from agentlog import _accel
from agentlog.kernel.packedrun import ChunkRun
from agentlog.persistence.coordinator import PersistenceCoordinator

from .test_lazy_chunks import BACKENDS, SID, make_backend, store_root, text_delta, write

accelerated = pytest.mark.skipif(not _accel.ACCELERATED, reason="the untracking is the C accelerator's")


def _script(turns: int) -> dict[str, Any]:
    step = {"stretches": [[text_delta(0, f"w{k}") for k in range(8)]], "message": True, "tool": True, "flush": []}
    return {
        "turns": [{"turn": t, "header": t == 1, "steps": [step, dict(step, tool=False)]} for t in range(1, turns + 1)],
        "open": None,
        "gaps": [1],
    }


@accelerated
@pytest.mark.parametrize("kind", BACKENDS)
def test_a_cold_load_adds_no_tracked_objects_per_event(kind: str) -> None:
    with store_root() as root:
        write(kind, root, _script(300))  # 300 turns: 600 packed runs, ~8,700 events
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        gc.collect()
        before = len(gc.get_objects())
        walked: list[int] = []

        def first_collection(phase: str, info: dict[str, Any]) -> None:
            if phase == "start" and not walked:
                walked.append(len(gc.get_objects(info["generation"])))

        gc.callbacks.append(first_collection)
        try:
            preparation = coordinator.prepare(SID)
            session = preparation.session
            assert len(session.derive_messages()) == 4 * 300
            gc.collect(0)
        finally:
            gc.callbacks.remove(first_collection)
        added = len(gc.get_objects()) - before
        assert added < 500, added  # a few hundred objects of the session's own, not one per event or run
        assert walked and walked[0] < 1000, walked  # the first collection after the load walks next to nothing
        preparation.dispose()
        coordinator.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_dropped_session_frees_its_log_without_the_collector(kind: str) -> None:
    """Reference counting alone frees a dropped restored log: nothing in a session forms a cycle (its
    surface and the surface's node view did, and that held the whole log until a full collection, so
    ``verify`` of a store of big sessions held every one of them)."""
    with store_root() as root:
        write(kind, root, _script(20))
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        enabled = gc.isenabled()
        gc.disable()
        try:
            view = coordinator.stored_view(SID, keep=False).view
            run = next(item for item in view._log if item.__class__ is ChunkRun)
            assert view.surface.nodes is view.surface.nodes  # a held view keeps its identity
            assert len(view._session.surface.nodes) == len(view.derive_messages())
            held = sys.getrefcount(run)
            del view
            assert sys.getrefcount(run) < held - 10  # every slot of the log let go of it
            assert sys.getrefcount(run) == 2  # ours and getrefcount's argument: the log is gone
        finally:
            if enabled:
                gc.enable()
            coordinator.close()
