"""Importing many transcripts at once: a directory tree, each file's format detected.

``~/.claude/projects/<project>/`` holds one file per session and, since sub-agents got files of their
own, ``<session>/subagents/agent-<id>.jsonl`` beside it; ``~/.codex/sessions/YYYY/MM/DD/`` holds
rollouts. :func:`import_tree` walks such a tree (``*.jsonl``, recursively, in sorted order), imports the
files that are not sub-agents' first, so that each sub-agent finds the session imported from its parent
transcript (:func:`~agentlog.interop.transcripts.import_transcript` links it), skips a transcript imported
before (its default id is its own session id) and a file that is no transcript, and reports a file it
cannot import without stopping the others: every import is all or nothing on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from ..errors import AgentlogError, ConversionError, TranscriptAlreadyImportedError
from ..persistence.coordinator import PersistenceCoordinator
from .transcripts import ImportReport, import_transcript

__all__ = ["FailedTranscript", "SkippedTranscript", "TreeImport", "detect_transcript_format", "import_tree"]

_PROBE_LINES: Final = 64
"""Records read to tell a file's format (the first decisive record wins)."""
_PROBE_BYTES: Final = 4 << 20
"""Bytes read at most to tell it (a first line larger than this is read no further)."""

_CLAUDE_TYPES: Final = frozenset(
    {"user", "assistant", "summary", "system", "file-history-snapshot", "queue-operation", "ai-title",
     "custom-title", "attachment", "progress"}
)
_CODEX_TYPES: Final = frozenset({"session_meta", "response_item", "turn_context", "event_msg", "compacted"})


def _records(path: Path) -> Iterator[Mapping[str, Any]]:
    """The first parsable records of ``path`` (unparsable lines are passed over: the import reports them)."""
    read = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle):
            read += len(raw)
            if number >= _PROBE_LINES or read > _PROBE_BYTES:
                return
            if not raw.strip():
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def _kind(record: Mapping[str, Any]) -> Literal["claude-code", "codex"] | None:
    rtype = record.get("type")
    if "payload" in record and rtype in _CODEX_TYPES:
        return "codex"
    if "record_type" in record or ("instructions" in record and "type" not in record):
        return "codex"  # the older rollout layout
    if rtype in _CLAUDE_TYPES and ("uuid" in record or "sessionId" in record or "leafUuid" in record):
        return "claude-code"
    return None


def _probe(path: Path) -> tuple[Literal["claude-code", "codex"] | None, bool]:
    """``(format, sidechain)``: the first decisive record's format, and whether the file's first conversation
    record is a sub-agent's (``isSidechain``)."""
    found: Literal["claude-code", "codex"] | None = None
    sidechain = False
    for record in _records(path):
        kind = _kind(record)
        if found is None:
            found = kind
        if record.get("type") in ("user", "assistant") and "isSidechain" in record:
            sidechain = record.get("isSidechain") is True
            if found is not None:
                break
        elif found == "codex":
            break
    return found, sidechain


def detect_transcript_format(path: str | os.PathLike[str]) -> Literal["claude-code", "codex"]:
    """The tool that wrote the transcript at ``path``, told from its first records.

    Claude Code's records carry a ``type`` of its own (``user``, ``assistant``, ``summary``…) with a
    ``uuid`` or ``sessionId``; Codex's are ``{timestamp, type, payload}`` lines (or the older layout's bare
    meta object and ``record_type`` lines). A file that is neither is :class:`~agentlog.errors.ConversionError`.
    """
    found, _sidechain = _probe(Path(path))
    if found is None:
        raise ConversionError(
            f"{os.fspath(path)}: cannot tell which tool wrote this file (no Claude Code or Codex record among its "
            "first lines); pass --from claude-code or --from codex"
        )
    return found


@dataclass(frozen=True)
class SkippedTranscript:
    """A file not imported, and why: imported before (``session_id`` names the stored session), or no
    transcript."""

    path: str
    reason: str
    session_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "sessionId": self.session_id}


@dataclass(frozen=True)
class FailedTranscript:
    """A file whose import failed (nothing of it was written), with the typed error."""

    path: str
    error: AgentlogError

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "error": {"code": self.error.code, "message": str(self.error)}}


@dataclass
class TreeImport:
    """What :func:`import_tree` did, file by file, in the order it went."""

    imported: list[ImportReport] = field(default_factory=list)
    skipped: list[SkippedTranscript] = field(default_factory=list)
    failed: list[FailedTranscript] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "imported": [report.to_json() for report in self.imported],
            "skipped": [item.to_json() for item in self.skipped],
            "failed": [item.to_json() for item in self.failed],
        }


def transcript_files(root: str | os.PathLike[str]) -> list[Path]:
    """The ``*.jsonl`` files under ``root`` (or ``root`` itself), sorted by path; symlinked directories are
    not followed (a tree is walked once)."""
    base = Path(root)
    if base.is_file():
        return [base]
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(base):
        subdirectories.sort()
        found.extend(Path(directory, name) for name in files if name.endswith(".jsonl"))
    return sorted(found)


def import_tree(
    coordinator: PersistenceCoordinator,
    root: str | os.PathLike[str],
    *,
    source: Literal["auto", "claude-code", "codex"] = "auto",
    progress: Callable[[int, int, str], None] | None = None,
) -> TreeImport:
    """Import every transcript under ``root`` into ``coordinator``'s store; see the module docstring.

    ``source`` ``"auto"`` detects each file's format (a ``*.jsonl`` file that is no transcript is skipped);
    a named format is imposed on every file. ``progress(done, total, path)`` is called after each file.
    Each file gets its default id (its own session id); one imported before is skipped, not refused.
    """
    files = transcript_files(root)
    probed = [(path, *_probe(path)) for path in files]
    # Parents before sub-agents: a sub-agent links to the session imported from its parent transcript.
    ordered = sorted(probed, key=lambda item: (item[2], str(item[0])))
    result = TreeImport()
    for done, (path, found, _sidechain) in enumerate(ordered, 1):
        kind = found if source == "auto" else source
        if kind is None:
            result.skipped.append(SkippedTranscript(str(path), "not a Claude Code or Codex transcript"))
        else:
            try:
                result.imported.append(import_transcript(coordinator, kind, path))
            except TranscriptAlreadyImportedError as err:
                result.skipped.append(SkippedTranscript(str(path), "imported before", err.session_id))
            except AgentlogError as err:
                result.failed.append(FailedTranscript(str(path), err))
        if progress is not None:
            progress(done, len(ordered), str(path))
    return result
