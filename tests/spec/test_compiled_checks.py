"""The compiled validators (runner/spec/compiled_models.py) decide as the pydantic models do.

`validate` and `run` check a file with pydantic_core over the core schemas pydantic made of the
models, loading neither pydantic nor the models. Every file in examples/, a list of bad files
that reaches every kind of field, and the fuzzers' documents give the same Pipeline, or the same
located messages, by both paths; a stale compiled file is not used.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from runner.core.model import Pipeline
from runner.spec import checks, compiled_models
from runner.spec.checks import CompiledChecks, ModelChecks
from runner.spec.diagnostics import SpecError
from runner.spec.loader import parse_pipeline
from runner.spec.schema_compiler import compiled_source, key_table
from tests.spec.test_property import ENVIRON, EXAMPLES, document, mutated

ROOT = Path(__file__).parents[2]


def freshly_compiled() -> CompiledChecks:
    """The validators compile_source() makes now, as compiled_models.py would hold them."""
    made: dict[str, Any] = {}
    exec(compile(compiled_source(), "compiled_models.py", "exec"), made)
    return CompiledChecks(made["SCHEMAS"], made["KEYS"])


# The shipped file when it is current; under another pydantic (a CI machine may have one) it is
# not used, and the same file made for that pydantic is what these tests compare.
COMPILED = checks.compiled_checks() or freshly_compiled()
MODELS = ModelChecks()

BAD = [
    # unknown keys at every level, with and without a near miss
    "jobz: {}\njobs:\n  a:\n    run: x\n",
    "jobs:\n  a:\n    runn: x\n",
    "jobs:\n  a:\n    run: x\n    gpu: {tpye: RTX, cuont: 2}\n",
    "defaults:\n  gpu: {vram: 3}\n  imgae: x\njobs:\n  a:\n    run: x\n",
    "jobs:\n  a:\n    run: x\n    strategy: {matrix: {n: [1]}, fail_fast: true}\n",
    # every kind of field given the wrong type
    "name: [x]\nconcurrency: '3'\nbudget: abc\ntimeout-minutes: true\njobs:\n  a:\n    run: x\n",
    "currency: euro\nprovision: later\nhosts: 5\nenv: [1]\njobs:\n  a:\n    run: x\n",
    "jobs:\n  a:\n    run: 5\n    image: 1\n    ssh: root\n    retries: 1.5\n    workspace: some\n",
    "jobs:\n  a:\n    run: x\n    env: {A: [1], B: {c: d}, C: 1, D: true, E: null}\n",
    "jobs:\n  a:\n    run: x\n    priority: top\n    continue-on-error: 'yes'\n    junit: [a]\n",
    "jobs:\n  a:\n    run: x\n    artifacts: [1, b]\n    if: 3\n    not-before: tomorrow\n",
    "jobs:\n  a:\n    run: x\n    not-before: 2026-12-01T02:00:00\n    estimate-minutes: -1\n",
    "jobs:\n  a:\n    run: x\n    gpu: 4090\n",
    "jobs:\n  a:\n    run: x\n    gpu: {type: 4090, count: 0, min-vram-gb: -1, spot: 1}\n",
    "jobs:\n  a:\n    run: x\n    gpu: {max-price: 0, min-reliability: 1.5, count: 17}\n",
    "jobs:\n  a:\n    run: x\n    strategy: 3\n",
    "jobs:\n  a:\n    run: x\n    strategy: {fail-fast: 1}\n",
    "jobs:\n  a:\n    run: x\n    strategy: {matrix: [1, 2]}\n",
    "jobs:\n  a:\n    run: x\n    needs: 3\n  b:\n    run: y\n    needs: [a, 4]\n",
    "jobs:\n  a:\n    run: x\n    timeout-minutes: .nan\n    boot-timeout-minutes: .inf\n",
    "budget: -1\nconcurrency: 1001\ntimeout-minutes: 0\njobs:\n  a:\n    run: x\n",
    "defaults: 3\njobs:\n  a:\n    run: x\n",
    "defaults:\n  run: 1\n  gpu: []\njobs:\n  a: {}\n",
    "jobs: [a]\n",
    "jobs:\n  a:\n    run: x\n    name: 3.10\n",
    # matrices: every instance is checked, each problem said once
    "jobs:\n  t:\n    strategy:\n      matrix:\n        n: [x, 0]\n    run: x\n"
    "    retries: '${{ matrix.n }}'\n    gpu: {count: '${{ matrix.n }}'}\n",
]


def outcome(text: str, file: str, using: checks.Checks) -> Pipeline | list[str]:
    try:
        return parse_pipeline(text, file, ENVIRON, using)
    except SpecError as exc:
        return [str(d) for d in exc.diagnostics]


def assert_alike(text: str, file: str = "p.yml") -> Pipeline | list[str]:
    compiled = outcome(text, file, COMPILED)
    assert compiled == outcome(text, file, MODELS)
    return compiled


def test_the_shipped_validators_are_current() -> None:
    """After editing runner/spec/models.py or coercions.py, or another pydantic: run
    `python -m runner.spec.schema_compiler`."""
    made_for = compiled_models.STAMP.split(" pydantic ")[-1]
    installed = checks.stamp().split(" pydantic ")[-1]
    if made_for != installed:
        assert checks.compiled_checks() is None  # not used: the models validate
        pytest.skip(f"compiled for pydantic {made_for}, not {installed}: the models are used")
    assert checks.compiled_checks() is not None, (
        "compiled_models.py is stale: run python -m runner.spec.schema_compiler"
    )
    assert (ROOT / "runner/spec/compiled_models.py").read_text(
        encoding="utf-8"
    ) == compiled_source()
    assert checks.default_checks().__class__ is CompiledChecks
    assert COMPILED.keys == key_table()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_gives_the_same_pipeline(example: Path) -> None:
    result = assert_alike(example.read_text(encoding="utf-8"), str(example))
    assert isinstance(result, Pipeline) and result.jobs


@pytest.mark.parametrize("text", BAD)
def test_bad_files_give_the_same_messages(text: str) -> None:
    result = assert_alike(text)
    assert isinstance(result, list) and result  # every one of them is refused


def test_a_near_miss_is_named_by_both() -> None:
    messages = assert_alike(BAD[2])
    assert messages == [
        "p.yml:4:11: jobs.a.gpu.tpye: unknown key 'tpye' (did you mean 'type'?)",
        "p.yml:4:22: jobs.a.gpu.cuont: unknown key 'cuont' (did you mean 'count'?)",
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_examples_decide_alike(text: str) -> None:
    assert_alike(text, "fuzz.yml")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document)
def test_random_documents_decide_alike(doc: Any) -> None:
    assert_alike(yaml.safe_dump(doc, sort_keys=False), "fuzz.yml")


SHIPPED_IS_CURRENT = checks.compiled_checks() is not None
needs_current = pytest.mark.skipif(
    not SHIPPED_IS_CURRENT, reason="compiled_models.py was made for another pydantic"
)


@needs_current
def test_a_stale_compiled_file_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_models, "STAMP", "made from other models")
    assert checks.compiled_checks() is None
    monkeypatch.setattr(checks, "_SOURCES", ("models.py", "coercions.py", "checks.py"))
    monkeypatch.undo()
    assert checks.compiled_checks() is not None
    monkeypatch.setattr(checks, "_pydantic_version", lambda: "3.0.0")
    assert checks.compiled_checks() is None  # another pydantic may make other schemas


PROBE = textwrap.dedent(
    """
    import sys
    from runner.spec.loader import load_pipeline
    from runner.spec.diagnostics import SpecError
    load_pipeline("examples/hello.yml")
    try:
        load_pipeline("tests/spec/no-such-file.yml")
    except SpecError:
        pass
    from runner.spec.loader import parse_pipeline
    try:
        parse_pipeline("jobs:\\n  a:\\n    run: 1\\n", "p.yml", {})
    except SpecError as exc:
        print(exc)
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core")))
    # a pydantic loaded later shares the compiled module the validators use
    import pydantic, pydantic_core
    from runner.spec import checks
    class M(pydantic.BaseModel):
        n: int
    assert M(n=1).n == 1
    assert pydantic_core.SchemaValidator is checks.core().SchemaValidator
    assert pydantic.ValidationError is checks.default_checks().invalid
    print("shared")
    """
)


@needs_current
def test_checking_a_file_loads_no_pydantic() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'p.yml:3:10: jobs.a.run: input should be a valid string, got 1 (quote it: "1")',
        "['pydantic_core._pydantic_core']",
        "shared",
    ]
