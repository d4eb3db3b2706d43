"""The inspector's HTTP layer against a real uvicorn server on a free loopback port: routes, typed JSON
errors, security headers, GET/HEAD only, the token and the loopback Host rule."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import InvalidOptionError
from agentlog.inspector.app import CONTENT_SECURITY_POLICY, TOKEN_COOKIE, create_app
from agentlog.inspector.server import RunningServer, check_bind, start_server
from agentlog.inspector.views import Inspector

from .stores import SEARCH_WORD, open_read_only, write_store

TOKEN = "s3cret-token-0123456789"


def _get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("store")
    return root, write_store(root, "jsonl")


def _serve(root: Path, token: str | None = None) -> tuple[RunningServer, Inspector]:
    inspector = Inspector(open_read_only(root, "jsonl"))
    return start_server(create_app(inspector, token=token)), inspector


@pytest.fixture(scope="module")
def server(store: tuple[Path, dict[str, Any]]) -> Iterator[RunningServer]:
    running, inspector = _serve(store[0])
    yield running
    running.stop()
    inspector.close()


def test_pages_and_api(server: RunningServer, store: tuple[Path, dict[str, Any]]) -> None:
    _root, facts = store
    for path in ["/", "/s/main", f"/s/main?at={facts['checkpoint']}"]:
        status, headers, body = _get(server.url + path)
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'<script src="/static/app.js" defer></script>' in body
    status, headers, _ = _get(server.url + "/static/app.js")
    assert status == 200 and "javascript" in headers["content-type"]
    status, _, body = _get(server.url + "/api/sessions?sort=id&order=asc&limit=2")
    page = json.loads(body)
    assert status == 200 and [row["id"] for row in page["sessions"]] == ["crashed", "hostile"] and page["total"] == 4
    page = json.loads(_get(server.url + "/api/sessions?q=fork")[2])
    assert [row["id"] for row in page["sessions"]] == ["main-fork"]
    page = json.loads(_get(server.url + "/api/sessions?status=repairable")[2])
    assert [row["id"] for row in page["sessions"]] == ["crashed"]
    rows = json.loads(_get(server.url + "/api/sessions")[2])["sessions"]
    assert {row["id"]: row["status"] for row in rows}["crashed"] == "repairable"
    state = json.loads(_get(server.url + f"/api/sessions/main/at/{facts['checkpoint']}")[2])
    assert state["surface"][0]["checkpoint"]["shadowedSeqs"] == facts["turnOne"]
    log = json.loads(_get(server.url + "/api/sessions/main/log?from=0&limit=5")[2])
    assert len(log["items"]) == 5 and log["nextSeq"] is not None
    hits = json.loads(_get(server.url + f"/api/search?q={SEARCH_WORD}")[2])["items"]
    assert {hit["bestMatch"]["sessionId"] for hit in hits} == {"main", "main-fork"}
    event = json.loads(_get(server.url + f"/api/sessions/main/events/{facts['checkpoint']}")[2])
    assert event["event"]["seq"] == facts["checkpoint"]
    status, _, body = _get(server.url + "/api/sessions/main", method="HEAD")
    assert status == 200 and body == b""


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/api/sessions/nope", 404, "SESSION_NOT_FOUND"),
        ("/api/sessions/main/at/99999", 400, "SEQ_OUT_OF_RANGE"),
        ("/api/sessions/main/at/-1", 400, "INSPECTOR_BAD_REQUEST"),
        ("/api/sessions/main/at/1e3", 400, "INSPECTOR_BAD_REQUEST"),
        ("/api/sessions/main/log?limit=0", 400, "INSPECTOR_BAD_REQUEST"),
        ("/api/sessions/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/at/0", 404, "INSPECTOR_NOT_FOUND"),  # no route: %2F is a /
        ("/api/sessions/..%2Fsecret", 404, "INSPECTOR_NOT_FOUND"),
        ("/api/sessions/..", 404, "SESSION_NOT_FOUND"),  # an id like any other, encoded into a file name
        ("/api/sessions/a%00b", 400, "INVALID_SESSION_ID"),
        ("/api/sessions?sort=evil", 400, "INSPECTOR_BAD_REQUEST"),
        ("/api/search?q=%20", 400, "SESSION_QUERY_INVALID_QUERY"),
        ("/s/main?at=abc", 400, "INSPECTOR_BAD_REQUEST"),
        ("/nothing/here", 404, "INSPECTOR_NOT_FOUND"),
        ("/static/../views.py", 404, "INSPECTOR_NOT_FOUND"),
    ],
)
def test_refusals_are_typed_json(server: RunningServer, path: str, status: int, code: str) -> None:
    got, headers, body = _get(server.url + path)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"]


def test_every_response_is_locked_down(server: RunningServer) -> None:
    for path in ["/", "/s/main", "/static/app.js", "/api/sessions", "/api/sessions/nope", "/nothing"]:
        _, headers, _ = _get(server.url + path)
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "'unsafe-eval'" not in CONTENT_SECURITY_POLICY
        assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY and "default-src 'self'" in CONTENT_SECURITY_POLICY
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_nothing_but_get_and_head(server: RunningServer, method: str) -> None:
    status, headers, body = _get(server.url + "/api/sessions", method=method)
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert json.loads(body)["error"]["code"] == "INSPECTOR_METHOD_NOT_ALLOWED"


def test_without_a_token_only_loopback_host_names_are_answered(server: RunningServer) -> None:
    """A DNS-rebinding page reaches the loopback port under its own host name: refused."""
    status, _, body = _get(server.url + "/api/sessions", headers={"Host": "evil.example:8765"})
    assert status == 401 and json.loads(body)["error"]["code"] == "INSPECTOR_UNAUTHORIZED"
    for host in ["localhost:1", "127.0.0.1", "[::1]:8765"]:
        assert _get(server.url + "/api/sessions", headers={"Host": host})[0] == 200


@pytest.mark.slow  # a server of its own: about 0.2 s here
def test_a_token_is_required_on_every_request(store: tuple[Path, dict[str, Any]]) -> None:
    running, inspector = _serve(store[0], token=TOKEN)
    try:
        for path in ["/", "/static/app.js", "/api/sessions", "/api/sessions/main/at/0"]:
            status, _, body = _get(running.url + path)
            assert status == 401 and json.loads(body)["error"]["code"] == "INSPECTOR_UNAUTHORIZED"
        assert _get(running.url + "/api/sessions", headers={"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
        assert _get(running.url + "/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        status, headers, _ = _get(running.url + f"/?token={TOKEN}")
        assert status == 200 and headers["set-cookie"].startswith(f"{TOKEN_COOKIE}={TOKEN};")
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        assert _get(running.url + "/api/sessions", headers={"Cookie": f"{TOKEN_COOKIE}={TOKEN}"})[0] == 200
        assert (
            _get(running.url + "/api/sessions", headers={"Host": "evil.example", "Authorization": f"Bearer {TOKEN}"})[0]
            == 200
        )
    finally:
        running.stop()
        inspector.close()


def test_a_non_loopback_host_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTLOG_INSPECTOR_TOKEN", raising=False)
    assert check_bind("127.0.0.1", None) is None
    assert check_bind("::1", None) is None and check_bind("localhost", None) is None
    for host in ["0.0.0.0", "192.168.1.10", "example.com", "::"]:
        with pytest.raises(InvalidOptionError, match="--token"):
            check_bind(host, None)
        assert check_bind(host, TOKEN) == TOKEN
    monkeypatch.setenv("AGENTLOG_INSPECTOR_TOKEN", TOKEN)
    assert check_bind("0.0.0.0", None) == TOKEN
    for bad in ["short", "has space in it 0123", "semi;colon-0123456789"]:
        with pytest.raises(InvalidOptionError):
            check_bind("127.0.0.1", bad)


@pytest.mark.slow  # a server of its own and a followed stream: about 0.4 s here
def test_live_streams_each_committed_event(tmp_path: Path) -> None:
    import agentlog as al
    from agentlog.persistence.coordinator import PersistenceCoordinator

    from .stores import open_backend

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("live", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    store.flush(session)
    running, inspector = _serve(tmp_path)
    try:
        status, _, body = _get(running.url + "/api/sessions/nope/live")
        assert status == 404 and json.loads(body)["error"]["code"] == "SESSION_NOT_FOUND"
        status, _, body = _get(running.url + "/api/sessions/live/live?from=x")
        assert status == 400 and json.loads(body)["error"]["code"] == "INSPECTOR_BAD_REQUEST"
        with urllib.request.urlopen(running.url + "/api/sessions/live/live?from=1", timeout=30) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert stream.readline() == b": following\n"
            session.append("user/message", al.user_message("hello"), {"surfaceOp": "append"})
            store.flush(session)
            lines = [stream.readline() for _ in range(3)]
        assert lines[1] == b"event: committed\n"
        assert json.loads(lines[2].removeprefix(b"data: "))["seq"] == 1
        assert json.loads(lines[2].removeprefix(b"data: "))["type"] == "user/message"
    finally:
        running.stop()
        inspector.close()
        store.dispose(session)
        writer.close()
