"""Which store a file backend opens: the ``store_identity()`` of the built-in file backends.

What :class:`~agentlog.persistence.backend.IdentifiesStore` asks for, computed here so the backends'
methods are one line each. A derived file beside the store (the projection cache) is bound to it.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from typing import Final

from ..errors import AgentlogError

__all__ = ["directory_identity", "sqlite_file_identity"]

READ_TIMEOUT_S: Final = 5.0


def directory_identity(root: str, kind: str = "jsonl") -> str | None:
    """``<kind>:<real path>:<inode>`` of a store directory that has no id of its own, or ``None`` while
    it does not exist: a copy elsewhere, or a directory recreated at the same path, is another store."""
    real = os.path.realpath(root)
    try:
        inode = os.stat(real).st_ino
    except OSError:
        return None
    return f"{kind}:{real}:{inode}"


def sqlite_file_identity(path: str, own: Callable[[], str | None] | None = None) -> str | None:
    """``sqlite-store:<store id>`` of the SQLite store at ``path`` (``persistence_state.store_id``, a random
    id written with the database: a new database at the same path is another store), or ``None`` while
    there is no database file or no id in it.

    ``own`` asks the open backend first (its own connection: a second read-only open of a WAL database
    would have to create its ``-shm`` file, which a full or read-only disk refuses); the file is read
    directly when it answers nothing or fails (a closed backend).
    """
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return None
    if own is not None:
        try:
            found = own()
        except AgentlogError:
            found = None  # e.g. closed: read the file directly below
        if type(found) is str:
            return f"sqlite-store:{found}"
    try:
        uri = "file:" + urllib.parse.quote(real) + "?mode=ro"
        if not os.path.exists(real + "-wal"):
            # Everything committed is in the main file (a clean close removes -wal and -shm), and the store
            # id never changes once written: read it as immutable. A plain mode=ro connection to a WAL
            # database would create -wal and -shm beside the store of a read command.
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT_S)
        try:
            row = conn.execute("SELECT store_id FROM persistence_state WHERE singleton = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return f"sqlite-store:{row[0]}" if row is not None and type(row[0]) is str else None
