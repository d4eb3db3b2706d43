"""The Typer application of the ``agentlog`` command and its global options (``--version``).

The commands are registered on it by :mod:`agentlog.cli.commands`, in the order ``--help`` lists them.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="agentlog: an agent session as an append-only, validated event log.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("agentlog")
        except PackageNotFoundError:  # running from a source tree that was never installed
            from .. import __version__ as installed
        typer.echo(f"agentlog {installed}")
        raise typer.Exit()


@app.callback()
def _app_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """agentlog: an agent session as an append-only, validated event log."""
