"""The `clore-run` command line: one module per command, wired into one Typer app.

Every command module imports its backend, its reports and their libraries (paramiko, requests,
jinja2, pydantic) inside the command, so that a command does not load what only another uses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    app: typer.Typer


def main(argv: list[str] | None = None) -> None:
    """Entry point: every command through the Typer app and the one error boundary."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:  # Typer's import alone would take it past its 0.1 s target
        from runner import __version__

        print(f"clore-run {__version__}")
        sys.exit(0)
    import typer

    from runner.cli.boundary import run_inside
    from runner.cli.commands import run_app

    run_inside(lambda: run_app(args), typer.echo)


def __getattr__(name: str) -> Any:
    # `from runner.cli import app` for tests and embedders: Typer loads when it is asked for.
    if name == "app":
        from runner.cli.root import app as the_app

        return the_app
    raise AttributeError(name)


__all__ = ["app", "main"]
