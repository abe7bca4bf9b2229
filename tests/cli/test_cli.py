"""The command line as a user meets it: exit codes, messages, plan text and JSON, schema.

Most tests call `runner.cli.main` in-process (it ends with sys.exit); a few run
`python -m runner` in a subprocess to prove the real entry point never shows a traceback.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import runner
from runner.cli import main
from runner.spec.loader import load_pipeline

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))
ML = ROOT / "examples" / "ml-pipeline.yml"
HELLO = ROOT / "examples" / "hello.yml"


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CI or API settings leak into these runs."""
    for name in ("GITHUB_ACTIONS", "CLORE_API_KEY", "CLORE_RUN_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    code = info.value.code
    assert isinstance(code, int)
    assert "Traceback" not in out + err
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "pipeline.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# -- validate ----------------------------------------------------------------------------------


def test_validate_accepts_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "validate", *EXAMPLES)
    assert code == 0
    assert err == ""
    counts = {p: len(load_pipeline(p, environ={}).jobs) for p in EXAMPLES}
    assert 1 in counts.values()  # first-clore.yml: "1 job", not "1 jobs"
    assert out.splitlines() == [
        f"{p}: ok ({n} job{'s' if n != 1 else ''})" for p, n in counts.items()
    ]


def test_validate_bad_file_exit_2_with_file_line_col(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = write(
        tmp_path,
        """\
        jobs:
          build:
            run: make
          test:
            needs: [biuld]
            run: pytest
        """,
    )
    code, out, err = cli(capsys, "validate", bad)
    assert code == 2
    assert out == ""
    assert err == f"{bad}:5:13: jobs.test.needs[0]: unknown job 'biuld' (did you mean 'build'?)\n"


def test_validate_reports_every_file_and_every_error_in_file_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = write(
        tmp_path,
        """\
        concurrency: 0
        jobs:
          a:
            timout-minutes: 5
            run: x
          b:
            priority: highest
            run: y
        """,
    )
    code, out, err = cli(capsys, "validate", bad, HELLO)
    assert code == 2
    assert out == f"{HELLO}: ok (4 jobs)\n"
    lines = err.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [
        f"{bad}:1:14",
        f"{bad}:4:5",
        f"{bad}:7:15",
    ]
    assert "concurrency: input should be greater than or equal to 1" in lines[0]
    assert (
        "jobs.a.timout-minutes: unknown key 'timout-minutes' (did you mean 'timeout-minutes'?)"
        in (lines[1])
    )
    assert "jobs.b.priority:" in lines[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ":1:1: the file is empty (add a `jobs:` map)"),
        ('jobs:\n  a:\n    run: "echo\n', ":3:10: not valid YAML"),
        (
            "jobs:\n  a: {needs: b, run: x}\n  b: {needs: a, run: y}\n",
            ":3:14: jobs.b.needs: cycle: a -> b -> a",
        ),
    ],
)
def test_validate_bad_inputs_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    bad = write(tmp_path, text)
    code, _, err = cli(capsys, "validate", bad)
    assert code == 2
    assert err.startswith(f"{bad}{expected}")


def test_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "validate", tmp_path / "nope.yml")
    assert code == 2
    assert err == f"{tmp_path / 'nope.yml'}:1:1: file not found (check the path)\n"


# -- plan --------------------------------------------------------------------------------------


def test_plan_text_shows_waves_and_critical_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "plan", ML)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"ml-pipeline ({ML}): 5 jobs, concurrency 2, budget $3.00"
    assert lines[1].startswith("provision: ahead (a job's server is rented while its needs run")
    assert [line for line in lines if line.startswith("wave")] == [
        "wave 1",
        "wave 2",
        "wave 3",
        "wave 4",
    ]
    wave2 = lines.index("wave 2")
    assert lines[wave2 + 1].split() == [
        "train-rtx-3090",
        "normal",
        "1h00m",
        "1x",
        "RTX",
        "3090",
        ">=16GB",
        "<=$0.60/h",
        "needs:",
        "prepare",
    ]
    assert lines[wave2 + 2].split()[0] == "train-rtx-4090"
    assert lines[-1] == (
        "critical path (39m, by estimate or timeout): "
        "prepare -> train-rtx-3090 -> evaluate -> report"
    )


def test_plan_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "plan", "--json", ML)
    assert code == 0
    plan: dict[str, Any] = json.loads(out)
    assert list(plan) == [
        "schema",
        "pipeline",
        "source",
        "concurrency",
        "budget_usd",
        "timeout_s",
        "currency",
        "waves",
        "jobs",
        "critical_path",
        "provision",
    ]
    assert plan["schema"] == 1
    assert (plan["pipeline"], plan["source"]) == ("ml-pipeline", str(ML))
    assert (plan["concurrency"], plan["budget_usd"], plan["timeout_s"]) == (2, 3.0, 14400.0)
    assert plan["currency"] == "CLORE-Blockchain"
    assert plan["waves"] == [
        ["prepare"],
        ["train-rtx-3090", "train-rtx-4090"],
        ["evaluate"],
        ["report"],
    ]
    assert [j["id"] for j in plan["jobs"]] == [
        "prepare",
        "train-rtx-3090",
        "train-rtx-4090",
        "evaluate",
        "report",
    ]
    assert plan["jobs"][1] == {
        "id": "train-rtx-3090",
        "name": "train (RTX 3090)",
        "wave": 2,
        "needs": ["prepare"],
        "priority": "normal",
        "timeout_s": 3600.0,
        "estimate_s": 1800.0,
        "retries": 1,
        "if": "success()",
        "not_before": None,
        "gpu": {
            "type": "RTX 3090",
            "count": 1,
            "min_vram_gb": 16.0,
            "max_usd_per_hour": 0.6,
            "spot": False,
            "min_reliability": None,
        },
        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    }
    assert plan["jobs"][4]["if"] == "always()"
    assert plan["critical_path"] == {
        "jobs": ["prepare", "train-rtx-3090", "evaluate", "report"],
        "duration_s": 2340.0,  # 3 + 30 + 5 + 1 estimated minutes
    }
    assert plan["provision"] == "ahead"


def test_plan_json_without_gpu_budget_or_timeout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "jobs:\n  a:\n    run: x\n    not-before: 2026-12-01T02:00:00Z\n")
    code, out, _ = cli(capsys, "plan", "--json", path)
    assert code == 0
    plan = json.loads(out)
    assert (plan["pipeline"], plan["budget_usd"], plan["timeout_s"]) == ("pipeline", None, None)
    assert plan["jobs"][0]["gpu"] is None
    assert plan["jobs"][0]["not_before"] == 1_796_090_400.0
    assert plan["critical_path"] == {"jobs": ["a"], "duration_s": 3600.0}


def test_plan_of_an_invalid_pipeline_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = write(tmp_path, "jobs:\n  a:\n    run: x\n    retries: -1\n")
    code, out, err = cli(capsys, "plan", "--json", bad)
    assert code == 2
    assert out == ""
    assert err.startswith(f"{bad}:4:14: jobs.a.retries: input should be greater than or equal to 0")


def test_validate_warns_on_yaml_1_1_surprises_and_passes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "jobs:\n  a: {run: echo, env: {PY: 3.10}}\n")
    code, out, err = cli(capsys, "validate", path)
    assert code == 0
    assert out == f"{path}: ok (1 job)\n"
    assert err == (
        f"{path}:2:28: warning: jobs.a.env.PY: unquoted 3.10 is read as the number 3.1"
        ' (quote it: "3.10")\n'
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, _ = cli(capsys, "validate", path)
    assert f"::warning file={path},line=2,col=28,title=clore-run%3A pipeline::" in out


# -- schema ------------------------------------------------------------------------------------


def test_schema_is_a_strict_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "schema")
    assert code == 0
    document = json.loads(out)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["additionalProperties"] is False
    assert document["required"] == ["jobs"]
    assert document["properties"]["jobs"]["additionalProperties"] == {"$ref": "#/$defs/JobSpec"}
    for name in ("JobSpec", "Defaults", "GpuSpec", "Strategy"):
        assert document["$defs"][name]["additionalProperties"] is False, name
    job = document["$defs"]["JobSpec"]["properties"]
    assert "timeout-minutes" in job
    assert "if" in job
    assert (
        "Maximum USD per hour"
        in document["$defs"]["GpuSpec"]["properties"]["max-price"]["description"]
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_schema_knows_every_key_the_examples_use(
    capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    _, out, _ = cli(capsys, "schema")
    document = json.loads(out)
    defs = document["$defs"]
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(data) <= set(document["properties"])
    assert set(data.get("defaults", {})) <= set(defs["Defaults"]["properties"])
    for job in data["jobs"].values():
        assert set(job) <= set(defs["JobSpec"]["properties"])
        assert set(job.get("gpu", {})) <= set(defs["GpuSpec"]["properties"])


def _schema_validator(capsys: pytest.CaptureFixture[str]) -> Any:
    jsonschema_rs = pytest.importorskip("jsonschema_rs")  # schemathesis's, in the test extra
    _, out, _ = cli(capsys, "schema")
    return jsonschema_rs.validator_for(json.loads(out))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid_under_the_emitted_schema(
    capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    validator = _schema_validator(capsys)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert [str(e) for e in validator.iter_errors(data)] == []
    load_pipeline(path)  # and validate agrees


@pytest.mark.parametrize(
    ("job", "valid"),
    [
        ({"run": "x", "gpu": {"count": "${{ matrix.gpus }}"}}, True),
        ({"run": "x", "retries": "${{ env.RETRIES }}"}, True),
        ({"run": "x", "spot": True}, False),  # an unknown key at the job level
        (
            {"run": "x", "priority": "${{ matrix.p }}", "continue-on-error": "${{ matrix.ok }}"},
            True,
        ),
        ({"run": "x", "gpu": {"count": "two"}}, False),  # a plain string is still no count
        ({"run": "x", "gpu": {"count": 0}}, False),
        ({"run": "x", "priority": "soon"}, False),
    ],
)
def test_schema_takes_expressions_where_the_loader_substitutes_them(
    capsys: pytest.CaptureFixture[str], job: dict[str, Any], valid: bool
) -> None:
    validator = _schema_validator(capsys)
    assert validator.is_valid({"jobs": {"a": job}}) is valid


# -- version, usage errors, shorthand -----------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert code == 0
    assert out == f"clore-run {runner.__version__}\n"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'version = "{runner.__version__}"' in pyproject


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--bogus", "x.yml"], "clore-run: no such option: --bogus\nhint: `clore-run plan"),
        (["--bogus"], "clore-run: no such option: --bogus\nhint: `clore-run -h`"),
        (["validate"], "clore-run: missing argument 'PIPELINES'\nhint: `clore-run validate -h`"),
        (["plan", "a.yml", "b.yml"], "clore-run: got unexpected extra argument(s) (b.yml)\nhint:"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = cli(capsys, *args)
    assert code == 2
    assert err.startswith(message) and out == ""


def test_no_arguments_shows_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert code == 0  # asking what it can do is not a usage error (issue 28)
    assert "validate" in out + err
    assert "schema" in out + err


def test_pipeline_shorthand_goes_to_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = write(tmp_path, "jobs:\n  a:\n    run: ''\n")
    code, _, err = cli(capsys, bad)
    assert code == 2
    assert err == f"{bad}:3:10: jobs.a.run: the run script is empty\n"


# -- the real entry point ----------------------------------------------------------------------


def python_m_runner(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_python_m_runner_validate(tmp_path: Path) -> None:
    ok = python_m_runner("validate", "examples/hello.yml")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "examples/hello.yml: ok (4 jobs)\n", "")
    bad = write(tmp_path, "jobs:\n\ta: {run: x}\n")
    result = python_m_runner("validate", bad)
    assert result.returncode == 2
    assert re.match(
        rf"{re.escape(str(bad))}:2:1: not valid YAML: .*indent with spaces", result.stderr
    )
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_python_m_runner_unknown_option_has_no_traceback() -> None:
    result = python_m_runner("validate", "--no-such-flag", "examples/hello.yml")
    assert result.returncode == 2
    assert result.stderr.startswith("clore-run: no such option: --no-such-flag\nhint: ")
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_budget_flag_that_is_not_a_positive_amount_is_a_usage_error(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "run",
                str(HELLO),
                "--backend",
                "local",
                "--budget",
                value,
                "--out",
                str(tmp_path / "out"),
            ]
        )
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def _run_hello(capsys: pytest.CaptureFixture[str], tmp_path: Path, *flags: str) -> tuple[int, str]:
    code, out, err = cli(
        capsys, "run", HELLO, "--backend", "local", "--out", tmp_path / "out", *flags
    )
    return code, out + err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--budget", "-1"],
            "invalid value for '--budget': -1 is not a positive amount of USD (for example 2.50)",
        ),
        (
            ["--concurrency", "100000"],
            "--concurrency 100000: must be from 1 to 1000 servers or jobs at once\n"
            "hint: for example --concurrency 4",
        ),
        (["--concurrency", "0"], "--concurrency 0: must be from 1 to 1000 servers or jobs"),
    ],
)
def test_run_flags_out_of_range_say_what_is_allowed_as_the_help_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], message: str
) -> None:
    code, text = _run_hello(capsys, tmp_path, *flags)
    assert code == 2
    assert message in text
    assert not (tmp_path / "out").exists()  # refused before anything ran
    _, help_text, _ = cli(capsys, "run", "--help")
    flat = " ".join(re.sub(r"[│\s]+", " ", help_text).split())
    assert "1 to 1000 servers (or jobs) at once" in flat
    assert "USD for the whole run, a positive amount" in flat


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON (expecting value at line 1, column 1)"),
        ("[1, 2]", "not a JSON object"),
        (b"\xff\xfe", "not JSON (not UTF-8 text)"),
    ],
)
def test_a_baseline_that_is_not_a_summary_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | bytes, message: str
) -> None:
    baseline = tmp_path / "base.json"
    if isinstance(content, bytes):
        baseline.write_bytes(content)
    else:
        baseline.write_text(content)
    code, text = _run_hello(capsys, tmp_path, "--baseline", str(baseline))
    assert code == 2
    assert (
        f"--baseline {baseline}: {message}\nhint: pass the summary.json of an earlier run" in text
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_baseline_from_another_pipeline_is_compared_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _ = _run_hello(capsys, tmp_path)
    assert code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    same = tmp_path / "same.json"
    same.write_text(json.dumps(summary))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**summary, "pipeline": {"name": "nightly", "source": "n.yml"}}))
    code, text = _run_hello(capsys, tmp_path, "--baseline", str(same))
    assert code == 0 and "baseline is a run of pipeline" not in text
    code, text = _run_hello(capsys, tmp_path, "--baseline", str(other))
    assert code == 0
    name = summary["pipeline"]["name"]
    warning = f"the baseline is a run of pipeline 'nightly', this is '{name}'"
    assert warning in text
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert any(w.startswith(warning) for w in written["warnings"])
    assert written["comparison"] is not None  # compared all the same
