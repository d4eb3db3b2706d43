"""The token meter's accelerated streamed-answer price, and the messages its fold keeps for compaction.

With the C accelerator, ``provider_assistant_tokens`` asks ``stream_text_length`` first and runs its Python
pass only when C answers ``None``. Both must give the same price, or the same error, for any stream: well
formed ones, and cited events of odd shapes (other types or steps, missing keys, odd index or text values,
unordered or out-of-range sources). The property below prices each generated stream both ways.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentlog.compaction.meter as meter_module
from agentlog import Session
from agentlog._accel import stream_text_length
from agentlog.compaction.meter import TokenMeter, provider_assistant_tokens
from agentlog.kernel.messages import assistant_message, text_delta, user_message
from agentlog.kernel.session import derive_event_message

pytestmark = pytest.mark.accel

TEXT = st.text(alphabet=st.sampled_from(["a", " ", "é", "中", "😀", "\ud800"]), max_size=8)
INDEX = st.sampled_from([0, 0, 0, 1, 0.0, False, "0", None, [0]])
ODD = st.sampled_from([None, 5, [], {}, "x"])


def _chunk() -> st.SearchStrategy[Any]:
    text = st.one_of(TEXT, TEXT, ODD)
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text-delta", "reasoning-delta"]), "index": INDEX, "text": text}
        ),
        st.fixed_dictionaries({"type": st.just("text-delta"), "index": INDEX}),
        st.fixed_dictionaries(
            {
                "type": st.just("block-start"),
                "index": INDEX,
                "blockType": st.sampled_from(["text", "reasoning", "tool-call", 1]),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("block-end"),
                "index": INDEX,
                "block": st.one_of(
                    st.fixed_dictionaries({"type": st.sampled_from(["text", "reasoning", "image"]), "text": text}),
                    ODD,
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("tool-call-delta"),
                "index": INDEX,
                "id": st.just("c"),
                "name": st.just("read"),
                "argumentsDelta": TEXT,
            }
        ),
        st.one_of(
            st.just({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}}), st.just({"type": "usage"})
        ),
        st.one_of(
            st.builds(lambda k: {"type": "finish", "reason": {"kind": k}}, st.sampled_from(["stop", "max-tokens"])),
            st.just({"type": "finish", "reason": {}}),
            st.just({"type": "finish", "reason": "stop"}),
        ),
        st.just({"type": "mystery"}),
        ODD,
    )


def _cited(chunk: Any, seq: int, shape: str) -> dict[str, Any]:
    data: dict[str, Any] = {"turn": 1, "step": 1, "chunk": chunk}
    event: dict[str, Any] = {"type": "assistant/chunk", "seq": seq, "time": 0, "data": data}
    if shape == "other-type":
        event["type"] = "tool/call"
    elif shape == "other-step":
        data["step"] = 2
    elif shape == "float-turn":
        data["turn"] = 1.0
    elif shape == "no-chunk":
        del data["chunk"]
    elif shape == "no-data":
        del event["data"]
    return event


SHAPE = st.sampled_from(["plain"] * 12 + ["other-type", "other-step", "float-turn", "no-chunk", "no-data"])


def _price(log: list[Any], event: dict[str, Any]) -> tuple[str, Any]:
    try:
        return ("price", provider_assistant_tokens(log, event, -7))
    except Exception as error:  # a hand-made log can break the Python pass too: then C must not decide
        return (type(error).__name__, str(error))


@pytest.mark.skipif(stream_text_length is None, reason="no C accelerator (AGENTLOG_PURE_PYTHON or no build)")
@given(st.lists(st.tuples(_chunk(), SHAPE), max_size=8), st.data())
def test_the_accelerated_stream_price_equals_the_python_pass(cited: list[tuple[Any, str]], data: st.DataObject) -> None:
    log = [_cited(chunk, seq, shape) for seq, (chunk, shape) in enumerate(cited)]
    seq = len(log)
    sources = list(range(seq))
    how = data.draw(st.sampled_from(["in-order", "in-order", "reversed", "repeated", "out-of-range", "bool"]))
    if how == "reversed":
        sources.reverse()
    elif how == "repeated" and sources:
        sources.append(sources[-1])
    elif how == "out-of-range":
        sources.append(data.draw(st.sampled_from([-1, seq, seq + 3])))
    elif how == "bool" and sources:
        sources[0] = False
    event = {
        "type": "assistant/message",
        "seq": seq,
        "data": {"turn": 1, "step": 1, "message": assistant_message([], provider="p", model="m")},
        "sourceEventSeqs": sources,
    }
    accelerated = _price(log, event)
    with mock.patch.object(meter_module, "_stream_text_length", None):
        python = _price(log, event)
    assert accelerated == python


def test_a_workload_stream_is_priced_in_c_as_in_python() -> None:
    """The common shape (one text block's deltas, then usage and finish) takes the accelerated path."""
    session = Session.create("s")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    for piece in ("héllo ", "wörld ", "😀"):
        session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": text_delta(0, piece)})
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}})
    log = session.events.backing()
    event = {"type": "assistant/message", "seq": 6, "data": {"turn": 1, "step": 1}, "sourceEventSeqs": [2, 3, 4, 5]}
    if stream_text_length is not None:
        assert stream_text_length(log, [2, 3, 4, 5], 6, 1, 1) == len("héllo wörld ") + 2
    with mock.patch.object(meter_module, "_stream_text_length", None):
        python = provider_assistant_tokens(log, event, -1)
    assert provider_assistant_tokens(log, event, -1) == python == 4 + 4 + 4  # ceil(14/4) + block + role


def test_surface_messages_are_the_derived_messages_of_the_measured_nodes() -> None:
    session = Session.create("s")
    meter = TokenMeter()
    for turn in (1, 2):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_message(f"question {turn}"), {"surfaceOp": "append"})
        session.append("step/start", {"turn": turn, "step": 1})
        empty = assistant_message([], provider="p", model="m")  # derives no message
        session.append("assistant/message", {"turn": turn, "step": 1, "message": empty}, {"surfaceOp": "append"})
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    measurement = meter.measure(session)
    nodes = [node.seq for node in measurement.nodes]
    for start, stop in ((0, len(nodes)), (1, 3), (2, 2)):
        expected = [m for seq in nodes[start:stop] if (m := derive_event_message(session.events[seq])) is not None]
        got = meter._surface_messages(session, measurement, start, stop)
        assert got == expected
        assert got is not None and all(a is b for a, b in zip(got, expected, strict=True))  # the very objects

    # A replacement is folded into the kept messages as into the nodes.
    first = nodes[0]
    session.append("turn/start", {"turn": 3})
    replacement = user_message("summary")
    intent = {"surfaceOp": {"op": "replace", "start": first, "end": nodes[2]}, "sourceEventSeqs": nodes[:3]}
    session.append("user/message", replacement, intent)
    later = meter.measure(session)
    got = meter._surface_messages(session, later, 0, len(later.nodes))
    assert got == session.derive_messages().to_list()

    # Stale (the fold moved past the measurement), another session, or a session view: the caller derives.
    session.append("step/start", {"turn": 3, "step": 1})
    assert meter._surface_messages(session, later, 0, 1) == got[:1]  # nothing folded since: still current
    meter.measure(session)
    assert meter._surface_messages(session, later, 0, 1) is None
    assert meter._surface_messages(Session.create("other"), later, 0, 1) is None
    view = session.at(3)
    assert meter._surface_messages(view, meter.measure(view), 0, 1) is None
