"""`clore-run validate FILE...` answered without Typer says exactly what the Typer command says.

Each case runs twice in-process: the plain form (the quick path) and the same files after `--`,
which the quick path leaves to the full command line. Output, messages and exit code must match.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.cli import main
from runner.cli.quick import plain_validate

ROOT = Path(__file__).parents[1]
HELLO = ROOT / "examples" / "hello.yml"

BAD = """\
concurrency: 0
jobs:
  a:
    timout-minutes: 5
    run: x
  b: {needs: [biuld], run: y}
"""
ESCAPES = 'jobs:\n  "\\e[31mred": {run: x}\n  b:\n    "\\e[32mx": 1\n    run: y\n'


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_ACTIONS", "CLORE_API_KEY", "CLORE_RUN_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def both_ways(capsys: pytest.CaptureFixture[str], files: list[str]) -> tuple[int, str, str]:
    seen = []
    for args in (["validate", *files], ["validate", "--", *files]):
        with pytest.raises(SystemExit) as info:
            main(args)
        out, err = capsys.readouterr()
        seen.append((info.value.code, out, err))
    assert seen[0] == seen[1]
    code, out, err = seen[0]
    assert isinstance(code, int)
    return code, out, err


@pytest.mark.parametrize(
    ("files", "code"),
    [
        (["hello"], 0),
        (["hello", "hello"], 0),
        (["bad", "hello"], 2),
        (["missing"], 2),
        (["directory"], 2),
        (["escapes"], 2),
        (["empty"], 2),
        (["not-yaml"], 2),
        (["warned"], 0),
    ],
)
def test_the_quick_path_says_what_the_typer_command_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: list[str], code: int
) -> None:
    made = {
        "hello": HELLO,
        "bad": tmp_path / "bad.yml",
        "missing": tmp_path / "nope.yml",
        "directory": tmp_path,
        "escapes": tmp_path / "escapes.yml",
        "empty": tmp_path / "empty.yml",
        "not-yaml": tmp_path / "tab.yml",
        "warned": tmp_path / "warned.yml",
    }
    made["warned"].write_text("jobs:\n  a:\n    env: {V: 3.10}\n    run: x\n")
    made["bad"].write_text(BAD)
    made["escapes"].write_text(ESCAPES)
    made["empty"].write_text("")
    made["not-yaml"].write_text("jobs:\n\ta: {run: x}\n")
    got, out, err = both_ways(capsys, [str(made[f]) for f in files])
    assert got == code
    assert "Traceback" not in out + err
    if "warned" in files:
        assert "3.1" in err  # the YAML 1.1 surprise is warned about on both paths
    if "escapes" in files:
        assert "\x1b" not in err and "'red'" in err  # stripped, as click strips them off a tty


def test_annotations_in_actions_are_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    bad = tmp_path / "p.yml"
    bad.write_text(BAD)
    code, out, _ = both_ways(capsys, [str(bad)])
    assert code == 2
    assert out.count("::error file=p.yml,") == 3


@pytest.mark.parametrize(
    "args",
    [
        ["validate"],
        ["validate", "--help"],
        ["validate", "a.yml", "--no-such-flag"],
        ["validate", "--", "a.yml"],
        ["validate", "-"],
        ["plan", "a.yml"],
        ["a.yml"],
    ],
)
def test_anything_but_plain_files_takes_the_full_command_line(args: list[str]) -> None:
    assert plain_validate(args) is None


def test_plain_files_take_the_quick_path() -> None:
    assert plain_validate(["validate", "a.yml", "dir/b.yml"]) == [Path("a.yml"), Path("dir/b.yml")]


PROBE = textwrap.dedent(
    """
    import sys
    from runner.launch import main
    try:
        main()
    except SystemExit as exit:
        heavy = ("typer", "rich", "click", "requests", "paramiko", "jinja2", "runner.driver")
        print(exit.code, *sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
    """
)


@pytest.mark.parametrize(
    ("args", "loaded"),
    [
        (["--version"], ""),
        (["validate", str(HELLO)], ""),
        (["validate", "--", str(HELLO)], "typer"),  # the full command line, for contrast
    ],
)
def test_the_quick_commands_load_neither_typer_nor_a_backend(args: list[str], loaded: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CLORE_API_KEY", "GITHUB_ACTIONS")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    code, *modules = done.stderr.split()
    assert code == "0", done.stderr
    assert " ".join(m for m in modules if m in ("click", "rich", "typer")) == loaded
    assert not {"requests", "paramiko", "jinja2", "runner.driver"} & set(modules)


def test_a_closed_pipe_exits_1_on_both_paths(tmp_path: Path) -> None:
    """`clore-run validate … | head -0`: Typer exits 1 on a broken pipe; so does the quick path."""
    codes = []
    for args in (["validate", str(HELLO)], ["validate", "--", str(HELLO)]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody will read: the first write fails with EPIPE
        done = subprocess.run(
            [sys.executable, "-m", "runner", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        os.close(write_end)
        codes.append((done.returncode, b"Traceback" in done.stderr))
    assert codes == [(1, False), (1, False)]
