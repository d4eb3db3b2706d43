"""Session query and search: one logical corpus of live and stored sessions (runtime spec §4).

:class:`SessionQuery` reads the corpus — live sessions of the store win over their stored logs,
stored logs are read without repair — and answers listings, filters, windows and lineage traces.
:class:`SqliteSearch` adds full-text search over a dedicated derived SQLite FTS5 index, reconciled with
the store by revision inside every search, with a substring companion index so that Chinese and
Japanese queries find text inside longer runs (which the original's ``unicode61`` tokens cannot).
"""

from ..errors import SESSION_QUERY_CODES, SessionQueryError

__all__ = ["SESSION_QUERY_CODES", "SessionQueryError"]
