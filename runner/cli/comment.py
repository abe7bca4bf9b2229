"""`clore-run comment SUMMARY.json [--baseline B] [--header NAME] [--token T]`.

Not being able to comment (a fork PR's read-only token, a rate limit, no PR at all) is not a
failure of the run: it prints a notice, puts the report in the step summary, and exits 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `comment` command to the CLI."""

    @app.command("comment")
    def comment(
        summary: Annotated[Path, typer.Argument(help="summary.json of the run")],
        baseline: Annotated[
            Path | None, typer.Option(help="summary.json to compare with (e.g. from main)")
        ] = None,
        header: Annotated[
            str | None, typer.Option(help="one sticky comment per header (default: pipeline name)")
        ] = None,
        token: Annotated[
            str | None,
            typer.Option(help="GitHub token (default: $GITHUB_TOKEN)", show_default=False),
        ] = None,
    ) -> None:
        """Create or update the sticky PR comment with the run's results and GPU cost."""
        from runner.report.comment_post import post_comment, say
        from runner.report.github_actions import add_mask, is_active

        if token and is_active():
            add_mask(token)
        outcome = post_comment(summary, baseline, header, token)
        say(outcome)
        raise typer.Exit(outcome.exit_code)
