"""Help and parse errors in a person's words: no Python types (`<bool>`, `<list[Path]>`), no
pydantic messages, and a bare `clore-run` is help, not a usage error."""

from __future__ import annotations

import re

import pytest
import typer

from runner.cli import main
from runner.cli.commands import app
from runner.cli.help_words import plain_metavars

PYTHON_TYPES = re.compile(r"<(bool|int|float|str|path|list\[[^\]]*\]|Path)>")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int)
    return info.value.code, out + err


def _commands() -> list[list[str]]:
    root = typer.main.get_command(app)
    found: list[list[str]] = []
    todo: list[tuple[list[str], object]] = [([], root)]
    while todo:
        path, command = todo.pop()
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            todo.append(([*path, name], sub))
    return sorted(found)


@pytest.mark.slow
def test_no_help_page_shows_a_python_type(capsys: pytest.CaptureFixture[str]) -> None:
    for path in _commands():
        code, text = _cli(capsys, *path, "--help")
        assert code == 0, path
        assert not PYTHON_TYPES.search(text), (path, PYTHON_TYPES.search(text))


def test_metavars_are_words() -> None:
    root = typer.main.get_command(app)
    plain_metavars(root)
    run = root.commands["run"]  # type: ignore[attr-defined]
    shown = {p.name: p.metavar for p in run.params}
    assert (shown["pipeline"], shown["concurrency"], shown["budget"]) == ("PIPELINE", "N", "USD")
    assert shown["out"] == "PATH" and shown["dry_run"] == "" and shown["job"] == "TEXT"


def test_a_bare_clore_run_shows_help_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _cli(capsys)
    assert code == 0 and "Usage: clore-run" in text and "run" in text


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "p.yml", "--concurrency", "abc"], "'abc' is not a whole number"),
        (["run", "p.yml", "--budget", "lots"], "'lots' is not an amount of USD"),
        (["offers", "--count", "0"], "'0': must be at least 1"),
    ],
)
def test_a_bad_value_is_said_in_words(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code, text = _cli(capsys, *args)
    assert code == 2 and said in text
    assert "Input should be" not in text and "unable to parse" not in text
