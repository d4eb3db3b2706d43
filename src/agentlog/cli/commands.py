"""The ``agentlog`` command: inspect stored sessions, and run an agent over them.

The inspection commands read only (``ls``, ``export``, ``verify``, ``show`` and ``replay`` never write
and never take a writer lock). ``run``, ``resume``, ``fork`` and ``compact`` write through a
:class:`PersistenceCoordinator` and leave nothing live or locked when they return. Every command prints
readable output for people and, with ``--json``, a machine-readable document for scripts. On failure
the exit code is non-zero and, with ``--json``, ``{"error": {"code", "message"}}`` goes to stderr so a
script can branch on the stable code.

This module is the command table: it registers each command on the Typer app (:mod:`._app`) in the
order ``--help`` lists them. The commands live in :mod:`.read_commands` (``ls``, ``export``, ``verify``,
``show``), :mod:`.agent_commands` (``run``, ``resume``, ``replay``, ``fork``, ``compact``),
:mod:`.projection_commands` (``stats``, ``title``, ``reindex``), :mod:`.query_commands` (``search``,
``trace``), :mod:`.interop_commands` (``import``), :mod:`.tail_commands` (``tail``) and :mod:`.demo_commands`;
they take the shared options from :mod:`.options` and print through :mod:`.render`. The names below
stay importable from here.
"""

from __future__ import annotations

from ._app import app
from .agent_commands import (
    COMMAND_HINT,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_PROVIDER,
    MAX_REPLAY_GAP_S,
    compact_command,
    fork_command,
    replay_command,
    resume_command,
    run_command,
)
from .demo_commands import demo_command
from .interop_commands import import_command
from .options import SQLITE_FILENAME, BackendKind, Compression, open_backend
from .projection_commands import reindex_command, stats_command, title_command
from .query_commands import search_command, trace_command
from .read_commands import PARTIAL_EXIT, PENDING_MARK, export_command, ls_command, show_command, verify_command
from .tail_commands import tail_command

__all__ = [
    "COMMAND_HINT",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_PROVIDER",
    "MAX_REPLAY_GAP_S",
    "PARTIAL_EXIT",
    "PENDING_MARK",
    "SQLITE_FILENAME",
    "BackendKind",
    "Compression",
    "app",
    "main",
    "open_backend",
]

# The command table, in the order ``agentlog --help`` lists it.
app.command("ls")(ls_command)
app.command("export")(export_command)
app.command("import")(import_command)
app.command("verify")(verify_command)
app.command("run")(run_command)
app.command("resume")(resume_command)
app.command("show")(show_command)
app.command("tail")(tail_command)
app.command("stats")(stats_command)
app.command("title")(title_command)
app.command("search")(search_command)
app.command("trace")(trace_command)
app.command("replay")(replay_command)
app.command("fork")(fork_command)
app.command("compact")(compact_command)
app.command("reindex")(reindex_command)
app.command("demo")(demo_command)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
