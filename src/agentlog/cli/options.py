"""Options shared by the commands (``--store``, ``--backend``, ``--compression``, ``--json``), declared
once, and the backend they open.

A command takes one ``opts: StoreOptions`` parameter and is decorated with :func:`shared_options`; its
command line gets the shared options in that parameter's place (after the command's arguments, before
its own options), so ``agentlog ls --store DIR --json`` reads as it always has.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

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


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """The shared options of one command: the store, its backend and encoding, and ``--json``."""

    store: Path | None = None
    backend: BackendKind = BackendKind.jsonl
    compression: Compression = Compression.zstd
    as_json: bool = False

    @property
    def root(self) -> Path:
        """The store root as given (``--store``, else ``$AGENTLOG_STORE``, else ``./.agentlog``)."""
        return _store_root(self.store)

    def open_backend(self, *, read_only: bool = False) -> Backend:
        """:func:`open_backend` with these options."""
        return open_backend(self.store, self.backend, self.compression, read_only=read_only)


DEFAULT_OPTIONS = StoreOptions()

_SHARED_OPTIONS: dict[str, tuple[Any, Any]] = {
    "store": (StoreOption, DEFAULT_OPTIONS.store),
    "backend": (BackendOption, DEFAULT_OPTIONS.backend),
    "compression": (CompressionOption, DEFAULT_OPTIONS.compression),
    "as_json": (JsonOption, DEFAULT_OPTIONS.as_json),
}
"""Parameter name -> (typer annotation, default): the one declaration of each shared option."""

R = TypeVar("R")


def shared_options(*names: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a command the shared options (all four, or only ``names``, e.g. ``"store", "as_json"``).

    The command's ``opts: StoreOptions`` parameter is replaced, in the signature typer reads, by one
    parameter per shared option; typer parses them and the command receives them as one
    :class:`StoreOptions` (an option that is not declared keeps its default).
    """
    chosen = names or tuple(_SHARED_OPTIONS)
    unknown = [name for name in chosen if name not in _SHARED_OPTIONS]
    if unknown:
        raise ValueError(f"not a shared option: {', '.join(unknown)}")

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        slots = [i for i, param in enumerate(params) if param.annotation is StoreOptions]
        if len(slots) != 1:
            raise TypeError(f"{command.__name__} needs exactly one parameter annotated StoreOptions")
        index = slots[0]
        slot = params[index]
        shared = [
            inspect.Parameter(name, slot.kind, default=_SHARED_OPTIONS[name][1], annotation=_SHARED_OPTIONS[name][0])
            for name in chosen
        ]
        clash = {param.name for param in params} & set(chosen)
        if clash:
            raise TypeError(f"{command.__name__} declares a shared option itself: {', '.join(sorted(clash))}")
        params[index : index + 1] = shared

        @functools.wraps(command)
        def with_options(*args: Any, **kwargs: Any) -> R:
            kwargs[slot.name] = StoreOptions(**{name: kwargs.pop(name) for name in chosen if name in kwargs})
            return command(*args, **kwargs)

        with_options.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        with_options.__annotations__ = {param.name: param.annotation for param in params}
        if signature.return_annotation is not inspect.Signature.empty:
            with_options.__annotations__["return"] = signature.return_annotation
        return with_options

    return decorate
