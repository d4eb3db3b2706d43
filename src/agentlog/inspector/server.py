"""Running the inspector: the checks ``agentlog serve`` makes before it binds, and a uvicorn server
that reports its own readiness (the tests start one on a free port and wait for it, not for a sleep)."""

from __future__ import annotations

import ipaddress
import os
import threading
from dataclasses import dataclass
from typing import Any, Final

from ..errors import InvalidOptionError

__all__ = ["TOKEN_ENV", "RunningServer", "check_bind", "is_loopback", "missing_extra", "start_server"]

TOKEN_ENV: Final = "AGENTLOG_INSPECTOR_TOKEN"
INSTALL_HINT: Final = "pip install 'agentlog[inspector]'"


def missing_extra(err: ImportError) -> InvalidOptionError:
    """The typed refusal when Starlette or uvicorn is not installed."""
    return InvalidOptionError(f"agentlog serve needs the inspector extra ({err}): {INSTALL_HINT}")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> str | None:
    """The token the server will require (``token``, else ``$AGENTLOG_INSPECTOR_TOKEN``, else none).

    A host that is not loopback is refused without a token (``INVALID_OPTION``): the store's sessions
    would be readable by anyone who can reach the port. A token is printable ASCII without spaces,
    quotes, commas or semicolons (it travels in a header and a cookie), at least 16 characters long.
    """
    chosen = token if token else (os.environ.get(TOKEN_ENV) or None)
    if chosen is not None:
        bad = [ch for ch in chosen if not (0x21 <= ord(ch) <= 0x7E) or ch in '";,\\']
        if bad or len(chosen) < 16:
            raise InvalidOptionError(
                "--token must be at least 16 printable ASCII characters without spaces, quotes, commas, "
                "semicolons or backslashes (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
            )
    if not is_loopback(host) and chosen is None:
        raise InvalidOptionError(
            f"--host {host} is not a loopback address: pass --token TOKEN (or set ${TOKEN_ENV}) so that every "
            "request must present it, or bind 127.0.0.1"
        )
    return chosen


@dataclass
class RunningServer:
    """A uvicorn server running in a thread: ``url`` once it listens; ``stop()`` shuts it down."""

    server: Any
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def start_server(app: Any, host: str = "127.0.0.1", port: int = 0, *, timeout: float = 30.0) -> RunningServer:
    """Start uvicorn for ``app`` in a daemon thread and return once it listens (``port=0``: a free port)."""
    try:
        import uvicorn
    except ImportError as err:
        raise missing_extra(err) from None
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,  # a followed session's event stream never ends by itself
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="agentlog-inspector", daemon=True)
    thread.start()
    ready = threading.Event()

    def poll() -> bool:
        return bool(server.started) or not thread.is_alive()

    while not ready.wait(0.01):
        if poll():
            break
        timeout -= 0.01
        if timeout <= 0:
            server.should_exit = True
            raise InvalidOptionError(f"the inspector did not start listening on {host}:{port}")
    if not server.started:
        raise InvalidOptionError(f"the inspector could not listen on {host}:{port} (is the port in use?)")
    bound = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(server, thread, host, int(bound))
