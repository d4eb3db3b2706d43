"""The inspector in a real browser: Debian's chromium driven by playwright against a real uvicorn server.

Without a browser (no ``/usr/bin/chromium`` or no playwright) these tests are skipped with the reason,
unless ``AGENTLOG_REQUIRE_BROWSER=1`` (``.ci/run`` sets it), which turns the skip into a failure.
Waits are on the page's own state (``body[data-at]`` is set once all three panes show a seq), never
sleeps; the strict CSP forbids string evaluation, so they are selector waits.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.inspector.app import create_app
from agentlog.inspector.server import RunningServer, start_server
from agentlog.inspector.views import Inspector
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator

from .stores import HOSTILE_TEXTS, SEARCH_WORD, SUMMARY, open_read_only, write_store

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]  # the browser is a process (subprocess: slow)

CHROMIUM = Path(os.environ.get("AGENTLOG_CHROMIUM", "/usr/bin/chromium"))
REQUIRE_ENV = "AGENTLOG_REQUIRE_BROWSER"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "browser-token-0123456789"
WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__violations.push(e.violatedDirective + " " + e.blockedURI);
});
"""
"""Installed before any page script: records every CSP violation (a hostile payload that tried to run)."""


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.is_file():
        return f"no browser at {CHROMIUM} (apt-get install -y chromium, or set AGENTLOG_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _unavailable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("store")
    return root, write_store(root, "jsonl", hostile_bytes=10_000_000)  # a 10 MB line in the hostile session


@pytest.fixture(scope="module")
def server(store: tuple[Path, dict[str, Any]]) -> Iterator[RunningServer]:
    inspector = Inspector(open_read_only(store[0], "jsonl"))
    running = start_server(create_app(inspector))
    yield running
    running.stop()
    inspector.close()


@pytest.fixture(scope="module")
def reference(store: tuple[Path, dict[str, Any]]) -> Iterator[PersistenceCoordinator]:
    """An independent reader of the same store: what ``session.at(seq)`` says."""
    reader = PersistenceCoordinator(SessionStore(), open_read_only(store[0], "jsonl"))
    yield reader
    reader.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    context.add_init_script(WATCH)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    yield tab
    context.close()
    assert errors == [], errors


def _at(page: Any, seq: int) -> None:
    page.locator(f"body[data-at='{seq}']").wait_for(state="attached")


def _messages(page: Any) -> list[Any]:
    return [json.loads(text) for text in page.locator("#messages .message-json").all_text_contents()]


def _surface(page: Any) -> list[int]:
    return [int(seq) for seq in page.locator("#surface > .card").evaluate_all("cards => cards.map(c => c.dataset.seq)")]


def _check_state(page: Any, reference: PersistenceCoordinator, session_id: str, seq: int) -> None:
    _at(page, seq)
    point = reference.view(session_id).at(seq)
    assert _messages(page) == thaw(point.derive_messages().to_list())
    assert _surface(page) == list(point.surface.nodes)
    assert page.url.endswith(f"/s/{session_id}?at={seq}")
    assert page.locator("#seq").input_value() == str(seq)


def test_the_sessions_page_lists_sorts_and_filters(page: Any, server: RunningServer) -> None:
    page.goto(server.url + "/")
    rows = page.locator("#sessions tbody tr")
    rows.first.wait_for()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == ["hostile", "crashed", "main-fork", "main"]
    assert page.locator("#sessions tbody tr[data-id='main-fork'] td").nth(7).inner_text() == "main"
    page.locator("th[data-sort='id']").click()
    page.locator("th.sorted-asc[data-sort='id']").wait_for()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == ["crashed", "hostile", "main", "main-fork"]
    page.locator("#filter").fill("fork")
    page.locator("#count", has_text="1 session").wait_for()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.id)") == ["main-fork"]


def test_search_finds_and_jumps_to_the_event(
    page: Any, server: RunningServer, reference: PersistenceCoordinator
) -> None:
    page.goto(server.url + "/")
    page.locator("#search").fill(SEARCH_WORD)
    page.locator("#search-form button").click()
    item = page.locator("#hits li").filter(has_text="main · seq").first
    item.wait_for()
    assert item.locator("mark").first.inner_text().lower() == SEARCH_WORD
    hit = item.locator("a.hit")
    href = hit.get_attribute("href")
    assert href is not None and href.startswith("/s/main?at=")
    seq = int(href.rsplit("=", 1)[1])
    hit.click()
    _check_state(page, reference, "main", seq)
    assert page.locator("#log .item.now").first.get_attribute("data-seq") == str(seq)


def test_the_slider_shows_session_at_every_seq(
    page: Any, server: RunningServer, store: tuple[Path, dict[str, Any]], reference: PersistenceCoordinator
) -> None:
    _root, facts = store
    page.goto(server.url + "/s/main")
    _check_state(page, reference, "main", facts["lastSeq"])
    for seq in [0, facts["beforePrune"], facts["replacement"], facts["checkpoint"] - 1, facts["checkpoint"]]:
        page.locator("#slider").fill(str(seq))
        _check_state(page, reference, "main", seq)
    # Drag the thumb to the far left, then step with the keyboard.
    box = page.locator("#slider").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + 1, box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    _check_state(page, reference, "main", 0)
    page.locator("#log-pane h2").click()  # focus outside the inputs: arrows step the slider
    page.keyboard.press("ArrowRight")
    _check_state(page, reference, "main", 1)
    page.keyboard.press("ArrowRight")
    _check_state(page, reference, "main", 2)
    page.keyboard.press("ArrowLeft")
    _check_state(page, reference, "main", 1)
    page.locator("#seq").fill(str(facts["checkpoint"]))
    page.locator("#seq").press("Enter")
    _check_state(page, reference, "main", facts["checkpoint"])


def test_a_permalink_opens_that_moment(page: Any, server: RunningServer, reference: PersistenceCoordinator) -> None:
    page.goto(server.url + "/s/main?at=5")
    _check_state(page, reference, "main", 5)
    assert page.locator("#permalink").get_attribute("href") == "/s/main?at=5"


def test_a_compaction_checkpoint_opens_with_its_summary_and_shadowed_range(
    page: Any, server: RunningServer, store: tuple[Path, dict[str, Any]]
) -> None:
    _root, facts = store
    page.goto(server.url + f"/s/main?at={facts['checkpoint']}")
    _at(page, facts["checkpoint"])
    card = page.locator(f"#surface > .card[data-seq='{facts['checkpoint']}']")
    summary = card.locator("pre.summary-text")
    assert not summary.is_visible()
    card.locator("details.checkpoint-details > summary").click()
    assert summary.is_visible() and summary.inner_text() == SUMMARY
    card.locator("details.replaces > summary").click()
    shadowed = card.locator("details.replaces li[data-seq]")
    assert [int(s) for s in shadowed.evaluate_all("li => li.map(x => x.dataset.seq)")] == facts["turnOne"]
    pruned = page.locator(f"#surface > .card[data-seq='{facts['replacement']}'] .badge.pruned")
    assert pruned.inner_text().startswith("pruned: 5,000 →")
    page.locator("#log .item.kind-chunks").first.wait_for()  # streamed chunks folded into one item


def test_the_fork_tree_links_the_lineage(page: Any, server: RunningServer) -> None:
    page.goto(server.url + "/s/main-fork")
    page.locator("#forks:not([hidden])").wait_for()
    page.locator("#forks > summary").click()
    assert page.locator("#fork-tree li[data-id='main'] > a").get_attribute("href") == "/s/main"
    assert page.locator("#fork-tree li.current").get_attribute("data-id") == "main-fork"
    page.locator("#fork-tree li[data-id='main'] > a").click()
    page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
    assert page.url.startswith(server.url + "/s/main?at=")


def test_diff_mode_shows_what_the_compaction_changed(
    page: Any, server: RunningServer, store: tuple[Path, dict[str, Any]]
) -> None:
    _root, facts = store
    page.goto(server.url + f"/s/main?at={facts['checkpoint']}&diff={facts['beforeCompaction']}")
    _at(page, facts["checkpoint"])
    removed = page.locator("#messages .card.diff-removed")
    assert [int(s) for s in removed.evaluate_all("cs => cs.map(c => c.dataset.seq)")] == facts["turnOne"]
    added = page.locator("#messages .card.diff-added")
    assert added.evaluate_all("cs => cs.map(c => c.dataset.seq)") == [str(facts["checkpoint"])]
    assert page.locator("#messages .diff-equal").first.inner_text() == "3 unchanged messages"
    page.locator("#diff-mode").uncheck()
    page.locator("#messages .message-json").first.wait_for(state="attached")
    assert page.locator("#messages .card.diff-removed").count() == 0
    assert page.url.endswith(f"/s/main?at={facts['checkpoint']}")


def test_charts_draw_the_series_and_move_the_slider(
    page: Any, server: RunningServer, store: tuple[Path, dict[str, Any]], reference: PersistenceCoordinator
) -> None:
    _root, facts = store
    page.goto(server.url + "/s/main?at=0")
    _at(page, 0)
    page.locator("#charts > summary").click()
    page.locator("body[data-charts='1']").wait_for(state="attached")
    assert page.locator("#chart-pressure path.line").count() == 1
    assert page.locator("#chart-pressure line.compaction").get_attribute("data-seq") == str(facts["checkpoint"] - 1)
    assert page.locator("#chart-turns rect.bar").count() == 2
    assert page.locator("#chart-steps rect.bar").count() == 4
    bar = page.locator("#chart-turns rect.bar").nth(1)
    seq = int(bar.get_attribute("data-seq") or -1)
    bar.click()
    _check_state(page, reference, "main", seq)


def test_closers_are_marked(page: Any, server: RunningServer) -> None:
    page.goto(server.url + "/s/crashed")
    page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
    assert page.locator("#log .badge.closer").first.inner_text() == "TOOL_OUTCOME_UNKNOWN"
    assert page.locator("#log .badge.pending").count() >= 1
    assert page.locator("#summary .status-repairable").inner_text() == "repairable"


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "escaping-alone"])
def test_a_hostile_session_runs_no_script(browser: Any, server: RunningServer, bypass_csp: bool) -> None:
    """Every payload is shown as text; none runs, even with the CSP switched off (escaping alone); with it
    on, nothing even tried (no CSP violation)."""
    context = browser.new_context(viewport={"width": 1500, "height": 900}, bypass_csp=bypass_csp)
    context.add_init_script(WATCH)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        page.goto(server.url + "/")
        page.locator("#sessions tbody tr[data-id='hostile']").wait_for()
        page.goto(server.url + "/s/hostile")
        page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
        page.locator("details").evaluate_all("ds => ds.forEach(d => { d.open = true; })")  # every event fetched whole
        page.locator("#log .item[data-seq='7'] details pre").wait_for(state="attached")  # the 10 MB line, cut at 1 MB
        page.locator("#messages .message-json").first.wait_for(state="attached")
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("window.__violations") == []
        assert dialogs == [] and errors == []
        text = page.locator("#messages").inner_text()
        for payload in HOSTILE_TEXTS[:3]:
            assert payload in text  # shown, as text
        assert "\u202e" not in page.locator("body").inner_text()  # the RTL override is shown, not obeyed
        assert "\x1b" not in page.locator("body").inner_text()
        assert page.locator("#messages img, #messages script, #messages svg, #log a[href^='javascript']").count() == 0
    finally:
        context.close()


def test_the_token_is_required(browser: Any, store: tuple[Path, dict[str, Any]]) -> None:
    inspector = Inspector(open_read_only(store[0], "jsonl"))
    running = start_server(create_app(inspector, token=TOKEN))
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(running.url + "/")
        assert response is not None and response.status == 401
        assert "INSPECTOR_UNAUTHORIZED" in page.content()
        page.goto(running.url + f"/?token={TOKEN}")  # sets the cookie the page's requests then carry
        page.locator("#sessions tbody tr[data-id='main']").wait_for()
        assert "token" not in page.url  # dropped from the address bar once the cookie is set
        page.goto(running.url + "/s/main?at=3")
        page.locator("body[data-at='3']").wait_for(state="attached")
    finally:
        context.close()
        running.stop()
        inspector.close()


def test_a_long_context_pages_its_messages(browser: Any, tmp_path: Path) -> None:
    """250 messages: the pane shows the newest 200, and "earlier" the first 200; together they are
    ``derive_messages()``."""
    import agentlog as al

    from .stores import open_backend

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("long", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    for n in range(250):
        session.append("user/message", al.user_message(f"note {n}"), {"surfaceOp": "append"})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(session)
    store.dispose(session)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    running = start_server(create_app(inspector))
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    reference = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, "jsonl"))
    try:
        page = context.new_page()
        page.goto(running.url + "/s/long")
        _at(page, 251)
        everything = thaw(reference.view("long").derive_messages().to_list())
        assert page.locator("#messages-count").inner_text() == "51–250 of 250 messages"
        assert _messages(page) == everything[50:]
        page.locator("#messages-earlier").click()
        page.locator("#messages-count", has_text="1–200 of 250").wait_for()
        assert _messages(page) == everything[:200]
        assert page.locator("#messages-earlier").is_disabled()
    finally:
        reference.close()
        context.close()
        running.stop()
        inspector.close()


def test_a_running_session_updates_live(browser: Any, tmp_path: Path) -> None:
    """A writer appends and flushes while the page is open at the last seq: the page follows to the new
    last seq (server-sent events from the stored log's tail), showing ``session.at`` of it."""
    import time

    import agentlog as al

    from .stores import open_backend

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("live", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("first"), {"surfaceOp": "append"})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(session)
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    running = start_server(create_app(inspector))
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    try:
        page = context.new_page()
        page.goto(running.url + "/s/live")
        _at(page, 2)
        page.locator("#live:not([hidden])").wait_for()
        session.append("turn/start", {"turn": 2})
        session.append("user/message", al.user_message("second, live"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
        store.flush(session)
        flushed = time.monotonic()
        _at(page, 5)
        elapsed = time.monotonic() - flushed
        assert page.locator("#slider").get_attribute("max") == "5"
        assert _messages(page)[-1]["content"][0]["text"] == "second, live"
        assert elapsed < 5, elapsed  # typically well under a second here; the bound only guards a stall
    finally:
        context.close()
        running.stop()
        inspector.close()
        store.dispose(session)
        writer.close()


def test_an_exported_file_works_offline_and_runs_no_hostile_script(
    browser: Any, store: tuple[Path, dict[str, Any]], reference: PersistenceCoordinator, tmp_path: Path
) -> None:
    """``export --html`` opened from disk, no server: the slider shows ``session.at(seq)`` (replayed in the
    page from the kernel's recorded surface operations), and the hostile session's file runs nothing."""
    from agentlog.inspector.export import export_html

    root, facts = store
    inspector = Inspector(open_read_only(root, "jsonl"), search=False)
    try:
        for session_id in ("main", "hostile"):
            (tmp_path / f"{session_id}.html").write_text(export_html(inspector.export_document(session_id)), "utf-8")
    finally:
        inspector.close()
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    context.add_init_script(WATCH)
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto((tmp_path / "main.html").as_uri() + f"?at={facts['checkpoint']}")
        _at(page, facts["checkpoint"])
        point = reference.view("main").at(facts["checkpoint"])
        assert _messages(page) == thaw(point.derive_messages().to_list())
        assert _surface(page) == list(point.surface.nodes)
        for seq in (0, facts["beforeCompaction"], facts["lastSeq"]):
            page.locator("#slider").fill(str(seq))
            _at(page, seq)
            point = reference.view("main").at(seq)
            assert _messages(page) == thaw(point.derive_messages().to_list())
            assert _surface(page) == list(point.surface.nodes)
        page.goto((tmp_path / "hostile.html").as_uri())
        page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
        page.locator("details").evaluate_all("ds => ds.forEach(d => { d.open = true; })")
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("window.__violations") == []
        assert errors == []
        assert all(url.startswith("file://") for url in requests), requests  # nothing fetched from a network
    finally:
        context.close()


@pytest.fixture(scope="module")
def exported(store: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``main`` session exported to a file (``main.html`` in the returned directory)."""
    from agentlog.inspector.export import export_html

    out = tmp_path_factory.mktemp("exported")
    inspector = Inspector(open_read_only(store[0], "jsonl"), search=False)
    try:
        (out / "main.html").write_text(export_html(inspector.export_document("main")), "utf-8")
    finally:
        inspector.close()
    return out


def _search(page: Any, query: str) -> list[dict[str, Any]]:
    """Run the session page's search box; the hits shown, each ``{seq, type, surface}``."""
    page.locator("#search").fill(query)
    page.locator("#search-form button").click()
    page.locator(f"#search-results[data-searched='{query}']").wait_for(state="attached")
    hits = []
    for item in page.locator("#hits li").all():
        kind = item.locator("span.muted").inner_text().split(" · ")
        hits.append(
            {"seq": int(item.locator("a.hit").get_attribute("data-seq") or -1), "type": kind[0], "surface": kind[1]}
        )
    return hits


def test_an_exported_files_search_finds_an_event_and_jumps_to_it(
    page: Any, exported: Path, reference: PersistenceCoordinator
) -> None:
    page.goto((exported / "main.html").as_uri() + "?at=0")
    _at(page, 0)
    assert page.locator("#live").is_hidden()  # a file follows nothing
    item = page.locator("#hits li")
    hits = _search(page, SEARCH_WORD)
    assert len(hits) == 1 and hits[0]["type"] == "user/message"
    assert item.first.locator("mark").first.inner_text().lower() == SEARCH_WORD
    seq = hits[0]["seq"]
    item.first.locator("a.hit").click()
    _at(page, seq)
    assert _messages(page) == thaw(reference.view("main").at(seq).derive_messages().to_list())
    assert page.locator("#log .item.now").first.get_attribute("data-seq") == str(seq)
    assert page.url.endswith(f"main.html?at={seq}")


def test_an_exported_files_search_answers_as_the_server_does(
    page: Any, exported: Path, store: tuple[Path, dict[str, Any]]
) -> None:
    """The file's search (over the documents it carries) finds the hits of the store's search index, in
    the same order: whole words, case folded, a phrase of several words, nothing for a word's part."""
    inspector = Inspector(open_read_only(store[0], "jsonl"))
    page.goto((exported / "main.html").as_uri())
    page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
    try:
        for query in (SEARCH_WORD, "DIGITS", "big.txt", "read_file", "It is digits", "Read it", "digit", "path"):
            served = inspector.search(query, session_id="main", limit=20)["items"]
            expected = [{"seq": hit["seq"], "type": hit["type"], "surface": hit["surface"]} for hit in served]
            assert _search(page, query) == expected, query
    finally:
        inspector.close()


def _diff_pane(page: Any) -> tuple[list[str], list[str], list[str], str]:
    """What diff mode shows: the removed and added cards' seqs, the unchanged runs, the pane's text."""
    removed = page.locator("#messages .card.diff-removed").evaluate_all("cs => cs.map(c => c.dataset.seq)")
    added = page.locator("#messages .card.diff-added").evaluate_all("cs => cs.map(c => c.dataset.seq)")
    return (
        removed,
        added,
        page.locator("#messages .diff-equal").all_inner_texts(),
        page.locator("#messages").inner_text(),
    )


def test_diff_in_an_exported_file_shows_what_the_served_page_shows(
    page: Any, server: RunningServer, exported: Path, store: tuple[Path, dict[str, Any]]
) -> None:
    """Across the compaction the file shows the shadowed messages removed and the checkpoint added, as
    the served page does; and for other pairs of seqs the two Messages panes are the same."""
    _root, facts = store
    pairs = [
        (facts["checkpoint"], facts["beforeCompaction"]),
        (facts["lastSeq"], 0),
        (facts["replacement"], facts["beforePrune"]),
        (facts["beforeCompaction"], facts["lastSeq"]),
        (facts["checkpoint"], facts["turnOne"][1]),
    ]
    for at, since in pairs:
        page.goto(server.url + f"/s/main?at={at}&diff={since}")
        _at(page, at)
        served = _diff_pane(page)
        page.goto((exported / "main.html").as_uri() + f"?at={at}&diff={since}")
        _at(page, at)
        assert _diff_pane(page) == served, (at, since)
        if (at, since) == pairs[0]:
            assert [int(s) for s in served[0]] == facts["turnOne"]
            assert served[1] == [str(facts["checkpoint"])]
            assert served[2][0] == "3 unchanged messages"


def test_an_exported_long_session_replays_from_its_checkpoints(browser: Any, tmp_path: Path) -> None:
    """5,000 surface events with two compactions: the file keeps a copy of the node list every 2,048
    operations; moving the slider forward and back shows ``session.at(seq)``'s newest 200 messages."""
    import agentlog as al
    from agentlog.inspector.export import export_html

    from .stores import _compact, open_backend

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("long", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    for n in range(2500):
        session.append("user/message", al.user_message(f"note {n}"), {"surfaceOp": "append"})
    _compact(session, 1, list(range(100, 400)))
    for n in range(2500):
        session.append("user/message", al.user_message(f"later note {n}"), {"surfaceOp": "append"})
    _compact(session, 1, list(range(3000, 4000)))
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(session)
    store.dispose(session)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False)
    try:
        (tmp_path / "long.html").write_text(export_html(inspector.export_document("long")), "utf-8")
    finally:
        inspector.close()
    reference = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, "jsonl")).view("long")
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    try:
        page = context.new_page()
        page.goto((tmp_path / "long.html").as_uri())
        _at(page, reference.seq)
        for seq in (reference.seq, 2050, 4700, 2503, 2502, 120, reference.seq - 2):
            page.locator("#slider").fill(str(seq))
            _at(page, seq)
            point = reference.at(seq)
            assert _messages(page) == thaw(point.derive_messages().to_list())[-200:], seq
            assert _surface(page) == list(point.surface.nodes)[-200:], seq
    finally:
        context.close()


@pytest.fixture(scope="module")
def cached_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """``long`` (its tail does not cover it) and ``rotten`` (the same, a line before its tail damaged),
    written with their projection caches current as ``agentlog run`` leaves them."""
    from .stores import damage_line, write_cached_session

    root = tmp_path_factory.mktemp("cached")
    last = write_cached_session(root, "long", 40)  # (fewer messages than a window)
    write_cached_session(root, "rotten", 40)
    damage_line(root, "rotten", 5)
    return root, last


@pytest.fixture
def gated(cached_store: tuple[Path, int]) -> Iterator[tuple[RunningServer, threading.Event]]:
    """A server whose background validations wait for the returned event."""
    gate = threading.Event()
    inspector = Inspector(open_read_only(cached_store[0], "jsonl"), validation_gate=gate)
    running = start_server(create_app(inspector))
    yield running, gate
    gate.set()
    running.stop()
    inspector.close()


def test_the_first_paint_shows_the_last_events_while_validating_then_ok(
    page: Any, gated: tuple[RunningServer, threading.Event], cached_store: tuple[Path, int]
) -> None:
    running, gate = gated
    root, last = cached_store
    page.goto(running.url + "/s/long")
    page.locator("body[data-status='validating']").wait_for(state="attached")
    assert page.locator("#summary .status-validating").inner_text() == "validating…"
    shown = [int(seq) for seq in page.locator("#log .item").evaluate_all("items => items.map(i => i.dataset.seq)")]
    assert shown and shown[-1] == last  # the log's last events, read from its tail
    assert page.locator("#summary .status-ok").count() == 0
    gate.set()
    page.locator("body[data-status='ok']").wait_for(state="attached")
    reader = PersistenceCoordinator(SessionStore(), open_read_only(root, "jsonl"))
    try:
        _check_state(page, reader, "long", last)
    finally:
        reader.close()


def test_a_damaged_session_goes_from_validating_to_damaged(
    page: Any, gated: tuple[RunningServer, threading.Event]
) -> None:
    running, gate = gated
    page.goto(running.url + "/s/rotten")
    page.locator("body[data-status='validating']").wait_for(state="attached")
    gate.set()
    page.locator("body[data-status='damaged']").wait_for(state="attached")
    assert page.locator("#summary .status-damaged").inner_text() == "damaged"
    assert page.locator("#error").inner_text().startswith("[SESSION_")
    assert page.locator("#log .item").count() == 0  # the tail read before validation is not left standing
    assert page.locator("#summary .status-ok").count() == 0
