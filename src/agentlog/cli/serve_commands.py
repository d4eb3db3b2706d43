"""``agentlog serve``: the inspector, a read-only web app over the store (docs/inspector.md).

Starlette and uvicorn come with the ``agentlog[inspector]`` extra and are imported only when the command
runs: ``agentlog --version``, ``--help`` and every other command start without them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import webbrowser
from typing import Annotated

import typer

from ..errors import AgentlogError
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json_line, render_error


@shared_options()
def serve_command(
    opts: StoreOptions = DEFAULT_OPTIONS,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (loopback unless --token is given).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to bind (0: any free port).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Require this token on every request (default: $AGENTLOG_INSPECTOR_TOKEN); "
            "needed for a non-loopback --host.",
            show_default=False,
        ),
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the sessions page in a browser.")] = False,
) -> None:
    """Serve a read-only web inspector of the store: sessions, search, and each session's log, surface and
    messages at any seq (the store is opened read-only; nothing is written but the derived search index).

    The first line says where it listens (with --json, {"url", "host", "port"}); --compression is ignored
    (a read-only store is read in whichever encoding it holds)."""
    try:
        from ..inspector.server import check_bind, missing_extra, start_server

        required = check_bind(host, token)
        try:
            from ..inspector.app import create_app
        except ImportError as err:
            raise missing_extra(err) from None
        from ..inspector.views import Inspector

        backend = opts.open_backend(read_only=True)
        backend.list_sessions()  # a store that does not exist is STORE_NOT_FOUND now, not on the first page
        inspector = Inspector(backend)
        running = start_server(create_app(inspector, token=required), host, port)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    url = running.url + ("/?token=" + required if required else "/")
    if opts.as_json:
        _emit_json_line({"url": url, "host": running.host, "port": running.port})
    else:
        typer.echo(f"agentlog inspector on {url}  (read-only; Ctrl-C stops it)")
    if open_browser:
        webbrowser.open(url)
    stop = threading.Event()
    with contextlib.suppress(ValueError):  # not the main thread (tests): no signal handler
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while running.thread.is_alive() and not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        inspector.close()
