"""Paper cuts of the command line: a misspelt command gets the nearest one, `-h` is help, and an
invalid pipeline is annotated at its line and column in GitHub Actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int) and "Traceback" not in out + err
    return info.value.code, out, err


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


@pytest.mark.parametrize(
    ("args", "nearest"), [(["valdate", "x.yml"], "validate"), (["statsu"], "status")]
)
def test_a_misspelt_command_gets_the_nearest_one(
    capsys: pytest.CaptureFixture[str], args: list[str], nearest: str
) -> None:
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert err == f"clore-run: '{args[0]}' is not a command\nhint: did you mean '{nearest}'?\n"


def test_a_bare_word_far_from_any_command_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "zzzzzz")
    assert code == 2 and "neither a command nor a pipeline file" in err and "validate" in err


def test_a_file_named_like_a_command_is_still_a_pipeline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "valdate").write_text("jobs:\n  a: {run: 'true', workspace: false}\n")
    code, _, _ = cli(capsys, "valdate", "--backend", "local", "--out", str(tmp_path / "o"))
    assert code == 0


def test_a_missing_pipeline_path_is_still_file_not_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "nothere.yml")
    assert code == 2 and "nothere.yml:1:1: file not found" in err


def test_dash_h_is_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "-h")
    assert code == 0 and "Usage: clore-run" in out and "validate" in out


def test_an_invalid_pipeline_is_annotated_at_its_line_in_actions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "p.yml").write_text("jobs:\n  a: {run: x, needs: [b]}\n")
    for command in ("validate", "run"):
        code, out, err = cli(capsys, command, "ci/p.yml")
        assert code == 2 and "ci/p.yml:2:23: jobs.a.needs[0]: unknown job 'b'" in err
        assert (
            "::error file=ci/p.yml,line=2,col=23,title=clore-run%3A invalid pipeline::"
            "jobs.a.needs[0]: unknown job 'b'" in out.splitlines()
        )


def test_a_backend_with_fewer_places_than_the_concurrency_says_so(tmp_path: Path) -> None:
    import io

    from runner.backends.local import LocalBackend
    from runner.engine.run_command import RunOptions, execute
    from runner.spec.loader import parse_pipeline

    class OneHost(LocalBackend):
        def capacity(self) -> int:
            return 1

    text = "concurrency: 3\njobs:\n" + "".join(
        f"  j{i}: {{run: 'true', workspace: false}}\n" for i in range(3)
    )
    out = io.StringIO()
    options = RunOptions(out_dir=tmp_path / "out", workspace_root=tmp_path)
    execute(parse_pipeline(text, "p.yml", {}), OneHost(tmp_path), options, out)
    assert (
        "clore-run: concurrency 3, but the local backend has 1 place: at most 1 job at once"
        in out.getvalue().splitlines()
    )
