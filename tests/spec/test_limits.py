"""Matrix expansion is capped: per job (as GitHub: 256 combinations) and per pipeline (10,000
jobs), counted before the combinations are built, with a located error."""

from __future__ import annotations

import pytest

from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline

# 235 bytes that expand to 102 M combinations: eleven keys sharing one aliased list.
ALIAS_BOMB = (
    "jobs:\n  t:\n    run: x\n    strategy:\n      matrix:\n"
    "        a: &v [1, 2, 3, 4, 5]\n" + "".join(f"        {k}: *v\n" for k in "bcdefghijk")
)


def test_an_aliased_matrix_bomb_is_refused_before_it_is_built() -> None:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(ALIAS_BOMB, "p.yml", {})  # before: 10^8 dicts built, MemoryError
    text = str(caught.value)
    assert "p.yml:6:9:" in text and "jobs.t.strategy.matrix" in text
    assert "more than 256 combinations" in text


def test_256_combinations_are_fine_257_are_not() -> None:
    ok = "jobs:\n  t:\n    run: x\n    strategy: {matrix: {a: [%s], b: [1, 2]}}\n"
    assert len(parse_pipeline(ok % ", ".join(map(str, range(128))), "p.yml", {}).jobs) == 256
    with pytest.raises(SpecError, match="more than 256"):
        parse_pipeline(ok % ", ".join(map(str, range(129))), "p.yml", {})


def test_include_cannot_pass_the_cap_either() -> None:
    entries = ", ".join(f"{{x: {i}}}" for i in range(257))
    text = f"jobs:\n  t:\n    run: x\n    strategy: {{matrix: {{include: [{entries}]}}}}\n"
    with pytest.raises(SpecError, match="more than 256"):
        parse_pipeline(text, "p.yml", {})


@pytest.mark.slow
def test_a_pipeline_of_more_than_10000_jobs_is_refused_at_the_job_that_passes_it() -> None:
    values = ", ".join(map(str, range(250)))
    jobs = "".join(
        f"  j{i}:\n    run: x\n    strategy: {{matrix: {{a: [{values}]}}}}\n" for i in range(41)
    )
    with pytest.raises(SpecError) as caught:
        parse_pipeline("jobs:\n" + jobs, "p.yml", {})
    assert "jobs.j40: the pipeline makes more than 10,000 jobs" in str(caught.value)
