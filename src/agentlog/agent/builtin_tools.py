"""The four built-in tools: ``read_file``, ``list_dir``, ``write_file`` and ``run_command``.

They are deliberately small and predictable, because the model learns a tool from its results:

- **Confinement (file tools only).** ``read_file``, ``list_dir`` and ``write_file`` resolve every path
  against the call's working directory *after* following symlinks, and refuse a target outside it
  (``PATH_OUTSIDE_CWD``) unless the tool was built with ``allow_outside_cwd=True``. Checking the resolved
  path (not the text) is what stops ``../``, absolute paths and symlinks that point out of the tree alike.
- **``run_command`` is not confined.** It *starts* ``/bin/sh -c`` in the working directory, bounds its
  time (a per-call timeout, capped) and its output (head and tail kept), and kills what it started; but
  the shell runs with the agent's own user and can read, write and reach anything that user can. What
  limits it is the :class:`CommandPolicy` checked before anything runs: the exact command line must match
  an allowed pattern or be approved by a hook, else the result is a ``COMMAND_NOT_ALLOWED`` error and
  nothing is started. ``RunCommandTool()`` and ``builtin_registry()`` allow every command (the caller's
  explicit choice; pass ``command_policy=CommandPolicy(...)`` to restrict it); ``agentlog run`` and
  ``agentlog resume`` deny every command unless ``--allow-command PATTERN`` or ``--yes`` says otherwise.
- **Bounded output.** Every result is capped; a cut is announced in the text with the
  ``OUTPUT_TRUNCATED`` note (and ``meta.truncated``) saying how to get the rest, so the model never
  mistakes a prefix for the whole. A truncation is a note, not an error.
- **Stable failures.** Failures are error outcomes with codes (``PATH_OUTSIDE_CWD``, ``NOT_FOUND``,
  ``IS_A_DIRECTORY``, ``NOT_A_DIRECTORY``, ``PERMISSION_DENIED``, ``IO_ERROR``, ``TIMEOUT``,
  ``COMMAND_NOT_ALLOWED``, ``ABORTED``) that the log records as ``error.code``.
- **No leaked processes.** ``run_command`` runs ``/bin/sh -c`` in a new process group and kills the
  whole group on timeout or cancellation, and also when background jobs keep its output pipe open after
  the shell exits (detach a service by redirecting its output). A process that leaves the group
  (``setsid``) is beyond its reach.

Blocking file I/O runs in a worker thread so a large read never stalls the other tools of a batch.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import inspect
import os
import re
import signal
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .tools import (
    INVALID_ARGUMENTS,
    TOOL_ABORTED,
    ExecutionMode,
    ToolContext,
    ToolDefinitionError,
    ToolOutcome,
    ToolRegistry,
)

# Stable codes of built-in tool failures (and the truncation note).
PATH_OUTSIDE_CWD = "PATH_OUTSIDE_CWD"
NOT_FOUND = "NOT_FOUND"
IS_A_DIRECTORY = "IS_A_DIRECTORY"
NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
NOT_A_FILE = "NOT_A_FILE"
PERMISSION_DENIED = "PERMISSION_DENIED"
IO_ERROR = "IO_ERROR"
TIMEOUT = "TIMEOUT"
INVALID_PATH = "INVALID_PATH"
COMMAND_NOT_ALLOWED = "COMMAND_NOT_ALLOWED"
OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
"""Not an error code: the note that marks a capped result (text and ``meta.notes``)."""

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
DEFAULT_MAX_ENTRIES = 1000
DEFAULT_COMMAND_TIMEOUT = 120.0
MAX_COMMAND_TIMEOUT = 600.0
_BINARY_SNIFF_BYTES = 8192

CwdPolicy = Literal["confined", "read-outside", "unconfined"]
"""``confined``: every file tool stays in cwd; ``read-outside``: reads and listings may leave it, writes
may not; ``unconfined``: no confinement."""


class _Refusal(Exception):
    """Internal: carries an error outcome out of nested helpers to the tool's ``run``."""

    def __init__(self, outcome: ToolOutcome) -> None:
        super().__init__(outcome.text_content)
        self.outcome = outcome


def _fail(message: str, code: str, *, meta: Any = None) -> _Refusal:
    return _Refusal(ToolOutcome.failure(message, code=code, name="ToolError", meta=meta))


def _clean(text: str) -> str:
    """File names are bytes; undecodable ones arrive as lone surrogates, which the JSON gate refuses."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _display(path: Path, base: Path) -> str:
    """A path as the model should see it: relative to cwd when inside it, absolute otherwise."""
    try:
        relative = path.relative_to(base)
    except ValueError:
        return _clean(str(path))
    return _clean(str(relative)) if str(relative) != "." else "."


def _resolve(ctx: ToolContext, raw: str, *, allow_outside: bool) -> tuple[Path, Path]:
    """``(real target, real cwd)``; symlinks are followed before the confinement check."""
    if "\x00" in raw:
        raise _fail("path contains a NUL character", INVALID_PATH)
    base = Path(os.path.realpath(ctx.cwd))
    target = Path(os.path.realpath(base / raw))  # an absolute ``raw`` replaces ``base``
    if not allow_outside and target != base and not target.is_relative_to(base):
        raise _fail(
            f"path {raw!r} resolves to {_clean(str(target))}, outside the working directory {_clean(str(base))}",
            PATH_OUTSIDE_CWD,
        )
    return target, base


def _os_failure(err: OSError, what: str) -> _Refusal:
    if isinstance(err, FileNotFoundError):
        return _fail(f"{what}: no such file or directory", NOT_FOUND)
    if isinstance(err, IsADirectoryError):
        return _fail(f"{what}: is a directory", IS_A_DIRECTORY)
    if isinstance(err, NotADirectoryError):
        return _fail(f"{what}: not a directory", NOT_A_DIRECTORY)
    if isinstance(err, PermissionError):
        return _fail(f"{what}: permission denied", PERMISSION_DENIED)
    return _fail(f"{what}: {err.strerror or err}", IO_ERROR)


def _decode(data: bytes, *, final: bool) -> tuple[str, int]:
    """UTF-8 text of ``data`` and how many bytes it used: a character cut by a cap is left for later."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=final)
    pending = len(decoder.getstate()[0])
    return text, len(data) - pending


# --- read_file ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadFileTool:
    """Read a text file (or a byte range of it) relative to the working directory."""

    allow_outside_cwd: bool = False
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    name: str = "read_file"
    execution: ExecutionMode = "parallel"

    @property
    def description(self) -> str:
        return (
            "Read a UTF-8 text file. `path` is relative to the working directory. Reads at most "
            f"{self.max_output_bytes} bytes per call; use `offset` (byte offset) and `limit` (bytes) to read "
            "large files in pieces. Binary files are reported, not shown."
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the working directory."},
                "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum bytes to read."},
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        try:
            target, base = _resolve(ctx, args["path"], allow_outside=self.allow_outside_cwd)
            offset = int(args.get("offset", 0))
            limit = min(int(args.get("limit", self.max_output_bytes)), self.max_output_bytes)
            return await asyncio.to_thread(self._read, target, _display(target, base), offset, limit)
        except _Refusal as refusal:
            return refusal.outcome

    def _read(self, target: Path, shown: str, offset: int, limit: int) -> ToolOutcome:
        try:
            # O_NONBLOCK: opening a FIFO must not hang the tool; O_NOFOLLOW: the checked path is the one read.
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as err:
            raise _os_failure(err, shown) from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise _fail(f"{shown}: is a directory (use list_dir)", IS_A_DIRECTORY)
            if not stat.S_ISREG(info.st_mode):
                raise _fail(f"{shown}: not a regular file", NOT_A_FILE)
            size = info.st_size
            head = os.pread(fd, _BINARY_SNIFF_BYTES, 0)
            chunk = os.pread(fd, limit, offset) if offset < size else b""
        except OSError as err:
            raise _os_failure(err, shown) from None
        finally:
            os.close(fd)
        meta: dict[str, Any] = {"path": shown, "size": size, "offset": offset}
        if b"\x00" in head or b"\x00" in chunk:
            meta["binary"] = True
            return ToolOutcome.text(f"{shown} is a binary file ({size} bytes); its content is not shown.", meta=meta)
        if offset >= size:
            note = "(empty file)" if size == 0 else f"(offset {offset} is at or past the end of the file: {size} bytes)"
            meta["end"] = offset
            return ToolOutcome.text(note, meta=meta)
        end = offset + len(chunk)
        text, used = _decode(chunk, final=end >= size)
        end = offset + used
        meta["end"] = end
        if end < size:
            meta["truncated"] = True
            meta["notes"] = [OUTPUT_TRUNCATED]
            text += (
                f"\n\n[{OUTPUT_TRUNCATED}: showed bytes {offset}-{end} of {size}; "
                f"call read_file with offset={end} to read on]"
            )
        return ToolOutcome.text(text, meta=meta)


# --- list_dir -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListDirTool:
    """List a directory: sorted names, directories marked with ``/`` and symlinks with ``@``."""

    allow_outside_cwd: bool = False
    max_entries: int = DEFAULT_MAX_ENTRIES
    name: str = "list_dir"
    execution: ExecutionMode = "parallel"

    @property
    def description(self) -> str:
        return (
            "List a directory (default: the working directory). Entries are sorted by name; directories end "
            f"with `/`, symlinks with `@`. At most {self.max_entries} entries are shown."
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory path, relative to the working directory."},
            },
            "additionalProperties": False,
        }

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        try:
            target, base = _resolve(ctx, args.get("path", "."), allow_outside=self.allow_outside_cwd)
            return await asyncio.to_thread(self._list, target, _display(target, base))
        except _Refusal as refusal:
            return refusal.outcome

    def _list(self, target: Path, shown: str) -> ToolOutcome:
        try:
            with os.scandir(target) as it:
                entries = []
                for entry in it:
                    if entry.is_symlink():
                        mark = "@"
                    elif entry.is_dir(follow_symlinks=False):
                        mark = "/"
                    else:
                        mark = ""
                    entries.append(_clean(entry.name) + mark)
        except OSError as err:
            raise _os_failure(err, shown) from None
        entries.sort()
        total = len(entries)
        meta: dict[str, Any] = {"path": shown, "entries": total}
        if total == 0:
            return ToolOutcome.text(f"{shown}: (empty directory)", meta=meta)
        shown_entries = entries[: self.max_entries]
        text = "\n".join(shown_entries)
        if total > self.max_entries:
            meta["truncated"] = True
            meta["notes"] = [OUTPUT_TRUNCATED]
            text += f"\n\n[{OUTPUT_TRUNCATED}: showing {self.max_entries} of {total} entries]"
        return ToolOutcome.text(text, meta=meta)


# --- write_file -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteFileTool:
    """Create or overwrite a text file; exclusive because other calls may read what it writes."""

    allow_outside_cwd: bool = False
    name: str = "write_file"
    execution: ExecutionMode = "exclusive"

    @property
    def description(self) -> str:
        return (
            "Write `content` (UTF-8 text) to `path`, relative to the working directory, replacing the file "
            "if it exists. Missing parent directories are created."
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the working directory."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        }

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        try:
            target, base = _resolve(ctx, args["path"], allow_outside=self.allow_outside_cwd)
            try:
                data = args["content"].encode("utf-8")
            except UnicodeEncodeError:
                raise _fail("content is not valid Unicode text", INVALID_ARGUMENTS) from None
            return await asyncio.to_thread(self._write, target, _display(target, base), data)
        except _Refusal as refusal:
            return refusal.outcome

    def _write(self, target: Path, shown: str, data: bytes) -> ToolOutcome:
        try:
            # The target was resolved inside cwd, so its parents are too: creating them cannot escape.
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise _fail(f"{shown}: a parent path exists and is not a directory", NOT_A_DIRECTORY) from None
        except OSError as err:
            raise _os_failure(err, shown) from None
        created = not target.exists()
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            raise _os_failure(err, shown) from None
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as err:
            raise _os_failure(err, shown) from None
        finally:
            os.close(fd)
        verb = "created" if created else "overwrote"
        return ToolOutcome.text(
            f"{verb} {shown} ({len(data)} bytes written)",
            meta={"path": shown, "bytes": len(data), "created": created},
        )


# --- the command policy ---------------------------------------------------------------------------

CommandApproval = Callable[[str], "bool | Awaitable[bool]"]
"""An approval hook: receives the exact command line and returns (or resolves to) ``True`` to run it."""

_NOT_OPERATOR = r"[^;&|<>()`$\n\r]"
_OPERATOR = r"[;&|<>()`$\n\r]"
"""What a pattern wildcard never matches: separators, pipes, redirections, subshells and substitutions."""


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """An fnmatch-style pattern (``*``, ``?``, ``[seq]``, ``[!seq]``) for a whole command line, whose
    wildcards stop at shell operators; literal characters (operators included) match themselves."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        i += 1
        if char == "*":
            out.append(_NOT_OPERATOR + "*")
        elif char == "?":
            out.append(_NOT_OPERATOR)
        elif char == "[":
            j = i + 1 if i < n and pattern[i] == "!" else i
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                out.append(re.escape(char))
                continue
            body = pattern[i:j]
            i = j + 1
            negated = body.startswith("!")
            members = "".join(c if c == "-" else re.escape(c) for c in (body[1:] if negated else body))
            out.append(f"(?!{_OPERATOR})[^{members}]" if negated else f"[{members}]")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


@dataclass(frozen=True, slots=True)
class CommandPolicy:
    """Which command lines ``run_command`` may start; checked before anything runs.

    A command runs when ``allow_all_commands`` is set, when the whole command line (surrounding
    whitespace stripped) matches one of ``allow_patterns``, or else when ``approve(command)`` returns
    (or resolves to) ``True``. Anything else — including an approval hook that raises — is refused with a
    ``COMMAND_NOT_ALLOWED`` error result whose text ends with ``hint`` (how to allow it), and nothing is
    started. ``CommandPolicy()`` refuses every command. The hook is awaited on the event loop, so one that
    asks a person should be ``async`` (a blocking one stalls every other task); cancelling the call while it
    waits ends the wait with an ``ABORTED`` result, and nothing runs.

    Patterns are fnmatch-style (``*``, ``?``, ``[seq]``, ``[!seq]``), but a wildcard never matches a
    shell operator or substitution character (``; & | < > ( ) $``, a backquote, a line break): ``git *``
    allows ``git log -p`` and refuses ``git log; rm -rf ~`` and ``git log $(curl …)``. Operators written
    literally in a pattern match themselves. A pattern says which commands may *start*; what an allowed
    command then does is not confined (see :class:`RunCommandTool`).
    """

    allow_patterns: Iterable[str] = ()
    approve: CommandApproval | None = None
    allow_all_commands: bool = False
    hint: str = "To allow it, pass command_policy=CommandPolicy(allow_patterns=[...]) or an approve hook."
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if isinstance(self.allow_patterns, str):
            raise ToolDefinitionError("allow_patterns must be a sequence of patterns, not one string")
        patterns = tuple(self.allow_patterns)
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                raise ToolDefinitionError(f"a command pattern must be a non-empty string, not {pattern!r}")
        object.__setattr__(self, "allow_patterns", patterns)
        object.__setattr__(self, "_compiled", tuple(_pattern_regex(p.strip()) for p in patterns))

    @classmethod
    def allow_all(cls) -> CommandPolicy:
        """Every command may run (the library default; ``agentlog run --yes``)."""
        return cls(allow_all_commands=True)

    def allows(self, command: str) -> bool:
        """Whether the command runs without asking the approval hook."""
        if self.allow_all_commands:
            return True
        line = command.strip()
        return any(regex.fullmatch(line) for regex in self._compiled)

    async def refusal(self, command: str) -> str | None:
        """``None`` when the command may run, else why it may not (the hook is asked only when needed)."""
        if self.allows(command):
            return None
        if self.approve is None:
            return "it matches no allowed command pattern" if self.allow_patterns else "no command is allowed"
        try:
            verdict = self.approve(command)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as err:
            return f"the approval hook failed: {type(err).__name__}: {err}"
        return None if verdict is True else "the approval hook declined it"

    def describe(self) -> str:
        """One sentence for the model about what the policy lets through ("" when everything runs)."""
        if self.allow_all_commands:
            return ""
        shown = ", ".join(f"`{p}`" for p in self.allow_patterns)
        if self.approve is not None:
            return f"Commands matching {shown} run; others need approval." if shown else "Commands need approval."
        if shown:
            return f"Only command lines matching {shown} are allowed; others are refused without running."
        return "No command is allowed in this session: every call is refused without running."


ALLOW_ALL_COMMANDS = CommandPolicy(allow_all_commands=True)


# --- run_command ----------------------------------------------------------------------------------


class _Capture:
    """Keeps the head and the tail of a stream within ``cap`` bytes: errors tend to be at the end."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap > 0:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def render(self) -> str:
        if self.omitted == 0:
            return bytes(self.head + self.tail).decode("utf-8", "replace")
        head, _ = _decode(bytes(self.head), final=False)
        tail = bytes(self.tail).decode("utf-8", "replace")
        return f"{head}\n[{OUTPUT_TRUNCATED}: {self.omitted} bytes of output omitted]\n{tail}"


def _kill_group(pgid: int) -> None:
    # The shell leads its own group (start_new_session), so this reaches every process it started
    # that did not move itself into another session.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _pump(reader: asyncio.StreamReader, capture: _Capture) -> None:
    while True:
        data = await reader.read(65536)
        if not data:
            return
        capture.feed(data)


@dataclass(frozen=True, slots=True)
class RunCommandTool:
    """Run a shell command that ``policy`` allows, starting in the working directory, with a timeout and
    capped combined output.

    It is **not confined** to the working directory: ``cwd`` is only where ``/bin/sh -c`` starts, and the
    shell can read, write and reach anything the agent's user can. What it bounds is time (``timeout``
    per call, the model may ask for up to ``max_timeout``), output (``max_output_bytes``, head and tail
    kept) and lifetime (its process group is killed on timeout, cancellation, or when background jobs hold
    the output open after the shell exits). What it refuses is decided by ``policy`` before anything runs
    (:class:`CommandPolicy`; the default allows every command).
    """

    policy: CommandPolicy = ALLOW_ALL_COMMANDS
    timeout: float = DEFAULT_COMMAND_TIMEOUT
    max_timeout: float = MAX_COMMAND_TIMEOUT
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    drain_grace: float = 0.5
    """How long to wait for the output pipe to close after the shell exits before killing background
    processes that still hold it (and, failing that, giving up on the remaining output)."""
    name: str = "run_command"
    execution: ExecutionMode = "exclusive"

    @property
    def description(self) -> str:
        text = (
            "Run a shell command (`/bin/sh -c`) starting in the working directory; it is not confined to that "
            "directory. stdout and stderr are combined; output beyond "
            f"{self.max_output_bytes} bytes is cut in the middle. The command is killed after `timeout_seconds` "
            f"(default {self.timeout:g}, at most {self.max_timeout:g}). Background processes that keep the output "
            "open are killed when the command exits; redirect their output to detach them."
        )
        rule = self.policy.describe()
        return f"{text} {rule}" if rule else text

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line."},
                "timeout_seconds": {"type": "number", "minimum": 0, "description": "Seconds before the kill."},
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        command: str = args["command"]
        if not self.policy.allows(command):
            # The approval hook may wait (for a person): the call's cancel signal ends the wait.
            decision = asyncio.ensure_future(self.policy.refusal(command))
            cancelled = asyncio.ensure_future(ctx.cancel.wait())
            try:
                done, _ = await asyncio.wait({decision, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                cancelled.cancel()
                if not decision.done():
                    decision.cancel()
            if decision not in done:
                return ToolOutcome.failure(
                    "command cancelled while waiting for approval; nothing was run",
                    code=TOOL_ABORTED,
                    name="AbortError",
                    meta={"command": command},
                )
            reason = decision.result()
            if reason is not None:
                return ToolOutcome.failure(
                    f"command not allowed: {command!r} ({reason}); nothing was run. {self.policy.hint}",
                    code=COMMAND_NOT_ALLOWED,
                    meta={"command": command},
                )
        timeout = float(args.get("timeout_seconds", self.timeout))
        if timeout <= 0:
            timeout = self.timeout
        timeout = min(timeout, self.max_timeout)
        return await self._run(command, timeout, ctx)

    async def _run(self, command: str, timeout: float, ctx: ToolContext) -> ToolOutcome:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        try:
            # One pipe for stdout and stderr keeps their interleaving; we own the read end, so we can
            # stop reading even if some escaped process keeps the write end open forever.
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                cwd=ctx.cwd,
                start_new_session=True,
            )
        except OSError as err:
            os.close(read_fd)
            return _os_failure(err, f"cannot start the command in {_clean(str(ctx.cwd))}").outcome
        finally:
            os.close(write_fd)
        reader = asyncio.StreamReader()
        capture = _Capture(self.max_output_bytes)
        exited = asyncio.create_task(proc.wait())
        cancelled = asyncio.create_task(ctx.cancel.wait())
        pump: asyncio.Task[None] | None = None
        transport: asyncio.BaseTransport | None = None
        ending: Literal["exited", "timeout", "aborted"] = "exited"
        lingering = False
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
            )
            pump = asyncio.create_task(_pump(reader, capture))
            done, _ = await asyncio.wait({exited, cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if exited not in done:
                ending = "aborted" if cancelled in done else "timeout"
                _kill_group(proc.pid)
                await exited
            try:
                await asyncio.wait_for(asyncio.shield(pump), self.drain_grace)
            except TimeoutError:
                lingering = True
                _kill_group(proc.pid)  # background jobs still hold the pipe
                try:
                    await asyncio.wait_for(asyncio.shield(pump), self.drain_grace)
                except TimeoutError:
                    pump.cancel()  # a process outside the group holds it: give up on the rest
        finally:
            cancelled.cancel()
            if not exited.done():  # we are being cancelled ourselves: leave nothing running
                _kill_group(proc.pid)
                exited.cancel()
            if pump is not None and not pump.done():
                pump.cancel()
            if transport is not None:
                transport.close()

        code = proc.returncode
        text = capture.render()
        if text and not text.endswith("\n"):
            text += "\n"
        meta: dict[str, Any] = {"exitCode": code, "outputBytes": capture.total}
        if capture.omitted:
            meta["truncated"] = True
            meta["notes"] = [OUTPUT_TRUNCATED]
        if lingering:
            meta["killedBackground"] = True
        if ending == "timeout":
            meta["timedOut"] = True
            return ToolOutcome.failure(
                f"command timed out after {timeout:g} s and was killed\n{text}",
                code=TIMEOUT,
                name="TimeoutError",
                meta=meta,
            )
        if ending == "aborted":
            return ToolOutcome.failure(
                f"command cancelled and killed\n{text}", code=TOOL_ABORTED, name="AbortError", meta=meta
            )
        status = f"[exit code: {code}]" if code is not None and code >= 0 else f"[killed by signal {-(code or 0)}]"
        if lingering:
            status += " [background processes that kept the output open were killed]"
        # A non-zero exit is data, not a tool failure (grep exits 1 when nothing matches).
        return ToolOutcome.text(f"{text}{status}", meta=meta)


# --- registry -------------------------------------------------------------------------------------


def builtin_registry(
    cwd_policy: CwdPolicy = "confined",
    *,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    command_policy: CommandPolicy = ALLOW_ALL_COMMANDS,
) -> ToolRegistry:
    """A registry with the four built-in tools: the file tools confined according to ``cwd_policy``, and
    ``run_command`` (never confined by ``cwd_policy``) starting only what ``command_policy`` allows."""
    if cwd_policy not in ("confined", "read-outside", "unconfined"):
        raise ToolDefinitionError(f"unknown cwd_policy: {cwd_policy!r}")
    read_outside = cwd_policy != "confined"
    write_outside = cwd_policy == "unconfined"
    registry = ToolRegistry()
    registry.register(ReadFileTool(allow_outside_cwd=read_outside, max_output_bytes=max_output_bytes))
    registry.register(ListDirTool(allow_outside_cwd=read_outside, max_entries=max_entries))
    registry.register(WriteFileTool(allow_outside_cwd=write_outside))
    registry.register(
        RunCommandTool(policy=command_policy, timeout=command_timeout, max_output_bytes=max_output_bytes)
    )
    return registry
