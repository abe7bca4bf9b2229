"""Acceptance tests of the pipeline format: what a valid file turns into, value by value."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from runner.backends.clore.settings import CloreSettings, image_runs_sshd
from runner.core.model import Condition, GpuAsk, Location, Pipeline, Priority
from runner.spec.diagnostics import SpecError
from runner.spec.loader import load_pipeline, parse_pipeline
from runner.spec.yaml_source import parse_yaml

EXAMPLES = Path(__file__).parents[2] / "examples"
# 2026-12-01T02:00:00Z in unix seconds
DEC_1_2026_0200Z = 1_796_090_400.0


def parse(text: str, environ: dict[str, str] | None = None, file: str = "p.yml") -> Pipeline:
    return parse_pipeline(textwrap.dedent(text), file, {} if environ is None else environ)


def ids(pipeline: Pipeline) -> list[str]:
    return [j.id for j in pipeline.jobs]


# -- the examples ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yml")), ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    pipeline = load_pipeline(path, environ={})
    assert pipeline.jobs
    assert pipeline.source == str(path)


def test_the_three_documented_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yml")}
    assert {"hello.yml", "ml-pipeline.yml", "gpu-tests.yml"} <= names


def test_hello_example() -> None:
    p = load_pipeline(EXAMPLES / "hello.yml", environ={})
    assert (p.name, p.concurrency, p.budget_usd, p.timeout_s) == ("hello", 2, None, None)
    assert ids(p) == ["build", "test", "lint", "report"]
    build, test, lint, report = p.jobs
    assert build.artifacts == ("out/build.txt",)
    assert dict(build.env) == {"GREETING": "hello"}
    assert test.needs == ("build",)
    assert test.timeout_s == 30.0
    assert lint.needs == ("build",)  # `needs: build`, a bare string
    assert lint.priority is Priority.HIGH
    assert report.needs == ("test", "lint")
    assert report.condition is Condition.ALWAYS
    assert build.timeout_s == 3600.0  # the default hour
    assert [j.index for j in p.jobs] == [0, 1, 2, 3]
    assert all(j.gpu is None and j.image is None and j.workspace for j in p.jobs)


def test_ml_pipeline_example() -> None:
    p = load_pipeline(EXAMPLES / "ml-pipeline.yml", environ={})
    assert (p.name, p.concurrency, p.budget_usd, p.timeout_s) == ("ml-pipeline", 2, 3.0, 14400.0)
    assert CloreSettings.of(p).currency == "CLORE-Blockchain"
    assert ids(p) == ["prepare", "train-rtx-3090", "train-rtx-4090", "evaluate", "report"]
    prepare = p.job("prepare")
    assert prepare.gpu == GpuAsk(type="RTX", count=1, min_vram_gb=8.0, max_usd_per_hour=0.30)
    assert (prepare.timeout_s, prepare.estimate_s, prepare.retries) == (600.0, 180.0, 1)
    assert prepare.priority is Priority.HIGH
    train = p.job("train-rtx-3090")
    assert train.name == "train (RTX 3090)"
    assert p.job("train-rtx-4090").name == "train (RTX 4090)"
    assert train.gpu == GpuAsk(type="RTX 3090", count=1, min_vram_gb=16.0, max_usd_per_hour=0.60)
    assert dict(train.env) == {"RUN_NAME": "train on RTX 3090"}
    assert dict(train.matrix) == {"gpu": "RTX 3090"}
    assert (train.group, train.fail_fast, train.timeout_s) == ("train", False, 3600.0)
    assert train.image == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    assert p.job("evaluate").needs == ("train-rtx-3090", "train-rtx-4090")
    report = p.job("report")
    assert (report.priority, report.condition) == (Priority.LOW, Condition.ALWAYS)
    assert report.gpu == GpuAsk(type="RTX", count=1, min_vram_gb=8.0, max_usd_per_hour=0.20)


def test_gpu_tests_example() -> None:
    p = load_pipeline(EXAMPLES / "gpu-tests.yml", environ={})
    assert ids(p) == ["unit", "multi-gpu-2"]
    unit, multi = p.jobs
    assert unit.junit == "results.xml"
    assert unit.gpu == GpuAsk(type="RTX", count=1, min_vram_gb=8.0, max_usd_per_hour=0.4, spot=True)
    assert multi.gpu is not None
    assert multi.gpu.count == 2
    assert type(multi.gpu.count) is int  # "${{ matrix.gpus }}" kept the number's type
    assert (multi.continue_on_error, multi.junit, multi.timeout_s) == (True, "multi.xml", 1200.0)


# -- top level ---------------------------------------------------------------------------------


def test_top_level_defaults_and_name_from_the_file() -> None:
    p = parse("jobs:\n  a:\n    run: x\n", file="some/dir/nightly-gpu.yml")
    assert p.name == "nightly-gpu"
    assert (p.concurrency, p.budget_usd, p.timeout_s, CloreSettings.of(p).currency) == (
        3,
        None,
        None,
        "CLORE-Blockchain",
    )
    assert p.hosts == ()
    assert p.source == "some/dir/nightly-gpu.yml"


def test_top_level_settings() -> None:
    p = parse(
        """\
        name: n
        concurrency: 7
        budget: 2.5
        timeout-minutes: 1.5
        currency: bitcoin
        hosts: root@h1:2222
        jobs:
          a: {run: x}
        """
    )
    assert (p.name, p.concurrency, p.budget_usd, p.timeout_s) == ("n", 7, 2.5, 90.0)
    assert (CloreSettings.of(p).currency, p.hosts) == ("bitcoin", ("root@h1:2222",))


def test_job_keys_and_their_defaults() -> None:
    p = parse(
        """\
        jobs:
          a:
            name: Alpha
            run: echo a
            artifacts: out.txt
            workspace: false
            continue-on-error: true
            junit: r.xml
            image: img:1
            retries: 3
            estimate-minutes: 2
          b:
            needs: [a, a]
            run: echo b
        """
    )
    a, b = p.jobs
    assert (a.id, a.name, a.run, a.group) == ("a", "Alpha", "echo a", "a")
    assert (a.artifacts, a.workspace, a.continue_on_error, a.junit) == (
        ("out.txt",),
        False,
        True,
        "r.xml",
    )
    assert (a.image, a.retries, a.estimate_s) == ("img:1", 3, 120.0)
    assert b.needs == ("a",)  # a repeated need counts once
    assert (b.name, b.priority, b.condition, b.retries, b.workspace) == (
        "b",
        Priority.NORMAL,
        Condition.SUCCESS,
        0,
        True,
    )
    assert (b.gpu, b.image, b.artifacts, b.junit, b.estimate_s) == (None, None, (), None, None)
    assert (b.not_before, b.continue_on_error, b.fail_fast, dict(b.matrix)) == (
        None,
        False,
        True,
        {},
    )
    assert b.duration_hint_s == 3600.0


def test_the_pipeline_is_immutable() -> None:
    p = parse("env: {A: '1'}\njobs:\n  a: {run: x}\n")
    job = p.jobs[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run = "rm -rf /"  # type: ignore[misc]
    with pytest.raises(TypeError):
        job.env["A"] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        job.matrix["k"] = "v"  # type: ignore[index]


# -- defaults ----------------------------------------------------------------------------------

DEFAULTS = """\
env: {A: pipeline, B: pipeline, C: pipeline}
defaults:
  image: base:1
  timeout-minutes: 20
  retries: 2
  priority: low
  env: {B: defaults, C: defaults}
  gpu: {type: RTX, count: 2, min-vram-gb: 8, max-price: 0.5, spot: true}
jobs:
  plain:
    run: x
  custom:
    image: own:2
    timeout-minutes: 5
    retries: 0
    env: {C: job, N: 3, T: true}
    gpu: {min-vram-gb: 24, max-price: 1.25}
    run: y
"""


def test_defaults_fill_what_a_job_does_not_set() -> None:
    plain = parse(DEFAULTS).job("plain")
    assert (plain.image, plain.timeout_s, plain.retries, plain.priority) == (
        "base:1",
        1200.0,
        2,
        Priority.LOW,
    )
    assert plain.gpu == GpuAsk(
        type="RTX", count=2, min_vram_gb=8.0, max_usd_per_hour=0.5, spot=True
    )


def test_a_job_value_wins_even_when_it_is_zero() -> None:
    custom = parse(DEFAULTS).job("custom")
    assert (custom.image, custom.timeout_s, custom.retries) == ("own:2", 300.0, 0)


def test_gpu_is_merged_key_by_key() -> None:
    custom = parse(DEFAULTS).job("custom")
    assert custom.gpu == GpuAsk(
        type="RTX", count=2, min_vram_gb=24.0, max_usd_per_hour=1.25, spot=True
    )


def test_env_layers_pipeline_then_defaults_then_job() -> None:
    p = parse(DEFAULTS)
    assert dict(p.job("plain").env) == {"A": "pipeline", "B": "defaults", "C": "defaults"}
    # numbers and booleans become the strings a process sees
    assert dict(p.job("custom").env) == {
        "A": "pipeline",
        "B": "defaults",
        "C": "job",
        "N": "3",
        "T": "true",
    }


def test_defaults_may_carry_run_and_if() -> None:
    p = parse("defaults: {run: echo hi, if: always()}\njobs:\n  a: {}\n  b: {needs: a}\n")
    assert [(j.run, j.condition) for j in p.jobs] == [
        ("echo hi", Condition.ALWAYS),
        ("echo hi", Condition.ALWAYS),
    ]


def test_gpu_from_the_job_alone_takes_the_format_defaults() -> None:
    p = parse("jobs:\n  a:\n    gpu: {type: '4090'}\n    run: x\n")
    assert p.jobs[0].gpu == GpuAsk(
        type="4090", count=1, min_vram_gb=0.0, max_usd_per_hour=None, spot=False
    )


# -- matrix ------------------------------------------------------------------------------------


def test_matrix_ids_names_and_order() -> None:
    p = parse(
        """\
        jobs:
          train:
            strategy:
              matrix:
                gpu: ["RTX 3090", "RTX 4090"]
                py: ["3.10", 3.11]
            run: x
        """
    )
    assert ids(p) == [
        "train-rtx-3090-3.10",
        "train-rtx-3090-3.11",
        "train-rtx-4090-3.10",
        "train-rtx-4090-3.11",
    ]
    assert p.jobs[0].name == "train (RTX 3090, 3.10)"
    assert dict(p.jobs[3].matrix) == {"gpu": "RTX 4090", "py": "3.11"}
    assert {j.group for j in p.jobs} == {"train"}
    assert all(j.fail_fast for j in p.jobs)  # the default, as in GitHub Actions


def test_matrix_ids_are_filesystem_safe() -> None:
    p = parse(
        """\
        jobs:
          t:
            strategy: {matrix: {v: ["A/B C", "x..y", "--z--", "Ünï"]}}
            run: x
        """
    )
    assert ids(p) == ["t-a-b-c", "t-x..y", "t-z", "t-n"]


def test_exclude_and_include_follow_github_actions() -> None:
    # the example from the GitHub Actions documentation on matrix include
    p = parse(
        """\
        jobs:
          m:
            strategy:
              matrix:
                fruit: [apple, pear]
                animal: [cat, dog]
                include:
                  - color: green
                  - color: pink
                    animal: cat
                  - fruit: apple
                    shape: circle
                  - fruit: banana
                  - fruit: banana
                    animal: cat
            run: x
        """
    )
    assert [dict(j.matrix) for j in p.jobs] == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]
    assert ids(p)[0] == "m-apple-cat-pink-circle"
    assert ids(p)[-2:] == ["m-banana", "m-banana-cat"]


def test_exclude_removes_matching_combinations() -> None:
    p = parse(
        """\
        jobs:
          m:
            strategy:
              matrix:
                os: [linux, mac]
                v: [1, 2]
                exclude: [{os: mac, v: 2}]
            run: x
        """
    )
    assert ids(p) == ["m-linux-1", "m-linux-2", "m-mac-1"]


def test_include_only_matrix_gives_one_job_per_entry() -> None:
    p = parse(
        """\
        jobs:
          m:
            strategy:
              matrix:
                include: [{os: linux}, {os: mac}]
            run: echo ${{ matrix.os }}
        """
    )
    assert ids(p) == ["m-linux", "m-mac"]
    assert [j.run for j in p.jobs] == ["echo linux", "echo mac"]


def test_needs_on_a_matrix_job_means_all_its_instances() -> None:
    p = parse(
        """\
        jobs:
          build:
            strategy: {matrix: {os: [linux, mac]}}
            run: x
          test:
            needs: build
            strategy: {matrix: {py: ["3.11", "3.12"]}}
            run: y
          report:
            needs: [test, build]
            run: z
        """
    )
    assert p.job("test-3.11").needs == ("build-linux", "build-mac")
    assert p.job("test-3.12").needs == ("build-linux", "build-mac")
    assert p.job("report").needs == ("test-3.11", "test-3.12", "build-linux", "build-mac")


def test_fail_fast_false_reaches_every_instance() -> None:
    p = parse("jobs:\n  m:\n    strategy: {fail-fast: false, matrix: {n: [1, 2]}}\n    run: x\n")
    assert [j.fail_fast for j in p.jobs] == [False, False]


# -- expressions -------------------------------------------------------------------------------


def test_a_whole_value_expression_keeps_its_type() -> None:
    p = parse(
        """\
        jobs:
          m:
            strategy: {matrix: {n: [2], spot: [true], mem: [24.5]}}
            gpu:
              count: "${{ matrix.n }}"
              spot: "${{ matrix.spot }}"
              min-vram-gb: "${{ matrix.mem }}"
            env: {LABEL: "n=${{ matrix.n }} spot=${{ matrix.spot }}"}
            run: echo ${{ matrix.n }}
        """
    )
    job = p.jobs[0]
    assert job.id == "m-2-true-24.5"
    assert job.gpu == GpuAsk(count=2, spot=True, min_vram_gb=24.5)
    assert type(job.gpu.count) is int
    assert dict(job.env) == {"LABEL": "n=2 spot=true"}
    assert job.run == "echo 2"


def test_env_expressions_read_the_given_environment_not_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLORE_RUN_TEST_ONLY_IN_OS", "os")
    text = """\
        env: {TOKEN: "${{ env.TOKEN }}", PATHS: "${{ env.HOME }}:${{ env.TOKEN }}"}
        defaults: {image: "${{ env.IMAGE }}"}
        jobs:
          a:
            run: echo ${{ env.TOKEN }}
        """
    p = parse(text, {"TOKEN": "t0k", "HOME": "/h", "IMAGE": "img:9"})
    job = p.jobs[0]
    assert dict(job.env) == {"TOKEN": "t0k", "PATHS": "/h:t0k"}
    assert (job.image, job.run) == ("img:9", "echo t0k")
    with pytest.raises(SpecError) as info:
        parse("jobs:\n  a:\n    run: echo ${{ env.CLORE_RUN_TEST_ONLY_IN_OS }}\n", {})
    assert [str(d) for d in info.value.diagnostics] == [
        "p.yml:3:10: jobs.a.run: environment variable 'CLORE_RUN_TEST_ONLY_IN_OS' is not set "
        "(export CLORE_RUN_TEST_ONLY_IN_OS before running)"
    ]


def test_without_an_environ_the_process_environment_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLORE_RUN_TEST_VAR", "from-os")
    p = parse_pipeline("jobs:\n  a:\n    run: echo ${{ env.CLORE_RUN_TEST_VAR }}\n", "p.yml")
    assert p.jobs[0].run == "echo from-os"


def test_expressions_in_a_script_without_braces_are_left_alone() -> None:
    p = parse("jobs:\n  a:\n    run: echo ${HOME} $X '{{ x }}'\n")
    assert p.jobs[0].run == "echo ${HOME} $X '{{ x }}'"


# -- durations, times, conditions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"), [("0.5", 30.0), ("1", 60.0), ("90", 5400.0), ("0.01", 0.6)]
)
def test_timeout_minutes_take_any_positive_number(value: str, seconds: float) -> None:
    p = parse(f"jobs:\n  a:\n    run: x\n    timeout-minutes: {value}\n")
    assert p.jobs[0].timeout_s == pytest.approx(seconds)


def test_run_timeout_in_seconds() -> None:
    assert parse("timeout-minutes: 0.5\njobs:\n  a: {run: x}\n").timeout_s == 30.0


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01T02:00:00Z",
        "'2026-12-01T02:00:00Z'",
        "2026-12-01T04:00:00+02:00",
        "'2026-11-30T21:00:00-05:00'",
        "2026-12-01 02:00:00Z",
    ],
)
def test_not_before_is_unix_seconds(value: str) -> None:
    p = parse(f"jobs:\n  a:\n    run: x\n    not-before: {value}\n")
    assert p.jobs[0].not_before == DEC_1_2026_0200Z


def test_not_before_from_defaults() -> None:
    p = parse("defaults: {not-before: '2026-12-01T02:00:00Z'}\njobs:\n  a: {run: x}\n")
    assert p.jobs[0].not_before == DEC_1_2026_0200Z


@pytest.mark.parametrize(
    ("value", "condition"),
    [
        ("success()", Condition.SUCCESS),
        ("failure()", Condition.FAILURE),
        ("always()", Condition.ALWAYS),
        ("${{ always() }}", Condition.ALWAYS),
        ("'  ${{failure()}} '", Condition.FAILURE),
    ],
)
def test_if_conditions(value: str, condition: Condition) -> None:
    p = parse(f"jobs:\n  a: {{run: x}}\n  b:\n    needs: a\n    if: {value}\n    run: y\n")
    assert p.job("a").condition is Condition.SUCCESS
    assert p.job("b").condition is condition


@pytest.mark.parametrize("name", ["low", "normal", "high", "urgent"])
def test_priorities(name: str) -> None:
    p = parse(f"jobs:\n  a:\n    priority: {name}\n    run: x\n")
    assert p.jobs[0].priority is Priority[name.upper()]


# -- positions ---------------------------------------------------------------------------------


def test_yaml_positions_of_keys_and_values() -> None:
    source = parse_yaml(
        "name: n\njobs:\n  build:\n    needs: [a, b]\n    gpu: {count: 2}\n", "p.yml"
    )
    assert source.key_at[("jobs", "build")] == (3, 3)
    assert source.key_at[("jobs", "build", "needs")] == (4, 5)
    assert source.value_at[("jobs", "build", "needs")] == (4, 12)
    assert source.value_at[("jobs", "build", "needs", 1)] == (4, 16)
    assert source.value_at[("jobs", "build", "gpu", "count")] == (5, 18)
    assert source.locate(("jobs", "build", "gpu", "count")) == (5, 18)
    assert source.locate(("jobs", "build", "gpu", "nope")) == (5, 10)  # the nearest ancestor
    assert source.locate(("name",), key=True) == (1, 1)


def test_each_job_knows_where_it_is_defined() -> None:
    p = load_pipeline(EXAMPLES / "hello.yml", environ={})
    where = str(EXAMPLES / "hello.yml")
    assert [j.location for j in p.jobs] == [
        Location(where, 10, 3),
        Location(where, 16, 3),
        Location(where, 21, 3),
        Location(where, 26, 3),
    ]
    ml = load_pipeline(EXAMPLES / "ml-pipeline.yml", environ={})
    train = [j.location for j in ml.jobs if j.group == "train"]
    assert len(train) == 2
    assert train[0] == train[1]  # matrix instances point at their shared key


def test_errors_point_at_the_value_in_a_flow_mapping() -> None:
    with pytest.raises(SpecError) as info:
        parse("jobs:\n  a:\n    run: x\n    gpu: {type: RTX, count: 0}\n")
    (d,) = info.value.diagnostics
    assert (d.file, d.line, d.column, d.path) == ("p.yml", 4, 29, ("jobs", "a", "gpu", "count"))


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("jobs:\n  a: {run: x\n", 2, 6),  # the unclosed bracket, not the end of the file
        ("jobs:\n  a: [x", 2, 6),  # no final newline
        ("jobs:\n  a:\n    run: x\n  b", 4, 3),  # never a line past the end of the file
        ("jobs:\n  a:\n    run: x\n  b\n", 4, 3),
    ],
)
def test_syntax_errors_at_the_end_point_at_their_cause(text: str, line: int, column: int) -> None:
    with pytest.raises(SpecError) as info:
        parse(text)
    (d,) = info.value.diagnostics
    assert (d.line, d.column) == (line, column)
    assert d.message.startswith("not valid YAML")


def test_wrapped_if_in_defaults_is_a_condition() -> None:
    pipeline = parse(
        """
        defaults: {if: "${{ always() }}"}
        jobs:
          a: {run: x}
          b: {run: y, needs: a}
        """
    )
    assert [j.condition for j in pipeline.jobs] == [Condition.ALWAYS, Condition.ALWAYS]


def test_merge_keys_share_settings_and_own_keys_win() -> None:
    pipeline = parse(
        """
        jobs:
          a: &base {run: echo base, priority: high, retries: 2}
          b:
            <<: *base
            run: echo b
          c:
            <<: [{gpu: {type: RTX}, retries: 3}, *base]
        """
    )
    a, b, c = pipeline.jobs
    assert (a.run, a.priority, a.retries) == ("echo base", Priority.HIGH, 2)
    assert (b.run, b.priority, b.retries) == ("echo b", Priority.HIGH, 2)
    assert (c.run, c.priority, c.retries) == ("echo base", Priority.HIGH, 3)  # first source wins
    assert c.gpu is not None and c.gpu.type == "RTX"


def test_a_key_repeated_beside_a_merge_is_still_a_duplicate() -> None:
    with pytest.raises(SpecError) as info:
        parse(
            """
            jobs:
              a: &base {run: echo}
              b:
                <<: *base
                run: x
                run: y
            """
        )
    assert [d.line for d in info.value.diagnostics] == [7]


def test_matrix_exclude_and_include_tell_true_from_1() -> None:
    pipeline = parse(
        """
        jobs:
          a:
            run: x
            strategy:
              matrix:
                v: [true, 1]
                exclude: [{v: 1}]
                include: [{v: 1, w: one}]
        """
    )
    assert ids(pipeline) == ["a-true", "a-1-one"]


def test_provision_says_when_servers_are_rented() -> None:
    from runner.core.model import Provisioning

    assert parse("jobs:\n  a: {run: x}\n").provisioning is Provisioning.AHEAD
    on_demand = parse("provision: on-demand\njobs:\n  a: {run: x}\n")
    assert on_demand.provisioning is Provisioning.ON_DEMAND


def test_yaml_1_1_surprises_where_text_is_meant_are_warned_at_the_value() -> None:
    pipeline = parse(
        """\
        env: {DEBUG: yes, PERM: 010, AT: 12:30, N: 3, F: 1.5, OK: true}
        budget: 1.00
        jobs:
          t:
            strategy:
              matrix:
                python: [3.9, 3.10, "3.11"]
                include:
                  - {python: 3.10, extra: on}
            gpu: {spot: yes, count: 1, min-vram-gb: 8.0}
            continue-on-error: yes
            run: echo
        """
    )
    assert ids(pipeline) == ["t-3.9", "t-3.1-true", "t-3.11"]  # what YAML 1.1 makes of it
    assert [str(w) for w in pipeline.warnings] == [
        'p.yml:1:14: warning: env.DEBUG: unquoted yes is read as true (quote it: "yes")',
        'p.yml:1:25: warning: env.PERM: unquoted 010 is read as the number 8 (quote it: "010")',
        'p.yml:1:34: warning: env.AT: unquoted 12:30 is read as the number 750 (quote it: "12:30")',
        "p.yml:7:23: warning: jobs.t.strategy.matrix.python[1]: unquoted 3.10 is read as the"
        ' number 3.1 (quote it: "3.10")',
        "p.yml:9:22: warning: jobs.t.strategy.matrix.include[0].python: unquoted 3.10 is read"
        ' as the number 3.1 (quote it: "3.10")',
        "p.yml:9:35: warning: jobs.t.strategy.matrix.include[0].extra: unquoted on is read as"
        ' true (quote it: "on")',
    ]  # budget: 1.00, spot: yes, count, continue-on-error: numbers and switches, as meant


def test_a_retyped_value_that_fails_says_to_quote_it() -> None:
    with pytest.raises(SpecError) as info:
        parse("name: 3.10\njobs:\n  a: {run: echo}\n")
    assert str(info.value) == (  # the warning stays beside the error it explains
        'p.yml:1:7: name: input should be a valid string, got 3.1 (quote it: "3.10")\n'
        'p.yml:1:7: warning: name: unquoted 3.10 is read as the number 3.1 (quote it: "3.10")'
    )


def test_quoted_values_give_no_warning() -> None:
    pipeline = parse('env: {V: "3.10", B: "yes"}\njobs:\n  a: {run: echo, env: {X: \'on\'}}\n')
    assert pipeline.warnings == ()


def test_clore_s_own_keys_reach_its_settings_and_nothing_else() -> None:
    """`currency:` and a job's `ssh:` are Clore's (declared in its registry entry): the
    pipeline carries them by name, as written, and Clore's settings read them; a job's own
    `ssh:` wins over `defaults:`, and `null` leaves the default's."""
    p = parse(
        """
        currency: ${{ env.CUR }}
        defaults: {ssh: image}
        jobs:
          a: {run: x}
          b: {run: y, ssh: clore}
          c: {run: z, ssh: null}
        """,
        {"CUR": "USD-Blockchain"},
    )
    assert dict(p.backend_keys) == {"currency": "USD-Blockchain"}
    assert CloreSettings.of(p).currency == "USD-Blockchain"
    assert [dict(j.backend_keys) for j in p.jobs] == [
        {"ssh": "image"},
        {"ssh": "clore"},
        {"ssh": "image"},
    ]
    assert [image_runs_sshd(j) for j in p.jobs] == [True, False, True]
    plain = parse("jobs:\n  a: {run: x}\n")
    assert (dict(plain.backend_keys), dict(plain.jobs[0].backend_keys)) == ({}, {})
    assert (CloreSettings.of(plain).currency, image_runs_sshd(plain.jobs[0])) == (
        "CLORE-Blockchain",
        False,
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "currency: dogecoin\njobs:\n  a: {run: x}\n",
            "p.yml:1:11: currency: input should be one of bitcoin, CLORE-Blockchain, "
            "USD-Blockchain, got 'dogecoin'",
        ),
        (
            "currency: null\njobs:\n  a: {run: x}\n",
            "p.yml:1:11: currency: input should be one of bitcoin, CLORE-Blockchain, "
            "USD-Blockchain, got None",
        ),
        (
            "jobs:\n  a:\n    run: x\n    ssh: sometimes\n",
            "p.yml:4:10: jobs.a.ssh: input should be one of clore, image, got 'sometimes'",
        ),
        (
            "defaults: {ssh: imag}\njobs:\n  a:\n    run: x\n",
            "p.yml:1:17: defaults.ssh: input should be one of clore, image, got 'imag' "
            "(did you mean 'image'?)",
        ),
        (
            "jobs:\n  a:\n    run: x\n    sssh: image\n",
            "p.yml:4:5: jobs.a.sssh: unknown key 'sssh' (did you mean 'ssh'?)",
        ),
        (
            "curency: bitcoin\njobs:\n  a: {run: x}\n",
            "p.yml:1:1: curency: unknown key 'curency' (did you mean 'currency'?)",
        ),
    ],
)
def test_a_backend_s_key_is_checked_as_every_key(text: str, error: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(text, "p.yml", {})
    assert str(caught.value) == error


def test_an_env_integer_past_a_float_s_range_is_refused_as_the_schema_refuses_it() -> None:
    """The schema's numbers are finite floats: a 310-digit integer passed the loader (written
    out exactly) while `clore-run schema` refused it; schemathesis found the two disagreeing."""
    largest = "1" + "0" * 308  # 1e308: a float still holds it
    p = parse(f"jobs:\n  k:\n    env: {{k: {largest}}}\n    run: x\n")
    assert p.jobs[0].env["k"] == largest
    with pytest.raises(SpecError) as caught:
        parse(f"jobs:\n  k:\n    env: {{k: {largest}0}}\n    run: x\n")
    assert str(caught.value).startswith("p.yml:3:14: jobs.k.env.k: input should be a valid string")
