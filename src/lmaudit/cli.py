"""The ``lmaudit`` command line.

Each command lives in a module of :mod:`lmaudit.commands`, imported only when that
command runs (or when ``--help`` lists them all), so that a light command such as
``lmaudit attacks`` never imports the model stack.

Errors a user can fix are printed as one line (cause and hint) with a non-zero
exit code; ``--debug`` shows the traceback instead. ``--quiet`` silences progress.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import typer
from rich.markup import escape
from typer.core import TyperGroup

from lmaudit import __version__
from lmaudit.api.tools import COMMAND_LINE, disk_error, git_state, mask_secrets
from lmaudit.commands import command_table, group_commands
from lmaudit.errors import LmauditError
from lmaudit.progress import console, set_quiet

# command name -> module of lmaudit.commands that defines it, read from the modules' source (not imported)
COMMANDS = command_table()
_state = {"debug": False}


class LazyGroup(TyperGroup):
    """A command group that imports a command's module the first time the command is needed."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"lmaudit.commands.{COMMANDS[name]}")
        group = typer.main.get_command(module.app)
        if name in group_commands():  # a group of subcommands, listed in the panel its Typer names
            group.name, group.rich_help_panel = name, module.app.rich_help_panel
            return group
        return group.get_command(ctx, name) if isinstance(group, TyperGroup) else group


app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True,
                  help="Audit what language models remember of their training data.")


def _version(shown: bool) -> None:
    if shown:
        print(f"lmaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or informational output."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print lmaudit's version and exit."),
) -> None:
    set_quiet(quiet)
    _state["debug"] = debug


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {mask_secrets(str(message))}\n"


def error_text(exc: LmauditError) -> str:
    """The one line the command line prints for ``exc``: a setting it names is spelled as its ``--flag``."""
    return exc.on_command_line()


def main() -> None:
    warnings.formatwarning = _format_warning
    git_state()  # the commit of the code this process imported, read now: results of a long run name it
    COMMAND_LINE[:] = ["lmaudit", *sys.argv[1:]]  # results record the command that made them
    try:
        app(standalone_mode=True)
    except LmauditError as exc:
        if _state["debug"]:
            raise
        # the message is text, not markup: brackets in it ('lmaudit[mlflow]', '[0.1, 0.2]') are printed as written
        console.print(f"[bold red]error:[/bold red] {escape(error_text(exc))}", markup=True, highlight=False,
                      soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # an unexpected failure: still one line unless --debug
        if _state["debug"]:
            raise
        disk = disk_error(exc) if isinstance(exc, OSError) else None
        if disk is not None:  # a full, read-only or forbidden disk: the path and what to do
            console.print(f"[bold red]error:[/bold red] {escape(str(disk))}", markup=True, highlight=False,
                          soft_wrap=True)
            sys.exit(2)
        console.print(f"[bold red]error:[/bold red] {type(exc).__name__}: {escape(mask_secrets(str(exc)))} (run "
                      "with --debug for the traceback)",
                      soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
