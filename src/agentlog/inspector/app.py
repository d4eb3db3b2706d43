"""The inspector's web application: Starlette routes over :class:`~agentlog.inspector.views.Inspector`.

Pages (static HTML shells; the script fills them from the JSON API):

* ``GET /`` — the sessions page; ``GET /s/{id}`` — one session (``?at=SEQ`` is the permalink of a moment);
* ``GET /static/...`` — the page's CSS and JavaScript, shipped in the package.

The JSON API (every refusal is ``{"error": {"code", "message"}}`` with a typed code of
:mod:`agentlog.errors`):

* ``GET /api/sessions?q=&status=&label=KEY=VALUE&tag=&sort=&order=&offset=&limit=`` — the listing, filtered
  (``label``/``tag`` repeatable, all must match, served from the cache), sorted, paged;
* ``GET /api/search?q=&session=&limit=&cursor=`` — the search index's hits;
* ``GET /api/sessions/{id}`` — the session's summary (``?early=1``: the first paint, answered from the
  log's tail with ``status: validating`` while the whole log is validated in the background);
* ``GET /api/sessions/{id}/log?from=&limit=`` — a page of the log with rendering hints;
* ``GET /api/sessions/{id}/at/{seq}?mfrom=&mlimit=&logFrom=&logTo=`` — the state right after ``seq``
  (``session.at(seq)``), its messages a window at a time;
* ``GET /api/sessions/{id}/events/{seq}`` — one event whole;
* ``GET /api/sessions/{id}/forks`` — the fork tree the session belongs to;
* ``GET /api/sessions/{id}/diff?from=&to=`` — how the derived messages changed between two seqs;
* ``GET /api/sessions/{id}/charts`` — context pressure over seqs, tokens per turn, tool time per step;
* ``GET /api/sessions/{id}/live?from=SEQ`` — server-sent events, one per event committed from ``SEQ`` on.

Every response carries a strict Content-Security-Policy (``default-src 'self'``, no inline script or
style, ``frame-ancestors 'none'``), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
no-referrer``. Only GET and HEAD are served: nothing writes. With a token every request must present it
(``Authorization: Bearer TOKEN``, or the cookie a first ``?token=TOKEN`` visit sets); without one the
server only answers requests addressed to a loopback host name (a DNS-rebinding page cannot read it).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import (
    AgentlogError,
    InspectorRequestError,
    SessionLabelError,
    SessionNotFoundError,
    SessionQueryError,
)
from ..kernel.jsonvalue import MAX_SAFE_INTEGER
from ..kernel.labels import check_tag, parse_label_filter
from ..projection.labels import labels_match
from .views import (
    DEFAULT_STATE_WINDOW,
    MAX_PAGE_LIMIT,
    MAX_STATE_WINDOW,
    Inspector,
    validate_seq,
    validate_session_id,
)

__all__ = ["CONTENT_SECURITY_POLICY", "TOKEN_COOKIE", "create_app"]

STATIC: Final = Path(__file__).resolve().parent / "static"

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
TOKEN_COOKIE: Final = "agentlog_inspector_token"
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
SESSION_SORT_KEYS: Final = ("lastActivity", "createdAt", "title", "turns", "tokens", "events", "id", "status")
MAX_SESSIONS_PAGE: Final = 500
LIVE_POLL_S: Final = 0.1
"""How often a followed session's revision is checked (a backend with a change signal is waited on)."""

_STATUS: Final = {
    "SESSION_NOT_FOUND": 404,
    "STORE_NOT_FOUND": 404,
    "INSPECTOR_NOT_FOUND": 404,
    "SESSION_QUERY_SESSION_NOT_FOUND": 404,
    "INSPECTOR_UNAUTHORIZED": 401,
    "INSPECTOR_METHOD_NOT_ALLOWED": 405,
    "SESSION_CORRUPT": 422,
    "SESSION_FORMAT_UNSUPPORTED": 422,
    "SESSION_QUERY_CORRUPT_SESSION": 422,
    "SESSION_QUERY_STALE_CURSOR": 409,
}


def _status_of(err: AgentlogError) -> int:
    code = err.code
    if code in _STATUS:
        return _STATUS[code]
    if code.startswith("INVALID_") or code in ("SEQ_OUT_OF_RANGE", "INSPECTOR_BAD_REQUEST"):
        return 400
    if isinstance(err, SessionQueryError) and code.startswith("SESSION_QUERY_INVALID"):
        return 400
    return 500


def _json(document: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(document), status_code=status, media_type="application/json", headers={"cache-control": "no-store"}
    )


def error_response(err: AgentlogError) -> Response:
    return _json({"error": {"code": err.code, "message": str(err)}}, _status_of(err))


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    value = validate_seq(raw, name)
    if not low <= value <= high:
        raise InspectorRequestError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def _label_param(text: str) -> tuple[str, str]:
    """One ``label=KEY=VALUE`` query parameter; a malformed one is a 400 saying what a label is."""
    try:
        return parse_label_filter(text, "label")
    except SessionLabelError as err:
        raise InspectorRequestError(str(err)) from None


def _tag_param(text: str) -> str:
    try:
        return check_tag(text)
    except SessionLabelError as err:
        raise InspectorRequestError(str(err)) from None


def _session_id(request: Request) -> str:
    return validate_session_id(request.path_params["session_id"])


class InspectorApp:
    """The route handlers over one :class:`Inspector` (sync handlers: Starlette runs them in workers)."""

    def __init__(self, inspector: Inspector) -> None:
        self.inspector = inspector

    def sessions(self, request: Request) -> Response:
        sort = request.query_params.get("sort") or "lastActivity"
        if sort not in SESSION_SORT_KEYS:
            raise InspectorRequestError(f"sort must be one of {', '.join(SESSION_SORT_KEYS)}, got {sort[:40]!r}")
        order = request.query_params.get("order") or ("asc" if sort in ("id", "title", "status") else "desc")
        if order not in ("asc", "desc"):
            raise InspectorRequestError(f"order must be asc or desc, got {order[:40]!r}")
        offset = _int_param(request, "offset", 0, 0, MAX_SAFE_INTEGER)
        limit = _int_param(request, "limit", 50, 1, MAX_SESSIONS_PAGE)
        needle = (request.query_params.get("q") or "").strip().casefold()
        status = request.query_params.get("status") or ""
        wanted_labels = [_label_param(text) for text in request.query_params.getlist("label")]
        wanted_tags = [_tag_param(text) for text in request.query_params.getlist("tag")]
        rows = self.inspector.sessions()
        if wanted_labels or wanted_tags:  # the rows carry the cached labels: no log is read to filter
            rows = [row for row in rows if labels_match(row["labels"], row["tags"], wanted_labels, wanted_tags)]
        if needle:
            rows = [
                row
                for row in rows
                if any(
                    needle in str(row.get(field) or "").casefold() for field in ("id", "title", "cwd", "parentSession")
                )
            ]
        if (status and status != "damaged") or sort == "status":  # a torn tail: told by the log's end, per revision
            rows = self.inspector.refine_status(rows)
        if status:
            rows = [row for row in rows if row["status"] == status]
        if sort != "lastActivity" or order != "desc":  # the listing's own order is newest activity first
            known = [row for row in rows if row.get(sort) is not None]
            unknown = [row for row in rows if row.get(sort) is None]
            known.sort(
                key=lambda row: (row[sort], row["id"]) if sort != "title" else (str(row[sort]).casefold(), row["id"])
            )
            if order == "desc":
                known.reverse()
            rows = known + unknown
        page = self.inspector.refine_status(rows[offset : offset + limit])
        return _json({"sessions": page, "total": len(rows), "offset": offset, "limit": limit})

    def search(self, request: Request) -> Response:
        query = request.query_params.get("q") or ""
        session = request.query_params.get("session") or None
        limit = _int_param(request, "limit", 20, 1, 100)
        cursor = request.query_params.get("cursor") or None
        return _json(self.inspector.search(query, session_id=session, limit=limit, cursor=cursor))

    def summary(self, request: Request) -> Response:
        if request.query_params.get("early") == "1":  # the page's first paint: see Inspector.first_paint
            return _json(self.inspector.first_paint(_session_id(request)))
        return _json(self.inspector.summary(_session_id(request)))

    def log(self, request: Request) -> Response:
        session_id = _session_id(request)
        from_seq = _int_param(request, "from", 0, 0, MAX_SAFE_INTEGER)
        limit = _int_param(request, "limit", 200, 1, MAX_PAGE_LIMIT)
        return _json(self.inspector.log_page(session_id, from_seq, limit))

    def at(self, request: Request) -> Response:
        session_id = _session_id(request)
        seq = validate_seq(request.path_params["seq"])
        raw_from = request.query_params.get("mfrom")
        messages_from = None if raw_from in (None, "") else validate_seq(raw_from, "mfrom")
        limit = _int_param(request, "mlimit", DEFAULT_STATE_WINDOW, 1, MAX_STATE_WINDOW)
        between = None
        if request.query_params.get("logFrom") or request.query_params.get("logTo"):
            low = _int_param(request, "logFrom", 0, 0, MAX_SAFE_INTEGER)
            between = (low, _int_param(request, "logTo", MAX_SAFE_INTEGER, low, MAX_SAFE_INTEGER))
        return _json(
            self.inspector.state_at(session_id, seq, messages_from=messages_from, limit=limit, shadowed_between=between)
        )

    def diff(self, request: Request) -> Response:
        session_id = _session_id(request)
        from_seq = validate_seq(request.query_params.get("from", ""), "from")
        to_seq = validate_seq(request.query_params.get("to", ""), "to")
        return _json(self.inspector.diff(session_id, from_seq, to_seq))

    async def live(self, request: Request) -> Response:
        """Server-sent events: each event committed to the stored log from ``from`` on, as ``{seq, type,
        time}``, by :meth:`PersistenceCoordinator.tail` (a revision check every 100 ms, only the new
        suffix read). The stream ends when the client goes away."""
        try:
            session_id = _session_id(request)
            from_seq = validate_seq(request.query_params.get("from", "0") or "0", "from")
            revision = await asyncio.to_thread(self.inspector.backend.read_revision, session_id)
            if revision is None:
                raise SessionNotFoundError(f'session "{session_id}" not found')
        except AgentlogError as err:
            return error_response(err)
        tail = self.inspector.reader.tail(session_id, from_seq=from_seq, follow=True, poll_interval=LIVE_POLL_S)

        async def stream() -> AsyncIterator[bytes]:
            yield b": following\n\n"
            try:
                async for event in tail:
                    document = {"seq": event["seq"], "type": event["type"], "time": event.get("time")}
                    yield b"event: committed\ndata: " + orjson.dumps(document) + b"\n\n"
            except AgentlogError as err:
                failure = {"code": err.code, "message": str(err)}
                yield b"event: failed\ndata: " + orjson.dumps(failure) + b"\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"cache-control": "no-store", "x-accel-buffering": "no"}
        )

    def charts(self, request: Request) -> Response:
        return _json(self.inspector.charts(_session_id(request)))

    def forks(self, request: Request) -> Response:
        return _json(self.inspector.fork_tree(_session_id(request)))

    def event(self, request: Request) -> Response:
        session_id = _session_id(request)
        return _json(self.inspector.event(session_id, validate_seq(request.path_params["seq"])))

    def sessions_page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    def session_page(self, request: Request) -> Response:
        _session_id(request)
        for name in ("at", "diff"):
            value = request.query_params.get(name)
            if value is not None and value != "":
                validate_seq(value, name)
        return FileResponse(STATIC / "session.html", headers={"cache-control": "no-store"})


ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


class Guard:
    """The ASGI layer in front of every route: GET/HEAD only, the token (or, without one, a loopback
    Host header), the security headers on every response, typed JSON errors for what it refuses."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _SECURITY_NAMES]
                message["headers"] = [*headers, *SECURITY_HEADERS]
            await send(message)

        refusal, cookie = self._check(scope)
        if refusal is not None:
            response = error_response(refusal)
            if refusal.code == "INSPECTOR_METHOD_NOT_ALLOWED":
                response.headers["allow"] = "GET, HEAD"
            await response(scope, receive, send_secured)
            return
        if cookie is None:
            await self.app(scope, receive, send_secured)
            return

        async def send_cookie(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"set-cookie", cookie)]
            await send_secured(message)

        await self.app(scope, receive, send_cookie)

    def _check(self, scope: MutableMapping[str, Any]) -> tuple[AgentlogError | None, bytes | None]:
        if scope["method"] not in ("GET", "HEAD"):
            return InspectorRequestError(
                f"{scope['method']} is not served: the inspector only reads (GET, HEAD)", "INSPECTOR_METHOD_NOT_ALLOWED"
            ), None
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.token is None:
            host = headers.get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name.lower() not in LOOPBACK_NAMES:
                return InspectorRequestError(
                    f"host {host[:80]!r} is not a loopback name: without --token the inspector answers only "
                    "requests to localhost, 127.0.0.1 or [::1]",
                    "INSPECTOR_UNAUTHORIZED",
                ), None
            return None, None
        presented = _bearer(headers.get(b"authorization")) or _cookie(headers.get(b"cookie"))
        if presented is not None and hmac.compare_digest(presented.encode(), self.token.encode()):
            return None, None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        if query and hmac.compare_digest(query[0].encode(), self.token.encode()):
            cookie = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()
            return None, cookie
        return InspectorRequestError(
            "this inspector requires its token: open it with ?token=TOKEN or send Authorization: Bearer TOKEN",
            "INSPECTOR_UNAUTHORIZED",
        ), None


_SECURITY_NAMES: Final = frozenset(name for name, _ in SECURITY_HEADERS)


def _bearer(value: bytes | None) -> str | None:
    if value is None:
        return None
    text = value.decode("latin-1")
    return text[7:].strip() if text[:7].lower() == "bearer " else None


def _cookie(value: bytes | None) -> str | None:
    if value is None:
        return None
    for part in value.decode("latin-1").split(";"):
        name, _, content = part.strip().partition("=")
        if name == TOKEN_COOKIE:
            return content
    return None


def create_app(inspector: Inspector, *, token: str | None = None) -> ASGIApp:
    """The inspector's ASGI application over ``inspector`` (``token``: required on every request)."""
    handlers = InspectorApp(inspector)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return handler(request)
            except AgentlogError as err:
                return error_response(err)

        return endpoint

    routes = [
        Route("/", guarded(handlers.sessions_page), methods=["GET", "HEAD"]),
        Route("/s/{session_id}", guarded(handlers.session_page), methods=["GET", "HEAD"]),
        Route("/api/sessions", guarded(handlers.sessions), methods=["GET", "HEAD"]),
        Route("/api/search", guarded(handlers.search), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}", guarded(handlers.summary), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/log", guarded(handlers.log), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/at/{seq}", guarded(handlers.at), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/events/{seq}", guarded(handlers.event), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/forks", guarded(handlers.forks), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/diff", guarded(handlers.diff), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/charts", guarded(handlers.charts), methods=["GET", "HEAD"]),
        Route("/api/sessions/{session_id}/live", handlers.live, methods=["GET"]),
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET", "HEAD"]),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = "INSPECTOR_METHOD_NOT_ALLOWED" if status == 405 else "INSPECTOR_NOT_FOUND"
        return error_response(InspectorRequestError(f"nothing is served at {request.url.path[:200]!r}", code))

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    return Guard(app, token=token)
