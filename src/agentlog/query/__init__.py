"""Session query and search: one logical corpus of live and stored sessions (runtime spec §4).

:class:`SessionQuery` reads the corpus — live sessions of the store win over their stored logs,
stored logs are read without repair — and answers listings, filters, windows and lineage traces.
:class:`SqliteSearch` adds full-text search over a dedicated derived SQLite FTS5 index, reconciled with
the store by revision inside every search, with a substring companion index so that Chinese and
Japanese queries find text inside longer runs (which the original's ``unicode61`` tokens cannot).
:class:`PostgresSearch` is the same search with its index inside a PostgreSQL store's database, shared by
every host reading the store (chosen automatically for a PostgreSQL store; needs the ``postgres`` extra).
Every error is a :class:`SessionQueryError` whose ``code`` is one of :data:`SESSION_QUERY_CODES`.
"""

from typing import TYPE_CHECKING, Any

from ..errors import SESSION_QUERY_CODES, SessionQueryError
from .cjk import has_cjk, uses_substring
from .documents import SURFACES, build_documents, extract_event_text, surface_classes
from .engine import SessionQuery, Signal, assert_headers_compatible
from .normalize import make_snippet
from .sqlite import INDEX_FILE_NAME, SqliteSearch, default_index_path

if TYPE_CHECKING:
    from .postgres import PostgresSearch


def __getattr__(name: str) -> Any:
    """``PostgresSearch`` on first use: it needs the optional ``psycopg`` (the ``postgres`` extra)."""
    if name == "PostgresSearch":
        from .postgres import PostgresSearch

        return PostgresSearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INDEX_FILE_NAME",
    "SESSION_QUERY_CODES",
    "SURFACES",
    "PostgresSearch",
    "SessionQuery",
    "SessionQueryError",
    "Signal",
    "SqliteSearch",
    "assert_headers_compatible",
    "build_documents",
    "default_index_path",
    "extract_event_text",
    "has_cjk",
    "make_snippet",
    "surface_classes",
    "uses_substring",
]
