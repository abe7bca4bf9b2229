"""A NUL in an env value passed validation and ssh dropped it silently (the job saw a cut
value): it is a located error, as a key that no process could be given is."""

from __future__ import annotations

import pytest

from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('jobs:\n  a:\n    run: "true"\n    env: {X: "a\\0b"}\n', "p.yml:4:14: jobs.a.env.X: "),
        ('env: {X: "a\\0b"}\njobs:\n  a: {run: "true"}\n', "p.yml:1:10: env.X: "),
        ('jobs:\n  a:\n    run: "true"\n    env: {"A=B": x}\n', "p.yml:4:11: jobs.a.env"),
    ],
)
def test_an_env_that_no_process_can_be_given_is_a_located_error(text: str, where: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_pipeline(text, "p.yml", {})
    assert str(err.value).startswith(where), str(err.value)
