"""A repeated-term phrase's marks are counted the same by the C accelerator and by Python.

``_phrase_marks`` counts FTS5 ``highlight()``'s marks for a phrase from the token positions PostgreSQL
returns; for one term repeated, the C accelerator (``_accel.repeated_term_marks``) counts them. The Python
count (the accelerator disabled) is the reference, itself held to FTS5 by the provider parity property in
``test_postgres_search.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlog import _accel
from agentlog.query import postgres

pytestmark = pytest.mark.accel


def python_marks(positions: list[int], length: int, monkeypatch: pytest.MonkeyPatch) -> int:
    with monkeypatch.context() as patch:
        patch.setattr(postgres._accel, "repeated_term_marks", None)
        return postgres._phrase_marks({"pos0": positions}, [0] * length)


@settings(max_examples=400, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=40).map(sorted), st.integers(2, 6))
@example([1, 2, 3, 4, 5, 6], 3)  # one run: every start overlaps the previous one, one mark
@example([1, 2, 4, 5, 7, 8], 2)  # runs three apart: three marks
@example([0, 1, 2, 3], 2)  # starts 0, 1, 2 each overlap the one before: one mark
@example([0, 1, 3, 4], 2)  # occurrences 0-1 and 3-4 are apart: two marks
def test_the_accelerated_count_is_the_python_count(positions: list[int], length: int) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = python_marks(positions, length, monkeypatch)
    assert postgres._phrase_marks({"pos0": positions}, [0] * length) == expected
    if _accel.repeated_term_marks is not None:
        assert _accel.repeated_term_marks(positions, length) == expected


@pytest.mark.skipif(_accel.repeated_term_marks is None, reason="the C accelerator is disabled or not built")
@pytest.mark.parametrize("positions", [[3, 1, 2], [1, 1, 2], [-1, 0], [1, "2"], [1.0, 2.0], [2**41, 2**41 + 1]])
def test_positions_not_plainly_ascending_are_left_to_python(positions: list[object]) -> None:
    assert _accel.repeated_term_marks is not None
    assert _accel.repeated_term_marks(positions, 2) is None


def test_unsorted_positions_are_counted_as_sorted() -> None:
    assert postgres._phrase_marks({"pos0": [9, 1, 2, 8]}, [0, 0]) == 2
