"""Options shared by the commands (``--store``, ``--backend``, ``--compression``, ``--dsn``, ``--pg-schema``,
``--json``), declared once, and the backend they open.

``--backend postgres`` opens a PostgreSQL store: ``--dsn`` (else ``$AGENTLOG_DSN``) names the database,
``--pg-schema`` (else ``$AGENTLOG_PG_SCHEMA``, else the backend's default ``agentlog``) the schema in it.
The PostgreSQL backend (and with it ``psycopg``) is imported only then, so the other backends never need
the ``agentlog[postgres]`` extra. ``--store`` does not locate a PostgreSQL store; its derived files (the
projection cache and the search index) live in the reading host's cache directory instead (see
:func:`agentlog.query.sqlite.default_index_path`).

A command takes one ``opts: StoreOptions`` parameter and is decorated with ``@shared_options()``; its
command line gets the shared options in that parameter's place (after the command's arguments, before
its own options), so ``agentlog ls --store DIR --json`` reads as it always has. :class:`OptionGroup` is
the mechanism; ``agent_commands`` uses it too, for the model options ``run`` and ``resume`` share.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ..errors import InvalidOptionError
from ..persistence.backend import Backend


class BackendKind(StrEnum):
    jsonl = "jsonl"
    sqlite = "sqlite"
    postgres = "postgres"


BackendName = BackendKind | str
"""What ``--backend`` gives: a built-in :class:`BackendKind`, or the name of another backend (registered in
the entry-point group ``agentlog.backends``, or a ``module:attribute`` path), resolved when it is opened
(:mod:`agentlog.persistence.registry`)."""


def parse_backend(value: str) -> BackendName:
    """A built-in name as its :class:`BackendKind` (exactly as before); any other name as given, looked up
    only when the backend is opened (so naming a built-in never reads the installed entry points)."""
    if isinstance(value, BackendKind):
        return value
    try:
        return BackendKind(value)
    except ValueError:
        return value


class Compression(StrEnum):
    zstd = "zstd"
    none = "none"


# ``readable=False``: typer would refuse a store root the user cannot read as a usage error (exit 2, a
# usage panel, no JSON error); it is a fault of the store, reported by the backend as the typed
# STORAGE_PERMISSION_DENIED like every other refused storage operation.
StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store", help="Store root (default: $AGENTLOG_STORE or ./.agentlog).", show_default=False, readable=False
    ),
]
BackendOption = Annotated[
    str,  # typer takes no union: parse_backend gives the BackendKind of a built-in name
    typer.Option("--backend", help="Storage backend.", parser=parse_backend, metavar="<jsonl|sqlite|postgres>"),
]
CompressionOption = Annotated[Compression, typer.Option("--compression", help="JSONL physical encoding.")]
DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL connection string for --backend postgres (default: $AGENTLOG_DSN).",
        show_default=False,
    ),
]
PgSchemaOption = Annotated[
    str | None,
    typer.Option(
        "--pg-schema",
        help="PostgreSQL schema of the store (default: $AGENTLOG_PG_SCHEMA or agentlog).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

SQLITE_FILENAME = "sessions.sqlite3"
DSN_ENV = "AGENTLOG_DSN"
PG_SCHEMA_ENV = "AGENTLOG_PG_SCHEMA"


def _store_root(store: Path | None) -> Path:
    if store is not None:
        return store
    return Path(os.environ.get("AGENTLOG_STORE") or ".agentlog")


def resolve_dsn(dsn: str | None) -> str:
    """The DSN of a PostgreSQL store: ``--dsn``, else ``$AGENTLOG_DSN``; neither is ``INVALID_OPTION``."""
    found = dsn if dsn else os.environ.get(DSN_ENV)
    if not found:
        raise InvalidOptionError(
            f"--backend postgres needs a database: pass --dsn postgresql://USER@HOST:PORT/DATABASE or set ${DSN_ENV}"
        )
    return found


def _open_postgres(dsn: str | None, schema: str | None, read_only: bool) -> Backend:
    resolved = resolve_dsn(dsn)
    schema = schema if schema else (os.environ.get(PG_SCHEMA_ENV) or None)
    try:
        from ..persistence.postgres.backend import DEFAULT_SCHEMA, PostgresBackend
    except ImportError as err:
        raise InvalidOptionError(
            f"--backend postgres needs the PostgreSQL driver ({err}): pip install 'agentlog[postgres]'"
        ) from None
    try:
        backend: Backend = PostgresBackend(resolved, schema=schema or DEFAULT_SCHEMA, read_only=read_only)
    except ValueError as err:
        raise InvalidOptionError(f"--pg-schema: {err}") from None
    return backend


def open_backend(
    store: Path | None,
    backend: BackendName,
    compression: Compression,
    *,
    read_only: bool = False,
    dsn: str | None = None,
    pg_schema: str | None = None,
) -> Backend:
    """The backend of a command (constructing one never writes to the store).

    ``read_only=True`` is for the inspection commands: nothing is ever created (a store or database
    that does not exist is ``STORE_NOT_FOUND``), and JSONL reads whichever encoding the store holds,
    whatever ``--compression`` says (that option chooses the encoding of new sessions). A PostgreSQL
    store is named by ``dsn``/``pg_schema`` (or their environment variables), not by ``store``. Any
    other backend name is opened by its factory (:func:`agentlog.persistence.registry.open_named_backend`)
    with these options; an unknown one is ``UNKNOWN_BACKEND``.
    """
    if not isinstance(backend, BackendKind):
        from ..persistence.registry import BackendOptions, open_named_backend

        options = BackendOptions(
            str(_store_root(store).absolute()),
            read_only=read_only,
            compression=compression.value,
            dsn=dsn if dsn else (os.environ.get(DSN_ENV) or None),
            schema=pg_schema if pg_schema else (os.environ.get(PG_SCHEMA_ENV) or None),
        )
        return open_named_backend(backend, options)
    if backend is BackendKind.postgres:
        return _open_postgres(dsn, pg_schema, read_only)
    root = _store_root(store).absolute()
    if backend is BackendKind.sqlite:
        from ..persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / SQLITE_FILENAME), read_only=read_only)
    from ..persistence.jsonl.backend import JsonlBackend

    if read_only:
        return JsonlBackend(str(root), compression="auto", read_only=True)
    return JsonlBackend(str(root), compression=compression.value)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """The shared options of one command: the store, its backend and encoding (or its database), and
    ``--json``."""

    store: Path | None = None
    backend: BackendName = BackendKind.jsonl
    compression: Compression = Compression.zstd
    dsn: str | None = None
    pg_schema: str | None = None
    as_json: bool = False

    @property
    def root(self) -> Path:
        """The store root as given (``--store``, else ``$AGENTLOG_STORE``, else ``./.agentlog``)."""
        return _store_root(self.store)

    def open_backend(self, *, read_only: bool = False) -> Backend:
        """:func:`open_backend` with these options."""
        return open_backend(
            self.store, self.backend, self.compression, read_only=read_only, dsn=self.dsn, pg_schema=self.pg_schema
        )


R = TypeVar("R")


class OptionGroup:
    """Options declared once for every command that takes them, parsed into one dataclass.

    ``OptionGroup(cls, {field: typer annotation, ...})`` names the command-line declaration of each
    field of the frozen dataclass ``cls`` (its defaults are the fields' defaults). Calling the group
    gives a decorator: the command takes one parameter annotated ``cls``, which is replaced, in the
    signature typer reads, by one parameter per option in that place (all, only ``names``, or all but
    ``exclude``); typer parses them and the command receives one ``cls`` (an option a command does not
    declare keeps its default). Groups stack: each decorator expands its own parameter.
    """

    def __init__(self, cls: type[Any], options: Mapping[str, Any]) -> None:
        defaults = {field.name: field.default for field in dataclasses.fields(cls)}
        if set(options) != set(defaults) or any(value is dataclasses.MISSING for value in defaults.values()):
            raise TypeError(f"{cls.__name__}: declare every field once, each with a default")
        self.cls = cls
        self.options = {name: (options[name], defaults[name]) for name in defaults}

    def __call__(self, *names: str, exclude: Collection[str] = ()) -> Callable[[Callable[..., R]], Callable[..., R]]:
        chosen = [name for name in (names or tuple(self.options)) if name not in exclude]
        unknown = [name for name in [*chosen, *exclude] if name not in self.options]
        if unknown:
            raise ValueError(f"not an option of {self.cls.__name__}: {', '.join(unknown)}")
        return functools.partial(self._expand, tuple(chosen))

    def _expand(self, chosen: tuple[str, ...], command: Callable[..., R]) -> Callable[..., R]:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        slots = [i for i, param in enumerate(params) if param.annotation is self.cls]
        if len(slots) != 1:
            raise TypeError(f"{command.__name__} needs exactly one parameter annotated {self.cls.__name__}")
        index = slots[0]
        slot = params[index]
        clash = {param.name for param in params} & set(chosen)
        if clash:
            raise TypeError(f"{command.__name__} declares a shared option itself: {', '.join(sorted(clash))}")
        params[index : index + 1] = [
            inspect.Parameter(name, slot.kind, default=self.options[name][1], annotation=self.options[name][0])
            for name in chosen
        ]
        cls = self.cls

        @functools.wraps(command)
        def with_options(*args: Any, **kwargs: Any) -> R:
            kwargs[slot.name] = cls(**{name: kwargs.pop(name) for name in chosen if name in kwargs})
            return command(*args, **kwargs)

        with_options.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        with_options.__annotations__ = {param.name: param.annotation for param in params}
        if signature.return_annotation is not inspect.Signature.empty:
            with_options.__annotations__["return"] = signature.return_annotation
        return with_options


DEFAULT_OPTIONS = StoreOptions()

shared_options = OptionGroup(
    StoreOptions,
    {
        "store": StoreOption,
        "backend": BackendOption,
        "compression": CompressionOption,
        "dsn": DsnOption,
        "pg_schema": PgSchemaOption,
        "as_json": JsonOption,
    },
)
"""``@shared_options()`` gives a command ``--store``, ``--backend``, ``--compression``, ``--dsn``,
``--pg-schema`` and ``--json`` (``@shared_options("store", "as_json")`` only those two) as its
``opts: StoreOptions`` parameter."""
