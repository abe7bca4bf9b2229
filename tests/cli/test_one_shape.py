"""One message shape for every command: `clore-run: <what happened>`, then `hint: <what to do>`
on a line of its own; no `error:`/`problem:`/`Usage:` prefixes of a command's own, no internal
endpoint name, each cause said once. Each command's common failures: no key (or token), a
refused one, an unreachable API (or server), a bad flag."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from runner.backends.clore import api
from runner.cli import main
from runner.outcome import exit_line
from tests.fakes.clore_api import API_KEY, FakeClore
from tests.serve.harness import TOKEN, thread_server
from tests.sshd_fixture import free_port

ENDPOINTS = re.compile(
    r"renter_fees|my_orders|create_order|cancel_order|spot_marketplace|set_spot_price"
    r"|Clore API (marketplace|wallets)\b"
)
FOREIGN_PREFIX = re.compile(r"^(error|problem|Error|Usage|warning): ", re.M)
LOCATED = re.compile(r"^[^:\s]+:\d+:\d+: ")
NESTED = re.compile(r"\([^()]*\(")  # a parenthesis opened inside another
FAILURES = ("no key", "refused key", "unreachable", "bad flag")

CLORE_COMMANDS = {
    "offers": ["offers"],
    "doctor": ["doctor"],
    "cleanup": ["cleanup", "--ledger", "{ledger}"],
    "run": ["run", "{pipeline}", "--backend", "clore", "--out", "{out}"],
    "plan": ["plan", "{pipeline}", "--backend", "clore"],
    "runner start": ["runner", "start", "--gpu", "4090", "--repo", "o/r"],
}
SERVER_COMMANDS = {
    "jobs": ["jobs"],
    "status": ["status"],
    "cancel": ["cancel", "s1.a"],
    "logs": ["logs", "s1.a"],
    "submit": ["submit", "{pipeline}"],
}
BAD_FLAG = "--no-such-flag"
CHECKED: list[tuple[str, str]] = []  # (command, failure): the figure of the report


def _said(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int)
    return info.value.code, out, err


def _check_shape(code: int, out: str, err: str, expected_code: int, *, ran: bool) -> None:
    """`ran`: a run that started reports per job (its job lines carry the cause, once each,
    with no second telling and no endpoint name), and ends in the shape too: why it exits,
    and what to do. Every other failure ends in the shape."""
    text = out + err
    assert code == expected_code, text
    assert "Traceback" not in text and "Errno" not in text
    assert not ENDPOINTS.search(text), text
    if ran:
        reasons = re.findall(r"^\[a\] error in [^:]*: (.*)$", text, re.M)
        assert len(reasons) == 1, text
        cause = reasons[0]
        assert text.count(cause) <= 2, text  # the job's line and its row in the table, no more
        assert NESTED.search(cause) is None and "could not be read: " not in cause, cause
        assert not FOREIGN_PREFIX.search(text), text  # the totals too: `errored: 1 errored`
        assert "clore-run: warning" not in text
        *_, said, hint = out.rstrip("\n").split("\n")
        assert said == f"clore-run: {exit_line(expected_code)}", text
        assert hint.startswith("hint: ") and not NESTED.search(hint), text
        return
    assert not FOREIGN_PREFIX.search(text), text
    lines = err.rstrip("\n").split("\n")
    if LOCATED.match(lines[0]):  # a pipeline file's problem: FILE:LINE:COL: what (fix)
        assert all(LOCATED.match(line) for line in lines), err
        return
    said = [i for i, line in enumerate(lines) if line.startswith("clore-run: ")]
    assert said, err
    last = said[-1]
    assert lines[last + 1 :] in ([], [lines[-1]]), err
    if last + 1 < len(lines):
        prose = lines[-1].split("$(")[0]  # a shell command to copy has its own parentheses
        assert lines[-1].startswith("hint: ") and not NESTED.search(prose), err
    cause = lines[last].removeprefix("clore-run: ")
    assert text.count(cause) == 1, text  # each cause said once
    assert NESTED.search(cause) is None, cause


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    from runner.stores.ledger.sqlite import SqliteLedger

    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_ACTIONS", "CLORE_API_KEY", "CLORE_RUN_TOKEN", "CLORE_RUN_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    # An unreachable API is said at its first failure here, not after a minute of retries.
    monkeypatch.setattr(api, "RetryPolicy", functools.partial(api.RetryPolicy, max_attempts=1))
    pipeline = tmp_path / "p.yml"
    pipeline.write_text("jobs:\n  a: {run: echo hi, gpu: {type: 'RTX 4090'}, workspace: false}\n")
    with SqliteLedger(tmp_path / "ledger.db") as ledger:  # a rental a dead run left
        rid = ledger.record_intent("run-1", "a", 7, 2.0, "USD-Blockchain", 2 / 24)
        ledger.mark_create_sent(rid, 0.0, None)
    yield {"pipeline": str(pipeline), "ledger": str(tmp_path / "ledger.db"), "out": "out"}


@pytest.mark.slow
@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("command", list(CLORE_COMMANDS))
def test_clore_commands_fail_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fake_clore: FakeClore,
    place: dict[str, str],
    command: str,
    failure: str,
) -> None:
    args = [a.format(**place) for a in CLORE_COMMANDS[command]]
    monkeypatch.setenv("CLORE_API_URL", fake_clore.url)
    monkeypatch.setenv("CLORE_RUNNER_TOKEN", "github_pat_x")  # `runner start`'s other token
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{free_port()}")
    if failure != "no key":
        monkeypatch.setenv(
            "CLORE_API_KEY", "sk-wrong-5d1e" if failure == "refused key" else API_KEY
        )
    if failure == "unreachable":
        monkeypatch.setenv("CLORE_API_URL", f"http://127.0.0.1:{free_port()}/v1")
    if failure == "bad flag":
        args.append(BAD_FLAG)
    code, out, err = _said(capsys, args)
    expected = 2 if failure == "bad flag" else 3
    ran = command == "run" and failure in ("refused key", "unreachable")
    _check_shape(code, out, err, expected, ran=ran)
    if failure == "no key":
        assert err.endswith("hint: create an API key in your clore.ai profile (API section), "
                            "then `export CLORE_API_KEY=...`; in GitHub Actions pass it from a "
                            "secret\n")  # fmt: skip
    if failure == "refused key":
        assert "the Clore API refused the key in CLORE_API_KEY" in out + err
    if failure == "bad flag":
        assert f"clore-run: no such option: {BAD_FLAG}\nhint: " in err
    if command == "run" and failure in ("refused key", "unreachable"):
        # The hint for the cause the job's line said: not a pointer to another command.
        said = "check CLORE_API_KEY: " if failure == "refused key" else "check the network, "
        assert out.rstrip("\n").split("\n")[-1].startswith(f"hint: {said}"), out
    if command == "cleanup" and failure in ("refused key", "unreachable"):
        # Each rental's line says why it is left, the API's hint comes once, under the end.
        assert all(NESTED.search(line) is None for line in out.splitlines()), out
        said = "check CLORE_API_KEY" if failure == "refused key" else "check the network"
        assert said not in out and f"\nhint: {said}" in err, out + err
    CHECKED.append((command, failure))


def test_serve_on_clore_with_a_refused_key_ends_at_its_start_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fake_clore: FakeClore,
    place: dict[str, str],
) -> None:
    """A long-lived server said nothing of a refused key until its first job failed: now it
    ends before it listens, and no job is ever queued on a key that cannot rent."""
    monkeypatch.setenv("CLORE_RUN_TOKEN", "t" * 32)
    monkeypatch.setenv("CLORE_API_URL", fake_clore.url)
    monkeypatch.setenv("CLORE_API_KEY", "sk-wrong-5d1e")
    from runner.serve.service import Service  # only this test needs serve's insides

    def started(_self: Service) -> None:  # past the check: fail here rather than serve on
        raise AssertionError("serve started on a refused key")

    monkeypatch.setattr(Service, "start", started)
    code, out, err = _said(capsys, ["serve", "--backend", "clore", "--port", "0"])
    _check_shape(code, out, err, 3, ran=False)
    assert "the Clore API refused the key in CLORE_API_KEY" in err
    assert "listening" not in out
    CHECKED.append(("serve", "refused key"))


def test_serve_on_clore_says_an_unreachable_api_once_and_starts(
    place: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API out of reach may come back: the start says so as a warning, not an end."""
    from runner.serve.backends import BackendChoice, build

    monkeypatch.setenv("CLORE_API_KEY", API_KEY)
    monkeypatch.setenv("CLORE_API_URL", f"http://127.0.0.1:{free_port()}/v1")
    backend, _reconcile = build(BackendChoice("clore", ledger=Path(place["ledger"])), "i1")
    try:
        warning = backend.check_access()  # type: ignore[attr-defined]
    finally:
        backend.shutdown()
    assert warning is not None and "cannot start until it answers" in warning
    assert not ENDPOINTS.search(warning) and NESTED.search(warning) is None, warning
    CHECKED.append(("serve", "unreachable"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with thread_server(tmp_path_factory.mktemp("serve")) as srv:
        yield srv.api.url


@pytest.mark.slow
@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("command", list(SERVER_COMMANDS))
def test_queue_commands_fail_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    place: dict[str, str],
    server: str,
    command: str,
    failure: str,
) -> None:
    args = [a.format(**place) for a in SERVER_COMMANDS[command]]
    url = f"http://127.0.0.1:{free_port()}" if failure == "unreachable" else server
    args += ["--server", url]
    if failure in ("unreachable", "bad flag"):
        monkeypatch.setenv("CLORE_RUN_TOKEN", TOKEN)
    if failure == "refused key":
        monkeypatch.setenv("CLORE_RUN_TOKEN", "x" * 24)
    if failure == "bad flag":
        args.append(BAD_FLAG)
    code, out, err = _said(capsys, args)
    expected = 3 if failure == "unreachable" else 2
    _check_shape(code, out, err, expected, ran=False)
    if failure == "no key":
        assert "hint: set CLORE_RUN_TOKEN" in err
    if failure == "refused key":
        assert "hint: set CLORE_RUN_TOKEN to the token `clore-run serve` was started" in err
    if failure == "unreachable":
        assert "hint: is `clore-run serve` running there?" in err
    CHECKED.append((command, failure))


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["serve", "--backend", "clore", "--port", "0"], {"CLORE_RUN_TOKEN": "t" * 32}, 3),
        (["serve", "--backend", "clore", "--port", "0"], {}, 2),  # no token of its own
        (["serve", BAD_FLAG], {}, 2),
        (["runner", "start", "--gpu", "4090", "--repo", "o/r"], {"CLORE_API_KEY": "k"}, 2),
        (["runner", "start", "--gpu", "4090"], {"CLORE_RUNNER_TOKEN": "github_pat_x"}, 2),
        (["hosts", "--coordinator", "postgresql://u@127.0.0.1:{port}/x"], {}, 3),
        (["warmth", "--db", "postgresql://u@127.0.0.1:{port}/x"], {}, 3),
        (["warmth", "--db", "none.db"], {}, 2),
        (["warmth", BAD_FLAG], {}, 2),
    ],
)
def test_commands_without_an_api_failure_end_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    place: dict[str, str],
    args: list[str],
    env: dict[str, str],
    code: int,
) -> None:
    """No key for serve (none of its own either), none of runner start's GitHub token nor a
    repository, a coordinator or queue database that cannot be reached or is not there: each
    ends in the shape, before anything listens or is rented."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    args = [a.format(port=free_port(), **place) for a in args]
    said, out, err = _said(capsys, args)
    _check_shape(said, out, err, code, ran=False)
    CHECKED.append((" ".join(a for a in args[:2] if not a.startswith("-")), "no key or place"))


@pytest.mark.parametrize(
    "args",
    [
        ["validate", BAD_FLAG],
        ["validate", "missing.yml"],
        ["plan", "missing.yml"],
        ["schema", BAD_FLAG],
        ["hosts", BAD_FLAG],
        ["comment", "missing.json"],
        ["offers", "--currency", "DOGE"],
        ["doctor", "--currency", "DOGE"],
    ],
)
def test_other_commands_bad_input_in_the_one_shape(
    capsys: pytest.CaptureFixture[str], place: dict[str, str], args: list[str]
) -> None:
    code, out, err = _said(capsys, args)
    _check_shape(code, out, err, 2, ran=False)
    CHECKED.append((args[0], "bad input"))


@pytest.mark.slow
@pytest.mark.parametrize("failure", FAILURES)
def test_comment_fails_in_the_one_shape(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    httpserver: HTTPServer,
    tmp_path: Path,
    failure: str,
) -> None:
    """`comment` with no GitHub token, one GitHub refuses, GitHub unreachable, a bad flag."""
    from runner.report import write_reports
    from tests.report.fake_github import FakeGitHub
    from tests.report.records import mixed_record, write_outputs

    write_outputs(tmp_path)
    write_reports(tmp_path, mixed_record())
    github = FakeGitHub(httpserver, post_status=401 if failure == "refused key" else 0)
    event = tmp_path / "event.json"
    event.write_text('{"pull_request": {"number": 7}}')
    url = f"http://127.0.0.1:{free_port()}" if failure == "unreachable" else github.api_url
    for name in ("GITHUB_ACTIONS", "GITHUB_TOKEN", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    env = {"GITHUB_REPOSITORY": github.repo, "GITHUB_API_URL": url,
           "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event)}  # fmt: skip
    if failure != "no key":
        env["GITHUB_TOKEN"] = "ghs_x"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = ["comment", str(tmp_path / "summary.json")]
    if failure == "bad flag":
        args.append(BAD_FLAG)
    code, out, err = _said(capsys, args)
    _check_shape(code, out, err, {"no key": 2, "bad flag": 2}.get(failure, 3), ran=False)
    assert err.rstrip("\n").split("\n")[-1].startswith("hint: "), err
    assert "Connection" not in err and "Max retries" not in err  # requests' words
    CHECKED.append(("comment", failure))
