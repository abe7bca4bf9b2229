"""Every bad input from the format's contract: exit-2 errors naming file:line:col and key path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.spec.diagnostics import SpecError
from runner.spec.loader import load_pipeline, parse_pipeline


def errors_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_pipeline(textwrap.dedent(text), "p.yml", environ or {})
    return [str(d) for d in info.value.diagnostics]


def one_error(text: str, environ: dict[str, str] | None = None) -> str:
    errors = errors_of(text, environ)
    assert len(errors) == 1, errors
    return errors[0]


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_pipeline(tmp_path / "nope.yml")
    assert str(info.value).endswith("nope.yml:1:1: file not found (check the path)")


def test_directory_and_binary_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory"):
        load_pipeline(tmp_path)
    bad = tmp_path / "bin.yml"
    bad.write_bytes(b"\xff\xfe\x00jobs")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_pipeline(bad)


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    assert one_error(text) == "p.yml:1:1: the file is empty (add a `jobs:` map)"


def test_unclosed_quote_points_at_the_quote() -> None:
    error = one_error('jobs:\n  a:\n    run: "echo hi\n')
    assert error.startswith("p.yml:3:10: not valid YAML")
    assert "close the quote" in error


def test_tab_indentation() -> None:
    error = one_error("jobs:\n\ta:\n")
    assert error.startswith("p.yml:2:1: not valid YAML")
    assert "indent with spaces" in error


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_top_level_not_a_mapping(text: str) -> None:
    assert "the top level must be a mapping" in one_error(text)


def test_no_jobs() -> None:
    assert one_error("name: x\n") == "p.yml:1:1: no `jobs` in the pipeline (add `jobs:`)"


def test_empty_jobs() -> None:
    assert "jobs: `jobs` must be a non-empty mapping" in one_error("jobs: {}\n")


def test_duplicate_job_names() -> None:
    error = one_error(
        """\
        jobs:
          build:
            run: a
          build:
            run: b
        """
    )
    assert error == (
        "p.yml:4:3: jobs.build: duplicate key 'build': first defined on line 2"
        " (remove or rename one of them)"
    )


def test_duplicate_key_inside_a_job() -> None:
    error = one_error("jobs:\n  a:\n    run: x\n    run: y\n")
    assert error.startswith("p.yml:4:5: jobs.a.run: duplicate key 'run'")


def test_unknown_key_suggests_the_nearest() -> None:
    error = one_error("jobs:\n  a:\n    run: x\n    timout-minutes: 3\n")
    assert error == (
        "p.yml:4:5: jobs.a.timout-minutes: unknown key 'timout-minutes'"
        " (did you mean 'timeout-minutes'?)"
    )


def test_unknown_key_in_gpu_and_top_level() -> None:
    errors = errors_of("concurency: 2\njobs:\n  a:\n    run: x\n    gpu: {typ: RTX}\n")
    assert errors == [
        "p.yml:1:1: concurency: unknown key 'concurency' (did you mean 'concurrency'?)",
        "p.yml:5:11: jobs.a.gpu.typ: unknown key 'typ' (did you mean 'type'?)",
    ]


def test_wrong_type() -> None:
    error = one_error('jobs:\n  a:\n    run: x\n    timeout-minutes: "ten"\n')
    assert error.startswith("p.yml:4:22: jobs.a.timeout-minutes: input should be a valid number")
    assert "got 'ten'" in error


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("timeout-minutes: -1", "jobs.a.timeout-minutes"),
        ("timeout-minutes: 0", "jobs.a.timeout-minutes"),
        ("retries: -1", "jobs.a.retries"),
        ("gpu: {max-price: 0}", "jobs.a.gpu.max-price"),
        ("gpu: {count: 0}", "jobs.a.gpu.count"),
    ],
)
def test_values_out_of_range(line: str, path: str) -> None:
    error = one_error(f"jobs:\n  a:\n    run: x\n    {line}\n")
    assert "p.yml:4:" in error and f" {path}: input should be greater than" in error


def test_concurrency_zero() -> None:
    error = one_error("concurrency: 0\njobs:\n  a: {run: x}\n")
    assert error.startswith("p.yml:1:14: concurrency: input should be greater than or equal to 1")


def test_unknown_priority() -> None:
    error = one_error("jobs:\n  a:\n    run: x\n    priority: hihg\n")
    assert error == (
        "p.yml:4:15: jobs.a.priority: input should be one of low, normal, high, urgent, "
        "got 'hihg' (did you mean 'high'?)"
    )


def test_needs_unknown_job_did_you_mean() -> None:
    error = one_error("jobs:\n  build: {run: x}\n  test:\n    needs: [biuld]\n    run: y\n")
    assert error == "p.yml:4:13: jobs.test.needs[0]: unknown job 'biuld' (did you mean 'build'?)"


def test_needs_itself() -> None:
    error = one_error("jobs:\n  a:\n    needs: a\n    run: x\n")
    assert error == "p.yml:3:12: jobs.a.needs: job 'a' needs itself"


def test_cycle_is_printed() -> None:
    error = one_error(
        """\
        jobs:
          a: {needs: c, run: x}
          b: {needs: a, run: x}
          c: {needs: b, run: x}
        """
    )
    assert "cycle: a -> b -> c -> a" in error
    assert error.startswith("p.yml:3:")


def test_empty_matrix() -> None:
    error = one_error("jobs:\n  a:\n    strategy: {matrix: {gpu: []}}\n    run: x\n")
    assert error.startswith("p.yml:3:30: jobs.a.strategy.matrix.gpu: empty list of values")


def test_matrix_excluding_everything() -> None:
    error = one_error(
        "jobs:\n  a:\n    strategy: {matrix: {g: [1], exclude: [{g: 1}]}}\n    run: x\n"
    )
    assert "the matrix has no combinations" in error


def test_unknown_matrix_key_in_expression() -> None:
    error = one_error(
        "jobs:\n  a:\n    strategy: {matrix: {gpu: [A]}}\n    run: echo ${{ matrix.gpux }}\n"
    )
    assert error == ("p.yml:4:10: jobs.a.run: unknown matrix key 'gpux' (matrix keys: gpu)")


@pytest.mark.parametrize(
    "expr", ["${{ matrix.gpu", "${{ }}", "${{ secrets.TOKEN }}", "${{ matrix.a.b }}"]
)
def test_malformed_expression(expr: str) -> None:
    error = one_error(f"jobs:\n  a:\n    run: 'echo {expr}'\n")
    assert error.startswith("p.yml:3:10: jobs.a.run: ")
    assert "unclosed" in error or "unsupported expression" in error


def test_missing_env_variable_is_named() -> None:
    error = one_error("env: {TOKEN: '${{ env.MY_TOKEN }}'}\njobs:\n  a: {run: x}\n")
    assert error == (
        "p.yml:1:14: env.TOKEN: environment variable 'MY_TOKEN' is not set"
        " (export MY_TOKEN before running)"
    )


def test_unknown_if_expression() -> None:
    error = one_error("jobs:\n  a:\n    if: sometimes()\n    run: x\n")
    assert error.startswith("p.yml:3:9: jobs.a.if: unknown if: expression 'sometimes()'")


def test_ids_colliding_after_matrix_expansion() -> None:
    errors = errors_of(
        """\
        jobs:
          t:
            strategy: {matrix: {gpu: ["RTX 3090", "rtx-3090"]}}
            run: x
        """
    )
    assert any("job id 't-rtx-3090' is produced twice" in e for e in errors)


def test_matrix_id_colliding_with_a_plain_job() -> None:
    errors = errors_of(
        """\
        jobs:
          t:
            strategy: {matrix: {n: [1]}}
            run: x
          t-1:
            run: y
        """
    )
    assert errors == [
        "p.yml:5:3: t-1: job id 't-1' is produced twice (also by 't')"
        " (rename a job or change a matrix value)".replace("t-1: job", "jobs.t-1: job")
    ]


@pytest.mark.parametrize("run", ["''", "'   '", "|\n      \n"])
def test_empty_run_script(run: str) -> None:
    error = one_error(f"jobs:\n  a:\n    run: {run}\n")
    assert "jobs.a.run: the run script is empty" in error


def test_missing_run() -> None:
    assert one_error("jobs:\n  a: {priority: high}\n") == (
        "p.yml:2:6: jobs.a: no `run:` script (add `run: ...`)"
    )


def test_not_before_without_zone() -> None:
    error = one_error("jobs:\n  a:\n    run: x\n    not-before: 2026-12-01T02:00:00\n")
    assert "jobs.a.not-before: the time has no zone" in error


def test_invalid_job_id() -> None:
    error = one_error("jobs:\n  1st job: {run: x}\n")
    assert error.startswith("p.yml:2:3: jobs.1st job: invalid job id '1st job'")


def test_several_errors_all_reported_in_file_order() -> None:
    errors = errors_of(
        """\
        jobs:
          b:
            run: x
            retries: -2
          a:
            needs: [nope]
            priority: top
            run: ""
        """
    )
    lines = [int(e.split(":")[1]) for e in errors]
    assert lines == sorted(lines) and len(errors) == 4, errors


@pytest.mark.slow
def test_alias_bomb_is_refused() -> None:
    rows = ["a: &a [1,1,1,1,1,1,1,1,1]"]
    for prev, name in zip("abcdef", "bcdefg", strict=True):
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    error = one_error("\n".join(rows) + "\n")
    assert "the document is too large" in error


def test_job_id_with_a_trailing_newline_is_invalid() -> None:
    error = one_error('jobs:\n  "a\\n": {run: x}\n')
    assert "invalid job id" in error


def test_a_job_id_too_long_for_a_file_name_is_refused() -> None:
    errors = errors_of(
        "jobs:\n  t:\n    strategy: {matrix: {v: ['" + "x" * 120 + "']}}\n    run: echo\n"
    )
    assert any("characters long" in e and e.startswith("p.yml:2:3:") for e in errors), errors


def test_jobs_without_a_value_is_reported_once() -> None:
    assert one_error("jobs:\n").startswith("p.yml:1:6: jobs: ")


def test_expression_in_an_env_name_is_an_error_not_left_as_text() -> None:
    error = one_error(
        """\
        jobs:
          a:
            run: x
            strategy: {matrix: {v: [A, B]}}
            env:
              "${{ matrix.v }}_HOME": /x
        """
    )
    assert error.startswith("p.yml:6:7: jobs.a.env.${{ matrix.v }}_HOME: ")
    assert "not expanded in names" in error


@pytest.mark.parametrize(
    "value", ["!!python/object:os.system {run: x}", "!custom {run: x}", "!!omap [{run: x}]"]
)
def test_a_tag_on_a_mapping_or_list_is_refused_not_ignored(value: str) -> None:
    error = one_error(f"jobs:\n  a: {value}\n")
    assert error.startswith("p.yml:2:6: not valid YAML: ")
    assert "tag" in error


def test_a_key_yaml_reads_as_a_boolean_is_named_as_written() -> None:
    error = one_error("on: push\njobs: {a: {run: x}}\n")
    assert error.startswith("p.yml:1:1: on: unknown key 'on'"), error


@pytest.mark.parametrize("name", ["A-B", "1ST", "HAS SPACE"])
def test_an_env_name_bash_cannot_export_is_refused(name: str) -> None:
    error = one_error(f"jobs:\n  a:\n    run: x\n    env: {{'{name}': v}}\n")
    assert f"jobs.a.env.{name}: '{name}' is not a valid environment variable name" in error
    assert error.startswith("p.yml:4:11:")


def test_provision_takes_only_its_two_words() -> None:
    error = one_error("provision: early\njobs:\n  a: {run: x}\n")
    assert error.startswith("p.yml:1:12: provision: ")
    assert "should be one of ahead, on-demand, got 'early'" in error


def test_fetched_paths_leaving_the_job_are_refused_where_written() -> None:
    errors = errors_of(
        """\
        defaults:
          junit: /tmp/r.xml
        jobs:
          a:
            run: echo
            artifacts: [../../etc/passwd, /etc/hostname, ok/*.txt, a/../../b]
          b: {run: echo, artifacts: ~/x}
        """
    )
    assert [e.split(" (")[0] for e in errors] == [
        "p.yml:2:10: defaults.junit: '/tmp/r.xml' is absolute; "
        "only files in the job's folder are fetched",
        "p.yml:6:17: jobs.a.artifacts[0]: '../../etc/passwd' goes up with '..'; "
        "only files in the job's folder are fetched",
        "p.yml:6:35: jobs.a.artifacts[1]: '/etc/hostname' is absolute; "
        "only files in the job's folder are fetched",
        "p.yml:6:60: jobs.a.artifacts[3]: 'a/../../b' goes up with '..'; "
        "only files in the job's folder are fetched",
        "p.yml:7:29: jobs.b.artifacts: '~/x' starts at a home folder; "
        "only files in the job's folder are fetched",
    ]
    assert "cp /path/to/file ." in errors[0]


def test_every_problem_in_one_pass_a_self_need_does_not_hide_a_cycle() -> None:
    errors = errors_of(
        """\
        jobs:
          a: {needs: [a, nope], run: "echo ${{ matrix.x }} ${{ foo }}"}
          b: {needs: c, run: "echo ${{ env.NOPE }} ${{ matrix.gpu"}
          c: {needs: b, run: x}
        """
    )
    assert [e.split(" (")[0] for e in errors] == [
        "p.yml:2:15: jobs.a.needs[0]: job 'a' needs itself",
        "p.yml:2:18: jobs.a.needs[1]: unknown job 'nope'",
        "p.yml:2:30: jobs.a.run: unknown matrix key 'x'",
        "p.yml:2:30: jobs.a.run: unsupported expression '${{ foo }}'",
        "p.yml:3:22: jobs.b.run: environment variable 'NOPE' is not set",
        "p.yml:3:22: jobs.b.run: unclosed '${{'",
        "p.yml:4:14: jobs.c.needs: cycle: b -> c -> b",
    ]


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("jobs:\n  a:\n    run: echo time: now\n", "quote it, or write it as a block, `run: |`"),
        ('jobs:\n  a:\n    run: echo "a: b"\n', "quote it, or write it as a block, `run: |`"),
        ("jobs:\n  a: {run: echo time: now}\n", "must be quoted; a script is best a block"),
        ("jobs:\n  a:\n    run: x\n    image: a: b\n", "the value of `image` holds ': ': quote it"),
    ],
)
def test_a_colon_space_in_a_plain_value_gets_the_fix(text: str, hint: str) -> None:
    error = one_error(text)
    assert "not valid YAML" in error and hint in error


def test_a_number_where_text_is_meant_says_to_quote_it() -> None:
    error = one_error("jobs:\n  a: {run: echo, gpu: {type: 4090}}\n")
    assert error == (
        'p.yml:2:30: jobs.a.gpu.type: input should be a valid string, got 4090 (quote it: "4090")'
    )
