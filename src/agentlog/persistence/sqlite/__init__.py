"""SQLite backend: schema 17, one database holding many sessions (packed chunk rows, WAL)."""

from .backend import *  # noqa: F403 - the backend module's __all__ is this package's public API
from .backend import __all__ as __all__
