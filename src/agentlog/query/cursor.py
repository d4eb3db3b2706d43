"""Opaque pagination cursors (runtime spec §4.3 Cursors).

A cursor is ``base64url(JSON {version: 1, instance, scope, fingerprint, generation, offset})`` without
padding, as the original's ``Buffer.toString('base64url')``. It binds a page offset to four things, so a
cursor can only continue the exact result list it came from:

* ``instance`` — the random id of one search service instance (cursors do not survive a restart,
  where offsets would point into a different index);
* ``scope`` — ``"sessions"`` or ``"events"``;
* ``fingerprint`` — :func:`agentlog.query.normalize.request_fingerprint` of the normalized request;
* ``generation`` — the corpus version the offsets count in: for the sessions scope the service's
  in-memory global generation (any corpus or persistence-topology change), for the events scope the
  target session's row generation spelled ``live:<g>`` or ``persisted:<epoch>:<g>`` (changes to other
  sessions keep it valid). Like the original, the generation is carried and compared as text, so
  ``3`` and ``"3"`` are the same generation.

A cursor that is not ours (undecodable, another version, instance, scope or request, an offset that is
not a non-negative safe integer) is ``SESSION_QUERY_INVALID_CURSOR``; ours but from an older generation
is ``SESSION_QUERY_STALE_CURSOR`` — the caller restarts from the first page.
"""

from __future__ import annotations

import base64
import json
from typing import Final, Literal

from ..errors import SessionQueryError
from ..kernel.jsonvalue import MAX_SAFE_INTEGER

__all__ = ["CURSOR_VERSION", "CursorScope", "decode_cursor", "encode_cursor"]

CURSOR_VERSION: Final = 1

CursorScope = Literal["sessions", "events"]


def encode_cursor(*, instance: str, scope: str, fingerprint: str, generation: str | int, offset: int) -> str:
    """The opaque cursor continuing at ``offset`` for this instance, scope, request and generation."""
    payload = {
        "version": CURSOR_VERSION,
        "instance": instance,
        "scope": scope,
        "fingerprint": fingerprint,
        "generation": str(generation),
        "offset": offset,
    }
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _invalid() -> SessionQueryError:
    return SessionQueryError("session-search cursor is invalid", "SESSION_QUERY_INVALID_CURSOR")


def _is_offset(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def decode_cursor(cursor: str, *, instance: str, scope: str, fingerprint: str, generation: str | int) -> int:
    """The offset ``cursor`` carries, after checking it belongs to this instance, scope, request and generation.

    Raises ``SESSION_QUERY_INVALID_CURSOR`` or ``SESSION_QUERY_STALE_CURSOR`` (see the module docstring).
    """
    if not isinstance(cursor, str):
        raise _invalid()
    try:
        raw = cursor.encode("ascii")
        payload = json.loads(base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4)).decode("utf-8"))
    except (ValueError, RecursionError) as error:  # binascii, Unicode and JSON errors are all ValueErrors
        raise _invalid() from error
    if not (
        isinstance(payload, dict)
        and type(payload.get("version")) is int
        and payload["version"] == CURSOR_VERSION
        and payload.get("instance") == instance
        and payload.get("scope") == scope
        and payload.get("fingerprint") == fingerprint
        and _is_offset(payload.get("offset"))
    ):
        raise _invalid() from ValueError("cursor does not belong to this normalized request")
    if payload.get("generation") != str(generation):
        raise SessionQueryError(
            "session-search cursor is stale because its relevant corpus changed", "SESSION_QUERY_STALE_CURSOR"
        )
    offset: int = payload["offset"]
    return offset
