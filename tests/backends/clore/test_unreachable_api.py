"""The Clore API cannot be reached (nothing listens, the host does not resolve): every command
says why in words at the first failure, one line per retry, and never the library's text."""

from __future__ import annotations

import io
import json
import re
import socket
from pathlib import Path

import pytest
import requests
import typer
from typer.testing import CliRunner

from runner.backends.clore.api import CloreClient, RetryPolicy
from runner.backends.clore.waits import ApiWaits
from runner.cli import cleanup, doctor
from runner.core.model import JobStatus
from runner.engine.run_command import RunOptions, execute
from runner.spec.loader import parse_pipeline
from runner.transport_words import cause_in_words
from tests.fakes.clore_api import FakeClore
from tests.fakes.clore_on_sshd import Setup
from tests.fakes.clore_on_sshd import setup as setup  # the fixture
from tests.sshd_fixture import free_port

LIBRARY_WORDS = ("Max retries", "HTTPConnectionPool", "urllib3", "NewConnectionError", "Errno")
runner = CliRunner()


def _unreachable(fake: FakeClore, tries: int = 3) -> CloreClient:
    client = fake.client(retry=RetryPolicy(max_attempts=tries))
    client.base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: refused at once
    return client


def _app(register: object, make: object) -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app, make)  # type: ignore[operator]
    return app


def test_a_refused_connection_and_an_unknown_host_are_said_in_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    with pytest.raises(requests.RequestException) as refused:
        requests.get(f"http://127.0.0.1:{port}/", timeout=5)
    assert cause_in_words(refused.value) == "connection refused"

    def no_such_host(*_args: object, **_kw: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    with pytest.raises(requests.RequestException) as unknown:
        requests.get("http://no-such-host.invalid/", timeout=5)
    assert cause_in_words(unknown.value) == "the host name does not resolve"
    assert cause_in_words(requests.ReadTimeout("x")) == "no answer (timed out)"
    assert cause_in_words(requests.ConnectionError("odd")) == "the connection failed"


def test_doctor_says_each_wait_and_stops_at_the_first_unreachable_read(
    fake_clore: FakeClore,
) -> None:
    client = _unreachable(fake_clore)
    result = runner.invoke(_app(doctor.register, lambda: client), ["doctor"])
    assert result.exit_code == 3
    waits = [re.sub(r"\d+ s", "N s", line) for line in result.stderr.splitlines()[:2]]
    assert waits == [
        "Clore API (reading your wallets): connection refused; trying again in N s (try 2 of 3)",
        "Clore API (reading your wallets): connection refused; trying again in N s (try 3 of 3)",
    ]
    # said once, in the one shape: not once per endpoint (the fees and market were not tried)
    assert result.stdout == ""
    assert re.fullmatch(
        rf"clore-run: Clore API \(reading your wallets\): cannot reach {client.base_url}: "
        r"connection refused; gave up after \d+ s",
        result.stderr.splitlines()[-2],
    )
    assert result.stderr.splitlines()[-1] == "hint: check the network, or CLORE_API_URL"
    assert not any(word in result.output for word in LIBRARY_WORDS)


def test_cleanup_says_each_wait_in_words(fake_clore: FakeClore, tmp_path: Path) -> None:
    from runner.stores.ledger.sqlite import SqliteLedger

    with SqliteLedger(tmp_path / "ledger.db") as ledger:  # a rental a dead run left, sent or not
        rid = ledger.record_intent("run-1", "a", 7, 2.0, "USD-Blockchain", 2 / 24)
        ledger.mark_create_sent(rid, 0.0, None)
    client = _unreachable(fake_clore)
    args = ["cleanup", "--ledger", str(tmp_path / "ledger.db")]
    result = runner.invoke(_app(cleanup.register, lambda: client), args)
    assert result.exit_code == 3
    assert "Clore API (listing your orders): connection refused; trying again in" in result.stderr
    assert "cannot reach http://127.0.0.1:" in result.output
    assert not any(word in result.output for word in LIBRARY_WORDS)


def test_a_run_says_each_wait_and_its_reports_say_the_api_was_not_reached(
    setup: Setup,
) -> None:
    text = "jobs:\n  a: {run: echo hi}\n  b: {needs: [a], run: echo hi}\n"
    pipeline = parse_pipeline(text, "p.yml", {})
    backend, _ = setup.backend(pipeline)
    backend.client.base_url = f"http://127.0.0.1:{free_port()}/v1"
    (setup.tmp / "ws").mkdir()
    out = setup.tmp / "out"
    options = RunOptions(out_dir=out, workspace_root=setup.tmp / "ws", clock=setup.clock)
    options.waits = ApiWaits.attach(backend.client, lambda line: None)
    started = setup.clock.time()
    screen = io.StringIO()
    record, code = execute(pipeline, backend, options, screen)
    assert code == 3
    assert record.results[0].status is JobStatus.ERROR
    shown = screen.getvalue()
    first = shown.splitlines()[0]
    assert first.startswith(
        "clore-run: Clore API (reading your fees): connection refused; trying again"
    )
    assert "cannot reach http://127.0.0.1:" in record.results[0].reason
    summary = json.loads((out / "summary.json").read_text())
    (warning,) = summary["warnings"]
    assert warning.startswith("Clore API (reading your fees): cannot reach http://127.0.0.1:")
    # The minute the client spent on the API is the run's time too (the fake clock moved it).
    assert summary["duration_s"] >= setup.clock.time() - started - 1 > 20
    for text in (shown, (out / "summary.md").read_text(), (out / "junit.xml").read_text()):
        assert not any(word in text for word in LIBRARY_WORDS), text
