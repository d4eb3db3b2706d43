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
``trace``), :mod:`.interop_commands` (``import``), :mod:`.copy_commands` (``copy``), :mod:`.tail_commands`
(``tail``), :mod:`.serve_commands` (``serve``, the inspector), :mod:`.lifecycle_commands` (``rm``, ``gc``)
and :mod:`.demo_commands`;
they take the shared options from :mod:`.options` and print through :mod:`.render`. A command's module
is imported only when that command runs (:func:`._app.lazy_command`): every command pays for what it
uses, not for the agent stack. The names below stay importable from here, loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._app import app, lazy_command

if TYPE_CHECKING:  # their types for mypy; at run time they load on first access (the command functions too)
    from .agent_commands import COMMAND_HINT, DEFAULT_MAX_RETRIES, DEFAULT_MAX_STEPS, DEFAULT_PROVIDER, MAX_REPLAY_GAP_S
    from .options import SQLITE_FILENAME, BackendKind, Compression, open_backend
    from .read_commands import PARTIAL_EXIT, PENDING_MARK

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

# The command table, in the order ``agentlog --help`` lists it: name, module, function.
_TABLE: tuple[tuple[str, str, str], ...] = (
    ("ls", ".read_commands", "ls_command"),
    ("export", ".read_commands", "export_command"),
    ("import", ".interop_commands", "import_command"),
    ("copy", ".copy_commands", "copy_command"),
    ("verify", ".read_commands", "verify_command"),
    ("run", ".agent_commands", "run_command"),
    ("resume", ".agent_commands", "resume_command"),
    ("show", ".read_commands", "show_command"),
    ("tail", ".tail_commands", "tail_command"),
    ("stats", ".projection_commands", "stats_command"),
    ("title", ".projection_commands", "title_command"),
    ("label", ".projection_commands", "label_command"),
    ("search", ".query_commands", "search_command"),
    ("trace", ".query_commands", "trace_command"),
    ("replay", ".agent_commands", "replay_command"),
    ("fork", ".agent_commands", "fork_command"),
    ("compact", ".agent_commands", "compact_command"),
    ("reindex", ".projection_commands", "reindex_command"),
    ("rm", ".lifecycle_commands", "rm_command"),
    ("gc", ".lifecycle_commands", "gc_command"),
    ("serve", ".serve_commands", "serve_command"),
    ("demo", ".demo_commands", "demo_command"),
)
for _name, _module, _function in _TABLE:
    lazy_command(_name, _module, _function)

_EXPORTS: dict[str, tuple[str, ...]] = {
    ".agent_commands": (
        "COMMAND_HINT",
        "DEFAULT_MAX_RETRIES",
        "DEFAULT_MAX_STEPS",
        "DEFAULT_PROVIDER",
        "MAX_REPLAY_GAP_S",
    ),
    ".options": ("SQLITE_FILENAME", "BackendKind", "Compression", "open_backend"),
    ".read_commands": ("PARTIAL_EXIT", "PENDING_MARK"),
}
for _name, _module, _function in _TABLE:
    _EXPORTS[_module] = (*_EXPORTS.get(_module, ()), _function)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
