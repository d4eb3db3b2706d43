"""The Typer application of the ``agentlog`` command, its global options (``--version``), and lazy commands.

The commands are registered on it by :mod:`agentlog.cli.commands`, in the order ``--help`` lists them,
by name and module only (:func:`lazy_command`): a command's module, and what it imports, loads when
that command runs (or ``--help`` lists it). So ``agentlog --version`` imports no command at all, and
``agentlog ls`` none of the agent loop, the LLM provider (``openai``) or the framework adapters
(``tests/test_lazy_imports.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from .. import _version

_COMMANDS: dict[str, tuple[str, str]] = {}
"""Command name -> (module, function), in registration (``--help``) order."""


def lazy_command(name: str, module: str, function: str) -> None:
    """Register ``agentlog NAME`` as ``module.function`` (``module`` relative to this package), unimported."""
    _COMMANDS[name] = (module, function)


def command_function(name: str) -> Callable[..., Any]:
    """The function behind ``agentlog NAME`` (this imports its module)."""
    module, function = _COMMANDS[name]
    callback: Callable[..., Any] = getattr(importlib.import_module(module, __package__), function)
    return callback


class _LazyCommands(MutableMapping[str, Any]):
    """The group's command mapping: names are known up front, a click command is built on first lookup."""

    def __init__(self, build: Callable[[str], Any], eager: MutableMapping[str, Any]) -> None:
        self._build = build
        self._built: dict[str, Any] = dict(eager)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in _COMMANDS:
                raise KeyError(name)
            self._built[name] = self._build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from _COMMANDS
        yield from (name for name in self._built if name not in _COMMANDS)

    def __len__(self) -> int:
        return len(_COMMANDS.keys() | self._built.keys())

    def __contains__(self, name: object) -> bool:
        return name in _COMMANDS or name in self._built


class _LazyGroup(TyperGroup):
    """A :class:`TyperGroup` whose commands come from :data:`_COMMANDS`, each built when first looked up."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(self._build_command, self.commands)

    def _build_command(self, name: str) -> Any:
        # A scratch Typer turns the function into a click command exactly as ``app.command(name)`` would.
        scratch = typer.Typer()
        scratch.command(name)(command_function(name))
        return typer.main.get_command_from_info(
            scratch.registered_commands[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=self.rich_markup_mode,
        )


app = typer.Typer(
    cls=_LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    help="agentlog: an agent session as an append-only, validated event log.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"agentlog {_version.__version__}")
        raise typer.Exit()


@app.callback()
def _app_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """agentlog: an agent session as an append-only, validated event log."""
