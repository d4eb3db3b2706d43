"""The inspector's data layer on real stores: every state it serves is ``session.at(seq)``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import InspectorRequestError, InvalidSessionIdError, SeqOutOfRangeError, SessionNotFoundError
from agentlog.inspector.views import Inspector, validate_seq, validate_session_id
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator

from .stores import COMPACTION_ID, PRUNED, SEARCH_WORD, SUMMARY, open_backend, open_read_only

Written = tuple[Path, str, dict[str, Any]]


def _inspector(written: Written) -> Inspector:
    root, kind, _facts = written
    return Inspector(open_read_only(root, kind))


def test_every_seq_serves_exactly_session_at(written: Written) -> None:
    """Messages, surface nodes, request header and context at every seq equal an independent read's
    ``view.at(seq)``; the log is read once for all of them."""
    root, kind, facts = written
    inspector = _inspector(written)
    reference = PersistenceCoordinator(SessionStore(), open_read_only(root, kind))
    try:
        view = reference.view("main")
        for seq in range(facts["lastSeq"] + 1):
            point = view.at(seq)
            state = inspector.state_at("main", seq)
            assert state["messages"] == thaw(point.derive_messages().to_list()), seq
            assert [node["seq"] for node in state["surface"]] == list(point.surface.nodes), seq
            assert state["requestHeader"] == thaw(point.request_header()), seq
            assert state["requestContext"] == thaw(point.request_context()), seq
            assert len(state["messageSeqs"]) == len(state["messages"])
        assert inspector.loads == 1
    finally:
        reference.close()
        inspector.close()


def test_provenance_of_the_checkpoint_and_the_pruned_result(written: Written) -> None:
    _root, _kind, facts = written
    inspector = _inspector(written)
    try:
        before = inspector.state_at("main", facts["beforeCompaction"])
        assert before["replacements"] == [
            {"seq": facts["replacement"], "start": facts["resultSeq"], "end": facts["resultSeq"], "shadowedCount": 1}
        ]
        pruned = next(node for node in before["surface"] if node["seq"] == facts["replacement"])
        assert pruned["pruned"]["originalSeq"] == facts["resultSeq"]
        assert pruned["pruned"]["charsBefore"] == 5000 and pruned["pruned"]["charsAfter"] == len(PRUNED)
        assert pruned["replaces"]["shadowedSeqs"] == [facts["resultSeq"]]
        assert [n["seq"] for n in before["surface"]][: len(facts["turnOne"])] == facts["turnOne"]

        after = inspector.state_at("main", facts["checkpoint"])
        checkpoint = after["surface"][0]
        assert checkpoint["seq"] == facts["checkpoint"]
        assert checkpoint["checkpoint"]["compactionId"] == COMPACTION_ID
        assert checkpoint["checkpoint"]["summary"] == SUMMARY
        assert checkpoint["replaces"]["shadowedSeqs"] == facts["turnOne"]
        assert [item["seq"] for item in checkpoint["replaces"]["shadowed"]] == facts["turnOne"]
        assert after["shadowed"] == sorted([*facts["turnOne"], facts["resultSeq"]])
    finally:
        inspector.close()


def test_log_pages_fold_chunks_pair_calls_and_mark_closers(written: Written) -> None:
    _root, _kind, facts = written
    inspector = _inspector(written)
    try:
        items: list[dict[str, Any]] = []
        page = inspector.log_page("main", 0, 7)
        while True:
            items.extend(page["items"])
            if page["nextSeq"] is None:
                break
            page = inspector.log_page("main", page["nextSeq"], 7)
        covered = [s for item in items for s in range(item["seq"], item.get("lastSeq", item["seq"]) + 1)]
        assert covered == list(range(facts["lastSeq"] + 1))  # every event once, in order
        chunks = [item for item in items if item["kind"] == "chunks"]
        assert chunks and chunks[0]["text"] == "Reading it." and chunks[0]["count"] == 5
        assert chunks[0]["chunkTypes"] == {"block-start": 1, "text-delta": 3, "usage": 1}
        call = next(item for item in items if item["kind"] == "tool-call")
        result = next(item for item in items if item["seq"] == call["pairedSeq"])
        assert result["kind"] == "tool-result" and result["pairedSeq"] == call["seq"] and result["callId"] == "c1"
        assert next(item for item in items if item["seq"] == facts["checkpoint"])["mark"]["kind"] == "checkpoint"
        assert next(item for item in items if item["seq"] == facts["replacement"])["mark"]["kind"] == "pruned"
        assert all(item["turn"] is not None for item in items)
        header = next(item for item in items if item["kind"] == "request-header")
        assert header["data"]["header"]["system"] == "Be careful."

        crashed = inspector.log_page("crashed", 0, 100)["items"]
        closers = [item for item in crashed if item.get("pending")]
        assert [item["seq"] for item in closers] == list(range(facts["crashedLastStored"] + 1, len(crashed)))
        assert closers[0]["closer"] == "TOOL_OUTCOME_UNKNOWN" and closers[0]["pairedSeq"] == facts["crashedLastStored"]
        summary = inspector.summary("crashed")
        assert summary["status"] == "repairable" and summary["closers"] == len(closers)
        assert inspector.summary("main")["status"] == "ok"
    finally:
        inspector.close()


def test_sessions_rows_come_from_the_projection_cache(written: Written) -> None:
    inspector = _inspector(written)
    try:
        rows = {row["id"]: row for row in inspector.sessions()}
        assert set(rows) == {"main", "main-fork", "crashed", "hostile"}
        assert rows["main-fork"]["parentSession"] == "main"
        assert rows["main"]["turns"] == 2 and rows["main"]["status"] == "ok"
        assert rows["hostile"]["title"] == "<img src=x onerror=window.__pwned=5>"  # data: escaping is the page's job
        order = [row["id"] for row in inspector.sessions()]
        assert order == ["hostile", "crashed", "main-fork", "main"]  # newest activity first
        assert inspector.loads == 0  # the listing never loads a whole session into the LRU
    finally:
        inspector.close()


def test_search_hits_name_the_seq_to_open(written: Written) -> None:
    inspector = _inspector(written)
    try:
        hits = inspector.search(SEARCH_WORD)["items"]
        assert {hit["bestMatch"]["sessionId"] for hit in hits} == {"main", "main-fork"}
        best = next(hit["bestMatch"] for hit in hits if hit["bestMatch"]["sessionId"] == "main")
        assert SEARCH_WORD in best["snippet"]
        assert inspector.state_at("main", best["seq"])["event"]["type"] == "user/message"
        events = inspector.search(SEARCH_WORD, session_id="main")["items"]
        assert [hit["seq"] for hit in events] == [best["seq"]]
    finally:
        inspector.close()


def test_an_appended_log_is_continued_not_read_again(tmp_path: Path) -> None:
    """The LRU serves a loaded session while its stored revision is unchanged; after a writer appends,
    the loaded session is continued by the stored suffix (the log is not read again)."""
    import agentlog as al

    from .stores import write_store

    write_store(tmp_path, "jsonl")
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    try:
        last = inspector.summary("main")["lastSeq"]
        inspector.state_at("main", 0)
        assert inspector.loads == 1
        store = al.SessionStore()
        writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
        session = writer.resume("main")
        session.append("turn/start", {"turn": 3})
        session.append("user/message", al.user_message("more"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
        store.flush(session)
        store.dispose(session)
        writer.close()
        new_last = inspector.summary("main")["lastSeq"]
        assert new_last >= last + 3  # (a resume may log its own marker first)
        assert (inspector.loads, inspector.extensions) == (1, 1)
        assert inspector.state_at("main", new_last)["messages"][-1]["content"][0]["text"] == "more"
    finally:
        inspector.close()


def test_refusals_are_typed(written: Written) -> None:
    inspector = _inspector(written)
    try:
        with pytest.raises(SeqOutOfRangeError):
            inspector.state_at("main", 10_000)
        with pytest.raises(SeqOutOfRangeError):
            inspector.log_page("main", 10_000)
        with pytest.raises(SessionNotFoundError):
            inspector.state_at("nope", 0)
        with pytest.raises(InspectorRequestError):
            inspector.log_page("main", 0, 0)
    finally:
        inspector.close()
    for bad in ["", "a\x00b", "x" * 2000, "\x1b[31m"]:
        with pytest.raises(InvalidSessionIdError):
            validate_session_id(bad)
    assert validate_session_id("../../etc/passwd") == "../../etc/passwd"  # encoded by the backend: never a path
    for bad_seq in ["-1", "1e3", " 1", "0x10", "", "١"]:
        with pytest.raises(InspectorRequestError):
            validate_seq(bad_seq)
    assert validate_seq("42") == 42


def test_a_traversal_id_reads_nothing_outside_the_store(tmp_path: Path) -> None:
    from .stores import write_store

    write_store(tmp_path / "store", "jsonl")
    (tmp_path / "secret").mkdir()
    inspector = Inspector(open_read_only(tmp_path / "store", "jsonl"))
    try:
        for session_id in ["../secret", "../../etc/passwd", "/etc/passwd", "..", "."]:
            with pytest.raises((SessionNotFoundError, InvalidSessionIdError)):
                inspector.state_at(session_id, 0)
    finally:
        inspector.close()


def test_a_long_context_is_served_a_window_at_a_time(tmp_path: Path) -> None:
    """The windows of a state, concatenated, are the whole of ``derive_messages()`` and of the surface;
    the default window is the newest messages."""
    import agentlog as al

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("long", meta={"cwd": "/work"})
    for turn in range(1, 31):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", al.user_message(f"prompt {turn}"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    store.flush(session)
    store.dispose(session)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    reference = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, "jsonl"))
    try:
        seq = inspector.summary("long")["lastSeq"]
        point = reference.view("long").at(seq)
        newest = inspector.state_at("long", seq, limit=7)
        assert newest["messageCount"] == 30 and newest["messagesFrom"] == 23
        assert newest["messages"] == thaw(point.derive_messages().to_list())[23:]
        messages: list[Any] = []
        surface: list[int] = []
        start = 0
        while start < 30:
            window = inspector.state_at("long", seq, messages_from=start, limit=7)
            assert window["surfaceFrom"] == len(surface)
            messages.extend(window["messages"])
            surface.extend(node["seq"] for node in window["surface"])
            start += 7
        assert messages == thaw(point.derive_messages().to_list())
        assert surface == list(point.surface.nodes)
        with pytest.raises(InspectorRequestError):
            inspector.state_at("long", seq, limit=0)
    finally:
        reference.close()
        inspector.close()


def test_the_fork_tree_is_the_whole_lineage(written: Written) -> None:
    inspector = _inspector(written)
    try:
        for session_id in ("main", "main-fork"):
            doc = inspector.fork_tree(session_id)
            assert doc["target"] == session_id and doc["rootId"] == "main" and doc["complete"]
            tree = doc["tree"]
            assert tree["id"] == "main" and [child["id"] for child in tree["children"]] == ["main-fork"]
            assert tree["children"][0]["seedLength"] == tree["children"][0]["seedLength"] > 0
        alone = inspector.fork_tree("crashed")["tree"]
        assert alone["id"] == "crashed" and alone["children"] == []
    finally:
        inspector.close()


def test_a_diff_turns_one_moment_into_the_other(written: Written) -> None:
    """Applying the ops to the messages at ``from`` gives the messages at ``to`` (every pair of a sample of
    seqs); across the compaction, turn one's four messages are replaced by the checkpoint."""
    root, kind, facts = written
    inspector = _inspector(written)
    reference = PersistenceCoordinator(SessionStore(), open_read_only(root, kind))
    try:
        view = reference.view("main")
        sample = [0, 3, 9, 10, facts["beforePrune"], facts["replacement"], facts["checkpoint"], facts["lastSeq"]]
        for a in sample:
            for b in sample:
                before = thaw(view.at(a).derive_messages().to_list())
                after = thaw(view.at(b).derive_messages().to_list())
                doc = inspector.diff("main", a, b)
                assert (doc["fromCount"], doc["toCount"]) == (len(before), len(after))
                rebuilt: list[Any] = []
                for op in doc["ops"]:
                    if op["op"] == "equal":
                        rebuilt.extend(before[op["from"][0] : op["from"][1]])
                    else:
                        assert [entry["message"] for entry in op["removed"]] == before[op["from"][0] : op["from"][1]]
                        rebuilt.extend(entry["message"] for entry in op["added"])
                assert rebuilt == after, (a, b)
        across = inspector.diff("main", facts["beforeCompaction"], facts["checkpoint"])["ops"]
        changed = [op for op in across if op["op"] != "equal"]
        assert len(changed) == 1 and [e["seq"] for e in changed[0]["removed"]] == facts["turnOne"]
        assert [e["seq"] for e in changed[0]["added"]] == [facts["checkpoint"]]
    finally:
        reference.close()
        inspector.close()


def test_charts_are_the_projection_units_over_the_log(written: Written) -> None:
    """Pressure at each usage sample, tokens per turn and tool time per step, as the units fold them."""
    from .stores import usage_input

    _root, _kind, facts = written
    inspector = _inspector(written)
    try:
        charts = inspector.charts("main")
        assert [point[1] for point in charts["pressure"]] == [usage_input(t, s) for t in (1, 2) for s in (1, 2)]
        assert [turn["tokens"] for turn in charts["turns"]] == [
            sum(usage_input(t, s) + 10 * s for s in (1, 2)) for t in (1, 2)
        ]
        assert [(step["turn"], step["step"], step["toolMs"]) for step in charts["steps"]] == [
            (1, 1, 1000),  # the tool result lands one clock tick (1 s) after its call
            (1, 2, 0),
            (2, 1, 1000),
            (2, 2, 0),
        ]
        assert charts["compactions"] == [facts["checkpoint"] - 1]  # the compaction/summary
        assert inspector.loads == 1
    finally:
        inspector.close()


def test_an_unchanged_listing_is_served_from_the_rows_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions page asks again and again: rows are kept with their revision, and only a session whose
    revision changed is read again (from the memory medium's rows and its tail, when the store has no
    cache file)."""
    import agentlog as al
    import agentlog.inspector.views as views

    from .stores import write_store

    write_store(tmp_path, "jsonl")
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    real = views.ProjectionCache
    opened: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(views, "ProjectionCache", counting)
    try:
        first = inspector.sessions()
        assert len(opened) == 1
        assert inspector.sessions() == first and len(opened) == 1  # nothing read
        store = al.SessionStore()
        writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
        session = writer.resume("crashed")  # its open turn is closed: the log changes
        store.dispose(session)
        writer.close()
        again = {row["id"]: row for row in inspector.sessions()}
        assert len(opened) == 2
        assert again["crashed"]["events"] > {row["id"]: row for row in first}["crashed"]["events"]
        assert again["main"] == {row["id"]: row for row in first}["main"]
    finally:
        inspector.close()


def test_the_listing_tells_open_and_interrupted_turns_with_no_log_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status of a row comes with it from the projection cache (the ``lastTurn`` unit): telling the
    page's statuses reads no log, and a turn opened hundreds of events before the end is still open."""
    import agentlog as al

    from .stores import write_store

    write_store(tmp_path, "jsonl")
    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    long = store.create("long-open", meta={"cwd": "/work/project"})
    long.append("turn/start", {"turn": 1})
    for index in range(600):  # far more than any tail a listing would read
        long.append("user/message", al.user_message(f"note {index}"), {"surfaceOp": "append"})
    store.flush(long)
    store.dispose(long)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    try:
        listed = inspector.sessions()
        reads: list[str] = []
        real = inspector.reader.read_from

        def counting(session_id: str, from_seq: int) -> Any:
            reads.append(session_id)
            return real(session_id, from_seq)

        monkeypatch.setattr(inspector.reader, "read_from", counting)
        rows = {row["id"]: row for row in inspector.refine_status(listed)}
        assert reads == []  # statuses are served, not read from the logs' tails
        monkeypatch.undo()
        assert rows["crashed"]["status"] == "repairable"  # its turn is open: a resume closes it
        assert rows["long-open"]["status"] == "repairable"
        assert rows["main"]["status"] == rows["hostile"]["status"] == "ok"
        assert inspector.summary("long-open")["status"] == "repairable"  # the session page agrees
        writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
        store.dispose(writer.resume("crashed"))  # the repair commits the closers: the turn ends interrupted
        writer.close()
        rows = {row["id"]: row for row in inspector.refine_status(inspector.sessions())}
        assert rows["crashed"]["status"] == "interrupted"
        assert inspector.summary("crashed")["status"] == "interrupted"
    finally:
        inspector.close()


@pytest.mark.parametrize("kind", ["jsonl", "jsonl-zstd"])
@pytest.mark.parametrize("tear", ["fragment", "defective-last-line"])
def test_the_listing_tells_a_torn_tail_repairable_without_a_whole_read(
    tmp_path: Path, kind: str, tear: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash that cut the last write short leaves a torn tail: the sessions page says ``repairable`` (a
    resume cuts it) as the session page does, from a probe of the log's end: the torn log is not read whole."""
    from agentlog.kernel.jsoncodec import dumps
    from agentlog.persistence.jsonl._zstdframes import compress_frame
    from agentlog.persistence.jsonl.backend import JsonlBackend

    from .stores import write_store

    write_store(tmp_path, kind)
    writer = open_backend(tmp_path, kind)
    stored = writer.load_stored("main")
    assert stored is not None and stored.torn_marker is None
    path = writer.locate(stored.meta)
    assert path is not None
    writer.close()
    line = dumps({"type": "assistant/chunk", "seq": len(stored.events) + 1, "time": 1, "data": {"turn": 9}}) + b"\n"
    if tear == "fragment":
        tail = compress_frame(line)[:30] if kind == "jsonl-zstd" else line[:25]
    else:  # a last line that does not continue the seq: in zstd, inside a frame the crash cut short
        tail = compress_frame(line)[:-1] if kind == "jsonl-zstd" else line
    with open(path, "ab") as fh:
        fh.write(tail)
    reader = open_read_only(tmp_path, kind)
    assert reader.load_stored("main").torn_marker is not None  # what the backend reports as torn
    inspector = Inspector(reader)
    try:
        rows = inspector.sessions()
        whole_reads: list[str] = []
        real = JsonlBackend.load_stored

        def counting(self: JsonlBackend, session_id: str) -> Any:
            whole_reads.append(session_id)
            return real(self, session_id)

        monkeypatch.setattr(JsonlBackend, "load_stored", counting)
        refined = {row["id"]: row for row in inspector.refine_status(rows)}
        assert refined["main"]["status"] == "repairable"
        assert refined["hostile"]["status"] == "ok"
        assert "main" not in whole_reads
        monkeypatch.undo()
        summary = inspector.summary("main")
        assert summary["tornTail"] is True and summary["status"] == "repairable"
    finally:
        inspector.close()


@pytest.mark.parametrize("kind", ["jsonl-zstd", "sqlite"])
def test_states_from_the_surface_timeline_equal_session_at_with_replacements_and_silent_nodes(
    tmp_path: Path, kind: str
) -> None:
    """The slider reads the loaded session's surface timeline (checkpoints, not a fold of the prefix):
    at every seq, with replacements of one and of several nodes, assistant messages that derive no
    message (empty content) and streamed chunk runs, every window of the state, the counts, the
    replacements and the shadowed seqs are ``view.at(seq)``'s."""
    import agentlog as al
    from agentlog.kernel.surface import fold_surface
    from agentlog.testing.builders import assistant_msg_data, user_msg

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, kind))
    session = store.create("mixed", meta={"cwd": "/work"})
    for turn in range(1, 13):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg(f"prompt {turn}"), {"surfaceOp": "append"})
        session.append("step/start", {"turn": turn, "step": 1})
        for k in range(5):
            chunk = {"type": "text-delta", "index": 0, "text": f"w{k}"}
            session.append("assistant/chunk", {"turn": turn, "step": 1, "chunk": chunk})
        blocks: Any = [] if turn % 3 == 0 else f"answer {turn}"
        session.append("assistant/message", assistant_msg_data(blocks, turn=turn), {"surfaceOp": "append"})
        session.append("step/end", {"turn": turn, "step": 1})
        if turn % 4 == 0:  # replace the last few nodes (one, then several) by a summary
            nodes = list(session.surface.nodes)
            shadow = nodes[-(turn // 4) :]
            session.append(
                "user/message",
                user_msg(f"summary {turn}", source={"kind": "plugin", "plugin": "t"}),
                {"surfaceOp": {"op": "replace", "start": shadow[0], "end": shadow[-1]}, "sourceEventSeqs": shadow},
            )
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    store.flush(session)
    store.dispose(session)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, kind))
    reference = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, kind))
    try:
        view = reference.view("mixed")
        last = inspector.summary("mixed")["lastSeq"]
        assert last == view.seq
        for seq in range(last + 1):
            point = view.at(seq)
            expected = thaw(point.derive_messages().to_list())
            nodes = list(point.surface.nodes)
            fold = fold_surface(point.events)
            whole = inspector.state_at("mixed", seq, limit=2000)
            assert whole["messages"] == expected, seq
            assert whole["messageCount"] == len(expected) and whole["surfaceCount"] == len(nodes), seq
            assert [node["seq"] for node in whole["surface"]] == nodes, seq
            assert [r["seq"] for r in whole["replacements"]] == [r.seq for r in fold.replacements], seq
            assert whole["shadowed"] == sorted({s for r in fold.replacements for s in r.shadowed_seqs}), seq
            messages: list[Any] = []
            surface: list[int] = []
            start = 0
            while True:
                window = inspector.state_at("mixed", seq, messages_from=start, limit=3)
                messages.extend(window["messages"])
                seqs = [node["seq"] for node in window["surface"]]
                assert window["surfaceFrom"] == len(surface), seq
                assert set(window["messageSeqs"]) <= set(seqs), seq
                surface.extend(seqs)
                start += 3
                if start >= len(expected):
                    break
            assert messages == expected, seq
            assert surface == nodes, seq  # a node that derives no message is in exactly one window
        diff = inspector.diff("mixed", 10, last)
        assert diff["fromCount"] == len(view.at(10).derive_messages())
        assert diff["toCount"] == len(view.derive_messages())
        assert inspector.loads == 1
    finally:
        reference.close()
        inspector.close()


def test_events_between_turns_and_steps_belong_to_neither(tmp_path: Path) -> None:
    """An event without its own turn is attributed to the turn (and step) open at its seq: one logged
    after a turn ended (or a step ended) and before the next began has no turn (or no step)."""
    import agentlog as al

    store = al.SessionStore()
    writer = PersistenceCoordinator(store, open_backend(tmp_path, "jsonl"))
    session = store.create("between", meta={"cwd": "/work"})
    title = {"title": "t", "messageSeqs": [1], "source": {"kind": "user"}}
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("hi"), {"surfaceOp": "append"})
    session.append("step/start", {"turn": 1, "step": 1})
    inside = session.append("session/title", title).seq
    session.append("step/end", {"turn": 1, "step": 1})
    between_steps = session.append("session/title", title).seq
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    between_turns = session.append("session/title", title).seq
    store.flush(session)
    store.dispose(session)
    writer.close()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    try:
        items = {item["seq"]: item for item in inspector.log_page("between", 0, 100)["items"]}
        assert (items[inside]["turn"], items[inside]["step"]) == (1, 1)
        assert (items[between_steps]["turn"], items[between_steps]["step"]) == (1, None)
        assert (items[between_turns]["turn"], items[between_turns]["step"]) == (None, None)
    finally:
        inspector.close()
