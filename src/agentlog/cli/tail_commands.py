"""The ``tail`` command: print a stored session's events as they are committed (reads only)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from ..errors import AgentlogError, DatabaseUnavailableError
from ..kernel.jsonvalue import thaw
from ..persistence.coordinator import PersistenceCoordinator
from ..persistence.tail import DEFAULT_POLL_INTERVAL_S, tail_events
from ._reading import _reader, _require_store
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json_line, _event_line, render_error


@shared_options()
def tail_command(
    session_id: Annotated[str, typer.Argument(help="The session to tail.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing events as they are committed, until Ctrl-C.")
    ] = False,
    from_seq: Annotated[int, typer.Option("--from-seq", min=0, help="Start at this seq (default: the first).")] = 0,
) -> None:
    """Print a session's stored events, in seq order; with --follow, each new one as it is committed.

    Nothing is written and no lock is taken, so a tail runs beside the session's writer (another
    process or, on PostgreSQL, another host). Every committed event is printed exactly once and in
    order. File and SQLite stores are polled (a revision check every 0.2 s); PostgreSQL waits on
    ``LISTEN/NOTIFY``, checking at least once a second. One line per event: seq, type and shortened
    data; with ``--json``, each event as one JSON object per line (NDJSON), exactly as ``export``
    writes it. Without ``--follow`` the command ends at the end of the stored log; with it, Ctrl-C
    ends it (exit code 0). A session that does not exist is ``SESSION_NOT_FOUND``. A follow outlives
    the store going away (``DATABASE_UNAVAILABLE``: a PostgreSQL restart, a lost connection): it says
    so once on standard error, reconnects with backoff and goes on at the next seq, printing nothing
    twice; without ``--follow`` that error ends the command (exit code 1). A refused login
    (``DATABASE_AUTH``) ends it either way: reconnecting would only be refused again.
    """
    try:
        storage = opts.open_backend(read_only=True)
        _require_store(storage, session_id)
        reader = _reader(storage)
        try:
            asyncio.run(_print_events(reader, session_id, from_seq, follow, opts.as_json))
        finally:
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    except KeyboardInterrupt:  # Ctrl-C ends a follow: a normal end, not a failure
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`agentlog tail ... | head`)
        _silence_stdout()


async def _print_events(
    reader: PersistenceCoordinator, session_id: str, from_seq: int, follow: bool, as_json: bool
) -> None:
    def on_retry(err: DatabaseUnavailableError, attempt: int, delay: float) -> None:
        if attempt != 1:  # one notice per outage; the retries go on quietly
            return
        notice = f"{err}; reconnecting with backoff until it answers (Ctrl-C to stop)"
        if as_json:
            _emit_json_line({"warning": {"code": err.code, "message": notice}}, stderr=True)
        else:
            line = Text.assemble(("warning", "bold yellow"), f" [{err.code}] {notice}")
            Console(stderr=True, soft_wrap=True).print(line, highlight=False)

    events = tail_events(
        reader, session_id, from_seq=from_seq, follow=follow, poll_interval=DEFAULT_POLL_INTERVAL_S, on_retry=on_retry
    )
    async for event in events:
        if as_json:
            _emit_json_line(thaw(event))
        else:
            sys.stdout.write(_event_line(event) + "\n")
            sys.stdout.flush()


def _silence_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's exit flush cannot fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
