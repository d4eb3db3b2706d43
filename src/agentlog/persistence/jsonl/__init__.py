"""JSONL file backend: one ``.jsonl`` (raw) or ``.jsonl.zst`` (checksummed zstd frames) log per session."""

from .backend import *  # noqa: F403 - the backend module's __all__ is this package's public API
from .backend import __all__ as __all__
