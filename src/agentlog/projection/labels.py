"""The ``labels`` projection unit: a session's user labels and tags, kept in the cache for listings.

The metadata itself is a log fact (:mod:`agentlog.kernel.labels`: ``session/labels`` and ``session/tags``
events); this unit folds it like the title unit folds ``session/title``, so ``ls --label``/``--tag``,
``search --label`` and the inspector's session filter read one cache row per session instead of a log.
The view is ``{"labels": {key: value}, "tags": [tag, ...]}`` (first-set and first-added order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import ProjectionRowError
from ..kernel.labels import LabelsState, check_label_key, check_label_value, check_tag, initial_labels, reduce_labels
from .units import ProjectionUnit

__all__ = ["LABELS_KEY", "LABELS_STATE_VERSION", "LABELS_UNIT", "labels_match", "labels_of"]

LABELS_KEY: Final = "labels"
LABELS_STATE_VERSION: Final = 1


def _parse_labels_state(value: object) -> LabelsState:
    """A state read back from a checkpoint row: the two fields, every key, value and tag valid."""
    try:
        if not isinstance(value, Mapping) or set(value) != {"labels", "tags"}:
            raise ValueError("not {labels, tags}")
        labels, tags = value["labels"], value["tags"]
        if not isinstance(labels, Mapping) or not isinstance(tags, Sequence) or isinstance(tags, str):
            raise ValueError("labels must be an object and tags a list")
        for key, item in labels.items():
            check_label_value(check_label_key(key), item)
        for tag in tags:
            check_tag(tag)
    except (ValueError, TypeError) as err:
        raise ProjectionRowError(f"labels projection state is invalid ({err}): {value!r}"[:300]) from None
    return {"labels": dict(labels), "tags": list(tags)}


def _reduce(state: LabelsState, event: Any) -> LabelsState:
    return reduce_labels(state, event)


LABELS_UNIT: Final[ProjectionUnit[LabelsState, LabelsState]] = ProjectionUnit(
    key=LABELS_KEY,
    state_version=LABELS_STATE_VERSION,
    initial=initial_labels,
    reduce=_reduce,
    view=lambda state: state,
    client_visible=True,
    parse_state=_parse_labels_state,
)
"""The current labels and tags (agentlog's unit, not one of the original's five)."""


def labels_of(values: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """``(labels, tags)`` of a served snapshot's values (empty when the unit was not served)."""
    view = values.get(LABELS_KEY)
    if not isinstance(view, Mapping):
        return {}, []
    return dict(view.get("labels") or {}), list(view.get("tags") or ())


def labels_match(
    labels: Mapping[str, str], tags: Iterable[str], wanted_labels: Iterable[tuple[str, str]], wanted_tags: Iterable[str]
) -> bool:
    """Whether a session carries every wanted ``key=value`` label and every wanted tag (the filters AND)."""
    have = set(tags)
    return all(labels.get(key) == value for key, value in wanted_labels) and all(tag in have for tag in wanted_tags)
