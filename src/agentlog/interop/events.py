"""The transcript import's events (agentlog's own; the original has no importer).

Both are **ignorable**: a reader that does not know them (another implementation, an older agentlog)
skips them instead of refusing the log. :func:`agentlog.interop.transcripts.register_import_types`
registers them so; the importer (:mod:`.transcripts`) is their only writer.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict

__all__ = ["IMPORT_DONE", "IMPORT_RECORD", "ImportDoneData", "ImportRecordData"]

IMPORT_RECORD: Final = "import/record"
"""An ignorable event holding one transcript record that has no agentlog counterpart, verbatim:
``{"source": "claude-code"|"codex", "line": n, "record": {...}}``."""

IMPORT_DONE: Final = "import/done"
"""The last event of a complete import (an ignorable record of the source file and the report's counts)."""


class ImportRecordData(TypedDict):
    """An unmapped transcript record, verbatim, with its 1-based line number in the source file."""

    source: Literal["claude-code", "codex"]
    line: int
    record: Any


class ImportDoneData(TypedDict):
    """The source file of a complete import and its size as read: ``lines`` and ``bytes``."""

    source: Literal["claude-code", "codex"]
    path: str
    lines: int
    bytes: int
