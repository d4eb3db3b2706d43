"""Import other tools' transcripts into agentlog sessions, and export sessions to other formats.

**Importers** (:func:`import_transcript`, ``--from claude-code`` and ``--from codex``) read a JSONL
transcript line by line and write a new session through a :class:`PersistenceCoordinator`'s
ownerless ``create``/``append`` in bounded batches, so a 1 GB file needs a batch of memory, not a
gigabyte. What maps becomes the ordinary turn/step/message vocabulary (a turn per user prompt, a step
per assistant message, ``tool/call`` per tool-call block, ``tool/result`` per result, closed turns), so
every reader (``show``, ``export``, ``verify``, ``at(seq)``) treats the import like a recorded session.
Records that have no counterpart are kept verbatim as ignorable :data:`IMPORT_RECORD` events (readers
that do not know the type skip them; nothing is lost), and the :class:`ImportReport` counts what did not
map (dropped parts such as images and encrypted reasoning, records kept as ``import/record``, tool
calls whose result the transcript lacks).

**Why two passes, and all or nothing.** A bad line (not JSON, a record of the wrong shape) must fail the
import with nothing committed, yet the events are written in bounded batches (memory stays a batch, not
the file), and the session's header (cwd, creation time), its request header (model, system prompt), which
side of a Claude Code file is its conversation and which branch is active (:mod:`._claude_tree`) are known
only once the whole file was read. The first pass therefore parses every line and learns them; the second,
deterministic over the same bytes, maps each record, checks every event with the rules ``Session.append``
applies (the core data and message-shape rules, and the JSON gate for verbatim records: orjson itself
refuses lone surrogates and non-finite numbers, so only those can still hold ``-0.0`` or integers beyond
2**53) and writes it through :meth:`~agentlog.persistence.coordinator.PersistenceCoordinator.stage`: the
session stays unpublished (a temporary JSONL file, a private SQLite staging database, an open PostgreSQL
transaction) until its last batch, ``import/done`` (:data:`IMPORT_DONE`), is written and the file is proven
unchanged; a refused line, or any failure before that, discards it. (A backend that cannot stage gets a
first pass that also maps and checks, so a bad line writes nothing there either.) Every pass reads one open
descriptor, only the bytes the file had when the import began, and hashes them: a transcript that changed
in between (a line appended, rewritten or cut by the tool still writing it) is refused with
:class:`~agentlog.errors.TranscriptError` ("changed while it was being imported"), never half-imported. A
crash (kill -9) leaves no listed session either: at most an unlisted ``*.tmp`` file of the staging, which
the next import removes (PostgreSQL rolls the transaction back); the same id can be imported again.
A path that is not a readable regular file (a directory, a FIFO) is refused before anything is read, and
running out of memory on a huge line is :class:`~agentlog.errors.ResourceExhaustedError`, not a bad line.

**Formats, and what is guessed.** Both formats are undocumented internals of their tools; the mappings
follow public descriptions of them (third-party notes and viewers), not a specification:

* Claude Code (``~/.claude/projects/<project>/<session>.jsonl``): one record per line with ``type``
  ``user`` / ``assistant`` (``message`` is an Anthropic Messages message; ``content`` a string or
  blocks ``text``, ``thinking``, ``tool_use``, ``tool_result``, ``image``), ``uuid``, ``parentUuid``,
  ``timestamp`` (ISO 8601), ``cwd``, ``sessionId``, ``isSidechain``; other types (``summary``,
  ``system``, ``file-history-snapshot``, ``queue-operation``, …) carry no conversation. Guessed: that
  one API message is written as several consecutive ``assistant`` records sharing ``message.id`` (they
  are merged into one message; thinking signatures go where :mod:`agentlog.interop.anthropic` keeps
  them, ``source.replayState.anthropic.signatures``); that sidechain records (``isSidechain: true``, a sub-agent's
  conversation) do not belong to the main conversation (kept as ``import/record``), and that a file of
  sidechain records only is a sub-agent's own (imported as its conversation; ``parent_session`` links
  it, else the session imported from the parent transcript named by the records' ``sessionId``); that
  the conversation Claude Code resumes is the ``parentUuid`` chain up from the last record (after a
  rewind the abandoned branch becomes a fork, see :mod:`._claude_tree`).
* Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): ``{"timestamp", "type",
  "payload"}`` lines with ``type`` ``session_meta`` (``id``, ``cwd``, ``instructions``…),
  ``response_item`` (an OpenAI Responses item: ``message`` with ``input_text``/``output_text`` parts,
  ``reasoning`` with ``summary`` texts, ``function_call``/``function_call_output``,
  ``custom_tool_call``/``custom_tool_call_output``, ``local_shell_call`` (answered by a
  ``function_call_output``), ``web_search_call``), ``turn_context`` (``model``…), ``event_msg`` and
  ``compacted`` (``message``, ``replacement_history``). The item, ``TokenUsage``/``TokenCount`` and
  ``CompactedItem`` shapes are formats from public descriptions (the openai/codex repository's
  ``codex-rs/protocol``). Guessed: a tool output is a string, ``{"content", "success"}`` or a list of
  ``input_text`` parts; a ``token_count`` follows the items of the response it counts (before or after
  its tool outputs) and belongs to the newest assistant message; the older layout (a bare meta object
  on line 1, bare response items after it, ``record_type`` state lines) is read too; ``developer``/
  ``system`` messages and ``event_msg`` lines (which repeat the response items for the UI) are kept as
  ``import/record``, not mapped. What maps only approximately (a web search's result, usage derived from
  totals, a compaction's checkpoint without the replacement history) is counted in
  :attr:`ImportReport.lossy` and listed in docs/interop.md.

**Exporters** (:func:`export_session`, ``--to openai-chat|openai-responses|anthropic|sharegpt``) render
a stored session's derived messages (with the system prompt and tools of its request header) through
the converters of :mod:`agentlog.interop` and write the document item by item to a text stream.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import stat
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal

import orjson

from ..errors import (
    AgentlogError,
    ConversionError,
    ResourceExhaustedError,
    StorageAccessError,
    TranscriptAlreadyImportedError,
    TranscriptError,
)
from ..kernel._gc import gc_paused
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    COMPACTION_END,
    COMPACTION_START,
    COMPACTION_SUMMARY,
    REQUEST_HEADER,
    SESSION_END_SEED,
    SESSION_TITLE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    EventTypes,
    event_types,
)
from ..kernel.jsoncodec import is_out_of_memory
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, snapshot_json, thaw
from ..kernel.messages import token_usage
from ..kernel.seeds import check_append_data
from ..kernel.titletext import DEFAULT_MAX_TITLE_BYTES, normalize_session_title
from ..llm.tokens import estimate_message
from ..persistence.backend import validate_session_id
from ..persistence.coordinator import PersistenceCoordinator, StagedSession
from ..persistence.paths import file_kind
from ._claude_tree import BranchPlan, ClaudeTree, ForkSpec
from .events import IMPORT_DONE, IMPORT_RECORD

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_DONE",
    "IMPORT_FORMATS",
    "IMPORT_RECORD",
    "ExportFormat",
    "ExportReport",
    "ImportFormat",
    "ImportReport",
    "export_session",
    "import_transcript",
    "register_import_types",
    "update_transcript",
]

ImportFormat = Literal["claude-code", "codex"]
ExportFormat = Literal["openai-chat", "openai-responses", "anthropic", "sharegpt", "claude-code", "codex"]
IMPORT_FORMATS: Final[tuple[str, ...]] = ("claude-code", "codex")
EXPORT_FORMATS: Final[tuple[str, ...]] = (
    "openai-chat",
    "openai-responses",
    "anthropic",
    "sharegpt",
    "claude-code",
    "codex",
)

DEFAULT_BATCH_BYTES = 8 * 1024 * 1024
"""Write a batch once the transcript bytes behind it reach this (memory stays a few batches' worth)."""
DEFAULT_BATCH_EVENTS = 8192

_FRAMING: Final = frozenset({TURN_START, TURN_END, STEP_START, STEP_END})
"""Events built here from counters alone (the check pass need not re-check them)."""
_SPACE: Final = frozenset(b" \t\r\n\f\v")
_MISSING_RESULT = "no result for this tool call in the imported transcript"


def register_import_types(registry: EventTypes = event_types) -> None:
    """Register the two import types as ignorable (idempotent), so appends and loads accept them."""
    for name in (IMPORT_RECORD, IMPORT_DONE):
        if not registry.is_ignorable(name):
            registry.register(name, ignorable=True)


register_import_types()


@dataclass
class ImportReport:
    """What an import did, and what it could not map (``to_json`` is the CLI's ``--json`` document)."""

    source: str
    path: str
    session_id: str | None = None
    lines: int = 0
    bytes: int = 0
    events: int = 0
    turns: int = 0
    messages: dict[str, int] = field(default_factory=dict)
    kept_records: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    synthesized_results: int = 0
    parent_session: str | None = None
    """The stored session this import was linked to as a subagent child (given, or found, see ``parent_note``)."""
    parent_note: str | None = None
    """For a sub-agent's own file: how its parent was (or was not) found from the file's own session id."""
    appended: int | None = None
    """For :func:`update_transcript`: the events appended (``None`` for an import)."""
    forks: list[str] = field(default_factory=list)
    """The forks made of the transcript's abandoned branches (Claude Code rewinds), in file order."""
    torn_last_line: int | None = None
    """The 1-based number of a last line cut inside its record (a transcript still being written): dropped."""
    torn_bytes: int = 0
    lossy: dict[str, int] = field(default_factory=dict)
    """Approximate mappings made, by kind (docs/interop.md lists each): imported, but not exactly."""

    def _count(self, table: dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "source": self.source,
            "path": self.path,
            "lines": self.lines,
            "bytes": self.bytes,
            "events": self.events,
            "turns": self.turns,
            "messages": dict(sorted(self.messages.items())),
            "keptRecords": dict(sorted(self.kept_records.items())),
            "dropped": dict(sorted(self.dropped.items())),
            "synthesizedToolResults": self.synthesized_results,
            "parentSession": self.parent_session,
            **({"parentNote": self.parent_note} if self.parent_note is not None else {}),
            **({"forks": list(self.forks)} if self.forks else {}),
            **({"appended": self.appended} if self.appended is not None else {}),
            **(
                {"tornLastLine": {"line": self.torn_last_line, "bytes": self.torn_bytes}}
                if self.torn_last_line is not None
                else {}
            ),
            **({"lossy": dict(sorted(self.lossy.items()))} if self.lossy else {}),
        }


# --------------------------------------------------------------------------- the event sink


class _Sink:
    """Numbers, times and checks the mapped events; in the write pass, appends them in batches.

    The checks are ``Session.append``'s (the JSON gate, then the core data / message-shape rules), so
    what the first pass accepts the store loads back. Events are plain wire dicts; the coordinator's
    ownerless ``append`` freezes and writes them.
    """

    def __init__(
        self,
        report: ImportReport,
        write: Callable[[list[dict[str, Any]]], None] | None,
        batch_bytes: int,
        batch_events: int,
    ) -> None:
        self.report = report
        self._write = write
        self._batch: list[dict[str, Any]] = []
        self._batch_bytes = batch_bytes
        self._batch_events = batch_events
        self._pending_bytes = 0
        self.seq = 0
        self.time = 0
        self.line = 0
        self.path = report.path
        self.stamp: Any = None
        self.retained: list[dict[str, Any]] | None = None  # the events kept for fork seeds while not None
        self.silent = False  # events are numbered and timed, not checked, counted or written
        self.held: list[tuple[dict[str, Any], int]] | None = None
        self.surface: _SurfaceTrack | None = None

    def emit(self, etype: str, data: Any, *, surface: bool = False, envelope: Mapping[str, Any] | None = None) -> None:
        """Number and time one event, then check/write it (or hold it, see :meth:`hold`).

        ``envelope`` carries a surface replace (``surfaceOp``, ``sourceEventSeqs``) for a checkpoint.
        """
        event: dict[str, Any] = {"type": etype, "seq": self.seq, "time": self.time, "data": data}
        if envelope is not None:
            event.update(envelope)
        elif surface:
            event["surfaceOp"] = "append"
            if self.surface is not None:
                self.surface.add(self.seq, data.get("message", data))
        elif etype in (IMPORT_RECORD, IMPORT_DONE):
            event["ignorable"] = True
        self.seq += 1
        if self.silent:
            return  # numbered only: an update replaying what is already stored
        self.report.events += 1
        if self.held is not None:
            self.held.append((event, self.line))
            return
        self._deliver(event, self.line)

    def _deliver(self, event: dict[str, Any], line: int) -> None:
        etype, data = event["type"], event["data"]
        try:
            # The append rules, in every pass that maps (the coordinator repeats the gate on write).
            # orjson never yields a lone surrogate or a non-finite float, and the mapped events hold only
            # strings, bounded counts and booleans: a verbatim record is what the gate must see (-0.0,
            # integers beyond 2**53).
            if etype not in _FRAMING:
                check_append_data(etype, snapshot_json(data) if etype == IMPORT_RECORD else data)
        except AgentlogError as err:
            raise TranscriptError(
                f"{self.path}:{line}: line {line} maps to an event agentlog refuses ({err})",
                path=self.path,
                line=line,
            ) from err
        if self.retained is not None:
            self.retained.append(dict(event))
        if self._write is not None:
            self._batch.append(event)
            if len(self._batch) >= self._batch_events:
                self.flush()

    def hold(self) -> None:
        """Keep the next events back (numbered and timed as usual) until :meth:`release`.

        A Codex rollout reports a response's token usage (``token_count``) after the response's items
        and often after its tool outputs; the held step's assistant message gets the usage before any
        of it is checked or written. A step is short (its tool results and a few records), so is the hold.
        """
        if self.held is None:
            self.held = []

    def release(self, usage: Any = None) -> None:
        """Write what was held, the usage (when known) on the held assistant message."""
        held, self.held = self.held, None
        if not held:
            return
        if usage is not None:
            for event, _line in held:
                if event["type"] == ASSISTANT_MESSAGE:
                    event["data"]["usage"] = usage
                    break
        for event, line in held:
            self._deliver(event, line)

    def account(self, nbytes: int) -> None:
        """The transcript bytes of a consumed line: writes the batch once enough input stands behind it."""
        self._pending_bytes += nbytes
        if self._pending_bytes >= self._batch_bytes:
            self.flush()

    def flush(self) -> None:
        self._pending_bytes = 0
        if self._write is not None and self._batch:
            batch, self._batch = self._batch, []
            self._write(batch)


# --------------------------------------------------------------------------- turn bookkeeping


class _Conversation:
    """The turn/step/tool-call protocol over the mapped messages (shared by both importers).

    A user prompt opens a turn unless the open turn has not had an assistant message yet (Codex writes
    its environment context and the prompt as two user messages); each assistant message is one step
    followed by one ``tool/call`` per tool-call block; a tool result pairs with its call. A turn is
    closed (``completed``) at the next prompt and at the end of the file; a call still unanswered then is
    given an error result (counted in the report) so the derived messages stay paired.
    """

    def __init__(self, sink: _Sink, provider: str, header_model: str | None, system: str | None) -> None:
        self.sink = sink
        self.report = sink.report
        self.provider = provider
        self.header_model = header_model
        self.system = system
        self.turn = 0
        self.step = 0
        self.in_turn = False
        self.in_step = False
        self.answered = False
        self.open_calls: dict[str, None] = {}
        self.header_written = False
        self.prompt_seqs: list[int] = []  # the human prompts a session title may cite (the title service's rule)

    def _write_header(self) -> None:
        self.header_written = True
        if self.header_model is None and self.system is None:
            return
        model = self.header_model or "unknown"
        header: dict[str, Any] = {"config": {"provider": self.provider, "model": model}}
        if self.system:
            header["system"] = self.system
        self.sink.emit(REQUEST_HEADER, {"header": header, "reason": "initial"})

    def _open_turn(self) -> None:
        if not self.header_written:
            self._write_header()
        self.turn += 1
        self.step = 0
        self.in_turn = True
        self.answered = False
        self.report.turns += 1
        self.sink.emit(TURN_START, {"turn": self.turn})

    def _end_step(self) -> None:
        if self.in_step:
            self.sink.emit(STEP_END, {"turn": self.turn, "step": self.step})
            self.in_step = False

    def close_turn(self) -> None:
        if not self.in_turn:
            return
        for call_id in list(self.open_calls):
            self.tool_result(call_id, [{"type": "text", "text": _MISSING_RESULT}], True, f"synth-{call_id}")
            self.report.synthesized_results += 1
        self._end_step()
        self.sink.emit(TURN_END, {"turn": self.turn, "reason": {"kind": "completed"}})
        self.in_turn = False

    def close_answered_turn(self) -> None:
        """Close the open turn when a new prompt would (it has an answer or an unanswered call)."""
        if self.in_turn and (self.answered or self.open_calls):
            self.close_turn()

    def user(self, content: list[Any], message_id: str) -> None:
        if not content:
            return
        self.close_answered_turn()
        if not self.in_turn:
            self._open_turn()
        message = {"content": content, "source": {"kind": "user"}, "role": "user", "id": message_id}  # original order
        if normalize_session_title("\n".join(b["text"] for b in content if b.get("type") == "text"), 1 << 30):
            self.prompt_seqs.append(self.sink.seq)
        self.sink.emit(USER_MESSAGE, message, surface=True)
        self.report._count(self.report.messages, "user")

    def assistant(self, blocks: list[Any], message_id: str, model: str, usage: Any, replay_state: Any = None) -> None:
        if not blocks:
            return
        if not self.in_turn:
            self._open_turn()
        self._end_step()
        self.step += 1
        self.in_step = True
        self.answered = True
        self.sink.emit(STEP_START, {"turn": self.turn, "step": self.step})
        source: dict[str, Any] = {"kind": "model", "provider": self.provider, "model": model or "unknown"}
        if replay_state is not None:
            source["replayState"] = replay_state
        data: dict[str, Any] = {
            "turn": self.turn,
            "step": self.step,
            "message": {"role": "assistant", "content": blocks, "source": source, "id": message_id},
        }
        if usage is not None:
            data["usage"] = usage
        self.sink.emit(ASSISTANT_MESSAGE, data, surface=True)
        self.report._count(self.report.messages, "assistant")
        for block in blocks:
            if block["type"] == "tool-call":
                call = {
                    "turn": self.turn,
                    "step": self.step,
                    "callId": block["id"],
                    "name": block["name"],
                    "arguments": block["arguments"],
                }
                self.sink.emit(TOOL_CALL, call)
                self.open_calls[block["id"]] = None

    def has_call(self, call_id: str) -> bool:
        return call_id in self.open_calls

    def tool_result(self, call_id: str, content: list[Any], is_error: bool | None, message_id: str) -> None:
        block: dict[str, Any] = {"type": "tool-result", "toolCallId": call_id, "content": content}
        if is_error is not None:
            block["isError"] = is_error
        message = {  # the original's createToolResultMessage key order
            "source": {"kind": "tool", "callId": call_id},
            "content": [block],
            "role": "user",
            "id": message_id,
        }
        self.open_calls.pop(call_id, None)
        self.sink.emit(TOOL_RESULT, {"turn": self.turn, "step": self.step, "message": message}, surface=True)
        self.report._count(self.report.messages, "tool")

    def title(self, text: str, source: Mapping[str, Any]) -> None:
        """A ``session/title`` outside any turn (as a late title completes): a user rename cites no prompt,
        a tool's own title the prompts it titles (none: not written, counted)."""
        cites = [] if source.get("kind") == "user" else list(self.prompt_seqs)
        if source.get("kind") != "user" and not cites:
            self.report._count(self.report.dropped, "title without a prompt")
            return
        self.sink.emit(SESSION_TITLE, {"title": text, "messageSeqs": cites, "source": dict(source)})

    def compact(
        self, compaction_id: str, summary: list[Any], content: list[Any], checkpoint_id: str, model: str
    ) -> None:
        """An imported compaction written as :mod:`agentlog.compaction` writes a region compaction (runtime
        spec §5.2): ``compaction/start``, ``compaction/summary`` (the summary, the shadowed seqs and their
        price), the checkpoint ``user/message`` replacing the whole surface so far (``sourceEventSeqs``:
        start, summary, every shadowed node) and ``compaction/end``. The shadowed events stay in the log,
        so ``at(seq)`` before the checkpoint shows them. The caller has checked that the surface is not
        empty and no tool call is open."""
        track = self.sink.surface
        assert track is not None and track.seqs
        turn = self.turn if self.in_turn else None
        shadowed = list(track.seqs)
        start_seq = self.sink.seq
        self.sink.emit(COMPACTION_START, {"compactionId": compaction_id, "turn": turn})
        summary_seq = self.sink.seq
        self.sink.emit(
            COMPACTION_SUMMARY,
            {
                "compactionId": compaction_id,
                "summary": summary,
                "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
                "shadowedSeqs": shadowed,
                "shadowedTokenCount": track.tokens,
                "provider": self.provider,
                "model": model,
            },
        )
        checkpoint = {
            "content": content,
            "source": {"kind": "plugin", "plugin": "compact", "compactionId": compaction_id},
            "role": "user",
            "id": checkpoint_id,
        }
        checkpoint_seq = self.sink.seq
        self.sink.emit(
            USER_MESSAGE,
            checkpoint,
            envelope={
                "surfaceOp": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
                "sourceEventSeqs": [start_seq, summary_seq, *shadowed],
            },
        )
        track.reset(checkpoint_seq, checkpoint)
        self.sink.emit(COMPACTION_END, {"compactionId": compaction_id, "turn": turn})
        self.report._count(self.report.messages, "checkpoint")

    def keep(self, source: str, record: Any, kind: str) -> None:
        """An unmapped record, verbatim, as an ignorable event."""
        self.sink.emit(IMPORT_RECORD, {"source": source, "line": self.sink.line, "record": record})
        self.report._count(self.report.kept_records, kind)


# --------------------------------------------------------------------------- reading lines


class _Snapshot:
    """The transcript as the import reads it: one open descriptor, the first ``size`` bytes, a digest.

    Both passes read through the same descriptor (a file renamed or replaced meanwhile does not matter)
    and only the bytes that were there when the import began; each pass hashes what it read, so the write
    pass can prove it wrote exactly what the check pass validated (:meth:`check_unchanged`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as err:
            raise TranscriptError(
                f"{path}: cannot read the transcript: {err.strerror}; pass the path of an existing transcript "
                "file (JSONL)",
                path=path,
            ) from err
        except OSError as err:
            raise _unreadable(path, err) from err
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StorageAccessError(
                    f"{path}: is {_kind(st.st_mode)}, not a transcript file; pass the path of one transcript "
                    "file (JSONL), e.g. ~/.claude/projects/<project>/<session>.jsonl or "
                    "~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl (a directory: `agentlog import DIR` or import_tree). "
                    "Nothing was imported",
                    code="STORAGE_NOT_A_FILE",
                    path=path,
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        self.size = st.st_size
        self.handle: IO[bytes] = os.fdopen(fd, "rb")
        self.digests: list[bytes] = []

    def lines(self) -> Iterator[bytes]:
        """The snapshot's lines from its start (the last one cut where the snapshot ends)."""
        handle = self.handle
        digest = hashlib.sha256()  # hardware-accelerated here: twice blake2b's speed over a big transcript
        whole: Any = None  # the digest before a last line without its newline (what --update resumes after)
        left = self.size
        try:
            handle.seek(0)
            while left > 0:
                raw = handle.readline(left)
                if not raw:
                    break  # the file shrank: check_unchanged reports it
                left -= len(raw)
                if not raw.endswith(b"\n"):
                    whole = (digest.copy(), self.size - left - len(raw))
                digest.update(raw)
                yield raw
        except OSError as err:
            raise _unreadable(self.path, err) from err
        finally:
            self.digests.append(digest.digest() + left.to_bytes(8, "little"))
            if whole is None:
                whole = (digest, self.size - left)
            self.whole_lines = (whole[0].hexdigest(), whole[1])

    whole_lines: tuple[str, int] = ("", 0)
    """The sha256 (hex) and size of the last pass's whole lines: every line but a last one without its
    newline (recorded in ``import/done`` so that ``--update`` can prove the file was only appended to)."""

    def changed_since_first_pass(self) -> bool:
        """Whether the file no longer holds what the first pass read: another size, or other bytes (read
        again and hashed; only asked when a later pass refuses a line the first pass parsed)."""
        if os.fstat(self.handle.fileno()).st_size != self.size or not self.digests:
            return True
        first = self.digests[0]
        for _line in self.lines():
            pass
        return self.digests.pop() != first

    def check_unchanged(self) -> None:
        """Refuse when the two passes read different bytes, or the file no longer has the snapshot's size."""
        size = os.fstat(self.handle.fileno()).st_size
        if size != self.size or len(set(self.digests)) != 1:
            raise self.changed()

    def changed(self, detail: str = "") -> TranscriptError:
        return TranscriptError(
            f"{self.path}: the transcript changed while it was being imported{detail}; nothing was imported. "
            "Import it again once the tool that writes it has stopped (or import a copy of the file)",
            path=self.path,
        )

    def close(self) -> None:
        self.handle.close()


def _kind(mode: int) -> str:
    """:func:`~agentlog.persistence.paths.file_kind` with its article, a FIFO spelled out for the user."""
    kind = file_kind(mode)
    return "a FIFO (named pipe)" if kind == "FIFO" else f"a {kind}"


def _unreadable(path: str, err: OSError) -> StorageAccessError:
    if isinstance(err, PermissionError):
        return StorageAccessError(
            f"{path}: cannot read the transcript: {err.strerror}; make it readable by this user (or import a "
            "readable copy). Nothing was imported",
            code="STORAGE_PERMISSION_DENIED",
            path=path,
        )
    return StorageAccessError(
        f"{path}: cannot read the transcript: {err.strerror or err}; check the file and its disk, then retry. "
        "Nothing was imported",
        code="STORAGE_IO",
        path=path,
    )


def _lines(snapshot: _Snapshot, sink: _Sink) -> Iterator[Any]:
    """Parse the snapshot line by line (blank lines skipped); a bad line is a :class:`TranscriptError`,
    a line that does not fit in memory a :class:`~agentlog.errors.ResourceExhaustedError`."""
    report = sink.report
    path = snapshot.path
    number = 0
    for raw in snapshot.lines():
        number += 1
        sink.line = number
        size = len(raw)
        report.lines = number
        report.bytes += size
        if raw[0] in _SPACE and raw.isspace():
            sink.account(size)
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            if is_out_of_memory(err):
                raise _out_of_memory(path, number, size) from None
            if not raw.endswith(b"\n"):
                # Only the last line can lack its newline: the tool writing the transcript is inside this
                # record. Dropped as agentlog's own JSONL reader drops a torn tail, and reported.
                report.torn_last_line, report.torn_bytes = number, size
                sink.account(size)
                continue
            raise TranscriptError(f"{path}:{number}: line {number} is not JSON: {err}", path=path, line=number) from err
        except MemoryError:
            raise _out_of_memory(path, number, size) from None
        if not isinstance(record, dict):
            raise TranscriptError(
                f"{path}:{number}: line {number} is not a JSON object (a transcript line is one record)",
                path=path,
                line=number,
            )
        yield record
        sink.account(size)


def _out_of_memory(path: str, line: int | None, size: int | None) -> ResourceExhaustedError:
    where = f"{path}: out of memory"
    if line is not None:
        where = f"{path}:{line}: out of memory while parsing line {line} ({size or 0:,} bytes)"
    return ResourceExhaustedError(
        f"{where} while importing the transcript; this is not a bad line, and nothing was imported. Retry with "
        "more memory available (a larger address-space limit)"
    )


def _shape_error(sink: _Sink, what: str) -> TranscriptError:
    return TranscriptError(f"{sink.path}:{sink.line}: line {sink.line} {what}", path=sink.path, line=sink.line)


def _epoch_ms(value: Any) -> int | None:
    """ISO 8601 (``2025-06-01T12:00:00.123Z``) to epoch milliseconds; ``None`` when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    ms = int(parsed.timestamp() * 1000)
    return ms if ms >= 0 else None


def _stamp(sink: _Sink, value: Any) -> None:
    """Events take their record's time (else the previous record's), never going back in time."""
    if value == sink.stamp:  # consecutive records often share a timestamp: parse it once
        return
    sink.stamp = value
    ms = _epoch_ms(value)
    if ms is not None and ms > sink.time:
        sink.time = ms


# --------------------------------------------------------------------------- Claude Code


_CLAUDE_CONVERSATION = frozenset({"user", "assistant"})
_CLAUDE_TITLES: Final = {"custom-title": "customTitle", "ai-title": "aiTitle", "summary": "summary"}
"""Claude Code's title records and their text field: the user's ``/rename``, its AI title, its summary."""


class _ClaudeImporter:
    source = "claude-code"
    provider = "anthropic"

    def __init__(
        self,
        sink: _Sink,
        conversation: _Conversation,
        sidechain: bool = False,
        plan: BranchPlan | None = None,
        only: frozenset[str] | None = None,
    ) -> None:
        self.sink = sink
        self.report = sink.report
        self.conv = conversation
        self.sidechain = sidechain  # a sub-agent's own file: its sidechain records are its conversation
        self.plan = plan  # the active branch's pass: abandoned records aside, fork seeds marked
        self.only = only  # a fork's pass: only these conversation records, nothing else
        self.marks: dict[str, int] = {}  # resume prompt uuid -> the seed length of its fork
        self.last_model: str | None = None  # the latest assistant record's model (a compaction's summarizer)
        self.seed_events: list[dict[str, Any]] = []  # the session's events up to the longest fork seed
        self._unmarked = set(plan.resume_points) if plan is not None else set()
        if self._unmarked:
            sink.retained = []
        sink.surface = _SurfaceTrack()  # what a compaction's checkpoint shadows
        self.pending: list[Any] | None = None
        self.pending_id = ""
        self.pending_api_id: Any = None
        self.pending_model = ""
        self.pending_usage: Any = None
        self.signatures: list[str | None] = []
        self.titles: dict[str, str] = {}  # record type -> the latest title of that kind

    def finish_pending(self) -> None:
        if self.pending is not None:
            blocks, self.pending = self.pending, None
            usage = _anthropic_usage(self.pending_usage) if self.pending_usage is not None else None
            self.pending_usage = None
            signatures, self.signatures = self.signatures, []
            # where agentlog.interop.anthropic keeps thinking signatures (one per reasoning block, in order)
            state = {"anthropic": {"signatures": signatures}} if any(signatures) else None
            self.conv.assistant(blocks, self.pending_id, self.pending_model, usage, state)

    def record(self, record: dict[str, Any]) -> None:
        rtype = record.get("type")
        _stamp(self.sink, record.get("timestamp"))
        ours = rtype in _CLAUDE_CONVERSATION and (record.get("isSidechain") is True) == self.sidechain
        if self.only is not None and (not ours or record.get("uuid") not in self.only):
            return  # a fork's pass maps its branch only; the session holds everything else
        if ours and self.plan is not None and not self._branch_point(record, str(rtype)):
            return
        if rtype in _CLAUDE_TITLES:
            text = record.get(_CLAUDE_TITLES[rtype])
            title = normalize_session_title(text, DEFAULT_MAX_TITLE_BYTES) if isinstance(text, str) else ""
            if title:
                self.titles[rtype] = title
            else:
                self.report._count(self.report.dropped, f"{rtype} without text")
            return
        if rtype not in _CLAUDE_CONVERSATION or (record.get("isSidechain") is True) != self.sidechain:
            side = "sidechain" if not self.sidechain else "main chain"
            kind = f"{rtype}" if rtype not in _CLAUDE_CONVERSATION else f"{rtype} ({side})"
            self.conv.keep(self.source, record, str(kind))
            return
        message = record.get("message")
        if not isinstance(message, dict):
            raise _shape_error(self.sink, f'is a "{rtype}" record without a "message" object')
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise _shape_error(self.sink, f'is a "{rtype}" record whose message.content is not a string or a list')
        record_id = record.get("uuid")
        if rtype == "assistant":
            self.assistant(message, content, record_id)
        elif record.get("isCompactSummary") is True:
            self.compaction(record, content)
        else:
            self.finish_pending()
            self.user(content, record_id)

    def compaction(self, record: dict[str, Any], content: str | list[Any]) -> None:
        """Claude Code's compaction summary (after its ``compact_boundary``) as agentlog's own compaction:
        the surface so far is shadowed by a checkpoint holding the summary (:meth:`_Conversation.compact`).
        The turn before it is closed first, as a new prompt closes it (a call it left unanswered gets the
        synthesized error result)."""
        self.finish_pending()
        self.conv.close_answered_turn()
        texts = (
            [content]
            if isinstance(content, str)
            else [block["text"] for block in content if isinstance(block, dict) and isinstance(block.get("text"), str)]
        )
        summary = "\n\n".join(text for text in texts if text)
        track = self.sink.surface
        if not summary or track is None or not track.seqs:
            self.conv.keep(self.source, record, "user (compact summary)")
            return
        import uuid

        key = f"claude-code:{record.get('sessionId')}:{record.get('uuid') or self.sink.line}"
        compaction_id = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        blocks = [{"type": "text", "text": summary}]
        checkpoint_id = str(record.get("uuid") or f"claude-line-{self.sink.line}")
        model = self.last_model or self.conv.header_model or "unknown"
        self.conv.compact(compaction_id, blocks, blocks, checkpoint_id, model)
        self.report._count(self.report.lossy, LOSSY_CLAUDE_PRICE)

    def assistant(self, message: dict[str, Any], content: str | list[Any], record_id: Any) -> None:
        api_id = message.get("id")
        if self.pending is None or api_id is None or api_id != self.pending_api_id:
            self.finish_pending()
            self.pending = []
            self.pending_api_id = api_id
            self.pending_id = str(api_id or record_id or f"claude-line-{self.sink.line}")
        self.pending_model = str(message.get("model") or "unknown")
        self.last_model = self.pending_model
        usage = message.get("usage")
        if isinstance(usage, dict):
            self.pending_usage = usage  # converted once, when the message is complete
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                raise _shape_error(self.sink, f"has a content block at index {index} that is not an object")
            btype = block.get("type")
            if btype == "text" and isinstance(block.get("text"), str):
                self.pending.append({"type": "text", "text": block["text"]})
            elif btype == "thinking" and isinstance(block.get("thinking"), str):
                self.pending.append({"type": "reasoning", "text": block["thinking"]})
                signature = block.get("signature")
                signed = isinstance(signature, str) and bool(signature)
                self.signatures.append(signature if signed else None)
                if not signed:
                    self.report._count(self.report.lossy, LOSSY_CLAUDE_UNSIGNED)
            elif btype == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
                arguments = orjson.dumps(block.get("input", {})).decode()
                self.pending.append(
                    {"type": "tool-call", "id": block["id"], "name": block["name"], "arguments": arguments}
                )
            else:
                self.report._count(self.report.dropped, f"assistant block {btype}")

    def user(self, content: str | list[Any], record_id: Any) -> None:
        base = str(record_id or f"claude-line-{self.sink.line}")
        if isinstance(content, str):
            self.conv.user([{"type": "text", "text": content}], base)
            return
        texts: list[Any] = []
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                raise _shape_error(self.sink, f"has a content block at index {index} that is not an object")
            btype = block.get("type")
            if btype == "tool_result":
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str) or not self.conv.has_call(call_id):
                    self.report._count(self.report.dropped, "tool_result without its tool_use")
                    continue
                self.conv.tool_result(
                    call_id, self._result_parts(block.get("content")), _is_error(block), f"{base}-{index}"
                )
            elif btype == "text" and isinstance(block.get("text"), str):
                texts.append({"type": "text", "text": block["text"]})
            else:
                self.report._count(self.report.dropped, f"user block {btype}")
        if texts:
            self.conv.user(texts, base)

    def _result_parts(self, value: Any) -> list[Any]:
        if isinstance(value, str):
            return [{"type": "text", "text": value}]
        parts: list[Any] = []
        if isinstance(value, list):
            for part in value:
                if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                else:
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    self.report._count(self.report.dropped, f"tool_result part {kind}")
        return parts

    def finish(self) -> None:
        self.finish_pending()

    def _branch_point(self, record: dict[str, Any], rtype: str) -> bool:
        """Whether the active branch's pass maps ``record`` (else it is kept aside); marks fork seeds."""
        assert self.plan is not None
        uuid = record.get("uuid")
        if uuid in self.plan.forked:
            return False  # its fork maps it
        if uuid in self.plan.aside:
            self.conv.keep(self.source, record, f"{rtype} (abandoned branch)")
            return False
        if uuid in self._unmarked:
            self._unmarked.discard(uuid)
            self.finish_pending()
            self.conv.close_answered_turn()
            if not self.conv.in_turn:  # a fork seed must end at a closed turn
                self.marks[uuid] = self.sink.seq
            if not self._unmarked:
                self.sink.retained = (self.sink.retained or [])[: max(self.marks.values(), default=0)]
                self.seed_events = self.sink.retained
                self.sink.retained = None
        return True

    def finish_titles(self) -> None:
        """The title Claude Code shows: the user's rename, else its AI title, else the summary (latest each)."""
        for rtype in ("custom-title", "ai-title", "summary"):
            if rtype in self.titles:
                kind = {"kind": "user"} if rtype == "custom-title" else {"kind": "provider", "provider": "claude-code"}
                self.conv.title(self.titles[rtype], kind)
                return


def _is_error(block: Mapping[str, Any]) -> bool | None:
    value = block.get("is_error")
    return value if isinstance(value, bool) else None


def _anthropic_usage(usage: Mapping[str, Any]) -> Any:
    def count(key: str) -> int | None:
        value = usage.get(key)
        return value if type(value) is int and 0 <= value <= MAX_SAFE_INTEGER else None

    given, taken = count("input_tokens"), count("output_tokens")
    if given is None or taken is None:
        return None
    return token_usage(
        given,
        taken,
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
    )


# --------------------------------------------------------------------------- Codex


_CODEX_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "web_search_call"})
_CODEX_RESULT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
_CODEX_ITEMS = _CODEX_CALL_ITEMS | _CODEX_RESULT_ITEMS | {"message", "reasoning"}
_CODEX_OUTPUT_PARTS = frozenset({"input_text", "output_text", "text"})
_WEB_SEARCH_RESULT = (
    "web search {status}: the search ran on the model provider's side; its results are not in the Codex "
    "transcript (the model's next message is what it made of them)"
)

LOSSY_WEB_SEARCH = "web_search_call: placeholder result (the transcript holds none)"
LOSSY_DERIVED_USAGE = "token_count: usage derived from total_token_usage (no last_token_usage)"
LOSSY_UNKNOWN_USAGE = "assistant message: usage unknown (no token_count for it)"
LOSSY_SUMMARY_ONLY = "compacted without replacement_history: the checkpoint holds the summary only"
LOSSY_CLAUDE_PRICE = "compact summary: shadowed price estimated"
LOSSY_CLAUDE_UNSIGNED = "thinking without a signature"
LOSSY_OPEN_CALLS = "compacted while tool calls were unanswered: kept as import/record, surface not replaced"


class _SurfaceTrack:
    """The surface since the last checkpoint: its node seqs and their token price (the meter's heuristic).

    A Codex ``compacted`` record replaces the whole surface before it, so the import needs the seqs the
    replace shadows (``sourceEventSeqs`` must name each) and the price ``compaction/summary`` records.
    Eight bytes a node; cleared at each checkpoint.
    """

    def __init__(self) -> None:
        self.seqs = array("q")
        self.tokens = 0

    def add(self, seq: int, message: Mapping[str, Any]) -> None:
        self.seqs.append(seq)
        self.tokens += estimate_message(message)

    def reset(self, seq: int, message: Mapping[str, Any]) -> None:
        self.seqs = array("q")
        self.tokens = 0
        self.add(seq, message)


class _CodexImporter:
    """Codex rollout records → the conversation (formats from public descriptions; see the module docstring).

    The item shapes follow the public ``codex-rs/protocol`` descriptions of ``ResponseItem`` (``message``,
    ``reasoning``, ``function_call``/``function_call_output``, ``custom_tool_call``/``custom_tool_call_output``,
    ``local_shell_call {call_id, status, action: {type: "exec", command, timeout_ms, working_directory, env,
    user}}``, ``web_search_call {status, action: {type: "search", query} | open_page | find_in_page}``),
    ``RolloutItem::Compacted {message, replacement_history?}`` and ``EventMsg::TokenCount`` (``{info: {
    total_token_usage, last_token_usage, model_context_window} | null}``, older: a bare ``TokenUsage``).
    """

    source = "codex"
    provider = "openai"

    def __init__(self, sink: _Sink, conversation: _Conversation, model: str | None) -> None:
        self.sink = sink
        self.report = sink.report
        self.conv = conversation
        self.model = model or "unknown"
        self.session = ""  # the rollout's own id (its meta), for stable compaction ids
        self.pending: list[Any] | None = None
        self.pending_id = ""
        self.pending_items: dict[str, Any] = {}  # call id -> the Codex item kind of a non-function call
        self.searches: list[tuple[str, Any]] = []  # web searches of the pending message: (call id, status)
        self.awaiting_usage = False  # the newest assistant message is held until its token_count
        self.usage_seen = False  # a token_count came (a rollout without any says nothing of usage)
        self.unknown_usage = 0
        self.previous_total: Mapping[str, Any] | None = None
        sink.surface = _SurfaceTrack()

    # -- the pending assistant message and its usage

    def finish_pending(self, usage: Any = None) -> None:
        if self.pending is None:
            return
        blocks, self.pending = self.pending, None
        items, self.pending_items = self.pending_items, {}
        state = {"codex": {"items": items}} if items else None
        if usage is None:
            self.sink.hold()  # its token_count usually follows the step's tool outputs
            self.awaiting_usage = True
        self.conv.assistant(blocks, self.pending_id, self.model, usage, state)
        searches, self.searches = self.searches, []
        for call_id, status in searches:
            text = _WEB_SEARCH_RESULT.format(status=status if isinstance(status, str) else "call")
            failed = status in ("failed", "incomplete")
            self.conv.tool_result(
                call_id, [{"type": "text", "text": text}], True if failed else None, f"{call_id}-result"
            )
            self.report._count(self.report.lossy, LOSSY_WEB_SEARCH)

    def settle(self, usage: Any = None) -> None:
        """The step is over: its message (and what was held after it) is written, with ``usage`` if known."""
        self.finish_pending(usage)
        if self.awaiting_usage:
            self.awaiting_usage = False
            if usage is None:
                self.unknown_usage += 1
            self.sink.release(usage)

    def _assistant_blocks(self, item: Mapping[str, Any]) -> list[Any]:
        if self.pending is None:
            self.settle()  # a new response began without a token_count for the previous one
            self.pending = []
            self.pending_id = str(item.get("id") or f"codex-line-{self.sink.line}")
        return self.pending

    # -- records

    def record(self, record: dict[str, Any]) -> None:
        _stamp(self.sink, record.get("timestamp"))
        rtype = record.get("type")
        payload = record.get("payload")
        if rtype == "response_item" or ("payload" not in record and rtype in _CODEX_ITEMS):
            item = payload if rtype == "response_item" else record
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise _shape_error(self.sink, "is a response_item whose payload is not an item object")
            self.item(record, item)
            return
        if rtype == "compacted":
            if not isinstance(payload, dict):
                raise _shape_error(self.sink, "is a compacted record whose payload is not an object")
            self.compacted(record, payload)
            return
        if rtype == "turn_context" and isinstance(payload, dict) and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        meta = payload if rtype == "session_meta" else record if "payload" not in record and rtype is None else None
        if not self.session and isinstance(meta, dict) and isinstance(meta.get("id"), str):
            self.session = meta["id"]
        kind = str(rtype) if rtype is not None else ("record_type" if "record_type" in record else "session meta")
        if rtype == "event_msg" and isinstance(payload, dict):
            kind = f"event_msg {payload.get('type')}"
            if payload.get("type") == "token_count":
                self.token_count(payload)
        self.conv.keep(self.source, record, kind)

    def token_count(self, payload: Mapping[str, Any]) -> None:
        """Usage of the response just finished, onto its assistant message (the record is kept as well)."""
        self.usage_seen = True
        usage = self._usage(payload)
        if usage is None:
            return  # ``info: null`` (no response yet), a repeat, or counts agentlog cannot hold
        if self.pending is not None or self.awaiting_usage:
            self.settle(usage)

    def _usage(self, payload: Mapping[str, Any]) -> Any:
        if "info" not in payload:  # the older event: the response's TokenUsage itself
            return _openai_usage(payload)
        info = payload.get("info")
        if not isinstance(info, dict):
            return None
        total, last = info.get("total_token_usage"), info.get("last_token_usage")
        previous, self.previous_total = self.previous_total, total if isinstance(total, dict) else None
        if isinstance(total, dict) and isinstance(previous, dict) and total == previous:
            return None  # the same totals again: a repeat for the same response
        if isinstance(last, dict) and last:
            return _openai_usage(last)
        if not isinstance(total, dict):
            return None
        delta = {key: value - (previous or {}).get(key, 0) for key, value in total.items() if type(value) is int}
        usage = _openai_usage(delta)
        if usage is not None:
            self.report._count(self.report.lossy, LOSSY_DERIVED_USAGE)
        return usage

    def item(self, record: dict[str, Any], item: dict[str, Any]) -> None:
        itype = item["type"]
        if itype == "message":
            self.message(record, item)
        elif itype == "reasoning":
            blocks = self._assistant_blocks(item)
            texts = [part.get("text") for part in item.get("summary") or () if isinstance(part, dict)]
            texts += [part.get("text") for part in item.get("content") or () if isinstance(part, dict)]
            text = "\n\n".join(t for t in texts if isinstance(t, str))
            if text:
                blocks.append({"type": "reasoning", "text": text})
            if item.get("encrypted_content"):
                self.report._count(self.report.dropped, "reasoning.encrypted_content")
        elif itype in _CODEX_CALL_ITEMS:
            self.call(itype, item)
        elif itype in _CODEX_RESULT_ITEMS:
            self.finish_pending()
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not self.conv.has_call(call_id):
                self.report._count(self.report.dropped, f"{itype} without its call")
                self.conv.keep(self.source, record, itype)
                return
            parts, is_error = self._output(item.get("output"))
            if parts is None:
                raise _shape_error(
                    self.sink, f"is a {itype} whose output is neither a string, {{content}} nor a list of parts"
                )
            self.conv.tool_result(call_id, parts, is_error, f"codex-line-{self.sink.line}")
        else:
            self.settle()
            self.conv.keep(self.source, record, f"response_item {itype}")

    def call(self, itype: str, item: Mapping[str, Any]) -> None:
        """A tool call of any of the four kinds; the three that are not ``function_call`` keep their kind
        (and ``status``) in the message's ``source.replayState.codex.items``, by call id."""
        call_id: Any = item.get("call_id")
        if itype == "function_call":
            name, arguments = item.get("name"), item.get("arguments")
        elif itype == "custom_tool_call":
            name, arguments = item.get("name"), item.get("input")
        else:
            action = item.get("action")
            if not isinstance(action, dict):
                raise _shape_error(self.sink, f"is a {itype} without an action object")
            name = "shell" if itype == "local_shell_call" else "web_search"
            arguments = orjson.dumps(action).decode()
            if call_id is None:  # a local_shell_call from the Chat Completions path, a web search: no call_id
                call_id = item.get("id") or f"codex-line-{self.sink.line}"
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
            what = "input" if itype == "custom_tool_call" else "arguments"
            raise _shape_error(self.sink, f"is a {itype} without a string call_id, name and {what}")
        blocks = self._assistant_blocks(item)
        blocks.append({"type": "tool-call", "id": call_id, "name": name, "arguments": arguments})
        if itype != "function_call":
            kept: dict[str, Any] = {"type": itype}
            if "status" in item:
                kept["status"] = item["status"]
            self.pending_items[call_id] = kept
        if itype == "web_search_call":
            self.searches.append((call_id, item.get("status")))

    def _output(self, value: Any) -> tuple[list[Any] | None, bool | None]:
        """A tool output: a string, ``{content, success}`` (older), or a list of ``input_text`` /
        ``input_image`` parts (newer; images are dropped and counted)."""
        if isinstance(value, str):
            return [{"type": "text", "text": value}], None
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            success = value.get("success")
            return [{"type": "text", "text": value["content"]}], (not success) if isinstance(success, bool) else None
        if isinstance(value, list):
            parts: list[Any] = []
            for part in value:
                ptype = part.get("type") if isinstance(part, dict) else None
                if ptype in _CODEX_OUTPUT_PARTS and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                else:
                    self.report._count(self.report.dropped, f"tool output part {ptype}")
            return parts, None
        return None, None

    def message(self, record: dict[str, Any], item: dict[str, Any]) -> None:
        role, content = item.get("role"), item.get("content")
        if not isinstance(content, list):
            raise _shape_error(self.sink, "is a message item whose content is not a list")
        if role not in ("user", "assistant"):
            self.settle()
            self.conv.keep(self.source, record, f"message {role}")
            return
        texts = self._texts(role, content)
        if role == "assistant":
            self._assistant_blocks(item).extend(texts)
            return
        self.settle()
        self.conv.user(texts, str(item.get("id") or f"codex-line-{self.sink.line}"))

    def _texts(self, role: Any, content: list[Any]) -> list[Any]:
        texts: list[Any] = []
        for part in content:
            ptype = part.get("type") if isinstance(part, dict) else None
            if ptype in ("input_text", "output_text") and isinstance(part.get("text"), str):
                texts.append({"type": "text", "text": part["text"]})
            else:
                self.report._count(self.report.dropped, f"{role} part {ptype}")
        return texts

    # -- compaction

    def compacted(self, record: dict[str, Any], payload: Mapping[str, Any]) -> None:
        """A Codex compaction as agentlog's own: the surface so far is shadowed by one checkpoint.

        Written as :mod:`agentlog.compaction` writes a region compaction (runtime spec §5.2):
        ``compaction/start``, ``compaction/summary`` (the summary, the shadowed seqs and their price),
        the checkpoint ``user/message`` replacing the whole surface (``sourceEventSeqs``: start, summary,
        every shadowed node) and ``compaction/end``. The checkpoint holds the history Codex continued
        from: the texts of ``replacement_history`` in order (the kept user messages, then the summary
        message), or the summary (``message``) alone when the record has no ``replacement_history``.
        The pre-compaction events stay in the log, so ``at(seq)`` before the checkpoint shows them.
        """
        self.settle()
        self.conv.keep(self.source, record, "compacted")
        message = payload.get("message")
        summary = message if isinstance(message, str) else ""
        content = self._replacement(payload.get("replacement_history"))
        if content is None:
            content = [{"type": "text", "text": summary}] if summary else []
            if content:
                self.report._count(self.report.lossy, LOSSY_SUMMARY_ONLY)
        track = self.sink.surface
        if not content or track is None or not track.seqs:
            return  # nothing to condense into, or nothing to shadow: the record alone tells it
        if self.conv.open_calls:
            self.report._count(self.report.lossy, LOSSY_OPEN_CALLS)
            return
        import uuid

        compaction_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"codex-rollout:{self.session}:line:{self.sink.line}"))
        summary_blocks = [{"type": "text", "text": summary}] if summary else content
        self.conv.compact(compaction_id, summary_blocks, content, f"codex-line-{self.sink.line}-checkpoint", self.model)

    def _replacement(self, history: Any) -> list[Any] | None:
        """The texts of a ``replacement_history`` (``None`` without one); what has no text is counted."""
        if not isinstance(history, list):
            return None
        content: list[Any] = []
        for entry in history:
            etype = entry.get("type") if isinstance(entry, dict) else None
            role = entry.get("role") if isinstance(entry, dict) else None
            if etype == "message" and role in ("user", "assistant") and isinstance(entry.get("content"), list):
                content.extend(self._texts(role, entry["content"]))
            else:
                what = f"message {role}" if etype == "message" else str(etype)
                self.report._count(self.report.lossy, f"compacted.replacement_history {what}: not in the checkpoint")
        return content

    def finish(self) -> None:
        self.settle()
        if self.unknown_usage and self.usage_seen:
            self.report._count(self.report.lossy, LOSSY_UNKNOWN_USAGE, self.unknown_usage)


def _openai_usage(usage: Mapping[str, Any]) -> Any:
    """A Codex ``TokenUsage`` (OpenAI counts: input includes the cached input, output the reasoning) as
    agentlog's disjoint ``TokenUsage`` (as :func:`agentlog.llm.openai_compat.map_usage` maps the wire)."""

    def count(key: str) -> int | None:
        value = usage.get(key)
        return value if type(value) is int and 0 <= value <= MAX_SAFE_INTEGER else None

    given, taken = count("input_tokens"), count("output_tokens")
    if given is None or taken is None:
        return None
    cached = count("cached_input_tokens")
    return token_usage(
        max(given - (cached or 0), 0),
        taken,
        cache_read_tokens=cached,
        reasoning_tokens=count("reasoning_output_tokens"),
    )


# --------------------------------------------------------------------------- the import


@dataclass
class _Learned:
    """What the check pass learns for the header and the request header."""

    cwd: str | None = None
    created_at: int | None = None
    model: str | None = None
    system: str | None = None
    main_records: int = 0
    sidechain_records: int = 0
    source_session: str | None = None  # the transcript's own session id (a sub-agent file's: its parent's)
    agent_id: str | None = None  # a Claude Code sub-agent file's ``agentId``
    tree: ClaudeTree = field(default_factory=ClaudeTree)

    @property
    def sidechain(self) -> bool:
        """A Claude Code sub-agent's own file: conversation records, every one of them a sidechain's."""
        return self.sidechain_records > 0 and self.main_records == 0


def _learn(source: str, record: Mapping[str, Any], learned: _Learned) -> None:
    if source == "claude-code":
        learned.tree.add(record, record.get("type") in _CLAUDE_CONVERSATION)
        if record.get("type") in _CLAUDE_CONVERSATION:
            if record.get("isSidechain") is True:
                learned.sidechain_records += 1
                if learned.agent_id is None and isinstance(record.get("agentId"), str) and record["agentId"]:
                    learned.agent_id = record["agentId"]
            else:
                learned.main_records += 1
            if learned.source_session is None and isinstance(record.get("sessionId"), str) and record["sessionId"]:
                learned.source_session = record["sessionId"]
        if learned.cwd is None and isinstance(record.get("cwd"), str):
            learned.cwd = record["cwd"]
        if learned.model is None and record.get("type") == "assistant":
            message = record.get("message")
            if isinstance(message, dict) and isinstance(message.get("model"), str):
                learned.model = message["model"]
    else:
        payload = record.get("payload")
        meta = payload if record.get("type") == "session_meta" else None
        if meta is None and "payload" not in record and "instructions" in record and "type" not in record:
            meta = record  # the older layout's first line
        if isinstance(meta, dict):
            if learned.cwd is None and isinstance(meta.get("cwd"), str):
                learned.cwd = meta["cwd"]
            if learned.system is None and isinstance(meta.get("instructions"), str) and meta["instructions"]:
                learned.system = meta["instructions"]
            if learned.source_session is None and isinstance(meta.get("id"), str) and meta["id"]:
                learned.source_session = meta["id"]
        if learned.model is None and record.get("type") == "turn_context" and isinstance(payload, dict):
            if isinstance(payload.get("model"), str):
                learned.model = payload["model"]
    if learned.created_at is None:
        learned.created_at = _epoch_ms(record.get("timestamp"))


def _run(
    source: str,
    snapshot: _Snapshot,
    report: ImportReport,
    learned: _Learned,
    write: Callable[[list[dict[str, Any]]], None] | None,
    batch_bytes: int,
    batch_events: int,
    *,
    learn: bool = True,
    plan: BranchPlan | None = None,
) -> _ClaudeImporter | _CodexImporter:
    """One pass over the snapshot: map, check (``write`` is ``None``) or write, and end with ``import/done``.

    The first check pass maps the file as one chain (every record checked) and learns the header's facts
    and the Claude Code tree; with a ``plan`` the pass maps the active branch only (abandoned records kept
    aside) and notes where each fork's seed ends (the importer's ``marks``, with the events it retained).
    """
    sink = _Sink(report, write, batch_bytes, batch_events)
    sink.time = learned.created_at or 0
    provider = "anthropic" if source == "claude-code" else "openai"
    conversation = _Conversation(sink, provider, learned.model, learned.system)
    importer: _ClaudeImporter | _CodexImporter
    if source == "claude-code":
        importer = _ClaudeImporter(sink, conversation, sidechain=not learn and learned.sidechain, plan=plan)
    else:
        importer = _CodexImporter(sink, conversation, learned.model)
    # Parsed JSON and the events built from it form no cycles: reference counting frees every batch,
    # and the cycle collector's allocation-triggered passes would only re-walk them (see kernel._gc).
    with gc_paused():
        for record in _lines(snapshot, sink):
            if learn:
                _learn(source, record, learned)
            importer.record(record)
        importer.finish()
        conversation.close_turn()
        if isinstance(importer, _ClaudeImporter):
            importer.finish_titles()
        sink.emit(IMPORT_DONE, _done(source, snapshot, report, learned))
        sink.flush()
    return importer


def _done(source: str, snapshot: _Snapshot, report: ImportReport, learned: _Learned) -> dict[str, Any]:
    done: dict[str, Any] = {"source": source, "path": snapshot.path, "lines": report.lines, "bytes": report.bytes}
    digest, consumed = snapshot.whole_lines
    done["consumed"] = consumed
    done["sha256"] = digest
    if learned.source_session is not None:
        done["sessionId"] = learned.source_session
    if source == "claude-code" and learned.sidechain:
        done["sidechain"] = True
        if learned.agent_id is not None:
            done["agentId"] = learned.agent_id
    return done


def _run_fork(
    snapshot: _Snapshot,
    report: ImportReport,
    learned: _Learned,
    spec: ForkSpec,
    seed: list[dict[str, Any]],
    write: Callable[[list[dict[str, Any]]], None] | None,
    batch_bytes: int,
    batch_events: int,
) -> None:
    """One pass mapping an abandoned branch's records as the live part of a fork seeded with ``seed``
    (the session's events up to the turn boundary; ``session/end-seed`` follows them)."""
    sink = _Sink(report, write, batch_bytes, batch_events)
    sink.seq = len(seed) + 1
    sink.time = seed[-1]["time"] if seed else (learned.created_at or 0)
    conversation = _Conversation(sink, "anthropic", learned.model, learned.system)
    conversation.header_written = True  # the seed holds the request header
    conversation.turn = sum(1 for event in seed if event["type"] == TURN_START)
    importer = _ClaudeImporter(sink, conversation, sidechain=learned.sidechain, only=spec.members)
    with gc_paused():
        for record in _lines(snapshot, sink):
            importer.record(record)
        importer.finish()
        conversation.close_turn()
        done = _done("claude-code", snapshot, report, learned)
        done["branch"] = True
        sink.emit(IMPORT_DONE, done)
        sink.flush()


def import_transcript(
    coordinator: PersistenceCoordinator,
    source: ImportFormat | str,
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_events: int = DEFAULT_BATCH_EVENTS,
    now: Callable[[], int] | None = None,
    progress: Callable[[int], None] | None = None,
    parent_session: str | None = None,
) -> ImportReport:
    """Import one transcript file into a new session of ``coordinator``'s store; return the report.

    ``parent_session`` links the import as a subagent child of that stored session (its header gets
    ``parentSession``, ``origin: "subagent"`` and ``delegationDepth`` = the parent's + 1); a parent the
    store does not have is :class:`~agentlog.errors.SessionNotFoundError` before anything is read or
    written. A Claude Code sub-agent's own file (every conversation record a sidechain's) is imported as
    that sub-agent's conversation; in a main file the sidechain records stay ``import/record``. Without
    ``parent_session`` such a file is linked to the one stored session imported from its parent transcript
    (found by the records' ``sessionId``, see :func:`_find_parent_import`); ``report.parent_note`` says
    whether it was found.

    ``source`` is ``"claude-code"`` or ``"codex"``; ``session_id`` defaults to a fresh minted id. The
    import is all or nothing: a bad line raises :class:`~agentlog.errors.TranscriptError` (``.path``,
    ``.line``) before anything is written, and so does a transcript that changed while it was read; an id
    that already has a stored log is refused by the coordinator; any failure while writing (a full disk,
    an interrupt) leaves no session, and neither does a crash (see the module docstring). A path that is
    not a readable regular file is a :class:`~agentlog.errors.StorageAccessError`; running out of memory
    is a :class:`~agentlog.errors.ResourceExhaustedError`. ``progress``, when given, is called with the
    number of events written so far after each batch of the write pass.
    """
    if source not in IMPORT_FORMATS:
        raise ConversionError(f'unknown transcript format "{source}" (expected one of: {", ".join(IMPORT_FORMATS)})')
    lineage = _child_lineage(coordinator, parent_session) if parent_session is not None else {}
    file_path = os.fspath(path)
    snapshot = _Snapshot(file_path)
    try:
        return _import(coordinator, source, snapshot, session_id, batch_bytes, batch_events, now, progress, lineage)
    except MemoryError as err:
        if isinstance(err, AgentlogError):
            raise
        raise _out_of_memory(file_path, None, None) from None
    finally:
        snapshot.close()


def _learn_pass(source: str, snapshot: _Snapshot, learned: _Learned, batch_bytes: int, batch_events: int) -> None:
    """The first pass over a file a staging store writes: parse every line, learn the header's facts and
    the Claude Code tree, map nothing (the write pass maps and checks each line as it writes, and a
    refusal discards the unpublished session)."""
    sink = _Sink(ImportReport(source, snapshot.path), None, batch_bytes, batch_events)
    with gc_paused():
        for record in _lines(snapshot, sink):
            _learn(source, record, learned)


def _import(
    coordinator: PersistenceCoordinator,
    source: str,
    snapshot: _Snapshot,
    session_id: str | None,
    batch_bytes: int,
    batch_events: int,
    now: Callable[[], int] | None,
    progress: Callable[[int], None] | None,
    lineage: Mapping[str, Any],
) -> ImportReport:
    learned = _Learned()
    # A store that stages (JSONL, SQLite, PostgreSQL: nothing is visible before publish) checks each line
    # in the write pass; one that cannot stage gets a check pass first, so a bad line writes nothing.
    staging = coordinator.stages_sessions
    if staging:
        _learn_pass(source, snapshot, learned, batch_bytes, batch_events)
    else:
        _run(source, snapshot, ImportReport(source, snapshot.path), learned, None, batch_bytes, batch_events)
    plan = learned.tree.plan(learned.sidechain) if source == "claude-code" else BranchPlan()
    if not staging and (learned.sidechain or plan.off_chain):
        # The check pass mapped every record as one chain of the main conversation: check the session as it
        # will be written (its side, its branch, what is kept aside) and each fork's own records.
        checked = _run(
            source,
            snapshot,
            ImportReport(source, snapshot.path),
            learned,
            None,
            batch_bytes,
            batch_events,
            learn=False,
            plan=plan,
        )
        assert isinstance(checked, _ClaudeImporter)
        for spec in plan.forks:
            mark = checked.marks.get(spec.resume)
            if mark is not None:
                scratch = ImportReport(source, snapshot.path)
                _run_fork(snapshot, scratch, learned, spec, checked.seed_events[:mark], None, batch_bytes, batch_events)
    snapshot.check_unchanged()
    from ..kernel.store import mint_session_id

    target = session_id if session_id is not None else _default_id(coordinator, snapshot, learned) or mint_session_id()
    created = learned.created_at if learned.created_at is not None else (now() if now else _now_ms())
    meta: dict[str, Any] = {"version": 0, "id": target, "createdAt": created}
    if learned.cwd is not None:
        meta["cwd"] = learned.cwd
    note = None
    if not lineage and source == "claude-code" and learned.sidechain:
        found, note = _find_parent_import(coordinator, learned)
        if found is not None:
            lineage = _child_lineage(coordinator, found)
    meta.update(lineage)
    report = ImportReport(source, snapshot.path, session_id=target)
    report.parent_session = lineage.get("parentSession")
    report.parent_note = note
    staged = [coordinator.stage(meta)]
    written = 0

    def writer(log: StagedSession) -> Callable[[list[dict[str, Any]]], None]:
        def write(batch: list[dict[str, Any]]) -> None:
            nonlocal written
            log.append(batch)
            written += len(batch)
            if progress is not None:
                progress(written)

        return write

    try:
        try:
            main = _run(
                source,
                snapshot,
                report,
                learned,
                writer(staged[0]),
                batch_bytes,
                batch_events,
                learn=False,
                plan=plan if plan.off_chain else None,
            )
            number = 0
            for spec in plan.forks:
                mark = main.marks.get(spec.resume) if isinstance(main, _ClaudeImporter) else None
                if mark is None:
                    continue  # no closed turn to fork at: its records stay kept aside in the session
                assert isinstance(main, _ClaudeImporter)
                seed = main.seed_events[:mark]
                number += 1
                fork_id = f"{target}-branch-{number}"
                fork_meta: dict[str, Any] = {"version": 0, "id": fork_id, "createdAt": created}
                if learned.cwd is not None:
                    fork_meta["cwd"] = learned.cwd
                fork_meta.update(parentSession=target, seedLength=len(seed))
                log = coordinator.stage(fork_meta)
                staged.append(log)
                end_time = seed[-1]["time"] if seed else created
                end_seed: dict[str, Any] = {"type": SESSION_END_SEED, "seq": len(seed), "time": end_time, "data": {}}
                log.append([*seed, end_seed])
                fork_report = ImportReport(source, snapshot.path, session_id=fork_id)
                _run_fork(snapshot, fork_report, learned, spec, seed, writer(log), batch_bytes, batch_events)
                report.forks.append(fork_id)
        except TranscriptError as err:
            if not staging or snapshot.changed_since_first_pass():
                # What an earlier pass read no longer reads the same: the file changed in between.
                raise snapshot.changed(f" (line {err.line} no longer reads as it did)" if err.line else "") from err
            raise  # a bad line, found as it was about to be written: nothing is published
        snapshot.check_unchanged()
        # The session first, then its forks: a crash in between leaves the session without (some of) its
        # forks, never a fork without its parent.
        while staged:
            staged[0].publish()
            staged.pop(0)
    except BaseException:
        for log in staged:
            log.discard()
        raise
    return report


def update_transcript(
    coordinator: PersistenceCoordinator,
    source: ImportFormat | str,
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_events: int = DEFAULT_BATCH_EVENTS,
) -> ImportReport:
    """Append to an imported session what its transcript gained since (``agentlog import FILE --update``).

    ``session_id`` defaults to the transcript's own session id (the default id of its import). The session
    must be an import of this format whose ``import/done`` recorded the bytes it consumed and their sha256;
    the file must start with exactly those bytes (a transcript is appended to; one that was rewritten is
    :class:`~agentlog.errors.TranscriptError` and nothing is appended). The stored events stay as they are:
    the importer replays the stored part without writing (and checks it numbers the same events, else the
    mapping changed and the update is refused), ends it as the import ended it (its turn closed, a call it
    left unanswered closed with an error, ``import/done``), then maps the new records after it and appends
    them with a new ``import/done``, in one append. So a turn the import closed stays closed: a result that
    arrives later for a call the import closed is counted as dropped. A transcript whose new records are a
    rewind (a branch) is refused: import the file again under a new id. Returns the report of the new part
    (``appended``: the events appended; 0 when nothing was added).
    """
    if source not in IMPORT_FORMATS:
        raise ConversionError(f'unknown transcript format "{source}" (expected one of: {", ".join(IMPORT_FORMATS)})')
    snapshot = _Snapshot(os.fspath(path))
    try:
        learned = _Learned()
        _learn_pass(source, snapshot, learned, batch_bytes, batch_events)
        target = session_id
        if target is None:
            own = learned.source_session
            if own is not None and learned.sidechain and learned.agent_id is not None:
                own = f"{own}-agent-{learned.agent_id}"
            if own is None or (learned.sidechain and learned.agent_id is None):
                raise TranscriptError(
                    f"{snapshot.path}: the transcript names no session id: pass the id of its import (--id)",
                    path=snapshot.path,
                )
            target = own
        view = coordinator.view(target)
        events = view.events
        last = events[len(events) - 1] if len(events) else None
        done = last["data"] if last is not None and last["type"] == IMPORT_DONE else None
        if done is None or done.get("source") != source or not isinstance(done.get("consumed"), int):
            raise TranscriptError(
                f'{snapshot.path}: session "{target}" is not an import of a {source} transcript that can be updated '
                "(its last event is no import/done recording what it consumed); import the file under a new id",
                path=snapshot.path,
            )
        consumed = done["consumed"]
        if snapshot.size < consumed or _prefix_sha256(snapshot, consumed) != done.get("sha256"):
            raise TranscriptError(
                f'{snapshot.path}: the transcript was rewritten, not appended to, since session "{target}" was '
                f"imported (its first {consumed:,} bytes differ); nothing was appended. Import it again under a "
                "new id (--id)",
                path=snapshot.path,
            )
        report = ImportReport(source, snapshot.path, session_id=target)
        report.appended = 0
        if snapshot.whole_lines[1] == consumed:
            return report  # nothing new (at most a torn last line, still being written)
        plan = learned.tree.plan(learned.sidechain) if source == "claude-code" else BranchPlan()
        if plan.off_chain:
            raise TranscriptError(
                f"{snapshot.path}: the transcript's conversation has branches (a rewind or an edited prompt): "
                "--update appends a linear continuation only; import the file again under a new id",
                path=snapshot.path,
            )
        assert last is not None
        appended: list[dict[str, Any]] = []
        _run_update(
            source,
            snapshot,
            report,
            learned,
            consumed,
            len(events),
            last["time"],
            appended.extend,
            batch_bytes,
            batch_events,
        )
        if snapshot.changed_since_first_pass():
            raise snapshot.changed()
        coordinator.append(target, appended)
        report.appended = len(appended)
        return report
    finally:
        snapshot.close()


def _prefix_sha256(snapshot: _Snapshot, size: int) -> str:
    digest = hashlib.sha256()
    handle = snapshot.handle
    handle.seek(0)
    left = size
    while left > 0:
        chunk = handle.read(min(left, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def _run_update(
    source: str,
    snapshot: _Snapshot,
    report: ImportReport,
    learned: _Learned,
    consumed: int,
    stored: int,
    stored_time: int,
    write: Callable[[list[dict[str, Any]]], None],
    batch_bytes: int,
    batch_events: int,
) -> None:
    """Replay the first ``consumed`` bytes without writing, end them as their import ended, then map and
    write the rest (see :func:`update_transcript`)."""
    sink = _Sink(report, write, batch_bytes, batch_events)
    sink.time = learned.created_at or 0
    sink.silent = True
    provider = "anthropic" if source == "claude-code" else "openai"
    conversation = _Conversation(sink, provider, learned.model, learned.system)
    importer: _ClaudeImporter | _CodexImporter
    if source == "claude-code":
        importer = _ClaudeImporter(sink, conversation, sidechain=learned.sidechain)
    else:
        importer = _CodexImporter(sink, conversation, learned.model)
    title_then: tuple[str, str] | None = None

    def title_choice() -> tuple[str, str] | None:
        if not isinstance(importer, _ClaudeImporter):
            return None
        for rtype in ("custom-title", "ai-title", "summary"):
            if rtype in importer.titles:
                return rtype, importer.titles[rtype]
        return None

    with gc_paused():
        for record in _lines(snapshot, sink):
            if sink.silent and report.bytes > consumed:
                # The first new line: end the stored part as its import ended it, then write from here.
                importer.finish()
                conversation.close_turn()
                if isinstance(importer, _ClaudeImporter):
                    importer.finish_titles()
                sink.emit(IMPORT_DONE, {})
                if sink.seq != stored:
                    raise TranscriptError(
                        f"{snapshot.path}: replaying the imported part numbers {sink.seq} events where the session "
                        f"stores {stored} (imported by another version of the mapping); import the file again under "
                        "a new id",
                        path=snapshot.path,
                    )
                title_then = title_choice()
                sink.silent = False
                sink.time = max(sink.time, stored_time)
                lines, size = report.lines, report.bytes
                kept = ImportReport(report.source, report.path, session_id=report.session_id)
                kept.appended = 0
                vars(report).update(vars(kept))
                report.lines, report.bytes = lines, size
            importer.record(record)
        importer.finish()
        conversation.close_turn()
        if isinstance(importer, _ClaudeImporter) and title_choice() != title_then:
            importer.finish_titles()
        sink.emit(IMPORT_DONE, _done(source, snapshot, report, learned))
        sink.flush()


def _default_id(coordinator: PersistenceCoordinator, snapshot: _Snapshot, learned: _Learned) -> str | None:
    """The transcript's own session id (a Claude Code sub-agent file's: its parent's and its agent's), so a
    second import of the same transcript is refused instead of stored twice; ``None`` when the transcript
    names no id, or one this store cannot hold (a fresh id is minted then)."""
    own = learned.source_session
    if own is None:
        return None
    if learned.sidechain:
        if learned.agent_id is None:
            return None
        own = f"{own}-agent-{learned.agent_id}"
    try:
        validate_session_id(coordinator.backend, own)
    except AgentlogError:
        return None
    if coordinator.backend.read_revision(own) is not None:
        raise TranscriptAlreadyImportedError(
            f'{snapshot.path}: this transcript was already imported as session "{own}" (its own session id); '
            "nothing was imported. Pass --id NEW to import a copy under another id",
            session_id=own,
        )
    return own


def _find_parent_import(coordinator: PersistenceCoordinator, learned: _Learned) -> tuple[str | None, str]:
    """The stored session imported from a sub-agent file's parent transcript, and a note saying how.

    A Claude Code sub-agent's records carry its parent session's ``sessionId``; the parent's own import
    recorded that id in its ``import/done``. Only a main-file import of Claude Code with that id is taken,
    and only when exactly one session has it (the same transcript imported twice is not guessed between).
    The search reads the logs of the likely sessions only: headers with the file's ``cwd`` and created no
    later than the sub-agent's first record, newest first, each until its ``import/done`` (its last event).
    """
    wanted = learned.source_session
    if wanted is None:
        return None, "no parent session id in the file: imported unlinked; pass --parent ID to link it"
    candidates: list[tuple[int, str]] = []
    for listing in coordinator.list():
        header = listing.header
        if listing.error_code is not None or header is None:
            continue
        if learned.cwd is not None and header.get("cwd") not in (None, learned.cwd):
            continue
        created = header.get("createdAt")
        if learned.created_at is not None and isinstance(created, int) and created > learned.created_at:
            continue
        candidates.append((created if isinstance(created, int) else 0, listing.id))
    found: list[str] = []
    for _created, session_id in sorted(candidates, reverse=True):
        try:
            events = coordinator.read_from(session_id, 0).events
        except AgentlogError:
            continue  # a damaged or vanished session is no one's parent
        last = events[len(events) - 1] if len(events) else None
        data = last.get("data") if last is not None and last.get("type") == IMPORT_DONE else None
        if (
            isinstance(data, Mapping)
            and data.get("source") == "claude-code"
            and data.get("sessionId") == wanted
            and data.get("sidechain") is not True
        ):
            found.append(session_id)
    if len(found) == 1:
        return found[0], f"linked as a subagent of {found[0]} (the session imported from Claude Code session {wanted})"
    if not found:
        return None, (
            f"the parent Claude Code session {wanted} is not imported in this store: imported unlinked; "
            "import the parent transcript first, or pass --parent ID"
        )
    return None, (
        f"the parent Claude Code session {wanted} was imported more than once ({', '.join(sorted(found))}): "
        "imported unlinked; pass --parent ID to choose"
    )


def _child_lineage(coordinator: PersistenceCoordinator, parent: str) -> dict[str, Any]:
    """The header fields of an import linked as a subagent of ``parent`` (which must be stored)."""
    from ..errors import SessionNotFoundError
    from ..kernel.lineage import delegation_depth_of

    if not isinstance(parent, str) or not parent:
        raise ConversionError(f"parent session must be a non-empty session id, got {parent!r}")
    try:
        header = coordinator.view(parent).header
    except SessionNotFoundError:
        raise SessionNotFoundError(
            f'parent session "{parent}" is not in this store; import the parent first (or omit --parent)'
        ) from None
    return {"parentSession": parent, "origin": "subagent", "delegationDepth": delegation_depth_of(header) + 1}


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- export


def _stream_document(out: IO[str], head: Mapping[str, Any], key: str, items: Iterator[Any]) -> int:
    """Write ``{**head, key: [items...]}`` item by item (never the whole document as one string)."""
    out.write("{")
    for name, value in head.items():
        out.write(orjson.dumps(name).decode() + ":" + orjson.dumps(value).decode() + ",")
    out.write(orjson.dumps(key).decode() + ":[")
    count = 0
    for item in items:
        out.write(("\n" if count == 0 else ",\n") + orjson.dumps(item).decode())
        count += 1
    out.write("\n]}\n")
    return count


def _sharegpt(messages: list[Any]) -> Iterator[dict[str, str]]:
    """ShareGPT turns: ``human``/``gpt`` text, ``function_call`` and ``observation`` for tool use
    (the LLaMA-Factory convention: one ``function_call`` turn per call, ``{"name", "arguments"}``)."""
    for message in messages:
        role = message["role"]
        source = message.get("source") or {}
        texts = [block["text"] for block in message["content"] if block.get("type") == "text"]
        if role == "assistant":
            if texts:
                yield {"from": "gpt", "value": "\n".join(texts)}
            for block in message["content"]:
                if block.get("type") == "tool-call":
                    call = {"name": block["name"], "arguments": _arguments(block["arguments"])}
                    yield {"from": "function_call", "value": orjson.dumps(call).decode()}
        elif source.get("kind") == "tool":
            for block in message["content"]:
                if block.get("type") == "tool-result":
                    parts = [part["text"] for part in block["content"] if part.get("type") == "text"]
                    yield {"from": "observation", "value": "\n".join(parts)}
        elif role == "system":
            yield {"from": "system", "value": "\n".join(texts)}
        else:
            yield {"from": "human", "value": "\n".join(texts)}


def _arguments(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


@dataclass
class ExportReport:
    """What an export changed to fit its format (``to_json`` is what ``export --to`` prints on stderr).

    ``wrapped_arguments``: the tool calls whose argument text was not a JSON object and was written as
    ``{"input": <text>}`` (``--wrap-arguments``), each ``{"message", "callId", "name"}``, ``message``
    being the index in the derived messages.
    """

    format: str
    items: int = 0
    wrapped_arguments: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "items": self.items, "wrappedArguments": list(self.wrapped_arguments)}


def export_session(
    view: Any,
    fmt: ExportFormat | str,
    out: IO[str],
    *,
    wrap_arguments: bool = False,
    report: ExportReport | None = None,
) -> int:
    """Write a session (a ``SessionView`` or live ``Session``) in ``fmt`` to ``out``; return the item count.

    ``wrap_arguments`` (``anthropic`` only, whose ``tool_use.input`` must be a JSON object): argument text
    that is not an object (Codex's ``apply_patch`` patch) is written as ``{"input": <text>}`` instead of
    being refused; ``report``, when given, lists each such call and the item count.

    ``claude-code`` and ``codex`` write the tool's own session file (one JSON record per line), which the
    tool can resume and :func:`import_transcript` reads back (:mod:`agentlog.interop.transcript_export`).
    ``openai-chat``, ``openai-responses`` and ``anthropic`` are the conversational part of that API's
    request body (``model``, the system prompt, ``tools`` from the request header, and the
    ``messages``/``input`` list), rendered by :func:`~agentlog.interop.openai_chat.session_to_openai_chat`
    and its siblings; ``sharegpt`` is ``{"system"?, "tools"?, "conversations": [{"from", "value"}...]}``.
    The list is written item by item. A conversion refusal is a
    :class:`~agentlog.errors.ConversionError` naming the message, raised before anything is written.
    """
    if fmt in ("claude-code", "codex"):
        from .transcript_export import write_claude_code, write_codex

        writer = write_claude_code if fmt == "claude-code" else write_codex
        wrapped = report.wrapped_arguments if report is not None else None
        count = writer(view, out, wrapped=wrapped)
        if report is not None:
            report.items = count
        return count
    if fmt == "sharegpt":
        from ._common import header_parts

        messages, system, tools, _model = header_parts(view)
        head: dict[str, Any] = {}
        if system:
            head["system"] = system
        if tools:
            head["tools"] = orjson.dumps(tools).decode()
        items = list(_sharegpt(thaw(messages)))
        count = _stream_document(out, head, "conversations", iter(items))
        if report is not None:
            report.items = count
        return count
    body: dict[str, Any]
    if fmt == "openai-chat":
        from .openai_chat import session_to_openai_chat

        body, key = session_to_openai_chat(view), "messages"
    elif fmt == "openai-responses":
        from .openai_responses import session_to_openai_responses

        body, key = session_to_openai_responses(view, reasoning="item"), "input"
    elif fmt == "anthropic":
        from .anthropic import session_to_anthropic

        wrapped = report.wrapped_arguments if report is not None else None
        body = session_to_anthropic(view, reasoning="thinking", wrap_arguments=wrap_arguments, wrapped=wrapped)
        key = "messages"
    else:
        raise ConversionError(f'unknown export format "{fmt}" (expected one of: {", ".join(EXPORT_FORMATS)})')
    items = body.pop(key)
    count = _stream_document(out, body, key, iter(items))
    if report is not None:
        report.items = count
    return count
