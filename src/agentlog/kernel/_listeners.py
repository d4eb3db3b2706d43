"""Listener plumbing shared by the session and its store: an awaitable a listener returned is observed."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import describe_error

logger = logging.getLogger("agentlog")


def observe_async(awaitable: Any, prefix: str) -> None:
    """Run a listener's awaitable in the current loop and log (never raise) its failure."""
    import asyncio  # here, not at import: a session that never meets an awaitable never loads asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        close = getattr(awaitable, "close", None)
        if callable(close):
            close()
        logger.warning("%sRuntimeError: listener returned an awaitable outside a running event loop", prefix)
        return
    future = asyncio.ensure_future(awaitable, loop=loop)

    def _done(fut: Any) -> None:
        if fut.cancelled():
            return
        err = fut.exception()
        if err is not None:
            logger.warning("%s%s", prefix, describe_error(err))

    future.add_done_callback(_done)
