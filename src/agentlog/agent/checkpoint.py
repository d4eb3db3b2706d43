"""Checkpoint barriers: flush the session log before anything irreversible happens.

Write-behind batching means a crash can lose events still inside the batching window. Three moments
must not be lost: the request sent to a model, a tool call about to run, and the start of the next
step. Before each, the agent loop calls a barrier that flushes the session (every flush listener, so
every persistence backend attached to the store). The barriers fail closed: if the flush fails, the
error propagates and the model request is not sent / the tool body does not run. A tool call whose
cancellation arrives while the barrier waits is answered with the canonical
``ABORTED_BEFORE_DISPATCH`` result instead of running.

The agent loop (:class:`agentlog.agent.Agent`) calls these barriers through the store its session is
live in; an agent runs without them only when built with ``durable=False``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..kernel.session import Session
from ..kernel.store import SessionStore

TOOL_ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"

CancelSignal = threading.Event | asyncio.Event | Callable[[], bool] | None


def aborted_before_dispatch_result() -> dict[str, Any]:
    """The tool result recorded for a call whose cancellation landed before its body started."""
    return {
        "content": [{"type": "text", "text": "Error: tool call aborted before dispatch"}],
        "isError": True,
        "error": {
            "message": "tool call aborted before dispatch",
            "info": {"name": "AbortError", "code": TOOL_ABORTED_BEFORE_DISPATCH},
        },
    }


def _is_cancelled(signal: CancelSignal) -> bool:
    if signal is None:
        return False
    if isinstance(signal, (threading.Event, asyncio.Event)):
        return signal.is_set()
    return bool(signal())


class CheckpointPolicy:
    """The three barriers, bound to a store. Sync methods for plain code, ``a``-prefixed for asyncio."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    def _live(self, session: Session | str | None) -> Session | None:
        if session is None:
            return None
        if isinstance(session, str):
            return self._store.get(session)
        return session if self._store.get(session.id) is session else None

    # -- before a model request -----------------------------------------------------------------------
    def before_model_request(self, session: Session | str | None) -> None:
        """Flush before dispatching a request; a request for no live session needs no checkpoint."""
        live = self._live(session)
        if live is not None:
            self._store.flush(live)

    async def abefore_model_request(self, session: Session | str | None) -> None:
        live = self._live(session)
        if live is not None:
            await asyncio.to_thread(self._store.flush, live)

    def guard_stream(
        self, session: Session | str | None, open_stream: Callable[[], AsyncIterator[Any]]
    ) -> AsyncIterator[Any]:
        """A lazy stream: the checkpoint runs when it is first iterated, and only then is the model called."""

        async def guarded() -> AsyncIterator[Any]:
            await self.abefore_model_request(session)
            async for item in open_stream():
                yield item

        return guarded()

    # -- before a tool body -----------------------------------------------------------------------------
    def before_tool_body(
        self, session: Session | None, *, cancelled: CancelSignal = None, nested: bool = False
    ) -> dict[str, Any] | None:
        """Flush, then return ``None`` to run the body, or the aborted result if cancelled meanwhile.

        Nested dispatches (a tool called by a tool) reuse the outer call's checkpoint.
        """
        if session is None or nested:
            return None
        self._store.flush(session)
        return aborted_before_dispatch_result() if _is_cancelled(cancelled) else None

    async def abefore_tool_body(
        self, session: Session | None, *, cancelled: CancelSignal = None, nested: bool = False
    ) -> dict[str, Any] | None:
        if session is None or nested:
            return None
        await asyncio.to_thread(self._store.flush, session)
        return aborted_before_dispatch_result() if _is_cancelled(cancelled) else None

    async def arun_tool(
        self,
        session: Session | None,
        body: Callable[[], Awaitable[dict[str, Any]]],
        *,
        cancelled: CancelSignal = None,
        nested: bool = False,
    ) -> dict[str, Any]:
        """Run a tool body behind the checkpoint; a failed checkpoint becomes an error result, body unrun."""
        try:
            gate = await self.abefore_tool_body(session, cancelled=cancelled, nested=nested)
        except Exception as err:
            return {"content": [{"type": "text", "text": f"Error: {err}"}], "isError": True}
        if gate is not None:
            return gate
        return await body()

    # -- before the next step -----------------------------------------------------------------------------
    def before_step(self, session: Session) -> None:
        self._store.flush(session)

    async def abefore_step(self, session: Session) -> None:
        await asyncio.to_thread(self._store.flush, session)
