"""The backend contract (``agentlog.testing.BackendContract``) over the in-memory backend.

Every ``make_backend`` call opens a new ``MemoryBackend`` over the test's one ``MemoryStorage``: a restart.
"""

from __future__ import annotations

from pathlib import Path

from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.testing import BackendContract


class TestMemoryContract(BackendContract):
    kind = "memory"

    def new_location(self, tmp_path: Path) -> MemoryStorage:
        return MemoryStorage()

    def make_backend(self, location: MemoryStorage, cls: type[MemoryBackend] = MemoryBackend) -> MemoryBackend:
        return cls(location)


def test_two_memory_backends_over_one_storage_share_the_records() -> None:
    storage = MemoryStorage()
    first, second = MemoryBackend(storage), MemoryBackend(storage)
    first.append_batch(
        {"version": 0, "id": "s1", "createdAt": 1},
        [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}],
        False,
    )
    stored = second.load_stored("s1")
    assert stored is not None and [event["seq"] for event in stored.events] == [0]
    assert first.read_revision("s1") == second.read_revision("s1")
    assert MemoryBackend().load_stored("s1") is None  # a fresh backend has fresh storage
