"""The inspector's sessions page filters by user labels and tags: ``/api/sessions?label=KEY=VALUE&tag=``
(repeatable, all must match) over rows served from the projection cache, a malformed filter a typed 400,
and the page's label box (``user=bob #eval``) in a real browser."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.inspector.app import create_app
from agentlog.inspector.server import RunningServer, start_server
from agentlog.inspector.views import Inspector
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

from .stores import open_read_only
from .test_browser import browser as browser
from .test_browser import page as page

SESSIONS = [
    ("bob-eval", {"user": "bob"}, ["eval"]),
    ("bob", {"user": "bob"}, []),
    ("alice-eval", {"user": "alice"}, ["eval"]),
    ("plain", {}, []),
]


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root: Path = tmp_path_factory.mktemp("labelled")
    for index, (session_id, labels, tags) in enumerate(SESSIONS):
        store = al.SessionStore(now=lambda index=index: 1_700_000_000_000 + index)
        coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
        session = store.create(session_id, labels=labels or None, tags=tags or None)
        session.append("todo/write", {"todos": []})  # a session with no event is never stored
        store.flush(session)
        coordinator.close()
    inspector = Inspector(open_read_only(root, "jsonl"))
    running = start_server(create_app(inspector))
    yield running
    running.stop()
    inspector.close()


def _ids(server: RunningServer, query: str) -> list[str]:
    status, page = _get(server.url + "/api/sessions?sort=id&order=asc&" + query)
    assert status == 200, page
    return [row["id"] for row in page["sessions"]]


def test_the_sessions_api_filters_by_every_label_and_tag_and_rows_carry_them(server: RunningServer) -> None:
    assert _ids(server, "label=user%3Dbob") == ["bob", "bob-eval"]
    assert _ids(server, "label=user%3Dbob&tag=eval") == ["bob-eval"]
    assert _ids(server, "tag=eval") == ["alice-eval", "bob-eval"]
    assert _ids(server, "tag=eval&tag=missing") == []
    _status, page = _get(server.url + "/api/sessions?sort=id&order=asc")
    rows = {row["id"]: row for row in page["sessions"]}
    assert rows["bob-eval"]["labels"] == {"user": "bob"} and rows["bob-eval"]["tags"] == ["eval"]
    assert rows["plain"]["labels"] == {} and rows["plain"]["tags"] == []


@pytest.mark.parametrize("query", ["label=user", "label=bad%20key%3Dx", "tag=a%2Fb", "label=k%3D%1B"])
def test_a_malformed_label_filter_is_a_typed_400(server: RunningServer, query: str) -> None:
    status, body = _get(server.url + "/api/sessions?" + query)
    assert status == 400 and body["error"]["code"] == "INSPECTOR_BAD_REQUEST"
    assert "label" in body["error"]["message"] or "tag" in body["error"]["message"]


@pytest.mark.browser
@pytest.mark.subprocess
def test_the_label_box_filters_the_sessions_page_and_rows_show_labels(page: Any, server: RunningServer) -> None:
    page.goto(server.url + "/")
    rows = page.locator("#sessions tbody tr")
    rows.first.wait_for()
    assert rows.count() == 4
    assert page.locator("#sessions tbody tr[data-id='alice-eval'] .labels").inner_text() == "user=alice #eval"
    page.locator("#label-filter").fill("user=bob #eval")
    page.locator("#count", has_text="1 session").wait_for()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == ["bob-eval"]
    page.locator("#label-filter").fill("#eval")
    page.locator("#count", has_text="2 sessions").wait_for()
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.id)")) == ["alice-eval", "bob-eval"]
