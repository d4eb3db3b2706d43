"""User metadata on a session: labels (``key=value``) and tags, as log events.

The header is the original's fixed record, so user metadata cannot live there; it is a log fact like
the title. Two agentlog event types carry it, both appended with ``ignorable: true`` so the original's
readers (which refuse an unknown type unless it is marked ignorable, runtime spec §8) still load the log:

* ``session/labels`` ``{"labels": {key: value | null}}``: each key set to its value, or removed (``null``);
* ``session/tags`` ``{"add": [tag, ...], "remove": [tag, ...]}``: tags added, then tags removed.

The current labels and tags are the fold of those events (:func:`fold_labels`), which the ``labels``
projection unit keeps in the cache so a listing filters without reading logs.

**Rules** (checked by the registered validators, so append and load refuse the same events): a key or a
tag is 1–64 characters of ``[A-Za-z0-9_.-]`` (safe in a shell word, a URL query and a file name); a value
is a string of 1–256 characters with no control, format or unassigned code point (nothing that can make a
terminal line lie); one event changes 1–64 labels or tags. A session carries at most 64 labels and 64
tags: the :class:`~agentlog.kernel.session.Session` methods refuse a change that would exceed it (a fold of
a log written by other code does not cap, it reports what is there).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypedDict

from ..errors import SessionLabelError
from .events import SESSION_LABELS, SESSION_TAGS, EventTypes, event_types

__all__ = [
    "MAX_LABELS",
    "MAX_LABEL_KEY_CHARS",
    "MAX_LABEL_VALUE_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "SESSION_LABELS",
    "SESSION_TAGS",
    "LabelsState",
    "check_label_key",
    "check_label_value",
    "check_labels_data",
    "check_tag",
    "check_tags_data",
    "fold_labels",
    "labels_change",
    "parse_label_filter",
    "reduce_labels",
    "register_label_types",
    "tags_change",
]


MAX_LABELS: Final = 64
MAX_TAGS: Final = 64
MAX_LABEL_KEY_CHARS: Final = 64
MAX_TAG_CHARS: Final = 64
MAX_LABEL_VALUE_CHARS: Final = 256

_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ALLOWED_NAME: Final = "1-64 characters of A-Z a-z 0-9 _ . -"


class LabelsState(TypedDict):
    """The folded metadata: labels in first-set order, tags in first-added order."""

    labels: dict[str, str]
    tags: list[str]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_label_key(key: object) -> str:
    """``key`` if it is a valid label key, else :class:`~agentlog.errors.SessionLabelError`."""
    if not isinstance(key, str) or _NAME.fullmatch(key) is None:
        raise SessionLabelError(f"label key {_shown(key)} is invalid: a key is {_ALLOWED_NAME}")
    return key


def check_tag(tag: object) -> str:
    """``tag`` if it is a valid tag, else :class:`~agentlog.errors.SessionLabelError`."""
    if not isinstance(tag, str) or _NAME.fullmatch(tag) is None:
        raise SessionLabelError(f"tag {_shown(tag)} is invalid: a tag is {_ALLOWED_NAME}")
    return tag


def check_label_value(key: str, value: object) -> str:
    """``value`` if it is a valid value for ``key``, else :class:`~agentlog.errors.SessionLabelError`."""
    if not isinstance(value, str):
        raise SessionLabelError(
            f'label "{key}" value must be a string, got {type(value).__name__} {_shown(value)} '
            "(use None to remove the label)"
        )
    if not 1 <= len(value) <= MAX_LABEL_VALUE_CHARS:
        raise SessionLabelError(
            f'label "{key}" value must be 1-{MAX_LABEL_VALUE_CHARS} characters, got {len(value)} '
            "(to remove the label, set it to None)"
        )
    for char in value:
        if unicodedata.category(char)[0] == "C":
            raise SessionLabelError(
                f'label "{key}" value contains the control or invisible character U+{ord(char):04X}: '
                "a value is printable text (spaces allowed)"
            )
    return value


def _count(what: str, count: int) -> None:
    if not 1 <= count <= MAX_LABELS:
        raise SessionLabelError(f"one {what} change must name 1-{MAX_LABELS} entries, got {count}")


def check_labels_data(data: Any) -> None:
    """The ``session/labels`` validator: ``{"labels": {key: value | null}}`` with 1-64 valid entries."""
    if not isinstance(data, Mapping) or set(data) != {"labels"} or not isinstance(data["labels"], Mapping):
        raise SessionLabelError('session/labels data must be {"labels": {key: value or null}}')
    changes = data["labels"]
    _count("label", len(changes))
    for key, value in changes.items():
        check_label_key(key)
        if value is not None:
            check_label_value(key, value)


def check_tags_data(data: Any) -> None:
    """The ``session/tags`` validator: ``{"add": [...], "remove": [...]}`` naming 1-64 valid tags."""
    if not isinstance(data, Mapping) or not set(data) <= {"add", "remove"}:
        raise SessionLabelError('session/tags data must be {"add": [tags], "remove": [tags]}')
    total = 0
    for field in ("add", "remove"):
        tags = data.get(field, ())
        if not isinstance(tags, Sequence) or isinstance(tags, str):
            raise SessionLabelError(f"session/tags {field} must be a list of tags")
        for tag in tags:
            check_tag(tag)
        total += len(tags)
    _count("tag", total)


def labels_change(labels: Mapping[str, str | None]) -> dict[str, str | None]:
    """A checked copy of a ``set_labels`` argument (the data of one ``session/labels`` event)."""
    if not isinstance(labels, Mapping):
        raise SessionLabelError(f"labels must be a mapping of key to value, got {type(labels).__name__}")
    changes: dict[str, str | None] = {}
    for key, value in labels.items():
        check_label_key(key)
        changes[key] = None if value is None else check_label_value(key, value)
    if len(changes) > MAX_LABELS:
        raise SessionLabelError(f"one label change must name at most {MAX_LABELS} keys, got {len(changes)}")
    return changes


def tags_change(tags: Iterable[str]) -> list[str]:
    """Checked tags of an ``add_tags``/``remove_tags`` argument, duplicates dropped, order kept."""
    if isinstance(tags, str):
        raise SessionLabelError(f"tags must be a list of tags, not the string {_shown(tags)} (wrap it in a list)")
    seen: dict[str, None] = {}
    for tag in tags:
        seen[check_tag(tag)] = None
    if len(seen) > MAX_TAGS:
        raise SessionLabelError(f"one tag change must name at most {MAX_TAGS} tags, got {len(seen)}")
    return list(seen)


def initial_labels() -> LabelsState:
    return {"labels": {}, "tags": []}


def reduce_labels(state: LabelsState, event: Mapping[str, Any]) -> LabelsState:
    """One fold step: ``state`` itself for an event that is not a label or tag change, else a new state."""
    etype = event["type"]
    if etype == SESSION_LABELS:
        labels = dict(state["labels"])
        for key, value in event["data"]["labels"].items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        return {"labels": labels, "tags": state["tags"]}
    if etype == SESSION_TAGS:
        data = event["data"]
        tags = dict.fromkeys(state["tags"])
        for tag in data.get("add", ()):
            tags[tag] = None
        for tag in data.get("remove", ()):
            tags.pop(tag, None)
        return {"labels": state["labels"], "tags": list(tags)}
    return state


def fold_labels(events: Iterable[Mapping[str, Any]]) -> LabelsState:
    """The current labels and tags of a log (a detached copy)."""
    state = initial_labels()
    for event in events:
        state = reduce_labels(state, event)
    return {"labels": dict(state["labels"]), "tags": list(state["tags"])}


def parse_label_filter(text: str, what: str = "--label") -> tuple[str, str]:
    """``KEY=VALUE`` of a ``--label`` option (or another ``what``) as ``(key, value)``, both checked."""
    key, sep, value = text.partition("=")
    if not sep:
        raise SessionLabelError(f"{what} {_shown(text)} must be KEY=VALUE (for example user=bob)")
    return check_label_key(key), check_label_value(key, value)


def register_label_types(registry: EventTypes) -> None:
    """Register both types as ignorable, with their validators, in ``registry`` (idempotent; the default
    :data:`agentlog.event_types` has them from the start)."""
    registry.register(SESSION_LABELS, ignorable=True, validator=check_labels_data)
    registry.register(SESSION_TAGS, ignorable=True, validator=check_tags_data)


register_label_types(event_types)
