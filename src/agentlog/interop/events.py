"""The transcript import's events (agentlog's own; the original has no importer).

Both are **ignorable**: a reader that does not know them (another implementation, an older agentlog)
skips them instead of refusing the log. :func:`agentlog.interop.transcripts.register_import_types`
registers them so; the importer (:mod:`.transcripts`) is their only writer.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

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
    """The source file of a complete import and its size as read: ``lines`` and ``bytes``.

    ``sessionId`` is the transcript's own session id (Claude Code's ``sessionId``, Codex's ``session_meta``
    id); a Claude Code sub-agent's file (``sidechain``) shares its parent's, which is how a later import of
    it finds the session imported from the parent transcript; ``agentId`` names the sub-agent.
    """

    source: Literal["claude-code", "codex"]
    path: str
    lines: int
    bytes: int
    consumed: NotRequired[int]
    """The bytes of whole lines imported (a torn last line left out): where ``--update`` resumes."""
    sha256: NotRequired[str]
    """The sha256 (hex) of those ``consumed`` bytes: ``--update`` proves the file was only appended to."""
    sessionId: NotRequired[str]
    sidechain: NotRequired[Literal[True]]
    agentId: NotRequired[str]
