"""JSONL store: error mapping (typed ``OSError``/``MemoryError``, located corruption, layout refusals).

Every public method of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend` is wrapped by
:func:`_typed_os_errors`; :class:`_ErrorMapping` builds the typed errors that name the file, the byte
offset and the remedy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final, Literal, ParamSpec, TypeVar

from ...errors import PersistenceError, ResourceExhaustedError, SessionPersistenceCorruptionError
from ...kernel.jsoncodec import dumps
from ..storage_errors import storage_error
from ._scanner import ReaderLimitError
from ._zstdframes import FrameTooLargeError

_REMEDY: Final = (
    "The file was not modified; restore it from a backup or export the readable prefix with "
    "'agentlog export --partial'."
)
_LIMIT_REMEDY: Final = (
    "The file was not modified; if it is trusted, open it with larger max_line_bytes, max_frame_bytes or "
    "max_depth limits."
)
_IDENTITY_REMEDY: Final = (
    "The file was not modified; move the session directory back to the place its header names, or restore it "
    "from a backup."
)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _typed_os_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Public backend methods never leak bare ``OSError``/``MemoryError``: both become typed errors."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except OSError as err:
            raise storage_error(err) from err
        except ResourceExhaustedError:
            raise
        except MemoryError as err:
            raise ResourceExhaustedError(
                "out of memory while reading the session store; nothing was truncated, repaired or written (this "
                "is not damage). Retry with more memory available, or set a smaller max_log_bytes budget so an "
                "oversized log is refused before memory runs out"
            ) from err

    return wrapper


class _ErrorMapping:
    """The typed errors of a JSONL store (a mixin of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`)."""

    compression: Literal["zstd", "none"]
    _opposite: str

    def _corrupt(self, text: str, path: str, offset: int, *, limit: bool = False) -> SessionPersistenceCorruptionError:
        remedy = _LIMIT_REMEDY if limit else _REMEDY
        return SessionPersistenceCorruptionError(
            f"{text} — {path}, byte {offset}. {remedy}", location=path, offset=offset
        )

    def _located(
        self, err: SessionPersistenceCorruptionError, path: str, offset: int | None = None
    ) -> SessionPersistenceCorruptionError:
        """Re-issue a bare scanner/frame error with the file, physical offset and a remedy."""
        at = err.offset if offset is None else offset
        limit = isinstance(err, (ReaderLimitError, FrameTooLargeError))
        return self._corrupt(err.message, path, at or 0, limit=limit)

    def _mismatch(self, path: str) -> PersistenceError:
        return PersistenceError(
            f"session artifact {dumps(path).decode()} uses {self._opposite}, but this backend is configured for "
            f"compression {dumps(self.compression).decode()}; use a separate root or select the matching "
            "compression mode"
        )

    @staticmethod
    def _legacy(path: str) -> PersistenceError:
        return PersistenceError(
            f"session artifact {dumps(path).decode()} uses the unsupported flat-file layout; use a separate root "
            "or move it into a project/session directory before loading"
        )

    @staticmethod
    def _duplicate(session_id: str) -> PersistenceError:
        return PersistenceError(f'duplicate JSONL session id "{session_id}" appears in multiple project directories')
