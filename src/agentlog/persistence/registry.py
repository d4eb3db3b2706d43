"""Backends by name: the built-ins, those other packages register, and any ``module:attribute`` path.

A backend is opened by a *factory*: a callable that takes the :class:`BackendOptions` of a command (the
store directory, read-only or not, the JSONL encoding, the PostgreSQL address) and returns a
:class:`~agentlog.persistence.backend.Backend`. :func:`resolve_backend` finds the factory of a name:

* ``jsonl``, ``sqlite``, ``postgres`` and ``memory``: the built-in backends (their factories are in this
  module; nothing is looked up and no other backend is imported);
* a name another package registers in the entry-point group ``agentlog.backends``::

      [project.entry-points."agentlog.backends"]
      mystore = "mystore.agentlog:open_backend"

* ``module:attribute`` (``mystore.agentlog:open_backend``): that attribute of that module, imported.

A name that is none of these, or that cannot be loaded, is :class:`~agentlog.errors.UnknownBackendError`
(``INVALID_OPTION``). ``agentlog --backend NAME`` accepts every such name (see :mod:`agentlog.cli.options`);
the built-in names take the command line's own path there, so a command that names one never reads the
installed packages' entry points.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Final, Protocol, cast

from ..errors import InvalidOptionError, UnknownBackendError
from .backend import Backend

__all__ = [
    "BUILTIN_BACKENDS",
    "ENTRY_POINT_GROUP",
    "BackendFactory",
    "BackendOptions",
    "open_named_backend",
    "registered_backends",
    "resolve_backend",
]

ENTRY_POINT_GROUP: Final = "agentlog.backends"
"""The entry-point group a package registers its backend factories in."""

SQLITE_FILENAME: Final = "sessions.sqlite3"
"""The database file of a SQLite store in its store directory (what ``agentlog --backend sqlite`` opens)."""


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What a command knows about the store it opens; a factory uses what applies to its backend.

    ``store`` is the absolute store directory (``--store``, else ``$AGENTLOG_STORE``, else
    ``./.agentlog``). ``read_only`` is for the inspection commands: the factory must not create
    anything. ``compression`` is the JSONL encoding of new sessions (``zstd`` or ``none``); ``dsn`` and
    ``schema`` address a database store (``--dsn``, ``--pg-schema``), ``None`` when not given.
    """

    store: str
    read_only: bool = False
    compression: str = "zstd"
    dsn: str | None = None
    schema: str | None = None


class BackendFactory(Protocol):
    """Opens a backend for a command: a function, or a backend class whose constructor takes the options."""

    def __call__(self, options: BackendOptions, /) -> Backend: ...


def open_jsonl(options: BackendOptions) -> Backend:
    """The JSONL store in ``options.store`` (read-only: whichever encoding the store holds)."""
    from .jsonl.backend import JsonlBackend

    if options.read_only:
        return JsonlBackend(options.store, compression="auto", read_only=True)
    return JsonlBackend(options.store, compression="none" if options.compression == "none" else "zstd")


def open_sqlite(options: BackendOptions) -> Backend:
    """The SQLite store ``sessions.sqlite3`` in ``options.store``."""
    from .sqlite.backend import SqliteBackend

    return SqliteBackend(os.path.join(options.store, SQLITE_FILENAME), read_only=options.read_only)


def open_postgres(options: BackendOptions) -> Backend:
    """The PostgreSQL store at ``options.dsn`` in ``options.schema`` (default ``agentlog``)."""
    if not options.dsn:
        raise InvalidOptionError("the postgres backend needs a database: a DSN (postgresql://USER@HOST:PORT/DATABASE)")
    from .postgres.backend import DEFAULT_SCHEMA, PostgresBackend

    return PostgresBackend(options.dsn, schema=options.schema or DEFAULT_SCHEMA, read_only=options.read_only)


def open_memory(options: BackendOptions) -> Backend:
    """A new, empty in-process store (nothing outlives the backend)."""
    from .memory import MemoryBackend

    return MemoryBackend()


BUILTIN_BACKENDS: Final[dict[str, str]] = {
    "jsonl": f"{__name__}:open_jsonl",
    "sqlite": f"{__name__}:open_sqlite",
    "postgres": f"{__name__}:open_postgres",
    "memory": f"{__name__}:open_memory",
}
"""The built-in names and their factories (``pyproject.toml`` registers the same entry points)."""


def registered_backends() -> dict[str, str]:
    """Every backend name with its factory's ``module:attribute``: the built-ins, then the entry points of
    the installed packages (a built-in name wins over an entry point of the same name), sorted by name."""
    found = dict(_entry_points())
    found.update(BUILTIN_BACKENDS)
    return dict(sorted(found.items()))


def resolve_backend(name: str) -> BackendFactory:
    """The factory of a backend name (see the module's docstring), or :class:`UnknownBackendError`."""
    if type(name) is not str or not name:
        raise UnknownBackendError(f"a backend name must be a non-empty string, got {name!r}")
    target = BUILTIN_BACKENDS.get(name)
    if target is None:
        target = name if ":" in name else _entry_points().get(name)
    if target is None:
        known = ", ".join(registered_backends())
        raise UnknownBackendError(
            f'unknown backend "{name}": not one of {known} (built in, or registered in the entry-point group '
            f"{ENTRY_POINT_GROUP}), nor a module:attribute path to a backend factory"
        )
    factory = _load(name, target)
    if not callable(factory):
        raise UnknownBackendError(f'backend "{name}": {target} is not callable (a backend factory or class)')
    return cast(BackendFactory, factory)


def open_named_backend(name: str, options: BackendOptions) -> Backend:
    """Open the backend named ``name`` (:func:`resolve_backend`) with ``options``."""
    factory = resolve_backend(name)
    backend = factory(options)
    if not isinstance(backend, Backend):
        raise UnknownBackendError(f'backend "{name}": its factory returned {type(backend).__name__}, not a Backend')
    return backend


def _load(name: str, target: str) -> object:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UnknownBackendError(f'backend "{name}": "{target}" is not a module:attribute path')
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownBackendError(f'backend "{name}": cannot import {module_name} ({err})') from err
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UnknownBackendError(f'backend "{name}": {module_name} has no attribute {attribute}') from None
    return found


def _entry_points() -> dict[str, str]:
    """The ``agentlog.backends`` entry points of the installed packages (imported only when asked)."""
    from importlib.metadata import entry_points

    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}
