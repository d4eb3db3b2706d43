"""Where the derived files of a store without a local path live: the reading host's cache directory.

A JSONL or SQLite store keeps its projection cache and search index beside itself (they are derived and
rebuildable, and a store copied elsewhere takes them along or rebuilds them). A PostgreSQL store has no
place on disk, and the derived files must not go into the database: they are SQLite files, written by
each reading host for itself, reconciled against the store's revisions on every use, so a host's copy
can fall behind but never serves a stale answer. Each host therefore keeps them in its own per-user
cache directory::

    $XDG_CACHE_HOME/agentlog/postgres/<key>/     (default ~/.cache/agentlog/postgres/<key>/)
        projections.sqlite                       the projection cache
        search.sqlite3                           (unused: a PostgreSQL store's search index is in its
                                                 database, agentlog.query.postgres)

``<key>`` is the first 16 hex digits of a SHA-256 of the store's address: its connection parameters
without the password (host, port, database, user, …, sorted) and its schema, so two stores on one
server (two databases, or two schemas of one database) never share a file, and the same store reached
with the same parameters always finds its files again. The directory is created owner-only (``0700``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Final

from .backend import IdentifiesStore

__all__ = [
    "HOST_CACHE_ENV",
    "POSTGRES_BACKEND_NAME",
    "POSTGRES_CACHE_FILE",
    "POSTGRES_IDENTITY_PREFIX",
    "POSTGRES_INDEX_FILE",
    "address_key",
    "derived_directory",
    "key_directory",
    "store_key",
]

logger = logging.getLogger("agentlog.persistence.host_cache")

HOST_CACHE_ENV: Final = "XDG_CACHE_HOME"
POSTGRES_BACKEND_NAME: Final = "session-persistence-postgres"
"""``PostgresBackend.name``."""
POSTGRES_IDENTITY_PREFIX: Final = "postgres:"
"""How a PostgreSQL store's ``store_identity()`` starts (the host-cache key follows)."""
POSTGRES_CACHE_FILE: Final = "projections.sqlite"
POSTGRES_INDEX_FILE: Final = "search.sqlite3"


def address_key(dsn: str, schema: str) -> str:
    """The host-cache key of the PostgreSQL store at ``dsn`` (its password left out) and ``schema``."""
    from psycopg.conninfo import conninfo_to_dict  # a PostgreSQL backend exists, so psycopg does

    params = {name: str(value) for name, value in conninfo_to_dict(dsn).items() if name != "password"}
    address = "\0".join(f"{name}={params[name]}" for name in sorted(params))
    return hashlib.sha256(f"{address}\0schema={schema}".encode()).hexdigest()[:16]


def store_key(backend: object) -> str | None:
    """The host-cache key of a store whose derived files live in this host's cache (a PostgreSQL store,
    whose :class:`~agentlog.persistence.backend.IdentifiesStore` identity is ``postgres:<key>``), else
    ``None``."""
    if not isinstance(backend, IdentifiesStore):
        return None
    identity = backend.store_identity()
    if identity is None or not identity.startswith(POSTGRES_IDENTITY_PREFIX):
        return None
    return identity[len(POSTGRES_IDENTITY_PREFIX) :]


def key_directory(key: str) -> str | None:
    """The (created) host-cache directory of the store with host-cache key ``key``, or ``None`` when it
    cannot be created (a warning is logged)."""
    base = os.environ.get(HOST_CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(os.path.abspath(base), "agentlog", "postgres", key)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as err:
        # Derived files are never needed for correctness: without a place for them the projection cache
        # stays in memory and search says it has no place for an index (INVALID_OPTION), not a traceback.
        logger.warning('host cache directory "%s" is unusable (%s); keeping derived files in memory', directory, err)
        return None
    return directory


def derived_directory(backend: object) -> str | None:
    """The (created) host-cache directory of a PostgreSQL store's derived files, else ``None`` (any other
    backend, or a directory that cannot be created: a warning is logged)."""
    key = store_key(backend)
    return None if key is None else key_directory(key)
