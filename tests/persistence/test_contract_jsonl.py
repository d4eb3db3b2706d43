"""The backend contract (``agentlog.testing.BackendContract``) over the JSONL backend, both encodings."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing import BackendContract

from .conftest import inject_raw_torn_tail, inject_zstd_torn_tail


class _JsonlContract(BackendContract):
    compression: Literal["none", "zstd"] = "none"
    has_torn_tail = True
    locates_raw_log = True
    can_damage_header = True

    def new_location(self, tmp_path: Path) -> Path:
        return tmp_path / "jsonl-root"

    def make_backend(self, location: Path) -> JsonlBackend:
        return JsonlBackend(str(location), compression=self.compression)

    def inject_torn_tail(self, location: Path, meta: Mapping[str, Any], next_seq: int) -> None:
        locator = self.make_backend(location)
        try:
            path = locator.locate(meta)
        finally:
            locator.close()
        assert path is not None
        inject = inject_raw_torn_tail if self.compression == "none" else inject_zstd_torn_tail
        inject(path, next_seq)

    def damage_header(self, location: Path, meta: Mapping[str, Any]) -> None:
        """Overwrite the log with a first line that is not a header (for zstd: not even a frame)."""
        locator = self.make_backend(location)
        try:
            path = locator.locate(meta)
        finally:
            locator.close()
        assert path is not None
        Path(path).write_bytes(b'{"version":0,"id": damaged\n')


class TestJsonlNoneContract(_JsonlContract):
    kind = "jsonl-none"


class TestJsonlZstdContract(_JsonlContract):
    kind = "jsonl-zstd"
    compression = "zstd"
