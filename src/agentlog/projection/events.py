"""The session title's events (runtime spec §6.10, the original's ``session-title`` and ``session-title-llm``).

Both are log-only. ``session/title`` is a last-wins snapshot: the current title is the fold of the log
(:func:`agentlog.projection.title.fold_session_title`), never mutable metadata. A model-written title is
preceded by ``session/title-llm-request``, the record of the request, appended before it is dispatched.
The writers are :mod:`.title_service`; the readers :mod:`.title`, the session listing and the search index.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

from ..kernel import events as _core

__all__ = [
    "SESSION_TITLE",
    "SESSION_TITLE_LLM_REQUEST",
    "SessionTitleData",
    "SessionTitleLlmRequestData",
    "SessionTitleModel",
    "SessionTitleSource",
]

SESSION_TITLE: Final = _core.SESSION_TITLE
"""The log-only, last-wins title event (never on the model surface)."""

SESSION_TITLE_LLM_REQUEST: Final = "session/title-llm-request"
"""The log-only record of a title model request, appended before the request is dispatched."""


class SessionTitleModel(TypedDict):
    """The exact model route that wrote a title (or served its request)."""

    provider: str
    model: str


class SessionTitleSource(TypedDict):
    """Who accepted the title: ``{kind: "fallback"}``, ``{kind: "user"}`` (a rename, which pins the
    title) or ``{kind: "provider", provider, model?}``."""

    kind: Literal["fallback", "provider", "user"]
    provider: NotRequired[str]
    model: NotRequired[SessionTitleModel]


class SessionTitleData(TypedDict):
    """The data of ``session/title``; ``messageSeqs`` is empty exactly for a user rename."""

    title: str
    messageSeqs: list[int]
    source: SessionTitleSource


class SessionTitleLlmRequestData(TypedDict):
    """The data of ``session/title-llm-request``: the request exactly as it is sent (``messages`` are the
    one framed user message), the user messages it titles and the title provider's id."""

    titleProvider: str
    messageSeqs: list[int]
    route: SessionTitleModel
    system: str
    messages: list[Any]
    maxTokens: int
