"""Session query and search: one logical corpus of live and stored sessions (runtime spec §4).

:class:`SessionQuery` reads the corpus — live sessions of the store win over their stored logs,
stored logs are read without repair — and answers listings, filters, windows and lineage traces.
:class:`SqliteSearch` adds full-text search over a dedicated derived SQLite FTS5 index, reconciled with
the store by revision inside every search, with a substring companion index so that Chinese and
Japanese queries find text inside longer runs (which the original's ``unicode61`` tokens cannot).
Every error is a :class:`SessionQueryError` whose ``code`` is one of :data:`SESSION_QUERY_CODES`.
"""

from ..errors import SESSION_QUERY_CODES, SessionQueryError
from .cjk import has_cjk, uses_substring
from .documents import SURFACES, build_documents, extract_event_text, surface_classes
from .engine import SessionQuery, Signal, assert_headers_compatible
from .normalize import make_snippet
from .sqlite import INDEX_FILE_NAME, SqliteSearch, default_index_path

__all__ = [
    "INDEX_FILE_NAME",
    "SESSION_QUERY_CODES",
    "SURFACES",
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
