"""The `clore-run` command line: one module per command, wired into one Typer app.

Every command module imports its backend, its reports and their libraries (paramiko, requests,
the Clore models) inside the command, so that `clore-run --version` and `validate` do not pay
for what they do not use. `--version` and the plain forms of `validate` and `run` do not even
load Typer (runner.cli.quick).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    app: typer.Typer


def main(argv: list[str] | None = None) -> None:
    """Entry point: `clore-run --version` at once, anything else through the error boundary."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        from runner import __version__

        print(f"clore-run {__version__}")
        sys.exit(0)
    from runner import pydantic_plugins
    from runner.cli import quick

    pydantic_plugins.install()  # before the first validator: see the module
    files = quick.plain_validate(args)
    if files is not None:
        quick.run_validate(files)
    run_flags = quick.plain_run(args)
    if run_flags is not None:
        quick.run_run(run_flags)
    from runner.launch import startup_over

    startup_over()  # a command of the full command line: the collector as usual
    import typer

    from runner.cli.boundary import run_inside
    from runner.cli.commands import run_app

    run_inside(lambda: run_app(args), typer.echo)


def __getattr__(name: str) -> Any:
    # `from runner.cli import app` for tests and embedders, loaded (with Typer) only when asked.
    if name == "app":
        from runner.cli.root import app as the_app

        return the_app
    raise AttributeError(name)


__all__ = ["app", "main"]
