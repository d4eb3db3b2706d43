"""Options shared by the commands (``--store``, ``--backend``, ``--compression``, ``--json``) and the
backend they open."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..persistence.backend import Backend


class BackendKind(StrEnum):
    jsonl = "jsonl"
    sqlite = "sqlite"


class Compression(StrEnum):
    zstd = "zstd"
    none = "none"


StoreOption = Annotated[
    Path | None,
    typer.Option("--store", help="Store root (default: $AGENTLOG_STORE or ./.agentlog).", show_default=False),
]
BackendOption = Annotated[BackendKind, typer.Option("--backend", help="Storage backend.")]
CompressionOption = Annotated[Compression, typer.Option("--compression", help="JSONL physical encoding.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

SQLITE_FILENAME = "sessions.sqlite3"


def _store_root(store: Path | None) -> Path:
    if store is not None:
        return store
    return Path(os.environ.get("AGENTLOG_STORE") or ".agentlog")


def open_backend(
    store: Path | None, backend: BackendKind, compression: Compression, *, read_only: bool = False
) -> Backend:
    """The backend of a command (constructing one never writes to the store).

    ``read_only=True`` is for the inspection commands: nothing is ever created (a store or database
    that does not exist is ``STORE_NOT_FOUND``), and JSONL reads whichever encoding the store holds,
    whatever ``--compression`` says (that option chooses the encoding of new sessions).
    """
    root = _store_root(store).absolute()
    if backend is BackendKind.sqlite:
        from ..persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / SQLITE_FILENAME), read_only=read_only)
    from ..persistence.jsonl.backend import JsonlBackend

    if read_only:
        return JsonlBackend(str(root), compression="auto", read_only=True)
    return JsonlBackend(str(root), compression=compression.value)
