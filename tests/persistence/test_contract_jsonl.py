"""The backend contract (``agentlog.testing.BackendContract``) over the JSONL backend, both encodings.

The capabilities are derived: the torn-tail and damaged-header cases run because the subclass defines
their injectors, and format errors must cite the raw log because ``locate()`` names the log file. The
torn-tail injectors live here; the persistence conftest builds its ``jsonl-none`` and ``jsonl-zstd``
factories from these classes.
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing import BackendContract
from agentlog.testing.builders import chunk_event


def inject_raw_torn_tail(path: str, seq: int) -> None:
    with open(path, "ab") as fh:
        fh.write(b'{"type":"assistant/chunk","seq":%d,"ti' % seq)


def inject_zstd_torn_tail(path: str, seq: int) -> None:
    import zstandard

    rng = random.Random(seq)
    text = "".join(rng.choice(string.ascii_letters) for _ in range(300_000))
    frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(dumps(chunk_event(seq, text)) + b"\n")
    with open(path, "ab") as fh:
        fh.write(frame[: len(frame) // 2])


class _JsonlContract(BackendContract):
    compression: Literal["none", "zstd"] = "none"

    def new_location(self, tmp_path: Path) -> Path:
        return tmp_path / "jsonl-root"

    def make_backend(self, location: Path, cls: type[JsonlBackend] = JsonlBackend) -> JsonlBackend:
        return cls(str(location), compression=self.compression)

    def _log_path(self, location: Path, meta: Mapping[str, Any]) -> str:
        locator = self.make_backend(location)
        try:
            path = locator.locate(meta)
        finally:
            locator.close()
        assert path is not None
        return path

    def inject_torn_tail(self, location: Path, meta: Mapping[str, Any], next_seq: int) -> None:
        inject = inject_raw_torn_tail if self.compression == "none" else inject_zstd_torn_tail
        inject(self._log_path(location, meta), next_seq)

    def damage_header(self, location: Path, meta: Mapping[str, Any]) -> None:
        """Overwrite the log with a first line that is not a header (for zstd: not even a frame)."""
        Path(self._log_path(location, meta)).write_bytes(b'{"version":0,"id": damaged\n')


class TestJsonlNoneContract(_JsonlContract):
    kind = "jsonl-none"


class TestJsonlZstdContract(_JsonlContract):
    kind = "jsonl-zstd"
    compression = "zstd"
