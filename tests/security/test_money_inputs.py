"""Every amount of money a person gives clore-run (a flag, an action input) is refused the same
way when it cannot be a limit: nan (compares false with every cost: a budget of nan rented with
no budget at all), inf, 0 or less, or not a number exits 2 before anything else happens, naming
the flag. The tables below are checked against the command tree and action.yml, so a new money
flag or input cannot be added without joining them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from runner.cli.commands import app  # the app with every command registered
from tests.cli.test_cli import cli
from tests.tools import installed

REPO = Path(__file__).resolve().parents[2]

# The command, the arguments it needs besides the flag, and the flag.
MONEY_FLAGS: list[tuple[tuple[str, ...], tuple[str, ...], str]] = [
    (("run",), (str(REPO / "examples" / "hello.yml"), "--backend", "local"), "--budget"),
    (("runner", "start"), (), "--budget"),
    (("runner", "start"), (), "--max-price"),
    (("offers",), (), "--max-price"),
    (("pool", "create"), ("gpu-ci", "--max-servers", "1"), "--budget"),
    (("pool", "set"), ("gpu-ci",), "--budget"),
    (("serve",), (), "--daily-spend-limit"),
    (("serve",), (), "--idle-budget"),
    (("warmth",), (), "--idle-budget"),
]
# action.yml's money inputs: the mode that reads each, and the flag entrypoint.sh gives it to.
MONEY_INPUTS: list[tuple[str, str, str]] = [
    ("run", "budget", "--budget"),
    ("runner-start", "budget", "--budget"),
    ("runner-start", "max-price", "--max-price"),
]
NOT_MONEY = ["nan", "NaN", "inf", "-inf", "1e999", "0", "-0", "-1", "-0.01", "abc", ""]


def _is_money(words: str) -> bool:
    return bool(re.search(r"\bUSD\b(?!-Blockchain)", words))


def _options(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, p) for p in getattr(command, "params", ())]
    for name, sub in getattr(command, "commands", {}).items():
        found.extend(_options(sub, (*path, name)))
    return found


def test_every_money_flag_is_in_the_table() -> None:
    money = {
        (path, option.opts[0])
        for path, option in _options(typer.main.get_command(app))
        if _is_money(f"{getattr(option, 'help', '')} {option.metavar}")
        or re.search(r"budget|price|spend", option.name or "")
    }
    assert money == {(command, flag) for command, _, flag in MONEY_FLAGS}


@pytest.mark.parametrize("value", NOT_MONEY)
@pytest.mark.parametrize(
    ("command", "needs", "flag"), MONEY_FLAGS, ids=[" ".join((*c, f)) for c, _, f in MONEY_FLAGS]
)
def test_a_money_flag_that_cannot_be_a_limit_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: tuple[str, ...],
    needs: tuple[str, ...],
    flag: str,
    value: str,
) -> None:
    # Nothing to reach if it got past the flag: no key, no coordinator, a folder of its own.
    for name in ("CLORE_API_KEY", "CLORE_RUN_COORDINATOR", "CLORE_RUN_TOKEN", "GITHUB_REPOSITORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, *command, *needs, f"{flag}={value}")
    said = " ".join((out + err).split())
    assert code == 2, said
    assert f"'{flag}'" in said and "USD" in said, said
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_every_money_input_of_the_action_is_in_the_table() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    money = {name for name, spec in action["inputs"].items() if _is_money(spec["description"])}
    assert money == {name for _, name, _ in MONEY_INPUTS}


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "name", "flag"), MONEY_INPUTS)
def test_a_money_input_that_cannot_be_a_limit_fails_the_step_naming_the_flag(
    tmp_path: Path, mode: str, name: str, flag: str
) -> None:
    """Through entrypoint.sh to the installed clore-run, as the action's step runs it."""
    clore_run = installed("clore-run")
    assert clore_run, "clore-run is not installed: pip install -e '.[test]'"
    env = {
        "PATH": f"{Path(clore_run).parent}:/usr/bin:/bin",
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "INPUT_MODE": mode,
        "INPUT_PIPELINE": str(REPO / "examples" / "hello.yml"),
        "INPUT_BACKEND": "local",
        "INPUT_REPO": "o/r",
        f"INPUT_{name.upper().replace('-', '_')}": "nan",
    }
    done = subprocess.run(
        [str(REPO / "entrypoint.sh")], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert f"'{flag}'" in said and "nan is not a positive amount of USD" in said
