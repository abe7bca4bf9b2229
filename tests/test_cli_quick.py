"""`clore-run validate FILE...` answered without Typer says exactly what the Typer command says.

Each case runs twice in-process: the plain form (the quick path) and the same files after `--`,
which the quick path leaves to the full command line. Output, messages and exit code must match.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.cli import main
from runner.cli.quick import plain_validate
from tests.processes import marked_env

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
        heavy = ("typer", "rich", "click", "requests", "paramiko", "jinja2", "runner.driver",
                 "importlib.metadata")
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
    if args[0] == "validate" and args[1] != "--":  # pydantic looked for no plugins
        assert "importlib.metadata" not in modules


RUN_PROBE = textwrap.dedent(
    """
    import sys
    from runner.launch import main
    try:
        main()
    except SystemExit as exit:
        unused = ("typer", "rich", "click", "requests", "paramiko", "jinja2", "pydantic",
                  "runner.core.simulate_market", "runner.core.predict", "runner.plan")
        print(exit.code, *sorted(m for m in unused if m in sys.modules), file=sys.stderr)
    """
)


def run_local_probe(tmp_path: Path, probe: str) -> subprocess.CompletedProcess[str]:
    """`run --backend local` of one quick job under `probe`, which prints the exit code and the
    listed modules it found loaded to stderr; no key, not in Actions."""
    (tmp_path / "p.yml").write_text("jobs:\n  a: {run: 'true', workspace: false}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CLORE_API_KEY", "GITHUB_ACTIONS")}
    return subprocess.run(
        [sys.executable, "-c", probe, "run", "p.yml", "--backend", "local", "--out", "out"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=marked_env({**env, "PYTHONPATH": str(ROOT)}, inherit=False),
        timeout=60,
        check=False,
    )


def test_a_local_run_loads_no_module_it_does_not_use(tmp_path: Path) -> None:
    """`run --backend local` of short jobs is mostly start-up: jinja2 (summary.md is written
    without it), the rent-ahead predictor and its market simulation (only with a baseline),
    the plan (only for --dry-run), Typer and the remote backends' libraries stay out."""
    done = run_local_probe(tmp_path, RUN_PROBE)
    code, *loaded = done.stderr.split()
    assert (code, loaded) == ("0", []), done.stderr
    assert "passed" in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


GC_PROBE = textwrap.dedent(
    """
    import gc, sys
    import runner.pipeline_run, runner.spec.loader
    from runner.launch import main
    seen = []
    engine, load = runner.pipeline_run.PipelineRun.run, runner.spec.loader.load_pipeline
    def run(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return engine(self, *args, **kwargs)
    def load_pipeline(*args, **kwargs):
        seen.append(gc.isenabled())
        return load(*args, **kwargs)
    runner.pipeline_run.PipelineRun.run = run
    runner.spec.loader.load_pipeline = load_pipeline
    try:
        main()
    except SystemExit as exit:
        print(exit.code, *seen, gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
    """
)


def test_start_up_holds_the_collector_and_the_run_has_it(tmp_path: Path) -> None:
    """The cyclic collector is off while the command starts up, and on again, with what
    start-up made frozen out of its passes, by the time the jobs run."""
    done = run_local_probe(tmp_path, GC_PROBE)
    assert done.stderr.split() == ["0", "False", "True", "True", "True"], done.stderr


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


# -- run -----------------------------------------------------------------------------------------

PIPELINE = """\
jobs:
  a: {run: 'echo a-ran', workspace: false}
  b: {needs: a, run: 'echo b-ran; exit 1', workspace: false}
  c: {needs: a, run: 'echo c-ran', workspace: false}
"""


def typer_or_quick(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> tuple[int, str, str]:
    """The same `run` arguments through the quick path and through Typer: they must agree."""
    import runner.cli.quick as quick

    seen = []
    for way in ("quick", "typer"):
        if way == "typer":
            monkeypatch.setattr(quick, "plain_run", lambda args: None)
        else:
            assert quick.plain_run(args) is not None, args
        with pytest.raises(SystemExit) as info:
            main(args)
        out, err = capsys.readouterr()
        # Jobs run at the same time print in either order, at other times.
        timeless = re.sub(r"\d{4}-\d\d-\d\dT[\d:]+Z|\d+(\.\d+)? ?s\b", "T", out)
        seen.append((info.value.code, "\n".join(sorted(timeless.splitlines())), err))
    monkeypatch.undo()
    assert seen[0] == seen[1]
    code, out, err = seen[0]
    assert isinstance(code, int)
    return code, out, err


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        ([], 1, "no CLORE_API_KEY set: running locally"),
        (["--backend", "local", "--concurrency", "2", "--job", "c"], 0, ""),
        (["--backend", "local", "--job", "a", "--job", "b"], 1, ""),
        (["--backend", "local", "--budget", "0"], 2, "--budget 0: must be a positive amount"),
        (["--backend", "local", "--concurrency", "2000"], 2, "--concurrency 2000: must be from 1"),
        (["--backend", "local", "--pool", "gpu"], 2, "--pool gpu: pools hold rented servers"),
        (["--backend", "ssh"], 2, "--backend ssh needs hosts"),
        (["--backend", "local", "--baseline", "nope.json"], 2, "--baseline nope.json"),
        (["--backend", "local", "--job", "nosuch"], 2, "--job: unknown job 'nosuch'"),
    ],
)
def test_run_on_the_quick_path_does_what_the_typer_command_does(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    extra: list[str],
    code: int,
    said: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yml").write_text(PIPELINE)
    got, out, err = typer_or_quick(capsys, monkeypatch, ["run", "p.yml", "--out", "out", *extra])
    assert got == code, err
    assert said in err
    if code in (0, 1):
        assert "[a] a-ran" in out
        assert (tmp_path / "out" / "summary.json").is_file()


def test_a_missing_pipeline_is_the_same_error_on_both_paths(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = typer_or_quick(capsys, monkeypatch, ["run", "nope.yml", "--backend", "local"])
    assert (code, err) == (2, "nope.yml:1:1: file not found (check the path)\n")


@pytest.mark.parametrize(
    "args",
    [
        ["run"],
        ["run", "--help"],
        ["run", "p.yml", "--backend"],
        ["run", "p.yml", "--backend", "LOCAL"],
        ["run", "p.yml", "--backend=local"],
        ["run", "p.yml", "--concurrency", "0"],
        ["run", "p.yml", "--concurrency", "02"],
        ["run", "p.yml", "--concurrency", "two"],
        ["run", "p.yml", "--budget", "-1"],
        ["run", "p.yml", "--budget", "1e3"],
        ["run", "p.yml", "--budget", "inf"],
        ["run", "p.yml", "--out", "a", "--out", "b"],
        ["run", "p.yml", "--out", ""],
        ["run", "p.yml", "--dry-run"],
        ["run", "p.yml", "q.yml"],
        ["run", "p.yml", "--", "x"],
        ["p.yml", "--backend", "local"],
    ],
)
def test_a_run_that_is_not_plain_takes_the_full_command_line(args: list[str]) -> None:
    from runner.cli.quick import plain_run

    assert plain_run(args) is None


def test_the_action_s_run_takes_the_quick_path() -> None:
    from runner.cli.quick import plain_run

    args = ["run", "ci/p.yml", "--backend", "clore", "--concurrency", "4", "--budget", "2.50"]
    args += ["--out", "results", "--baseline", "old.json", "--pool", "team", "--ledger", "l.db"]
    args += ["--job", "train", "--job", "eval"]
    assert plain_run(args) == {
        "pipeline": "ci/p.yml",
        "backend": "clore",
        "concurrency": "4",
        "budget": "2.50",
        "out": "results",
        "baseline": "old.json",
        "pool": "team",
        "ledger": "l.db",
        "job": ["train", "eval"],
    }


def test_a_quick_run_loads_no_typer(tmp_path: Path) -> None:
    done = run_local_probe(tmp_path, PROBE)
    code, *modules = done.stderr.splitlines()[-1].split()
    assert code == "0", done.stderr
    assert not {"typer", "click", "requests", "paramiko"} & set(modules)
