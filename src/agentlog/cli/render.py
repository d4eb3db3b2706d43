"""Output of the commands: errors, JSON documents, tables and readable event lines."""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import orjson
import typer
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..compaction.events import COMPACTION_PRUNE, COMPACTION_SUMMARY
from ..errors import (
    AgentlogError,
)
from ..kernel.events import ASSISTANT_CHUNK, TOOL_CALL, TOOL_RESULT, TURN_END, USER_MESSAGE
from ._marks import CheckpointMark, Mark, PruneMark, mark_of


def render_error(err: AgentlogError, as_json: bool) -> NoReturn:
    """The one way a command reports an :class:`~agentlog.errors.AgentlogError`, then exits with code 1.

    With ``--json``: ``{"error": {"code", "message"}}`` (plus ``holder`` for ``SESSION_LOCKED``) on one
    line of standard error; without: a red ``error [CODE] message`` line there. Every code a command
    prints is a class's code from :mod:`agentlog.errors` (``tests/test_errors.py``): commands raise or
    build a typed error, never a code.
    """
    if as_json:
        error: dict[str, Any] = {"code": err.code, "message": str(err)}
        holder = getattr(err, "holder", None)
        if holder is not None:  # SESSION_LOCKED: who holds the lock, as data a script can wait on
            error["holder"] = holder
        _emit_json_line({"error": error}, stderr=True)
    else:
        # The message is text, not markup: "pip install 'agentlog[postgres]'" keeps its brackets.
        Console(stderr=True).print(f"[bold red]error[/] [{err.code}] {escape(str(err))}", markup=True, highlight=False)
    raise typer.Exit(code=1)


def _iso(ms: Any) -> str:
    if type(ms) is not int:
        return ""
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _emit_json(document: Any) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


STREAM_CHUNK_BYTES = 1 << 16
"""A streamed output is written (and flushed) in pieces of about this size: few enough writes that a
million-event session is not a million system calls, small enough that a reader sees output at once."""


class Streamed:
    """A JSON array in a :func:`_emit_json_stream` document whose items are produced one by one."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


class _ChunkedStdout:
    """Pieces of JSON text gathered into writes of about :data:`STREAM_CHUNK_BYTES` on standard output,
    each flushed: the document leaves the process as it is produced and is never held whole."""

    __slots__ = ("_pieces", "_size")

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0

    def write(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size >= STREAM_CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            sys.stdout.write(b"".join(self._pieces).decode())
            sys.stdout.flush()
            self._pieces.clear()
            self._size = 0


def _indented(value: Any, indent: bytes) -> bytes:
    """``value`` as :func:`_emit_json` prints it when nested one level below ``indent``: orjson's
    two-space layout, every line after the first shifted right (JSON strings hold no raw newline)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n" + indent)


def _emit_json_stream(fields: Iterable[tuple[str, Any]]) -> None:
    """Print the object of ``fields`` exactly as :func:`_emit_json` would print ``dict(fields)``, where a
    :class:`Streamed` value is the list of its items, but written as it is produced.

    A streamed array is serialized item by item and the output goes out in flushed chunks, so a
    session of a million events is neither held as one document nor as one string, and a reader of the
    pipe gets the first events while the rest are still being written. (Values are serialized as
    they are: orjson writes frozen containers natively, so no thawed copy is made.)
    """
    out = _ChunkedStdout()
    opened = False
    for key, value in fields:
        out.write((b"{\n  " if not opened else b",\n  ") + orjson.dumps(key) + b": ")
        opened = True
        if isinstance(value, Streamed):
            count = 0
            for item in value.items:
                out.write((b"[\n    " if count == 0 else b",\n    ") + _indented(item, b"    "))
                count += 1
            out.write(b"\n  ]" if count else b"[]")
        else:
            out.write(_indented(value, b"  "))
    out.write(b"\n}\n" if opened else b"{}\n")
    out.flush()


def _echo_lines(lines: Iterable[str]) -> None:
    """``typer.echo`` every line, in chunks of about :data:`STREAM_CHUNK_BYTES` characters.

    The bytes are those of one ``typer.echo`` per line (click strips ANSI styles per call when the
    output is not a terminal; its pattern never spans a newline, so stripping a chunk is stripping
    each line), but a long transcript or log is one write and flush per chunk, not per line, and is
    never held whole.
    """
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line) + 1
        if size >= STREAM_CHUNK_BYTES:
            typer.echo("\n".join(batch))
            batch.clear()
            size = 0
    if batch:
        typer.echo("\n".join(batch))


def _emit_json_line(document: Any, *, stderr: bool = False) -> None:
    """One compact JSON object on its own line of standard output (or ``stderr``), flushed: a line of
    NDJSON, or an error report."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(orjson.dumps(document).decode() + "\n")
    stream.flush()


class _TableOutput:
    """A table for people, shared by the commands and the demo: rows may carry rich markup (colour),
    their plain text sizes the output when it is not a terminal (see :func:`_table_console`)."""

    def __init__(
        self,
        columns: Sequence[str],
        *,
        title: str | None = None,
        fold: bool = True,
        right: Collection[str] = (),
        header_style: str | None = None,
    ) -> None:
        self.table = Table(title=title) if header_style is None else Table(title=title, header_style=header_style)
        for column in columns:
            justify: JustifyMethod = "right" if column in right else "left"
            if fold:
                self.table.add_column(column, overflow="fold", justify=justify)
            else:
                self.table.add_column(column, justify=justify)
        self.cells: list[list[str]] = [list(columns)]

    def add_row(self, *cells: str | Text, plain: Sequence[str] | None = None) -> None:
        """One row of markup strings or styled texts; ``plain`` is its text without markup when ``cells``
        carry some."""
        self.table.add_row(*cells)
        self.cells.append(list(plain if plain is not None else (str(cell) for cell in cells)))

    def print(self, console: Console | None = None) -> Console:
        """Print the table on ``console`` (default: standard output, sized by :func:`_table_console`)."""
        target = console if console is not None else _table_console(self.cells)
        target.print(self.table)
        return target


def _table_console(cells: Sequence[Sequence[str]]) -> Console:
    """Standard output for a table of ``cells`` (header row included): the terminal's width on a
    terminal (long cells wrap, never cut); piped or redirected, wide enough that no cell is wrapped or
    cut, so scripts read whole ids."""
    console = Console()
    if console.is_terminal:
        return console
    columns = max(map(len, cells), default=0)
    widths = [max((len(row[i]) for row in cells if i < len(row)), default=0) for i in range(columns)]
    return Console(width=max(console.width, sum(widths) + 3 * columns + 4))


def _short(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters (whitespace runs collapsed, a cut marked with …)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text_of(blocks: Any) -> str:
    if not isinstance(blocks, Sequence) or isinstance(blocks, str):
        return ""
    return "".join(b.get("text", "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")


_REMEMBERED = frozenset({TOOL_RESULT, USER_MESSAGE, COMPACTION_SUMMARY, COMPACTION_PRUNE})


class _EventPrinter:
    """Renders session events for people: streamed answer text, tool calls (→) and their results (←).

    Used live by ``run``/``resume`` (subscribed to the store's ``on_event``) and by ``replay``. A
    compaction checkpoint and a pruned tool result are shown by their mark (see :mod:`._marks`).
    """

    def __init__(self, *, prompts: bool = False) -> None:
        # The LLM layer loads with the first printer, not with this module (``tail`` and ``search`` use it too).
        from ..llm.events import LLM_RETRY

        self._retry_type = LLM_RETRY
        self.prompts = prompts
        self._mid_line = False
        self._seen: dict[int, Mapping[str, Any]] = {}  # the events a compaction mark refers back to

    def remember(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Events from before the printing starts (a resumed session's log) that later marks refer to."""
        for event in events:
            if event["type"] in _REMEMBERED and isinstance(event.get("seq"), int):
                self._seen[event["seq"]] = event

    def _write(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self._mid_line = not text.endswith("\n")

    def end_line(self) -> None:
        if self._mid_line:
            self._write("\n")

    def line(self, text: str) -> None:
        self.end_line()
        self._write(text + "\n")

    def __call__(self, event: Mapping[str, Any]) -> None:
        etype = event["type"]
        data = event["data"]
        if not isinstance(data, Mapping):
            return
        if etype in _REMEMBERED and isinstance(event.get("seq"), int):
            self._seen[event["seq"]] = event
            mark = mark_of(self._seen, event["seq"])
            if mark is not None:  # a surface replacement: say what compaction did instead of "← ok"
                self.line(f"⋯ {mark.label}")
                return
        if etype == ASSISTANT_CHUNK:
            chunk = data.get("chunk")
            if isinstance(chunk, Mapping) and chunk.get("type") == "text-delta":
                self._write(str(chunk.get("text", "")))
        elif etype == TOOL_CALL:
            self.line(f"→ {data.get('name')} {_short(str(data.get('arguments', '')))}")
        elif etype == TOOL_RESULT:
            error = data.get("error")
            if isinstance(error, Mapping):
                self.line(f"← error {error.get('code')}")
            else:
                blocks = (data.get("message") or {}).get("content") or ()
                failed = any(isinstance(b, Mapping) and b.get("isError") for b in blocks)
                self.line("← error" if failed else "← ok")
        elif etype == USER_MESSAGE and self.prompts:
            source = data.get("source")
            if isinstance(source, Mapping) and source.get("kind") == "user":
                self.line(f"> {_text_of(data.get('content'))}")
        elif etype == self._retry_type:
            failure = data.get("failure") or {}
            self.end_line()
            sys.stderr.write(
                f"retry {data.get('retry')}/{data.get('maxRetries')} in {data.get('delayMs')} ms after "
                f"{failure.get('code')}: {_short(str(failure.get('message', '')), 200)}\n"
            )
        elif etype == TURN_END:
            self.end_line()


def _transcript(
    messages: Sequence[Mapping[str, Any]], limit: int = 400, marks: Sequence[Mark | None] | None = None
) -> list[str]:
    """:func:`_transcript_lines` as a list."""
    return list(_transcript_lines(messages, limit, marks))


def _transcript_lines(
    messages: Sequence[Mapping[str, Any]], limit: int = 400, marks: Sequence[Mark | None] | None = None
) -> Iterator[str]:
    """Readable lines for derived messages: roles, text, tool calls (→) and results (←), shortened.

    ``marks`` (one per message, see :mod:`._marks`) label compaction checkpoints (a line of their own
    before the checkpoint's text) and pruned tool results (in the result's line). The lines are
    produced one by one, so ``show`` can print a long session's transcript as it goes."""
    names: dict[str, str] = {}
    for index, message in enumerate(messages):
        mark = marks[index] if marks is not None and index < len(marks) else None
        role = str(message.get("role"))
        source = message.get("source")
        kind = source.get("kind") if isinstance(source, Mapping) else None
        label = role if kind in (None, "user", "model", "tool") else f"{role} ({kind})"
        if isinstance(mark, CheckpointMark):
            yield f"{label}: {mark.label}"
        pruned = f"{mark.label} " if isinstance(mark, PruneMark) else ""
        for block in message.get("content") or ():
            if not isinstance(block, Mapping):
                continue
            btype = block.get("type")
            if isinstance(mark, CheckpointMark) and _is_framing(block):
                continue  # the fixed preamble and closing tag around the summary say nothing new
            if btype == "text":
                yield f"{label}: {_short(str(block.get('text', '')), limit)}"
            elif btype == "reasoning":
                yield f"{label} (reasoning): {_short(str(block.get('text', '')), limit)}"
            elif btype == "tool-call":
                call_id = str(block.get("id"))
                names[call_id] = str(block.get("name"))
                yield f"  → {block.get('name')} {_short(str(block.get('arguments', '')), 160)}"
            elif btype == "tool-result":
                call_id = str(block.get("toolCallId"))
                status = "error" if block.get("isError") else "ok"
                text = _short(_text_of(block.get("content")), 160)
                yield f"  ← {names.get(call_id, call_id)} {status}: {pruned}{text}"
            elif btype == "image":
                yield f"{label}: [image]"


def _is_framing(block: Mapping[str, Any]) -> bool:
    """The checkpoint's framing text blocks (runtime spec §5.9): the preamble ending with the opening tag,
    and the closing tag."""
    # Imported on use: ``tail`` and ``search`` import this module and must not load the LLM layer.
    from ..llm.compaction_protocol import SUMMARY_CLOSE_TAG, SUMMARY_OPEN_TAG

    text = block.get("text")
    return (
        block.get("type") == "text"
        and isinstance(text, str)
        and (text.endswith(SUMMARY_OPEN_TAG) or text == SUMMARY_CLOSE_TAG)
    )


def _event_line(event: Mapping[str, Any]) -> str:
    data = event["data"]
    shown = orjson.dumps(data).decode() if data is not None else ""
    return f"{event['seq']:>6}  {event['type']:<22}  {_short(shown, 110)}"
