"""The coordinator's URL (postgresql://user:password@...) is a secret (issue 25, medium).

A local job running `env` printed it to the console and logs/; it was in /proc/$PPID/environ;
`serve --db postgresql://user:pw@...` showed the password in `ps`. Now it is handled as the API
key is: out of jobs' environments and of the re-executed process's environment block, redacted
everywhere (the URL and the password alone), and never taken from the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner import redact
from runner.cli import main
from runner.stores.target import coordinator_from, libpq_password
from tests.processes import marked_env

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "Pw-9f3a8c/e1"  # a `/` is written %2F in a URL: both forms must go
URL = "postgresql://clore:Pw-9f3a8c%2Fe1@127.0.0.1:1/coord"
PG_PASSWORD = "pgpw-77aa-51c0"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def _env(**extra: str) -> dict[str, str]:
    drop = {*redact.SECRET_ENV_VARS, "GITHUB_ACTIONS", "CLORE_RUN_COORDINATOR_FILE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return marked_env({**env, "PYTHONPATH": str(REPO), **extra}, inherit=False)


@pytest.mark.slow
def test_a_local_job_sees_neither_the_coordinator_url_nor_its_password(tmp_path: Path) -> None:
    (tmp_path / "p.yml").write_text(
        textwrap.dedent(
            """\
            jobs:
              peek:
                workspace: false
                run: |
                  env > env.txt
                  tr '\\0' '\\n' < /proc/$PPID/environ > environ.txt || true
                  printf 'said %s and %s\\n' "$(printf 'Pw-9f3a8c')/e1" "$(printf pgpw-77aa)-51c0"
                  exit 1
                artifacts: [env.txt, environ.txt]
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "p.yml", "--backend", "local", "--out", "out"],
        cwd=tmp_path,
        env=_env(CLORE_RUN_COORDINATOR=URL, PGPASSWORD=PG_PASSWORD),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr  # the job failed, as it was told to
    artifacts = tmp_path / "out/artifacts/peek"
    for name in ("env.txt", "environ.txt"):  # not there at all: not merely redacted
        seen = (artifacts / name).read_text()
        assert "CLORE_RUN_COORDINATOR" not in seen and "PGPASSWORD" not in seen, name
    # What the job said went to the console, logs/ and the reports with both passwords masked.
    written = [done.stdout, done.stderr]
    written += [p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert any("said *** and ***" in text for text in written)
    for text in written:
        assert PASSWORD not in text and PG_PASSWORD not in text and "Pw-9f3a8c%2F" not in text


PROBE = textwrap.dedent(
    """
    import os, subprocess
    from runner.process_guard import protect
    protect()
    environ = open(f"/proc/{os.getpid()}/environ", "rb").read()
    print("environ-has-it", b"Pw-9f3a8c" in environ or b"pgpw-77aa" in environ)
    print("python-sees-it", "Pw-9f3a8c" in os.environ["CLORE_RUN_COORDINATOR"])
    child = subprocess.run(["sh", "-c", "echo ${CLORE_RUN_COORDINATOR:-none}${PGPASSWORD:-}"],
                           capture_output=True)
    print("child-sees", child.stdout.decode().strip())
    """
)


def test_the_process_restarts_without_the_coordinator_in_its_environment_block() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=_env(CLORE_RUN_COORDINATOR=URL, PGPASSWORD=PG_PASSWORD),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "environ-has-it False",
        "python-sees-it True",
        "child-sees none",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--db", URL],
        ["pool", "show", "--coordinator", URL],
        ["cleanup", "--ledger", URL, "--dry-run"],
        ["offers", "--coordinator", "postgresql://u@h/db?password=Pw-9f3a8c%2Fe1"],
    ],
)
def test_a_password_on_the_command_line_is_refused_without_being_shown(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLORE_RUN_TOKEN", "t" * 32)
    monkeypatch.setenv("CLORE_API_KEY", "k" * 32)
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    assert exited.value.code == 2, out + err
    assert "holds a password" in err and "PGPASSWORD" in err and "ps" in err
    assert "Pw-9f3a8c" not in out + err


def test_help_says_where_the_password_goes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no long name cut short by the help's table
    for command in ("serve", "run", "pool"):
        with pytest.raises(SystemExit):
            main([command, "--help"] if command != "pool" else ["pool", "show", "--help"])
        text = " ".join(capsys.readouterr().out.replace("│", " ").split())
        for source in ("$CLORE_RUN_COORDINATOR", "$PGPASSWORD", "~/.pgpass", "service"):
            assert source in text, (command, source)


def test_the_coordinator_from_a_file_is_a_secret_from_then_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLORE_RUN_COORDINATOR", raising=False)
    (tmp_path / "url").write_text(URL + "\n")
    monkeypatch.setenv("CLORE_RUN_COORDINATOR_FILE", str(tmp_path / "url"))
    assert coordinator_from(None) == URL
    assert redact.text(f"a {URL} b {PASSWORD} c Pw-9f3a8c%2Fe1") == "a *** b *** c ***"
    monkeypatch.setenv("CLORE_RUN_COORDINATOR_FILE", str(tmp_path / "missing"))
    with pytest.raises(Exception, match="cannot read it"):
        coordinator_from(None)


def test_pgpassword_is_passed_where_libpq_would_have_used_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """process_guard takes PGPASSWORD out of the C environment libpq reads: we pass it."""
    monkeypatch.setenv("PGPASSWORD", PG_PASSWORD)
    assert libpq_password("postgresql://u@h/db") == {"password": PG_PASSWORD}
    assert libpq_password(URL) == {}  # the URL's own wins, as in libpq
    assert libpq_password("postgresql://?service=coord") == {}  # so does a service file's
    assert libpq_password("postgresql://u@h/db?password=x") == {}
    monkeypatch.delenv("PGPASSWORD")
    assert libpq_password("postgresql://u@h/db") == {}


def test_a_service_url_is_accepted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLORE_RUN_COORDINATOR", "postgresql://?service=coord")
    assert coordinator_from(None) == "postgresql://?service=coord"
