"""The one registry of backends: what run, serve and plan accept, and what the docs list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.backends.registry import (
    BACKENDS,
    backend_spec,
    default_backend,
    described,
    renting_backends,
)
from runner.backends.spec import Setup
from runner.core.model import Job, Pipeline
from runner.errors import UsageError

ROOT = Path(__file__).parents[2]


def test_every_spec_is_filed_under_its_own_name() -> None:
    assert list(BACKENDS) == ["clore", "local", "ssh"]
    assert all(spec.name == name for name, spec in BACKENDS.items())
    assert renting_backends() == ["clore"]


def test_a_wrong_name_is_refused_with_the_choices() -> None:
    with pytest.raises(UsageError) as caught:
        backend_spec("locl")
    assert str(caught.value) == (
        "--backend locl: no such backend (backends: clore, local, ssh) (did you mean 'local'?)"
    )


def test_the_default_is_clore_with_a_key_else_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLORE_API_KEY", raising=False)
    assert default_backend().name == "local"
    monkeypatch.setenv("CLORE_API_KEY", "k")
    assert default_backend().name == "clore"


def test_the_action_s_docs_list_the_registry() -> None:
    """action.yml, the README and docs/cli.md say what `described()` says: paste it there
    after a change."""
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert action["inputs"]["backend"]["description"] == described()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"| `backend` | `clore` | {described()}" in readme
    names = "|".join(BACKENDS)
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "`--backend " + names.replace("|", "\\|") + "`" in cli  # the run options' table


def test_local_builds_and_ssh_asks_for_hosts(tmp_path: Path) -> None:
    pipeline = Pipeline(name="p", jobs=(Job(id="a", name="a", run="true"),))
    setup = Setup(pipeline, "run1")
    assert BACKENDS["local"].build(setup).name == "local"
    with pytest.raises(UsageError, match="--backend ssh needs hosts"):
        BACKENDS["ssh"].build(setup)
    assert "re-attached" in BACKENDS["ssh"].restart(setup)({"t"})
    assert BACKENDS["local"].restart(setup)(set()) == "no process of it was left"


def test_cleanup_asks_every_renting_backend_s_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """`clore-run cleanup` is each spec's `cleanup`: a second marketplace's is its entry, and
    one that fails does not keep the next from cleaning up its own (exit: the first failure's)."""
    import dataclasses

    import typer
    from typer.testing import CliRunner

    from runner.backends.spec import CleanupAsk
    from runner.cli.cleanup import register
    from runner.errors import InfrastructureError

    asked: list[tuple[str, CleanupAsk]] = []

    def failing(ask: CleanupAsk) -> None:
        asked.append(("clore", ask))
        ask.say("clore: one order left")
        raise InfrastructureError("1 rental(s) may still be billed")

    def second(ask: CleanupAsk) -> None:
        asked.append(("second", ask))
        ask.say("second: nothing to clean up")

    specs = {
        "clore": dataclasses.replace(BACKENDS["clore"], cleanup=failing),
        "local": BACKENDS["local"],
        "second": dataclasses.replace(BACKENDS["clore"], name="second", cleanup=second),
    }
    monkeypatch.setattr("runner.cli.cleanup.BACKENDS", specs)
    app = typer.Typer()
    register(app)
    app.command("other")(lambda: None)  # two commands: `cleanup` keeps its name
    result = CliRunner().invoke(app, ["cleanup", "--dry-run", "--run", "r1", "--ledger", "l.db"])
    assert [name for name, _ in asked] == ["clore", "second"]
    assert all((a.dry_run, a.run_id, a.ledger) == (True, "r1", "l.db") for _, a in asked)
    assert "clore: one order left" in result.output
    assert "second: nothing to clean up" in result.output
    assert "clore-run: 1 rental(s) may still be billed" in result.output
    assert result.exit_code == 3


def test_the_backends_own_pipeline_keys_are_declared_once() -> None:
    """The file's models take these from the registry: a name twice would be one key with two
    meanings, and the core model names none of them."""
    import dataclasses

    from runner.backends.registry import pipeline_key_values, pipeline_keys

    keys = [*pipeline_keys("pipeline"), *pipeline_keys("job")]
    assert [(k.name, k.level) for k in keys] == [("currency", "pipeline"), ("ssh", "job")]
    assert len({k.name for k in keys}) == len(keys)
    assert all(k.default is None or k.default in k.choices for k in keys)
    fields = {f.name for f in dataclasses.fields(Pipeline)} | {
        f.name for f in dataclasses.fields(Job)
    }
    assert not fields & {k.name for k in keys}
    pipeline = Pipeline(name="p", jobs=(), backend_keys={"currency": "bitcoin"})
    assert pipeline_key_values(pipeline) == {"currency": "bitcoin"}
    assert pipeline_key_values(Pipeline(name="p", jobs=())) == {"currency": "CLORE-Blockchain"}
