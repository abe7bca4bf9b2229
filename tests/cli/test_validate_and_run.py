"""`clore-run validate` and `run` through the command line: what a user sees, and the exit code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.cli import main
from tests.processes import marked_env

ROOT = Path(__file__).parents[2]
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


def cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int)
    return info.value.code, out, err


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
def test_validate_says_ok_or_each_error_and_exits_0_or_2(
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
    paths = [str(made[f]) for f in files]
    got, out, err = cli(capsys, ["validate", *paths])
    assert (got, out, err) == cli(capsys, ["validate", "--", *paths])
    assert got == code
    assert "Traceback" not in out + err
    if code == 0:
        assert out.splitlines()[-1].endswith("ok (4 jobs)" if "hello" in files else "ok (1 job)")
    if "bad" in files:
        near_miss = "unknown key 'timout-minutes' (did you mean 'timeout-minutes'?)"
        assert f"bad.yml:4:5: jobs.a.timout-minutes: {near_miss}" in err  # from the model's keys
        assert "bad.yml:6:15: jobs.b.needs[0]: unknown job 'biuld'" in err
    if "warned" in files:
        assert "3.1" in err  # the YAML 1.1 surprise is warned about
    if "escapes" in files:
        assert "\x1b" not in err and "'red'" in err  # stripped, as click strips them off a tty


def test_annotations_in_actions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    bad = tmp_path / "p.yml"
    bad.write_text(BAD)
    code, out, _ = cli(capsys, ["validate", str(bad)])
    assert code == 2
    assert out.count("::error file=p.yml,") == 3


PROBE = textwrap.dedent(
    """
    import sys
    from runner.launch import main
    try:
        main()
    except SystemExit as exit:
        heavy = ("requests", "paramiko", "jinja2", "runner.engine.driver")
        print(exit.code, *sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--version"], ["validate", str(HELLO)]])
def test_version_and_validate_load_no_backend(args: list[str]) -> None:
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
    assert done.stderr.split() == ["0"], done.stderr


RUN_PROBE = textwrap.dedent(
    """
    import sys
    from runner.launch import main
    try:
        main()
    except SystemExit as exit:
        unused = ("requests", "paramiko", "jinja2", "runner.core.simulate_market",
                  "runner.core.predict", "runner.plan")
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


@pytest.mark.slow
def test_a_local_run_loads_no_module_it_does_not_use(tmp_path: Path) -> None:
    """jinja2 (summary.md is written without it), the rent-ahead predictor and its market
    simulation (only with a baseline), the plan (only for --dry-run) and the remote backends'
    libraries stay out of `run --backend local`."""
    done = run_local_probe(tmp_path, RUN_PROBE)
    code, *loaded = done.stderr.split()
    assert (code, loaded) == ("0", []), done.stderr
    assert "passed" in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


GC_PROBE = textwrap.dedent(
    """
    import gc, sys
    import runner.engine.pipeline_run, runner.spec.loader
    from runner.launch import main
    seen = []
    engine, load = runner.engine.pipeline_run.PipelineRun.run, runner.spec.loader.load_pipeline
    def run(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return engine(self, *args, **kwargs)
    def load_pipeline(*args, **kwargs):
        seen.append(gc.isenabled())
        return load(*args, **kwargs)
    runner.engine.pipeline_run.PipelineRun.run = run
    runner.spec.loader.load_pipeline = load_pipeline
    try:
        main()
    except SystemExit as exit:
        print(exit.code, *seen, gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
    """
)


@pytest.mark.slow
def test_start_up_holds_the_collector_and_the_run_has_it(tmp_path: Path) -> None:
    """The cyclic collector is off while the command starts up, and on again, with what
    start-up made frozen out of its passes, by the time the jobs run."""
    done = run_local_probe(tmp_path, GC_PROBE)
    assert done.stderr.split() == ["0", "False", "True", "True", "True"], done.stderr


@pytest.mark.slow
def test_other_commands_have_the_collector() -> None:
    probe = "import gc, sys, runner.cli as c\ntry:\n    c.main(['schema'])\nexcept SystemExit:\n"
    probe += "    print(gc.isenabled(), file=sys.stderr)"
    done = subprocess.run(
        [sys.executable, "-c", "from runner import collector; collector.hold()\n" + probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert done.stderr.split() == ["True"], done.stderr


@pytest.mark.slow
def test_a_closed_pipe_exits_1(tmp_path: Path) -> None:
    """`clore-run validate … | head -0`: exit 1 on a broken pipe, and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write fails with EPIPE
    done = subprocess.run(
        [sys.executable, "-m", "runner", "validate", str(HELLO)],
        stdout=write_end,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    os.close(write_end)
    assert (done.returncode, b"Traceback" in done.stderr) == (1, False)


# -- run -----------------------------------------------------------------------------------------

PIPELINE = """\
jobs:
  a: {run: 'echo a-ran', workspace: false}
  b: {needs: a, run: 'echo b-ran; exit 1', workspace: false}
  c: {needs: a, run: 'echo c-ran', workspace: false}
"""


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        ([], 1, "no CLORE_API_KEY set: running locally"),
        (["--backend", "local", "--concurrency", "2", "--job", "c"], 0, ""),
        (["--backend", "local", "--job", "a", "--job", "b"], 1, ""),
        (["--backend", "local", "--budget", "0"], 2, "'--budget': 0 is not a positive amount"),
        (["--backend", "local", "--concurrency", "2000"], 2, "--concurrency 2000: must be from 1"),
        (["--backend", "local", "--pool", "gpu"], 2, "--pool gpu: pools hold rented servers"),
        (["--backend", "ssh"], 2, "--backend ssh needs hosts"),
        (["--backend", "local", "--baseline", "nope.json"], 2, "--baseline nope.json"),
        (["--backend", "local", "--job", "nosuch"], 2, "--job: unknown job 'nosuch'"),
    ],
)
def test_run_says_what_went_wrong_and_exits_with_its_code(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    extra: list[str],
    code: int,
    said: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yml").write_text(PIPELINE)
    got, out, err = cli(capsys, ["run", "p.yml", "--out", "out", *extra])
    assert got == code, err
    assert said in err
    assert "Traceback" not in out + err
    if code in (0, 1):
        assert "[a] a-ran" in out
        assert (tmp_path / "out" / "summary.json").is_file()


def test_a_missing_pipeline_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, ["run", "nope.yml", "--backend", "local"])
    assert (code, err) == (2, "nope.yml:1:1: file not found (check the path)\n")
    assert re.fullmatch(r"[^\n]*\n", err)


def test_budget_and_concurrency_flags_reach_the_run_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--budget and --concurrency replace the file's values in the pipeline, the one carrier
    the console, the reports and the backend read: one job at a time, the flag's budget."""
    import itertools
    import json

    monkeypatch.chdir(tmp_path)
    jobs = "".join(f"  j{i}: {{run: 'sleep 0.1', workspace: false}}\n" for i in range(3))
    (tmp_path / "p.yml").write_text("budget: 9\nconcurrency: 5\njobs:\n" + jobs)
    args = ["run", "p.yml", "--out", "out", "--backend", "local"]
    code, _, err = cli(capsys, [*args, "--budget", "2.5", "--concurrency", "1"])
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["budget_usd"] == 2.5
    spans = sorted(
        (a["offset_s"], a["offset_s"] + a["duration_s"])
        for job in summary["jobs"]
        for a in job["attempt_details"]
    )
    # One after the other (the report rounds to the millisecond); at once they would overlap
    # by most of their 0.1 s.
    assert all(end <= start + 0.005 for (_, end), (start, _) in itertools.pairwise(spans))
