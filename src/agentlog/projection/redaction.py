"""Content redaction shared by everything that lets session content leave the machine.

``agentlog export ID --html`` (the inspector's file) and a telemetry exporter (runtime spec §6.11: a
record's body is "a deep copy of event.data after the redact waterfall") both hand session content to
someone else. Both take the same hook, so a user writes their rule once:

* the protocol is a plain ``str -> str`` function (:data:`RedactText`): it is applied to every string
  of the content, at every depth (mapping keys excepted: they are the format's vocabulary);
* :class:`Redactor` is that function plus the two things a user most often wants without writing one:
  regular expressions whose matches are replaced (``[redacted]``), and dropping tool output altogether
  (the content of every ``tool-result`` block and a ``tool/result``'s ``meta``, replaced by
  ``[tool output dropped]``). Tool output is dropped *before* the strings are rewritten, so no
  function ever sees it.

The module is pure (no I/O, no clock) and imports only the kernel's vocabulary, so an exporter at any
layer above the projections can use it without the inspector's web dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias

from ..errors import InvalidOptionError
from ..kernel.events import TOOL_RESULT

__all__ = ["DROPPED_TOOL_OUTPUT", "REDACTED", "RedactText", "Redactor", "as_redactor"]

RedactText: TypeAlias = Callable[[str], str]
"""The redaction hook's protocol: one string in, its redacted form out (applied to every string)."""

REDACTED: Final = "[redacted]"
"""What a match of a :class:`Redactor` pattern becomes (unless ``replacement`` says otherwise)."""

DROPPED_TOOL_OUTPUT: Final = "[tool output dropped]"
"""What the content of a tool result becomes when tool output is dropped."""


class Redactor:
    """A redaction hook: patterns replaced, an optional user function, optionally tool output dropped.

    Calling it (``redactor(text)``) redacts one string: every match of each pattern (in order) becomes
    ``replacement``, then ``function`` is applied. :meth:`value` applies that to every string of a JSON
    value, :meth:`event_data` also drops tool output first when ``drop_tool_output`` is set. A pattern
    that is not a regular expression is refused with ``INVALID_OPTION``.
    """

    __slots__ = ("drop_tool_output", "function", "patterns", "replacement")

    def __init__(
        self,
        function: RedactText | None = None,
        *,
        patterns: Iterable[str | re.Pattern[str]] = (),
        replacement: str = REDACTED,
        drop_tool_output: bool = False,
    ) -> None:
        if function is not None and not callable(function):
            raise InvalidOptionError(f"a redaction function must be callable, got {type(function).__name__}")
        compiled: list[re.Pattern[str]] = []
        for pattern in patterns:
            if isinstance(pattern, re.Pattern):
                compiled.append(pattern)
                continue
            try:
                compiled.append(re.compile(pattern))
            except (re.error, TypeError) as err:
                raise InvalidOptionError(
                    f"redaction pattern {str(pattern)[:80]!r} is not a regular expression ({err}): fix or quote it"
                ) from None
        self.function = function
        self.patterns: tuple[re.Pattern[str], ...] = tuple(compiled)
        self.replacement = replacement
        self.drop_tool_output = drop_tool_output

    def __repr__(self) -> str:
        return (
            f"Redactor(patterns={[p.pattern for p in self.patterns]!r}, function={self.function!r}, "
            f"drop_tool_output={self.drop_tool_output})"
        )

    @property
    def rewrites_text(self) -> bool:
        """Whether strings change at all (a pattern or a function): else :meth:`value` only copies."""
        return bool(self.patterns) or self.function is not None

    @property
    def active(self) -> bool:
        """Whether this redactor changes anything."""
        return self.rewrites_text or self.drop_tool_output

    def __call__(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.sub(self.replacement, text)
        if self.function is not None:
            text = self.function(text)
            if not isinstance(text, str):
                raise InvalidOptionError(f"the redaction function returned {type(text).__name__}, not a string")
        return text

    def value(self, value: Any) -> Any:
        """A plain (unfrozen) copy of a JSON value with every string redacted (mapping keys kept)."""
        if isinstance(value, str):
            return self(value) if self.rewrites_text else value
        if isinstance(value, Mapping):
            return {key: self.value(inner) for key, inner in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(inner) for inner in value]
        return value

    def message(self, message: Any) -> Any:
        """A message (or any content) redacted: tool output dropped when asked, then every string."""
        if self.drop_tool_output:
            message = _without_tool_output(message)
        return self.value(message)

    def event_data(self, event_type: str, data: Any) -> Any:
        """An event's data as it may leave: tool output dropped when asked (every ``tool-result`` block's
        content, and a ``tool/result``'s ``meta``), then every string redacted."""
        if self.drop_tool_output:
            data = _without_tool_output(data)
            if event_type == TOOL_RESULT and isinstance(data, dict) and "meta" in data:
                data["meta"] = DROPPED_TOOL_OUTPUT
        return self.value(data)

    def event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """An event with its data redacted (:meth:`event_data`); the envelope (type, seq, time, surface
        operation) is kept: it is the log's structure, not content."""
        out = dict(event)
        out["data"] = self.event_data(str(event.get("type")), event.get("data"))
        return out


def as_redactor(hook: Redactor | RedactText | None) -> Redactor | None:
    """``hook`` as a :class:`Redactor` (a plain function is wrapped), or ``None`` when it changes nothing."""
    if hook is None:
        return None
    redactor = hook if isinstance(hook, Redactor) else Redactor(hook)
    return redactor if redactor.active else None


_DROPPED_CONTENT: Final = ({"type": "text", "text": DROPPED_TOOL_OUTPUT},)


def _without_tool_output(value: Any) -> Any:
    """A plain copy of ``value`` in which every ``tool-result`` block's content is the dropped marker."""
    if isinstance(value, Mapping):
        if value.get("type") == "tool-result" and "content" in value:
            return {
                key: ([dict(block) for block in _DROPPED_CONTENT] if key == "content" else _without_tool_output(inner))
                for key, inner in value.items()
            }
        return {key: _without_tool_output(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_tool_output(inner) for inner in value]
    return value
