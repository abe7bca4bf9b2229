"""Property: for ANY text, parse_pipeline returns a Pipeline or raises a located SpecError.

Two generators: mutations of the real example files (characters deleted, duplicated or inserted,
lines swapped, real keys inserted with values of the wrong type) and random documents built from
a small vocabulary of the format's own keys. Whatever comes out, it is never another exception,
every diagnostic points inside the file, and a valid pipeline can always be planned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runner.core.model import Pipeline
from runner.plan import build_plan, render_plan
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yml"))
SEEDS = [p.read_text(encoding="utf-8") for p in EXAMPLES] + [
    "jobs:\n  a:\n    run: x\n  b:\n    needs: [a]\n    run: y\n",
    "defaults:\n  gpu: {type: RTX, count: 2}\njobs:\n"
    "  m:\n    strategy:\n      matrix:\n        n: [1, 2]\n        include: [{n: 3, x: y}]\n"
    "        exclude: [{n: 1}]\n    gpu: {count: '${{ matrix.n }}'}\n"
    "    run: echo ${{ env.HOME }}\n",
]
FILE = "fuzz.yml"
ENVIRON = {"HOME": "/root", "X": "1"}

KEYS = [
    "name", "concurrency", "budget", "timeout-minutes", "currency", "env", "defaults", "jobs",
    "hosts", "image", "retries", "gpu", "type", "count", "min-vram-gb", "max-price", "spot",
    "min-reliability", "workspace", "priority", "continue-on-error", "artifacts", "junit", "if",
    "not-before", "estimate-minutes", "run", "needs", "strategy", "matrix", "fail-fast",
    "include", "exclude", "a", "b", "build", "bogus-key",
]  # fmt: skip
VALUES = [
    "0", "-1", "0.5", "1e3", "1.0e+308", ".inf", ".nan", "true", "no", "~", "''", '""', "[]",
    "{}", "[a, b]", "{x: 1}", "high", "urgent", "always()", "failure()", "bogus()", "build",
    "a", "2026-12-01T02:00:00Z", "2026-12-01", "2026-12-01T02:00:00", "'${{ matrix.n }}'",
    "'${{ env.HOME }}'", "'${{ env.MISSING }}'", "'${{ matrix'", "'${{ }}'", "&x [1]", "*x",
    "!!binary aGk=", "!!python/object:os.system x", "? complex", "|\n  block", "RTX 3090",
    "'\\t'", "0x1F", "0o17", "1_000", "9999999999999999999999",
]  # fmt: skip
NOISE = [*" \n\t:-#&*!|>'\"{}[],?%@`$", "${{", "}}", "  ", "- ", ": "]


def check(text: str) -> None:
    """The property itself."""
    try:
        pipeline = parse_pipeline(text, FILE, ENVIRON)
    except SpecError as exc:
        assert exc.diagnostics, "a SpecError must carry at least one diagnostic"
        last_line = text.count("\n") + 1
        for d in exc.diagnostics:
            assert d.file == FILE
            assert 1 <= d.line <= last_line, (d, last_line)
            assert d.column >= 1, d
            assert str(d).startswith(f"{FILE}:{d.line}:{d.column}: ")
        return
    assert isinstance(pipeline, Pipeline)
    assert pipeline.jobs
    plan = build_plan(pipeline)
    json.dumps(plan, allow_nan=False)  # the documented JSON stays valid JSON
    render_plan(plan)


# -- mutations of real files ------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["delete", "duplicate", "insert", "swap", "set", "add"]))
        lines = text.split("\n")
        size = len(text)
        if kind == "delete" and size:
            start = draw(st.integers(0, size - 1))
            text = text[:start] + text[start + draw(st.integers(1, 8)) :]
        elif kind == "duplicate" and size:
            start = draw(st.integers(0, size - 1))
            end = min(size, start + draw(st.integers(1, 40)))
            text = text[:end] + text[start:end] + text[end:]
        elif kind == "insert":
            at = draw(st.integers(0, size))
            text = text[:at] + draw(st.sampled_from(NOISE)) + text[at:]
        elif kind == "swap" and len(lines) > 1:
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == "set":
            # give an existing `key: value` line another value, of any type
            candidates = [i for i, line in enumerate(lines) if ": " in line]
            if candidates:
                i = draw(st.sampled_from(candidates))
                key_part = lines[i].split(": ", 1)[0]
                lines[i] = f"{key_part}: {draw(st.sampled_from(VALUES))}"
                text = "\n".join(lines)
        elif kind == "add":
            i = draw(st.integers(0, len(lines)))
            indent = " " * draw(st.sampled_from([0, 2, 4, 6, 8]))
            key, value = draw(st.sampled_from(KEYS)), draw(st.sampled_from(VALUES))
            lines.insert(i, f"{indent}{key}: {value}")
            text = "\n".join(lines)
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
# regressions the fuzzer found: a scalar `needs` crashed, infinite minutes crashed `plan`
@pytest.mark.slow
@example("jobs:\n  a:\n    run: x\n  b:\n    needs: -1\n    run: y\n")
@example("jobs:\n  a:\n    run: x\n    timeout-minutes: .inf\n")
@example("jobs:\n  a:\n    run: x\n    estimate-minutes: 1.0e+308\n")
@example("budget: .inf\njobs:\n  a:\n    run: x\n")
@example("jobs:\n  a:\n    run: x\n  b")  # libyaml put this error on a line past the end
def test_mutated_examples_never_crash(text: str) -> None:
    check(text)


# -- random documents from the format's vocabulary ---------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "high", "always()", "RTX", "a", "b", "${{ matrix.n }}"]),
    st.sampled_from(["${{ env.HOME }}", "${{ env.NOPE }}", "${{ x", "2026-12-01T02:00:00Z"]),
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    ),
    max_leaves=12,
)
job = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)
document = st.one_of(
    values,
    st.fixed_dictionaries(
        {"jobs": st.dictionaries(st.sampled_from(["a", "b", "build", "x y", "1"]), job)},
        optional={
            "defaults": job,
            "env": values,
            "concurrency": values,
            "budget": values,
            "name": values,
        },
    ),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document, st.booleans())
def test_random_documents_never_crash(doc: Any, flow: bool) -> None:
    check(yaml.safe_dump(doc, default_flow_style=flow, sort_keys=False))


def test_the_seeds_themselves_are_valid() -> None:
    """The mutations start from valid files, so they probe the edge, not only garbage."""
    for text in SEEDS:
        assert parse_pipeline(text, FILE, ENVIRON).jobs
