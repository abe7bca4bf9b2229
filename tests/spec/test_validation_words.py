"""What `validate` says about a broken file: every problem at once (a duplicate key among them),
YAML 1.1's warnings beside the errors, hints only where they apply, no class name, a fix for
each type error, and `--out` naming a file said in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import UsageError
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(text, "p.yml", {})
    return str(caught.value).splitlines()


def test_a_duplicate_key_is_reported_with_every_other_problem() -> None:
    said = problems("jobs:\n  a:\n    run: x\n    run: y\n  b:\n    run: z\n    retries: lots\n")
    assert said == [
        "p.yml:4:5: jobs.a.run: duplicate key 'run': first defined on line 3 "
        "(remove or rename one of them)",
        "p.yml:7:14: jobs.b.retries: input should be a valid integer, got 'lots' "
        "(a whole number, e.g. 2)",
    ]


def test_yaml_1_1_warnings_stay_beside_the_errors() -> None:
    said = problems("jobs:\n  a:\n    run: x\n    env: {DEBUG: yes}\n    retries: lots\n")
    assert said[0] == (
        'p.yml:4:18: warning: jobs.a.env.DEBUG: unquoted yes is read as true (quote it: "yes")'
    )
    assert said[1].startswith("p.yml:5:14: jobs.a.retries: ")


def test_an_unclosed_bracket_is_told_to_close_not_to_quote() -> None:
    (later,) = problems("jobs:\n  a:\n    needs: [b\n    run: x\n")
    assert later.endswith("(close the `[` opened on line 3 with `]`)"), later
    assert "': '" not in later
    (at_end,) = problems("jobs:\n  a: {run: x, needs: [b\n")
    assert at_end.endswith("(close the `[` opened on line 2 with `]`)"), at_end
    (colon,) = problems("jobs:\n  a: {run: echo a: b}\n")  # where the ': ' hint does apply
    assert "a value holding ': ' must be quoted" in colon


def test_a_hint_about_quoting_goes_only_where_a_value_has_the_wrong_type() -> None:
    (unknown,) = problems("jobs:\n  a:\n    run: x\n    spot: yes\n")
    assert unknown == "p.yml:4:5: jobs.a.spot: unknown key 'spot'"  # no `quote it: "yes"`


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ('"4090"', 'write it as a mapping: gpu: {type: "4090"}'),
        ("4090", 'write it as a mapping: gpu: {type: "4090"}'),
    ],
)
def test_a_mapping_key_given_a_scalar_names_no_class_and_shows_the_fix(
    value: str, fix: str
) -> None:
    (said,) = problems(f"jobs:\n  a:\n    run: x\n    gpu: {value}\n")
    assert "GpuSpec" not in said and "instance of" not in said
    assert said.startswith("p.yml:4:10: jobs.a.gpu: input should be a mapping, got ")
    assert said.endswith(f"({fix})")


@pytest.mark.parametrize(
    ("key", "value", "fix"),
    [
        ("retries", "lots", "a whole number, e.g. 2"),
        ("continue-on-error", "maybe", "true or false"),
        ("env", "[a]", "write it as a mapping: env: {NAME: value}"),
        ("strategy", "3", 'write it as a mapping: strategy: {matrix: {python: ["3.11", "3.12"]}}'),
        ("run", "3", 'quote it: "3"'),
    ],
)
def test_every_type_error_has_a_fix(key: str, value: str, fix: str) -> None:
    text = f"jobs:\n  a:\n    run: x\n    {key}: {value}\n"
    (said,) = problems(text.replace("run: x\n    run", "run"))
    assert said.endswith(f"({fix})"), said
    assert "Strategy" not in said


@pytest.mark.parametrize(("written", "fix"), [("1e308", "1.0e+308"), ("1e3", "1000")])
def test_a_number_yaml_1_1_reads_as_text_says_how_to_write_it(written: str, fix: str) -> None:
    (said,) = problems(f"jobs:\n  a:\n    run: x\n    timeout-minutes: {written}\n")
    assert said == (
        f"p.yml:4:22: jobs.a.timeout-minutes: input should be a number, got '{written}', "
        f"which YAML 1.1 reads as text (write it as {fix})"
    )


def test_choices_are_listed_once() -> None:
    (said,) = problems("jobs:\n  a:\n    run: x\n    priority: 3\n")
    assert said == (
        "p.yml:4:15: jobs.a.priority: input should be one of low, normal, high, urgent, got 3"
    )


def test_out_naming_a_file_is_said_in_words(tmp_path: Path) -> None:
    from runner.engine.run_command import output_folder

    a_file = tmp_path / "results"
    a_file.write_text("")
    with pytest.raises(UsageError) as caught, output_folder(a_file):
        pass
    assert caught.value.message == f"--out {a_file}: that is a file, and the reports need a folder"
    assert "Errno" not in str(caught.value) and "File exists" not in str(caught.value)
